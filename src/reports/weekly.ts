// The data of the weekly report: who receives it, and per tenant the last seven days
// (audit activity, login attempts, chain state). Every per-tenant statement is bounded
// by an index on (tenant_id, time), so a run costs the tenant's week, not the table.
// Login attempts are counted for every tenant at once, in one pass over the week (PAGE_ROWS
// attempts at a time) by the tijdstip indexes (weekLogins): a (tenant_id, tijdstip) index for per-tenant counts
// would put one scattered page per tenant into every retention batch and every insert.
//
// The queries below are SQLite's; src/pg/weekly.ts has PostgreSQL's. Both feed the
// rules here (recipientOf, loginTally, weekStatsOf, the status and the mail's props), so
// the two stores send the same reports to the same people.
import type { Config } from "../config.ts";
import { Database } from "bun:sqlite";
import { and, count, desc, eq, gt, gte, isNotNull, lt, min, sql, type AnyColumn, type SQL } from "drizzle-orm";
import { drizzle } from "drizzle-orm/bun-sqlite";
import { integer, primaryKey, sqliteTable, text } from "drizzle-orm/sqlite-core";
import {
  administrators,
  auditEntries,
  auditVerificationState,
  loginAttempts,
  serviceMeta,
  tenants,
  weeklyReportDeliveries as deliveries,
} from "../../db/schema.ts";
import * as schema from "../../db/schema.ts";
import type { WeeklyReportProps } from "../../emails/WeeklyReport.tsx";
import { BUSY_TIMEOUT_MS, excluded, preparedPerConnection, putMeta, type Db } from "../db.ts";
import { storedIdsSqlite } from "../jobs/beveiligingslog-analyse.ts";
import { displayText, formatDatum, getal } from "../format.ts";
import { log } from "../logger.ts";
import { countsAsVerification, type RowSeal, type VerificationColumns, type VerificationSince } from "../row-seal.ts";
import { verificationSinceIn } from "./daily.ts";
import { redenUitleg, reportStatus, type StatusPunt } from "./shared.ts";

export const WEEK_MS = 7 * 24 * 3600 * 1000;

/**
 * How many actions a weekly report lists one by one, most frequent first; the rest are
 * one row. The application chooses the actions: 20,000 distinct ones made a report of
 * 19 MB that the mail server refused (and took seconds of the event loop to render).
 */
export const MAX_ACTIES = 25;

/**
 * Beside each of the (at most MAX_ACTIES) action rows the statement returns, on both
 * stores: how many distinct actions and how many entries the whole week has. Window
 * functions over the grouped rows, computed before the LIMIT, so the rest row and the
 * total are exact without the rest reaching JavaScript.
 */
export const actionTotals = {
  acties: sql<number>`count(*) OVER ()`.mapWith(Number),
  totaal: sql<number>`sum(count(*)) OVER ()`.mapWith(Number),
};

/** A row of the action statement: one of the week's MAX_ACTIES most frequent actions (by count, then action), with actionTotals. */
export interface ActionRow {
  actie: string;
  aantal: number;
  acties: number;
  totaal: number;
}

/**
 * The report's action table from the action statement's rows: the MAX_ACTIES - 1 most
 * frequent, then the rest as one row when the week has more than MAX_ACTIES actions.
 */
export function actionTable(rows: readonly ActionRow[]): TenantWeekStats["audit"] {
  const perActie = rows.slice(0, MAX_ACTIES).map(({ actie, aantal }) => ({ actie, aantal }));
  const acties = rows[0]?.acties ?? 0;
  const totaal = rows[0]?.totaal ?? 0;
  if (acties <= MAX_ACTIES) return { totaal, perActie };
  const shown = perActie.slice(0, MAX_ACTIES - 1);
  const rest = { actie: `(${acties - shown.length} andere acties)`, aantal: totaal - shown.reduce((n, r) => n + r.aantal, 0) };
  return { totaal, perActie: [...shown, rest] };
}


/**
 * The statements per tenant, run for every tenant and so prepared once per connection;
 * exported so a test can check their query plans. Parameters: tenantId, van, tot.
 */
export const weekStatsStatements = preparedPerConnection((db) => {
  const tenantId = sql.placeholder("tenantId");
  const van = sql.placeholder("van");
  const tot = sql.placeholder("tot");
  const auditAantal = count().as("aantal");
  return {
    // Only the rows the report shows (actionTable): the application chooses the actions, and
    // 300,000 distinct ones of a week were 300,000 rows in the JavaScript heap for 25 lines.
    auditPerActie: db
      .select({ actie: auditEntries.action, aantal: auditAantal, ...actionTotals })
      .from(auditEntries)
      .where(and(eq(auditEntries.tenantId, tenantId), gte(auditEntries.createdAt, van), lt(auditEntries.createdAt, tot)))
      .groupBy(auditEntries.action)
      .orderBy(desc(auditAantal), auditEntries.action)
      .limit(MAX_ACTIES)
      .prepare(),
    keten: db
      .select()
      .from(auditVerificationState)
      .where(eq(auditVerificationState.tenantId, tenantId))
      .prepare(),
  };
});

export interface WeekRecipient {
  tenantId: number;
  tenant: string;
  administratorId: number;
  email: string;
  /**
   * This administrator already received this tenant's report in this ISO week, or a send
   * of it started and its outcome was never recorded (the process died in between): not
   * sent again, so nobody gets it twice; weekrapport reports those (uncertainDeliveries).
   */
  alVerstuurd: boolean;
}

/** Weeks of delivery records kept: the rerun guard needs only the current week; a quarter stays for reference. */
export const DELIVERY_WEEKS_KEPT = 13;

/**
 * Removes delivery records of weeks before `oldestKept` ('YYYY-Www' sorts as text), so
 * the table holds about 13 weeks × administrators instead of growing for years.
 */
export function pruneDeliveries(db: Db, oldestKept: string): void {
  db.delete(deliveries).where(lt(deliveries.isoWeek, oldestKept)).run();
}

/** weekly_report_deliveries.verstuurd of a send in progress (else the ISO time of acceptance). */
export const SENDING = "verzenden";

/** The statements run for every message, so prepared once per connection. */
const deliveryStatements = preparedPerConnection((db) => {
  const administratorId = sql.placeholder("administratorId");
  const tenantId = sql.placeholder("tenantId");
  const isoWeek = sql.placeholder("isoWeek");
  return {
    reserve: db.insert(deliveries).values({ administratorId, tenantId, isoWeek, verstuurd: SENDING }).onConflictDoNothing().returning({ isoWeek: deliveries.isoWeek }).prepare(),
    release: db
      .delete(deliveries)
      .where(
        and(
          eq(deliveries.administratorId, administratorId),
          eq(deliveries.tenantId, tenantId),
          eq(deliveries.isoWeek, isoWeek),
          eq(deliveries.verstuurd, SENDING),
        ),
      )
      .prepare(),
    record: db
      .insert(deliveries)
      .values({ administratorId, tenantId, isoWeek, verstuurd: sql.placeholder("verstuurd") })
      .onConflictDoUpdate({
        target: [deliveries.administratorId, deliveries.tenantId, deliveries.isoWeek],
        set: { verstuurd: excluded(deliveries.verstuurd) },
        setWhere: eq(deliveries.verstuurd, SENDING),
      })
      .prepare(),
  };
});

/** A row of the recipients' query: the delivery's `verstuurd` when one exists for the week, else null. */
export interface RecipientRow {
  tenantId: number;
  tenant: string;
  administratorId: number;
  email: string;
  verstuurd: string | null;
}

/**
 * Who gets the weekly report, for either dialect's tables: the active administrators
 * (`join`) of the active tenants (`where`). weekRecipients and recipientCount, on both stores.
 */
export const recipientRule = {
  join: (a: { tenantId: AnyColumn; actief: AnyColumn }, t: { id: AnyColumn }) => and(eq(a.tenantId, t.id), eq(a.actief, true)),
  where: (t: { actief: AnyColumn }) => eq(t.actief, true),
};

/** The rerun guard: any delivery record of the week counts as sent, one still SENDING too. */
export function recipientOf({ verstuurd, ...r }: RecipientRow): WeekRecipient {
  return { ...r, alVerstuurd: verstuurd !== null };
}

/**
 * Every active administrator of every active tenant, in tenant order, marked when the
 * report of `isoWeek` was already accepted for them (the rerun guard).
 */
export function weekRecipients(db: Db, isoWeek: string, limit: number): WeekRecipient[] {
  return db
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
    .limit(limit)
    .all()
    .map(recipientOf);
}

/** How many recipients weekRecipients has without a limit: counted only when the limit was reached. */
export function recipientCount(db: Db): number {
  return db
    .select({ n: count() })
    .from(tenants)
    .innerJoin(administrators, recipientRule.join(administrators, tenants))
    .where(recipientRule.where(tenants))
    .get()!.n;
}

/** A delivery of any week kept still marked SENDING: its send began and its outcome was never recorded. */
export interface UncertainDelivery {
  tenantId: number;
  administratorId: number;
  email: string;
  isoWeek: string;
}

/**
 * Every delivery still SENDING, of every week kept (not only the week being sent): a run
 * killed in the middle of one week's messages is reported by every later run until an
 * operator resolves it or the week is pruned. Oldest week first, then by tenant and administrator.
 */
export function uncertainDeliveries(db: Db): UncertainDelivery[] {
  return db
    .select({ tenantId: deliveries.tenantId, administratorId: deliveries.administratorId, email: administrators.email, isoWeek: deliveries.isoWeek })
    .from(deliveries)
    .innerJoin(administrators, eq(administrators.id, deliveries.administratorId))
    .where(eq(deliveries.verstuurd, SENDING))
    .orderBy(deliveries.isoWeek, deliveries.tenantId, deliveries.administratorId)
    .all();
}

/**
 * Marks a send as started, before the message goes to the transport. SMTP cannot say
 * whether a message arrived when the sender dies between the server's "250 OK" and
 * recording it; with this mark such a message is reported as uncertain instead of
 * being sent a second time by the rerun.
 */
export function reserveDelivery(db: Db, r: { administratorId: number; tenantId: number }, isoWeek: string): boolean {
  return deliveryStatements(db).reserve.all({ administratorId: r.administratorId, tenantId: r.tenantId, isoWeek }).length > 0;
}

/** The transport refused the message: no longer reserved, so a rerun sends it. */
export function releaseDelivery(db: Db, r: { administratorId: number; tenantId: number }, isoWeek: string): void {
  deliveryStatements(db).release.run({ administratorId: r.administratorId, tenantId: r.tenantId, isoWeek });
}

/** Records that the transport accepted this administrator's report of this week. */
export function recordDelivery(db: Db, r: { administratorId: number; tenantId: number }, isoWeek: string, now: Date): void {
  deliveryStatements(db).record.run({ administratorId: r.administratorId, tenantId: r.tenantId, isoWeek, verstuurd: now.toISOString() });
}

export interface TenantWeekStats {
  audit: { totaal: number; perActie: { actie: string; aantal: number }[] };
  inlog: { totaal: number; gelukt: number; mislukt: number; mislukteIps: number; topMislukteIps: { ip: string; aantal: number }[] };
  keten: {
    staat: "intact" | "gebroken" | "nooit";
    /** ISO time of the latest verification, null when never verified. */
    gecontroleerd: string | null;
    aantalEntries: number | null;
    fout: { seq: number | null; reden: string | null } | null;
  };
}

/** Failed-login IPs the report lists per tenant: the most failures first, then by address. */
export const TOP_IPS = 5;

/**
 * The ranking of a tenant's failed-login IPs over the grouped (tenant, ip) rows, as
 * PostgreSQL computes it: `ips` the tenant's number of distinct IPs, `rang` an IP's place
 * (most failures first, then by address in byte order: `ipOrder` is the column as the
 * store compares bytes). Window functions, so only the TOP_IPS best of each tenant leave
 * the database with that count, however many distinct addresses an attacker rotated
 * through. SQLite keeps the same order in its staging index (stagingDdl's
 * week_failed_pairs_rank: aantal DESC, then ip in BINARY collation, byte order).
 */
export function failedIpRanking(t: { tenantId: AnyColumn; ip: AnyColumn }, ipOrder: SQL) {
  return {
    ips: sql<number>`count(*) OVER (PARTITION BY ${t.tenantId})`.mapWith(Number),
    rang: sql<number>`row_number() OVER (PARTITION BY ${t.tenantId} ORDER BY count(*) DESC, ${ipOrder})`.mapWith(Number),
  };
}

export type TenantWeekLogins = TenantWeekStats["inlog"];

/** A row of the failures: one of a tenant's TOP_IPS failing IPs of the week, with failedIpRanking's figures. */
export interface FailedIpRow {
  tenantId: number | null;
  ip: string;
  aantal: number;
  ips: number;
  rang: number;
}

/**
 * SQLite reads a week's login attempts at most PAGE_ROWS at a time, with a turn of the
 * event loop between, so each statement costs a bounded number of attempts however many
 * an attacker sends in the week, or in one hour, or at one instant. The week's distinct
 * failing IPs and its top five are not sums of the steps', so the steps' figures are
 * added up in temporary tables of the report's own connection (openReportConnection):
 * per tenant its counts and per (tenant, ip) its failures. A (tenant, ip) pair seen for
 * the first time adds one to its tenant's distinct count (a trigger), so no statement
 * counts a tenant's pairs afterwards.
 *
 * 5,000 attempts are a step of about 20 ms on the 2-core host (an hour of 167,000 held
 * the loop 0.65 s: 4 µs an attempt, counts and failures together; docs/performance.md).
 */
export const PAGE_ROWS = 5_000;

/** The report's staging tables, in the TEMP schema of its own connection: they exist only there, for one weekLogins. */
const weekCounts = sqliteTable("week_counts", {
  tenantId: integer("tenant_id").primaryKey(),
  totaal: integer("totaal").notNull(),
  gelukt: integer("gelukt").notNull(),
  ips: integer("ips").notNull(),
});
const weekFailedPairs = sqliteTable(
  "week_failed_pairs",
  { tenantId: integer("tenant_id").notNull(), ip: text("ip").notNull(), aantal: integer("aantal").notNull() },
  (t) => [primaryKey({ columns: [t.tenantId, t.ip] })],
);

// Drizzle has no builder for TEMP tables or triggers. The rank index is kept up to date
// by every step's upsert, so a tenant's top five are read by it with LIMIT, never sorted
// from all of its pairs. ip is TEXT in BINARY collation: byte order, as login_attempts.ip.
const stagingDdl = [
  "CREATE TEMP TABLE week_counts (tenant_id INTEGER PRIMARY KEY, totaal INTEGER NOT NULL, gelukt INTEGER NOT NULL, ips INTEGER NOT NULL DEFAULT 0)",
  "CREATE TEMP TABLE week_failed_pairs (tenant_id INTEGER NOT NULL, ip TEXT NOT NULL, aantal INTEGER NOT NULL, PRIMARY KEY (tenant_id, ip)) WITHOUT ROWID",
  "CREATE INDEX temp.week_failed_pairs_rank ON week_failed_pairs (tenant_id, aantal DESC, ip)",
  // Fires only when the upsert inserts (a pair new this week), not when it updates.
  "CREATE TEMP TRIGGER week_failed_pairs_new AFTER INSERT ON week_failed_pairs BEGIN UPDATE week_counts SET ips = ips + 1 WHERE tenant_id = new.tenant_id; END",
  // lateLogins' counts and distinct (tenant, ip) pairs, the same way.
  "CREATE TEMP TABLE late_counts (tenant_id INTEGER PRIMARY KEY, mislukt INTEGER NOT NULL, ips INTEGER NOT NULL DEFAULT 0)",
  "CREATE TEMP TABLE late_pairs (tenant_id INTEGER NOT NULL, ip TEXT NOT NULL, PRIMARY KEY (tenant_id, ip)) WITHOUT ROWID",
  "CREATE TEMP TRIGGER late_pairs_new AFTER INSERT ON late_pairs BEGIN UPDATE late_counts SET ips = ips + 1 WHERE tenant_id = new.tenant_id; END",
];

/** weekLogins' own connection to the database file, with the staging tables in its TEMP schema. */
export interface ReportConnection {
  db: Db;
  sqlite: Database;
  close(): void;
}

/**
 * A second connection to the service's database file, read-only, for weekLogins' staging
 * tables. Not the service's connection: TEMP tables there would be shared with every
 * other code path, and a rollback of another path's transaction could take staged rows
 * with it. The TEMP schema lives in a temporary file (temp_store FILE; SQLite keeps only
 * its page cache of it in memory), so millions of staged pairs do not take the heap.
 */
export function openReportConnection(db: Db): ReportConnection {
  // The file the service's connection has open, as SQLite names it ("" for an in-memory database).
  const path = db.all<{ file: string }>(sql`SELECT file FROM pragma_database_list WHERE name = 'main'`)[0]?.file ?? "";
  if (path === "") throw new Error("weekLogins needs the database in a file: a second connection cannot open an in-memory one");
  const sqlite = new Database(path, { readonly: true });
  try {
    sqlite.run(`PRAGMA busy_timeout = ${BUSY_TIMEOUT_MS}`);
    sqlite.run("PRAGMA temp_store = FILE");
    for (const ddl of stagingDdl) sqlite.run(ddl);
  } catch (e) {
    sqlite.close();
    throw e;
  }
  const rdb = drizzle(sqlite, { schema });
  return {
    db: rdb,
    sqlite,
    close: () => {
      // bun's close() leaves a connection whose statements are not finalized open (its file
      // and its TEMP file with the staged pairs) until the collector frees them; drizzle's
      // prepared queries hold theirs as `stmt`.
      for (const p of Object.values(weekLoginStatements(rdb))) (p as { stmt?: { finalize(): void } }).stmt?.finalize();
      sqlite.close();
    },
  };
}

/**
 * The statements behind weekLogins, on its ReportConnection; exported so a test can check
 * their query plans. Each reads at most `n` (PAGE_ROWS) attempts, by an index range:
 * - `boundary` finds where a step over whole instants ends (the instant of the attempt
 *   after the step's n), `counts` and `failures` stage the attempts in [van, tot);
 * - at an instant `t` with more than n attempts, `instantCountsEnd` and `instantCounts`
 *   page its attempts by id (login_attempts_tijdstip_idx is (tijdstip, rowid)), and
 *   `instantFailuresEnd` and `instantFailures` its failures by (ip, account, id), the
 *   order of login_attempts_failed_idx (its rowid last): a key carried from page to page,
 *   unique by the id, so attempts with the same ip and account are split across pages
 *   without one counted twice or skipped. SQLite seeks an index by a row value only up to
 *   its key columns, not into the rowid after them, so the key is two ranges in index
 *   order merged (UNION ALL), each a seek: the rest of the key's (ip, account) by id, then
 *   the (ip, account) after it;
 * - `nextInstant` is the first instant after t;
 * - `top` reads a tenant's TOP_IPS from the staged pairs.
 */
export const weekLoginStatements = preparedPerConnection((db) => {
  const la = loginAttempts;
  const p = sql.placeholder;
  const inWindow = and(gte(la.tijdstip, p("van")), lt(la.tijdstip, p("tot")));
  // The partial index login_attempts_failed_idx (gelukt = 0) bounds the rows read.
  const failed = sql`${la.gelukt} = 0`;
  const atInstant = eq(la.tijdstip, p("t"));
  // The rows a staging statement groups; where (and, at an instant, the order and page) varies.
  const countRows = (where: SQL | undefined) => db.select({ tenantId: la.tenantId, gelukt: la.gelukt }).from(la).where(where).$dynamic();
  const failureRows = (where: SQL | undefined) => db.select({ tenantId: la.tenantId, ip: la.ip, account: la.account, id: la.id }).from(la).where(where).$dynamic();
  // Attempts without a tenant belong to nobody's report.
  const countsOf = (rows: ReturnType<typeof countRows>) => {
    const r = rows.as("r");
    return db
      .insert(weekCounts)
      .select(
        db
          .select({
            tenantId: r.tenantId,
            totaal: count().as("totaal"),
            gelukt: sql<number>`coalesce(sum(${r.gelukt}), 0)`.as("gelukt"),
            ips: sql<number>`0`.as("ips"),
          })
          .from(r)
          .where(isNotNull(r.tenantId))
          .groupBy(r.tenantId),
      )
      .onConflictDoUpdate({
        target: weekCounts.tenantId,
        set: { totaal: sql`${weekCounts.totaal} + ${excluded(weekCounts.totaal)}`, gelukt: sql`${weekCounts.gelukt} + ${excluded(weekCounts.gelukt)}` },
      })
      .prepare();
  };
  const failuresOf = (rows: ReturnType<typeof failureRows>) => {
    const r = rows.as("r");
    return db
      .insert(weekFailedPairs)
      .select(db.select({ tenantId: r.tenantId, ip: r.ip, aantal: count().as("aantal") }).from(r).where(isNotNull(r.tenantId)).groupBy(r.tenantId, r.ip))
      .onConflictDoUpdate({
        target: [weekFailedPairs.tenantId, weekFailedPairs.ip],
        set: { aantal: sql`${weekFailedPairs.aantal} + ${excluded(weekFailedPairs.aantal)}` },
      })
      .prepare();
  };
  // An instant's attempts after id :id.
  const instantAfter = and(atInstant, gt(la.id, p("id")));
  // An instant's failures after the key (:ip, :account, :id): the rest of the key's (ip, account), then the (ip, account) after it.
  const sameIpAccount = and(failed, atInstant, eq(la.ip, p("ip")), eq(la.account, p("account")), gt(la.id, p("id")));
  const laterIpAccount = and(failed, atInstant, sql`(${la.ip}, ${la.account}) > (${p("ip")}, ${p("account")})`);
  // A compound select's ORDER BY names its result columns.
  const keyOrder = [sql.identifier("ip"), sql.identifier("account"), sql.identifier("id")].map((c) => sql`${c}`);
  const failureKey = (where: SQL | undefined) => db.select({ ip: la.ip, account: la.account, id: la.id }).from(la).where(where);
  return {
    boundary: db.select({ tijdstip: la.tijdstip }).from(la).where(inWindow).orderBy(la.tijdstip).limit(1).offset(p("n")).prepare(),
    counts: countsOf(countRows(inWindow)),
    failures: failuresOf(failureRows(and(inWindow, failed))),
    instantCountsEnd: db.select({ id: la.id }).from(la).where(instantAfter).orderBy(la.id).limit(1).offset(p("last")).prepare(),
    instantCounts: countsOf(countRows(instantAfter).orderBy(la.id).limit(p("n"))),
    instantFailuresEnd: failureKey(sameIpAccount)
      .unionAll(failureKey(laterIpAccount))
      .orderBy(...keyOrder)
      .limit(1)
      .offset(p("last"))
      .prepare(),
    instantFailures: failuresOf(failureRows(sameIpAccount).unionAll(failureRows(laterIpAccount)).orderBy(...keyOrder).limit(p("n"))),
    nextInstant: db
      .select({ tijdstip: la.tijdstip })
      .from(la)
      .where(and(gt(la.tijdstip, p("t")), lt(la.tijdstip, p("tot"))))
      .orderBy(la.tijdstip)
      .limit(1)
      .prepare(),
    staged: db.select().from(weekCounts).prepare(),
    top: db
      .select({ ip: weekFailedPairs.ip, aantal: weekFailedPairs.aantal })
      .from(weekFailedPairs)
      .where(eq(weekFailedPairs.tenantId, p("tenantId")))
      .orderBy(desc(weekFailedPairs.aantal), weekFailedPairs.ip)
      .limit(TOP_IPS)
      .prepare(),
  };
});

/**
 * Stages every tenant's attempts in [van, tot) on `report`, at most `n` attempts
 * (PAGE_ROWS) per statement, with a turn of the event loop between steps. A step is
 * whole instants, [from, the instant of the attempt after the first n): its counts and
 * failures are read in one read transaction, so they are of one moment, but the steps
 * are read at different moments (an attempt stored late for a part already read is not
 * in the report; one for a part still to come is). An instant with more than n attempts
 * (an attacker's burst stored with one tijdstip) is paged on its own: its counts n
 * attempts a page, then its failures n a page, each page a read transaction, so there an
 * attempt stored late at that very instant may be in the counts and not the failures or
 * the other way round. One transaction over the week would hold a WAL snapshot for as
 * long as the staging takes, seconds under attack: checkpoints could not reset the WAL
 * meanwhile, and db-onderhoud's TRUNCATE would wait for it.
 */
export async function stageWeek(report: ReportConnection, van: Date, tot: Date, n = PAGE_ROWS): Promise<void> {
  if (!Number.isSafeInteger(n) || n < 1) throw new Error(`stageWeek: n must be a positive integer, not ${n}`);
  const statements = weekLoginStatements(report.db);
  const end = tot.toISOString();
  const turn = () => new Promise((r) => setImmediate(r));
  // Each returns where the next one starts: an instant, or null at the window's end.
  const step = report.sqlite.transaction((from: string): { heavy: boolean; next: string | null } => {
    const boundary = statements.boundary.get({ van: from, tot: end, n })?.tijdstip ?? end;
    if (boundary === from) return { heavy: true, next: from };
    // Counts first: the failures' trigger adds to the tenant's row they create.
    statements.counts.run({ van: from, tot: boundary });
    statements.failures.run({ van: from, tot: boundary });
    return { heavy: false, next: boundary === end ? null : boundary };
  });
  const countsPage = report.sqlite.transaction((t: string, id: number): number | null => {
    const last = statements.instantCountsEnd.get({ t, id, last: n - 1 });
    statements.instantCounts.run({ t, id, n });
    return last?.id ?? null;
  });
  type FailureKey = { ip: string; account: string; id: number };
  const failuresPage = report.sqlite.transaction((t: string, after: FailureKey): FailureKey | null => {
    const last = statements.instantFailuresEnd.get({ t, ...after, last: n - 1 });
    statements.instantFailures.run({ t, ...after, n });
    return last ?? null;
  });
  const after = report.sqlite.transaction((t: string) => statements.nextInstant.get({ t, tot: end })?.tijdstip ?? null);

  let from: string | null = van.toISOString();
  while (from !== null && from < end) {
    const s: { heavy: boolean; next: string | null } = step(from);
    if (s.heavy) {
      // ids start at 1; ("", "", 0) is before every failure's key.
      for (let id: number | null = 0; id !== null; await turn()) id = countsPage(from, id);
      for (let key: FailureKey | null = { ip: "", account: "", id: 0 }; key !== null; await turn()) key = failuresPage(from, key);
      from = after(from);
    } else from = s.next;
    await turn();
  }
}

/** The staged week (stageWeek): every tenant's counts, and its TOP_IPS failing IPs each read by the rank index. */
export function stagedWeek(report: ReportConnection): { counts: { tenantId: number; totaal: number; gelukt: number }[]; failures: FailedIpRow[] } {
  const statements = weekLoginStatements(report.db);
  const counts = statements.staged.all();
  const failures = counts.flatMap(({ tenantId, ips }) =>
    ips === 0 ? [] : statements.top.all({ tenantId }).map((r, i) => ({ tenantId, ...r, ips, rang: i + 1 })),
  );
  return { counts, failures };
}

/**
 * Adds up a week's login rows into each tenant's figures, however the store read them:
 * counts per tenant, and each tenant's top failing IPs ranked over the whole week.
 */
export function loginTally() {
  const counts = new Map<number, { totaal: number; gelukt: number }>();
  const failed = new Map<number, FailedIpRow[]>();
  return {
    addCounts(rows: Iterable<{ tenantId: number | null; totaal: number; gelukt: number }>): void {
      for (const r of rows) {
        if (r.tenantId === null) continue;
        const c = counts.get(r.tenantId) ?? { totaal: 0, gelukt: 0 };
        c.totaal += r.totaal;
        c.gelukt += r.gelukt;
        counts.set(r.tenantId, c);
      }
    },
    /** The whole week's ranked rows, once: they are not added up. */
    setFailures(rows: Iterable<FailedIpRow>): void {
      for (const r of rows) {
        if (r.tenantId === null) continue;
        const rows = failed.get(r.tenantId);
        if (rows) rows.push(r);
        else failed.set(r.tenantId, [r]);
      }
    },
    /** Keyed by tenant; a tenant without attempts is absent. */
    result(): Map<number, TenantWeekLogins> {
      const out = new Map<number, TenantWeekLogins>();
      for (const [tenantId, c] of counts) {
        const top = (failed.get(tenantId) ?? []).sort((x, y) => x.rang - y.rang);
        out.set(tenantId, {
          totaal: c.totaal,
          gelukt: c.gelukt,
          mislukt: c.totaal - c.gelukt,
          mislukteIps: top[0]?.ips ?? 0,
          topMislukteIps: top.slice(0, TOP_IPS).map(({ ip, aantal }) => ({ ip, aantal })),
        });
      }
      return out;
    },
  };
}

/**
 * Every tenant's login attempts in [van, tot), keyed by tenant; a tenant without attempts
 * is absent. What reaches JavaScript is bounded by the tenants: a count row per tenant and
 * at most TOP_IPS failure rows per tenant, however many addresses an attacker rotates
 * through (one row per distinct address was 0.3 KB of heap and 3–5 µs of event loop each:
 * a million made the report's run hold /health 4.9 s). What holds the event loop is
 * bounded by PAGE_ROWS attempts, not the week's or an hour's: one statement over the week
 * held it about 1.7 s with 500,000 distinct addresses, one over an hour 0.65 s with
 * 167,000 sent within it (docs/performance.md). The staged pairs live in SQLite's
 * temporary file, not the heap.
 */
export async function weekLogins(db: Db, van: Date, tot: Date, n = PAGE_ROWS): Promise<Map<number, TenantWeekLogins>> {
  const report = openReportConnection(db);
  try {
    await stageWeek(report, van, tot, n);
    const { counts, failures } = stagedWeek(report);
    const tally = loginTally();
    tally.addCounts(counts);
    tally.setFailures(failures);
    return tally.result();
  } finally {
    report.close();
  }
}

const NO_LOGINS: TenantWeekLogins = { totaal: 0, gelukt: 0, mislukt: 0, mislukteIps: 0, topMislukteIps: [] };

/** A tenant's row of audit_verification_state, as either store reads it: with its seal. */
export type VerificationRow = VerificationColumns & { zegel: string | null };

/** One tenant's week from its action statement's rows (actionTable), its verification state (none: never verified) and weekLogins. */
export function weekStatsOf(
  tenantId: number,
  perActie: readonly ActionRow[],
  row: VerificationRow | undefined,
  logins: Map<number, TenantWeekLogins>,
  seal: RowSeal,
  /** When the report is made (not the week's end: a catch-up call comes later, after the night's verification). */
  now: Date,
  /** verificationSince: a result older than the newest run's was put back. */
  since: VerificationSince,
): TenantWeekStats {
  // A result that does not count (countsAsVerification: unsealed, dated ahead, or older than the newest run) is none: the chain reads as never checked, not as intact.
  const keten = row && countsAsVerification(row, seal, now, since) ? row : undefined;
  return {
    audit: actionTable(perActie),
    inlog: logins.get(tenantId) ?? NO_LOGINS,
    keten: keten
      ? {
          staat: keten.intact ? "intact" : "gebroken",
          gecontroleerd: keten.gecontroleerd,
          aantalEntries: keten.aantalEntries,
          fout: keten.intact ? null : { seq: keten.foutSeq, reden: keten.foutReden },
        }
      : { staat: "nooit", gecontroleerd: null, aantalEntries: null, fout: null },
  };
}

/** One tenant's week; `logins` is weekLogins of the same week, computed once for every tenant. */
export function tenantWeekStats(
  db: Db,
  seal: RowSeal,
  tenantId: number,
  van: Date,
  tot: Date,
  logins: Map<number, TenantWeekLogins>,
  /** When the report is made (weekStatsOf). */
  now: Date,
  /** verificationSinceIn, read once per run of the job (weeklyQueries). */
  since: VerificationSince,
): TenantWeekStats {
  const statements = weekStatsStatements(db);
  const params = { tenantId, van: van.toISOString(), tot: tot.toISOString() };
  return weekStatsOf(tenantId, statements.auditPerActie.all(params), statements.keten.get(params), logins, seal, now, since);
}

/**
 * What weekrapport asks of its store; weeklyQueries here for SQLite, weeklyQueriesPg
 * (src/pg/weekly.ts) for PostgreSQL. Everything else of the job is the same on both.
 */
export interface WeeklyQueries {
  pruneDeliveries(oldestKept: string): Promise<void>;
  /** The first `limit` (tenant, then administrator order): the same ones at every run of a week. */
  weekRecipients(isoWeek: string, limit: number): Promise<WeekRecipient[]>;
  recipientCount(): Promise<number>;
  uncertainDeliveries(): Promise<UncertainDelivery[]>;
  /** Whether this call reserved it: false when a row was there already (another run's, or a record). */
  reserveDelivery(r: { administratorId: number; tenantId: number }, isoWeek: string): Promise<boolean>;
  releaseDelivery(r: { administratorId: number; tenantId: number }, isoWeek: string): Promise<void>;
  recordDelivery(r: { administratorId: number; tenantId: number }, isoWeek: string, now: Date): Promise<void>;
  weekLogins(van: Date, tot: Date): Promise<Map<number, TenantWeekLogins>>;
  /** `now`: when the report is made (weekStatsOf). */
  tenantWeekStats(tenantId: number, van: Date, tot: Date, logins: Map<number, TenantWeekLogins>, now: Date): Promise<TenantWeekStats>;
  /** The stored LateMark's JSON (LATE_KEY), undefined when there is none. */
  readLateMark(): Promise<string | undefined>;
  writeLateMark(value: string): Promise<void>;
  /** The highest login attempt id, every one up to it committed; null when that cannot be told now (PostgreSQL: a batch holds LOCK_LOGIN_IDS). */
  storedLoginId(): Promise<number | null>;
  /** The highest audit seq of every tenant, reported or not (0 without entries): the late mark keeps each one's. */
  auditHeads(): Promise<Map<number, number>>;
  /** Every tenant's late failed logins (lateRule.logins), keyed by tenant; a tenant without is absent. */
  lateLogins(range: StoredRange, van: Date): Promise<Map<number, LateLogins>>;
  /** A tenant's late audit entries by action (lateRule.audit), rows as the week's action statement's. */
  lateAudit(tenantId: number, range: StoredRange, van: Date): Promise<ActionRow[]>;
}

export function weeklyQueries(db: Db, seal: RowSeal, config: Pick<Config, "auditAnkerBestand">): WeeklyQueries {
  // The newest verification run's start, once for all tenants of this run of the job.
  let since: VerificationSince | undefined;
  return {
    pruneDeliveries: async (oldestKept) => pruneDeliveries(db, oldestKept),
    weekRecipients: async (isoWeek, limit) => weekRecipients(db, isoWeek, limit),
    recipientCount: async () => recipientCount(db),
    uncertainDeliveries: async () => uncertainDeliveries(db),
    reserveDelivery: async (r, isoWeek) => reserveDelivery(db, r, isoWeek),
    releaseDelivery: async (r, isoWeek) => releaseDelivery(db, r, isoWeek),
    recordDelivery: async (r, isoWeek, now) => recordDelivery(db, r, isoWeek, now),
    weekLogins: (van, tot) => weekLogins(db, van, tot),
    tenantWeekStats: async (tenantId, van, tot, logins, now) => {
      if (since === undefined) since = verificationSinceIn(db, seal, now, config);
      return tenantWeekStats(db, seal, tenantId, van, tot, logins, now, since);
    },
    readLateMark: async () => db.select({ value: serviceMeta.value }).from(serviceMeta).where(eq(serviceMeta.key, LATE_KEY)).get()?.value,
    writeLateMark: async (value) => putMeta(db, LATE_KEY, value),
    storedLoginId: async () => storedIdsSqlite(db),
    auditHeads: () => auditHeads(db),
    lateLogins: (range, van) => lateLogins(db, range, van),
    lateAudit: async (tenantId, range, van) => lateAuditStatement(db).all({ tenantId, na: range.na, tot: range.tot, van: van.toISOString() }),
  };
}

/** A verification older than this is worth a word in the weekly report (it runs daily). */
const VERIFICATIE_OUD_MS = 48 * 3600 * 1000;

/**
 * Failed logins worth a word: from 25 on, when they are more than a quarter of the
 * successful ones. A handful of typos in a busy week is normal, a stream of failures
 * is not.
 */
export function veelMislukt(inlog: { gelukt: number; mislukt: number }): boolean {
  return inlog.mislukt >= 25 && inlog.mislukt * 4 > inlog.gelukt;
}

/** What the report says at the top. */
export function weekStatus(s: TenantWeekStats, now: Date, tijdzone: string): WeeklyReportProps["status"] {
  const punten: StatusPunt[] = [];
  if (s.keten.staat === "gebroken") {
    const seq = s.keten.fout?.seq != null ? ` bij volgnummer ${getal(s.keten.fout.seq)}` : "";
    punten.push(["actie", `De auditketen is gebroken${seq}: ${redenUitleg(s.keten.fout?.reden ?? null)}.`]);
  } else if (s.keten.staat === "nooit") {
    punten.push(["let-op", "De auditketen is nog nooit gecontroleerd."]);
  } else if (s.keten.gecontroleerd && now.getTime() - Date.parse(s.keten.gecontroleerd) > VERIFICATIE_OUD_MS) {
    punten.push(["let-op", `De laatste controle van de auditketen is van ${formatDatum(s.keten.gecontroleerd, tijdzone)}, langer dan twee dagen geleden.`]);
  }
  if (veelMislukt(s.inlog)) {
    punten.push(["let-op", `Opvallend veel mislukte inlogpogingen: ${getal(s.inlog.mislukt)} van ${getal(s.inlog.totaal)}, vanaf ${getal(s.inlog.mislukteIps)} IP-adressen.`]);
  }
  return reportStatus(punten, "Actie nodig: de auditketen is gebroken");
}

export function weeklyReportProps(
  tenant: string,
  s: TenantWeekStats,
  o: { week: string; van: Date; tot: Date; tijdzone: string },
  /** What came late (tenantLate); null: nothing, no section. */
  laat: TenantLate | null = null,
): WeeklyReportProps {
  return {
    // Shown in the body's sentences as in the subject: without layout characters (a U+202E reversed the rest of a paragraph).
    tenant: displayText(tenant),
    week: o.week,
    van: formatDatum(o.van, o.tijdzone),
    tot: formatDatum(o.tot, o.tijdzone),
    tijdzone: o.tijdzone,
    status: weekStatus(s, o.tot, o.tijdzone),
    // An action is any text of the application's (audit entries' `action`): shown as a line.
    audit: { totaal: s.audit.totaal, perActie: s.audit.perActie.map((r) => ({ actie: displayText(r.actie), aantal: r.aantal })) },
    inlog: { ...s.inlog, opvallend: veelMislukt(s.inlog) },
    keten: {
      staat: s.keten.staat,
      gecontroleerd: s.keten.gecontroleerd ? formatDatum(s.keten.gecontroleerd, o.tijdzone) : null,
      aantalEntries: s.keten.aantalEntries,
      fout: s.keten.fout ? { seq: s.keten.fout.seq, reden: s.keten.fout.reden, uitleg: redenUitleg(s.keten.fout.reden) } : null,
    },
    laat: laat && {
      audit: { totaal: laat.audit.totaal, perActie: laat.audit.perActie.map((r) => ({ actie: displayText(r.actie), aantal: r.aantal })) },
      inlog: laat.inlog,
    },
  };
}

export function weeklySubject(p: WeeklyReportProps): string {
  const weekNr = Number(p.week.slice(p.week.indexOf("W") + 1));
  const staat = p.status.niveau === "ok" ? "alles in orde" : p.status.niveau === "actie" ? "actie nodig" : "aandacht nodig";
  // The status before the name: the name is the application's (up to 200 characters), and
  // whatever it says or however long it is, it cannot push the real status out of view.
  return `Weekrapport week ${weekNr}: ${staat} — ${displayText(p.tenant)}`;
}

// ── Late arrivals ────────────────────────────────────────────────────────────────────
// The week's own figures are chosen by the moment the application gives (created_at,
// tijdstip). An entry or failed login dated before the week but stored after the previous
// report was made (an outbox emptied days later, a batch with an old tijdstip) would be in
// no report: each report also counts those, in its section "Laat binnengekomen".
// "Stored after" is told by numbers that grow in the order rows are committed: per tenant
// the audit entries' seq (assigned under the tenant's chain lock, on both stores; the
// global audit id is not: on PostgreSQL it comes from a sequence before the lock), and the
// login attempts' id (SQLite's one writer; PostgreSQL reads it under LOCK_LOGIN_IDS,
// storedLoginIdsPg). The numbers at a week's first run are its LateMark: the week counts
// what was stored between the previous week's mark and its own.

/**
 * service_meta key of the LateMark, as JSON. Not sealed, like the other job state in
 * service_meta (SEEN_KEY): a database writer could move it, and can as well delete rows.
 */
export const LATE_KEY = "weekrapport-laat";

/** A range of stored numbers, (na, tot]. */
export interface StoredRange {
  na: number;
  tot: number;
}

/**
 * What a week counts as late, fixed at its first run so every rerun of the week counts the
 * same: the rows stored since the previous week's first run (login attempt ids; per tenant,
 * every tenant, audit seqs) and dated before the end of the week that run reported
 * (`laatVoor`, null: no previous run, nothing late). Those came too late for it, and are in
 * no report but this one. A row dated in a week that had no run (the service was down) is
 * not called late: it lies after `laatVoor`. `eind`: the end of this mark's week, the next
 * week's `laatVoor`. `inlog` null: no number known yet (PostgreSQL was storing a batch at
 * the first run ever).
 */
export interface LateMark {
  week: string;
  eind: string;
  laatVoor: string | null;
  inlog: StoredRange | null;
  audit: Record<string, StoredRange>;
}

const isCount = (x: unknown): x is number => Number.isSafeInteger(x) && (x as number) >= 0;
const isRange = (x: unknown): x is StoredRange => typeof x === "object" && x !== null && isCount((x as StoredRange).na) && isCount((x as StoredRange).tot);
/** An ISO moment as toISOString writes it, and one that exists (not 2026-13-45). */
const isMoment = (x: unknown): x is string => typeof x === "string" && /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/.test(x) && !Number.isNaN(Date.parse(x)) && new Date(x).toISOString() === x;

/** The stored mark, or null when there is none or it is not one (then the next mark starts from now: which older rows came late cannot be told). */
export function parseLateMark(value: string | undefined): LateMark | null {
  if (value === undefined) return null;
  try {
    const m = JSON.parse(value) as LateMark;
    if (typeof m !== "object" || m === null || typeof m.week !== "string" || !/^\d{4}-W\d{2}$/.test(m.week) || !isMoment(m.eind)) return null;
    if (m.laatVoor !== null && !isMoment(m.laatVoor)) return null;
    if (m.inlog !== null && !isRange(m.inlog)) return null;
    if (typeof m.audit !== "object" || m.audit === null || !Object.values(m.audit).every(isRange)) return null;
    return m;
  } catch {
    return null;
  }
}

/**
 * The mark of `week` (ending at `eind`) after `previous` (an earlier week's, or none), from
 * the numbers stored now: `inlog` the highest login attempt id (null: not known now,
 * PostgreSQL), `audit` the highest seq of every tenant. Each range starts where the
 * previous mark's ended; a tenant or the logins without one start now (nothing late).
 */
export function nextLateMark(week: string, eind: Date, previous: LateMark | null, current: { inlog: number | null; audit: ReadonlyMap<number, number> }): LateMark {
  const from = (before: StoredRange | undefined, now: number): StoredRange => ({ na: Math.min(before?.tot ?? now, now), tot: now });
  const audit: Record<string, StoredRange> = {};
  for (const [tenantId, seq] of current.audit) audit[String(tenantId)] = from(previous?.audit[String(tenantId)], seq);
  const inlogBefore = previous?.inlog ?? undefined;
  return {
    week,
    eind: eind.toISOString(),
    laatVoor: previous?.eind ?? null,
    // Not known now: nothing late this week; the next week starts where this one would have.
    inlog: current.inlog === null ? (inlogBefore === undefined ? null : { na: inlogBefore.tot, tot: inlogBefore.tot }) : from(inlogBefore, current.inlog),
    audit,
  };
}

/**
 * Which rows are late, once for both stores: stored in the range and dated before the
 * week's start `van`. `moment` is the store's term for the time column, written so no
 * index can serve it (SQLite `+created_at`, PostgreSQL `(created_at || '')`, the same
 * value in the column's byte-order collation): the planner keeps to the range of stored
 * numbers (what was stored since the previous mark), never the time index, whose range
 * before `van` reaches back to the first row.
 */
export const lateRule = {
  audit: (c: { tenantId: AnyColumn; seq: AnyColumn }, moment: SQL, tenantId: unknown, range: { na: unknown; tot: unknown }, van: unknown) =>
    and(eq(c.tenantId, tenantId), gt(c.seq, range.na), sql`${c.seq} <= ${range.tot}`, sql`${moment} < ${van}`),
  /** Failed (`failed`: the store's term), of a tenant: attempts without one belong to nobody's report. */
  logins: (c: { id: AnyColumn; tenantId: AnyColumn }, failed: SQL, moment: SQL, range: { na: unknown; tot: unknown }, van: unknown) =>
    and(failed, gt(c.id, range.na), sql`${c.id} <= ${range.tot}`, sql`${moment} < ${van}`, isNotNull(c.tenantId)),
};

/** A tenant's failed login attempts that came late: how many, from how many distinct IP addresses. */
export interface LateLogins {
  mislukt: number;
  ips: number;
}

/** What a tenant's report says came late; null when nothing did (no section). */
export interface TenantLate {
  audit: TenantWeekStats["audit"];
  inlog: LateLogins;
}

export function tenantLateOf(audit: TenantWeekStats["audit"], inlog: LateLogins | undefined): TenantLate | null {
  if (audit.totaal === 0 && (inlog?.mislukt ?? 0) === 0) return null;
  return { audit, inlog: inlog ?? { mislukt: 0, ips: 0 } };
}

/**
 * The week's mark: the stored one when it is this week's (a rerun), else a new one from the
 * numbers stored now, written before any message of the week is reserved. A stored mark of
 * a later week (written while the clock was ahead) is replaced, with nothing late this week.
 */
export async function lateMarkOf(q: WeeklyQueries, week: string, eind: Date): Promise<LateMark> {
  const stored = parseLateMark(await q.readLateMark());
  if (stored !== null && stored.week === week) return stored;
  const mark = nextLateMark(week, eind, stored, { inlog: await q.storedLoginId(), audit: await q.auditHeads() });
  // A mark of a later week: written while the clock was ahead. Replaced (its ranges go on),
  // with nothing late this week: its end would call rows of their own weeks late.
  if (stored !== null && stored.week > week) {
    log("warn", "weekrapport: the late mark was of a later week (the clock was ahead); replaced, nothing counted late this week", { week, stored: stored.week });
    mark.laatVoor = null;
  }
  await q.writeLateMark(JSON.stringify(mark));
  return mark;
}

/** A tenant's late section: its audit entries by action (actionTable) and its failed logins. */
export async function tenantLate(q: WeeklyQueries, mark: LateMark, tenantId: number, logins: Map<number, LateLogins>): Promise<TenantLate | null> {
  const range = mark.audit[String(tenantId)];
  const audit =
    mark.laatVoor !== null && range !== undefined && range.tot > range.na ? actionTable(await q.lateAudit(tenantId, range, new Date(mark.laatVoor))) : { totaal: 0, perActie: [] };
  return tenantLateOf(audit, logins.get(tenantId));
}

/** Every tenant's late failed logins of the mark (none without a previous run). */
export async function lateLoginsOf(q: WeeklyQueries, mark: LateMark): Promise<Map<number, LateLogins>> {
  return mark.laatVoor === null || mark.inlog === null ? new Map() : q.lateLogins(mark.inlog, new Date(mark.laatVoor));
}

const lateCounts = sqliteTable("late_counts", {
  tenantId: integer("tenant_id").primaryKey(),
  mislukt: integer("mislukt").notNull(),
  ips: integer("ips").notNull(),
});
const latePairs = sqliteTable(
  "late_pairs",
  { tenantId: integer("tenant_id").notNull(), ip: text("ip").notNull() },
  (t) => [primaryKey({ columns: [t.tenantId, t.ip] })],
);

/** lateLogins' statements, on its ReportConnection (the staging tables are there); exported so a test can check their query plans. */
export const lateLoginStatements = preparedPerConnection((db) => {
  const p = sql.placeholder;
  const la = loginAttempts;
  const page = { na: p("na"), tot: p("tot") };
  const r = db
    .select({ tenantId: la.tenantId, ip: la.ip })
    .from(la)
    .where(lateRule.logins(la, sql`${la.gelukt} = 0`, sql`+${la.tijdstip}`, page, p("van")))
    .as("r");
  return {
    // The WHERE of each SELECT keeps SQLite from reading the upsert's ON as a join's.
    counts: db
      .insert(lateCounts)
      .select(db.select({ tenantId: r.tenantId, mislukt: count().as("mislukt"), ips: sql<number>`0`.as("ips") }).from(r).where(isNotNull(r.tenantId)).groupBy(r.tenantId))
      .onConflictDoUpdate({ target: lateCounts.tenantId, set: { mislukt: sql`${lateCounts.mislukt} + ${excluded(lateCounts.mislukt)}` } })
      .prepare(),
    pairs: db.insert(latePairs).select(db.selectDistinct({ tenantId: r.tenantId, ip: r.ip }).from(r).where(isNotNull(r.tenantId))).onConflictDoNothing().prepare(),
    staged: db.select().from(lateCounts).prepare(),
    // The first stored id past a page: pages start there, so a range with long empty stretches (retention, or a mark rewritten by hand) costs no more than its rows.
    next: db.select({ id: min(la.id) }).from(la).where(gt(la.id, p("na"))).prepare(),
  };
});

/** A tenant's late audit entries by action, as the week's (weekStatsStatements' auditPerActie), on the service's connection. */
export const lateAuditStatement = preparedPerConnection((db) => {
  const p = sql.placeholder;
  const aantal = count().as("aantal");
  return db
    .select({ actie: auditEntries.action, aantal, ...actionTotals })
    .from(auditEntries)
    .where(lateRule.audit(auditEntries, sql`+${auditEntries.createdAt}`, p("tenantId"), { na: p("na"), tot: p("tot") }, p("van")))
    .groupBy(auditEntries.action)
    .orderBy(desc(aantal), auditEntries.action)
    .limit(MAX_ACTIES)
    .prepare();
});

/**
 * Every tenant's late failed logins in `range` (ids), dated before `van`. Read PAGE_ROWS
 * ids at a time from the next stored one (a rowid range: at most that many attempts a
 * statement, however many an outbox brought at once, and empty stretches skipped), with a
 * turn of the event loop between; the distinct addresses
 * are added up in the report connection's staging tables (a pair seen for the first time
 * adds one to its tenant's `ips`, as weekLogins' week_failed_pairs).
 */
export async function lateLogins(db: Db, range: StoredRange, van: Date, n = PAGE_ROWS): Promise<Map<number, LateLogins>> {
  const out = new Map<number, LateLogins>();
  if (range.tot <= range.na) return out;
  const report = openReportConnection(db);
  const statements = lateLoginStatements(report.db);
  try {
    const page = report.sqlite.transaction((na: number, tot: number) => {
      const params = { na, tot, van: van.toISOString() };
      statements.counts.run(params);
      statements.pairs.run(params);
    });
    for (let na = range.na; na < range.tot; ) {
      const first = statements.next.get({ na })?.id ?? null;
      if (first === null || first > range.tot) break;
      const tot = Math.min(first - 1 + n, range.tot);
      page(first - 1, tot);
      na = tot;
      await new Promise((r) => setImmediate(r));
    }
    for (const r of statements.staged.all()) out.set(r.tenantId, { mislukt: r.mislukt, ips: r.ips });
    return out;
  } finally {
    for (const s of Object.values(statements)) (s as { stmt?: { finalize(): void } }).stmt?.finalize();
    report.close();
  }
}

/**
 * The highest audit seq of every tenant (0 without entries: a new one gets a higher seq
 * whatever retention removed), with a turn of the event loop every HEADS_PER_TURN tenants:
 * an installation of 10,000 tenants would otherwise hold it for the whole lookup.
 */
export async function auditHeads(db: Db): Promise<Map<number, number>> {
  const tenantIds = db.select({ id: tenants.id }).from(tenants).all().map((r) => r.id);
  const head = auditHeadStatement(db);
  const heads = new Map<number, number>();
  for (const [i, tenantId] of tenantIds.entries()) {
    if (i > 0 && i % HEADS_PER_TURN === 0) await new Promise((r) => setImmediate(r));
    heads.set(tenantId, head.get({ tenantId })?.seq ?? 0);
  }
  return heads;
}
const HEADS_PER_TURN = 500;

const auditHeadStatement = preparedPerConnection((db) =>
  db
    .select({ seq: auditEntries.seq })
    .from(auditEntries)
    .where(eq(auditEntries.tenantId, sql.placeholder("tenantId")))
    .orderBy(desc(auditEntries.seq))
    .limit(1)
    .prepare(),
);
