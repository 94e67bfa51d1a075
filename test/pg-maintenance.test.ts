// db-onderhoud's work on PostgreSQL (src/pg/maintenance.ts) against a real server
// (test/pg.ts): the pruning keeps exactly what SQLite's pruneOwnTables keeps (the same
// rows in both, compared id by id, and cases worked out by hand), in batches; the
// integrity check is skipped without amcheck, with a hint that works when run, and finds
// a real out-of-order index with it; ANALYZE leaves statistics; the sizes are reported.
import { afterAll, afterEach, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import { SQL } from "bun";
import * as sqliteSchema from "../db/schema.ts";
import * as pgSchema from "../db/schema-pg.ts";
import { pruneOwnTables } from "../src/jobs/db-onderhoud.ts";
import { BACKUP_STATUSES_BEWAAR_DAGEN, JOB_RUNS_BEWAAR_DAGEN, KEEP_OK_RUNS, PRUNE_BATCH } from "../src/maintenance/pruning.ts";
import { integrityCheckPg, maintainPg, OWN_TABLES, PgMaintenanceReport, pruneOwnTablesPg } from "../src/pg/maintenance.ts";
import { openPgStore, type PgStore } from "../src/pg/store.ts";
import { backupZegel, eindzegel, makeTestEnv, NOW, TEST_SEAL, zegel } from "./helpers.ts";
import { startCluster, type TestCluster } from "./pg.ts";

setDefaultTimeout(120_000);

const DAY = 24 * 3600 * 1000;

let cluster: TestCluster;
let admin: SQL;
const closers: (() => Promise<void>)[] = [];
beforeAll(async () => {
  cluster = await startCluster();
  admin = new SQL(cluster.url, { max: 1 });
});
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});
afterAll(async () => {
  await admin?.close();
  await cluster?.stop();
});

async function freshStore(): Promise<{ store: PgStore; url: string; name: string }> {
  const url = await cluster.createDatabase();
  const store = await openPgStore(url);
  closers.push(() => store.close());
  return { store, url, name: new URL(url).pathname.slice(1) };
}

/** A connection as the cluster's superuser (nw) to the given database. */
function superuser(url: string): SQL {
  const sql = new SQL(url, { max: 1 });
  closers.push(() => sql.close());
  return sql;
}

interface Run {
  id: number;
  job: string;
  gestart: string;
  beeindigd: string | null;
  uitkomst: "bezig" | "ok" | "afwijking" | "fout";
  zegel?: string;
  eindzegel?: string | null;
}
interface Backup {
  id: number;
  ontvangen: string;
  exitCode: number;
  zegel?: string;
}

/**
 * Two years of history, with ids given: daily, weekly, yearly and quarter-hourly jobs;
 * runs that died ('bezig'); an 'ok' without an end; several runs starting at the same
 * moment (ties broken by id, newest = highest); a job no longer scheduled; more prunable
 * rows than three batches in job_runs and two in backup_statuses.
 */
function history(): { runs: Run[]; backups: Backup[] } {
  const runs: Run[] = [];
  const run = (job: string, gestart: Date, uitkomst: Run["uitkomst"] = "ok", ms: number | null = 1500) =>
    runs.push({ id: runs.length + 1, job, gestart: gestart.toISOString(), beeindigd: ms === null ? null : new Date(gestart.getTime() + ms).toISOString(), uitkomst });
  const ago = (days: number, at = "06:00:01") => new Date(Date.parse(`2026-07-23T${at}.000Z`) - days * DAY);
  for (let d = 0; d < 400; d++) run("dagrapport", ago(d), d % 11 === 3 ? "fout" : "ok", 1000 + (d % 7) * 100);
  for (const [y, u] of [["2026", "ok"], ["2025", "ok"], ["2024", "fout"], ["2023", "ok"]] as const) run("audit-retentie", new Date(`${y}-01-01T02:00:01.000Z`), u, 60_000);
  for (let w = 0; w < 30; w++) run("weekrapport", ago(100 + 7 * w, "18:00:01"), w % 3 === 0 ? "fout" : "ok", 12_000 + w);
  for (let i = 0; i < 1300; i++) run("beveiligingslog-analyse", new Date(NOW.getTime() - 120 * DAY - i * 15 * 60_000), i % 50 === 7 ? "afwijking" : "ok", 3);
  run("audit-verificatie", ago(100, "01:00:01"), "bezig", null);
  for (let d = 0; d < 5; d++) run("audit-verificatie", ago(d, "01:00:01"), "ok", 14_000);
  for (let d = 0; d < 3; d++) run("oude-taak", ago(200 + d));
  // Twelve runs of one job at the same old moment, the last two without an end: the ten
  // successful ones kept are those with the highest ids among those that ended, the newest
  // run the highest id of all.
  for (let k = 0; k < 14; k++) run("gelijktijdig", ago(150), "ok", k >= 12 ? null : 500);
  const backups: Backup[] = [];
  for (let d = 1; d <= 1200; d++) backups.push({ id: backups.length + 1, ontvangen: new Date(NOW.getTime() - d * DAY).toISOString(), exitCode: d % 9 === 0 ? 1 : 0 });
  // Sealed as the service writes them (src/row-seal.ts): only sealed rows are kept.
  for (const r of runs) Object.assign(r, { zegel: zegel(r.job, r.gestart), eindzegel: eindzegel({ ...r, httpStatus: 200 }) });
  for (const b of backups) {
    b.zegel = backupZegel({ ontvangen: b.ontvangen, exitCode: b.exitCode, gelukt: b.exitCode === 0, bestandsnaam: null, grootte: null, foutmelding: null, bron: "host-cron" });
  }
  return { runs, backups };
}

async function fillPg(store: PgStore, h: { runs: Run[]; backups: Backup[] }): Promise<void> {
  for (let i = 0; i < h.runs.length; i += 1000) await store.db.insert(pgSchema.jobRuns).values(h.runs.slice(i, i + 1000).map((r) => ({ ...r, httpStatus: 200 })));
  for (let i = 0; i < h.backups.length; i += 1000)
    await store.db.insert(pgSchema.backupStatuses).values(h.backups.slice(i, i + 1000).map((b) => ({ ...b, gelukt: b.exitCode === 0, bron: "host-cron" })));
}

const pgIds = async (store: PgStore, table: "job_runs" | "backup_statuses") =>
  ((await store.sql.unsafe(`SELECT id FROM ${table} ORDER BY id`)) as { id: number }[]).map((r) => r.id);

/** What must stay, worked out independently of the rule's code: a window query over the rows. */
async function expectedRunsPg(store: PgStore): Promise<number[]> {
  const grens = new Date(NOW.getTime() - JOB_RUNS_BEWAAR_DAGEN * DAY).toISOString();
  const rows = (await store.sql`
    SELECT id FROM (
      SELECT id, gestart, uitkomst, beeindigd,
             row_number() OVER (PARTITION BY job ORDER BY gestart DESC, id DESC) AS n,
             row_number() OVER (PARTITION BY job, uitkomst = 'ok' AND beeindigd IS NOT NULL ORDER BY gestart DESC, id DESC) AS k
      FROM job_runs) r
    WHERE gestart >= ${grens} OR n = 1 OR (uitkomst = 'ok' AND beeindigd IS NOT NULL AND k <= ${KEEP_OK_RUNS})
    ORDER BY id`) as { id: number }[];
  return rows.map((r) => r.id);
}

describe("pruneOwnTablesPg", () => {
  test("keeps exactly the rows SQLite's pruneOwnTables keeps, with the same result and the same batches of PRUNE_BATCH", async () => {
    const h = history();
    const { store } = await freshStore();
    await fillPg(store, h);

    const env = makeTestEnv();
    try {
      env.store.sqlite.transaction(() => {
        for (let i = 0; i < h.runs.length; i += 500) env.store.db.insert(sqliteSchema.jobRuns).values(h.runs.slice(i, i + 500).map((r) => ({ ...r, httpStatus: 200 }))).run();
        for (let i = 0; i < h.backups.length; i += 500)
          env.store.db.insert(sqliteSchema.backupStatuses).values(h.backups.slice(i, i + 500).map((b) => ({ ...b, gelukt: b.exitCode === 0, bron: "host-cron" }))).run();
      })();
      const sqliteIds = (table: string) => (env.store.sqlite.query(`SELECT id FROM ${table} ORDER BY id`).all() as { id: number }[]).map((r) => r.id);
      expect(sqliteIds("job_runs")).toEqual(await pgIds(store, "job_runs"));
      const expectedRuns = await expectedRunsPg(store);

      const sqliteBatches: [string, number][] = [];
      const onSqlite = await pruneOwnTables(env.store, TEST_SEAL, NOW, { onBatch: (t, n) => sqliteBatches.push([t, n]) });
      const pgBatches: [string, number][] = [];
      const onPg = await pruneOwnTablesPg(store, TEST_SEAL, NOW, { onBatch: (t, n) => pgBatches.push([t, n]) });

      expect(onPg).toEqual(onSqlite);
      expect(onPg.jobRuns.grens).toBe(new Date(NOW.getTime() - JOB_RUNS_BEWAAR_DAGEN * DAY).toISOString());
      expect(onPg.backupStatuses.grens).toBe(new Date(NOW.getTime() - BACKUP_STATUSES_BEWAAR_DAGEN * DAY).toISOString());
      expect(await pgIds(store, "job_runs")).toEqual(sqliteIds("job_runs"));
      expect(await pgIds(store, "backup_statuses")).toEqual(sqliteIds("backup_statuses"));
      expect(await pgIds(store, "job_runs")).toEqual(expectedRuns);
      expect(onPg.jobRuns.verwijderd).toBe(h.runs.length - expectedRuns.length);

      // Several batches, each at most PRUNE_BATCH, the last one short; the same as on SQLite.
      expect(onPg.jobRuns.verwijderd).toBeGreaterThan(3 * PRUNE_BATCH);
      expect(onPg.backupStatuses.verwijderd).toBeGreaterThan(2 * PRUNE_BATCH);
      expect(pgBatches).toEqual(sqliteBatches);
      for (const table of ["job_runs", "backup_statuses"]) {
        const sizes = pgBatches.filter(([t]) => t === table).map(([, n]) => n);
        expect(sizes.slice(0, -1).every((n) => n === PRUNE_BATCH)).toBe(true);
        expect(sizes.at(-1)!).toBeLessThan(PRUNE_BATCH);
      }

      // Nothing more the second time.
      const again = await pruneOwnTablesPg(store, TEST_SEAL, NOW);
      expect([again.jobRuns.verwijderd, again.backupStatuses.verwijderd]).toEqual([0, 0]);
    } finally {
      await env.cleanup();
    }
  });

  test("cases by hand: ties at one moment go by id, an 'ok' without an end is no successful run, the newest backup stays however old, rows without a valid seal keep nothing; one row per batch", async () => {
    const { store } = await freshStore();
    const old = new Date(NOW.getTime() - 200 * DAY).toISOString();
    const older = new Date(NOW.getTime() - 300 * DAY).toISOString();
    const recent = new Date(NOW.getTime() - 10 * DAY).toISOString();
    const end = (iso: string) => new Date(Date.parse(iso) + 1000).toISOString();
    const runs: Run[] = (
      [
      // Job a: 13 successful runs at one old moment (ids 1–13) and then a failed one (14), all old.
      ...Array.from({ length: 13 }, (_, i): Run => ({ id: i + 1, job: "a", gestart: old, beeindigd: end(old), uitkomst: "ok" })),
      { id: 14, job: "a", gestart: old, beeindigd: end(old), uitkomst: "fout" },
      // Job b: an 'ok' without an end (15) is not successful; its newest run (16) is recent.
      { id: 15, job: "b", gestart: older, beeindigd: null, uitkomst: "ok" },
      { id: 16, job: "b", gestart: old, beeindigd: null, uitkomst: "bezig" },
      { id: 17, job: "b", gestart: recent, beeindigd: end(recent), uitkomst: "afwijking" },
      // Job c: one old run, its newest.
      { id: 18, job: "c", gestart: older, beeindigd: end(older), uitkomst: "fout" },
      ] as Run[]
    ).map((r) => ({ ...r, zegel: zegel(r.job, r.gestart), eindzegel: eindzegel({ ...r, httpStatus: null }) }));
    // A database writer's rows, unsealed, newer than job a's real ones but past the period: they keep nothing, and go.
    const forged = new Date(NOW.getTime() - 100 * DAY).toISOString();
    for (let i = 0; i < 11; i++) runs.push({ id: 19 + i, job: "a", gestart: forged, beeindigd: end(forged), uitkomst: "ok" });
    await store.db.insert(pgSchema.jobRuns).values(runs);
    const backup = (id: number, ontvangen: string, exitCode: number, sealed = true) => {
      const b = { ontvangen, exitCode, gelukt: exitCode === 0, bestandsnaam: null, grootte: null, foutmelding: null, bron: "host-cron" };
      return { id, ...b, zegel: sealed ? backupZegel(b) : null };
    };
    await store.db.insert(pgSchema.backupStatuses).values([
      backup(1, older, 0),
      backup(2, old, 0),
      backup(3, old, 65), // same moment, higher id: the newest sealed
      backup(4, older, 0),
      backup(5, forged, 0, false), // newer, but unsealed: goes
    ]);
    const batches: [string, number][] = [];
    const r = await pruneOwnTablesPg(store, TEST_SEAL, NOW, { batch: 1, onBatch: (t, n) => batches.push([t, n]) });
    // a: 14 (newest, highest id at the shared moment) and 4–13 (the ten newest successful); b: 17 only
    // (15 never ended, 16 died); c: 18.
    expect(await pgIds(store, "job_runs")).toEqual([4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 17, 18]);
    expect(await pgIds(store, "backup_statuses")).toEqual([3]);
    expect([r.jobRuns.verwijderd, r.backupStatuses.verwijderd]).toEqual([16, 4]);
    const expected: [string, number][] = [
      ...Array.from({ length: 16 }, (): [string, number] => ["job_runs", 1]),
      ["job_runs", 0],
      ...Array.from({ length: 4 }, (): [string, number] => ["backup_statuses", 1]),
      ["backup_statuses", 0],
    ];
    expect(batches).toEqual(expected);
  });

  test("two pruners at once (two instances) delete every prunable row once between them", async () => {
    const h = history();
    const { store, url } = await freshStore();
    await fillPg(store, h);
    const expectedRuns = await expectedRunsPg(store);
    const other = await openPgStore(url);
    closers.push(() => other.close());
    const [a, b] = await Promise.all([pruneOwnTablesPg(store, TEST_SEAL, NOW, { batch: 50 }), pruneOwnTablesPg(other, TEST_SEAL, NOW, { batch: 50 })]);
    expect(a.jobRuns.verwijderd + b.jobRuns.verwijderd).toBe(h.runs.length - expectedRuns.length);
    expect(await pgIds(store, "job_runs")).toEqual(expectedRuns);
    expect(a.backupStatuses.verwijderd + b.backupStatuses.verwijderd).toBe(h.backups.length - (await pgIds(store, "backup_statuses")).length);
    expect((await pgIds(store, "backup_statuses")).length).toBe(90); // received 1 to 90 days ago (90 days is not older than grens)
  });
});

describe("integrityCheckPg / maintainPg", () => {
  test("without amcheck: skipped, with why and how; the hint, run by a superuser, makes the check run and pass", async () => {
    const { store, url, name } = await freshStore();
    const before = await integrityCheckPg(store.sql);
    if (before.status !== "overgeslagen") throw new Error(`expected skipped, got ${before.status}`);
    expect(before.reden).toContain("niet geïnstalleerd");
    expect(before.aanwijzing).toContain("CREATE EXTENSION amcheck;");
    expect(before.aanwijzing).toContain(`"${name}"`);

    // The rest of the maintenance goes on without it.
    await fillPg(store, history());
    const report = await maintainPg(store, TEST_SEAL, NOW);
    expect(report.ok).toBe(true);
    expect(report.integriteit.status).toBe("overgeslagen");
    expect(report.opgeschoond!.jobRuns.verwijderd).toBeGreaterThan(0);
    expect(Value.Check(PgMaintenanceReport, report)).toBe(true);
    // The service never installed it.
    expect(await store.sql`SELECT 1 FROM pg_extension WHERE extname = 'amcheck'`).toHaveLength(0);

    await superuser(url).unsafe(before.aanwijzing.slice(before.aanwijzing.indexOf("CREATE EXTENSION")));
    const after = await integrityCheckPg(store.sql);
    if (after.status !== "ok") throw new Error(JSON.stringify(after));
    // Every B-tree index of nachtwacht's tables.
    const all = (await store.sql`
      SELECT indexname FROM pg_indexes WHERE schemaname = 'public' AND tablename IN ${store.sql(OWN_TABLES)} ORDER BY indexname`) as { indexname: string }[];
    expect(after.indexen.toSorted()).toEqual(all.map((r) => r.indexname));
    expect(after.indexen).toContain("job_runs_job_gestart_idx");
    expect(after.indexen).toContain("audit_entries_tenant_id_seq_pk");
  });

  test("amcheck installed but the service's role may not run it: skipped with the GRANT, which works", async () => {
    const { url } = await freshStore();
    const su = superuser(url);
    await su`CREATE EXTENSION amcheck`;
    await su.unsafe(`DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'dienst') THEN CREATE ROLE dienst LOGIN; END IF; END $$`);
    const dienst = new SQL(url.replace("nw@", "dienst@"), { max: 1 });
    closers.push(() => dienst.close());
    const r = await integrityCheckPg(dienst);
    if (r.status !== "overgeslagen") throw new Error(JSON.stringify(r));
    expect(r.reden).toContain('"dienst" mag bt_index_check niet uitvoeren');
    expect(r.aanwijzing).toContain('TO "dienst";');
    await su.unsafe(r.aanwijzing.slice(r.aanwijzing.indexOf("GRANT")));
    const granted = await integrityCheckPg(dienst);
    expect(granted.status).toBe("ok");
  });

  test("with amcheck: ok, and then the pruning runs", async () => {
    const { store, url } = await freshStore();
    await fillPg(store, history());
    await superuser(url)`CREATE EXTENSION amcheck`;
    const report = await maintainPg(store, TEST_SEAL, NOW);
    expect(report.ok).toBe(true);
    expect(report.integriteit.status).toBe("ok");
    expect(report.opgeschoond!.jobRuns.verwijderd).toBeGreaterThan(3 * PRUNE_BATCH);
    expect(await pgIds(store, "job_runs")).toEqual(await expectedRunsPg(store));
    expect(Value.Check(PgMaintenanceReport, report)).toBe(true);
  });

  test("with amcheck, an index whose order no longer holds is reported, and nothing is pruned or analysed", async () => {
    const { store, url } = await freshStore();
    await fillPg(store, history());
    const su = superuser(url);
    await su`CREATE EXTENSION amcheck`;
    // A B-tree built with one comparison and then read with its reverse: what a changed
    // collation or a bad IMMUTABLE function does to an index, which amcheck exists to find.
    await su.unsafe(`
      CREATE FUNCTION nw_cmp(int4, int4) RETURNS int4 IMMUTABLE LANGUAGE sql AS 'SELECT btint4cmp($1, $2)';
      CREATE OPERATOR CLASS nw_ops FOR TYPE int4 USING btree AS
        OPERATOR 1 <, OPERATOR 2 <=, OPERATOR 3 =, OPERATOR 4 >=, OPERATOR 5 >, FUNCTION 1 nw_cmp(int4, int4);
      CREATE INDEX job_runs_omgekeerd_idx ON job_runs (id nw_ops);
      CREATE OR REPLACE FUNCTION nw_cmp(int4, int4) RETURNS int4 IMMUTABLE LANGUAGE sql AS 'SELECT btint4cmp($2, $1)';`);
    const runsBefore = await pgIds(store, "job_runs");
    const report = await maintainPg(store, TEST_SEAL, NOW);
    if (report.integriteit.status !== "problemen") throw new Error(JSON.stringify(report.integriteit));
    expect(report.ok).toBe(false);
    expect(report.integriteit.meldingen).toHaveLength(1);
    expect(report.integriteit.meldingen[0]).toStartWith("job_runs_omgekeerd_idx: ");
    expect(report.integriteit.meldingen[0]).toContain("invariant violated");
    expect(report.integriteit.indexen).toContain("job_runs_job_gestart_idx");
    expect(report.opgeschoond).toBeNull();
    expect(report.geanalyseerd).toEqual([]);
    expect(await pgIds(store, "job_runs")).toEqual(runsBefore);
    const [{ n }] = (await store.sql`SELECT count(*)::int AS n FROM pg_stat_user_tables WHERE last_analyze IS NOT NULL`) as [{ n: number }];
    expect(n).toBe(0);
    expect(Value.Check(PgMaintenanceReport, report)).toBe(true);
  });

  test("ANALYZE leaves statistics on every own table; sizes before, after and per table; what is skipped and why", async () => {
    const { store } = await freshStore();
    await fillPg(store, history());
    const analysed = async () =>
      ((await store.sql`SELECT relname FROM pg_stat_user_tables WHERE last_analyze IS NOT NULL ORDER BY relname`) as { relname: string }[]).map((r) => r.relname);
    expect(await analysed()).toEqual([]);
    expect(await store.sql`SELECT 1 FROM pg_stats WHERE tablename = 'job_runs'`).toHaveLength(0);

    const report = await maintainPg(store, TEST_SEAL, NOW);
    expect(report.geanalyseerd).toEqual(OWN_TABLES);
    expect(await analysed()).toEqual(OWN_TABLES.toSorted());
    // The planner's statistics themselves: a row per column of a table with rows.
    const stats = (await store.sql`SELECT attname FROM pg_stats WHERE tablename = 'job_runs' ORDER BY attname`) as { attname: string }[];
    expect(stats.map((s) => s.attname)).toContain("gestart");
    const [{ reltuples }] = (await store.sql`SELECT reltuples::float8 AS reltuples FROM pg_class WHERE relname = 'job_runs'`) as [{ reltuples: number }];
    expect(Number(reltuples)).toBe((await pgIds(store, "job_runs")).length);

    expect(OWN_TABLES).toContain("job_runs");
    expect(OWN_TABLES).toContain("audit_entries");
    expect(report.grootteVoor).toBeGreaterThan(1_000_000);
    expect(report.grootteNa).toBeGreaterThan(1_000_000);
    const [{ now }] = (await store.sql`SELECT pg_database_size(current_database())::float8 AS now`) as [{ now: number }];
    expect(report.grootteNa).toBe(Number(now));
    expect(report.tabellen.map((r) => r.tabel).toSorted()).toEqual(OWN_TABLES.toSorted());
    for (const { tabel, bytes } of report.tabellen) {
      const [{ size }] = (await store.sql`SELECT pg_total_relation_size(${tabel}::regclass)::float8 AS size`) as [{ size: number }];
      expect(bytes).toBe(Number(size));
      expect(bytes).toBeGreaterThanOrEqual(8192); // every table has a primary key: at least its index's metapage
    }
    const bytes = report.tabellen.map((r) => r.bytes);
    expect(bytes).toEqual(bytes.toSorted((a, b) => b - a));
    expect(report.tabellen[0]!.tabel).toBe("job_runs");

    expect(report.autovacuum).toBe(true);
    expect(report.overgeslagen).toHaveLength(3);
    expect(report.overgeslagen[0]).toContain("VACUUM FULL");
    expect(report.overgeslagen[1]).toContain("WAL-checkpoint");
    expect(report.overgeslagen[2]).toContain("incrementeel vacuum");
    expect(Value.Check(PgMaintenanceReport, report)).toBe(true);
  });
});
