// The job-run history and the guard against running one job twice at once. Every
// run is written when it starts (so a run killed mid-way stays visible as 'bezig'
// with no end) and completed when it ends, whatever the outcome.
import type { Database } from "bun:sqlite";
import { Cron } from "croner";
import type { JobName } from "./schedule.ts";

export type Outcome = "bezig" | "ok" | "afwijking" | "fout";

export interface JobRunRow {
  id: number;
  job: string;
  gestart: string;
  beeindigd: string | null;
  uitkomst: Outcome;
  httpStatus: number | null;
  samenvatting: string | null;
  fout: string | null;
}

/** The summary kept per run is bounded: the history must not grow with a report's size. */
const MAX_SUMMARY = 4000;

export function startRun(sqlite: Database, job: JobName, now: Date): number {
  const row = sqlite
    .query("INSERT INTO job_runs (job, gestart, uitkomst) VALUES (?, ?, 'bezig') RETURNING id")
    .get(job, now.toISOString()) as { id: number };
  return row.id;
}

/** How a run ended, as finishRun writes it. */
export interface RunEnd {
  uitkomst: Exclude<Outcome, "bezig">;
  httpStatus: number;
  samenvatting?: unknown;
  fout?: string | null;
}

/** A completed run whose end this process could not write to job_runs yet (see RunningJobs.keepEnd). */
export interface KeptEnd {
  job: JobName;
  runId: number;
  end: Date;
  result: RunEnd;
}

export function finishRun(sqlite: Database, id: number, end: Date, r: RunEnd): void {
  let summary = r.samenvatting === undefined ? null : JSON.stringify(r.samenvatting);
  if (summary !== null && summary.length > MAX_SUMMARY) summary = summary.slice(0, MAX_SUMMARY - 1) + "…";
  sqlite
    .query("UPDATE job_runs SET beeindigd = ?, uitkomst = ?, http_status = ?, samenvatting = ?, fout = ? WHERE id = ?")
    .run(end.toISOString(), r.uitkomst, r.httpStatus, summary, r.fout ?? null, id);
}

export function lastRun(sqlite: Database, job: string): JobRunRow | null {
  return sqlite
    .query(
      `SELECT id, job, gestart, beeindigd, uitkomst, http_status AS httpStatus, samenvatting, fout
       FROM job_runs WHERE job = ? ORDER BY gestart DESC, id DESC LIMIT 1`,
    )
    .get(job) as JobRunRow | null;
}

/** A running job given up on (shutdown did not wait for it any longer). */
export class JobInterrupted extends Error {
  constructor(message: string) {
    super(message);
    this.name = "JobInterrupted";
  }
}

/** Jobs running in this process; a second call of one of them is refused. */
export class RunningJobs {
  private readonly running = new Set<JobName>();
  private readonly runIds = new Map<JobName, number>();
  private readonly idle: (() => void)[] = [];
  private readonly interrupters = new Set<(e: Error) => void>();
  private readonly keptEnds = new Map<number, KeptEnd>();
  private closed = false;

  tryStart(job: JobName): boolean {
    if (this.running.has(job)) return false;
    this.running.add(job);
    return true;
  }

  /** The job_runs row of a running job, so shutdown can close it when it must give up waiting. */
  setRun(job: JobName, runId: number): void {
    if (this.running.has(job)) this.runIds.set(job, runId);
  }

  finish(job: JobName): void {
    this.running.delete(job);
    this.runIds.delete(job);
    if (this.running.size === 0) for (const f of this.idle.splice(0)) f();
  }

  /** Shutdown: no job starts any more (the wrapper answers 503). */
  close(): void {
    this.closed = true;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /**
   * The job's own outcome, unless interrupt() comes first: then it rejects with
   * JobInterrupted and the wrapper answers and records that, while the job itself is
   * left behind (the process is about to exit).
   */
  race<T>(work: Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.interrupters.add(reject);
      work.then(resolve, reject).finally(() => this.interrupters.delete(reject));
    });
  }

  interrupt(message: string): void {
    for (const stop of [...this.interrupters]) stop(new JobInterrupted(message));
  }

  /** Running jobs that have a job_runs row. */
  runs(): { job: JobName; runId: number }[] {
    return [...this.runIds].map(([job, runId]) => ({ job, runId }));
  }

  get size(): number {
    return this.running.size;
  }

  names(): JobName[] {
    return [...this.running];
  }

  /**
   * Keeps the end of a completed run whose job_runs UPDATE failed, until
   * writeKeptEnds() manages to write it. Memory only: a restart before that loses it
   * (the alarm raised when it failed says the job completed).
   */
  keepEnd(kept: KeptEnd): void {
    this.keptEnds.set(kept.runId, kept);
  }

  /** Ends kept because they could not be written yet, oldest first. */
  keptEndsList(): KeptEnd[] {
    return [...this.keptEnds.values()];
  }

  forgetEnd(runId: number): void {
    this.keptEnds.delete(runId);
  }

  /** Resolves when no job runs (used on shutdown). */
  whenIdle(): Promise<void> {
    if (this.running.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.idle.push(resolve));
  }
}

/**
 * Writes the ends kept in `running` (each tried once; one that fails again stays kept)
 * and returns the ones written. Never throws: it runs before an unrelated job.
 */
export function writeKeptEnds(sqlite: Database, running: RunningJobs): KeptEnd[] {
  const written: KeptEnd[] = [];
  for (const kept of running.keptEndsList()) {
    try {
      finishRun(sqlite, kept.runId, kept.end, kept.result);
      running.forgetEnd(kept.runId);
      written.push(kept);
    } catch {
      // Still not writable: the caller logs how many stay kept.
    }
  }
  return written;
}

/**
 * The last fire time at or before `at`. croner's previousRuns excludes a fire time
 * equal to the reference, so the reference is moved one millisecond on.
 */
function lastFireAtOrBefore(cron: Cron, at: Date): Date | null {
  return cron.previousRuns(1, new Date(at.getTime() + 1))[0] ?? null;
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
 * history: the one rule that taken-controle and the daily report both apply. A run
 * counts from the moment it started, also one still 'bezig'. Checking only the very
 * last fire time would never find a job that runs more often than the grace (every
 * 15 minutes against 30): its last fire time is always still within grace, hence `due`.
 */
export function dueState(sqlite: Database, job: JobName, cronExpression: string, now: Date, graceMs: number, installed: Date | null): DueState {
  const cron = new Cron(cronExpression, { timezone: "UTC" });
  const beforeInstall = (d: Date) => installed !== null && d.getTime() < installed.getTime();
  const startedSince = (d: Date) =>
    sqlite.query("SELECT 1 FROM job_runs WHERE job = ? AND gestart >= ? LIMIT 1").get(job, d.toISOString()) !== null;
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
