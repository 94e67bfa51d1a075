// The job-run history (src/job-runs.ts) on PostgreSQL: a run's end. Its start is written
// with its lease (startLeasedRunPg, src/pg/job-lease.ts).
import { sql } from "drizzle-orm";
import { jobRuns } from "../../db/schema-pg.ts";
import { openRun, runEndValues, type RunEnd } from "../job-runs.ts";
import { LOCK_TIMEOUT_MS, type PgStore } from "./store.ts";

/**
 * The end of a run: one UPDATE of its row, with the same values as on SQLite
 * (runEndValues). It waits for the row as long as its caller waits for it (`lockWaitMs`:
 * 5 s before the answer, a minute after it), not the pool's lock_timeout, as SQLite's
 * end waits for the write lock; 0 still waits 1 ms, since lock_timeout 0 is no limit.
 */
export async function finishRunPg(store: PgStore, id: number, end: Date, r: RunEnd, lockWaitMs = LOCK_TIMEOUT_MS): Promise<void> {
  await store.db.transaction(async (tx) => {
    await tx.execute(sql.raw(`SET LOCAL lock_timeout = ${Math.max(1, Math.ceil(lockWaitMs))}`));
    await tx.update(jobRuns).set(runEndValues(end, r)).where(openRun(jobRuns, id));
  });
}
