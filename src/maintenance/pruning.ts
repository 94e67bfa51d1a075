// The pruning of nachtwacht's own history tables (job_runs, backup_statuses), which
// db-onderhoud does on either store: how long rows are kept, which are kept whatever
// their age, and what the job reports. Here once, for the SQLite job
// (src/jobs/db-onderhoud.ts) and the PostgreSQL work (src/pg/maintenance.ts); each
// runs the queries its own way.
import { and, desc, eq, lt, ne, notInArray, type Column } from "drizzle-orm";
import { t, type Static } from "elysia";
import { dateTime, integer } from "../jobs/schema.ts";
import type { BackupColumns, RowSeal, SealedRunRow } from "../row-seal.ts";
import { DAY_MS } from "../time.ts";

/**
 * job_runs older than this many days are pruned, except what the checks and reports read:
 * per job its newest sealed run (taken-controle, the daily report, /metrics) and its
 * newest KEEP_OK_RUNS sealed successful runs (the daily report's usual duration), however
 * old. Only sealed rows count (src/row-seal.ts): rows a database writer made, however
 * new, make no real run go.
 */
export const JOB_RUNS_BEWAAR_DAGEN = 90;
/** Successful runs kept per job beyond the period: the daily report's median duration reads that many. */
export const KEEP_OK_RUNS = 10;
/** backup_statuses older than this many days are pruned; the newest sealed one is always kept (backup-controle, the daily report). */
export const BACKUP_STATUSES_BEWAAR_DAGEN = 90;
/** Rows per pruning transaction: each one is a short write, and writers get the lock in between. */
export const PRUNE_BATCH = 500;

const Opgeschoond = t.Object({
  verwijderd: integer({ minimum: 0, description: "Verwijderde rijen." }),
  grens: dateTime({ description: "Rijen van vóór dit tijdstip zijn verwijderd (op de bewaarde na)." }),
  bewaarDagen: integer({ minimum: 1 }),
});

export const Opschoning = t.Object(
  {
    jobRuns: Opgeschoond,
    backupStatuses: Opgeschoond,
  },
  {
    description:
      `Wat van de eigen geschiedenis is verwijderd: job_runs ouder dan ${JOB_RUNS_BEWAAR_DAGEN} dagen, behalve per taak de nieuwste verzegelde run en de ` +
      `${KEEP_OK_RUNS} nieuwste verzegelde geslaagde; backup_statuses ouder dan ${BACKUP_STATUSES_BEWAAR_DAGEN} dagen, behalve de nieuwste verzegelde. In korte transacties van ` +
      `hoogstens ${PRUNE_BATCH} rijen.`,
  },
);
export type Opschoning = Static<typeof Opschoning>;

/**
 * The pruning rule, written once over either schema's columns (db/schema.ts,
 * db/schema-pg.ts): Drizzle conditions and orders, which each dialect renders for
 * itself. Only the running of the queries differs per database.
 */
export interface JobRunColumns {
  id: Column;
  job: Column;
  gestart: Column;
}
export interface BackupStatusColumns {
  id: Column;
  ontvangen: Column;
}

export const pruneRule = {
  /** Rows older than these (ISO 8601 UTC) are pruned, except the ones kept below. */
  grenzen(now: Date): { jobRuns: string; backupStatuses: string } {
    return {
      jobRuns: new Date(now.getTime() - JOB_RUNS_BEWAAR_DAGEN * DAY_MS).toISOString(),
      backupStatuses: new Date(now.getTime() - BACKUP_STATUSES_BEWAAR_DAGEN * DAY_MS).toISOString(),
    };
  },
  /** A job's runs; newest first (runsNewestFirst), the first sealed one is kept whatever its age (keptRunsOf). */
  ofJob: (c: JobRunColumns, job: string) => eq(c.job, job),
  runsNewestFirst: (c: JobRunColumns) => [desc(c.gestart), desc(c.id)],
  /** The job_runs rows to delete: older than grens and not kept. */
  prunableRun: (c: JobRunColumns, grens: string, keep: number[]) => and(lt(c.gestart, grens), keep.length > 0 ? notInArray(c.id, keep) : undefined),
  /** backup_statuses newest first (backup-controle's newestBackup): the first sealed one is kept. */
  backupsNewestFirst: (c: BackupStatusColumns) => [desc(c.ontvangen), desc(c.id)],
  /** The backup_statuses rows to delete: older than grens, except the newest sealed one. */
  prunableBackup: (c: BackupStatusColumns, grens: string, newest: number | null) =>
    and(lt(c.ontvangen, grens), newest !== null ? ne(c.id, newest) : undefined),
};

/** Rows read at a time when looking for the rows kept. */
const KEEP_PAGE = 50;

/** A page of rows newest first (runsNewestFirst, backupsNewestFirst): `limit` rows from `offset`. */
export type NewestFirstPage<R> = (offset: number, limit: number) => Promise<R[]>;

/**
 * The runs of one job kept whatever their age: its newest sealed run and its
 * KEEP_OK_RUNS newest sealed successful ones, read a page at a time until found.
 */
export async function keptRunsOf(page: NewestFirstPage<SealedRunRow & { id: number }>, seal: RowSeal): Promise<number[]> {
  const keep = new Set<number>();
  let newest = false;
  let ok = 0;
  for (let offset = 0; ; offset += KEEP_PAGE) {
    const rows = await page(offset, KEEP_PAGE);
    for (const r of rows) {
      if (!seal.sealed(r)) continue;
      if (!newest) {
        newest = true;
        keep.add(r.id);
      }
      if (ok < KEEP_OK_RUNS && r.uitkomst === "ok" && r.beeindigd !== null) {
        ok++;
        keep.add(r.id);
      }
      if (ok >= KEEP_OK_RUNS) return [...keep];
    }
    if (rows.length < KEEP_PAGE) return [...keep];
  }
}

/** The backup report kept whatever its age: the newest sealed one (null: none), read a page at a time until found. */
export async function keptBackupOf(page: NewestFirstPage<BackupColumns & { id: number; zegel: string | null }>, seal: RowSeal): Promise<number | null> {
  for (let offset = 0; ; offset += KEEP_PAGE) {
    const rows = await page(offset, KEEP_PAGE);
    const sealed = rows.find((r) => seal.backupSealed(r));
    if (sealed) return sealed.id;
    if (rows.length < KEEP_PAGE) return null;
  }
}

/**
 * Prunes nachtwacht's own history tables (JOB_RUNS_BEWAAR_DAGEN, BACKUP_STATUSES_BEWAAR_DAGEN),
 * keeping what taken-controle, backup-controle and the reports read, in short write
 * transactions (PRUNE_BATCH rows each).
 */
export interface PruneOptions {
  /** Rows per transaction (PRUNE_BATCH). */
  batch?: number;
  /** Called after each committed transaction with the rows it deleted (tests). */
  onBatch?: (table: "job_runs" | "backup_statuses", rows: number) => void;
}

/** The pruning's result on either store. */
export function opschoning(grenzen: { jobRuns: string; backupStatuses: string }, runs: number, backups: number): Opschoning {
  return {
    jobRuns: { verwijderd: runs, grens: grenzen.jobRuns, bewaarDagen: JOB_RUNS_BEWAAR_DAGEN },
    backupStatuses: { verwijderd: backups, grens: grenzen.backupStatuses, bewaarDagen: BACKUP_STATUSES_BEWAAR_DAGEN },
  };
}
