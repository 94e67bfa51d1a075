// The "already running" guard across processes (src/job-lease.ts) on PostgreSQL, for
// the day two service instances share one database: the same lease row per job, the
// same rules for who may take it (isHolder, holderGone) and the same results. Only the
// locking differs, because PostgreSQL has no database-wide write lock to serialise
// takers the way SQLite's IMMEDIATE transaction does:
//
// - A take is one READ COMMITTED transaction that first waits for the transaction
//   advisory lock (LOCK_NAMESPACE, LOCK_JOB_LEASE). Without it two takers that both find
//   no row would both write a run, and the second's upsert would wait for the first's
//   commit and then overwrite its lease: both would run the job. Each statement after
//   the lock reads what the previous holder of the lock committed.
// - It then reads the lease row FOR UPDATE: renewals and releases do not take the
//   advisory lock, so one under way must finish first and the take decides on what it
//   wrote (a renewed expiry), not on the row as it was before.
// - Renewal and release are single statements whose WHERE names the holder and its
//   run. A take-over, once committed, leaves them nothing to match; one still waiting
//   for the row when they commit sees their result.
// - A lease's times are the database server's (onServerClock), not the host's: two
//   instances write and read each other's expiries, and hosts' clocks may disagree. With
//   each host's own, an instance whose clock ran a renewal (30 s) ahead took the other's
//   live lease and ran the job a second time. The run's own times (job_runs) stay the
//   host's, as its crontab fires by it. What this module returns is on the host's clock
//   again (LeasedStart's `verloopt`), for the renewer, which counts on that clock.
import { eq, gt, sql } from "drizzle-orm";
import { jobLeases, jobRuns } from "../../db/schema-pg.ts";
import { doneSince, firstSealed, holderGone, leaseAhead, leaseHeldBy, leaseTake, leaseValues, renewValues, type JobLease, type LeasedStart, type LeaseHolder } from "../job-lease.ts";
import { runStartValues } from "../job-runs.ts";
import { NEWEST_ROWS, sealedRunColumns, type RowSeal } from "../row-seal.ts";
import type { JobName } from "../schedule.ts";
import { onServerClock } from "./clock.ts";
import { certainDbTransaction } from "./commit.ts";
import { LOCK_JOB_LEASE, LOCK_NAMESPACE, LOCK_TIMEOUT_MS, withLockWait, type PgDb, type PgDbTx, type PgStore } from "./store.ts";

/**
 * Takes the job's lease and writes its job_runs row ('bezig'), in one transaction:
 * refused while another holder's lease has not expired at `now` and that holder is not
 * provably gone (holderGone); a refused call writes nothing. A lease of this holder
 * itself is taken over, as on SQLite (startLeasedRun).
 */
export function startLeasedRunPg(store: PgStore, seal: RowSeal, job: JobName, holder: LeaseHolder, now: Date, ttlMs: number, firedAt: Date | null = null): Promise<LeasedStart> {
  // The reasoning below needs a fresh snapshot per statement, whatever the server's
  // default. A take whose COMMIT's answer is lost is looked up (certainDbTransaction): a
  // committed take not known as such would leave the scheduled run to nobody, the other
  // instance having been told it runs here.
  return certainDbTransaction(
    store.sql,
    "ISOLATION LEVEL READ COMMITTED",
    async (tx): Promise<LeasedStart> => {
      // Drizzle has no builder for advisory locks; transaction-scoped, so COMMIT or ROLLBACK frees it.
      await tx.execute(sql`SELECT pg_advisory_xact_lock(${LOCK_NAMESPACE}, ${LOCK_JOB_LEASE})`);
      if (firedAt !== null) {
        // Under the advisory lock: a run another instance started for this time is committed and seen.
        const done = firstSealed(
          await tx
            .select({ runId: jobRuns.id, ...sealedRunColumns(jobRuns) })
            .from(jobRuns)
            .where(doneSince(jobRuns, job, firedAt, now))
            .orderBy(jobRuns.gestart)
            .limit(NEWEST_ROWS),
          seal,
        );
        if (done) return { ok: false, gedaan: done };
      }
      const [row] = await tx.select().from(jobLeases).where(eq(jobLeases.job, job)).for("update");
      const current: JobLease | null = row ?? null;
      const serverNow = await onServerClock(tx, now);
      const take = leaseTake(current, holder, serverNow, seal);
      if (!take.ok) return { ok: false, houder: take.houder };
      const [run] = await tx.insert(jobRuns).values(runStartValues(job, now, seal)).returning({ id: jobRuns.id });
      const values = leaseValues(seal, job, holder, run!.id, serverNow, ttlMs);
      await tx
        .insert(jobLeases)
        .values({ job, ...values })
        .onConflictDoUpdate({ target: jobLeases.job, set: values });
      return { ok: true, runId: run!.id, verloopt: new Date(now.getTime() + ttlMs), overgenomen: take.overgenomen };
    },
  );
}

/** The job_runs row of a call of a job that is not exclusive, without a lease (startUnleasedRun on SQLite). */
export async function startUnleasedRunPg(store: PgStore, seal: RowSeal, job: JobName, now: Date): Promise<number> {
  const [run] = await store.db.insert(jobRuns).values(runStartValues(job, now, seal)).returning({ id: jobRuns.id });
  return run!.id;
}

const heldBy = (job: JobName, holder: LeaseHolder, runId: number) => leaseHeldBy(jobLeases, job, holder, runId);

/** Moves the expiry of this holder's lease of the run on; false when it is no longer this holder's (taken over after it expired). */
export async function renewLeasePg(store: PgStore, seal: RowSeal, job: JobName, holder: LeaseHolder, runId: number, now: Date, ttlMs: number): Promise<boolean> {
  const serverNow = await onServerClock(store.db, now);
  const rows = await store.db
    .update(jobLeases)
    .set(forwardOnly(renewValues(seal, job, holder, runId, serverNow, ttlMs)))
    .where(heldBy(job, holder, runId))
    .returning({ job: jobLeases.job });
  return rows.length > 0;
}

/**
 * A renewal's values that never move the lease back: a renewal given up on (its deadline,
 * startRenewing) may still arrive after a later one. ISO UTC text compares as time (the
 * columns are COLLATE "C"). The seal goes with the expiry it signs.
 */
function forwardOnly(v: { vernieuwd: string; verloopt: string; zegel: string }) {
  return {
    vernieuwd: sql`GREATEST(${jobLeases.vernieuwd}, ${v.vernieuwd})`,
    verloopt: sql`GREATEST(${jobLeases.verloopt}, ${v.verloopt})`,
    zegel: sql`CASE WHEN ${jobLeases.verloopt} > ${v.verloopt} THEN ${jobLeases.zegel} ELSE ${v.zegel} END`,
  };
}

/**
 * Deletes this holder's lease of the run; never another holder's. False when there was
 * none. It waits for the lease's row as long as its caller waits (withLockWait), as a
 * run's end does.
 */
export async function releaseLeasePg(store: PgStore, job: JobName, holder: LeaseHolder, runId: number, lockWaitMs = LOCK_TIMEOUT_MS): Promise<boolean> {
  return withLockWait(store, lockWaitMs, async (tx) => (await tx.delete(jobLeases).where(heldBy(job, holder, runId)).returning({ job: jobLeases.job })).length > 0);
}

/**
 * The sealed leases that have not expired at `now` (on the server's clock, as they were
 * written) and whose holder is not provably gone, by job: whoever holds them is alive (or
 * was, less than an expiry ago).
 */
export async function liveLeasesPg(db: PgDb | PgDbTx, now: Date, seal: RowSeal): Promise<Map<string, JobLease>> {
  const serverNow = await onServerClock(db, now);
  const rows = await db.select().from(jobLeases).where(gt(jobLeases.verloopt, serverNow.toISOString()));
  return new Map(rows.filter((r) => seal.leaseSealed(r) && !holderGone(r) && !leaseAhead(r, serverNow)).map((r) => [r.job, r]));
}
