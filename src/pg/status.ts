// The reads (and the one write) behind backup-status, backup-controle,
// beveiligingslog-analyse, taken-controle and /metrics on PostgreSQL. The rules they
// feed live once, for both stores: statusesOf (src/schedule-due.ts),
// backupOverdue (src/jobs/backup-controle.ts), offenderRule
// (src/jobs/beveiligingslog-analyse.ts). Only the reading differs from SQLite.
import { and, count, desc, eq, isNotNull, lt, sql } from "drizzle-orm";
import { backupStatuses, jobRuns, loginAttempts, serviceMeta } from "../../db/schema-pg.ts";
import { receivedBy, type NewestBackup } from "../jobs/backup-controle.ts";
import { offenderRule, SEEN_KEY, type SeenState, type StoredIds } from "../jobs/beveiligingslog-analyse.ts";
import type { JobContext } from "../jobs/job.ts";
import { statusesOf, type JobStatus, type NewestRun } from "../schedule-due.ts";
import { SCHEDULE } from "../schedule.ts";
import { lastRunOf, runsOfJob, type LastRun } from "../job-runs.ts";
import { liveLeasesPg } from "./job-lease.ts";
import { LOCK_BACKUP_WITNESS, LOCK_LOGIN_IDS, LOCK_NAMESPACE, putMetaPg, type PgDb, type PgDbTx, type PgStore } from "./store.ts";
import { INSTALLED, NEWEST_ROWS, newestSealedBackup, sealedBackupColumns, sealedRunColumns, type RowSeal, type SealedBackup } from "../row-seal.ts";

/** The sealed first start of the service on this database (installedAt on SQLite); null when the row is gone or its seal does not hold. */
export async function installedAtPg(db: PgDb | PgDbTx, seal: RowSeal): Promise<Date | null> {
  const [row] = await db.select({ value: serviceMeta.value, zegel: serviceMeta.zegel }).from(serviceMeta).where(eq(serviceMeta.key, INSTALLED));
  return row && seal.installedSealed(row) ? new Date(row.value) : null;
}

/** A job's NEWEST_ROWS newest rows that count at `now` (or, `future`, dated later), by start then id (newestRunRows on SQLite): an index range on (job, gestart). */
export function newestRunRowsPg(db: PgDb | PgDbTx, job: string, now: Date, future = false) {
  return db
    .select({ id: jobRuns.id, ...sealedRunColumns(jobRuns) })
    .from(jobRuns)
    .where(runsOfJob(jobRuns, job, now, future))
    .orderBy(desc(jobRuns.gestart), desc(jobRuns.id))
    .limit(NEWEST_ROWS);
}

/** The job's newest sealed run at `now`, as lastRun reads it on SQLite (lastRunOf). */
export async function lastRunPg(db: PgDb | PgDbTx, job: string, seal: RowSeal, now: Date): Promise<LastRun<NewestRun>> {
  const [counting, future] = await Promise.all([newestRunRowsPg(db, job, now), newestRunRowsPg(db, job, now, true)]);
  return lastRunOf(counting, future, seal);
}

/**
 * jobStatuses on PostgreSQL: the same reads (the install time, the live leases, each
 * job's newest run) and the same rule (statusesOf), on the transaction's one connection;
 * each lookup is an index range.
 */
export async function jobStatusesPg(db: PgDb, seal: RowSeal, now: Date, graceMs: number, context: JobContext): Promise<JobStatus[]> {
  // The leases and the runs in one snapshot: a lease taken between two reads (another
  // job starting, here or in another instance) would leave its 'bezig' run without the
  // lease, which reads as interrupted; one that ends between them, the other way round.
  return db.transaction(
    async (tx) => {
      const [installed, leases] = await Promise.all([installedAtPg(tx, seal), liveLeasesPg(tx, now, seal)]);
      const runs = await Promise.all(SCHEDULE.map(async ({ job }) => [job, await lastRunPg(tx, job, seal, now)] as const));
      return statusesOf({ installed, leases, newestRuns: new Map(runs) }, now, graceMs, context);
    },
    { isolationLevel: "repeatable read", accessMode: "read only" },
  );
}

/** The newest sealed status backup-status received that counts at `now` (newestBackup on SQLite): by arrival, then id. */
export async function newestBackupPg(db: PgDb, seal: RowSeal, now: Date): Promise<SealedBackup<NewestBackup>> {
  const b = backupStatuses;
  const rows = (future: boolean) => db.select(sealedBackupColumns(b)).from(b).where(receivedBy(b, now, future)).orderBy(desc(b.ontvangen), desc(b.id)).limit(NEWEST_ROWS);
  const [counting, future] = await Promise.all([rows(false), rows(true)]);
  return newestSealedBackup(counting, future, seal);
}

/** Stores a report of the host backup, as backup-status does on SQLite. */
export async function recordBackupStatusPg(db: PgDb, row: typeof backupStatuses.$inferInsert): Promise<void> {
  await db.insert(backupStatuses).values(row);
}

/**
 * Runs `write` (backup-status's witness file) while holding LOCK_BACKUP_WITNESS, as
 * SQLite's write lock serialises it there: reports run side by side in both instances,
 * and the file's read and write must not interleave with another's (src/jobs/backup-status.ts).
 */
export async function withBackupWitnessLockPg(db: PgDb, write: () => void): Promise<void> {
  await db.transaction(async (tx) => {
    await tx.execute(sql`SELECT pg_advisory_xact_lock(${LOCK_NAMESPACE}, ${LOCK_BACKUP_WITNESS})`);
    write();
  });
}

/**
 * offenderQuery on PostgreSQL, by the same rule (offenderRule). `gelukt = false` is a
 * literal, the partial index login_attempts_failed_idx's own predicate, so the planner
 * can prove the index applies. The value is ordered COLLATE "C", byte order as SQLite's
 * BINARY: ip and account are plain text in the database's collation, and a linguistic
 * one ("Bob" after "anna") would list ties in another order than SQLite.
 */
export function offenderQueryPg(db: PgDb, column: "ip" | "account", van: string, tot: string, threshold: number, ids?: StoredIds) {
  const a = loginAttempts;
  const waarde = a[column];
  const aantal = count().as("aantal");
  return db
    .select({
      waarde,
      aantal,
      // min and max of a group are never null; tijdstip is COLLATE "C" already
      eerste: sql<string>`min(${a.tijdstip})`,
      laatste: sql<string>`max(${a.tijdstip})`,
    })
    .from(a)
    .where(offenderRule.where(a, sql`${a.gelukt} = false`, van, tot, ids))
    .groupBy(waarde)
    .having(offenderRule.having(a, threshold, ids))
    .orderBy(desc(aantal), sql`${waarde} COLLATE "C"`);
}

/**
 * The highest login_attempts id, read under LOCK_LOGIN_IDS taken exclusively: only when
 * no batch holds ids it has not committed (their shared lock, until their commit), so
 * every id up to it is committed or never will be; later batches take higher ids.
 * null when a batch holds it now: tried, never waited for. A waiting exclusive request
 * would queue every new batch's shared one behind it (POST /api/inlogpogingen held up
 * by one slow batch), and fail the run after lock_timeout; the caller leaves the late
 * attempts to the next run instead.
 */
export async function storedLoginIdsPg(store: PgStore): Promise<number | null> {
  return store.sql.begin(async (tx) => {
    const [lock] = (await tx`SELECT pg_try_advisory_xact_lock(${LOCK_NAMESPACE}, ${LOCK_LOGIN_IDS}) AS taken`) as { taken: boolean }[];
    if (!lock!.taken) return null;
    const [row] = (await tx`SELECT coalesce(max(id), 0)::bigint AS id FROM login_attempts`) as { id: string | number }[];
    return Number(row!.id);
  });
}

/** seenStateSqlite on PostgreSQL: the watermark as stored, and whether a run of the job ever ended. */
export async function seenStatePg(db: PgDb): Promise<SeenState> {
  const [row] = await db.select({ value: serviceMeta.value }).from(serviceMeta).where(eq(serviceMeta.key, SEEN_KEY));
  const [run] = await db
    .select({ id: jobRuns.id })
    .from(jobRuns)
    .where(and(eq(jobRuns.job, "beveiligingslog-analyse"), isNotNull(jobRuns.beeindigd)))
    .limit(1);
  return { value: row?.value, ended: run !== undefined };
}

/** lateFailuresQuery on PostgreSQL. */
export function lateFailuresPg(db: PgDb, ids: StoredIds, before: string, limit: number): Promise<{ id: number; tijdstip: string }[]> {
  const a = loginAttempts;
  return db
    .select({ id: a.id, tijdstip: a.tijdstip })
    .from(a)
    .where(and(sql`${a.gelukt} = false`, offenderRule.stored(a, ids), lt(a.tijdstip, before)))
    .orderBy(a.id)
    .limit(limit);
}

/** writeSeenSqlite on PostgreSQL. */
export async function writeSeenUpToPg(db: PgDb, value: number): Promise<void> {
  await putMetaPg(db, SEEN_KEY, String(value));
}
