// GET /metrics: the state of the night watch for Prometheus, in the text exposition
// format 0.0.4. Three parts, each usable on its own:
//   collectMetrics(sources, now)  reads the state: a handful of indexed queries, the
//                                 in-process guard and the write API's counters;
//   renderMetrics(snapshot)       a plain function from that state to the text;
//   metricsAccess(…)              who may read it: any loopback peer without a token,
//                                 anyone else only with METRICS_SECRET.
// The rules behind the values are the ones the jobs use (jobStatuses, taken-controle's
// rule and grace, also reading the job leases; newestBackup and backupOverdue from
// backup-controle), never copies of them.
// docs/operations.md ("Metrics") lists every metric; ops/nachtwacht-alerts.yml alerts on them.
import type { Config } from "../config.ts";
import { Elysia } from "elysia";
import type { Store } from "../db.ts";
import type { Deps } from "../deps.ts";
import type { IngestCounters, IngestKind } from "../ingest/counters.ts";
import type { Outcome } from "../job-runs.ts";
import { backupOverdue, newestBackup, type NewestBackup } from "../jobs/backup-controle.ts";
import { readPostponement } from "../jobs/late-postponed.ts";
import type { JobContext } from "../jobs/job.ts";
import { errorText, limitedLog } from "../logger.ts";
import { fileSystemSpace, watchedPaths, type WatchedFile } from "../disk-space.ts";
import { databaseClockOffsetMs } from "../pg/clock.ts";
import { jobStatusesPg, newestBackupPg } from "../pg/status.ts";
import { verificationCountsPg } from "../pg/daily.ts";
import type { PgStore } from "../pg/store.ts";
import type { RunningJobs } from "../running-jobs.ts";
import { JOB_STATUSES, jobStatuses, type JobStatus, type JobStatusName } from "../schedule-due.ts";
import { SCHEDULE, type JobName } from "../schedule.ts";
import { rowSealOf, type RowSeal, type SealedBackup } from "../row-seal.ts";
import { verificationCounts, type VerificationCounts } from "../reports/daily.ts";
import { anySecretChecker, bearerChecker, unauthorized } from "./auth.ts";
import { driverError, ErrorBody, json } from "./errors.ts";
import { jobContext } from "./job-route.ts";
import packageJson from "../../package.json" with { type: "json" };

/**
 * The scrape's warnings, at most one per 10 minutes each: a Prometheus scrapes every few
 * seconds, and a local process without a token (loopback) as often as it likes — one line
 * per scrape while the database is down was 2,300 a second.
 */
const scrapeWarning = limitedLog(10 * 60_000);

export const METRICS_PATH = "/metrics";
export const METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

/** Every value of job_runs.uitkomst, each a series of nachtwacht_job_last_outcome. */
export const OUTCOMES: readonly Outcome[] = ["ok", "afwijking", "fout", "bezig"];
const INGEST_KINDS: readonly IngestKind[] = ["audit", "inlogpogingen", "tenants", "beheerders"];
/**
 * Refusal statuses present from the first scrape (at 0), so that rate() and increase()
 * see the first refusal of each: a series that appears with 1 counts as no increase.
 */
const REJECTED_STATUSES = ["400", "401", "403", "404", "409", "413", "422", "503"];

export interface MetricsSources {
  deps: Deps;
  running: RunningJobs;
  counters: IngestCounters;
}

export interface JobMetrics {
  job: JobName;
  /** Start of the newest run (job_runs), null when it never ran. */
  lastStart: Date | null;
  /** End of the newest run, null while it has none (running, interrupted, never ran). */
  lastEnd: Date | null;
  /** Outcome of the newest run, null when it never ran. */
  outcome: Outcome | null;
  /** Runs in this process now (RunningJobs). */
  running: boolean;
  /** Has a cron line in the schedule table (backup-status has none). */
  scheduled: boolean;
  /** taken-controle's `gemist` (jobStatuses): no run started since a fire time whose grace has passed, and none alive here or in another process. */
  overdue: boolean;
  /** taken-controle's status (jobStatuses, lease-aware: alive here or in another instance); null for a job without a schedule. */
  status: JobStatusName | null;
}

/** What the database says; null when it could not be read (then only the in-process part is shown). */
export interface DatabaseMetrics {
  jobs: JobMetrics[];
  audit: {
    /** Tenants with a verification result (audit_verification_state). */
    checked: number;
    /** Of those, the tenants whose chain did not verify. */
    broken: number;
    /** Newest verification time, null when none. */
    lastVerification: Date | null;
  };
  backup: {
    /** When the newest status arrived; null when none ever did. */
    received: Date | null;
    succeeded: boolean;
    /** backup-controle's rule: none at all, or the newest is BACKUP_MAX_UREN or older. */
    overdue: boolean;
    /** A sealed report is dated ahead (SealedBackup.future: backup-controle's `toekomst`); it does not count. */
    ahead: boolean;
  };
  /** beveiligingslog-analyse's runs in a row that postponed the late failed logins (src/jobs/late-postponed.ts); 0 on SQLite. */
  loginAnalysisPostponedRuns: number;
}

export interface MetricsSnapshot {
  now: Date;
  version: string;
  backupMaxAgeSeconds: number;
  takenMargeSeconds: number;
  runningJobs: readonly JobName[];
  database: DatabaseMetrics | null;
  counters: IngestCounters;
  /** The alarm sink's undelivered alarms per channel (src/alarms/sink.ts); empty without channels. */
  alarmsUndelivered: Readonly<Record<string, number>>;
  /** Per file nachtwacht writes on this host, its file system's space (src/disk-space.ts); empty when it could not be read. */
  disks: { bestand: WatchedFile; vrijBytes: number; totaalBytes: number }[];
  /** SCHIJF_MIN_VRIJ_PROCENT as a fraction. */
  minFreeRatio: number;
  /** PostgreSQL: how far the server's clock is ahead of this host's (src/pg/clock.ts); null on SQLite or when it could not be read. */
  databaseClockOffsetSeconds: number | null;
  /** SQLite: the WAL checkpoint thread failed, its checkpoints are back inside the service's commits (Checkpointer.fallenBack); false without the thread. */
  walCheckpointerFallback: boolean;
}

/**
 * Reads the state behind the metrics: per job an indexed lookup, the job leases (a row
 * per running job), and three single-row queries. On SQLite every read runs before the
 * first await: bun:sqlite is synchronous.
 */
export async function collectMetrics(sources: MetricsSources, now: Date): Promise<MetricsSnapshot> {
  const { deps, running, counters } = sources;
  const runningJobs = running.names();
  let database: DatabaseMetrics | null = null;
  let databaseClockOffsetSeconds: number | null = null;
  try {
    // taken-controle's rule, grace and view of this process (jobStatuses): "overdue" here
    // is its `gemist`, so a job alive in this process or under another process's lease
    // (job_leases) is not overdue, and a run whose end is kept in memory counts as it ended.
    const graceMs = deps.config.takenMargeMinuten * 60_000;
    const context = jobContext(running);
    const { store } = deps;
    const seal = rowSealOf(deps.config);
    const reads = store.kind === "pg" ? await readDatabasePg(store, seal, now, graceMs, context, deps.config) : await readDatabase(store, seal, now, graceMs, context, deps.config);
    if (store.kind === "pg") databaseClockOffsetSeconds = (await databaseClockOffsetMs(store.sql)) / 1000;
    database = databaseMetrics(reads, now, new Set(runningJobs), deps.config.backupMaxUren);
  } catch (e) {
    // A database error (busy, locked, unreadable, unreachable): a scrape every few seconds
    // must not raise an alarm each time; `nachtwacht_database_up 0` says it. Anything else is a bug.
    const cause = driverError(e);
    if (cause === undefined) throw e;
    scrapeWarning("warn", "/metrics could not read the database", { error: String(cause.message), code: cause.code });
  }
  let disks: MetricsSnapshot["disks"] = [];
  try {
    const { store, config } = deps;
    disks = fileSystemSpace(watchedPaths(config, store.kind === "sqlite" ? store.path : null)).flatMap((fs) =>
      fs.bestanden.map((bestand) => ({ bestand, vrijBytes: fs.vrijBytes, totaalBytes: fs.totaalBytes })),
    );
  } catch (e) {
    scrapeWarning("warn", "/metrics could not read the free space of the disks", { error: errorText(e) });
  }
  return {
    now,
    version: packageJson.version,
    backupMaxAgeSeconds: deps.config.backupMaxUren * 3600,
    takenMargeSeconds: deps.config.takenMargeMinuten * 60,
    runningJobs,
    database,
    counters,
    alarmsUndelivered: { ...deps.alarms.undelivered },
    disks,
    minFreeRatio: deps.config.schijfMinVrijProcent / 100,
    databaseClockOffsetSeconds,
    walCheckpointerFallback: deps.walCheckpointerFallback?.() ?? false,
  };
}

/** What the metrics read from the database, on either store. */
interface DatabaseReads {
  statuses: JobStatus[];
  /** audit_verification_state: one row per tenant, never audit_entries. */
  audit: { checked: number; broken: number; last: string | null };
  backup: SealedBackup<NewestBackup>;
  postponedRuns: number;
}

/** `witness`: where the verification witness file is (verificationCounts). */
async function readDatabase(store: Store, seal: RowSeal, now: Date, graceMs: number, context: JobContext, witness: Pick<Config, "auditAnkerBestand">): Promise<DatabaseReads> {
  const { db } = store;
  // The verification results are read first, then their seals checked a chunk at a time (verificationSummary).
  const audit = verificationCounts(db, now, seal, witness);
  const statuses = jobStatuses(db, seal, now, graceMs, context);
  const backup = newestBackup(db, seal, now);
  const postponed = readPostponement(store);
  return { statuses, audit: auditSummary(await audit), backup, postponedRuns: (await postponed)?.runs ?? 0 };
}

/** /metrics' view of the verification section (verificationSummary: only sealed results count). */
const auditSummary = (v: VerificationCounts) => ({ checked: v.gecontroleerd, broken: v.aantalGebroken, last: v.laatste });

async function readDatabasePg(store: PgStore, seal: RowSeal, now: Date, graceMs: number, context: JobContext, witness: Pick<Config, "auditAnkerBestand">): Promise<DatabaseReads> {
  const [statuses, audit, backup, postponed] = await Promise.all([
    jobStatusesPg(store.db, seal, now, graceMs, context),
    verificationCountsPg(store.db, now, seal, witness),
    newestBackupPg(store.db, seal, now),
    readPostponement(store),
  ]);
  return { statuses, audit: auditSummary(audit), backup, postponedRuns: postponed?.runs ?? 0 };
}

/** The metrics of the reads, whichever store they came from. */
function databaseMetrics(reads: DatabaseReads, now: Date, runningHere: Set<JobName>, backupMaxUren: number): DatabaseMetrics {
  const jobs = reads.statuses.map(({ job, cron, run, status }): JobMetrics => ({
    job,
    lastStart: run ? new Date(run.gestart) : null,
    lastEnd: run?.beeindigd ? new Date(run.beeindigd) : null,
    outcome: run?.uitkomst ?? null,
    running: runningHere.has(job),
    scheduled: cron !== null,
    overdue: status === "gemist",
    status,
  }));
  const { audit } = reads;
  const b = reads.backup.backup;
  const received = b ? new Date(b.ontvangen) : null;
  return {
    jobs,
    audit: { checked: audit.checked, broken: audit.broken, lastVerification: audit.last ? new Date(audit.last) : null },
    backup: {
      received,
      succeeded: b?.gelukt ?? false,
      overdue: received === null || backupOverdue(now.getTime() - received.getTime(), backupMaxUren),
      ahead: reads.backup.future !== null,
    },
    loginAnalysisPostponedRuns: reads.postponedRuns,
  };
}

// ---------------------------------------------------------------------------------
// The text format (https://prometheus.io/docs/instrumenting/exposition_formats/).

type Labels = Record<string, string>;

function escapeLabel(v: string): string {
  return v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"');
}

function escapeHelp(v: string): string {
  return v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n");
}

export function formatValue(v: number): string {
  if (Number.isNaN(v)) return "NaN";
  if (v === Infinity) return "+Inf";
  if (v === -Infinity) return "-Inf";
  return String(v);
}

const seconds = (d: Date | null): number => (d === null ? 0 : d.getTime() / 1000);
const bool = (b: boolean): number => (b ? 1 : 0);

class Exposition {
  private readonly lines: string[] = [];

  family(name: string, type: "gauge" | "counter", help: string, samples: [Labels, number][]): void {
    this.lines.push(`# HELP ${name} ${escapeHelp(help)}`, `# TYPE ${name} ${type}`);
    for (const [labels, value] of samples) {
      const keys = Object.keys(labels);
      const l = keys.length === 0 ? "" : `{${keys.map((k) => `${k}="${escapeLabel(labels[k]!)}"`).join(",")}}`;
      this.lines.push(`${name}${l} ${formatValue(value)}`);
    }
  }

  text(): string {
    return this.lines.join("\n") + "\n";
  }
}

/** The exposition text of a snapshot: a plain function of its input. */
export function renderMetrics(m: MetricsSnapshot): string {
  const out = new Exposition();
  const N = "nachtwacht_";
  out.family(`${N}build_info`, "gauge", "Always 1; the label version is the version of nachtwacht.", [[{ version: m.version }, 1]]);
  out.family(`${N}database_up`, "gauge", "1 when this scrape could read the database; 0 leaves out every metric below that comes from it.", [
    [{}, bool(m.database !== null)],
  ]);

  const running = new Set(m.runningJobs);
  const db = m.database;
  if (db) {
    const jobs = db.jobs;
    const per = (f: (j: JobMetrics) => number): [Labels, number][] => jobs.map((j) => [{ job: j.job }, f(j)]);
    out.family(`${N}job_last_start_timestamp_seconds`, "gauge", "Unix time the newest run of the job started (job_runs); 0 when it never ran.", per((j) => seconds(j.lastStart)));
    out.family(
      `${N}job_last_end_timestamp_seconds`,
      "gauge",
      "Unix time the newest run of the job ended; 0 while that run has no end (running or interrupted) or when it never ran.",
      per((j) => seconds(j.lastEnd)),
    );
    out.family(
      `${N}job_last_duration_seconds`,
      "gauge",
      "Duration of the newest run of the job; while it has no end, the time since it started; 0 when it never ran.",
      per((j) => (j.lastStart === null ? 0 : ((j.lastEnd ?? m.now).getTime() - j.lastStart.getTime()) / 1000)),
    );
    out.family(
      `${N}job_last_outcome`,
      "gauge",
      "1 for the outcome of the newest run of the job (ok, afwijking = a check answered 409, fout, bezig = no end recorded), 0 for the others; all 0 when it never ran.",
      jobs.flatMap((j) => OUTCOMES.map((o): [Labels, number] => [{ job: j.job, outcome: o }, bool(j.outcome === o)])),
    );
    out.family(`${N}job_running`, "gauge", "1 while this process runs the job (another instance may run it under its lease: see nachtwacht_job_status).", per((j) => bool(j.running)));
    out.family(
      `${N}job_status`,
      "gauge",
      "1 for the job's status as taken-controle decides it, 0 for the others; all 0 for a job without a schedule. It reads the job leases, so it is the same on every instance: " +
        "loopt = alive (in this process or under another's lease), hangt = alive past its maximum run time, onderbroken = unfinished and nothing keeps it alive, " +
        "gemist = not started since a scheduled time plus grace, faalt = the newest run failed, wacht = within grace, nog-niet-verwacht = not yet due since installation.",
      jobs.flatMap((j) => JOB_STATUSES.map((s): [Labels, number] => [{ job: j.job, status: s }, bool(j.status === s)])),
    );
    out.family(`${N}job_scheduled`, "gauge", "1 when the job has a line in the crontab (backup-status is called by the host backup instead).", per((j) => bool(j.scheduled)));
    out.family(
      `${N}job_overdue`,
      "gauge",
      "1 when no run of the job started since a scheduled time whose grace (TAKEN_MARGE_MINUTEN) has passed and none is alive here or under another process's lease: taken-controle's gemist.",
      per((j) => bool(j.overdue)),
    );
  } else {
    // Without the database the in-process part still holds.
    out.family(
      `${N}job_running`,
      "gauge",
      "1 while this process runs the job.",
      SCHEDULE.map(({ job }): [Labels, number] => [{ job }, bool(running.has(job))]),
    );
  }
  out.family(`${N}job_grace_seconds`, "gauge", "TAKEN_MARGE_MINUTEN in seconds: how long after its scheduled time a job counts as overdue.", [[{}, m.takenMargeSeconds]]);

  if (db) {
    out.family(`${N}audit_tenants_checked`, "gauge", "Tenants with a result of audit-verificatie (audit_verification_state).", [[{}, db.audit.checked]]);
    out.family(`${N}audit_tenants_broken`, "gauge", "Tenants whose audit hash chain did not verify at their latest verification.", [[{}, db.audit.broken]]);
    out.family(`${N}audit_last_verification_timestamp_seconds`, "gauge", "Unix time of the newest audit chain verification; 0 when none.", [
      [{}, seconds(db.audit.lastVerification)],
    ]);
    out.family(`${N}backup_last_success`, "gauge", "1 when the newest backup status reports success; 0 when it failed or no backup was ever reported.", [
      [{}, bool(db.backup.succeeded)],
    ]);
    if (db.backup.received !== null) {
      out.family(`${N}backup_last_timestamp_seconds`, "gauge", "Unix time the newest backup status arrived (absent when none ever did).", [[{}, seconds(db.backup.received)]]);
      out.family(`${N}backup_last_age_seconds`, "gauge", "Age of the newest backup status in seconds (absent when none ever arrived).", [
        [{}, (m.now.getTime() - db.backup.received.getTime()) / 1000],
      ]);
    }
    out.family(`${N}backup_overdue`, "gauge", "1 when no backup was ever reported or the newest is BACKUP_MAX_UREN or older (backup-controle's rule).", [
      [{}, bool(db.backup.overdue)],
    ]);
    out.family(
      `${N}backup_reports_ahead`,
      "gauge",
      "1 when a backup status is dated more than 5 minutes ahead (received while the host clock ran ahead; it does not count, backup-controle's toekomst).",
      [[{}, bool(db.backup.ahead)]],
    );
  }
  if (db) {
    out.family(
      `${N}login_analysis_postponed_runs`,
      "gauge",
      "Runs of beveiligingslog-analyse in a row that postponed judging the late failed logins because a batch of login attempts held their lock (PostgreSQL); 0 once a run judged them, always 0 on SQLite.",
      [[{}, db.loginAnalysisPostponedRuns]],
    );
  }
  out.family(`${N}backup_max_age_seconds`, "gauge", "BACKUP_MAX_UREN in seconds.", [[{}, m.backupMaxAgeSeconds]]);

  out.family(
    `${N}alarms_undelivered_total`,
    "counter",
    "Alarms a channel (sentry, e-mail) did not deliver since the process started: refused, unreachable, or no answer in time. The alarm's line on stderr is always written.",
    Object.keys(m.alarmsUndelivered)
      .sort()
      .map((channel): [Labels, number] => [{ channel }, m.alarmsUndelivered[channel]!]),
  );

  out.family(
    `${N}filesystem_avail_bytes`,
    "gauge",
    "Free bytes for the service's user on the file system of each file nachtwacht writes on this host: database (SQLite), ankerbestand, outbox (without SMTP_URL).",
    m.disks.map((d): [Labels, number] => [{ bestand: d.bestand }, d.vrijBytes]),
  );
  out.family(`${N}filesystem_size_bytes`, "gauge", "Size in bytes of that file system.", m.disks.map((d): [Labels, number] => [{ bestand: d.bestand }, d.totaalBytes]));
  out.family(`${N}filesystem_min_free_ratio`, "gauge", "SCHIJF_MIN_VRIJ_PROCENT / 100: a file system with less free is named in the daily report.", [[{}, m.minFreeRatio]]);
  if (m.databaseClockOffsetSeconds !== null) {
    out.family(
      `${N}database_clock_offset_seconds`,
      "gauge",
      "PostgreSQL: how far the database server's clock is ahead of this host's (negative: behind), measured at the scrape. Job leases follow the server's clock; the times this host records are off by this much.",
      [[{}, m.databaseClockOffsetSeconds]],
    );
  }

  out.family(
    `${N}wal_checkpointer_fallback`,
    "gauge",
    "SQLite: 1 while the WAL checkpoint thread has failed (a full disk, an I/O error) and the service's own connection checkpoints inside its commits, slower; 0 again once the thread checkpoints. Always 0 on PostgreSQL.",
    [[{}, bool(m.walCheckpointerFallback)]],
  );

  const c = m.counters;
  out.family(
    `${N}ingest_requests_accepted_total`,
    "counter",
    "Write API requests answered 2xx since the process started, per endpoint.",
    INGEST_KINDS.map((k): [Labels, number] => [{ endpoint: k }, c.accepted[k]]),
  );
  out.family(
    `${N}ingest_rows_stored_total`,
    "counter",
    "Rows the write API stored since the process started (audit entries, login attempts); not those answered from an earlier batch.",
    (["audit", "inlogpogingen"] as const).map((k): [Labels, number] => [{ endpoint: k }, c.stored[k]]),
  );
  out.family(`${N}ingest_audit_entries_replayed_total`, "counter", "Audit entries answered from an earlier batch with the same sleutel (a retry) since the process started.", [
    [{}, c.replayed],
  ]);
  const statuses = [...new Set([...REJECTED_STATUSES, ...Object.keys(c.rejected)])].sort();
  out.family(
    `${N}ingest_requests_rejected_total`,
    "counter",
    "Write API requests refused since the process started, per HTTP status.",
    statuses.map((s): [Labels, number] => [{ status: s }, c.rejected[s] ?? 0]),
  );
  out.family(`${N}ingest_requests_in_flight`, "gauge", "Write API requests being handled now; at the limit (MAX_WRITES_IN_FLIGHT, 64) more are answered 503 unread.", [[{}, c.inFlight]]);
  out.family(
    `${N}ingest_sqlite_transactions_total`,
    "counter",
    "Write transactions the write API committed on SQLite since the process started; requests that arrive together share one (on PostgreSQL: 0).",
    [[{}, c.sqlite.groups]],
  );
  out.family(`${N}ingest_sqlite_grouped_requests_total`, "counter", "Write API requests those transactions stored (on PostgreSQL: 0).", [[{}, c.sqlite.calls]]);
  return out.text();
}

// ---------------------------------------------------------------------------------
// Access.

/** The peer addresses of this machine's loopback that open /metrics without a token. */
const LOOPBACK = new Set(["127.0.0.1", "::1", "::ffff:127.0.0.1"]);

export function isLoopback(address: string | null | undefined): boolean {
  return address != null && LOOPBACK.has(address.toLowerCase());
}

/**
 * Headers a reverse proxy adds. A request that carries one came through a proxy, so
 * its loopback peer address is the proxy's, not the client's: it needs the token. The
 * headers are never read for an address (anyone can send them); they only take the
 * loopback exemption away.
 */
const PROXY_HEADERS = ["forwarded", "x-forwarded-for", "x-real-ip"];

export interface MetricsSecrets {
  metrics: string | null;
  /** METRICS_SECRET_VORIG: the previous metrics secret during a rotation; opens what `metrics` opens. */
  metricsVorig?: string | null;
  cron: string;
  app: string | null;
  appVorig?: string | null;
}

export type MetricsAccess = { allowed: true } | { allowed: false; status: 401 } | { allowed: false; status: 403; error: string };

const FORBIDDEN_OTHER_SECRET = "Verboden: dit token opent /metrics niet; van buiten deze machine vraagt /metrics METRICS_SECRET.";
const FORBIDDEN_NO_SECRET = "Verboden: /metrics is alleen vanaf deze machine (loopback) leesbaar; METRICS_SECRET is niet ingesteld.";

/**
 * The access rule as a function of the peer address and the request headers. Loopback
 * (127.0.0.1, ::1, ::ffff:127.0.0.1) needs nothing, unless a proxy header is present;
 * an unknown peer counts as remote. From elsewhere only `Bearer <METRICS_SECRET>` (or,
 * during a rotation, METRICS_SECRET_VORIG) opens it; CRON_SECRET and APP_SECRET (and its
 * _VORIG) are 403, anything else 401. Every secret is compared on every remote request
 * (constant time each, as the gate does).
 */
export function metricsAccess(secrets: MetricsSecrets): (peer: string | null | undefined, headers: Headers) => MetricsAccess {
  // An unset secret stands in as a random one (anySecretChecker): no token matches it, the work is the same.
  const isMetrics = anySecretChecker([secrets.metrics, secrets.metricsVorig ?? null]);
  const isCron = bearerChecker(secrets.cron);
  const isApp = anySecretChecker([secrets.app, secrets.appVorig ?? null]);
  return (peer, headers) => {
    if (isLoopback(peer) && !PROXY_HEADERS.some((h) => headers.has(h))) return { allowed: true };
    const authorization = headers.get("authorization");
    // every one, never short-circuited: the time does not tell which secret a token is near
    const metrics = isMetrics(authorization);
    const cron = isCron(authorization);
    const app = isApp(authorization);
    if (metrics && secrets.metrics !== null) return { allowed: true };
    if (secrets.metrics === null) return { allowed: false, status: 403, error: FORBIDDEN_NO_SECRET };
    if (cron || app) return { allowed: false, status: 403, error: FORBIDDEN_OTHER_SECRET };
    return { allowed: false, status: 401 };
  };
}

const TEXT = { description: "De metrics in het Prometheus-tekstformaat 0.0.4.", content: { [METRICS_CONTENT_TYPE]: { schema: { type: "string" } } } };
const error = (description: string) => ({ description, content: { "application/json": { schema: ErrorBody } } });

export function metricsRoute(sources: MetricsSources) {
  const { deps } = sources;
  const { metricsSecret, metricsSecretVorig, cronSecret, appSecret, appSecretVorig } = deps.config;
  const access = metricsAccess({ metrics: metricsSecret, metricsVorig: metricsSecretVorig, cron: cronSecret, app: appSecret, appVorig: appSecretVorig });
  return new Elysia({ name: "nachtwacht-metrics" }).get(
    METRICS_PATH,
    async ({ request, server }) => {
      // The socket's peer address, never a header: X-Forwarded-For is whatever the client wrote.
      const a = access(server?.requestIP(request)?.address, request.headers);
      if (!a.allowed) return a.status === 401 ? unauthorized() : json(403, { error: a.error });
      return new Response(renderMetrics(await collectMetrics(sources, deps.clock())), {
        headers: { "content-type": METRICS_CONTENT_TYPE, "cache-control": "no-store" },
      });
    },
    {
      detail: {
        tags: ["metrics"],
        summary: "Metrics voor Prometheus (tekstformaat 0.0.4)",
        // Loopback needs no token (the empty requirement); from elsewhere METRICS_SECRET.
        security: [{}, { metricsAuth: [] }],
        description:
          "Per taak de laatste start, het einde, de duur en de uitkomst, of hij nu loopt, of hij achterstallig is en zijn status zoals taken-controle die bepaalt (ook `onderbroken` en `hangt`); de audit-ketens " +
          "(gecontroleerd, gebroken, laatste verificatie); de nieuwste back-up (leeftijd, gelukt); de tellers van de schrijf-API. " +
          "Zonder token leesbaar vanaf deze machine (loopback, zonder proxy-headers); van elders alleen met `Authorization: Bearer <METRICS_SECRET>` (tijdens een wissel ook METRICS_SECRET_VORIG). " +
          "CRON_SECRET en APP_SECRET openen /metrics niet. docs/operations.md (Metrics) beschrijft elke metric.",
        responses: {
          200: TEXT,
          401: error("Niet vanaf loopback en een ontbrekend of ongeldig token."),
          403: error("Niet vanaf loopback met CRON_SECRET of APP_SECRET, of METRICS_SECRET is niet ingesteld."),
        },
      } as any,
    },
  );
}
