// The job-run history (job_runs). Every run is written when it starts (so a run
// killed mid-way stays visible as 'bezig' with no end) and completed when it ends,
// whatever the outcome. The in-process guard is src/running-jobs.ts, the cron
// arithmetic src/schedule-due.ts. A run's end is written without a synchronous wait for
// another process's write lock (writeRunEnd): bun:sqlite's busy wait would stall the
// event loop, /health included.
import { and, desc, eq, gt, lte, type AnyColumn } from "drizzle-orm";
import { jobRuns } from "../db/schema.ts";
import { BUSY_TIMEOUT_MS, retryWhenBusy, type Db } from "./db.ts";
import type { AnyStore } from "./deps.ts";
import { finishRunPg } from "./pg/job-runs.ts";
import type { RunningJobs, KeptEnd } from "./running-jobs.ts";
import type { JobName } from "./schedule.ts";
import { NEWEST_ROWS, newestSealed, type RowSeal, type RunStart, type SealedRunRow } from "./row-seal.ts";
import { storableText } from "./format.ts";
import { latestCountingStart } from "./time.ts";

export type JobRunRow = typeof jobRuns.$inferSelect;
export type Outcome = JobRunRow["uitkomst"];

/** The summary kept per run is bounded: the history must not grow with a report's size. */
const MAX_SUMMARY = 4000;

/** The row a run starts with, for any store: its start, sealed (src/row-seal.ts), and 'bezig' until its end is written. */
export function runStartValues(job: JobName, now: Date, seal: RowSeal) {
  const gestart = now.toISOString();
  return { job, gestart, uitkomst: "bezig" as const, zegel: seal.seal({ job, gestart }) };
}

export function startRun(db: Db, job: JobName, now: Date, seal: RowSeal): number {
  const row = db
    .insert(jobRuns)
    .values(runStartValues(job, now, seal))
    .returning({ id: jobRuns.id })
    .get();
  return row.id;
}

/** How a run ended, as finishRun writes it. */
export interface RunEnd {
  uitkomst: Exclude<Outcome, "bezig">;
  httpStatus: number;
  samenvatting?: unknown;
  fout?: string | null;
}

/**
 * Rejects when `work` has not settled within `ms` (it may still complete later): on
 * PostgreSQL nothing like SQLite's busy timeout bounds a write that waits for a
 * connection, and shutdown must not wait past systemd's stop timeout.
 */
export function withDeadline<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new DeadlineError(`${what} did not get through within ${ms} ms`)), ms);
  });
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}

/** withDeadline's rejection: the write may still complete; like SQLITE_BUSY, "not yet", not "failed". */
export class DeadlineError extends Error {
  override name = "DeadlineError";
}

/** A run whose end is written: its row, and its start as this process wrote it. */
export interface RunRef extends RunStart {
  runId: number;
}

/**
 * The columns a run's end sets, for any store: the summary as JSON, bounded, and the
 * end's seal over them with the run's start as this process wrote it (src/row-seal.ts),
 * not as the row says: a start a database writer copied into the row does not get this
 * end sealed with it.
 */
export function runEndValues(seal: RowSeal, start: RunStart, end: Date, r: RunEnd) {
  // Bounded, and as the store keeps it (storableText): the end's seal is over these values.
  const summary = r.samenvatting === undefined ? null : storableText(JSON.stringify(r.samenvatting), MAX_SUMMARY);
  const values = { beeindigd: end.toISOString(), uitkomst: r.uitkomst, httpStatus: r.httpStatus, samenvatting: summary, fout: r.fout == null ? null : storableText(r.fout) };
  return { ...values, eindzegel: seal.sealEnd({ job: start.job, gestart: start.gestart, ...values }) };
}

/** The end of a run, one UPDATE, synchronous: inside a transaction (writeTransaction) or through writeRunEnd. */
export function finishRun(db: Db, seal: RowSeal, run: RunRef, end: Date, r: RunEnd): void {
  db.update(jobRuns).set(runEndValues(seal, run, end, r)).where(openRun(jobRuns, run.runId)).run();
}

/**
 * The run, while its end is not written: the first end written stays. A write that was
 * given up on (withDeadline) may still arrive after the one written instead of it, and
 * must not overwrite it with another version of the same end.
 */
export const openRun = (t: { id: AnyColumn; uitkomst: AnyColumn }, id: number) => and(eq(t.id, id), eq(t.uitkomst, "bezig"));

/** How long one try of a PostgreSQL end may take when it is not to wait (deadline 0): its round trips, not a lock. */
const ONE_TRY_MS = 1000;

/**
 * Writes a run's end (finishRun). On SQLite it waits for another process's write lock
 * without blocking the event loop (retryWhenBusy), for at most `deadlineMs`; then rejects
 * with that SQLITE_BUSY and nothing was written. On PostgreSQL it waits as long for the
 * run's row, should another session hold it (finishRunPg). Other database errors are
 * passed on.
 */
export function writeRunEnd(store: AnyStore, seal: RowSeal, run: RunRef, end: Date, r: RunEnd, deadlineMs = BUSY_TIMEOUT_MS): Promise<void> {
  // 0 is one try without waiting for a lock (finishRunPg: 1 ms); the try itself still needs its round trips.
  if (store.kind === "pg") return withDeadline(finishRunPg(store, seal, run, end, r, deadlineMs), Math.max(deadlineMs, ONE_TRY_MS), "the end of a run");
  return retryWhenBusy(store.sqlite, () => finishRun(store.db, seal, run, end, r), deadlineMs);
}

// The margin for a start dated ahead lives in src/time.ts: backup reports share it.
export { FUTURE_START_MARGIN_MS, latestCountingStart } from "./time.ts";

/** The rows of the job whose start counts at `now` (latestCountingStart), of either dialect's job_runs; `future`: those dated later. */
export const runsOfJob = (t: { job: AnyColumn; gestart: AnyColumn }, job: string, now: Date, future = false) =>
  and(eq(t.job, job), future ? gt(t.gestart, latestCountingStart(now)) : lte(t.gestart, latestCountingStart(now)));

/** A job's newest run as lastRun and lastRunPg give it: the newest sealed one that counts at `now`, with what is wrong beside it. */
export interface LastRun<R> {
  run: R | null;
  /** Rows without a valid seal newer than `run` (dated in the future ones included): written by someone without the anchor key. */
  vervalst: number;
  /** The start of the newest sealed run dated after latestCountingStart(now): recorded while the host clock ran ahead; it does not count. */
  futureStart: string | null;
}

/** The one rule of lastRun and lastRunPg, from the job's newest rows that count at `now` and its newest ones dated later (both newest first). */
export function lastRunOf<R extends SealedRunRow>(counting: readonly R[], future: readonly R[], seal: RowSeal): LastRun<R> {
  const { run, vervalst } = newestSealed(counting, seal.sealed);
  const sealedFuture = future.filter((r) => seal.sealed(r));
  return { run, vervalst: vervalst + future.length - sealedFuture.length, futureStart: sealedFuture[0]?.gestart ?? null };
}

/** A job's NEWEST_ROWS newest rows that count at `now` (or, `future`, dated later), by start then id: an index range on (job, gestart). */
export function newestRunRows(db: Db, job: string, now: Date, future = false): JobRunRow[] {
  return db.select().from(jobRuns).where(runsOfJob(jobRuns, job, now, future)).orderBy(desc(jobRuns.gestart), desc(jobRuns.id)).limit(NEWEST_ROWS).all();
}

/** The job's newest sealed run at `now`, by start then id (lastRunOf). */
export function lastRun(db: Db, job: string, seal: RowSeal, now: Date): LastRun<JobRunRow> {
  return lastRunOf(newestRunRows(db, job, now), newestRunRows(db, job, now, true), seal);
}

/**
 * Writes the ends kept in `running` and returns the ones written; one that fails stays
 * kept. Each is tried at least once, and while another process holds the write lock
 * they wait for it (writeRunEnd) until `deadlineMs` from now, all together: 0 tries each
 * once without waiting (before an unrelated job, whose own lease waits for the lock
 * anyway). Never throws.
 */
export async function writeKeptEnds(store: AnyStore, seal: RowSeal, running: RunningJobs, deadlineMs: number): Promise<KeptEnd[]> {
  const deadline = performance.now() + deadlineMs;
  const written: KeptEnd[] = [];
  for (const kept of running.keptEndsList()) {
    try {
      await writeRunEnd(store, seal, kept, kept.end, kept.result, Math.max(0, deadline - performance.now()));
      running.forgetEnd(kept.runId);
      written.push(kept);
    } catch {
      // Still not writable: the caller logs the ones that stay kept.
    }
  }
  return written;
}
