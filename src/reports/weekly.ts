// The data of the weekly report: who receives it, and per tenant the last seven days
// (audit activity, login attempts, chain state). Every per-tenant statement is bounded
// by an index on (tenant_id, time), so a run costs the tenant's week, not the table.
// Login attempts are counted for every tenant at once, in one pass over the week by
// the tijdstip index (weekLogins): a (tenant_id, tijdstip) index for per-tenant counts
// would put one scattered page per tenant into every retention batch and every insert.
//
// The queries below are SQLite's; src/pg/weekly.ts has PostgreSQL's. Both feed the
// rules here (recipientOf, loginTally, weekStatsOf, the status and the mail's props), so
// the two stores send the same reports to the same people.
import type { Config } from "../config.ts";
import { and, count, desc, eq, gte, lt, sql, type AnyColumn } from "drizzle-orm";
import {
  administrators,
  auditEntries,
  auditVerificationState,
  loginAttempts,
  tenants,
  weeklyReportDeliveries as deliveries,
} from "../../db/schema.ts";
import type { WeeklyReportProps } from "../../emails/WeeklyReport.tsx";
import { excluded, preparedPerConnection, type Db } from "../db.ts";
import { displayText, formatDatum, getal } from "../format.ts";
import { countsAsVerification, type RowSeal, type VerificationColumns, type VerificationSince } from "../row-seal.ts";
import { verificationSinceIn } from "./daily.ts";
import { redenUitleg, reportStatus, type StatusPunt } from "./shared.ts";

export const WEEK_MS = 7 * 24 * 3600 * 1000;

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
    auditPerActie: db
      .select({ actie: auditEntries.action, aantal: auditAantal })
      .from(auditEntries)
      .where(and(eq(auditEntries.tenantId, tenantId), gte(auditEntries.createdAt, van), lt(auditEntries.createdAt, tot)))
      .groupBy(auditEntries.action)
      .orderBy(desc(auditAantal), auditEntries.action)
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

/**
 * The two statements behind weekLogins, over every tenant's attempts in [van, tot);
 * exported so a test can check their query plans. Parameters: van, tot.
 */
export const weekLoginStatements = preparedPerConnection((db) => {
  const inWindow = and(gte(loginAttempts.tijdstip, sql.placeholder("van")), lt(loginAttempts.tijdstip, sql.placeholder("tot")));
  return {
    perTenant: db
      .select({ tenantId: loginAttempts.tenantId, totaal: count(), gelukt: sql<number>`coalesce(sum(${loginAttempts.gelukt}), 0)` })
      .from(loginAttempts)
      .where(inWindow)
      .groupBy(loginAttempts.tenantId)
      .prepare(),
    // The partial index login_attempts_failed_idx (gelukt = 0) bounds this one.
    mislukt: db
      .select({ tenantId: loginAttempts.tenantId, ip: loginAttempts.ip, aantal: count() })
      .from(loginAttempts)
      .where(and(inWindow, sql`${loginAttempts.gelukt} = 0`))
      .groupBy(loginAttempts.tenantId, loginAttempts.ip)
      .prepare(),
  };
});

export type TenantWeekLogins = TenantWeekStats["inlog"];

/** Failed-login IPs the report lists per tenant: the most failures first, then by address. */
const TOP_IPS = 5;
/** The week is read a day at a time, with a turn of the event loop between: one grouped scan of a whole week held it 150–200 ms at L. */
const SLICE_MS = 24 * 3600 * 1000;

/**
 * Adds up a week's login rows into each tenant's figures, however the store read them
 * (SQLite a day at a time, PostgreSQL at once): counts per tenant, failures per tenant
 * and IP. Attempts without a tenant belong to nobody's report.
 */
export function loginTally() {
  const counts = new Map<number, { totaal: number; gelukt: number }>();
  const failedByIp = new Map<number, Map<string, number>>();
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
    addFailures(rows: Iterable<{ tenantId: number | null; ip: string; aantal: number }>): void {
      for (const r of rows) {
        if (r.tenantId === null) continue;
        const ips = failedByIp.get(r.tenantId) ?? new Map<string, number>();
        ips.set(r.ip, (ips.get(r.ip) ?? 0) + r.aantal);
        failedByIp.set(r.tenantId, ips);
      }
    },
    /** Keyed by tenant; a tenant without attempts is absent. */
    result(): Map<number, TenantWeekLogins> {
      const out = new Map<number, TenantWeekLogins>();
      for (const [tenantId, c] of counts) {
        const ips = [...(failedByIp.get(tenantId) ?? new Map<string, number>())].map(([ip, aantal]) => ({ ip, aantal }));
        // Ties by address here, not in SQL: the same order on both stores, whatever the server's collation.
        ips.sort((x, y) => y.aantal - x.aantal || (x.ip < y.ip ? -1 : x.ip > y.ip ? 1 : 0));
        out.set(tenantId, { totaal: c.totaal, gelukt: c.gelukt, mislukt: c.totaal - c.gelukt, mislukteIps: ips.length, topMislukteIps: ips.slice(0, TOP_IPS) });
      }
      return out;
    },
  };
}

/** Every tenant's login attempts in [van, tot), keyed by tenant; a tenant without attempts is absent. */
export async function weekLogins(db: Db, van: Date, tot: Date): Promise<Map<number, TenantWeekLogins>> {
  const statements = weekLoginStatements(db);
  const tally = loginTally();
  for (let from = van.getTime(); from < tot.getTime(); from += SLICE_MS) {
    const params = { van: new Date(from).toISOString(), tot: new Date(Math.min(from + SLICE_MS, tot.getTime())).toISOString() };
    tally.addCounts(statements.perTenant.all(params));
    tally.addFailures(statements.mislukt.all(params));
    await new Promise((r) => setImmediate(r));
  }
  return tally.result();
}

const NO_LOGINS: TenantWeekLogins = { totaal: 0, gelukt: 0, mislukt: 0, mislukteIps: 0, topMislukteIps: [] };

/** A tenant's row of audit_verification_state, as either store reads it: with its seal. */
export type VerificationRow = VerificationColumns & { zegel: string | null };

/**
 * How many actions a weekly report lists one by one, most frequent first; the rest are
 * one row. The application chooses the actions: 20,000 distinct ones made a report of
 * 19 MB that the mail server refused (and took seconds of the event loop to render).
 */
export const MAX_ACTIES = 25;

/** The rows of the report's action table: the MAX_ACTIES - 1 most frequent, then the rest as one row, when there are more than MAX_ACTIES. */
export function actionRows(perActie: readonly { actie: string; aantal: number }[]): { actie: string; aantal: number }[] {
  if (perActie.length <= MAX_ACTIES) return [...perActie];
  const rest = perActie.slice(MAX_ACTIES - 1);
  return [...perActie.slice(0, MAX_ACTIES - 1), { actie: `(${rest.length} andere acties)`, aantal: rest.reduce((n, r) => n + r.aantal, 0) }];
}

/** One tenant's week from its audit counts per action (most first), its verification state (none: never verified) and weekLogins. */
export function weekStatsOf(
  tenantId: number,
  perActie: { actie: string; aantal: number }[],
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
    audit: { totaal: perActie.reduce((s, r) => s + r.aantal, 0), perActie: actionRows(perActie) },
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
  };
}

export function weeklySubject(p: WeeklyReportProps): string {
  const weekNr = Number(p.week.slice(p.week.indexOf("W") + 1));
  const staat = p.status.niveau === "ok" ? "alles in orde" : p.status.niveau === "actie" ? "actie nodig" : "aandacht nodig";
  // The status before the name: the name is the application's (up to 200 characters), and
  // whatever it says or however long it is, it cannot push the real status out of view.
  return `Weekrapport week ${weekNr}: ${staat} — ${displayText(p.tenant)}`;
}
