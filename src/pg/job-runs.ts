// The job-run history (src/job-runs.ts) on PostgreSQL: a run's end. Its start is written
// with its lease (startLeasedRunPg, src/pg/job-lease.ts).
import { jobRuns } from "../../db/schema-pg.ts";
import { openRun, runEndValues, type RunEnd } from "../job-runs.ts";
import type { RowSeal } from "../row-seal.ts";
import { LOCK_TIMEOUT_MS, withLockWait, type PgStore } from "./store.ts";

/**
 * The end of a run: its row locked and updated, with the same values as on SQLite
 * (runEndValues, sealed with its start as read from the row). It waits for the row as
 * long as its caller waits for it (withLockWait).
 */
export async function finishRunPg(store: PgStore, seal: RowSeal, id: number, end: Date, r: RunEnd, lockWaitMs = LOCK_TIMEOUT_MS): Promise<void> {
  await withLockWait(store, lockWaitMs, async (tx) => {
    const [start] = await tx.select({ job: jobRuns.job, gestart: jobRuns.gestart }).from(jobRuns).where(openRun(jobRuns, id)).for("update");
    if (!start) return;
    await tx.update(jobRuns).set(runEndValues(seal, start, end, r)).where(openRun(jobRuns, id));
  });
}
