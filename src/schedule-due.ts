// Cron arithmetic beside the schedule table (src/schedule.ts, which stays a plain
// table for the crontab generator): where a scheduled job stands against its cron
// expression (UTC) and the job-run history.
import { Cron } from "croner";
import { and, eq, gte, sql } from "drizzle-orm";
import { jobRuns } from "../db/schema.ts";
import { preparedPerConnection, type Db } from "./db.ts";
import type { JobName } from "./schedule.ts";

/**
 * The last fire time at or before `at`. croner's previousRuns excludes a fire time
 * equal to the reference, so the reference is moved one millisecond on.
 */
function lastFireAtOrBefore(cron: Cron, at: Date): Date | null {
  return cron.previousRuns(1, new Date(at.getTime() + 1))[0] ?? null;
}

/** Whether a run of the job started at or after `since`; run for every scheduled job, so prepared once. */
const startedSinceStatement = preparedPerConnection((db) =>
  db
    .select({ one: sql<number>`1` })
    .from(jobRuns)
    .where(and(eq(jobRuns.job, sql.placeholder("job")), gte(jobRuns.gestart, sql.placeholder("since"))))
    .limit(1)
    .prepare(),
);

export interface DueState {
  /** The newest fire time at or before now. */
  expected: Date | null;
  /** No fire time yet since the service was installed: nothing is expected of the job. */
  notYetExpected: boolean;
  /** The newest fire time whose grace has run out. */
  due: Date | null;
  /** No run started since `due`, and `due` is not before the install time. */
  missed: boolean;
  /** A run started since `expected`. */
  ranSinceExpected: boolean;
  /** The next fire time after now. */
  next: Date | null;
}

/**
 * Where a scheduled job stands against its cron expression (UTC) and the job-run
 * history: the one rule that taken-controle and the daily report both apply. A run
 * counts from the moment it started, also one still 'bezig'. Checking only the very
 * last fire time would never find a job that runs more often than the grace (every
 * 15 minutes against 30): its last fire time is always still within grace, hence `due`.
 */
export function dueState(db: Db, job: JobName, cronExpression: string, now: Date, graceMs: number, installed: Date | null): DueState {
  const cron = new Cron(cronExpression, { timezone: "UTC" });
  const beforeInstall = (d: Date) => installed !== null && d.getTime() < installed.getTime();
  const startedSince = (d: Date) => startedSinceStatement(db).get({ job, since: d.toISOString() }) !== undefined;
  const expected = lastFireAtOrBefore(cron, now);
  const due = lastFireAtOrBefore(cron, new Date(now.getTime() - graceMs));
  return {
    expected,
    notYetExpected: expected === null || beforeInstall(expected),
    due,
    missed: due !== null && !beforeInstall(due) && !startedSince(due),
    ranSinceExpected: expected !== null && startedSince(expected),
    next: cron.nextRun(now),
  };
}
