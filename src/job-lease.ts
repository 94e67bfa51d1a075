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
import { randomUUID } from "node:crypto";
import { readlinkSync } from "node:fs";
import { hostname } from "node:os";
import { and, eq, gt } from "drizzle-orm";
import { jobLeases } from "../db/schema.ts";
import type { Db } from "./db.ts";
import { startRun } from "./job-runs.ts";
import { log } from "./logger.ts";
import { maxRuntimeMs, type JobName } from "./schedule.ts";

export type JobLease = typeof jobLeases.$inferSelect;

/** Who holds a lease: this process, and which service instance in it. */
export interface LeaseHolder {
  pid: number;
  /** Random per instance (RunningJobs), never reused. */
  instantie: string;
  /** Where `pid` means something: the hostname and the PID namespace (null where /proc does not say). */
  host: string;
  pidNs: string | null;
}

/** This process's PID namespace (`pid:[4026531836]`), so that a container on the same host is not taken for this one. */
function pidNamespace(): string | null {
  try {
    return readlinkSync("/proc/self/ns/pid");
  } catch {
    return null;
  }
}

const HERE = { host: hostname(), pidNs: pidNamespace() };

export function newLeaseHolder(): LeaseHolder {
  return { pid: process.pid, instantie: randomUUID(), ...HERE };
}

/**
 * Whether the holder of a lease is provably gone: it ran on this host, in this PID
 * namespace, and its pid no longer exists. Anything else (another host or container,
 * a pid that exists — even if reused by an unrelated process, or not ours to signal)
 * counts as alive until the lease expires.
 */
export function holderGone(lease: Pick<JobLease, "pid" | "host" | "pidNs">): boolean {
  if (lease.host !== HERE.host || lease.pidNs === null || lease.pidNs !== HERE.pidNs) return false;
  try {
    process.kill(lease.pid, 0);
    return false;
  } catch (e) {
    return (e as { code?: unknown }).code === "ESRCH";
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

const isHolder = (lease: Pick<JobLease, "pid" | "instantie">, holder: LeaseHolder) => lease.pid === holder.pid && lease.instantie === holder.instantie;

export type LeasedStart =
  /** The run's job_runs row was written and its lease taken; `overgenomen`: another holder's lease it replaced, and why. */
  | { ok: true; runId: number; overgenomen: (JobLease & { reden: "verlopen" | "proces-weg" }) | null }
  /** Another holder's lease is still valid: nothing was written. */
  | { ok: false; houder: JobLease };

/**
 * Takes the job's lease and writes its job_runs row ('bezig'), in one IMMEDIATE
 * transaction: refused while another holder's lease has not expired at `now` and that
 * holder is not provably gone (holderGone). A lease of this holder itself is taken over
 * (left by a release that failed: the in-process guard already said nothing of this job
 * runs here).
 */
export function startLeasedRun(db: Db, job: JobName, holder: LeaseHolder, now: Date, ttlMs: number): LeasedStart {
  return db.transaction(
    (): LeasedStart => {
      const current = db.select().from(jobLeases).where(eq(jobLeases.job, job)).get() ?? null;
      const nowIso = now.toISOString();
      const other = current !== null && !isHolder(current, holder);
      const expired = current !== null && current.verloopt <= nowIso;
      if (other && !expired && !holderGone(current)) return { ok: false, houder: current };
      const runId = startRun(db, job, now);
      const values = {
        pid: holder.pid,
        instantie: holder.instantie,
        host: holder.host,
        pidNs: holder.pidNs,
        runId,
        verkregen: nowIso,
        vernieuwd: nowIso,
        verloopt: new Date(now.getTime() + ttlMs).toISOString(),
      };
      db.insert(jobLeases)
        .values({ job, ...values })
        .onConflictDoUpdate({ target: jobLeases.job, set: values })
        .run();
      return { ok: true, runId, overgenomen: other ? { ...current, reden: expired ? "verlopen" : "proces-weg" } : null };
    },
    { behavior: "immediate" },
  );
}

const heldBy = (job: JobName, holder: LeaseHolder, runId: number) =>
  and(eq(jobLeases.job, job), eq(jobLeases.pid, holder.pid), eq(jobLeases.instantie, holder.instantie), eq(jobLeases.runId, runId));

/** Moves the expiry of this holder's lease on; false when it is no longer this holder's (taken over after it expired). */
export function renewLease(db: Db, job: JobName, holder: LeaseHolder, runId: number, now: Date, ttlMs: number): boolean {
  const rows = db
    .update(jobLeases)
    .set({ vernieuwd: now.toISOString(), verloopt: new Date(now.getTime() + ttlMs).toISOString() })
    .where(heldBy(job, holder, runId))
    .returning({ job: jobLeases.job })
    .all();
  return rows.length > 0;
}

/** Deletes this holder's lease of the run; never another holder's. False when there was none. */
export function releaseLease(db: Db, job: JobName, holder: LeaseHolder, runId: number): boolean {
  return db.delete(jobLeases).where(heldBy(job, holder, runId)).returning({ job: jobLeases.job }).all().length > 0;
}

/**
 * The leases that have not expired at `now` and whose holder is not provably gone, by
 * job: whoever holds them is alive (or was, less than an expiry ago).
 */
export function liveLeases(db: Db, now: Date): Map<string, JobLease> {
  const rows = db.select().from(jobLeases).where(gt(jobLeases.verloopt, now.toISOString())).all();
  return new Map(rows.filter((r) => !holderGone(r)).map((r) => [r.job, r]));
}

/** The answer to a call refused because another process holds the job's lease. */
export function heldElsewhereMessage(job: JobName, lease: JobLease): string {
  return (
    `De taak ${job} loopt al in een ander proces (pid ${lease.pid} op ${lease.host}, gestart ${lease.verkregen}); een tweede aanroep wordt niet tegelijk uitgevoerd. ` +
    `Leeft dat proces niet meer, dan kan de taak weer na ${lease.verloopt}.`
  );
}

export interface LeaseRenewer {
  stop(): void;
}

/**
 * Renews the lease of a running run every `timing.renewMs` until stop(). A failed
 * renewal (a busy or read-only database) is logged and tried again at the next tick;
 * a lease taken over by another process (this one stopped renewing for longer than the
 * expiry) is logged once as an error: the job may then run twice. A run past its
 * maximum run time is logged once as a warning (taken-controle raises the alarm).
 */
export function startRenewing(db: Db, clock: () => Date, job: JobName, holder: LeaseHolder, runId: number, timing: LeaseTiming): LeaseRenewer {
  const started = performance.now();
  const maxMs = maxRuntimeMs(job);
  let lost = false;
  let overTime = false;
  const timer = setInterval(() => {
    if (!overTime && performance.now() - started > maxMs) {
      overTime = true;
      log("warn", "a job runs longer than its maximum run time", { job, runId, maxRuntimeMinutes: maxMs / 60_000 });
    }
    if (lost) return;
    try {
      if (!renewLease(db, job, holder, runId, clock(), timing.ttlMs)) {
        lost = true;
        log("error", "a running job's lease was taken over by another process (its renewal had stopped past the expiry); the job may run twice", { job, runId });
      }
    } catch (e) {
      log("warn", "could not renew a running job's lease; tried again at the next renewal", { job, runId, error: e instanceof Error ? e.message : String(e) });
    }
  }, timing.renewMs);
  timer.unref?.();
  return { stop: () => clearInterval(timer) };
}
