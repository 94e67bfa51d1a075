import { afterEach, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { closeSync, copyFileSync, openSync, readSync, statSync, writeSync } from "node:fs";
import { join } from "node:path";
import { convertToIncrementalAutoVacuum, pruneOwnTables, runDbOnderhoud } from "../src/jobs/db-onderhoud.ts";
import { BACKUP_STATUSES_BEWAAR_DAGEN, JOB_RUNS_BEWAAR_DAGEN, PRUNE_BATCH } from "../src/maintenance/pruning.ts";
import { VACUUM_STEP_PAGES } from "../src/maintenance/whole-file.ts";
import { runBackupControle } from "../src/jobs/backup-controle.ts";
import { runTakenControle } from "../src/jobs/taken-controle.ts";
import type { PruneOptions } from "../src/maintenance/pruning.ts";
import { buildDailyReportPg } from "../src/pg/daily.ts";
import { pruneOwnTablesPg } from "../src/pg/maintenance.ts";
import { buildDailyReport } from "../src/reports/daily.ts";
import { call, makeTestEnv, NOW, statementsDuring, tempDir, TEST_SEAL, backupZegel, eindzegel, zegel, type TestEnv } from "./helpers.ts";
import { makeEnv, pgOnly, sqliteOnly, type Env, type TestDb } from "./dialect.ts";

function addLoginAttempts(sqlite: Database, n: number) {
  const ins = sqlite.query("INSERT INTO login_attempts (tijdstip, account, ip, gelukt, reden) VALUES (?, ?, ?, ?, ?)");
  sqlite.transaction(() => {
    for (let i = 0; i < n; i++) {
      ins.run(new Date(NOW.getTime() - i * 1000).toISOString(), `gebruiker${i % 5000}@voorbeeld.nl`, `10.${i % 200}.${i % 250}.${i % 7}`, i % 3 ? 1 : 0, "wachtwoord-onjuist");
    }
  })();
}

const onDisk = (path: string) => {
  const size = (p: string) => {
    try {
      return statSync(p).size;
    } catch {
      return 0;
    }
  };
  return size(path) + size(`${path}-wal`);
};

// The SQLite file's own upkeep (free pages, auto_vacuum and its conversion, quick_check of
// the file's pages, the WAL checkpoint) has no PostgreSQL counterpart (src/pg/maintenance.ts
// names it in `overgeslagen`): those tests are sqliteOnly; test/pg-maintenance.test.ts
// covers maintainPg. The integrity check's refusal runs on both (its pgOnly twin below).
describe("db-onderhoud", () => {
  sqliteOnly("the integrity check, the statistics, the vacuum and the checkpoint run on a worker thread, never on the service's connection (at 3.3 GB they held the event loop 4.4 s)", async () => {
    const env = makeTestEnv();
    try {
      const { sqlite } = env.store;
      addLoginAttempts(sqlite, 20_000);
      // Pages to give back, and rows left to analyse.
      sqlite.run("DELETE FROM login_attempts WHERE id <= 15000");
      const { seen, result: res } = await statementsDuring(sqlite, () => runDbOnderhoud(env.deps, NOW));
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ ok: true, integriteit: "ok", vrijePaginasNa: 0, checkpoint: { modus: "TRUNCATE", busy: false } });
      const b = res.body as { vacuumStappen: number; vrijgemaakt: number };
      expect(b.vacuumStappen).toBeGreaterThan(1);
      expect(b.vrijgemaakt).toBeGreaterThan(0);
      // The service's connection read the free-page count and pruned its own tables, and ran
      // none of the steps that read or rewrite much of the file.
      expect(seen.some((q) => q.includes("freelist_count"))).toBe(true);
      expect(seen.filter((q) => /quick_check|integrity_check|optimize|analyze|incremental_vacuum|wal_checkpoint/i.test(q))).toEqual([]);
      // The analysis ran all the same: the login attempts have statistics now.
      expect((sqlite.query("SELECT count(*) AS n FROM sqlite_stat1 WHERE tbl = 'login_attempts'").get() as { n: number }).n).toBeGreaterThan(0);
    } finally {
      env.cleanup();
    }
  });

  sqliteOnly("after deleting 50k login attempts the free pages are reclaimed and the files shrink (measured on disk)", async () => {
    const env = makeTestEnv();
    try {
      const { sqlite, path } = env.store;
      addLoginAttempts(sqlite, 50_000);
      sqlite.run("DELETE FROM login_attempts");
      const before = onDisk(path);

      // Called directly, so no job-run row lands in the WAL after the measurement.
      const res = await runDbOnderhoud(env.deps, NOW);
      expect(res.status).toBe(200);
      const b = res.body;
      expect(b).toMatchObject({ ok: true, integriteit: "ok", autoVacuum: "incremental", omzetting: null, vrijePaginasNa: 0 });
      expect(b.grootteVoor).toBe(before);
      expect(b.vrijePaginasVoor).toBeGreaterThan(1000); // more than one vacuum step
      expect(b.vacuumStappen).toBe(Math.ceil(b.vrijePaginasVoor / VACUUM_STEP_PAGES));
      expect(b.grootteNa).toBe(onDisk(path));
      expect(b.grootteNa).toBeLessThan(b.grootteVoor / 4);
      expect(b.vrijgemaakt).toBe(b.grootteVoor - b.grootteNa);
      expect(b.vrijgemaakt).toBeGreaterThan(b.vrijePaginasVoor * b.paginaGrootte * 0.9);
      // The WAL was folded back and truncated.
      expect(b.checkpoint!).toMatchObject({ modus: "TRUNCATE", busy: false });
      expect(statSync(`${path}-wal`).size).toBe(0);
      expect(env.alarms.raised).toHaveLength(0);
    } finally {
      env.cleanup();
    }
  });

  /** A database created before auto_vacuum was set: it stays at auto_vacuum NONE. */
  function oldDatabase(t: { dir: string }): TestEnv {
    const path = join(t.dir, "oud.db");
    // Tables already exist when openStore first sees it, so it keeps auto_vacuum NONE.
    const old = new Database(path, { create: true });
    old.run("CREATE TABLE ouder (x)");
    old.close();
    const env = makeTestEnv({ DATABASE_PATH: path });
    expect(env.store.sqlite.query("PRAGMA auto_vacuum").get()).toEqual({ auto_vacuum: 0 });
    addLoginAttempts(env.store.sqlite, 20_000);
    env.store.sqlite.run("DELETE FROM login_attempts");
    return env;
  }

  sqliteOnly("the weekly job never runs the full VACUUM: auto_vacuum NONE stays, the body says the conversion is pending and what it would free, the rest is done", async () => {
    const t = tempDir();
    let env: TestEnv | undefined;
    try {
      env = oldDatabase(t);
      const { sqlite } = env.store;
      const res = await call(env.app, "/api/cron/db-onderhoud");
      expect(res.status).toBe(200);
      const b = res.json;
      expect(b).toMatchObject({ ok: true, integriteit: "ok", autoVacuum: "none", vacuumStappen: 0 });
      // Nothing was rewritten: the free pages are still there (PRAGMA optimize may take one
      // or two for its statistics), the setting unchanged.
      expect(b.vrijePaginasVoor).toBeGreaterThan(100);
      expect(b.vrijePaginasNa).toBeGreaterThan(b.vrijePaginasVoor - 5);
      expect(sqlite.query("PRAGMA auto_vacuum").get()).toEqual({ auto_vacuum: 0 });
      expect(sqlite.query("SELECT value FROM service_meta WHERE key = 'auto_vacuum_omgezet'").get()).toBeNull();
      // Pending, with what it would give back at least.
      expect(b.omzetting).toMatchObject({ open: true, vrijePaginas: b.vrijePaginasVoor, vrijTeMaken: b.vrijePaginasVoor * b.paginaGrootte });
      expect(b.omzetting.toelichting).toContain("VACUUM");
      expect(b.omzetting.toelichting).toContain("niet");
      // The rest of the upkeep still happened.
      expect(b.checkpoint).toMatchObject({ modus: "TRUNCATE", busy: false });
      expect(env.alarms.raised).toHaveLength(0);
    } finally {
      await env?.cleanup();
      t.cleanup();
    }
  });

  sqliteOnly("convertToIncrementalAutoVacuum (the operator's command) converts it once; then the weekly job has nothing pending and vacuums in steps", async () => {
    const t = tempDir();
    let env: TestEnv | undefined;
    try {
      env = oldDatabase(t);
      const { sqlite } = env.store;
      const vrij = (sqlite.query("PRAGMA freelist_count").get() as { freelist_count: number }).freelist_count;
      expect(vrij).toBeGreaterThan(0);

      const r = convertToIncrementalAutoVacuum(env.store, NOW);
      expect(r).toMatchObject({ integriteit: "ok", voor: "none", autoVacuum: "incremental", omgezet: true });
      expect(r.vrijgemaakt).toBeGreaterThanOrEqual(vrij * r.paginaGrootte);
      expect(r.grootteNa).toBe(onDisk(env.store.path));
      expect(sqlite.query("PRAGMA auto_vacuum").get()).toEqual({ auto_vacuum: 2 });
      expect(sqlite.query("PRAGMA freelist_count").get()).toEqual({ freelist_count: 0 });
      expect(sqlite.query("SELECT value FROM service_meta WHERE key = 'auto_vacuum_omgezet'").get()).toEqual({ value: NOW.toISOString() });

      // A second call has nothing to do.
      expect(convertToIncrementalAutoVacuum(env.store, NOW)).toMatchObject({ voor: "incremental", autoVacuum: "incremental", omgezet: false, vrijgemaakt: 0 });

      addLoginAttempts(sqlite, 20_000);
      sqlite.run("DELETE FROM login_attempts");
      const weekly = await runDbOnderhoud(env.deps, NOW);
      expect(weekly.body).toMatchObject({ autoVacuum: "incremental", omzetting: null, vrijePaginasNa: 0 });
      expect(weekly.body.vacuumStappen).toBeGreaterThan(0);
    } finally {
      await env?.cleanup();
      t.cleanup();
    }
  });

  sqliteOnly("convertToIncrementalAutoVacuum refuses a database that fails quick_check: nothing rewritten", async () => {
    const t = tempDir();
    let env: TestEnv | undefined;
    try {
      const source = oldDatabase(t);
      const { sqlite: s, path } = source.store;
      const { rootpage } = s.query("SELECT rootpage FROM sqlite_schema WHERE name = 'login_attempts_failed_idx'").get() as { rootpage: number };
      const { page_size } = s.query("PRAGMA page_size").get() as { page_size: number };
      s.run("PRAGMA wal_checkpoint(TRUNCATE)"); // everything in the main file
      await source.cleanup();
      // Overwrite the root page of an index with a fixed garbage pattern, then open it afresh.
      const fd = openSync(path, "r+");
      writeSync(fd, Buffer.alloc(page_size, 0xa5), 0, page_size, (rootpage - 1) * page_size);
      closeSync(fd);
      env = makeTestEnv({ DATABASE_PATH: path });
      const { sqlite } = env.store;

      const r = convertToIncrementalAutoVacuum(env.store, NOW);
      expect(r.omgezet).toBe(false);
      expect(r.autoVacuum).toBe("none");
      expect(r.integriteit).not.toBe("ok");
      expect(sqlite.query("PRAGMA auto_vacuum").get()).toEqual({ auto_vacuum: 0 });
    } finally {
      await env?.cleanup();
      t.cleanup();
    }
  });

  sqliteOnly("a copy with a damaged index page fails quick_check → 409, db-integrity alarm, file left untouched", async () => {
    const source = makeTestEnv();
    const t = tempDir();
    let env: TestEnv | undefined;
    try {
      const { sqlite } = source.store;
      addLoginAttempts(sqlite, 3000);
      sqlite.run("PRAGMA wal_checkpoint(TRUNCATE)"); // everything in the main file
      const { rootpage } = sqlite.query("SELECT rootpage FROM sqlite_schema WHERE name = 'login_attempts_failed_idx'").get() as { rootpage: number };
      const { page_size } = sqlite.query("PRAGMA page_size").get() as { page_size: number };
      // The source itself is sound.
      expect((await runDbOnderhoud(source.deps, NOW)).body.integriteit).toBe("ok");

      const copy = join(t.dir, "kopie.db");
      copyFileSync(source.store.path, copy);
      // Overwrite the root page of an index with a fixed garbage pattern.
      const fd = openSync(copy, "r+");
      writeSync(fd, Buffer.alloc(page_size, 0xa5), 0, page_size, (rootpage - 1) * page_size);
      closeSync(fd);

      env = makeTestEnv({ DATABASE_PATH: copy });
      const res = await call(env.app, "/api/cron/db-onderhoud");
      expect(res.status).toBe(409);
      expect(res.json.ok).toBe(false);
      expect(res.json.integriteit).toContain(`Tree ${rootpage} page ${rootpage}: btreeInitPage() returns error code 11`);
      expect(res.json).toMatchObject({ checkpoint: null, vacuumStappen: 0, omzetting: null, vrijgemaakt: 0, opgeschoond: null });
      expect(env.alarms.raised).toHaveLength(1);
      expect(env.alarms.raised[0]!.type).toBe("db-integrity");
      // Nothing was written over the damaged page.
      const page = Buffer.alloc(page_size);
      const rfd = openSync(copy, "r");
      readSync(rfd, page, 0, page_size, (rootpage - 1) * page_size);
      closeSync(rfd);
      expect(page.equals(Buffer.alloc(page_size, 0xa5))).toBe(true);
    } finally {
      env?.cleanup();
      source.cleanup();
      t.cleanup();
    }
  });

  pgOnly("an index whose order no longer holds fails amcheck → 409, db-integrity alarm, nothing pruned or analysed", async () => {
    const env = await makeEnv();
    try {
      await history(env.db);
      // The test cluster's user is a superuser: amcheck, then a B-tree built with one
      // comparison and read with its reverse (what a changed collation does to an index).
      await env.db.run("CREATE EXTENSION amcheck");
      await env.db.run("CREATE FUNCTION nw_cmp(int4, int4) RETURNS int4 IMMUTABLE LANGUAGE sql AS 'SELECT btint4cmp($1, $2)'");
      await env.db.run(
        "CREATE OPERATOR CLASS nw_ops FOR TYPE int4 USING btree AS OPERATOR 1 <, OPERATOR 2 <=, OPERATOR 3 =, OPERATOR 4 >=, OPERATOR 5 >, FUNCTION 1 nw_cmp(int4, int4)",
      );
      await env.db.run("CREATE INDEX job_runs_omgekeerd_idx ON job_runs (id nw_ops)");
      await env.db.run("CREATE OR REPLACE FUNCTION nw_cmp(int4, int4) RETURNS int4 IMMUTABLE LANGUAGE sql AS 'SELECT btint4cmp($2, $1)'");
      const runsBefore = await ids(env.db, "SELECT id FROM job_runs");
      const backupsBefore = await ids(env.db, "SELECT id FROM backup_statuses");

      const res = await call(env.app, "/api/cron/db-onderhoud");
      expect(res.status).toBe(409);
      expect(res.json.ok).toBe(false);
      expect(res.json.integriteit.status).toBe("problemen");
      expect(res.json.integriteit.meldingen).toHaveLength(1);
      expect(res.json.integriteit.meldingen[0]).toStartWith("job_runs_omgekeerd_idx: ");
      expect(res.json.integriteit.meldingen[0]).toContain("invariant violated");
      expect(res.json).toMatchObject({ opgeschoond: null, geanalyseerd: [] });
      expect(env.alarms.raised).toHaveLength(1);
      expect(env.alarms.raised[0]!.type).toBe("db-integrity");
      // Nothing was deleted (the job route's own db-onderhoud run aside) nor analysed.
      expect(await ids(env.db, "SELECT id FROM job_runs WHERE job <> 'db-onderhoud'")).toEqual(runsBefore);
      expect(await ids(env.db, "SELECT id FROM backup_statuses")).toEqual(backupsBefore);
      expect(await env.db.get("SELECT count(*) AS n FROM pg_stat_user_tables WHERE last_analyze IS NOT NULL")).toEqual({ n: 0 });
    } finally {
      await env.cleanup();
    }
  });

  sqliteOnly("a reader holding an old snapshot: the checkpoint waits briefly, then falls back to PASSIVE", async () => {
    const env = makeTestEnv();
    const reader = new Database(env.store.path, { readonly: true });
    try {
      addLoginAttempts(env.store.sqlite, 100);
      reader.run("BEGIN");
      reader.query("SELECT count(*) FROM login_attempts").get();
      addLoginAttempts(env.store.sqlite, 100); // WAL frames the reader's snapshot predates
      const started = performance.now();
      const r = await runDbOnderhoud(env.deps, NOW);
      const ms = performance.now() - started;
      expect(r.status).toBe(200);
      expect(r.body.checkpoint!.modus).toBe("PASSIVE");
      expect(ms).toBeLessThan(2000); // bounded by the short checkpoint wait, not the 5 s busy timeout
    } finally {
      reader.run("ROLLBACK");
      reader.close();
      env.cleanup();
    }
  });
});

describe("db-onderhoud: nachtwacht's own tables stay bounded", () => {
  let env: Env | undefined;
  afterEach(async () => {
    await env?.cleanup();
    env = undefined;
  });

  const count = async (e: Env, job: string, where = "1 = 1") => (await e.db.get<{ n: number }>(`SELECT count(*) AS n FROM job_runs WHERE job = ? AND ${where}`, job))!.n;

  test("job_runs older than 90 days go, except each job's newest run and ten newest successful ones; backup_statuses older than 90 days go, except the newest; in batches of 500", async () => {
    env = await makeEnv();
    await history(env.db);
    const keep = new Set(await expectedKeptOld(env.db));
    const recent = new Set(await ids(env.db, "SELECT id FROM job_runs WHERE gestart >= ?", GRENS));
    const expectedRuns = (await ids(env.db, "SELECT id FROM job_runs")).filter((id) => keep.has(id) || recent.has(id));
    const runsBefore = (await ids(env.db, "SELECT id FROM job_runs")).length;
    const backupGrens = new Date(NOW.getTime() - BACKUP_STATUSES_BEWAAR_DAGEN * DAY).toISOString();
    const expectedBackups = await ids(env.db, "SELECT id FROM backup_statuses WHERE ontvangen >= ?", backupGrens);

    const batches: [string, number][] = [];
    const r = await prune(env, NOW, { onBatch: (table, n) => batches.push([table, n]) });
    expect(r.jobRuns).toEqual({ verwijderd: runsBefore - expectedRuns.length, grens: GRENS, bewaarDagen: 90 });
    expect(r.backupStatuses).toEqual({ verwijderd: 150 + 1 - expectedBackups.length, grens: backupGrens, bewaarDagen: 90 });
    expect(r.jobRuns.verwijderd).toBeGreaterThan(2 * PRUNE_BATCH);
    // One short transaction per batch of at most 500 rows.
    const runBatches = batches.filter(([t]) => t === "job_runs").map(([, n]) => n);
    expect(runBatches.slice(0, -1).every((n) => n === PRUNE_BATCH)).toBe(true);
    expect(runBatches.length).toBe(Math.floor(r.jobRuns.verwijderd / PRUNE_BATCH) + 1);
    expect(runBatches.reduce((a, b) => a + b, 0)).toBe(r.jobRuns.verwijderd);
    expect(await ids(env.db, "SELECT id FROM job_runs")).toEqual(expectedRuns);
    expect(await ids(env.db, "SELECT id FROM backup_statuses")).toEqual(expectedBackups);

    expect(await count(env, "dagrapport")).toBe(90); // the last 90 days
    expect(await count(env, "audit-retentie")).toBe(3); // 2026, 2025, 2023: the yearly job's failed 2024 run is gone
    expect(await count(env, "audit-retentie", "uitkomst = 'fout'")).toBe(0);
    expect(await count(env, "weekrapport")).toBe(11); // all over 90 days old: the newest (failed) and the ten newest successful
    expect(await count(env, "weekrapport", "uitkomst = 'fout'")).toBe(1);
    expect(await count(env, "beveiligingslog-analyse")).toBe(10);
    expect(await count(env, "audit-verificatie", "uitkomst = 'bezig'")).toBe(0);
    expect(await count(env, "oude-taak")).toBe(3); // a job no longer scheduled: its (three, successful) newest runs, as for any job

    // Running it again finds nothing more.
    const again = await prune(env, NOW, { batch: 7 });
    expect([again.jobRuns.verwijderd, again.backupStatuses.verwijderd]).toEqual([0, 0]);
  });

  test("the newest backup status stays however old it is", async () => {
    env = await makeEnv();
    await insertRows(env.db, "backup_statuses", BACKUP_COLUMNS, [backup(new Date(NOW.getTime() - 300 * DAY)), backup(new Date(NOW.getTime() - 200 * DAY), 65)]);
    const r = await prune(env, NOW, { batch: 1 });
    expect(r.backupStatuses.verwijderd).toBe(1);
    const left = await env.db.all('SELECT exit_code AS "exitCode" FROM backup_statuses');
    expect(left).toEqual([{ exitCode: 65 }]);
  });

  test("taken-controle, backup-controle and the daily report read the same before and after the pruning; over HTTP the body says what went", async () => {
    env = await makeEnv();
    const e = env;
    await history(e.db);
    const reports = async () => ({
      taken: (await runTakenControle(e.deps, NOW)).body,
      backup: (await runBackupControle(e.deps, NOW)).body,
      dag: e.store.kind === "pg" ? await buildDailyReportPg(e.store, e.config, NOW) : await buildDailyReport(e.store, e.config, NOW),
    });
    const before = await reports();
    e.alarms.raised.length = 0;
    const res = await call(e.app, "/api/cron/db-onderhoud");
    expect(res.status).toBe(200);
    expect(res.json.opgeschoond).toMatchObject({
      jobRuns: { grens: GRENS, bewaarDagen: 90 },
      backupStatuses: { verwijderd: 60, bewaarDagen: 90 },
    });
    expect(res.json.opgeschoond.jobRuns.verwijderd).toBeGreaterThan(1000);
    // The db-onderhoud run itself is recorded: leave that job out of the comparison.
    const after = await reports();
    const withoutOwn = <T extends { job: string }>(rows: T[]) => rows.filter((r) => r.job !== "db-onderhoud");
    expect(withoutOwn(after.taken.taken)).toEqual(withoutOwn(before.taken.taken));
    expect(after.backup).toEqual(before.backup);
    expect(withoutOwn(after.dag.taken)).toEqual(withoutOwn(before.dag.taken));
    expect(after.dag.backup).toEqual(before.dag.backup);
    expect(after.dag.backupDetail).toEqual(before.dag.backupDetail);
    // The usual durations survived: the ten newest successful runs are kept.
    expect(after.dag.taken.find((t) => t.job === "weekrapport")).toMatchObject({ gebruikelijkOver: 10 });
  });
});

// ---------------------------------------------------------------------------------
// Arranging the history on either store.

const DAY = 24 * 3600 * 1000;
const GRENS = new Date(NOW.getTime() - JOB_RUNS_BEWAAR_DAGEN * DAY).toISOString();

/** pruneOwnTables on the installation's store (pruneOwnTablesPg on PostgreSQL: the same rule and result). */
function prune(env: Env, now: Date, o: PruneOptions = {}) {
  return env.store.kind === "pg" ? pruneOwnTablesPg(env.store, TEST_SEAL, now, o) : pruneOwnTables(env.store, TEST_SEAL, now, o);
}

/** Multi-row INSERTs (200 rows each) with `?` placeholders: portable, and one round trip per 200 rows on PostgreSQL. */
async function insertRows(db: TestDb, table: string, columns: readonly string[], rows: readonly unknown[][]): Promise<void> {
  const row = `(${columns.map(() => "?").join(", ")})`;
  for (let i = 0; i < rows.length; i += 200) {
    const chunk = rows.slice(i, i + 200);
    await db.run(`INSERT INTO ${table} (${columns.join(", ")}) VALUES ${chunk.map(() => row).join(", ")}`, ...chunk.flat());
  }
}

const RUN_COLUMNS = ["job", "gestart", "beeindigd", "uitkomst", "http_status", "zegel", "eindzegel"] as const;
/** A run as the service records it: sealed (src/row-seal.ts). */
function run(job: string, gestart: Date, uitkomst = "ok", ms: number | null = 1500): unknown[] {
  const r = { job, gestart: gestart.toISOString(), beeindigd: ms === null ? null : new Date(gestart.getTime() + ms).toISOString(), uitkomst, httpStatus: 200 };
  return [r.job, r.gestart, r.beeindigd, r.uitkomst, 200, zegel(job, r.gestart), eindzegel(r)];
}

const BACKUP_COLUMNS = ["ontvangen", "exit_code", "gelukt", "bestandsnaam", "grootte", "foutmelding", "bron", "zegel"] as const;
/** A report as backup-status stores it: sealed (src/row-seal.ts). */
function backup(ontvangen: Date, exitCode = 0): unknown[] {
  const b = { ontvangen: ontvangen.toISOString(), exitCode, gelukt: exitCode === 0, bestandsnaam: "db.gz", grootte: 1024, foutmelding: null, bron: "host-cron" };
  return [b.ontvangen, b.exitCode, b.gelukt, b.bestandsnaam, b.grootte, b.foutmelding, b.bron, backupZegel(b)];
}

/** A year and more of history: daily, weekly, yearly and quarter-hourly jobs, a run that died, a job no longer in the schedule. */
async function history(db: TestDb): Promise<void> {
  const ago = (days: number, at = "06:00:01") => new Date(Date.parse(`2026-07-23T${at}.000Z`) - days * DAY);
  const runs: unknown[][] = [];
  for (let d = 0; d < 200; d++) runs.push(run("dagrapport", ago(d), "ok", 1000 + (d % 7) * 100));
  for (const [y, u] of [["2026", "ok"], ["2025", "ok"], ["2024", "fout"], ["2023", "ok"]] as const) runs.push(run("audit-retentie", new Date(`${y}-01-01T02:00:01.000Z`), u, 60_000));
  for (let w = 0; w < 30; w++) runs.push(run("weekrapport", ago(100 + 7 * w, "18:00:01"), w % 3 === 0 ? "fout" : "ok", 12_000 + w));
  for (let i = 0; i < 1300; i++) runs.push(run("beveiligingslog-analyse", new Date(NOW.getTime() - 120 * DAY - i * 15 * 60_000), i % 50 === 7 ? "afwijking" : "ok", 3));
  runs.push(run("audit-verificatie", ago(100, "01:00:01"), "bezig", null)); // its process died, long ago
  for (let d = 0; d < 5; d++) runs.push(run("audit-verificatie", ago(d, "01:00:01"), "ok", 14_000));
  for (let d = 0; d < 3; d++) runs.push(run("oude-taak", ago(200 + d)));
  const backups: unknown[][] = [];
  for (let d = 1; d <= 150; d++) backups.push(backup(new Date(NOW.getTime() - d * DAY)));
  backups.push(backup(new Date(NOW.getTime() - 3600_000), 74)); // the newest failed: still the one backup-controle reads
  await insertRows(db, "job_runs", RUN_COLUMNS, runs);
  await insertRows(db, "backup_statuses", BACKUP_COLUMNS, backups);
}

/** What must stay, worked out independently of the job: per job its newest run and its ten newest successful ones. */
async function expectedKeptOld(db: TestDb): Promise<number[]> {
  const rows = await db.all<{ id: number }>(
    `SELECT id FROM (SELECT id, uitkomst, beeindigd, row_number() OVER (PARTITION BY job ORDER BY gestart DESC, id DESC) AS n,
            row_number() OVER (PARTITION BY job, uitkomst = 'ok' AND beeindigd IS NOT NULL ORDER BY gestart DESC, id DESC) AS k
       FROM job_runs) AS r
     WHERE n = 1 OR (uitkomst = 'ok' AND beeindigd IS NOT NULL AND k <= 10)`,
  );
  return rows.map((r) => r.id);
}

async function ids(db: TestDb, query: string, ...p: unknown[]): Promise<number[]> {
  return (await db.all<{ id: number }>(query, ...p)).map((r) => r.id).sort((a, b) => a - b);
}
