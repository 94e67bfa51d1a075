// The in-process guard: which jobs run in this process now (a second call of one of
// them is refused), how shutdown waits for or interrupts them, and the ends of runs
// that could not be written to the job-run history yet (src/job-runs.ts). Across
// processes the lease in the database guards the same (src/job-lease.ts); `holder`
// names this instance in it.
import { newLeaseHolder, type LeaseHolder } from "./job-lease.ts";
import type { RunEnd } from "./job-runs.ts";
import type { JobName } from "./schedule.ts";

/** A completed run whose end this process could not write to job_runs yet (see RunningJobs.keepEnd). */
export interface KeptEnd {
  job: JobName;
  runId: number;
  end: Date;
  result: RunEnd;
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
  /** This instance as the holder of job leases: the pid and a random id of its own. */
  readonly holder: LeaseHolder = newLeaseHolder();

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

  names(): JobName[] {
    return [...this.running];
  }

  /**
   * Keeps the end of a completed run whose job_runs UPDATE failed, until
   * writeKeptEnds() (src/job-runs.ts) manages to write it. Memory only: a restart
   * before that loses it (the alarm raised when it failed says the job completed).
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
