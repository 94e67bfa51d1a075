// A write that meets a lock another process holds — SQLite's write lock (a long host
// transaction, a backup), on PostgreSQL a lock of another session (a hung appender of the
// host application holding a tenant's chain lock, an operator's VACUUM FULL on a table) —
// waits at most the busy timeout (BUSY_TIMEOUT_MS; PostgreSQL's lock_timeout is the same)
// and then answers 503 with Retry-After, storing nothing; the service answers other
// requests meanwhile, and once the lock is free the same request is stored once. Without
// the timeout a PostgreSQL request would wait for as long as the other session pleased.
import { Database } from "bun:sqlite";
import { SQL } from "bun";
import { afterEach, describe, expect, test } from "bun:test";
import { CHAIN_LOCK } from "../src/pg/chain.ts";
import { call } from "./helpers.ts";
import { addTenant, makeEnv, type Env } from "./dialect.ts";
import { APP_SECRET } from "./ingest-fixtures.ts";

let env: Env;
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  await env?.cleanup();
});

/** Another process's connection to the installation's database (closed after the test). */
async function otherConnection(e: Env): Promise<{ run(q: string): Promise<void> }> {
  if (e.store.kind === "sqlite") {
    const db = new Database(e.config.databasePath);
    cleanups.push(() => db.close());
    return { run: async (q) => void db.run(q) };
  }
  const sql = new SQL(e.store.url, { max: 1 });
  cleanups.push(() => sql.close());
  return { run: async (q) => void (await sql.unsafe(q)) };
}

const batch = (tenantId: number) =>
  JSON.stringify({ entries: [{ tenantId, actor: "anna@example.nl", action: "dossier.bekeken", subject: "dossier/1", details: { i: 1 }, sleutel: "slot-1" }] });

describe("a write that meets another process's lock", () => {
  test("the write API waits the busy timeout, answers 503 with Retry-After and stores nothing; /health answers meanwhile; after the lock the same batch is stored once", async () => {
    env = await makeEnv({ APP_SECRET });
    const t = await addTenant(env.db, "Slot");
    const other = await otherConnection(env);
    // SQLite: the database-wide write lock. PostgreSQL: the tenant's chain lock, as a hung appender of the host application would hold it.
    await other.run(env.dialect === "sqlite" ? "BEGIN IMMEDIATE" : `SELECT pg_advisory_lock(${CHAIN_LOCK}, ${t})`);

    let answered = false;
    const post = call(env.app, "/api/audit", { token: APP_SECRET, body: batch(t) }).finally(() => (answered = true));
    const health = await call(env.app, "/health", { method: "GET", token: null });
    expect(health.status).toBe(200);
    expect(answered).toBe(false);

    const refused = await post;
    expect(refused.status).toBe(503);
    expect(refused.headers.get("retry-after")).toBe("5");
    expect(refused.json.error).toContain("De database is bezet");
    expect(refused.json.error).toContain("niets is opgeslagen");
    // A lock wait is expected now and then: logged, not an alarm per request.
    expect(env.alarms.raised).toEqual([]);
    expect((await env.db.get("SELECT count(*) AS n FROM audit_entries"))!.n).toBe(0);

    await other.run(env.dialect === "sqlite" ? "ROLLBACK" : `SELECT pg_advisory_unlock(${CHAIN_LOCK}, ${t})`);
    const stored = await call(env.app, "/api/audit", { token: APP_SECRET, body: batch(t) });
    expect(stored.status).toBe(200);
    const again = await call(env.app, "/api/audit", { token: APP_SECRET, body: batch(t) });
    expect(again.status).toBe(200);
    expect(stored.json).toMatchObject({ opgeslagen: 1, alBekend: 0 });
    expect(again.json).toMatchObject({ opgeslagen: 0, alBekend: 1 });
    expect(again.json.ontvangstbewijzen).toEqual(stored.json.ontvangstbewijzen);
    expect((await env.db.get("SELECT count(*) AS n FROM audit_entries WHERE tenant_id = ?", t))!.n).toBe(1);
  }, 30_000);

  test("a job whose table another process holds answers 503 with Retry-After within the wait, and runs once the lock is free", async () => {
    env = await makeEnv();
    const other = await otherConnection(env);
    // SQLite: the write lock. PostgreSQL: the table itself, as VACUUM FULL or a migration of the host holds it.
    if (env.dialect === "sqlite") await other.run("BEGIN IMMEDIATE");
    else {
      await other.run("BEGIN");
      await other.run("LOCK TABLE backup_statuses IN ACCESS EXCLUSIVE MODE");
    }
    const body = JSON.stringify({ exitCode: 0, bestandsnaam: "nachtwacht-2026-07-23.db.gz", grootte: 1024 });
    const refused = await call(env.app, "/api/cron/backup-status", { body, headers: { "content-type": "application/json" } });
    expect(refused.status).toBe(503);
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThan(0);
    expect(typeof refused.json.error).toBe("string");

    await other.run(env.dialect === "sqlite" ? "ROLLBACK" : "COMMIT");
    const ok = await call(env.app, "/api/cron/backup-status", { body, headers: { "content-type": "application/json" } });
    expect(ok.status).toBe(200);
    expect((await env.db.all("SELECT exit_code FROM backup_statuses"))).toEqual([{ exit_code: 0 }]);
  }, 30_000);
});
