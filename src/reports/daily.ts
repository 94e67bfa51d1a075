// The data of the daily report: backup, login attempts of the last 24 hours, the
// latest verification, the newest installation checkpoint and the public key to check
// it with, each scheduled job's last run and the database size. The job
// answers with this object and the e-mail shows the same, so they never disagree.
import type { Database } from "bun:sqlite";
import { statSync } from "node:fs";
import type { DailyReportProps } from "../../emails/DailyReport.tsx";
import { latestInstallationCheckpoint } from "../audit/anchoring.ts";
import { auditKeys } from "../audit/keys.ts";
import type { Config } from "../config.ts";
import { installedAt, type Store } from "../db.ts";
import { dueState } from "../job-runs.ts";
import { formatDag, formatDatum, formatSize, getal } from "../format.ts";
import { SCHEDULE } from "../schedule.ts";
import { DAY_MS } from "../time.ts";
import { backupOverdue } from "../jobs/backup-controle.ts";
import { redenUitleg, type Niveau } from "./shared.ts";

export type DailyReport = DailyReportProps;

/** Broken chains listed by name in the report; the count is always complete. */
const MAX_GEBROKEN = 50;

export function backupSection(sqlite: Database, now: Date, config: Pick<Config, "rapportTijdzone" | "backupMaxUren">) {
  const row = sqlite
    .query(
      `SELECT ontvangen, exit_code AS exitCode, gelukt, bestandsnaam, grootte, foutmelding, bron
       FROM backup_statuses ORDER BY ontvangen DESC, id DESC LIMIT 1`,
    )
    .get() as {
    ontvangen: string;
    exitCode: number;
    gelukt: number;
    bestandsnaam: string | null;
    grootte: number | null;
    foutmelding: string | null;
    bron: string;
  } | null;
  if (!row) {
    // Never reported: FOUT, and '-' for every fact, `bron` included (there is no origin).
    return {
      backup: { resultaat: "FOUT", gelukt: false, datum: "-", grootte: "-", bron: "-" },
      backupDetail: { ontvangen: null, exitCode: null, bestandsnaam: null, foutmelding: null, ouderdomUren: null, maxUren: config.backupMaxUren, teOud: false },
    } satisfies Pick<DailyReport, "backup" | "backupDetail">;
  }
  const gelukt = row.gelukt === 1;
  const ouderdomUren = Math.max(0, Math.floor((now.getTime() - Date.parse(row.ontvangen)) / 3600_000));
  return {
    backup: {
      resultaat: gelukt ? "OK" : "FOUT",
      gelukt,
      datum: formatDatum(row.ontvangen, config.rapportTijdzone),
      grootte: row.grootte === null ? "-" : formatSize(row.grootte),
      bron: row.bron,
    },
    backupDetail: {
      ontvangen: row.ontvangen,
      exitCode: row.exitCode,
      bestandsnaam: row.bestandsnaam,
      foutmelding: row.foutmelding || null,
      ouderdomUren,
      maxUren: config.backupMaxUren,
      teOud: backupOverdue(now.getTime() - Date.parse(row.ontvangen), config.backupMaxUren),
    },
  } satisfies Pick<DailyReport, "backup" | "backupDetail">;
}

export function loginSection(sqlite: Database, now: Date, tijdzone: string): DailyReport["inlogpogingen"] {
  const van = new Date(now.getTime() - DAY_MS).toISOString();
  const tot = now.toISOString();
  const totals = sqlite
    .query("SELECT count(*) AS totaal, coalesce(sum(gelukt), 0) AS gelukt FROM login_attempts WHERE tijdstip >= ? AND tijdstip < ?")
    .get(van, tot) as { totaal: number; gelukt: number };
  // Failed attempts only: login_attempts_failed_idx (partial, gelukt = 0) covers these.
  const { mislukteIps } = sqlite
    .query("SELECT count(DISTINCT ip) AS mislukteIps FROM login_attempts WHERE gelukt = 0 AND tijdstip >= ? AND tijdstip < ?")
    .get(van, tot) as { mislukteIps: number };
  const topMislukteIps = sqlite
    .query(
      `SELECT ip, count(*) AS aantal FROM login_attempts WHERE gelukt = 0 AND tijdstip >= ? AND tijdstip < ?
       GROUP BY ip ORDER BY aantal DESC, ip LIMIT 5`,
    )
    .all(van, tot) as { ip: string; aantal: number }[];
  return {
    van: formatDatum(van, tijdzone),
    tot: formatDatum(tot, tijdzone),
    totaal: totals.totaal,
    gelukt: totals.gelukt,
    mislukt: totals.totaal - totals.gelukt,
    mislukteIps,
    topMislukteIps,
  };
}

export function verificationSection(sqlite: Database, tijdzone: string): DailyReport["verificatie"] {
  const s = sqlite
    .query(
      `SELECT max(gecontroleerd) AS laatste, count(*) AS gecontroleerd, coalesce(sum(intact = 0), 0) AS aantalGebroken
       FROM audit_verification_state`,
    )
    .get() as { laatste: string | null; gecontroleerd: number; aantalGebroken: number };
  const { nietGecontroleerd } = sqlite
    .query(
      `SELECT count(*) AS nietGecontroleerd FROM tenants t
       WHERE NOT EXISTS (SELECT 1 FROM audit_verification_state s WHERE s.tenant_id = t.id)`,
    )
    .get() as { nietGecontroleerd: number };
  const gebroken = (
    sqlite
      .query(
        `SELECT s.tenant_id AS tenantId, t.naam AS tenant, s.fout_seq AS seq, s.fout_reden AS reden, s.gecontroleerd AS gecontroleerd
         FROM audit_verification_state s JOIN tenants t ON t.id = s.tenant_id
         WHERE s.intact = 0 ORDER BY s.tenant_id LIMIT ${MAX_GEBROKEN}`,
      )
      .all() as { tenantId: number; tenant: string; seq: number | null; reden: string | null; gecontroleerd: string }[]
  ).map((g) => ({ ...g, uitleg: redenUitleg(g.reden), gecontroleerd: formatDatum(g.gecontroleerd, tijdzone) }));
  return {
    tijdstip: s.laatste ? formatDatum(s.laatste, tijdzone) : "-",
    gecontroleerd: s.gecontroleerd,
    nietGecontroleerd,
    aantalGebroken: s.aantalGebroken,
    gebroken,
  };
}

/**
 * The newest installation checkpoint, verbatim, and the public verifier key: mailed
 * every day, so the operator holds a signed state off the machine that
 * `nachtwacht verify --checkpoint` later checks the database and anchor file against.
 */
export function anchorSection(sqlite: Database, config: Pick<Config, "auditAnkerSleutel" | "auditVertrouwdeSleutels">): DailyReport["anker"] {
  return {
    installatieCheckpoint: latestInstallationCheckpoint(sqlite),
    verificatieSleutel: auditKeys(config).signer.verifierKey,
  };
}

/**
 * Per scheduled job: its last run, the last time it was due (a fire time whose grace
 * of TAKEN_MARGE_MINUTEN has passed) and whether a run started since then. A job is
 * not overdue for fire times before the service was installed.
 */
export function jobsSection(sqlite: Database, now: Date, config: Pick<Config, "rapportTijdzone" | "takenMargeMinuten">): DailyReport["taken"] {
  const tz = config.rapportTijdzone;
  const installed = installedAt(sqlite);
  const margeMs = config.takenMargeMinuten * 60_000;
  const last = sqlite.query(
    `SELECT gestart, beeindigd, uitkomst FROM job_runs WHERE job = ? AND gestart < ? ORDER BY gestart DESC, id DESC LIMIT 1`,
  );
  const out: DailyReport["taken"] = [];
  for (const entry of SCHEDULE) {
    if (entry.cron === null) continue;
    // The same rule as taken-controle: overdue = no run started since the newest fire
    // time whose grace has run out (and that is not before the install time).
    const { due, missed: achterstallig, next } = dueState(sqlite, entry.job, entry.cron, now, margeMs, installed);
    const run = last.get(entry.job, now.toISOString()) as { gestart: string; beeindigd: string | null; uitkomst: string } | null;
    out.push({
      job: entry.job,
      cron: entry.cron,
      uitkomst: (run?.uitkomst as DailyReport["taken"][number]["uitkomst"]) ?? "nooit",
      laatsteStart: run ? formatDatum(run.gestart, tz) : "-",
      laatsteEinde: run?.beeindigd ? formatDatum(run.beeindigd, tz) : "-",
      laatstVerwacht: due ? formatDatum(due, tz) : "-",
      volgende: next ? formatDatum(next, tz) : "-",
      achterstallig,
    });
  }
  return out;
}

export function databaseSection(store: Store): DailyReport["database"] {
  const { page_count } = store.sqlite.query("PRAGMA page_count").get() as { page_count: number };
  const { page_size } = store.sqlite.query("PRAGMA page_size").get() as { page_size: number };
  let walBytes = 0;
  if (store.path !== ":memory:") {
    try {
      walBytes = statSync(`${store.path}-wal`).size;
    } catch {
      // no -wal file right after a checkpoint that truncated it, or before the first write
    }
  }
  const bytes = page_count * page_size + walBytes;
  return { bytes, grootte: formatSize(bytes), walBytes };
}

export function dailyStatus(r: Omit<DailyReport, "status" | "gemaakt" | "tijdzone">): DailyReport["status"] {
  const punten: string[] = [];
  let niveau: Niveau = "ok";
  const raise = (n: Niveau) => {
    if (n === "actie" || (n === "let-op" && niveau === "ok")) niveau = n;
  };
  if (r.backupDetail.ontvangen === null) {
    raise("actie");
    punten.push("Er is nog nooit een back-up gemeld.");
  } else if (!r.backup.gelukt) {
    raise("actie");
    punten.push(`De laatste back-up (${r.backup.datum}) is mislukt${r.backupDetail.foutmelding ? `: ${r.backupDetail.foutmelding}` : ""}.`);
  } else if (r.backupDetail.teOud) {
    raise("actie");
    punten.push(`De laatste back-up is ${r.backupDetail.ouderdomUren} uur oud (${r.backup.datum}); de grens is ${r.backupDetail.maxUren} uur.`);
  }
  if (r.verificatie.aantalGebroken > 0) {
    raise("actie");
    const namen = r.verificatie.gebroken.slice(0, 3).map((g) => g.tenant).join(", ");
    punten.push(
      `${r.verificatie.aantalGebroken === 1 ? "De auditketen van 1 tenant is" : `De auditketens van ${getal(r.verificatie.aantalGebroken)} tenants zijn`} gebroken (${namen}${r.verificatie.aantalGebroken > 3 ? ", …" : ""}).`,
    );
  }
  for (const t of r.taken) {
    if (t.achterstallig) {
      raise("let-op");
      punten.push(`${t.job} is niet gestart sinds ${t.laatstVerwacht}.`);
    } else if (t.uitkomst === "fout" || t.uitkomst === "afwijking") {
      raise("let-op");
      punten.push(`De laatste run van ${t.job} (${t.laatsteStart}) ${t.uitkomst === "fout" ? "is mislukt" : "vond een afwijking"}.`);
    }
  }
  const kop = niveau === "ok" ? "Alles in orde" : niveau === "actie" ? "Actie nodig" : "Aandacht nodig";
  return { niveau, kop, punten };
}

/** The whole daily report at `now`. */
export function buildDailyReport(store: Store, config: Config, now: Date): DailyReport {
  const tz = config.rapportTijdzone;
  const body = {
    ...backupSection(store.sqlite, now, config),
    inlogpogingen: loginSection(store.sqlite, now, tz),
    verificatie: verificationSection(store.sqlite, tz),
    anker: anchorSection(store.sqlite, config),
    taken: jobsSection(store.sqlite, now, config),
    database: databaseSection(store),
  };
  return { gemaakt: formatDatum(now, tz), tijdzone: tz, status: dailyStatus(body), ...body };
}

export function dailySubject(r: DailyReport, now: Date): string {
  const dag = formatDag(now, r.tijdzone);
  if (r.status.niveau === "ok") return `Dagrapport ${dag}: alles in orde`;
  const n = r.status.punten.length;
  return `Dagrapport ${dag}: ${r.status.niveau === "actie" ? "actie nodig" : "aandacht nodig"} (${n} ${n === 1 ? "punt" : "punten"})`;
}
