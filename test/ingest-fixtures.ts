// Shared by the write-API tests: the application's secret (APP_SECRET), one entry, and
// another process holding the database's write lock (or, for the job tests, what a run's end writes).
import { SQL } from "bun";
import { expect } from "bun:test";
import { LOCK_JOB_LEASE, LOCK_NAMESPACE } from "../src/pg/store.ts";
export const APP_SECRET = "app-secret-0123456789abcdef0123456789abcdef";

export const auditEntry = (tenantId: number, i: number, extra: Record<string, unknown> = {}) => ({
  tenantId,
  actor: `user${i}@example.nl`,
  action: "dossier.bekeken",
  subject: `dossier/${i}`,
  details: { i, nested: { b: 2, a: 1 } },
  ...extra,
});

/** Another process that holds the database's write lock until told to let go. */
/** One valid request per write-API endpoint, for a database with tenant 1. */
export const INGEST = [
  { path: "/api/audit", method: "POST", body: { entries: [auditEntry(1, 0)] } },
  { path: "/api/inlogpogingen", method: "POST", body: { pogingen: [{ account: "a@example.nl", ip: "192.0.2.1", gelukt: false }] } },
  { path: "/api/tenants/1", method: "PUT", body: { naam: "Eén", actief: true } },
  { path: "/api/tenants/1/beheerders", method: "PUT", body: { beheerders: [{ naam: "Ans", email: "ans@example.nl", actief: true }] } },
] as const;

export async function holdWriteLock(path: string) {
  const child = Bun.spawn(
    [
      process.execPath,
      "-e",
      `const { Database } = require("bun:sqlite");
       const db = new Database(${JSON.stringify(path)});
       db.run("BEGIN IMMEDIATE");
       console.log("locked");
       for await (const line of console) { db.run("COMMIT"); db.close(); process.exit(0); }`,
    ],
    { stdin: "pipe", stdout: "pipe", stderr: "inherit" },
  );
  const reader = child.stdout.getReader();
  let out = "";
  while (!out.includes("locked")) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`the lock holder exited: ${out}`);
    out += new TextDecoder().decode(value);
  }
  return {
    async release() {
      child.stdin.write("go\n");
      await child.stdin.end();
      expect(await child.exited).toBe(0);
    },
  };
}

/**
 * What a job run's end must write, held by another process until release(): SQLite's
 * write lock on the file at `path` (holdWriteLock); on PostgreSQL (`url`), which locks
 * only rows, the job's running run's job_runs row, held FOR UPDATE by another
 * connection's open transaction.
 */
export async function holdRunEnd(db: { path: string; url?: string | null }, job: string): Promise<{ release(): Promise<void> }> {
  if (db.url === undefined || db.url === null) return holdWriteLock(db.path);
  const client = new SQL(db.url, { max: 1 });
  const conn = await client.reserve();
  await conn`BEGIN`;
  const locked = await conn`SELECT id FROM job_runs WHERE job = ${job} AND uitkomst = 'bezig' FOR UPDATE`;
  expect(locked.length).toBe(1);
  return {
    async release() {
      await conn`ROLLBACK`;
      conn.release();
      await client.close();
    },
  };
}

/**
 * What taking a job's lease needs, held by another process until release(): SQLite's
 * write lock (holdWriteLock); on PostgreSQL the lease's advisory lock (startLeasedRunPg),
 * held by another connection's open transaction, as a hung instance would hold it.
 */
export async function holdLeaseLock(db: { path: string; url?: string | null }): Promise<{ release(): Promise<void> }> {
  if (db.url === undefined || db.url === null) return holdWriteLock(db.path);
  const client = new SQL(db.url, { max: 1 });
  const conn = await client.reserve();
  await conn`BEGIN`;
  await conn`SELECT pg_advisory_xact_lock(${LOCK_NAMESPACE}, ${LOCK_JOB_LEASE})`;
  return {
    async release() {
      await conn`ROLLBACK`;
      conn.release();
      await client.close();
    },
  };
}
