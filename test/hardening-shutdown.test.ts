// Shutdown (issue 8, part 6). SIGTERM (what systemd sends on stop and restart): the
// service stops taking connections, lets the running job finish, records it, folds
// the WAL into the database and closes it (on PostgreSQL: closes its pool), and exits 0. A job that does not finish
// within the bound (25 s; shorter in the fixture) is answered 503, recorded as 'fout'
// with a message, and the process exits 1 with the database closed cleanly.
import { afterEach, describe, expect, test } from "bun:test";
import { existsSync, statSync } from "node:fs";
import { join } from "node:path";
import { createApp } from "../src/app.ts";
import { openStore } from "../src/db.ts";
import { markInstalledPg, openPgStore } from "../src/pg/store.ts";
import { RunningJobs } from "../src/running-jobs.ts";
import { SHUTDOWN_GRACE_MS } from "../src/server.ts";
import { bulkChain, bulkChainPg, tempDir, verifyAll, verifyAllPg, ROOT, startService, waitForRow, waitForRun, type ServiceProcess } from "./fixtures/hardening.ts";
import { call, SECRET, TEST_SEAL, TEST_SIGNING_KEY, until } from "./helpers.ts";
import { DIALECT, fileTestDb, makeEnv, onFile, testCluster, testDb, type TestDb } from "./dialect.ts";

const DAY = 24 * 3600 * 1000;
const now = Date.now();
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const f of cleanups.splice(0).reverse()) await f();
});

/** A database of the run's store for a service process, filled by the test, and what the test reads of it. */
interface Installation {
  /** The service's environment (DATABASE_URL on the PostgreSQL run; the outbox stays beside DATABASE_PATH). */
  env: Record<string, string>;
  /** Plain SQL on the database, from the test's own connection. */
  db: TestDb;
  /** Every tenant's chain verified against the anchor file, with its anchors and lowest seq (fixtures' verifyAll). */
  chains(): Promise<{ intact: boolean; aantalEntries: number; ankerSeq: number; retentieSeq: number; eersteSeq: number | null }[]>;
  /**
   * After the process is gone: its store was closed cleanly. SQLite: no WAL content left
   * behind and the file sound. PostgreSQL (the server keeps the data sound): the pool was
   * closed without a failure (the exit code the tests check comes after that close) and
   * none of its connections is left on the server.
   */
  closedCleanly(svc: ServiceProcess): Promise<void>;
}

/**
 * A fresh installation of the run's store, installed 730 days ago and filled by `fill`
 * (the test's own connection, closed again before the service starts on SQLite).
 */
async function installation(fill: (db: TestDb, chain: (tenantId: number, n: number, fromMs: number, toMs: number) => Promise<void>) => Promise<void> = async () => {}): Promise<Installation> {
  const { dir, cleanup } = tempDir();
  cleanups.push(cleanup);
  const installedAt = new Date(now - 730 * DAY);
  const path = join(dir, "data", "nachtwacht.db");
  const env = { CRON_SECRET: SECRET, AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY, DATABASE_PATH: path, AUDIT_ANKER_BESTAND: join(dir, "ankers.jsonl") };
  if (DIALECT === "sqlite") {
    const store = openStore(path, installedAt, TEST_SEAL);
    await fill(testDb(store), async (t, n, from, to) => bulkChain(store.sqlite, t, n, from, to));
    store.close();
    // Read-only, opened per question: the service owns the file.
    return {
      env,
      db: fileTestDb(path, { readonly: true }),
      chains: async () => onFile(path, (s) => verifyAll(s, env.AUDIT_ANKER_BESTAND)),
      closedCleanly: async () => {
        const wal = `${path}-wal`;
        expect(existsSync(wal) ? statSync(wal).size : 0).toBe(0);
        onFile(path, (s) => expect((s.query("PRAGMA integrity_check").get() as { integrity_check: string }).integrity_check).toBe("ok"));
      },
    };
  }
  const url = await (await testCluster()).createDatabase();
  const store = await openPgStore(url, { max: 1 });
  cleanups.push(() => store.close());
  await markInstalledPg(store.sql, TEST_SEAL, installedAt);
  const db = testDb(store);
  await fill(db, (t, n, from, to) => bulkChainPg(store, t, n, from, to));
  return {
    env: { ...env, DATABASE_URL: url },
    db,
    chains: () => verifyAllPg(store, env.AUDIT_ANKER_BESTAND),
    closedCleanly: async (svc) => {
      expect(svc.output()).not.toContain("closing the PostgreSQL connections failed");
      // A backend ends just after its client left: waited for, bounded.
      await until("the service's connections to end", async () => {
        const row = await db.get<{ n: number }>("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()");
        return row!.n === 0;
      }, 10_000);
    },
  };
}

/** The runs of `job` as the test reads them after the process is gone. */
function runs(db: TestDb, job: string) {
  return db.all<{ uitkomst: string; httpStatus: number; beeindigd: number; fout: string | null }>(
    "SELECT uitkomst, http_status AS \"httpStatus\", beeindigd IS NOT NULL AS beeindigd, fout FROM job_runs WHERE job = ?",
    job,
  );
}

describe("SIGTERM", () => {
  test("during audit-retentie: the job finishes and answers 200, the run is recorded ok, new connections are refused, the WAL is folded in, exit 0", async () => {
    const inst = await installation(async (db, chain) => {
      for (let t = 1; t <= 6; t++) {
        await db.run("INSERT INTO tenants (id, naam, actief, aangemaakt) VALUES (?, ?, ?, ?)", t, `T${t}`, true, new Date(now - 4000 * DAY).toISOString());
        await chain(t, 8000, now - 3400 * DAY, now - 2700 * DAY);
        await chain(t, 100, now - 30 * DAY, now - DAY);
      }
    });
    const svc: ServiceProcess = await startService(inst.env);
    const t0 = performance.now();
    const answer = fetch(`${svc.url}/api/cron/audit-retentie`, { method: "POST", headers: { authorization: `Bearer ${SECRET}` } });
    await waitForRun(inst.db, "audit-retentie");
    svc.proc.kill("SIGTERM");
    const r = await answer;
    expect(r.status).toBe(200);
    expect(((await r.json()) as { verwijderd: number }).verwijderd).toBe(6 * 8000);
    // Stopping: nothing new gets in.
    expect(await fetch(`${svc.url}/health`).then((x) => x.status, () => "refused")).toBe("refused");
    expect(await svc.exited).toBe(0);
    console.log(`SIGTERM during audit-retentie: stopped ${Math.round(performance.now() - t0)} ms after the call`);

    expect(await runs(inst.db, "audit-retentie")).toEqual([{ uitkomst: "ok", httpStatus: 200, beeindigd: 1, fout: null }]);
    await inst.closedCleanly(svc);
    for (const c of await inst.chains()) expect(c).toMatchObject({ intact: true, ankerSeq: 8000, retentieSeq: 8000, eersteSeq: 8001, aantalEntries: 100 });
    const log = svc.output();
    expect(log).toContain('"message":"shutting down","signal":"SIGTERM","running":["audit-retentie"]');
    expect(log).toContain('"message":"stopped","signal":"SIGTERM","exitCode":0');
  }, 60_000);

  test("with no job running: exit 0 at once, database closed cleanly", async () => {
    const inst = await installation();
    const svc = await startService(inst.env);
    expect((await fetch(`${svc.url}/api/cron/backup-controle`, { method: "POST", headers: { authorization: `Bearer ${SECRET}` } })).status).toBe(409);
    const t0 = performance.now();
    svc.proc.kill("SIGTERM");
    expect(await svc.exited).toBe(0);
    expect(performance.now() - t0).toBeLessThan(3000);
    await inst.closedCleanly(svc);
  }, 30_000);

  test("a job that outlasts the bound: its caller gets 503 {error}, the run is recorded as fout with the reason, its committed steps stay, exit 1, database sound", async () => {
    expect(SHUTDOWN_GRACE_MS).toBe(25_000); // production bound; the fixture uses 1.5 s
    const inst = await installation();
    // The same slow job on either store (the fixture of the PostgreSQL run writes through its pool).
    const fixture = join(ROOT, "test/fixtures/server-slow-job.ts");
    const svc = await startService({ ...inst.env, SHUTDOWN_GRACE_MS: "1500" }, fixture);
    const answer = fetch(`${svc.url}/api/cron/db-onderhoud`, { method: "POST", headers: { authorization: `Bearer ${SECRET}` } });
    await waitForRun(inst.db, "db-onderhoud");
    // A few of its steps committed before the signal.
    await waitForRow(inst.db, "SELECT 1 FROM service_meta WHERE key = 'stap-3'");
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

    const [run] = await runs(inst.db, "db-onderhoud");
    expect(run).toMatchObject({ uitkomst: "fout", httpStatus: 503, beeindigd: 1 });
    expect(run!.fout).toContain("SIGTERM");
    await inst.closedCleanly(svc);
    const steps = (await inst.db.get<{ n: number }>("SELECT count(*) AS n FROM service_meta WHERE key LIKE 'stap-%'"))!.n;
    expect(steps).toBeGreaterThanOrEqual(3); // committed before the signal, and kept
    expect(svc.output()).toContain('"message":"stopped","signal":"SIGTERM","exitCode":1');
  }, 30_000);

  test("a call that reaches a stopping service is refused with 503 {error} and starts nothing", async () => {
    const env = await makeEnv();
    cleanups.push(() => env.cleanup());
    const running = new RunningJobs();
    const app = createApp(env.deps, { running });
    running.close();
    const r = await call(app, "/api/cron/backup-controle");
    expect(r.status).toBe(503);
    expect(Object.keys(r.json)).toEqual(["error"]);
    expect(r.headers.get("retry-after")).toBe("60");
    expect((await env.db.get<{ n: number }>("SELECT count(*) AS n FROM job_runs"))!.n).toBe(0);
  });
});
