// No false alarm: the host application appending from other processes while
// audit-retentie, audit-anker and audit-verificatie run at once in the service (a real
// process), and then a restart of the service: every verification answers 200, every
// anchoring run signs, and the anchor file and its database copy stay equal. On
// PostgreSQL the same installation is moved there first (migrate-to) and the service
// and the appenders work on it.
import { afterEach, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { parseVerifierKey } from "../src/audit/note.ts";
import { migrateToPostgres } from "../src/pg/migrate-to.ts";
import { bulkChain, startService, testDatabase, timedAppender, type ServiceProcess } from "./fixtures/hardening.ts";
import { SECRET, TEST_VERIFIER_KEY, until } from "./helpers.ts";
import { DIALECT, openServiceDb, testCluster } from "./dialect.ts";

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

/** Where the installation's data lives: the SQLite file, or (the PostgreSQL run, `url`) its copy in a database of the run's cluster. */
type Data = { path: string; url: string | null };

/** Plain SQL reads of the data while the service works: a read-only connection to the file, or a client of the database. */
async function reader(data: Data) {
  const d = await openServiceDb({ ...data, readonly: true });
  return { ...d.db, close: d.close };
}

/** fixtures/hardening.ts timedAppender on the data; on PostgreSQL a lock wait is given up after 5 s (lock_timeout, as SQLite's busy_timeout) and counted busy. */
const appender = (data: Data, tenant: number, count: number, actor: string) => timedAppender(data, tenant, count, actor, { lockTimeout: "5s" });

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
    let data: Data = { path: db.path, url: null };
    let serviceEnv: Record<string, string> = db.env;
    if (DIALECT === "pg") {
      const url = await (await testCluster()).createDatabase();
      const moved = await migrateToPostgres({ dbPath: db.path, anchorPath: db.env.AUDIT_ANKER_BESTAND, url, verifiers: [parseVerifierKey(TEST_VERIFIER_KEY)], log: () => {} });
      expect(moved.uitkomst).toBe("klaar");
      data = { path: db.path, url };
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
