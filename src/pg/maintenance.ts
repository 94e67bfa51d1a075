// db-onderhoud's work on PostgreSQL (DATABASE_URL=postgres://…), which the job
// (src/jobs/db-onderhoud.ts) calls there: what fits PostgreSQL of what it does on SQLite:
//
// - Integrity: PostgreSQL has no quick_check. The amcheck extension's bt_index_check
//   checks a B-tree index's structure (as quick_check does, not whether each heap row is
//   in it: heapallindexed false) under an ACCESS SHARE lock, so readers and writers go on.
//   The service never installs amcheck itself (CREATE EXTENSION needs a superuser): without
//   it, or without EXECUTE on bt_index_check, the check is reported as skipped with what an
//   operator runs to enable it.
// - Pruning of job_runs and backup_statuses: the same rule as on SQLite (pruneRule in
//   src/maintenance/pruning.ts: the same Drizzle conditions over db/schema-pg.ts's
//   columns), in batches of PRUNE_BATCH rows, each one DELETE statement and so its own
//   transaction. Each batch continues from the previous one's highest id, so it never
//   steps over the rows the earlier batches left dead (VACUUM comes later), and takes its
//   rows FOR UPDATE SKIP LOCKED: it never waits for a row the host application is
//   updating (that row is left for the next week) and a second deleter never has a row
//   counted twice. No pause between batches: PostgreSQL has no database-wide write lock
//   that writers would wait for.
// - Statistics: ANALYZE of each of nachtwacht's tables (SQLite: PRAGMA optimize).
// - Sizes: pg_database_size before and after, per table pg_total_relation_size.
//
// Left out, and named in the report's `overgeslagen`: VACUUM FULL, the WAL checkpoint and
// SQLite's incremental vacuum and its conversion.
import type { SQL } from "bun";
import { and, getTableName, gt, inArray, is, type SQLWrapper } from "drizzle-orm";
import { PgTable } from "drizzle-orm/pg-core";
import { t, type Static } from "elysia";
import * as schema from "../../db/schema-pg.ts";
import { backupStatuses, jobRuns } from "../../db/schema-pg.ts";
import { KEEP_OK_RUNS, keptBackupOf, keptRunsOf, opschoning, Opschoning, PRUNE_BATCH, pruneRule, type PruneOptions } from "../maintenance/pruning.ts";
import { sealedBackupColumns, sealedRunColumns, type RowSeal } from "../row-seal.ts";
import { integer, nullable } from "../jobs/schema.ts";
import { log } from "../logger.ts";
import type { PgDb, PgStore } from "./store.ts";

/** nachtwacht's own tables: every table of db/schema-pg.ts. */
export const OWN_TABLES: string[] = (Object.values(schema) as unknown[])
  .filter((v): v is PgTable => is(v, PgTable))
  .map((table) => getTableName(table))
  .sort();

/** bt_index_check reports at most this many problems; more add nothing an operator needs (as quick_check's). */
const MAX_PROBLEMS = 100;

const IntegriteitOk = t.Object({
  status: t.Literal("ok"),
  indexen: t.Array(t.String(), { description: "De gecontroleerde B-tree-indexen van nachtwachts tabellen." }),
});
const IntegriteitProblemen = t.Object({
  status: t.Literal("problemen"),
  indexen: t.Array(t.String(), { description: "De gecontroleerde B-tree-indexen van nachtwachts tabellen." }),
  meldingen: t.Array(t.String(), { description: "Per index met een probleem: de index en de melding van amcheck (hoogstens 100)." }),
});
const IntegriteitOvergeslagen = t.Object({
  status: t.Literal("overgeslagen"),
  reden: t.String({ description: "Waarom de controle niet kon." }),
  aanwijzing: t.String({ description: "Wat een beheerder uitvoert om haar mogelijk te maken." }),
});
export const IntegriteitPg = t.Union([IntegriteitOk, IntegriteitProblemen, IntegriteitOvergeslagen], {
  description:
    "PostgreSQL kent geen quick_check: de structuur van nachtwachts B-tree-indexen wordt gecontroleerd met bt_index_check van de extensie amcheck, " +
    "als die in de database is geïnstalleerd en de service haar mag uitvoeren; anders `overgeslagen`, met de reden en hoe een beheerder haar installeert.",
});
export type IntegriteitPg = Static<typeof IntegriteitPg>;

export const TabelGrootte = t.Object({
  tabel: t.String(),
  bytes: integer({ minimum: 0, description: "pg_total_relation_size: de tabel met haar indexen en TOAST." }),
});

export const PgMaintenanceReport = t.Object({
  ok: t.Boolean({ description: "false als de integriteitscontrole problemen vond." }),
  integriteit: IntegriteitPg,
  opgeschoond: nullable(Opschoning, { description: "null als de integriteitscontrole problemen vond: in een beschadigde database wordt niets verwijderd." }),
  geanalyseerd: t.Array(t.String(), {
    description: "Tabellen waarvan ANALYZE de statistieken van de planner vernieuwde; leeg als de integriteitscontrole problemen vond.",
  }),
  autovacuum: t.Boolean({
    description: "De instelling autovacuum van de server. Alleen als die aan staat wordt de ruimte van verwijderde rijen vanzelf vrijgegeven voor hergebruik.",
  }),
  grootteVoor: integer({ minimum: 0, description: "Bytes: pg_database_size van de database, vóór het onderhoud." }),
  grootteNa: integer({
    minimum: 0,
    description: "Bytes: pg_database_size na het onderhoud. Verwijderen maakt de bestanden niet kleiner (zie `overgeslagen`): reken niet op een verschil.",
  }),
  tabellen: t.Array(TabelGrootte, { description: "Per tabel van nachtwacht de grootte na het onderhoud, grootste eerst." }),
  overgeslagen: t.Array(t.String(), { description: "Wat db-onderhoud op SQLite doet en hier niet van toepassing is, en waarom." }),
});
export type PgMaintenanceReport = Static<typeof PgMaintenanceReport>;

const OVERGESLAGEN = [
  "Geen VACUUM FULL om ruimte aan het bestandssysteem terug te geven: die herschrijft een tabel onder een ACCESS EXCLUSIVE-vergrendeling, " +
    "zodat elke lezer en schrijver wacht zolang hij duurt. Autovacuum geeft de ruimte van verwijderde rijen vrij voor hergebruik, zodat de tabellen niet verder groeien.",
  "Geen WAL-checkpoint: de checkpointer van de server schrijft de WAL zelf terug naar de tabellen en ruimt oude WAL-segmenten op " +
    "(checkpoint_timeout, max_wal_size); een CHECKPOINT vraagt bovendien rechten die de service niet hoort te hebben.",
  "Geen incrementeel vacuum en geen omzetting naar incrementeel auto-vacuum: dat zijn begrippen van het SQLite-bestand (vrije pagina's). " +
    "PostgreSQL houdt de vrije ruimte per tabel bij en autovacuum vraagt geen omzetting.",
];

/** A quoted SQL identifier. */
const ident = (name: string) => `"${name.replace(/"/g, '""')}"`;

/** The job_runs rows kept whatever their age (keptRunsOf, as on SQLite): per job the newest sealed run and the newest KEEP_OK_RUNS sealed successful ones. */
async function keptJobRunsPg(db: PgDb, seal: RowSeal): Promise<number[]> {
  const keep: number[] = [];
  const jobs = await db.selectDistinct({ job: jobRuns.job }).from(jobRuns);
  for (const { job } of jobs) {
    // Each page an index range on (job, gestart).
    const page = (offset: number, limit: number) =>
      db
        .select({ id: jobRuns.id, ...sealedRunColumns(jobRuns) })
        .from(jobRuns)
        .where(pruneRule.ofJob(jobRuns, job))
        .orderBy(...pruneRule.runsNewestFirst(jobRuns))
        .limit(limit)
        .offset(offset);
    keep.push(...(await keptRunsOf(page, seal)));
  }
  return keep;
}

/**
 * Deletes the rows of `table` that match `where`, in id order, one DELETE statement of at
 * most `batch` rows at a time (locked rows skipped: another instance's run takes them),
 * until a batch comes back short; returns how many rows went.
 */
async function deleteInBatchesPg(db: PgDb, table: typeof jobRuns | typeof backupStatuses, where: SQLWrapper | undefined, batch: number, onBatch: (rows: number) => void): Promise<number> {
  let total = 0;
  let after: number | null = null;
  for (;;) {
    const pick = db
      .select({ id: table.id })
      .from(table)
      .where(and(where, after === null ? undefined : gt(table.id, after)))
      .orderBy(table.id)
      .limit(batch)
      .for("update", { skipLocked: true });
    const ids = (await db.delete(table).where(inArray(table.id, pick)).returning({ id: table.id })).map((r) => r.id);
    onBatch(ids.length);
    total += ids.length;
    if (ids.length < batch) return total;
    after = Math.max(...ids);
  }
}

/**
 * pruneOwnTables on PostgreSQL: job_runs older than JOB_RUNS_BEWAAR_DAGEN except per job
 * its newest sealed run and its KEEP_OK_RUNS newest sealed successful ones, backup_statuses
 * older than BACKUP_STATUSES_BEWAAR_DAGEN except the newest sealed one; the same rule
 * (pruneRule, keptRunsOf, keptBackupOf) and result.
 */
export async function pruneOwnTablesPg(store: PgStore, seal: RowSeal, now: Date, o: PruneOptions = {}): Promise<Opschoning> {
  const batch = o.batch ?? PRUNE_BATCH;
  const { db } = store;
  const grenzen = pruneRule.grenzen(now);

  const keep = await keptJobRunsPg(db, seal);
  const runs = await deleteInBatchesPg(db, jobRuns, pruneRule.prunableRun(jobRuns, grenzen.jobRuns, keep), batch, (n) => o.onBatch?.("job_runs", n));
  const newest = await keptBackupOf(
    (offset, limit) =>
      db
        .select({ id: backupStatuses.id, ...sealedBackupColumns(backupStatuses) })
        .from(backupStatuses)
        .orderBy(...pruneRule.backupsNewestFirst(backupStatuses))
        .limit(limit)
        .offset(offset),
    seal,
  );
  const backups = await deleteInBatchesPg(
    db,
    backupStatuses,
    pruneRule.prunableBackup(backupStatuses, grenzen.backupStatuses, newest),
    batch,
    (n) => o.onBatch?.("backup_statuses", n),
  );
  return opschoning(grenzen, runs, backups);
}

/**
 * bt_index_check (heapallindexed false) on every B-tree index of nachtwacht's tables, or
 * `overgeslagen` when amcheck is not installed in this database or the service may not
 * run it. Never installs it: CREATE EXTENSION amcheck needs a superuser.
 */
export async function integrityCheckPg(sql: SQL): Promise<IntegriteitPg> {
  const [{ database, rol }] = (await sql`SELECT current_database() AS database, current_user AS rol`) as [{ database: string; rol: string }];
  const grant = `GRANT EXECUTE ON FUNCTION bt_index_check(regclass, boolean) TO ${ident(rol)};`;
  const [ext] = (await sql`
    SELECT n.nspname AS schema FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'amcheck'`) as { schema: string }[];
  if (!ext) {
    const available = ((await sql`SELECT 1 FROM pg_available_extensions WHERE name = 'amcheck'`) as unknown[]).length > 0;
    return {
      status: "overgeslagen",
      reden: available
        ? `De extensie amcheck is niet geïnstalleerd in database ${ident(database)}; de service installeert haar niet zelf, want dat vraagt superuser-rechten.`
        : "De extensie amcheck is niet beschikbaar op deze server (bij PostgreSQL zelf meegeleverd als contrib-module; soms een apart pakket).",
      aanwijzing:
        (available ? "" : "Installeer eerst de contrib-module van PostgreSQL op de server. ") +
        `Voer als superuser in database ${ident(database)} uit: CREATE EXTENSION amcheck; ${grant}`,
    };
  }
  const fn = `${ident(ext.schema)}.bt_index_check`;
  const [{ mag }] = (await sql`SELECT has_function_privilege(${`${fn}(regclass, boolean)`}, 'EXECUTE') AS mag`) as [{ mag: boolean }];
  if (!mag) {
    return {
      status: "overgeslagen",
      reden: `De extensie amcheck is geïnstalleerd, maar rol ${ident(rol)} mag bt_index_check niet uitvoeren (amcheck geeft dat recht standaard aan niemand).`,
      aanwijzing: `Voer als superuser in database ${ident(database)} uit: GRANT EXECUTE ON FUNCTION ${fn}(regclass, boolean) TO ${ident(rol)};`,
    };
  }

  const indexes = (await sql`
    SELECT i.indexrelid::regclass::text AS naam, i.indisvalid AS geldig
    FROM pg_index i
    JOIN pg_class ic ON ic.oid = i.indexrelid
    JOIN pg_am am ON am.oid = ic.relam
    WHERE am.amname = 'btree'
      AND i.indrelid IN (SELECT to_regclass(quote_ident(n)) FROM unnest(${OWN_TABLES}::text[]) AS n)
    ORDER BY 1`) as { naam: string; geldig: boolean }[];
  const meldingen: string[] = [];
  for (const { naam, geldig } of indexes) {
    if (meldingen.length >= MAX_PROBLEMS) break;
    if (!geldig) {
      // bt_index_check refuses an invalid index (a CREATE INDEX CONCURRENTLY that failed): a finding in itself.
      meldingen.push(`${naam}: de index is ongeldig (pg_index.indisvalid = false); bouw hem opnieuw met REINDEX INDEX CONCURRENTLY.`);
      continue;
    }
    try {
      await sql.unsafe(`SELECT ${fn}($1::regclass, false)`, [naam]);
    } catch (e) {
      meldingen.push(`${naam}: ${(e instanceof Error ? e.message : String(e)).slice(0, 500)}`);
    }
  }
  const indexen = indexes.map((i) => i.naam);
  return meldingen.length === 0 ? { status: "ok", indexen } : { status: "problemen", indexen, meldingen };
}

/** pg_database_size of this database, in bytes (db-onderhoud before and after, the daily report). */
export async function databaseSize(sql: SQL): Promise<number> {
  const [{ bytes }] = (await sql`SELECT pg_database_size(current_database())::float8 AS bytes`) as [{ bytes: number }];
  return Number(bytes);
}

async function tableSizes(sql: SQL): Promise<{ tabel: string; bytes: number }[]> {
  const rows = (await sql`
    SELECT n AS tabel, pg_total_relation_size(r)::float8 AS bytes
    FROM unnest(${OWN_TABLES}::text[]) AS n, to_regclass(quote_ident(n)) AS r
    WHERE r IS NOT NULL
    ORDER BY 2 DESC, 1`) as { tabel: string; bytes: number }[];
  return rows.map((r) => ({ tabel: r.tabel, bytes: Number(r.bytes) }));
}

/**
 * db-onderhoud's work on PostgreSQL: integrity check (amcheck, when installed), the
 * pruning of the own history tables, ANALYZE, and the sizes. As on SQLite, nothing is
 * deleted or written when the integrity check finds problems.
 */
export async function maintainPg(store: PgStore, seal: RowSeal, now: Date): Promise<PgMaintenanceReport> {
  const { sql } = store;
  const grootteVoor = await databaseSize(sql);
  const [{ autovacuum }] = (await sql`SELECT current_setting('autovacuum')::boolean AS autovacuum`) as [{ autovacuum: boolean }];
  const integriteit = await integrityCheckPg(sql);
  const ok = integriteit.status !== "problemen";
  let opgeschoond: Opschoning | null = null;
  const geanalyseerd: string[] = [];
  if (ok) {
    opgeschoond = await pruneOwnTablesPg(store, seal, now);
    // One table per statement, each its own short transaction. ANALYZE reads a sample of
    // the rows under a SHARE UPDATE EXCLUSIVE lock: readers and writers go on.
    for (const tabel of OWN_TABLES) {
      await sql.unsafe(`ANALYZE ${ident(tabel)}`);
      geanalyseerd.push(tabel);
    }
  } else {
    log("warn", "pg maintenance: the integrity check found problems; nothing pruned or analysed", { meldingen: integriteit.meldingen.slice(0, 10) });
  }
  const tabellen = await tableSizes(sql);
  return {
    ok,
    integriteit,
    opgeschoond,
    geanalyseerd,
    autovacuum,
    grootteVoor,
    grootteNa: await databaseSize(sql),
    tabellen,
    overgeslagen: autovacuum
      ? [...OVERGESLAGEN]
      : [...OVERGESLAGEN, "Let op: autovacuum staat uit op deze server, dus de ruimte van verwijderde rijen wordt niet vanzelf vrijgegeven; zet het aan (autovacuum = on)."],
  };
}
