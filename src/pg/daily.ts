// The daily report's reads on PostgreSQL (DATABASE_URL=postgres://…): the same inputs
// as readDailyInputs in src/reports/daily.ts reads from SQLite, so dailyReport makes the
// same report and mail of the same data. What differs, and why:
//
// - Booleans are boolean: counts of failed attempts and broken chains use FILTER where
//   SQLite sums 0/1.
// - Partial indexes are matched by a literal term (`gelukt = false`, `soort IN (…)`):
//   with a bound value a generic plan cannot prove the index's predicate.
// - IPs are ordered COLLATE "C", the byte order SQLite's BINARY gives; the column itself
//   has the database's collation, which may be linguistic.
// - The database size is pg_database_size: what the database's files take, and no
//   write-ahead log (walBytes 0). PostgreSQL's WAL is the whole server's, shared by all
//   its databases and recycled at checkpoints: no part of it belongs to this one.
//
// As on SQLite the reads are separate statements, not one snapshot.
import { and, count, countDistinct, desc, eq, getTableColumns, gte, isNotNull, lt, sql } from "drizzle-orm";
import { auditAnchorLog, auditVerificationState, jobRuns, loginAttempts, tenants } from "../../db/schema-pg.ts";
import { installationWitness } from "../audit/anchoring.ts";
import { auditKeys } from "../audit/keys.ts";
import type { Config } from "../config.ts";
import {
  dailyReport,
  databaseSection,
  loginWindow,
  sealedReportRuns,
  USUAL_DURATION_RUNS,
  verificationSummary,
  type AnchorRecords,
  backupInputs,
  type DailyInputs,
  type DailyReport,
  type LoginCounts,
  scheduledStatuses,
  type ScheduledJobRuns,
  type VerificationCounts,
} from "../reports/daily.ts";
import { NEWEST_ROWS, rowSealOf, sealedRunColumns, verificationSince, verificationWitnessFile, witnessedMoment, type RowSeal, type VerificationSince } from "../row-seal.ts";
import { databaseSize } from "./maintenance.ts";
import { databaseClockOffsetMs } from "./clock.ts";
import { fileSystemSpace, watchedPaths } from "../disk-space.ts";
import type { JobContext } from "../jobs/job.ts";
import { readPostponement } from "../jobs/late-postponed.ts";
import { jobStatusesPg, newestBackupPg, newestRunRowsPg } from "./status.ts";
import type { PgDb, PgStore } from "./store.ts";

export async function loginCountsPg(db: PgDb, now: Date): Promise<LoginCounts> {
  const { van, tot } = loginWindow(now);
  const inWindow = and(gte(loginAttempts.tijdstip, van), lt(loginAttempts.tijdstip, tot));
  const [totals] = await db
    .select({ totaal: count(), gelukt: sql<number>`count(*) FILTER (WHERE ${loginAttempts.gelukt})`.mapWith(Number) })
    .from(loginAttempts)
    .where(inWindow);
  // login_attempts_failed_idx (partial, gelukt = false) covers the failed attempts.
  const failed = and(sql`${loginAttempts.gelukt} = false`, inWindow);
  const [{ mislukteIps }] = (await db.select({ mislukteIps: countDistinct(loginAttempts.ip) }).from(loginAttempts).where(failed)) as [{ mislukteIps: number }];
  const aantal = count().as("aantal");
  const topMislukteIps = await db
    .select({ ip: loginAttempts.ip, aantal })
    .from(loginAttempts)
    .where(failed)
    .groupBy(loginAttempts.ip)
    .orderBy(desc(aantal), sql`${loginAttempts.ip} COLLATE "C"`)
    .limit(5);
  return { totaal: totals!.totaal, gelukt: totals!.gelukt, mislukteIps, topMislukteIps };
}

/** verificationCounts on PostgreSQL: the same reads, summed up by the same rule (verificationSummary). */
export async function verificationCountsPg(db: PgDb, now: Date, seal: RowSeal, config: Pick<Config, "auditAnkerBestand">): Promise<VerificationCounts> {
  const state = auditVerificationState;
  const [rows, counted, since] = await Promise.all([
    db
      .select({ ...getTableColumns(state), tenant: tenants.naam })
      .from(state)
      .innerJoin(tenants, eq(tenants.id, state.tenantId)),
    countTenantsPg(db),
    verificationSincePg(db, seal, now, config),
  ]);
  return verificationSummary(rows, counted, seal, now, since);
}

/** The number of tenants on PostgreSQL (countTenants on SQLite). */
export async function countTenantsPg(db: PgDb): Promise<number> {
  const [row] = await db.select({ n: count() }).from(tenants);
  return row!.n;
}

/** verificationSince on PostgreSQL (verificationSinceIn on SQLite), over audit-verificatie's newest rows that count at `now` and its witness file. */
export async function verificationSincePg(db: PgDb, seal: RowSeal, now: Date, config: Pick<Config, "auditAnkerBestand">): Promise<VerificationSince> {
  return verificationSince(await newestRunRowsPg(db, "audit-verificatie", now), seal, witnessedMoment(verificationWitnessFile(config)), now);
}

/** The operator's records (OPERATOR_RECORDS_SQL on SQLite), through the partial index audit_anchor_log_operator_idx (a test checks the plan). */
export function operatorRecordsPg(db: PgDb) {
  const log = auditAnchorLog;
  return db
    .select({ soort: log.soort, tenantId: log.tenantId, note: log.note, positie: log.positie })
    .from(log)
    .where(and(sql`${log.soort} IN ('adoptie', 'herstel')`, isNotNull(log.tenantId)))
    .orderBy(log.positie)
    .$dynamic();
}

/** anchorRecords on PostgreSQL: the installation checkpoint from the anchor file (installationWitness), the operator's records from the rows. */
export async function anchorRecordsPg(db: PgDb, config: Pick<Config, "auditAnkerBestand" | "auditAnkerSleutel" | "auditVertrouwdeSleutels">): Promise<AnchorRecords> {
  const log = auditAnchorLog;
  const [newest] = await db.select({ positie: log.positie, note: log.note }).from(log).where(eq(log.soort, "installatie")).orderBy(desc(log.positie)).limit(1);
  // tenant_id IS NOT NULL is in the query: the column's type cannot say so.
  const records = (await operatorRecordsPg(db)) as AnchorRecords["operatorRecords"];
  return { installatie: installationWitness(newest ?? null, config.auditAnkerBestand, auditKeys(config).verifiers), operatorRecords: records };
}

export async function scheduledJobRunsPg(
  db: PgDb,
  now: Date,
  config: Pick<Config, "takenMargeMinuten" | "auditAnkerSleutel" | "auditVertrouwdeSleutels">,
  context: JobContext = { running: [], unrecorded: [] },
): Promise<ScheduledJobRuns[]> {
  const seal = rowSealOf(config);
  const at = now.toISOString();
  const out: ScheduledJobRuns[] = [];
  // The status by taken-controle's rule (scheduledJobRuns on SQLite).
  for (const entry of scheduledStatuses(await jobStatusesPg(db, seal, now, config.takenMargeMinuten * 60_000, context))) {
    const last = await db
      .select(sealedRunColumns(jobRuns))
      .from(jobRuns)
      .where(and(eq(jobRuns.job, entry.job), lt(jobRuns.gestart, at)))
      .orderBy(desc(jobRuns.gestart), desc(jobRuns.id))
      .limit(NEWEST_ROWS);
    const ok = await db
      .select(sealedRunColumns(jobRuns))
      .from(jobRuns)
      .where(and(eq(jobRuns.job, entry.job), eq(jobRuns.uitkomst, "ok"), isNotNull(jobRuns.beeindigd), lt(jobRuns.gestart, at)))
      .orderBy(desc(jobRuns.gestart), desc(jobRuns.id))
      .limit(USUAL_DURATION_RUNS + NEWEST_ROWS);
    out.push({ ...entry, ...sealedReportRuns(seal, last, ok) });
  }
  return out;
}

/** pg_database_size of this database; walBytes 0 (see the top of this file); the server's clock against this host's. */
export async function databaseSectionPg(store: PgStore): Promise<DailyReport["database"]> {
  return databaseSection(await databaseSize(store.sql), 0, await databaseClockOffsetMs(store.sql));
}

export async function readDailyInputsPg(store: PgStore, config: Config, now: Date, context: JobContext = { running: [], unrecorded: [] }): Promise<DailyInputs> {
  const [backup, logins, verification, anchor, jobs, database, postponement] = await Promise.all([
    newestBackupPg(store.db, rowSealOf(config), now),
    loginCountsPg(store.db, now),
    verificationCountsPg(store.db, now, rowSealOf(config), config),
    anchorRecordsPg(store.db, config),
    scheduledJobRunsPg(store.db, now, config, context),
    databaseSectionPg(store),
    readPostponement(store),
  ]);
  return { ...backupInputs(backup), logins, verification, anchor, jobs, database, schijf: fileSystemSpace(watchedPaths(config, null)), postponement };
}

/** The whole daily report at `now` on PostgreSQL: buildDailyReport's counterpart. */
export async function buildDailyReportPg(store: PgStore, config: Config, now: Date, context: JobContext = { running: [], unrecorded: [] }): Promise<DailyReport> {
  return dailyReport(await readDailyInputsPg(store, config, now, context), config, now);
}
