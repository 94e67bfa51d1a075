// Cron arithmetic beside the schedule table (src/schedule.ts, which stays a plain
// table for the crontab generator): where a scheduled job stands against its cron
// expression (UTC) and the job-run history (dueStateOf), and the one rule that turns that,
// the newest run and whether a process keeps it alive into a job's status (statusesOf),
// for taken-controle, the daily report and /metrics alike. The rules are pure functions of what the
// database says; jobStatuses gathers those reads on SQLite, jobStatusesPg
// (src/pg/status.ts) the same ones on PostgreSQL.
import { Cron } from "croner";
import { installedAt, type Db } from "./db.ts";
import { liveLeases, type JobLease } from "./job-lease.ts";
import { lastRun, type JobRunRow, type LastRun, type Outcome } from "./job-runs.ts";
import type { JobContext } from "./jobs/job.ts";
import { SCHEDULE, scheduleOf, type JobName } from "./schedule.ts";
import type { RowSeal } from "./row-seal.ts";

/**
 * The last fire time at or before `at`. croner's previousRuns excludes a fire time
 * equal to the reference, so the reference is moved one millisecond on.
 */
export function lastFireAtOrBefore(cron: Cron, at: Date): Date | null {
  return cron.previousRuns(1, new Date(at.getTime() + 1))[0] ?? null;
}

/** A job's newest scheduled fire time at or before `at` (its cron expression, UTC); null for a job without a schedule. */
export function lastFireOf(job: JobName, at: Date): Date | null {
  const cron = scheduleOf(job).cron;
  return cron === null ? null : lastFireAtOrBefore(new Cron(cron, { timezone: "UTC" }), at);
}

export interface DueState {
  /** The newest fire time at or before now. */
  expected: Date | null;
  /** No fire time yet since the service was installed: nothing is expected of the job. */
  notYetExpected: boolean;
  /** The newest fire time whose grace has run out. */
  due: Date | null;
  /** No run started since `due`, and `due` is not before the install time. */
  missed: boolean;
  /** A run started since `expected`. */
  ranSinceExpected: boolean;
  /** The next fire time after now. */
  next: Date | null;
}

/**
 * Where a scheduled job stands against its cron expression (UTC) and the job-run
 * history: the one rule that taken-controle and the daily report both apply, on either
 * store. `startedSince(d)`: whether a run of the job started at or after `d` (a read of
 * the history). A run counts from the moment it started, also one still 'bezig'.
 * Checking only the very last fire time would never find a job that runs more often
 * than the grace (every 15 minutes against 30): its last fire time is always still
 * within grace, hence `due`.
 */
export function dueStateOf(cronExpression: string, now: Date, graceMs: number, installed: Date | null, startedSince: (since: Date) => boolean): DueState {
  const cron = new Cron(cronExpression, { timezone: "UTC" });
  const beforeInstall = (d: Date) => installed !== null && d.getTime() < installed.getTime();
  const expected = lastFireAtOrBefore(cron, now);
  const due = lastFireAtOrBefore(cron, new Date(now.getTime() - graceMs));
  return {
    expected,
    notYetExpected: expected === null || beforeInstall(expected),
    due,
    missed: due !== null && !beforeInstall(due) && !startedSince(due),
    ranSinceExpected: expected !== null && startedSince(expected),
    next: cron.nextRun(now),
  };
}

/**
 * startedSince from the job's newest start alone: a run started at or after `since`
 * exactly when the newest one did. Times are ISO 8601 UTC text, compared as the
 * database compares them (byte order). The newest start is the newest that counts
 * (lastRun, lastRunPg): not one dated in the future (FUTURE_START_MARGIN_MS).
 */
export function startedSinceNewest(newestStart: string | null): (since: Date) => boolean {
  return (since) => newestStart !== null && newestStart >= since.toISOString();
}

/** What taken-controle reports per scheduled job (docs/operations.md, "What taken-controle tells apart"). */
export const JOB_STATUSES = ["ok", "loopt", "hangt", "gemist", "faalt", "onderbroken", "wacht", "nog-niet-verwacht"] as const;
export type JobStatusName = (typeof JOB_STATUSES)[number];

/** Where one job of the schedule table stands. */
export interface JobStatus {
  job: JobName;
  /** null: not scheduled (backup-status); then `due` and `status` are null too. */
  cron: string | null;
  maxRuntimeMinutes: number;
  /** The newest sealed run (job_runs), with the end this process kept when its row could not be written yet; null when it never ran. */
  run: { id: number; gestart: string; beeindigd: string | null; uitkomst: Outcome } | null;
  /** Rows of the job newer than that run without a valid seal: written by someone without the anchor key (src/row-seal.ts). */
  vervalst: number;
  /** The start of the newest sealed run dated in the future (LastRun): recorded while the host clock ran ahead; not `run`, and no start. */
  futureStart: string | null;
  /** Whether the newest run is alive, and what keeps it so: this process runs it, or another holds its lease. */
  levend: "dit-proces" | "ander-proces" | null;
  /** With `levend` `ander-proces`: that process's lease. */
  houder: JobLease | null;
  due: DueState | null;
  status: JobStatusName | null;
}

/** A job's newest run as statusesOf reads it (lastRun, lastRunPg). */
export type NewestRun = Pick<JobRunRow, "id" | "gestart" | "beeindigd" | "uitkomst">;

/** What the status rule reads from the database, on either store. */
export interface StatusReads {
  /** The first start on this database (service_meta 'geinstalleerd'); null when someone removed it. */
  installed: Date | null;
  /** The live leases by job (liveLeases, liveLeasesPg). */
  leases: ReadonlyMap<string, JobLease>;
  /** Per job of the schedule table its newest sealed run at now (lastRun, lastRunPg; null when none), how many newer rows have no valid seal (src/row-seal.ts) and a run dated in the future. */
  newestRuns: ReadonlyMap<JobName, LastRun<NewestRun>>;
}

/**
 * Where every job of the schedule table stands at `now`, as taken-controle reports it and
 * /metrics exposes it: a pure function of the reads (job_runs, job_leases, the install
 * time), no alarm, no write. `context` is what the job wrapper knows of this process
 * (JobContext): the runs it executes now and the ends it could not write yet.
 *
 * A run is alive when this process runs it, or when another process holds its lease and
 * keeps renewing it (liveLeases: not expired, its holder not provably gone). A live run
 * is `loopt` until it outlives the job's maximum run time, then `hangt`. The newest run
 * still 'bezig' that nothing keeps alive is `onderbroken`. A fire time whose grace passed
 * without a run is `gemist` (unless a run is alive: calls the guards refused meanwhile
 * left no row), a last run that failed `faalt`. Only the newest run is judged: a failure
 * followed by a run still in progress waits for that run's outcome.
 */
export function statusesOf(reads: StatusReads, now: Date, graceMs: number, context: JobContext): JobStatus[] {
  // Without the install time (someone removed it) nothing is exempt: the watchdog
  // should rather alarm once too often than stay silent.
  const { installed, leases } = reads;
  const keptEnds = new Map(context.unrecorded.map((u) => [u.runId, u]));
  const runningHere = new Set<JobName>(context.running.map((r) => r.job));
  return SCHEDULE.map((entry): JobStatus => {
    const newest = reads.newestRuns.get(entry.job);
    const row = newest?.run ?? null;
    const vervalst = newest?.vervalst ?? 0;
    const futureStart = newest?.futureStart ?? null;
    const kept = row ? keptEnds.get(row.id) : undefined;
    const run: JobStatus["run"] = row
      ? { id: row.id, gestart: row.gestart, beeindigd: kept ? kept.beeindigd : row.beeindigd, uitkomst: kept ? kept.uitkomst : row.uitkomst }
      : null;
    const unfinished = run !== null && run.uitkomst === "bezig" && run.beeindigd === null;
    const lease = row ? leases.get(entry.job) : undefined;
    const here = runningHere.has(entry.job);
    const elsewhere = !here && unfinished && lease !== undefined && lease.runId === row!.id;
    const alive = here || elsewhere;
    const levend = here ? ("dit-proces" as const) : elsewhere ? ("ander-proces" as const) : null;
    const houder = elsewhere ? lease! : null;
    if (entry.cron === null) return { job: entry.job, cron: null, maxRuntimeMinutes: entry.maxRuntimeMinutes, run, vervalst, futureStart, levend, houder, due: null, status: null };

    // The newest run has the newest start (lastRun orders by gestart): no further read.
    const due = dueStateOf(entry.cron, now, graceMs, installed, startedSinceNewest(row?.gestart ?? null));
    const hung = alive && unfinished && now.getTime() - new Date(run!.gestart).getTime() > entry.maxRuntimeMinutes * 60_000;
    const failed = !alive && run?.uitkomst === "fout";
    const interrupted = !alive && unfinished;
    const missed = !alive && due.missed;
    let status: JobStatusName;
    // A run whose process died is reported even before the job's first expected fire
    // time (a run started by hand on a new installation): the caller never got an answer.
    if (hung) status = "hangt";
    else if (alive) status = "loopt";
    else if (due.notYetExpected) status = interrupted ? "onderbroken" : "nog-niet-verwacht";
    else if (missed) status = "gemist";
    else if (failed) status = "faalt";
    else if (interrupted) status = "onderbroken";
    else if (!due.ranSinceExpected) status = "wacht";
    else status = "ok";
    return { job: entry.job, cron: entry.cron, maxRuntimeMinutes: entry.maxRuntimeMinutes, run, vervalst, futureStart, levend, houder, due, status };
  });
}

/**
 * statusesOf on SQLite: the install time, the live leases and each job's newest run, in
 * one read transaction: a lease another process takes between the reads would otherwise
 * leave its 'bezig' run without it, which reads as interrupted (as on PostgreSQL).
 */
export function jobStatuses(db: Db, seal: RowSeal, now: Date, graceMs: number, context: JobContext): JobStatus[] {
  const reads: StatusReads = db.transaction(
    (tx) => ({
      installed: installedAt(tx, seal),
      leases: liveLeases(tx, now, seal),
      newestRuns: new Map(SCHEDULE.map(({ job }) => [job, lastRun(tx, job, seal, now)])),
    }),
    { behavior: "deferred" },
  );
  return statusesOf(reads, now, graceMs, context);
}
