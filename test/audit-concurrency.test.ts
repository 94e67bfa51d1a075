// No false alarm: the host application appending from other processes while
// audit-retentie, audit-anker and audit-verificatie run at once in the service (a real
// process), and then a restart of the service: every verification answers 200, every
// anchoring run signs, and the anchor file and its database copy stay equal. On
// PostgreSQL the same installation is moved there first (migrate-to) and the service
// and the appenders work on it.
import { Database } from "bun:sqlite";
import { afterEach, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parseVerifierKey } from "../src/audit/note.ts";
import { migrateToPostgres } from "../src/pg/migrate-to.ts";
import { openPgStore } from "../src/pg/store.ts";
import { BUN, bulkChain, ROOT, startService, testDatabase, type ServiceProcess } from "./fixtures/hardening.ts";
import { SECRET, TEST_VERIFIER_KEY, until } from "./helpers.ts";
import { DIALECT, testCluster, testDb } from "./dialect.ts";

const DAY = 24 * 3600 * 1000;
const now = Date.now();
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const f of cleanups.splice(0).reverse()) await f();
});

async function service(env: Record<string, string>): Promise<ServiceProcess> {
  const svc = await startService(env);
  cleanups.push(async () => {
    svc.proc.kill("SIGTERM");
    await svc.exited;
  });
  return svc;
}

const post = async (svc: ServiceProcess, job: string) => {
  const r = await fetch(`${svc.url}/api/cron/${job}`, { method: "POST", headers: { authorization: `Bearer ${SECRET}` } });
  return { job, status: r.status, body: (await r.json()) as Record<string, unknown> };
};

/** Where the installation's data lives: the SQLite file, or (the PostgreSQL run) its copy in a database of the run's cluster. */
type Data = { kind: "sqlite"; path: string } | { kind: "pg"; url: string };

/** Plain SQL reads of the data while the service works: a read-only connection to the file, or a client of the database. */
async function reader(data: Data): Promise<{ all<T = any>(q: string, ...p: unknown[]): Promise<T[]>; close(): Promise<void> }> {
  if (data.kind === "sqlite") {
    const s = new Database(data.path, { readonly: true });
    return { all: async (q, ...p) => s.query(q).all(...(p as any[])) as any[], close: async () => s.close() };
  }
  const store = await openPgStore(data.url, { max: 1 });
  const db = testDb(store);
  return { all: db.all, close: () => store.close() };
}

/**
 * test/fixtures/append-timed.ts on PostgreSQL, as its own process (`bun -e`): one
 * transaction per entry, which waits for the tenant's chain lock; a lock wait given up
 * after 5 s (55P03, lock_timeout as SQLite's busy_timeout) is counted as `busy`.
 */
const PG_APPEND_TIMED = `
import { SQL } from "bun";
import { canonicalJson } from ${JSON.stringify(`${ROOT}/src/audit/chain.ts`)};
import { appendEntriesPg } from ${JSON.stringify(`${ROOT}/src/pg/chain.ts`)};
const { URL: url, TENANT, COUNT, ACTOR: actor } = process.env;
const sql = new SQL(url, { max: 1 });
const times = [];
let busy = 0;
const from = new Date().toISOString();
for (let i = 0; i < Number(COUNT); i++) {
  const t0 = performance.now();
  const input = { tenantId: Number(TENANT), createdAt: new Date().toISOString(), actor, action: "race.append", subject: actor + "/" + i, details: canonicalJson({ i }) };
  try {
    await sql.begin(async (tx) => {
      await tx\`SET LOCAL lock_timeout = '5s'\`;
      await appendEntriesPg(tx, [input]);
    });
  } catch (e) {
    if (e?.errno === "55P03") busy++;
    else throw e;
  }
  times.push(performance.now() - t0);
  if (i % 20 === 0) await Bun.sleep(1);
}
const to = new Date().toISOString();
await sql.close();
times.sort((a, b) => a - b);
const p99 = times[Math.floor(times.length * 0.99)] ?? 0;
process.stdout.write(JSON.stringify({ appended: times.length - busy, maxMs: Math.round(times.at(-1) ?? 0), p99Ms: Math.round(p99), busy, from, to }) + "\\n");
`;

function appender(data: Data, tenant: number, count: number, actor: string) {
  return data.kind === "sqlite"
    ? Bun.spawn([BUN, join(ROOT, "test/fixtures/append-timed.ts"), data.path, String(tenant), String(count), actor], { stdout: "pipe", stderr: "inherit" })
    : Bun.spawn([BUN, "-e", PG_APPEND_TIMED], { cwd: ROOT, env: { ...process.env, URL: data.url, TENANT: String(tenant), COUNT: String(count), ACTOR: actor }, stdout: "pipe", stderr: "inherit" });
}

/** Resolves once every actor has appended at least one entry: the appenders are at work. */
async function appending(data: Data, actors: string[]): Promise<void> {
  const probe = await reader(data);
  try {
    await until("the appenders to start", async () => {
      for (const a of actors) if ((await probe.all("SELECT 1 AS x FROM audit_entries WHERE actor = ? LIMIT 1", a)).length === 0) return false;
      return true;
    });
  } finally {
    await probe.close();
  }
}

describe("the audit jobs at once, with appenders, and a restart", () => {
  test("audit-retentie, audit-anker and audit-verificatie together while three processes append: no 409, before or after a restart", async () => {
    const db = testDatabase(cleanups, new Date(now - 730 * DAY), (s) => {
      for (let t = 1; t <= 4; t++) {
        s.query("INSERT INTO tenants (id, naam, actief, aangemaakt) VALUES (?, ?, 1, ?)").run(t, `T${t}`, new Date(now - 4000 * DAY).toISOString());
        bulkChain(s, t, 3000, now - 3400 * DAY, now - 2700 * DAY); // past retention
        bulkChain(s, t, 500, now - 30 * DAY, now - DAY);
      }
    });
    let data: Data = { kind: "sqlite", path: db.path };
    let serviceEnv: Record<string, string> = db.env;
    if (DIALECT === "pg") {
      const url = await (await testCluster()).createDatabase();
      const moved = await migrateToPostgres({ dbPath: db.path, anchorPath: db.env.AUDIT_ANKER_BESTAND, url, verifiers: [parseVerifierKey(TEST_VERIFIER_KEY)], log: () => {} });
      expect(moved.uitkomst).toBe("klaar");
      data = { kind: "pg", url };
      serviceEnv = { ...db.env, DATABASE_URL: url };
    }
    let svc = await service(serviceEnv);
    // Yesterday's anchoring: every chain has a checkpoint the jobs below must respect.
    expect((await post(svc, "audit-anker")).status).toBe(200);

    const appenders = [1, 2, 3].map((t) => appender(data, t, 1200, `app${t}`));
    await appending(data, ["app1", "app2", "app3"]);
    const first = await Promise.all([post(svc, "audit-retentie"), post(svc, "audit-anker"), post(svc, "audit-verificatie")]);
    for (const r of first) expect({ job: r.job, status: r.status }).toEqual({ job: r.job, status: 200 });
    expect(first[0]!.body.verwijderd).toBe(4 * 3000);
    // A second round while the appenders may still be at work.
    const second = await Promise.all([post(svc, "audit-anker"), post(svc, "audit-verificatie")]);
    for (const r of second) expect({ job: r.job, status: r.status }).toEqual({ job: r.job, status: 200 });

    const reports = await Promise.all(
      appenders.map(async (p) => {
        expect(await p.exited).toBe(0);
        return JSON.parse(await new Response(p.stdout as ReadableStream).text()) as { appended: number; busy: number; from: string; to: string };
      }),
    );
    for (const r of reports) expect({ appended: r.appended, busy: r.busy }).toEqual({ appended: 1200, busy: 0 });
    // The appenders were at work while the first round ran.
    const history = await reader(data);
    const runs = await history.all<{ job: string; gestart: string; beeindigd: string }>("SELECT job, gestart, beeindigd FROM job_runs ORDER BY id");
    await history.close();
    const firstRound = runs.slice(1, 4);
    expect(firstRound.map((r) => r.job).sort()).toEqual(["audit-anker", "audit-retentie", "audit-verificatie"]);
    for (const run of firstRound) expect(reports.some((r) => r.from < run.beeindigd && run.gestart < r.to)).toBe(true);

    // Settled: anchor everything, verify.
    expect((await post(svc, "audit-anker")).status).toBe(200);
    const settled = await post(svc, "audit-verificatie");
    expect(settled.status).toBe(200);
    expect(settled.body.aantalGebroken).toBe(0);

    // A restart changes nothing.
    svc.proc.kill("SIGTERM");
    expect(await svc.exited).toBe(0);
    svc = await service(serviceEnv);
    const afterRestart = await post(svc, "audit-verificatie");
    expect(afterRestart.status).toBe(200);
    expect(afterRestart.body.ankerbestand).toMatchObject({ intact: true });
    expect((await post(svc, "audit-anker")).status).toBe(200);
    expect((await post(svc, "audit-verificatie")).status).toBe(200);

    // The anchor file and its copy in the database hold the same lines.
    const lines = readFileSync(db.env.AUDIT_ANKER_BESTAND, "utf8").trimEnd().split("\n");
    const s = await reader(data);
    const [rows] = await s.all<{ n: number }>("SELECT count(*) AS n FROM audit_anchor_log");
    const [retention] = await s.all<{ n: number }>("SELECT count(*) AS n FROM audit_anchor_log WHERE soort = 'retentie'");
    await s.close();
    expect(rows!.n).toBe(lines.length);
    expect(retention!.n).toBeGreaterThan(0);
  }, 120_000);
});
