// The job-run history (src/job-runs.ts) on PostgreSQL: a run's end. Its start is written
// with its lease (startLeasedRunPg, src/pg/job-lease.ts).
import { jobRuns } from "../../db/schema-pg.ts";
import { openRun, runEndValues, type RunEnd } from "../job-runs.ts";
import type { PgStore } from "./store.ts";

/** The end of a run: one UPDATE of its row, with the same values as on SQLite (runEndValues). */
export async function finishRunPg(store: PgStore, id: number, end: Date, r: RunEnd): Promise<void> {
  await store.db.update(jobRuns).set(runEndValues(end, r)).where(openRun(jobRuns, id));
}
