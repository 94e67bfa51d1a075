// weekrapport's queries on PostgreSQL: the same questions as src/reports/weekly.ts asks
// SQLite, answered into the same shapes, so the rules there (recipientOf, loginTally,
// weekStatsOf) and the job make the same reports of them. What differs, and why:
//
// - Login attempts are read for the whole week in one statement each, not an hour at a
//   time through staging tables: a query here waits on the server without holding the
//   event loop, which is what the slices protect on SQLite.
// - Audit actions are ordered COLLATE "C" and the ISO weeks compared COLLATE "C": those
//   columns have the database's collation, and a linguistic one would order them
//   otherwise than SQLite's byte order (and the mail would list ties differently).
// - Each bookkeeping statement is its own transaction (autocommit): a reservation is
//   committed before the message goes to the transport, as on SQLite.
import type { Config } from "../config.ts";
import { and, count, desc, eq, gte, isNotNull, lt, lte, sql } from "drizzle-orm";
import {
  administrators,
  auditEntries,
  auditVerificationState,
  loginAttempts,
  serviceMeta,
  tenants,
  weeklyReportDeliveries as deliveries,
} from "../../db/schema-pg.ts";
import {
  actionTotals,
  failedIpRanking,
  LATE_KEY,
  lateRule,
  loginTally,
  MAX_ACTIES,
  recipientOf,
  recipientRule,
  SENDING,
  TOP_IPS,
  weekStatsOf,
  type LateLogins,
  type StoredRange,
  type TenantWeekLogins,
  type TenantWeekStats,
  type UncertainDelivery,
  type WeeklyQueries,
  type WeekRecipient,
} from "../reports/weekly.ts";
import { putMetaPg, type PgDb, type PgStore } from "./store.ts";
import { storedLoginIdsPg } from "./status.ts";
import { certainDbTransaction } from "./commit.ts";
import type { RowSeal, VerificationSince } from "../row-seal.ts";
import { verificationSincePg } from "./daily.ts";

type DeliveryKey = { administratorId: number; tenantId: number };

/** Removes delivery records of weeks before `oldestKept` (pruneDeliveries). */
export async function pruneDeliveriesPg(db: PgDb, oldestKept: string): Promise<void> {
  await db.delete(deliveries).where(sql`${deliveries.isoWeek} COLLATE "C" < ${oldestKept}`);
}

/** Every active administrator of every active tenant, in tenant order, with the rerun guard of `isoWeek` (weekRecipients). */
export async function weekRecipientsPg(db: PgDb, isoWeek: string, limit: number): Promise<WeekRecipient[]> {
  const rows = await db
    .select({
      tenantId: tenants.id,
      tenant: tenants.naam,
      administratorId: administrators.id,
      email: administrators.email,
      verstuurd: deliveries.verstuurd,
    })
    .from(tenants)
    .innerJoin(administrators, recipientRule.join(administrators, tenants))
    .leftJoin(
      deliveries,
      and(eq(deliveries.administratorId, administrators.id), eq(deliveries.tenantId, tenants.id), eq(deliveries.isoWeek, isoWeek)),
    )
    .where(recipientRule.where(tenants))
    .orderBy(tenants.id, administrators.id)
    .limit(limit);
  return rows.map(recipientOf);
}

/** recipientCount on PostgreSQL. */
export async function recipientCountPg(db: PgDb): Promise<number> {
  const [row] = await db
    .select({ n: count() })
    .from(tenants)
    .innerJoin(administrators, recipientRule.join(administrators, tenants))
    .where(recipientRule.where(tenants));
  return Number(row!.n);
}

/** Every delivery still SENDING, of every week kept, oldest week first (uncertainDeliveries). */
export async function uncertainDeliveriesPg(db: PgDb): Promise<UncertainDelivery[]> {
  return db
    .select({ tenantId: deliveries.tenantId, administratorId: deliveries.administratorId, email: administrators.email, isoWeek: deliveries.isoWeek })
    .from(deliveries)
    .innerJoin(administrators, eq(administrators.id, deliveries.administratorId))
    .where(eq(deliveries.verstuurd, SENDING))
    .orderBy(sql`${deliveries.isoWeek} COLLATE "C"`, deliveries.tenantId, deliveries.administratorId);
}

const deliveryOf = (r: DeliveryKey, isoWeek: string) =>
  and(eq(deliveries.administratorId, r.administratorId), eq(deliveries.tenantId, r.tenantId), eq(deliveries.isoWeek, isoWeek));

/** Marks a send as started, before the message goes to the transport (reserveDelivery); leaves an existing record as it is. */
export async function reserveDeliveryPg(db: PgDb, r: DeliveryKey, isoWeek: string): Promise<boolean> {
  const rows = await db
    .insert(deliveries)
    .values({ administratorId: r.administratorId, tenantId: r.tenantId, isoWeek, verstuurd: SENDING })
    .onConflictDoNothing()
    .returning({ isoWeek: deliveries.isoWeek });
  return rows.length > 0;
}

/** The transport refused the message: the reservation goes, so a rerun sends it; a recorded delivery stays (releaseDelivery). */
export async function releaseDeliveryPg(db: PgDb, r: DeliveryKey, isoWeek: string): Promise<void> {
  await db.delete(deliveries).where(and(deliveryOf(r, isoWeek), eq(deliveries.verstuurd, SENDING)));
}

/** Records the transport's acceptance over the reservation; an earlier recorded time is kept (recordDelivery). */
export async function recordDeliveryPg(db: PgDb, r: DeliveryKey, isoWeek: string, now: Date): Promise<void> {
  await db
    .insert(deliveries)
    .values({ administratorId: r.administratorId, tenantId: r.tenantId, isoWeek, verstuurd: now.toISOString() })
    .onConflictDoUpdate({
      target: [deliveries.administratorId, deliveries.tenantId, deliveries.isoWeek],
      set: { verstuurd: sql`excluded.verstuurd` },
      setWhere: eq(deliveries.verstuurd, SENDING),
    });
}

/**
 * The two statements behind weekLoginsPg, over every tenant's attempts in [van, tot);
 * exported so a test can check their query plans.
 */
export function weekLoginQueriesPg(db: PgDb, van: Date, tot: Date) {
  const inWindow = and(gte(loginAttempts.tijdstip, van.toISOString()), lt(loginAttempts.tijdstip, tot.toISOString()));
  // Ranked in the order of SQLite's staging index (failedIpRanking), ties by address in
  // byte order (COLLATE "C"); only each tenant's TOP_IPS rows leave the server.
  const ranking = failedIpRanking(loginAttempts, sql`${loginAttempts.ip} COLLATE "C"`);
  const failed = db
    .select({
      tenantId: loginAttempts.tenantId,
      ip: loginAttempts.ip,
      aantal: count().as("aantal"),
      ips: ranking.ips.as("ips"),
      rang: ranking.rang.as("rang"),
    })
    .from(loginAttempts)
    // Written as the partial index login_attempts_failed_idx's predicate (gelukt = false), which bounds it.
    .where(and(inWindow, sql`${loginAttempts.gelukt} = false`, isNotNull(loginAttempts.tenantId)))
    .groupBy(loginAttempts.tenantId, loginAttempts.ip)
    .as("failed");
  return {
    perTenant: db
      .select({
        tenantId: loginAttempts.tenantId,
        totaal: count(),
        gelukt: sql<number>`count(*) FILTER (WHERE ${loginAttempts.gelukt})`.mapWith(Number),
      })
      .from(loginAttempts)
      .where(inWindow)
      .groupBy(loginAttempts.tenantId),
    mislukt: db.select().from(failed).where(lte(failed.rang, TOP_IPS)),
  };
}

/** Every tenant's login attempts in [van, tot), keyed by tenant (weekLogins). */
export async function weekLoginsPg(db: PgDb, van: Date, tot: Date): Promise<Map<number, TenantWeekLogins>> {
  const q = weekLoginQueriesPg(db, van, tot);
  const [perTenant, mislukt] = await Promise.all([q.perTenant, q.mislukt]);
  const tally = loginTally();
  tally.addCounts(perTenant);
  tally.setFailures(mislukt);
  return tally.result();
}

/** The per-tenant statements of tenantWeekStatsPg, bounded by (tenant_id, created_at) and the primary key; exported for their query plans. */
export function weekStatsQueriesPg(db: PgDb, tenantId: number, van: Date, tot: Date) {
  const aantal = count().as("aantal");
  return {
    // Only the rows the report shows, with the week's totals beside them (actionTotals).
    auditPerActie: db
      .select({ actie: auditEntries.action, aantal, ...actionTotals })
      .from(auditEntries)
      .where(and(eq(auditEntries.tenantId, tenantId), gte(auditEntries.createdAt, van.toISOString()), lt(auditEntries.createdAt, tot.toISOString())))
      .groupBy(auditEntries.action)
      .orderBy(desc(aantal), sql`${auditEntries.action} COLLATE "C"`)
      .limit(MAX_ACTIES),
    keten: db
      .select()
      .from(auditVerificationState)
      .where(eq(auditVerificationState.tenantId, tenantId)),
  };
}

/** One tenant's week; `logins` is weekLoginsPg of the same week (tenantWeekStats). */
export async function tenantWeekStatsPg(
  db: PgDb,
  seal: RowSeal,
  tenantId: number,
  van: Date,
  tot: Date,
  logins: Map<number, TenantWeekLogins>,
  /** When the report is made (weekStatsOf). */
  now: Date,
  /** verificationSincePg, read once per run of the job (weeklyQueriesPg). */
  since: VerificationSince,
): Promise<TenantWeekStats> {
  const q = weekStatsQueriesPg(db, tenantId, van, tot);
  const [perActie, [keten]] = await Promise.all([q.auditPerActie, q.keten]);
  return weekStatsOf(tenantId, perActie, keten, logins, seal, now, since);
}

/**
 * The highest audit seq of every tenant (auditHeads), one statement. Sound under concurrent
 * appends: a tenant's seq is taken under its chain lock, held until the append commits, so
 * every seq of it not yet committed is above the highest one visible here.
 */
export async function auditHeadsPg(store: PgStore): Promise<Map<number, number>> {
  const rows = (await store.sql`SELECT t.id AS t, (SELECT max(seq) FROM audit_entries WHERE tenant_id = t.id) AS seq FROM tenants t`) as { t: number; seq: string | null }[];
  return new Map(rows.map((r) => [Number(r.t), r.seq === null ? 0 : Number(r.seq)]));
}

/** lateLoginsPg's statement; exported so a test can check its query plan. */
export function lateLoginsQueryPg(db: PgDb, range: StoredRange, van: Date) {
  const la = loginAttempts;
  return db
    .select({ tenantId: la.tenantId, mislukt: count(), ips: sql<number>`count(DISTINCT ${la.ip})`.mapWith(Number) })
    .from(la)
    .where(lateRule.logins(la, sql`${la.gelukt} = false`, sql`(${la.tijdstip} || '')`, range, van.toISOString()))
    .groupBy(la.tenantId);
}

/** Every tenant's late failed logins in one statement (lateLogins): waiting on the server holds no event loop. */
export async function lateLoginsPg(db: PgDb, range: StoredRange, van: Date): Promise<Map<number, LateLogins>> {
  const out = new Map<number, LateLogins>();
  if (range.tot <= range.na) return out;
  const rows = await lateLoginsQueryPg(db, range, van);
  for (const r of rows) if (r.tenantId !== null) out.set(r.tenantId, { mislukt: Number(r.mislukt), ips: r.ips });
  return out;
}

/** A tenant's late audit entries by action (lateAudit), ordered as the week's. */
export function lateAuditQueryPg(db: PgDb, tenantId: number, range: StoredRange, van: Date) {
  const aantal = count().as("aantal");
  return db
    .select({ actie: auditEntries.action, aantal, ...actionTotals })
    .from(auditEntries)
    .where(lateRule.audit(auditEntries, sql`(${auditEntries.createdAt} || '')`, tenantId, range, van.toISOString()))
    .groupBy(auditEntries.action)
    .orderBy(desc(aantal), sql`${auditEntries.action} COLLATE "C"`)
    .limit(MAX_ACTIES);
}

/** weekrapport's queries on this store (WeeklyQueries; SQLite's are weeklyQueries). */
export function weeklyQueriesPg(store: PgStore, seal: RowSeal, config: Pick<Config, "auditAnkerBestand">): WeeklyQueries {
  const { db } = store;
  // The newest verification run's start, once for all tenants of this run of the job.
  let since: Promise<VerificationSince> | undefined;
  return {
    pruneDeliveries: (oldestKept) => pruneDeliveriesPg(db, oldestKept),
    weekRecipients: (isoWeek, limit) => weekRecipientsPg(db, isoWeek, limit),
    recipientCount: () => recipientCountPg(db),
    uncertainDeliveries: () => uncertainDeliveriesPg(db),
    // Looked up when its COMMIT's answer is lost: a reservation stored but not known as such
    // would keep the message from ever being sent (every rerun calls it uncertain).
    reserveDelivery: (r, isoWeek) => certainDbTransaction(store.sql, "ISOLATION LEVEL READ COMMITTED", (tx) => reserveDeliveryPg(tx, r, isoWeek)),
    releaseDelivery: (r, isoWeek) => releaseDeliveryPg(db, r, isoWeek),
    recordDelivery: (r, isoWeek, now) => recordDeliveryPg(db, r, isoWeek, now),
    weekLogins: (van, tot) => weekLoginsPg(db, van, tot),
    tenantWeekStats: async (tenantId, van, tot, logins, now) => tenantWeekStatsPg(db, seal, tenantId, van, tot, logins, now, await (since ??= verificationSincePg(db, seal, now, config))),
    readLateMark: async () => (await db.select({ value: serviceMeta.value }).from(serviceMeta).where(eq(serviceMeta.key, LATE_KEY)))[0]?.value,
    writeLateMark: (value) => putMetaPg(db, LATE_KEY, value),
    storedLoginId: () => storedLoginIdsPg(store),
    auditHeads: () => auditHeadsPg(store),
    lateLogins: (range, van) => lateLoginsPg(db, range, van),
    lateAudit: (tenantId, range, van) => lateAuditQueryPg(db, tenantId, range, van),
  };
}
