// The "already running" guard across processes: a lease per job in the database
// (job_leases). The in-process guard (src/running-jobs.ts) refuses a second call in the
// same process; the lease refuses it in any other process on the same database file — a
// second instance of the service, or one started by hand beside the systemd unit.
//
// - Taken in the one IMMEDIATE transaction that also writes the run's job_runs row, so
//   two processes cannot both see the job free, and a refused call leaves no run.
// - Renewed while the run goes on: every min(maxRuntime / 4, 30 s), each time moving
//   its expiry RENEWALS_AHEAD renewals ahead.
// - Deleted when the run ends. A process that dies (SIGKILL, OOM kill, power loss)
//   leaves its row; once the expiry has passed the next call takes it over. Sooner when
//   the holder ran on this host (same hostname and PID namespace) and its pid no longer
//   exists: that process is provably gone, so a service restarted after a crash can run
//   the job at once. A holder that lives but stopped renewing (hung, SIGSTOP) keeps the
//   job until the expiry.
// - The holder is the process id plus a random id per service instance (RunningJobs),
//   so no process takes another's lease for its own, even when a pid is reused.
// - Taking, renewing and releasing never wait synchronously for the write lock: they go
//   through writeTransaction / retryWhenBusy (src/db.ts), so while another process holds
//   the lock the event loop keeps answering (/health included) and the lease operation
//   waits with awaited pauses.
// - On PostgreSQL the same functions go to src/pg/job-lease.ts: the same rules (leaseTake,
//   leaseValues), with an advisory lock where SQLite has its write lock, and the lease's
//   times on the database server's clock, which two instances share.
import { randomUUID } from "node:crypto";
import { readFileSync, readlinkSync } from "node:fs";
import { hostname } from "node:os";
import { and, eq, gt, gte, inArray, type AnyColumn } from "drizzle-orm";
import { jobLeases, jobRuns } from "../db/schema.ts";
import { BUSY_TIMEOUT_MS, isBusy, retryWhenBusy, writeTransaction, type Db } from "./db.ts";
import type { AnyStore } from "./deps.ts";
import { runsOfJob, startRun, withDeadline } from "./job-runs.ts";
import { NEWEST_ROWS, sealedRunColumns, type RowSeal, type SealedRunRow } from "./row-seal.ts";
import { releaseLeasePg, renewLeasePg, startLeasedRunPg, startUnleasedRunPg } from "./pg/job-lease.ts";
import { log } from "./logger.ts";
import { maxRuntimeMs, type JobName } from "./schedule.ts";
import { latestCountingStart } from "./time.ts";

export type JobLease = typeof jobLeases.$inferSelect;

/** Who holds a lease: this process, and which service instance in it. */
export interface LeaseHolder {
  pid: number;
  /** Random per instance (RunningJobs), never reused. */
  instantie: string;
  /** Where `pid` means something: the hostname, and the PID namespace with the kernel's boot id (null where /proc does not say). */
  host: string;
  pidNs: string | null;
}

/**
 * This process's PID namespace and the kernel's boot id (`pid:[4026531836]
 * boot:<uuid>`): a container on the same host has another namespace. The root namespace
 * has the same inode on every Linux host, so two hosts that share a hostname (cloned
 * VMs, `localhost.localdomain`) would look like one machine without the boot id, which
 * is random per host and per boot.
 */
function pidNamespace(): string | null {
  try {
    const boot = readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
    if (boot === "") return null;
    return `${readlinkSync("/proc/self/ns/pid")} boot:${boot}`;
  } catch {
    return null;
  }
}

/** Where this process runs, as a lease names it. */
export const HERE: Pick<LeaseHolder, "host" | "pidNs"> = { host: hostname(), pidNs: pidNamespace() };

export function newLeaseHolder(): LeaseHolder {
  return { pid: process.pid, instantie: randomUUID(), ...HERE };
}

/**
 * Whether the holder of a lease is provably gone: it ran on this host, in this PID
 * namespace, since this boot, and its pid no longer exists. Anything else (another host or container,
 * a pid that exists — even if reused by an unrelated process, or not ours to signal)
 * counts as alive until the lease expires.
 */
export function holderGone(lease: Pick<JobLease, "pid" | "host" | "pidNs">): boolean {
  return holderHere(lease) === "weg";
}

/**
 * A lease holder's process as this host can tell: "weg" (it ran here, in this PID
 * namespace, since this boot, and its pid no longer exists), "leeft" (its pid exists
 * there, or is not ours to signal), or null (another host, container or boot).
 */
function holderHere(lease: Pick<JobLease, "pid" | "host" | "pidNs">): "weg" | "leeft" | null {
  if (lease.host !== HERE.host || lease.pidNs === null || lease.pidNs !== HERE.pidNs) return null;
  try {
    process.kill(lease.pid, 0);
    return "leeft";
  } catch (e) {
    return (e as { code?: unknown }).code === "ESRCH" ? "weg" : "leeft";
  }
}

/** The longest interval between two renewals of a lease. */
export const MAX_RENEW_MS = 30_000;
/** A lease's expiry lies this many renewals ahead, so one or two failed renewals (a busy database) do not lose it. */
export const RENEWALS_AHEAD = 3;

export interface LeaseTiming {
  /** How often the holder renews the lease. */
  renewMs: number;
  /** How far ahead each (re)new(al) sets the expiry. */
  ttlMs: number;
}

/** Renewal every min(maxRuntime / 4, 30 s), expiry three renewals ahead (90 s for every job today). */
export function leaseTiming(job: JobName): LeaseTiming {
  const renewMs = Math.min(Math.floor(maxRuntimeMs(job) / 4), MAX_RENEW_MS);
  return { renewMs, ttlMs: RENEWALS_AHEAD * renewMs };
}

export const isHolder = (lease: Pick<JobLease, "pid" | "instantie">, holder: LeaseHolder) => lease.pid === holder.pid && lease.instantie === holder.instantie;

export type LeasedStart =
  /** The run's job_runs row was written and its lease taken, valid until `verloopt`; `overgenomen`: another holder's lease it replaced, and why. */
  | { ok: true; runId: number; verloopt: Date; overgenomen: TakenOver | null }
  /** Another holder's lease is still valid: nothing was written. */
  | { ok: false; houder: JobLease; gedaan?: undefined }
  /** A scheduled call whose scheduled time a run already did (doneFor): nothing was written. */
  | { ok: false; gedaan: DoneRun; houder?: undefined };

/** A run that did a scheduled time's work. */
export interface DoneRun {
  runId: number;
  gestart: string;
  uitkomst: string;
}

/**
 * The outcomes of a run that did its scheduled time's work. A scheduled call (the
 * crontab's) for a time such a run started at or after is refused: with two instances
 * each crontab calls its own, and the job must run once. A run that failed ('fout') may
 * be retried by the second call; one still 'bezig' is the lease's to decide (alive, or
 * interrupted and taken over).
 */
export const DONE_OUTCOMES = ["ok", "afwijking"] as const;

/** The answer to a scheduled call whose scheduled time another run already did. */
export function doneMessage(job: JobName, firedAt: Date, done: DoneRun): string {
  return `De taak ${job} is voor de geplande tijd ${firedAt.toISOString()} al uitgevoerd (run ${done.runId}, gestart ${done.gestart}, uitkomst ${done.uitkomst}); deze geplande aanroep voert haar niet nog eens uit.`;
}

/**
 * Another holder's lease a take replaced, and why: it expired, its holder is provably
 * gone, or its seal does not hold (`vervalst`: a database writer wrote or changed it;
 * src/row-seal.ts).
 */
export type TakenOver = JobLease & { reden: "verlopen" | "proces-weg" | "vervalst" | "toekomst" };

/**
 * Whether a lease was last renewed ahead of `now` by more than FUTURE_START_MARGIN_MS
 * (latestCountingStart), while its holder is not provably alive here: written while the
 * host clock ran ahead. Its expiry says nothing then: kept, it would block the job until
 * the wrong date came (a year, for a clock a year ahead), as a run dated ahead is not
 * counted either. A holder that is alive renews it within MAX_RENEW_MS by the corrected
 * clock; one in another PID namespace cannot be seen and may lose it in that window (it
 * then says so at its end: job-overlap).
 */
export function leaseAhead(lease: Pick<JobLease, "vernieuwd" | "pid" | "host" | "pidNs">, now: Date): boolean {
  return lease.vernieuwd > latestCountingStart(now) && holderHere(lease) !== "leeft";
}

/**
 * The rule of taking a lease, for any store: refused while another holder's sealed lease
 * has not expired at `now`, was not renewed ahead of it (leaseAhead) and that holder is
 * not provably gone (holderGone); else taken, naming the lease it replaces and why. A
 * lease whose seal does not hold holds nothing.
 */
export function leaseTake(current: JobLease | null, holder: LeaseHolder, now: Date, seal: RowSeal): { ok: false; houder: JobLease } | { ok: true; overgenomen: TakenOver | null } {
  if (current === null) return { ok: true, overgenomen: null };
  if (!seal.leaseSealed(current)) return { ok: true, overgenomen: { ...current, reden: "vervalst" } };
  if (isHolder(current, holder)) return { ok: true, overgenomen: null };
  const expired = current.verloopt <= now.toISOString();
  const ahead = !expired && leaseAhead(current, now);
  if (!expired && !ahead && !holderGone(current)) return { ok: false, houder: current };
  return { ok: true, overgenomen: { ...current, reden: expired ? "verlopen" : ahead ? "toekomst" : "proces-weg" } };
}

/** The lease row a take writes: this holder, its run, valid until now + ttlMs, sealed. */
export function leaseValues(seal: RowSeal, job: JobName, holder: LeaseHolder, runId: number, now: Date, ttlMs: number) {
  return {
    pid: holder.pid,
    instantie: holder.instantie,
    host: holder.host,
    pidNs: holder.pidNs,
    runId,
    verkregen: now.toISOString(),
    ...renewValues(seal, job, holder, runId, now, ttlMs),
  };
}

/**
 * Takes the job's lease and writes its job_runs row ('bezig'), in one IMMEDIATE
 * transaction: refused while another holder's lease has not expired at `now` and that
 * holder is not provably gone (holderGone). A lease of this holder itself is taken over
 * (left by a release that failed: the in-process guard already said nothing of this job
 * runs here).
 *
 * Waits for another process's write lock without blocking the event loop
 * (writeTransaction), for at most `deadlineMs`; then rejects with that SQLITE_BUSY and
 * nothing was written (the job wrapper answers 503). Other database errors are passed on.
 */
export function startLeasedRun(
  store: AnyStore,
  /** Seals the run's row; and only a sealed run counts as one that did `firedAt` (src/row-seal.ts). */
  seal: RowSeal,
  job: JobName,
  holder: LeaseHolder,
  now: Date,
  ttlMs: number,
  deadlineMs = BUSY_TIMEOUT_MS,
  /** For a scheduled call: the scheduled time it is for (refused when a run did it already, DONE_OUTCOMES). */
  firedAt: Date | null = null,
): Promise<LeasedStart> {
  if (store.kind === "pg") return startLeasedRunPg(store, seal, job, holder, now, ttlMs, firedAt);
  const { db } = store;
  return writeTransaction(
    store.sqlite,
    (): LeasedStart => {
      if (firedAt !== null) {
        const done = firstSealed(
          db.select({ runId: jobRuns.id, ...sealedRunColumns(jobRuns) }).from(jobRuns).where(doneSince(jobRuns, job, firedAt, now)).orderBy(jobRuns.gestart).limit(NEWEST_ROWS).all(),
          seal,
        );
        if (done) return { ok: false, gedaan: done };
      }
      const current = db.select().from(jobLeases).where(eq(jobLeases.job, job)).get() ?? null;
      const take = leaseTake(current, holder, now, seal);
      if (!take.ok) return { ok: false, houder: take.houder };
      const runId = startRun(db, job, now, seal);
      const values = leaseValues(seal, job, holder, runId, now, ttlMs);
      db.insert(jobLeases)
        .values({ job, ...values })
        .onConflictDoUpdate({ target: jobLeases.job, set: values })
        .run();
      return { ok: true, runId, verloopt: new Date(values.verloopt), overgenomen: take.overgenomen };
    },
    deadlineMs,
  );
}

/**
 * Writes the job_runs row ('bezig') of a call of a job that is not exclusive
 * (JobDefinition.exclusive false): no lease is read or taken, so nothing is refused.
 * Waits for another process's write lock as startLeasedRun does (SQLITE_BUSY after
 * `deadlineMs`, nothing written).
 */
export function startUnleasedRun(store: AnyStore, seal: RowSeal, job: JobName, now: Date, deadlineMs = BUSY_TIMEOUT_MS): Promise<number> {
  if (store.kind === "pg") return startUnleasedRunPg(store, seal, job, now);
  const { db } = store;
  return writeTransaction(store.sqlite, () => startRun(db, job, now, seal), deadlineMs);
}

/** The columns the rules below name, of either dialect's job_leases and job_runs. */
export interface LeaseColumns {
  job: AnyColumn;
  pid: AnyColumn;
  instantie: AnyColumn;
  runId: AnyColumn;
}
export interface RunColumns {
  job: AnyColumn;
  gestart: AnyColumn;
  uitkomst: AnyColumn;
}

/** This holder's lease of this run, for any store: what renewal and release may touch. */
export const leaseHeldBy = (t: LeaseColumns, job: JobName, holder: LeaseHolder, runId: number) =>
  and(eq(t.job, job), eq(t.pid, holder.pid), eq(t.instantie, holder.instantie), eq(t.runId, runId));

/**
 * The rows that may be a run of the job that did the scheduled time `firedAt`, for any
 * store (DONE_OUTCOMES); only a sealed one is (firstSealed). A run dated after `now`
 * (beyond FUTURE_START_MARGIN_MS: recorded while the host clock ran ahead) did not: it
 * would make every scheduled call a no-op until real time caught up with it.
 */
export const doneSince = (t: RunColumns, job: JobName, firedAt: Date, now: Date) =>
  and(runsOfJob(t, job, now), gte(t.gestart, firedAt.toISOString()), inArray(t.uitkomst, [...DONE_OUTCOMES]));

/**
 * The first of doneSince's rows (by start) whose seal holds: a row a database writer made
 * does not make a scheduled call skip its job. Of the first NEWEST_ROWS only (a few real
 * ones per scheduled time; each forged one costs a signature check): should forged rows
 * fill them, the job runs again, which is the side to err on.
 */
export function firstSealed(rows: readonly (SealedRunRow & { runId: number })[], seal: RowSeal): DoneRun | null {
  const r = rows.find((x) => seal.sealed(x));
  return r ? { runId: r.runId, gestart: r.gestart, uitkomst: r.uitkomst } : null;
}

/** What a renewal writes: renewed now, valid until now + ttlMs, sealed again. */
export function renewValues(seal: RowSeal, job: JobName, holder: LeaseHolder, runId: number, now: Date, ttlMs: number) {
  const verloopt = new Date(now.getTime() + ttlMs).toISOString();
  return { vernieuwd: now.toISOString(), verloopt, zegel: seal.sealLease({ job, ...holder, runId, verloopt }) };
}

const heldBy = (job: JobName, holder: LeaseHolder, runId: number) => leaseHeldBy(jobLeases, job, holder, runId);

/** One attempt at renewing, synchronous: run inside retryWhenBusy (renewLease, startRenewing). */
function renewNow(db: Db, seal: RowSeal, job: JobName, holder: LeaseHolder, runId: number, now: Date, ttlMs: number): boolean {
  const rows = db
    .update(jobLeases)
    .set(renewValues(seal, job, holder, runId, now, ttlMs))
    .where(heldBy(job, holder, runId))
    .returning({ job: jobLeases.job })
    .all();
  return rows.length > 0;
}

/**
 * Moves the expiry of this holder's lease on; false when it is no longer this holder's
 * (taken over after it expired). Waits for another process's write lock without
 * blocking the event loop (retryWhenBusy) for at most `deadlineMs`, then rejects with
 * SQLITE_BUSY.
 */
export function renewLease(store: AnyStore, seal: RowSeal, job: JobName, holder: LeaseHolder, runId: number, now: Date, ttlMs: number, deadlineMs = BUSY_TIMEOUT_MS): Promise<boolean> {
  if (store.kind === "pg") return renewLeasePg(store, seal, job, holder, runId, now, ttlMs);
  return retryWhenBusy(store.sqlite, () => renewNow(store.db, seal, job, holder, runId, now, ttlMs), deadlineMs);
}

/**
 * Deletes this holder's lease of the run; never another holder's. False when there was
 * none. Waits for the write lock as renewLease does; after `deadlineMs` it rejects with
 * SQLITE_BUSY and the lease stays until it expires.
 */
export function releaseLease(store: AnyStore, job: JobName, holder: LeaseHolder, runId: number, deadlineMs = BUSY_TIMEOUT_MS): Promise<boolean> {
  if (store.kind === "pg") return releaseLeasePg(store, job, holder, runId, deadlineMs);
  return retryWhenBusy(
    store.sqlite,
    () => store.db.delete(jobLeases).where(heldBy(job, holder, runId)).returning({ job: jobLeases.job }).all().length > 0,
    deadlineMs,
  );
}

/**
 * The sealed leases that have not expired at `now` and whose holder is not provably
 * gone, by job: whoever holds them is alive (or was, less than an expiry ago).
 */
export function liveLeases(db: Db, now: Date, seal: RowSeal): Map<string, JobLease> {
  const rows = db.select().from(jobLeases).where(gt(jobLeases.verloopt, now.toISOString())).all();
  return new Map(rows.filter((r) => seal.leaseSealed(r) && !holderGone(r) && !leaseAhead(r, now)).map((r) => [r.job, r]));
}

/** The answer to a call refused because another process holds the job's lease. */
export function heldElsewhereMessage(job: JobName, lease: JobLease): string {
  return (
    `De taak ${job} loopt al in een ander proces (pid ${lease.pid} op ${lease.host}, gestart ${lease.verkregen}); een tweede aanroep wordt niet tegelijk uitgevoerd. ` +
    `Leeft dat proces niet meer, dan kan de taak weer na ${lease.verloopt}.`
  );
}

/** What became of a lease while it was renewed; stop() answers it. */
export interface RenewalState {
  /** Another process took the lease over (this one could not renew it before it expired): the job may have run twice. */
  lost: boolean;
  /** The lease passed its expiry at least once before a renewal got through. */
  lapsed: boolean;
  /** The expiry this process last wrote (taken or renewed). */
  verloopt: Date;
}

export interface LeaseRenewer {
  /** Stops renewing and resolves once no renewal is under way any more (none writes after it). */
  stop(): Promise<RenewalState>;
}

const errorMessage = (e: unknown) => (e instanceof Error ? e.message : String(e));

/**
 * Renews the lease of a running run every `timing.renewMs` until stop(). Nothing here
 * throws into the job or stops it.
 *
 * A renewal that meets another process's write lock waits for it (retryWhenBusy,
 * awaited) and goes on trying, without a deadline, until it gets through or the run
 * ends. It does not give up at the lease's expiry and does not stop the job either:
 * taking the lease over needs that same write lock, so while the lock stays taken no
 * other process can take it, and the moment it is free this renewal gets its turn too;
 * its WHERE (this holder, this run) then says whether the lease was taken over in
 * between. Stopping the job would leave its work half done to prevent a take-over that
 * cannot happen yet. What is not silent: every `renewMs` of waiting is logged as a
 * warning; the expiry passing without a renewal as an error, at once (another process
 * may take the job over from the moment the lock is free); a take-over as an error when
 * the renewal finds it; and stop() tells the job wrapper (`lost`, `lapsed`).
 *
 * Another database error (read-only, disk full) is logged and tried again at the next
 * renewal. A run past its maximum run time is logged once as a warning (taken-controle
 * raises the alarm).
 */
export function startRenewing(
  store: AnyStore,
  /** Seals each renewal (src/row-seal.ts). */
  seal: RowSeal,
  clock: () => Date,
  job: JobName,
  holder: LeaseHolder,
  runId: number,
  timing: LeaseTiming,
  /** The expiry the lease was taken with (LeasedStart). */
  verloopt: Date,
): LeaseRenewer {
  const started = performance.now();
  const maxMs = maxRuntimeMs(job);
  const state: RenewalState = { lost: false, lapsed: false, verloopt };
  let stopped = false;
  let wake: () => void = () => {};
  let overTime = false;

  /** Waits `ms` (a timer that keeps no process alive), or less when stop() is called. */
  const pause = (ms: number) =>
    new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      timer.unref?.();
      wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });

  /**
   * One attempt, by the store's kind. `stopped` is checked inside it: after stop() nothing
   * more is written. On PostgreSQL a renewal that does not get through within renewMs (a
   * pool taken by the job and the write API) fails like any other error and is tried
   * again; on SQLite retryWhenBusy waits that long for the write lock.
   */
  const attempt = async (now: Date): Promise<"stopped" | "renewed" | "lost"> => {
    const outcome = (renewed: boolean) => (renewed ? "renewed" : "lost");
    if (store.kind === "sqlite") return retryWhenBusy(store.sqlite, () => (stopped ? "stopped" : outcome(renewNow(store.db, seal, job, holder, runId, now, timing.ttlMs))), timing.renewMs);
    if (stopped) return "stopped";
    return outcome(await withDeadline(renewLeasePg(store, seal, job, holder, runId, now, timing.ttlMs), timing.renewMs, "the renewal"));
  };

  const loop = async () => {
    let waitingSince: Date | null = null;
    let lapseLogged = false;
    /** The expiry passing without a renewal: an error at once, whatever stopped the renewal (another process may take the job over from then on). */
    const noteLapse = (now: Date, cause: string): boolean => {
      if (lapseLogged || now.getTime() < state.verloopt.getTime()) return false;
      lapseLogged = true;
      state.lapsed = true;
      log("error", `a running job's lease expired without a renewal (${cause}); another process may take the job over (it may run twice). Renewal goes on`, {
        job,
        runId,
        verloopt: state.verloopt.toISOString(),
      });
      return true;
    };
    while (!stopped) {
      // After a renewal that waited its full turn for the lock, the next attempt follows at once.
      if (waitingSince === null) await pause(timing.renewMs);
      if (stopped) break;
      if (!overTime && performance.now() - started > maxMs) {
        overTime = true;
        log("warn", "a job runs longer than its maximum run time", { job, runId, maxRuntimeMinutes: maxMs / 60_000 });
      }
      try {
        const now = clock();
        const outcome = await attempt(now);
        if (outcome === "stopped") break;
        if (outcome === "lost") {
          state.lost = true;
          log("error", "a running job's lease was taken over by another process (its renewal had stopped past the expiry); the job may run twice", { job, runId });
          break;
        }
        state.verloopt = new Date(now.getTime() + timing.ttlMs);
        if (waitingSince !== null) {
          log("info", "renewed a running job's lease after waiting for the database's write lock", {
            job,
            runId,
            wachtteSinds: waitingSince.toISOString(),
            ...(lapseLogged ? { verlopenTussentijds: true } : {}),
          });
        }
        waitingSince = null;
        lapseLogged = false;
      } catch (e) {
        if (stopped) break;
        const now = clock();
        if (!isBusy(e)) {
          waitingSince = null;
          if (!noteLapse(now, `the renewal failed: ${errorMessage(e)}`)) {
            log("warn", "could not renew a running job's lease; tried again at the next renewal", { job, runId, error: errorMessage(e) });
          }
          continue;
        }
        waitingSince ??= now;
        if (!noteLapse(now, "the database's write lock stayed taken by another process")) {
          log("warn", "could not renew a running job's lease: the database's write lock is taken by another process; trying again", {
            job,
            runId,
            verloopt: state.verloopt.toISOString(),
          });
        }
      }
    }
  };
  const done = loop().catch((e) => log("error", "the lease renewal stopped on an unexpected error", { job, runId, error: errorMessage(e) }));
  return {
    async stop() {
      stopped = true;
      wake();
      await done;
      return state;
    },
  };
}
