// Two instances on one PostgreSQL (docs/postgresql.md): two real service processes
// (`bun src/index.ts` with DATABASE_URL), as two hosts with the same crontab would run
// them, sharing the database and the anchor file. Both serve the write API, and
// appends through both to one tenant never fork its chain; a job called on both never
// runs in both at once (the lease); and when one instance is killed (SIGKILL) in the
// middle of audit-retentie, the other takes the job over at once (the holder's pid is
// gone from this host), completes it, and nothing that was accepted is lost: every
// chain verifies against the anchor file. And a third, stopped with SIGTERM while a job
// runs, finishes it, records it and exits cleanly.
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { join } from "node:path";
import { SQL } from "bun";
import { parseVerifierKey } from "../src/audit/note.ts";
import { openStore } from "../src/db.ts";
import { verifyInstallationPg } from "../src/pg/offline.ts";
import { migrateToPostgres } from "../src/pg/migrate-to.ts";
import { bulkChain, startService, tempDir, type ServiceProcess } from "./fixtures/hardening.ts";
import { SECRET, TEST_SIGNING_KEY, TEST_VERIFIER_KEY } from "./helpers.ts";
import { startCluster, type TestCluster } from "./pg.ts";

setDefaultTimeout(180_000);

const DAY = 24 * 3600 * 1000;
/** The services use the wall clock; the data lies far from every boundary. */
const now = Date.now();
const TENANTS = 4;
/** Enough old entries that audit-retentie takes many batches: the kill lands between two. */
const OLD_PER_TENANT = 30_000;
const NEW_PER_TENANT = 100;
const APP_SECRET = "app-secret-0123456789abcdef0123456789abcdef";
const verifiers = [parseVerifierKey(TEST_VERIFIER_KEY)];

let cluster: TestCluster;
let url: string;
let sql: SQL;
let env: Record<string, string>;
let anchorPath: string;
const services: ServiceProcess[] = [];
const cleanups: (() => void)[] = [];

beforeAll(async () => {
  cluster = await startCluster();
  const { dir, cleanup } = tempDir();
  cleanups.push(cleanup);
  anchorPath = join(dir, "ankers.jsonl");
  // The installation as it was on SQLite, moved over with migrate-to.
  const source = openStore(join(dir, "bron.db"), new Date(now - 730 * DAY));
  for (let t = 1; t <= TENANTS; t++) {
    source.sqlite.query("INSERT INTO tenants (id, naam, actief, aangemaakt) VALUES (?, ?, 1, ?)").run(t, `Tenant ${t}`, new Date(now - 4000 * DAY).toISOString());
    bulkChain(source.sqlite, t, OLD_PER_TENANT, now - 3400 * DAY, now - 2700 * DAY);
    bulkChain(source.sqlite, t, NEW_PER_TENANT, now - 20 * DAY, now - DAY);
  }
  source.close();
  url = await cluster.createDatabase();
  const moved = await migrateToPostgres({ dbPath: join(dir, "bron.db"), anchorPath, url, verifiers, log: () => {} });
  expect(moved.uitkomst).toBe("klaar");
  sql = new SQL(url, { max: 2 });
  env = {
    CRON_SECRET: SECRET,
    APP_SECRET,
    AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY,
    AUDIT_ANKER_BESTAND: anchorPath,
    DATABASE_URL: url,
    // Where the outbox would go; nothing is written to a SQLite file.
    DATABASE_PATH: join(dir, "data", "nachtwacht.db"),
  };
  services.push(await startService(env), await startService(env));
});

afterAll(async () => {
  for (const s of services) if (s.proc.exitCode === null) s.proc.kill("SIGKILL");
  await Promise.all(services.map((s) => s.exited));
  await sql?.close();
  await cluster?.stop();
  for (const c of cleanups) c();
});

/** A job call; `scheduled`: as the crontab makes it (ops/nachtwacht-call.sh with NACHTWACHT_GEPLAND=1). */
const cron = (s: ServiceProcess, job: string, scheduled = false) =>
  fetch(`${s.url}/api/cron/${job}`, { method: "POST", headers: { authorization: `Bearer ${SECRET}`, ...(scheduled ? { "x-nachtwacht-gepland": "1" } : {}) } });
const write = (s: ServiceProcess, path: string, body: unknown, method = "POST") =>
  fetch(`${s.url}${path}`, { method, headers: { authorization: `Bearer ${APP_SECRET}`, "content-type": "application/json" }, body: JSON.stringify(body) });

async function verdict() {
  const v = await verifyInstallationPg(url, anchorPath, verifiers, { workers: 2 });
  return { probleem: v.probleem ?? null, broken: v.tenants.filter((t) => !t.intact) };
}

describe("two instances on one PostgreSQL", () => {
  test("both serve the write API: batches to one tenant through both at once never fork its chain, and a batch retried on the other instance is stored once", async () => {
    const [a, b] = services as [ServiceProcess, ServiceProcess];
    expect((await write(a, "/api/tenants/50", { naam: "Gedeeld", actief: true }, "PUT")).status).toBe(201);
    const batch = (k: number) => ({
      entries: Array.from({ length: 25 }, (_, i) => ({ tenantId: 50, actor: `app${k}`, action: "dossier.bekeken", subject: `d/${k}/${i}`, sleutel: `b${k}-${i}` })),
    });
    // 24 batches, alternating instances, all in flight together.
    const answers = await Promise.all(Array.from({ length: 24 }, (_, k) => write(k % 2 === 0 ? a : b, "/api/audit", batch(k))));
    expect(answers.map((r) => r.status)).toEqual(Array(24).fill(200));
    const receipts = await Promise.all(answers.map((r) => r.json() as Promise<{ ontvangstbewijzen: { seq: number; hash: string }[] }>));
    // The same batches again, each on the other instance (a client's retry after a timeout): the same receipts.
    const retried = await Promise.all(Array.from({ length: 24 }, (_, k) => write(k % 2 === 0 ? b : a, "/api/audit", batch(k))));
    const again = await Promise.all(retried.map((r) => r.json() as Promise<{ opgeslagen: number; ontvangstbewijzen: unknown[] }>));
    expect(again.map((r) => r.opgeslagen)).toEqual(Array(24).fill(0));
    expect(again.map((r) => r.ontvangstbewijzen)).toEqual(receipts.map((r) => r.ontvangstbewijzen));
    const [{ n, max }] = await sql`SELECT count(*)::int AS n, max(seq)::int AS max FROM audit_entries WHERE tenant_id = 50`;
    expect({ n, max }).toEqual({ n: 600, max: 600 });
    const seqs = receipts.flatMap((r) => r.ontvangstbewijzen.map((x) => x.seq)).sort((x, y) => x - y);
    expect(seqs).toEqual(Array.from({ length: 600 }, (_, i) => i + 1));
    expect(await verdict()).toEqual({ probleem: null, broken: [] });
  });

  test("a scheduled job called by both instances' crontabs at the same time runs once: the other call is not run (204, the reason in X-Nachtwacht-Overgeslagen), whether it came while the first ran or after", async () => {
    const [a, b] = services as [ServiceProcess, ServiceProcess];
    const before = (await sql`SELECT count(*)::int AS n FROM job_runs WHERE job = 'audit-verificatie'`)[0].n as number;
    const answers = await Promise.all([cron(a, "audit-verificatie", true), cron(b, "audit-verificatie", true)]);
    expect(answers.map((r) => r.status).sort()).toEqual([200, 204]);
    const skipped = answers.find((r) => r.status === 204)!;
    expect(skipped.headers.get("x-nachtwacht-overgeslagen")).toMatch(/loopt al in een ander proces|al uitgevoerd/);
    const runs = await sql`SELECT uitkomst FROM job_runs WHERE job = 'audit-verificatie' ORDER BY id`;
    expect(runs.length - before).toBe(1);
    expect(runs.at(-1).uitkomst).toBe("ok");
    // By hand (no scheduled header) it runs again.
    expect((await cron(b, "audit-verificatie")).status).toBe(200);
  });

  test("SIGKILL of one instance in the middle of audit-retentie: the other serves on, takes the job over at once and completes it; every chain verifies", async () => {
    const [a, b] = services as [ServiceProcess, ServiceProcess];
    const old = async () => (await sql`SELECT count(*)::int AS n FROM audit_entries WHERE created_at < ${new Date(now - 2600 * DAY).toISOString()}`)[0].n as number;
    const before = await old();
    expect(before).toBe(TENANTS * OLD_PER_TENANT);
    const call = cron(a, "audit-retentie").catch(() => null);
    // Killed once the deleting has begun: some old entries gone, not all.
    let seen = before;
    while (seen === before) seen = await old();
    a.proc.kill("SIGKILL");
    await a.exited;
    expect(await call).toBeNull();
    const left = await old();
    expect(left).toBeGreaterThan(0);
    const [interrupted] = await sql`SELECT id, uitkomst, beeindigd FROM job_runs WHERE job = 'audit-retentie' ORDER BY id DESC LIMIT 1`;
    expect(interrupted.uitkomst).toBe("bezig");
    expect(interrupted.beeindigd).toBeNull();

    // The other instance still takes writes.
    expect((await write(b, "/api/audit", { entries: [{ tenantId: 1, actor: "app", action: "na.de.kill", subject: "x", sleutel: "na-kill" }] })).status).toBe(200);
    // And runs the job: the killed holder's pid is gone from this host, so its lease is taken over now, not at its expiry.
    const done = await cron(b, "audit-retentie");
    expect(done.status).toBe(200);
    expect(((await done.json()) as { verwijderd: number }).verwijderd).toBe(left);
    expect(await old()).toBe(0);
    const [{ n }] = await sql`SELECT count(*)::int AS n FROM audit_entries WHERE action = 'na.de.kill'`;
    expect(n).toBe(1);
    expect(await verdict()).toEqual({ probleem: null, broken: [] });
  });

  test("SIGTERM while a job runs on PostgreSQL: the service lets the job finish, answers it, records its end, closes its connections and exits 0", async () => {
    const c = await startService(env);
    services.push(c);
    const before = (await sql`SELECT max(id)::int AS m FROM job_runs`)[0].m as number;
    const answer = cron(c, "audit-verificatie");
    // The run has started (its row is there) when the signal comes.
    let started = false;
    while (!started) started = ((await sql`SELECT count(*)::int AS n FROM job_runs WHERE id > ${before} AND job = 'audit-verificatie'`)[0].n as number) > 0;
    c.proc.kill("SIGTERM");
    expect((await answer).status).toBe(200);
    expect(await c.exited).toBe(0);
    const [run] = await sql`SELECT uitkomst, http_status FROM job_runs WHERE id > ${before} AND job = 'audit-verificatie'`;
    expect(run).toEqual({ uitkomst: "ok", http_status: 200 });
    // Nothing of it is left holding the job.
    expect((await sql`SELECT count(*)::int AS n FROM job_leases WHERE job = 'audit-verificatie'`)[0].n).toBe(0);
    expect(c.output()).toContain('"message":"stopped"');
  });
});
