// The job-run history (job_runs). Every run is written when it starts (so a run
// killed mid-way stays visible as 'bezig' with no end) and completed when it ends,
// whatever the outcome. The in-process guard is src/running-jobs.ts, the cron
// arithmetic src/schedule-due.ts.
import { desc, eq } from "drizzle-orm";
import { jobRuns } from "../db/schema.ts";
import type { Db } from "./db.ts";
import type { RunningJobs, KeptEnd } from "./running-jobs.ts";
import type { JobName } from "./schedule.ts";

export type JobRunRow = typeof jobRuns.$inferSelect;
export type Outcome = JobRunRow["uitkomst"];

/** The summary kept per run is bounded: the history must not grow with a report's size. */
const MAX_SUMMARY = 4000;

export function startRun(db: Db, job: JobName, now: Date): number {
  const row = db
    .insert(jobRuns)
    .values({ job, gestart: now.toISOString(), uitkomst: "bezig" })
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

export function finishRun(db: Db, id: number, end: Date, r: RunEnd): void {
  let summary = r.samenvatting === undefined ? null : JSON.stringify(r.samenvatting);
  if (summary !== null && summary.length > MAX_SUMMARY) summary = summary.slice(0, MAX_SUMMARY - 1) + "…";
  db
    .update(jobRuns)
    .set({ beeindigd: end.toISOString(), uitkomst: r.uitkomst, httpStatus: r.httpStatus, samenvatting: summary, fout: r.fout ?? null })
    .where(eq(jobRuns.id, id))
    .run();
}

export function lastRun(db: Db, job: string): JobRunRow | null {
  return (
    db
      .select()
      .from(jobRuns)
      .where(eq(jobRuns.job, job))
      .orderBy(desc(jobRuns.gestart), desc(jobRuns.id))
      .limit(1)
      .get() ?? null
  );
}

/**
 * Writes the ends kept in `running` (each tried once; one that fails again stays kept)
 * and returns the ones written. Never throws: it runs before an unrelated job.
 */
export function writeKeptEnds(db: Db, running: RunningJobs): KeptEnd[] {
  const written: KeptEnd[] = [];
  for (const kept of running.keptEndsList()) {
    try {
      finishRun(db, kept.runId, kept.end, kept.result);
      running.forgetEnd(kept.runId);
      written.push(kept);
    } catch {
      // Still not writable: the caller logs how many stay kept.
    }
  }
  return written;
}
