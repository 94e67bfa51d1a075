// Concurrency (issue 8, part 5), against the service as a real process:
// - the host application appending audit entries from other processes while
//   audit-retentie and audit-verificatie run: every chain verifies afterwards, the
//   verification found nothing broken, and no append waited long for the lock;
// - two calls of the same job at once: the second is 409 {error} and the job runs once
//   (test/job-wrapper.test.ts shows the same in-process);
// - a manual trigger (as Swagger UI's "Try it out" sends it) while the crontab's call
//   runs, and the other way round.
//
// On both stores (test/dialect.ts): on the PostgreSQL run the service serves from a
// fresh database of the run's cluster (DATABASE_URL), which holds the same data, moved
// there as an installation moves (migrate-to); the host application's appenders are
// PostgreSQL clients (appendEntriesPg) beside test/fixtures/append-timed.ts.
import { Database } from "bun:sqlite";
import { afterEach, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseVerifierKey } from "../src/audit/note.ts";
import { verifyTenantChain, type TenantChainResult, type VerifyOptions } from "../src/audit/verify.ts";
import { verifyTenantChainPg } from "../src/pg/chain.ts";
import { migrateToPostgres } from "../src/pg/migrate-to.ts";
import { openPgStore } from "../src/pg/store.ts";
import { DIALECT, fileTestDb, onFile, testCluster, testDb, type TestDb } from "./dialect.ts";
import { bulkChain, testDatabase, flakySmtp, ROOT, startService, timedAppender, verifyAllOn, waitForRow, waitForRun, type ServiceProcess } from "./fixtures/hardening.ts";
import { SECRET, TEST_VERIFIER_KEY } from "./helpers.ts";

const DAY = 24 * 3600 * 1000;
const now = Date.now();
const VERIFIERS = [parseVerifierKey(TEST_VERIFIER_KEY)];
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const f of cleanups.splice(0).reverse()) await f();
});

/** An installation for a service process, and the test's own access to its database. */
interface Installation {
  dir: string;
  /** The service's environment (on PostgreSQL with DATABASE_URL; DATABASE_PATH then only places the outbox). */
  env: Record<string, string>;
  /** Plain SQL on the database (env.db's facade); on SQLite a connection per question, the service owns the file. */
  db: TestDb;
  /** One tenant's chain verified as audit-verificatie does (verifyTenantChain / verifyTenantChainPg). */
  verify(tenantId: number, o: VerifyOptions): Promise<TenantChainResult>;
  /** On PostgreSQL the database's URL, else null. */
  url: string | null;
}

/**
 * A database of the run's store filled by `fill`, installed two years ago. On
 * PostgreSQL the same data is written to a SQLite file first and moved over with
 * migrate-to (which proves the copy row by row and every chain on PostgreSQL).
 */
async function database(fill: (s: Database) => void): Promise<Installation> {
  const made = testDatabase(cleanups, new Date(now - 730 * DAY), fill);
  if (DIALECT === "sqlite") {
    return {
      dir: made.dir,
      env: made.env,
      url: null,
      db: fileTestDb(made.path),
      verify: async (t, o) => onFile(made.path, (s) => verifyTenantChain(s, t, o)),
    };
  }
  const url = await (await testCluster()).createDatabase();
  const moved = await migrateToPostgres({ dbPath: made.path, anchorPath: made.env.AUDIT_ANKER_BESTAND, url, verifiers: VERIFIERS, log: () => {} });
  expect(moved.uitkomst).toBe("klaar");
  const store = await openPgStore(url, { max: 2 });
  cleanups.push(async () => {
    await store.close();
    await (await testCluster()).dropDatabase(new URL(url).pathname.slice(1));
  });
  return {
    dir: made.dir,
    // The service's own path, not the SQLite file the data came from.
    env: { ...made.env, DATABASE_PATH: join(made.dir, "service", "nachtwacht.db"), DATABASE_URL: url },
    url,
    db: testDb(store),
    verify: (t, o) => verifyTenantChainPg(store.sql, t, o),
  };
}

async function service(env: Record<string, string>): Promise<ServiceProcess> {
  const svc = await startService(env);
  cleanups.push(async () => {
    svc.proc.kill("SIGTERM");
    await svc.exited;
  });
  return svc;
}

const post = (svc: ServiceProcess, job: string, headers: Record<string, string> = {}) =>
  fetch(`${svc.url}/api/cron/${job}`, { method: "POST", headers: { authorization: `Bearer ${SECRET}`, ...headers } });

function runsOf(db: Installation, job: string) {
  return db.db.all('SELECT uitkomst, http_status AS "httpStatus" FROM job_runs WHERE job = ? ORDER BY id', job);
}

describe("the host application writing while the jobs run", () => {
  test("three appender processes during audit-retentie and audit-verificatie: all chains verify, nothing reported broken, no append waited long", async () => {
    const db = await database((s) => {
      for (let t = 1; t <= 4; t++) {
        s.query("INSERT INTO tenants (id, naam, actief, aangemaakt) VALUES (?, ?, 1, ?)").run(t, `T${t}`, new Date(now - 4000 * DAY).toISOString());
        bulkChain(s, t, 6000, now - 3400 * DAY, now - 2700 * DAY); // to be deleted: 3 batches per tenant
        bulkChain(s, t, 500, now - 30 * DAY, now - DAY);
      }
    });
    const svc = await service(db.env);
    // On PostgreSQL no lock_timeout: an append waits for the chain's lock as long as it takes.
    // They go on until both jobs have answered, so they write all through both.
    const stopFile = join(db.dir, "appenders-stop");
    cleanups.push(async () => writeFileSync(stopFile, "")); // should the test fail before
    const appenders = [1, 2, 3].map((t) => timedAppender({ path: db.env.DATABASE_PATH!, url: db.url }, t, 1500, `app${t}`, { stopFile }));
    // Every appender is writing before the jobs start; verification starts once retention runs.
    for (const t of [1, 2, 3]) await waitForRow(db.db, "SELECT 1 FROM audit_entries WHERE actor = ?", `app${t}`);
    const [retentie, verificatie] = await Promise.all([post(svc, "audit-retentie"), waitForRow(db.db, "SELECT 1 FROM job_runs WHERE job = 'audit-retentie'").then(() => post(svc, "audit-verificatie"))]);
    writeFileSync(stopFile, "");
    expect(retentie.status).toBe(200);
    expect(((await retentie.json()) as { verwijderd: number }).verwijderd).toBe(4 * 6000);
    expect(verificatie.status).toBe(200);
    const v = (await verificatie.json()) as { aantalGebroken: number; resultaten: { intact: boolean }[] };
    expect(v.aantalGebroken).toBe(0);
    expect(v.resultaten.every((r) => r.intact)).toBe(true);

    const reports = await Promise.all(
      appenders.map(async (p) => {
        expect(await p.exited).toBe(0);
        return JSON.parse(await new Response(p.stdout as ReadableStream).text()) as { appended: number; maxMs: number; p99Ms: number; busy: number; from: string; to: string };
      }),
    );
    console.log(`appends during the jobs: ${JSON.stringify(reports.map(({ from, to, ...r }) => r))}`);
    // The appenders were really at work while both jobs ran.
    const runs = await db.db.all<{ gestart: string; beeindigd: string }>("SELECT job, gestart, beeindigd FROM job_runs ORDER BY id");
    expect(runs).toHaveLength(2);
    for (const run of runs) for (const r of reports) expect(r.from < run.beeindigd && run.gestart < r.to).toBe(true);
    for (const r of reports) {
      // Retention writes in small batches with pauses (on PostgreSQL without: its DELETEs
      // lock only the rows they delete, docs/postgresql.md): no append reached the 5 s
      // busy timeout that would have failed it. How long writers wait is a timing, the
      // benchmark's figure (≤ 150 ms, docs/performance.md), not this test's: maxMs is
      // printed above (up to 934 ms on CI's two cores; 2,960 ms once when three other
      // test runs shared them).
      expect(r.busy).toBe(0);
      expect(r.appended).toBeGreaterThanOrEqual(1500);
    }
    // Verified again after everything settled, and once more by the service itself.
    for (const c of await verifyAllOn(db.db, db.verify, db.env.AUDIT_ANKER_BESTAND!)) {
      expect(c.intact).toBe(true);
      expect(c.ankerSeq).toBe(6000);
      expect(c.retentieSeq).toBe(6000);
      expect(c.aantalEntries).toBe(500 + (c.tenantId <= 3 ? reports[c.tenantId - 1]!.appended : 0));
    }
    const again = await post(svc, "audit-verificatie");
    expect(again.status).toBe(200);
  }, 60_000);
});

describe("the same job twice at once, over HTTP", () => {
  async function slowWeekrapport() {
    const log: string[] = [];
    // Every message takes 150 ms at the server: the run lasts about a second.
    const smtp = await flakySmtp({ delayMs: 150, log });
    cleanups.push(() => smtp.stop());
    const db = await database((s) => {
      s.query("INSERT INTO tenants (id, naam, actief, aangemaakt) VALUES (1, 'Alfa', 1, ?)").run(new Date(now - DAY).toISOString());
      for (let a = 0; a < 30; a++) s.query("INSERT INTO administrators (tenant_id, naam, email, actief) VALUES (1, ?, ?, 1)").run(`a${a}`, `a${a}@alfa.test`);
    });
    const svc = await service({ ...db.env, SMTP_URL: smtp.url });
    return { db, svc, log };
  }

  test("two clients: the second gets 409 {error} at once, the job runs once and every report goes out once", async () => {
    const { db, svc, log } = await slowWeekrapport();
    const first = post(svc, "weekrapport");
    await waitForRun(db.db, "weekrapport");
    const t0 = performance.now();
    const second = await post(svc, "weekrapport");
    expect(second.status).toBe(409);
    expect(Object.keys((await second.json()) as object)).toEqual(["error"]);
    expect(performance.now() - t0).toBeLessThan(500);
    const r = await first;
    expect(r.status).toBe(200);
    expect(((await r.json()) as { verstuurd: number }).verstuurd).toBe(30);
    expect(log).toHaveLength(30);
    // The refused call is not a run: one row, finished.
    expect(await runsOf(db, "weekrapport")).toEqual([{ uitkomst: "ok", httpStatus: 200 }]);
  }, 30_000);

  test("a manual trigger from Swagger UI during the crontab's call gets 409; a crontab call during a manual run gets 409 and curl exits 22", async () => {
    const { db, svc, log } = await slowWeekrapport();
    const envFile = join(db.dir, "nachtwacht.env");
    writeFileSync(envFile, `CRON_SECRET=${SECRET}\nPORT=${new URL(svc.url).port}\n`, { mode: 0o600 });
    const cron = () =>
      Bun.spawn(["bash", join(ROOT, "ops/nachtwacht-call.sh"), "weekrapport", "60"], {
        env: { PATH: process.env.PATH!, NACHTWACHT_ENV: envFile, NACHTWACHT_LOG: "stdout" },
        stdout: "pipe",
        stderr: "pipe",
      });
    // What Swagger UI's "Try it out" sends: the bearer token from Authorize, accept JSON.
    const swagger = () => post(svc, "weekrapport", { accept: "application/json", origin: svc.url, referer: `${svc.url}/docs` });

    // 1. The scheduled call is running; someone presses "Execute" in Swagger UI.
    const scheduled = cron();
    await waitForRun(db.db, "weekrapport");
    const manual = await swagger();
    expect(manual.status).toBe(409);
    expect(((await manual.json()) as { error: string }).error).toContain("loopt al");
    expect(await scheduled.exited).toBe(0);
    expect(await new Response(scheduled.stdout as ReadableStream).text()).toContain("(HTTP 200");

    // 2. Next week's run started by hand; the crontab fires meanwhile.
    await db.db.run("DELETE FROM weekly_report_deliveries"); // as if a new week: all owed again
    const manual2 = swagger();
    await waitForRun(db.db, "weekrapport");
    const scheduled2 = cron();
    expect(await scheduled2.exited).toBe(22);
    const out = await new Response(scheduled2.stdout as ReadableStream).text();
    expect(out).toContain("(HTTP 409");
    expect(out).not.toContain(SECRET);
    expect((await manual2).status).toBe(200);

    expect(log).toHaveLength(60);
    expect(await runsOf(db, "weekrapport")).toEqual([
      { uitkomst: "ok", httpStatus: 200 },
      { uitkomst: "ok", httpStatus: 200 },
    ]);
  }, 30_000);
});
