// The job-run history (src/job-runs.ts) on PostgreSQL: a run's end. Its start is written
// with its lease (startLeasedRunPg, src/pg/job-lease.ts).
import { jobRuns } from "../../db/schema-pg.ts";
import { openRun, runEndValues, type RunEnd, type RunRef } from "../job-runs.ts";
import type { RowSeal } from "../row-seal.ts";
import { LOCK_TIMEOUT_MS, withLockWait, type PgStore } from "./store.ts";

/**
 * The end of a run: one UPDATE of its row, with the same values as on SQLite
 * (runEndValues). It waits for the row as long as its caller waits for it (withLockWait).
 */
export async function finishRunPg(store: PgStore, seal: RowSeal, run: RunRef, end: Date, r: RunEnd, lockWaitMs = LOCK_TIMEOUT_MS): Promise<void> {
  await withLockWait(store, lockWaitMs, async (tx) => {
    await tx.update(jobRuns).set(runEndValues(seal, run, end, r)).where(openRun(jobRuns, run.runId));
  });
}
