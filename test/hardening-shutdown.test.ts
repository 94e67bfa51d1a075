// Shutdown (issue 8, part 6). SIGTERM (what systemd sends on stop and restart): the
// service stops taking connections, lets the running job finish, records it, folds
// the WAL into the database and closes it, and exits 0. A job that does not finish
// within the bound (25 s; shorter in the fixture) is answered 503, recorded as 'fout'
// with a message, and the process exits 1 with the database closed cleanly.
import { Database } from "bun:sqlite";
import { afterEach, describe, expect, test } from "bun:test";
import { existsSync, statSync } from "node:fs";
import { join } from "node:path";
import { createApp } from "../src/app.ts";
import { RunningJobs } from "../src/running-jobs.ts";
import { SHUTDOWN_GRACE_MS } from "../src/server.ts";
import { bulkChain, testDatabase, waitForRow, waitForRun, ROOT, startService, verifyAll, type ServiceProcess } from "./fixtures/hardening.ts";
import { call, makeTestEnv, SECRET } from "./helpers.ts";

const DAY = 24 * 3600 * 1000;
const now = Date.now();
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const f of cleanups.splice(0).reverse()) await f();
});

const database = (fill: (s: Database) => void) => testDatabase(cleanups, new Date(now - 730 * DAY), fill);

/** The database after the process is gone: sound, and no WAL content left behind. */
function closedCleanly(path: string) {
  const wal = `${path}-wal`;
  expect(existsSync(wal) ? statSync(wal).size : 0).toBe(0);
  const s = new Database(path, { readonly: true });
  try {
    expect((s.query("PRAGMA integrity_check").get() as { integrity_check: string }).integrity_check).toBe("ok");
  } finally {
    s.close();
  }
}

function runs(path: string, job: string) {
  const s = new Database(path, { readonly: true });
  try {
    return s.query("SELECT uitkomst, http_status AS httpStatus, beeindigd IS NOT NULL AS beeindigd, fout FROM job_runs WHERE job = ?").all(job) as {
      uitkomst: string;
      httpStatus: number;
      beeindigd: number;
      fout: string | null;
    }[];
  } finally {
    s.close();
  }
}

describe("SIGTERM", () => {
  test("during audit-retentie: the job finishes and answers 200, the run is recorded ok, new connections are refused, the WAL is folded in, exit 0", async () => {
    const db = database((s) => {
      for (let t = 1; t <= 6; t++) {
        s.query("INSERT INTO tenants (id, naam, actief, aangemaakt) VALUES (?, ?, 1, ?)").run(t, `T${t}`, new Date(now - 4000 * DAY).toISOString());
        bulkChain(s, t, 8000, now - 3400 * DAY, now - 2700 * DAY);
        bulkChain(s, t, 100, now - 30 * DAY, now - DAY);
      }
    });
    const svc: ServiceProcess = await startService(db.env);
    const t0 = performance.now();
    const answer = fetch(`${svc.url}/api/cron/audit-retentie`, { method: "POST", headers: { authorization: `Bearer ${SECRET}` } });
    await waitForRun(db.path, "audit-retentie");
    svc.proc.kill("SIGTERM");
    const r = await answer;
    expect(r.status).toBe(200);
    expect(((await r.json()) as { verwijderd: number }).verwijderd).toBe(6 * 8000);
    // Stopping: nothing new gets in.
    expect(await fetch(`${svc.url}/health`).then((x) => x.status, () => "refused")).toBe("refused");
    expect(await svc.exited).toBe(0);
    console.log(`SIGTERM during audit-retentie: stopped ${Math.round(performance.now() - t0)} ms after the call`);

    expect(runs(db.path, "audit-retentie")).toEqual([{ uitkomst: "ok", httpStatus: 200, beeindigd: 1, fout: null }]);
    closedCleanly(db.path);
    const s = new Database(db.path, { readonly: true });
    for (const c of verifyAll(s, db.env.AUDIT_ANKER_BESTAND)) expect(c).toMatchObject({ intact: true, ankerSeq: 8000, retentieSeq: 8000, eersteSeq: 8001, aantalEntries: 100 });
    s.close();
    const log = svc.output();
    expect(log).toContain('"message":"shutting down","signal":"SIGTERM","running":["audit-retentie"]');
    expect(log).toContain('"message":"stopped","signal":"SIGTERM","exitCode":0');
  }, 60_000);

  test("with no job running: exit 0 at once, database closed cleanly", async () => {
    const db = database(() => {});
    const svc = await startService(db.env);
    expect((await fetch(`${svc.url}/api/cron/backup-controle`, { method: "POST", headers: { authorization: `Bearer ${SECRET}` } })).status).toBe(409);
    const t0 = performance.now();
    svc.proc.kill("SIGTERM");
    expect(await svc.exited).toBe(0);
    expect(performance.now() - t0).toBeLessThan(3000);
    closedCleanly(db.path);
  }, 30_000);

  test("a job that outlasts the bound: its caller gets 503 {error}, the run is recorded as fout with the reason, its committed steps stay, exit 1, database sound", async () => {
    expect(SHUTDOWN_GRACE_MS).toBe(25_000); // production bound; the fixture uses 1.5 s
    const db = database(() => {});
    const svc = await startService({ ...db.env, SHUTDOWN_GRACE_MS: "1500" }, join(ROOT, "test/fixtures/server-slow-job.ts"));
    const answer = fetch(`${svc.url}/api/cron/db-onderhoud`, { method: "POST", headers: { authorization: `Bearer ${SECRET}` } });
    await waitForRun(db.path, "db-onderhoud");
    // A few of its steps committed before the signal.
    await waitForRow(db.path, "SELECT 1 FROM service_meta WHERE key = 'stap-3'");
    const t0 = performance.now();
    svc.proc.kill("SIGTERM");
    const r = await answer;
    expect(r.status).toBe(503);
    const body = (await r.json()) as { error: string };
    expect(Object.keys(body)).toEqual(["error"]);
    expect(body.error).toContain("Onderbroken");
    expect(await svc.exited).toBe(1);
    // Upper bound only: a hang is the failure (the fixture's bound is 1.5 s).
    expect(performance.now() - t0).toBeLessThan(4500);

    const [run] = runs(db.path, "db-onderhoud");
    expect(run).toMatchObject({ uitkomst: "fout", httpStatus: 503, beeindigd: 1 });
    expect(run!.fout).toContain("SIGTERM");
    closedCleanly(db.path);
    const s = new Database(db.path, { readonly: true });
    const steps = (s.query("SELECT count(*) AS n FROM service_meta WHERE key LIKE 'stap-%'").get() as { n: number }).n;
    s.close();
    expect(steps).toBeGreaterThanOrEqual(3); // committed before the signal, and kept
    expect(svc.output()).toContain('"message":"stopped","signal":"SIGTERM","exitCode":1');
  }, 30_000);

  test("a call that reaches a stopping service is refused with 503 {error} and starts nothing", async () => {
    const env = makeTestEnv();
    cleanups.push(() => env.cleanup());
    const running = new RunningJobs();
    const app = createApp(env.deps, { running });
    running.close();
    const r = await call(app, "/api/cron/backup-controle");
    expect(r.status).toBe(503);
    expect(Object.keys(r.json)).toEqual(["error"]);
    expect(r.headers.get("retry-after")).toBe("60");
    expect((env.store.sqlite.query("SELECT count(*) AS n FROM job_runs").get() as { n: number }).n).toBe(0);
  });
});
