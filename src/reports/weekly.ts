// The data of the weekly report: who receives it, and per tenant the last seven days
// (audit activity, login attempts, chain state). Every per-tenant statement is bounded
// by an index on (tenant_id, time), so a run costs the tenant's week, not the table.
import type { Database } from "bun:sqlite";
import type { WeeklyReportProps } from "../../emails/WeeklyReport.tsx";
import { formatDatum, getal } from "../format.ts";
import { redenUitleg, type Niveau } from "./shared.ts";

export const WEEK_MS = 7 * 24 * 3600 * 1000;

/** The statements per tenant; exported so a test can check their query plans. */
export const WEEK_STATS_SQL = {
  auditPerActie: `SELECT action AS actie, count(*) AS aantal FROM audit_entries
    WHERE tenant_id = ? AND created_at >= ? AND created_at < ?
    GROUP BY action ORDER BY aantal DESC, action`,
  inlog: `SELECT count(*) AS totaal,
      coalesce(sum(gelukt), 0) AS gelukt,
      count(DISTINCT CASE WHEN gelukt = 0 THEN ip END) AS mislukteIps
    FROM login_attempts WHERE tenant_id = ? AND tijdstip >= ? AND tijdstip < ?`,
  topMislukteIps: `SELECT ip, count(*) AS aantal FROM login_attempts
    WHERE tenant_id = ? AND tijdstip >= ? AND tijdstip < ? AND gelukt = 0
    GROUP BY ip ORDER BY aantal DESC, ip LIMIT 5`,
  keten: `SELECT gecontroleerd, intact, aantal_entries AS aantalEntries, fout_seq AS foutSeq, fout_reden AS foutReden
    FROM audit_verification_state WHERE tenant_id = ?`,
} as const;

export interface WeekRecipient {
  tenantId: number;
  tenant: string;
  administratorId: number;
  email: string;
  /** This administrator already received this tenant's report in this ISO week. */
  alVerstuurd: boolean;
  /**
   * A send of this report started but its outcome was never recorded (the process
   * died in between): it may or may not have arrived. Not sent again (alVerstuurd is
   * true too), so nobody gets it twice; weekrapport reports it instead.
   */
  onzeker: boolean;
}

/** Weeks of delivery records kept: the rerun guard needs only the current week; a quarter stays for reference. */
export const DELIVERY_WEEKS_KEPT = 13;

/**
 * Removes delivery records of weeks before `oldestKept` ('YYYY-Www' sorts as text), so
 * the table holds about 13 weeks × administrators instead of growing for years.
 */
export function pruneDeliveries(sqlite: Database, oldestKept: string): number {
  return sqlite.query("DELETE FROM weekly_report_deliveries WHERE iso_week < ?").run(oldestKept).changes;
}

/** weekly_report_deliveries.verstuurd of a send in progress (else the ISO time of acceptance). */
export const SENDING = "verzenden";

/**
 * Every active administrator of every active tenant, in tenant order, marked when the
 * report of `isoWeek` was already accepted for them (the rerun guard).
 */
export function weekRecipients(sqlite: Database, isoWeek: string): WeekRecipient[] {
  return (
    sqlite
      .query(
        `SELECT t.id AS tenantId, t.naam AS tenant, a.id AS administratorId, a.email AS email,
           d.administrator_id IS NOT NULL AS alVerstuurd,
           coalesce(d.verstuurd = '${SENDING}', 0) AS onzeker
         FROM tenants t
         JOIN administrators a ON a.tenant_id = t.id AND a.actief = 1
         LEFT JOIN weekly_report_deliveries d
           ON d.administrator_id = a.id AND d.tenant_id = t.id AND d.iso_week = ?
         WHERE t.actief = 1
         ORDER BY t.id, a.id`,
      )
      .all(isoWeek) as (Omit<WeekRecipient, "alVerstuurd" | "onzeker"> & { alVerstuurd: number; onzeker: number })[]
  ).map((r) => ({ ...r, alVerstuurd: r.alVerstuurd === 1, onzeker: r.onzeker === 1 }));
}

/**
 * Marks a send as started, before the message goes to the transport. SMTP cannot say
 * whether a message arrived when the sender dies between the server's "250 OK" and
 * recording it; with this mark such a message is reported as uncertain instead of
 * being sent a second time by the rerun.
 */
export function reserveDelivery(sqlite: Database, r: { administratorId: number; tenantId: number }, isoWeek: string): void {
  sqlite
    .query("INSERT OR IGNORE INTO weekly_report_deliveries (administrator_id, tenant_id, iso_week, verstuurd) VALUES (?, ?, ?, ?)")
    .run(r.administratorId, r.tenantId, isoWeek, SENDING);
}

/** The transport refused the message: no longer reserved, so a rerun sends it. */
export function releaseDelivery(sqlite: Database, r: { administratorId: number; tenantId: number }, isoWeek: string): void {
  sqlite
    .query("DELETE FROM weekly_report_deliveries WHERE administrator_id = ? AND tenant_id = ? AND iso_week = ? AND verstuurd = ?")
    .run(r.administratorId, r.tenantId, isoWeek, SENDING);
}

/** Records that the transport accepted this administrator's report of this week. */
export function recordDelivery(sqlite: Database, r: { administratorId: number; tenantId: number }, isoWeek: string, now: Date): void {
  sqlite
    .query(
      `INSERT INTO weekly_report_deliveries (administrator_id, tenant_id, iso_week, verstuurd) VALUES (?, ?, ?, ?)
       ON CONFLICT (administrator_id, tenant_id, iso_week) DO UPDATE SET verstuurd = excluded.verstuurd WHERE verstuurd = '${SENDING}'`,
    )
    .run(r.administratorId, r.tenantId, isoWeek, now.toISOString());
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

export function tenantWeekStats(sqlite: Database, tenantId: number, van: Date, tot: Date): TenantWeekStats {
  const from = van.toISOString();
  const to = tot.toISOString();
  const perActie = sqlite.query(WEEK_STATS_SQL.auditPerActie).all(tenantId, from, to) as { actie: string; aantal: number }[];
  const inlog = sqlite.query(WEEK_STATS_SQL.inlog).get(tenantId, from, to) as { totaal: number; gelukt: number; mislukteIps: number };
  const topMislukteIps = sqlite.query(WEEK_STATS_SQL.topMislukteIps).all(tenantId, from, to) as { ip: string; aantal: number }[];
  const keten = sqlite.query(WEEK_STATS_SQL.keten).get(tenantId) as {
    gecontroleerd: string;
    intact: number;
    aantalEntries: number;
    foutSeq: number | null;
    foutReden: string | null;
  } | null;
  return {
    audit: { totaal: perActie.reduce((s, r) => s + r.aantal, 0), perActie },
    inlog: { ...inlog, mislukt: inlog.totaal - inlog.gelukt, topMislukteIps },
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
  const punten: string[] = [];
  let niveau: Niveau = "ok";
  const raise = (n: Niveau) => {
    if (n === "actie" || (n === "let-op" && niveau === "ok")) niveau = n;
  };
  if (s.keten.staat === "gebroken") {
    raise("actie");
    const seq = s.keten.fout?.seq != null ? ` bij volgnummer ${getal(s.keten.fout.seq)}` : "";
    punten.push(`De auditketen is gebroken${seq}: ${redenUitleg(s.keten.fout?.reden ?? null)}.`);
  } else if (s.keten.staat === "nooit") {
    raise("let-op");
    punten.push("De auditketen is nog nooit gecontroleerd.");
  } else if (s.keten.gecontroleerd && now.getTime() - Date.parse(s.keten.gecontroleerd) > VERIFICATIE_OUD_MS) {
    raise("let-op");
    punten.push(`De laatste controle van de auditketen is van ${formatDatum(s.keten.gecontroleerd, tijdzone)}, langer dan twee dagen geleden.`);
  }
  if (veelMislukt(s.inlog)) {
    raise("let-op");
    punten.push(`Opvallend veel mislukte inlogpogingen: ${getal(s.inlog.mislukt)} van ${getal(s.inlog.totaal)}, vanaf ${getal(s.inlog.mislukteIps)} IP-adressen.`);
  }
  const kop = niveau === "ok" ? "Alles in orde" : niveau === "actie" ? "Actie nodig: de auditketen is gebroken" : "Aandacht nodig";
  return { niveau, kop, punten };
}

export function weeklyReportProps(
  tenant: string,
  s: TenantWeekStats,
  o: { week: string; van: Date; tot: Date; tijdzone: string },
): WeeklyReportProps {
  return {
    tenant,
    week: o.week,
    van: formatDatum(o.van, o.tijdzone),
    tot: formatDatum(o.tot, o.tijdzone),
    tijdzone: o.tijdzone,
    status: weekStatus(s, o.tot, o.tijdzone),
    audit: s.audit,
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
  return `Weekrapport ${p.tenant}, week ${weekNr}: ${staat}`;
}
