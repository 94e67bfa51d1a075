// The data of the daily report: backup, login attempts of the last 24 hours, the
// latest verification, the newest installation checkpoint and the public key to check
// it with, each scheduled job's last run (with its duration and the usual one) and the
// database size. The job answers with this object and the e-mail shows the same, so they
// never disagree. Each store only reads (DailyInputs: readDailyInputs here for SQLite,
// readDailyInputsPg in src/pg/daily.ts); dailyReport turns either into the report, so
// the same data gives the same report and mail on both.
import type { Database } from "bun:sqlite";
import { statSync } from "node:fs";
import { and, count, countDistinct, desc, eq, getTableColumns, gte, isNotNull, lt, sql } from "drizzle-orm";
import { auditVerificationState, jobRuns, loginAttempts, tenants } from "../../db/schema.ts";
import { toekomstTekst, type DailyReportProps } from "../../emails/DailyReport.tsx";
import { operatorRecords } from "../audit/anchor-check.ts";
import { installationWitness, NEWEST_INSTALLATION_SQL, type InstallationRow, type InstallationWitness } from "../audit/anchoring.ts";
import { auditKeys } from "../audit/keys.ts";
import { operatorWarnings } from "../audit/verify-all.ts";
import type { Config } from "../config.ts";
import { preparedPerConnection, type Db, type Store } from "../db.ts";
import { CLOCK_SKEW_LIMIT_MS, offsetSeconds } from "../pg/clock.ts";
import { diskLevel, fileSystemSpace, freePercent, watchedPaths, type FileSystemSpace } from "../disk-space.ts";
import { displayText, formatDag, formatDatum, formatSize, getal } from "../format.ts";
import { newestRunRows, type Outcome } from "../job-runs.ts";
import { countsAsVerification, verificationSince, verificationWitnessFile, witnessedMoment, mapInTurns, NEWEST_ROWS, newestSealed, rowSealOf, sealedRunColumns, type RowSeal, type SealedBackup, type SealedRunRow, type VerificationColumns, type VerificationSince } from "../row-seal.ts";
import { SCHEDULE, scheduleOf, type JobName } from "../schedule.ts";
import { jobStatuses, type DueState, type JobStatus, type JobStatusName } from "../schedule-due.ts";
import type { JobContext } from "../jobs/job.ts";
import { DAY_MS } from "../time.ts";
import { backupOverdue, newestBackup, type NewestBackup } from "../jobs/backup-controle.ts";
import { countTenants, tenantsLevel } from "../ingest/tenants.ts";
import { postponedTooLong, readPostponement, type Postponement } from "../jobs/late-postponed.ts";
import { redenUitleg, reportStatus, type StatusPunt } from "./shared.ts";

export type DailyReport = DailyReportProps;

/** Broken chains listed by name in the report; the count is always complete. */
export const MAX_GEBROKEN = 50;

/** How many successful runs the usual duration is the median of. */
export const USUAL_DURATION_RUNS = 10;

// What the report is made of. Each store reads these the same way (SQLite below,
// PostgreSQL in src/pg/daily.ts); everything after the reads (status, formatting, the
// mail) is the one set of rules in dailyReport and the sections it calls.

/** Login attempts within loginWindow(now), all tenants. */
export interface LoginCounts {
  totaal: number;
  gelukt: number;
  /** Distinct IP addresses with at least one failed attempt. */
  mislukteIps: number;
  /** At most 5: most failed attempts first, then by IP in byte order. */
  topMislukteIps: { ip: string; aantal: number }[];
}

/** audit_verification_state against the tenants. */
export interface VerificationCounts {
  /** The newest `gecontroleerd`, ISO; null before the first verification. */
  laatste: string | null;
  gecontroleerd: number;
  nietGecontroleerd: number;
  aantalGebroken: number;
  /** At most MAX_GEBROKEN, by tenant id. */
  gebroken: { tenantId: number; tenant: string; seq: number | null; reden: string | null; gecontroleerd: string }[];
  /** The number of tenants (the report's `tenants` section against TENANTS_MAX). */
  tenants: number;
}

/** A record the operator signed by hand, as audit_anchor_log holds it (operatorRecords checks its signature). */
export interface OperatorRecordRow {
  soort: string;
  tenantId: number;
  note: string;
  positie: number;
}

export interface AnchorRecords {
  /** The anchor file's newest installation checkpoint, checked against the database's row (installationWitness). */
  installatie: InstallationWitness;
  /** Adoptions and accepted restores, in positie order. */
  operatorRecords: OperatorRecordRow[];
}

/** A scheduled job's runs started before `now` and where it stands against its cron expression. */
export interface ScheduledJobRuns {
  job: JobName;
  cron: string;
  /** From statusesOf, the rule taken-controle and /metrics apply too. */
  due: Pick<DueState, "due" | "next">;
  /** Its status by that rule (lease-aware: a run alive in another instance is `loopt`, one nothing keeps alive `onderbroken`). */
  status: JobStatusName;
  lastRun: { gestart: string; beeindigd: string | null; uitkomst: Outcome } | null;
  /** Its newest successful, finished runs: at most USUAL_DURATION_RUNS. */
  okRuns: { gestart: string; beeindigd: string }[];
}

export interface DailyInputs {
  backup: NewestBackup | null;
  /** The newest sealed report dated ahead (SealedBackup.future): it does not count, and the report says so. */
  backupAhead: NewestBackup | null;
  logins: LoginCounts;
  verification: VerificationCounts;
  anchor: AnchorRecords;
  /** Every job of SCHEDULE with a cron expression, in SCHEDULE's order. */
  jobs: ScheduledJobRuns[];
  database: DailyReport["database"];
  /** The file systems of this host nachtwacht writes to (src/disk-space.ts): the same read for both stores. */
  schijf: FileSystemSpace[];
  /** beveiligingslog-analyse's postponed late part (src/jobs/late-postponed.ts), read the same way on both stores. */
  postponement: Postponement | null;
}

/** The login window: the 24 hours before `now`, as ISO bounds (from inclusive, to exclusive). */
export function loginWindow(now: Date): { van: string; tot: string } {
  return { van: new Date(now.getTime() - DAY_MS).toISOString(), tot: now.toISOString() };
}

export function backupSection(row: NewestBackup | null, now: Date, config: Pick<Config, "rapportTijdzone" | "backupMaxUren">, ahead: NewestBackup | null = null) {
  const toekomst = ahead && {
    ontvangen: ahead.ontvangen,
    datum: formatDatum(ahead.ontvangen, config.rapportTijdzone),
    gelukt: ahead.gelukt,
    exitCode: ahead.exitCode,
    foutmelding: ahead.foutmelding || null,
  };
  if (!row) {
    // Never reported: FOUT, and '-' for every fact, `bron` included (there is no origin).
    return {
      backup: { resultaat: "FOUT", gelukt: false, datum: "-", grootte: "-", bron: "-" },
      backupDetail: { ontvangen: null, exitCode: null, bestandsnaam: null, foutmelding: null, ouderdomUren: null, maxUren: config.backupMaxUren, teOud: false, toekomst },
    } satisfies Pick<DailyReport, "backup" | "backupDetail">;
  }
  const gelukt = row.gelukt;
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
      toekomst,
    },
  } satisfies Pick<DailyReport, "backup" | "backupDetail">;
}

export function loginSection(counts: LoginCounts, now: Date, tijdzone: string): DailyReport["inlogpogingen"] {
  const { van, tot } = loginWindow(now);
  return {
    van: formatDatum(van, tijdzone),
    tot: formatDatum(tot, tijdzone),
    totaal: counts.totaal,
    gelukt: counts.gelukt,
    mislukt: counts.totaal - counts.gelukt,
    mislukteIps: counts.mislukteIps,
    topMislukteIps: counts.topMislukteIps,
  };
}

export function verificationSection(v: VerificationCounts, tijdzone: string): DailyReport["verificatie"] {
  return {
    tijdstip: v.laatste ? formatDatum(v.laatste, tijdzone) : "-",
    gecontroleerd: v.gecontroleerd,
    nietGecontroleerd: v.nietGecontroleerd,
    aantalGebroken: v.aantalGebroken,
    gebroken: v.gebroken.map((g) => ({ ...g, uitleg: redenUitleg(g.reden), gecontroleerd: formatDatum(g.gecontroleerd, tijdzone) })),
  };
}

/**
 * The newest installation checkpoint, verbatim, and the public verifier key: mailed
 * every day, so the operator holds a signed state off the machine that
 * `nachtwacht verify --checkpoint` later checks the database and anchor file against.
 * The checkpoint is the anchor file's, opened under the trusted keys (installationWitness):
 * a database writer cannot choose which one is mailed; what disagrees is `checkpointProbleem`.
 * Beside them what the operator signed by hand (adoptions, accepted restores), from the
 * database's copy of the anchor file: named every day, never silently part of the chain.
 */
export function anchorSection(a: AnchorRecords, config: Pick<Config, "auditAnkerSleutel" | "auditVertrouwdeSleutels">): DailyReport["anker"] {
  const keys = auditKeys(config);
  return {
    installatieCheckpoint: a.installatie.checkpoint,
    checkpointProbleem: a.installatie.probleem,
    verificatieSleutel: keys.signer.verifierKey,
    waarschuwingen: operatorWarnings(operatorRecords(a.operatorRecords, keys.verifiers)),
  };
}

/** The duration of a run in whole milliseconds, null while it has no end. */
function durationMs(run: { gestart: string; beeindigd: string | null }): number | null {
  if (run.beeindigd === null) return null;
  return Math.max(0, Date.parse(run.beeindigd) - Date.parse(run.gestart));
}

/** The median, rounded to whole milliseconds (the mean of the middle two of an even count); null for none. */
export function median(values: number[]): number | null {
  if (values.length === 0) return null;
  const v = [...values].sort((a, b) => a - b);
  const mid = Math.floor(v.length / 2);
  return v.length % 2 === 1 ? v[mid]! : Math.round((v[mid - 1]! + v[mid]!) / 2);
}

/** `850 ms`, `12.4 s`, `3 min 05 s`, `2 h 07 min`; '-' for none. */
export function formatDuur(ms: number | null): string {
  if (ms === null) return "-";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 59_950) return `${(ms / 1000).toFixed(1)} s`;
  const s = Math.round(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, "0")} s`;
  const m = Math.round(s / 60);
  return `${Math.floor(m / 60)} h ${String(m % 60).padStart(2, "0")} min`;
}

/**
 * Per scheduled job: its last run, the last time it was due (a fire time whose grace
 * of TAKEN_MARGE_MINUTEN has passed) and whether a run started since then. A job is
 * not overdue for fire times before the service was installed. Beside the last run's
 * duration the usual one: the median of its last USUAL_DURATION_RUNS successful runs
 * (db-onderhoud keeps that many whatever their age).
 */
export function jobsSection(jobs: readonly ScheduledJobRuns[], config: Pick<Config, "rapportTijdzone">): DailyReport["taken"] {
  const tz = config.rapportTijdzone;
  return jobs.map(({ job, cron, due, status, lastRun: run, okRuns }) => {
    const laatsteDuurMs = run ? durationMs(run) : null;
    const usual = okRuns.map((r) => durationMs(r)!);
    const gebruikelijkeDuurMs = median(usual);
    return {
      job,
      cron,
      uitkomst: run?.uitkomst ?? "nooit",
      laatsteStart: run ? formatDatum(run.gestart, tz) : "-",
      laatsteEinde: run?.beeindigd ? formatDatum(run.beeindigd, tz) : "-",
      laatsteDuurMs,
      laatsteDuur: formatDuur(laatsteDuurMs),
      gebruikelijkeDuurMs,
      gebruikelijkeDuur: formatDuur(gebruikelijkeDuurMs),
      gebruikelijkOver: usual.length,
      laatstVerwacht: due.due ? formatDatum(due.due, tz) : "-",
      volgende: due.next ? formatDatum(due.next, tz) : "-",
      achterstallig: status === "gemist",
      status,
    };
  });
}

/** The database section from the store's byte counts, whatever the store counts. */
export function databaseSection(bytes: number, walBytes: number, clockOffsetMs: number | null = null): DailyReport["database"] {
  return { bytes, grootte: formatSize(bytes), walBytes, klokAfwijkingSeconden: clockOffsetMs === null ? null : offsetSeconds(clockOffsetMs) };
}

/** The disk section: each file system with its level against SCHIJF_MIN_VRIJ_PROCENT (diskLevel). */
export function diskSection(spaces: FileSystemSpace[], minVrijProcent: number): DailyReport["schijf"] {
  return spaces.map((fs) => ({
    bestanden: fs.bestanden,
    map: fs.map,
    vrijBytes: fs.vrijBytes,
    totaalBytes: fs.totaalBytes,
    vrij: formatSize(fs.vrijBytes),
    totaal: formatSize(fs.totaalBytes),
    vrijProcent: Math.floor(freePercent(fs) * 10) / 10,
    niveau: diskLevel(fs, minVrijProcent),
  }));
}

/** The tenants against TENANTS_MAX, by the write API's own rule (tenantsLevel). */
export function tenantsSection(aantal: number, max: number): DailyReport["tenants"] {
  return { aantal, max, niveau: tenantsLevel(aantal, max) };
}

/** The postponed late part: let-op once it lasts longer than an hour (postponedTooLong, four quarter-hourly runs). */
export function postponedSection(p: Postponement | null, now: Date, tijdzone: string): DailyReport["laatUitgesteld"] {
  return { runs: p?.runs ?? 0, sinds: p ? formatDatum(p.sinds, tijdzone) : null, niveau: postponedTooLong(p, now) ? "let-op" : "ok" };
}

/**
 * The tenants' status point: at TENANTS_MAX every new tenant is refused (422, and then
 * its audit entries and login attempts as an unknown tenant), which nothing else tells
 * the operator of; from TENANTS_NEAR_MAX_PERCENT on, before that happens.
 */
function tenantsPoint(t: DailyReport["tenants"]): StatusPunt | null {
  const raise = `Verhoog TENANTS_MAX in het env-bestand van nachtwacht (/etc/nachtwacht/nachtwacht.env) en herstart de service; reken met wat elke tenant elke nacht blijvend kost (een regel in het ankerbestand, docs/operations.md "What grows with the years").`;
  if (t.niveau === "actie") {
    return [
      "actie",
      `Er zijn ${getal(t.aantal)} tenants en TENANTS_MAX is ${getal(t.max)}: nieuwe tenants worden geweigerd (PUT /api/tenants/{id} antwoordt 422, en hun auditregels en inlogpogingen worden niet opgeslagen). Bestaande tenants werken gewoon. ${raise}`,
    ];
  }
  if (t.niveau === "let-op") {
    return [
      "let-op",
      `Er zijn ${getal(t.aantal)} tenants, ${Math.floor((t.aantal * 100) / t.max)} % van TENANTS_MAX (${getal(t.max)}): vanaf ${getal(t.max)} worden nieuwe tenants geweigerd (422). ${raise}`,
    ];
  }
  return null;
}

export function dailyStatus(r: Omit<DailyReport, "status" | "gemaakt" | "tijdzone">): DailyReport["status"] {
  const punten: StatusPunt[] = [];
  const skew = r.database.klokAfwijkingSeconden;
  if (skew !== null && Math.abs(skew) * 1000 > CLOCK_SKEW_LIMIT_MS) {
    punten.push([
      "let-op",
      `De klok van deze host wijkt ${Math.abs(skew)} s af van die van de databaseserver (die loopt ${skew > 0 ? "voor" : "achter"}). ` +
        `De tijden die deze host vastlegt (runs, auditregels) wijken even veel af, en taken-controle beoordeelt er de runs van de andere instantie mee: zet NTP aan (timedatectl), op elke host.`,
    ]);
  }
  for (const fs of r.schijf) {
    if (fs.niveau === "ok") continue;
    const wat = fs.bestanden.length === 1 ? `het ${fs.bestanden[0]}` : `${fs.bestanden.slice(0, -1).join(", ")} en ${fs.bestanden.at(-1)}`;
    punten.push([
      fs.niveau,
      `${fs.niveau === "actie" ? "De schijf is bijna vol" : "De schijf raakt vol"}: nog ${fs.vrij} vrij (${fs.vrijProcent} %) op de schijf van ${wat} (${fs.map}). ` +
        `Maak ruimte of vergroot de schijf voordat schrijven mislukt.`,
    ]);
  }
  if (r.backupDetail.ontvangen === null) {
    punten.push(["actie", "Er is nog nooit een back-up gemeld."]);
  } else if (!r.backup.gelukt) {
    // The host's own words (any text): a point is one line, in the JSON as in the mail.
    punten.push(["actie", `De laatste back-up (${r.backup.datum}) is mislukt${r.backupDetail.foutmelding ? `: ${displayText(r.backupDetail.foutmelding)}` : ""}.`]);
  } else if (r.backupDetail.teOud) {
    punten.push(["actie", `De laatste back-up is ${r.backupDetail.ouderdomUren} uur oud (${r.backup.datum}); de grens is ${r.backupDetail.maxUren} uur.`]);
  }
  // Beside the one that counts, whatever it says: a report dated ahead may be a newer failure.
  if (r.backupDetail.toekomst) {
    punten.push([
      "actie",
      `Een back-upmelding staat in de toekomst geregistreerd (${displayText(toekomstTekst(r.backupDetail.toekomst))}): de klok van de server liep voor toen ze binnenkwam, en ze telt niet. ` +
        `Controleer de tijdsynchronisatie (NTP) van de server; docs/operations.md zegt hoe de melding weg kan.`,
    ]);
  }
  if (r.anker.checkpointProbleem !== null) punten.push(["actie", r.anker.checkpointProbleem]);
  const tenantsPunt = tenantsPoint(r.tenants);
  if (tenantsPunt) punten.push(tenantsPunt);
  const u = r.laatUitgesteld;
  if (u.niveau === "let-op") {
    punten.push([
      "let-op",
      `beveiligingslog-analyse heeft de te laat ontvangen mislukte inlogpogingen sinds ${u.sinds} niet beoordeeld (${getal(u.runs)} runs op rij uitgesteld): ` +
        `steeds werd er een partij inlogpogingen opgeslagen. Zo blijft een late brute-force-aanval onopgemerkt. ` +
        `Zoek in PostgreSQL een sessie die al lang een transactie openhoudt (pg_stat_activity, docs/operations.md "Late login attempts postponed").`,
    ]);
  }
  if (r.verificatie.aantalGebroken > 0) {
    const namen = r.verificatie.gebroken.slice(0, 3).map((g) => displayText(g.tenant)).join(", ");
    punten.push([
      "actie",
      `${r.verificatie.aantalGebroken === 1 ? "De auditketen van 1 tenant is" : `De auditketens van ${getal(r.verificatie.aantalGebroken)} tenants zijn`} gebroken (${namen}${r.verificatie.aantalGebroken > 3 ? ", …" : ""}).`,
    ]);
  }
  // By the job's status (statusesOf, as taken-controle raises its alarms): job-interrupted
  // and job-hung are not mailed (src/alarms/mail-channel.ts), so this is where an
  // operator without Sentry or Prometheus learns of them.
  for (const t of r.taken) {
    if (t.status === "gemist") {
      punten.push(["let-op", `${t.job} is niet gestart sinds ${t.laatstVerwacht}.`]);
    } else if (t.status === "onderbroken") {
      punten.push([
        "let-op",
        `De laatste run van ${t.job} (${t.laatsteStart}) is nooit beëindigd en geen proces voert hem nog uit: de service is tijdens de run gestopt of gecrasht, ` +
          `of kon het einde niet vastleggen, en het werk is niet af. Zoek in het log van de service waarom, en roep de taak opnieuw aan.`,
      ]);
    } else if (t.status === "hangt") {
      punten.push([
        "actie",
        `De run van ${t.job} die ${t.laatsteStart} startte, loopt langer dan de maximale looptijd van ${scheduleOf(t.job as JobName).maxRuntimeMinutes} minuten en hangt waarschijnlijk; ` +
          `zolang hij loopt, worden nieuwe aanroepen van de taak geweigerd. Kijk in het log wat de taak doet (database vergrendeld, mailserver die niet antwoordt) en herstart de service als hij niet verder komt.`,
      ]);
    } else if (t.uitkomst === "fout" || t.uitkomst === "afwijking") {
      punten.push(["let-op", `De laatste run van ${t.job} (${t.laatsteStart}) ${t.uitkomst === "fout" ? "is mislukt" : "vond een afwijking"}.`]);
    }
  }
  return reportStatus(punten);
}

/** The whole daily report at `now`, from what either store read. */
export function dailyReport(inputs: DailyInputs, config: Config, now: Date): DailyReport {
  const tz = config.rapportTijdzone;
  const body = {
    ...backupSection(inputs.backup, now, config, inputs.backupAhead),
    inlogpogingen: loginSection(inputs.logins, now, tz),
    verificatie: verificationSection(inputs.verification, tz),
    anker: anchorSection(inputs.anchor, config),
    taken: jobsSection(inputs.jobs, config),
    database: inputs.database,
    schijf: diskSection(inputs.schijf, config.schijfMinVrijProcent),
    tenants: tenantsSection(inputs.verification.tenants, config.tenantsMax),
    laatUitgesteld: postponedSection(inputs.postponement, now, tz),
  };
  return { gemaakt: formatDatum(now, tz), tijdzone: tz, status: dailyStatus(body), ...body };
}

// The reads on SQLite. Their PostgreSQL counterparts are in src/pg/daily.ts.

export function loginCounts(db: Db, now: Date): LoginCounts {
  const { van, tot } = loginWindow(now);
  const inWindow = and(gte(loginAttempts.tijdstip, van), lt(loginAttempts.tijdstip, tot));
  const totals = db
    .select({ totaal: count(), gelukt: sql<number>`coalesce(sum(${loginAttempts.gelukt}), 0)` })
    .from(loginAttempts)
    .where(inWindow)
    .get()!;
  // Failed attempts only: login_attempts_failed_idx (partial, gelukt = 0) covers these.
  // The term is the index's own, a literal 0: a bound false needs SQLite to re-plan per value.
  const failed = and(sql`${loginAttempts.gelukt} = 0`, inWindow);
  const { mislukteIps } = db.select({ mislukteIps: countDistinct(loginAttempts.ip) }).from(loginAttempts).where(failed).get()!;
  const aantal = count().as("aantal");
  const topMislukteIps = db
    .select({ ip: loginAttempts.ip, aantal })
    .from(loginAttempts)
    .where(failed)
    .groupBy(loginAttempts.ip)
    .orderBy(desc(aantal), loginAttempts.ip)
    .limit(5)
    .all();
  return { totaal: totals.totaal, gelukt: totals.gelukt, mislukteIps, topMislukteIps };
}

/**
 * The verification section from each tenant's result (with its tenant's name) and the
 * number of tenants: the one rule for both stores and /metrics. A result counts only when
 * countsAsVerification (sealed, not dated ahead); a tenant without one is not checked.
 */
export async function verificationSummary(
  rows: readonly (VerificationColumns & { zegel: string | null; tenant: string })[],
  tenantCount: number,
  seal: RowSeal,
  now: Date,
  /** verificationSince: results older than the newest run's are put back, not its. */
  since: VerificationSince,
): Promise<VerificationCounts> {
  // A seal not seen before costs 70-80 µs (bench/seal.ts): after a restart, or the other
  // instance's night, a thousand tenants are 80 ms, checked a chunk at a time (mapInTurns).
  const counts = await mapInTurns(rows, (r) => countsAsVerification(r, seal, now, since));
  const real = rows.filter((_, i) => counts[i]).sort((a, b) => a.tenantId - b.tenantId);
  const broken = real.filter((r) => !r.intact);
  return {
    laatste: real.reduce<string | null>((m, r) => (m === null || r.gecontroleerd > m ? r.gecontroleerd : m), null),
    gecontroleerd: real.length,
    nietGecontroleerd: tenantCount - real.length,
    aantalGebroken: broken.length,
    gebroken: broken.slice(0, MAX_GEBROKEN).map((r) => ({ tenantId: r.tenantId, tenant: r.tenant, seq: r.foutSeq, reden: r.foutReden, gecontroleerd: r.gecontroleerd })),
    tenants: tenantCount,
  };
}

/** Every tenant's verification result with its name, and the number of tenants; summed up by verificationSummary (verificationCountsPg on PostgreSQL). `config` names the witness file (verificationWitnessFile). */
export function verificationCounts(db: Db, now: Date, seal: RowSeal, config: Pick<Config, "auditAnkerBestand">): Promise<VerificationCounts> {
  const state = auditVerificationState;
  const rows = db
    .select({ ...getTableColumns(state), tenant: tenants.naam })
    .from(state)
    .innerJoin(tenants, eq(tenants.id, state.tenantId))
    .all();
  return verificationSummary(rows, countTenants(db), seal, now, verificationSinceIn(db, seal, now, config));
}

/** verificationSince on SQLite, over audit-verificatie's newest rows that count at `now` (newestRunRows) and its witness file. */
export function verificationSinceIn(db: Db, seal: RowSeal, now: Date, config: Pick<Config, "auditAnkerBestand">): VerificationSince {
  return verificationSince(newestRunRows(db, "audit-verificatie", now), seal, witnessedMoment(verificationWitnessFile(config)), now);
}

/** The operator's records, through the partial index audit_anchor_log_operator_idx (a test checks the plan). */
export const OPERATOR_RECORDS_SQL =
  "SELECT soort, tenant_id AS tenantId, note, positie FROM audit_anchor_log WHERE soort IN ('adoptie', 'herstel') AND tenant_id IS NOT NULL ORDER BY positie";

/** The anchor records on SQLite: the installation checkpoint from the anchor file (installationWitness), the operator's records from the rows. */
export function anchorRecords(sqlite: Database, config: Pick<Config, "auditAnkerBestand" | "auditAnkerSleutel" | "auditVertrouwdeSleutels">): AnchorRecords {
  const row = sqlite.query(NEWEST_INSTALLATION_SQL).get() as InstallationRow | null;
  return {
    installatie: installationWitness(row, config.auditAnkerBestand, auditKeys(config).verifiers),
    // Raw SQL: a handful of rows, read as the anchor file's lines are.
    operatorRecords: sqlite.query(OPERATOR_RECORDS_SQL).all() as OperatorRecordRow[],
  };
}

/** A job's newest rows started before `now`, for its last sealed run; run for every scheduled job, so prepared once. */
const lastRunBeforeStatement = preparedPerConnection((db) =>
  db
    .select(sealedRunColumns(jobRuns))
    .from(jobRuns)
    .where(and(eq(jobRuns.job, sql.placeholder("job")), lt(jobRuns.gestart, sql.placeholder("now"))))
    .orderBy(desc(jobRuns.gestart), desc(jobRuns.id))
    .limit(NEWEST_ROWS)
    .prepare(),
);

/** A job's newest successful rows started before `now`, for its last USUAL_DURATION_RUNS sealed ones; prepared once. */
const okRunsBeforeStatement = preparedPerConnection((db) =>
  db
    .select(sealedRunColumns(jobRuns))
    .from(jobRuns)
    .where(and(eq(jobRuns.job, sql.placeholder("job")), eq(jobRuns.uitkomst, "ok"), isNotNull(jobRuns.beeindigd), lt(jobRuns.gestart, sql.placeholder("now"))))
    .orderBy(desc(jobRuns.gestart), desc(jobRuns.id))
    .limit(USUAL_DURATION_RUNS + NEWEST_ROWS)
    .prepare(),
);

/** The runs the daily report shows of a job, from its newest rows (newest first): only sealed ones (src/row-seal.ts). */
export function sealedReportRuns(
  seal: RowSeal,
  last: readonly (SealedRunRow & { uitkomst: Outcome })[],
  ok: readonly SealedRunRow[],
): Pick<ScheduledJobRuns, "lastRun" | "okRuns"> {
  const run = newestSealed(last, seal.sealed).run;
  return {
    lastRun: run ? { gestart: run.gestart, beeindigd: run.beeindigd, uitkomst: run.uitkomst } : null,
    okRuns: ok
      .filter((r) => seal.sealed(r))
      .slice(0, USUAL_DURATION_RUNS)
      .map((r) => ({ gestart: r.gestart, beeindigd: r.beeindigd! })),
  };
}

/** Every scheduled job's status (jobStatuses, jobStatusesPg) in the shape the report reads it. */
export function scheduledStatuses(statuses: readonly JobStatus[]): { job: JobName; cron: string; due: DueState; status: JobStatusName }[] {
  return statuses.flatMap((s) => (s.cron === null || s.due === null || s.status === null ? [] : [{ job: s.job, cron: s.cron, due: s.due, status: s.status }]));
}

/**
 * Per scheduled job its status by taken-controle's rule (jobStatuses) and the runs the
 * report shows. `context`: what the job wrapper knows of this process (dagrapport's own
 * run is alive); called directly, nothing of this process runs.
 */
export function scheduledJobRuns(
  db: Db,
  now: Date,
  config: Pick<Config, "takenMargeMinuten" | "auditAnkerSleutel" | "auditVertrouwdeSleutels">,
  context: JobContext = { running: [], unrecorded: [] },
): ScheduledJobRuns[] {
  const seal = rowSealOf(config);
  const lastRunBefore = lastRunBeforeStatement(db);
  const okRunsBefore = okRunsBeforeStatement(db);
  return scheduledStatuses(jobStatuses(db, seal, now, config.takenMargeMinuten * 60_000, context)).map(({ job, cron, due, status }) => {
    const at = { job, now: now.toISOString() };
    return { job, cron, due, status, ...sealedReportRuns(seal, lastRunBefore.all(at), okRunsBefore.all(at)) };
  });
}

/** Pages × page size plus the -wal file: what the database takes on disk. */
export function databaseSize(store: Store): DailyReport["database"] {
  // Raw SQL: Drizzle has no builder for pragmas.
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
  return databaseSection(page_count * page_size + walBytes, walBytes);
}

/** The daily report's part of a SealedBackup, for either store. */
export const backupInputs = (b: SealedBackup<NewestBackup>): Pick<DailyInputs, "backup" | "backupAhead"> => ({ backup: b.backup, backupAhead: b.future });

export async function readDailyInputs(store: Store, config: Config, now: Date, context: JobContext = { running: [], unrecorded: [] }): Promise<DailyInputs> {
  const verification = verificationCounts(store.db, now, rowSealOf(config), config);
  const postponement = readPostponement(store);
  return {
    ...backupInputs(newestBackup(store.db, rowSealOf(config), now)),
    logins: loginCounts(store.db, now),
    verification: await verification,
    anchor: anchorRecords(store.sqlite, config),
    jobs: scheduledJobRuns(store.db, now, config, context),
    database: databaseSize(store),
    schijf: fileSystemSpace(watchedPaths(config, store.path)),
    postponement: await postponement,
  };
}

/** The whole daily report at `now` on SQLite (on PostgreSQL: buildDailyReportPg in src/pg/daily.ts). */
export async function buildDailyReport(store: Store, config: Config, now: Date, context: JobContext = { running: [], unrecorded: [] }): Promise<DailyReport> {
  return dailyReport(await readDailyInputs(store, config, now, context), config, now);
}

export function dailySubject(r: DailyReport, now: Date): string {
  const dag = formatDag(now, r.tijdzone);
  if (r.status.niveau === "ok") return `Dagrapport ${dag}: alles in orde`;
  const n = r.status.punten.length;
  return `Dagrapport ${dag}: ${r.status.niveau === "actie" ? "actie nodig" : "aandacht nodig"} (${n} ${n === 1 ? "punt" : "punten"})`;
}
