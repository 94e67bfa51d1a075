// The in-process guard: which jobs run in this process now (a second call of one of
// them is refused), how shutdown waits for or interrupts them, the ends of runs that
// could not be written to the job-run history yet (src/job-runs.ts), and the job
// wrapper's writes that go on after their call was answered (src/http/job-route.ts
// writeLater), so that shutdown waits for them. Across
// processes the lease in the database guards the same (src/job-lease.ts); `holder`
// names this instance in it.
import { newLeaseHolder, type LeaseHolder } from "./job-lease.ts";
import type { RunEnd } from "./job-runs.ts";
import type { JobName } from "./schedule.ts";

/** A run whose end this process could not write to job_runs yet (see RunningJobs.keepEnd). */
export interface KeptEnd {
  job: JobName;
  runId: number;
  /** The run's start as this process wrote it (the end is sealed over it). */
  gestart: string;
  end: Date;
  result: RunEnd;
}

/**
 * A write of the job wrapper still going on after its call was answered, waiting for
 * another process's write lock (src/http/job-route.ts writeLater): a refused call's row
 * (`run`), a run's end (`end`), a lease's release (`lease`).
 */
export interface PendingWrite {
  what: "run" | "end" | "lease";
  job: JobName;
  runId: number | null;
}

/** A running job given up on (shutdown did not wait for it any longer). */
export class JobInterrupted extends Error {
  constructor(message: string) {
    super(message);
    this.name = "JobInterrupted";
  }
}

/**
 * A job that ended early by itself because shutdown began (RunningJobs.isClosed): unlike
 * one given up on, nothing of it runs on, so its lease goes as after any end.
 */
export class JobStoppedForShutdown extends JobInterrupted {
  constructor(message: string) {
    super(message);
    this.name = "JobStoppedForShutdown";
  }
}

/**
 * Jobs running in this process; a second call of one of them is refused, except of a
 * job that is not exclusive (JobDefinition.exclusive: backup-status), whose calls run
 * side by side, each its own run.
 */
export class RunningJobs {
  /** How many calls of each job run now (more than one only for a job that is not exclusive). */
  private readonly running = new Map<JobName, number>();
  /** The job_runs rows of the running calls, by run id. */
  private readonly runIds = new Map<number, { job: JobName; gestart: string }>();
  private readonly idle: (() => void)[] = [];
  private readonly interrupters = new Set<(e: Error) => void>();
  private readonly keptEnds = new Map<number, KeptEnd>();
  private readonly pending = new Map<Promise<unknown>, PendingWrite>();
  private closed = false;
  /** This instance as the holder of job leases: the pid and a random id of its own. */
  readonly holder: LeaseHolder = newLeaseHolder();

  /** Starts a call of `job`: false when it runs already and is exclusive. */
  tryStart(job: JobName, exclusive = true): boolean {
    const n = this.running.get(job) ?? 0;
    if (exclusive && n > 0) return false;
    this.running.set(job, n + 1);
    return true;
  }

  /** The job_runs row of a running call, so shutdown can close it when it must give up waiting. */
  setRun(job: JobName, runId: number, gestart: string): void {
    if (this.running.has(job)) this.runIds.set(runId, { job, gestart });
  }

  /** A call of `job` ended; `runId`: its job_runs row, if it had one (without it, every row of the job goes with its last call). */
  finish(job: JobName, runId: number | null = null): void {
    const n = (this.running.get(job) ?? 1) - 1;
    if (n > 0) this.running.set(job, n);
    else this.running.delete(job);
    if (runId !== null) this.runIds.delete(runId);
    if (n <= 0) for (const [id, r] of this.runIds) if (r.job === job) this.runIds.delete(id);
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
  runs(): { job: JobName; runId: number; gestart: string }[] {
    return [...this.runIds].map(([runId, r]) => ({ job: r.job, runId, gestart: r.gestart }));
  }

  /** The jobs running now, each once however many of its calls run. */
  names(): JobName[] {
    return [...this.running.keys()];
  }

  /**
   * Keeps the end of a run whose job_runs UPDATE failed (a completed run's) or still
   * waits for the write lock (any run's, src/http/job-route.ts writeEnd), until it is
   * written: by that wait, or by writeKeptEnds() (src/job-runs.ts) at the next job call
   * or at shutdown. taken-controle and /metrics judge the run by it meanwhile. Memory
   * only: a restart before that loses it (logged; for a completed run also alarmed).
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

  /** Tracks a write that goes on after its call was answered; `write` must never reject. */
  trackWrite(write: Promise<unknown>, what: PendingWrite): void {
    this.pending.set(write, what);
    const done = () => void this.pending.delete(write);
    write.then(done, done);
  }

  /** The writes still going on after their calls were answered. */
  pendingWrites(): PendingWrite[] {
    return [...this.pending.values()];
  }

  /**
   * Shutdown: resolves once no write goes on after its answer any more, or after `ms`,
   * with the writes still pending then (the caller logs them as lost).
   */
  async settleWrites(ms: number): Promise<PendingWrite[]> {
    const deadline = performance.now() + ms;
    while (this.pending.size > 0) {
      const left = deadline - performance.now();
      if (left <= 0) break;
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([Promise.allSettled([...this.pending.keys()]), new Promise((r) => (timer = setTimeout(r, left)))]);
      clearTimeout(timer);
    }
    return this.pendingWrites();
  }

  /** Resolves when no job runs (used on shutdown). */
  whenIdle(): Promise<void> {
    if (this.running.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.idle.push(resolve));
  }
}
