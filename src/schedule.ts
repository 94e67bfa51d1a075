// The one schedule table: every job's cron expression (five fields, UTC), its maximum
// run time and its path (jobPath). The crontab in ops/ is generated from it and
// taken-controle reads it; the arithmetic on it (when a job was due) is
// src/schedule-due.ts.

export const JOB_NAMES = [
  "weekrapport",
  "audit-retentie",
  "beveiligingslog-retentie",
  "audit-verificatie",
  "backup-status",
  "dagrapport",
  "audit-anker",
  "backup-controle",
  "taken-controle",
  "beveiligingslog-analyse",
  "db-onderhoud",
] as const;

export type JobName = (typeof JOB_NAMES)[number];

export interface ScheduleEntry {
  job: JobName;
  /** null: not scheduled (backup-status is called by the host backup job). */
  cron: string | null;
  /**
   * Maximum run time in minutes (healthchecks' and Sentry Crons' timeout/max_runtime):
   * a run that is still alive after this long hangs (taken-controle: `hangt`, alarm
   * `job-hung`). Nothing stops it; it also paces the lease renewal (src/job-lease.ts).
   */
  maxRuntimeMinutes: number;
}

const cron: Record<JobName, string | null> = {
  weekrapport: "0 18 * * 0",
  "audit-retentie": "0 2 1 1 *",
  "beveiligingslog-retentie": "0 3 * * *",
  "audit-verificatie": "0 1 * * *",
  dagrapport: "0 6 * * *",
  "audit-anker": "30 1 * * *",
  "backup-controle": "15 * * * *",
  "taken-controle": "45 * * * *",
  "beveiligingslog-analyse": "*/15 * * * *",
  "db-onderhoud": "0 4 * * 0",
  "backup-status": null,
};

/**
 * Maximum run time per job, in minutes: well above what the job takes on a large
 * installation (docs/performance.md, size L: 5 M audit entries, 5 M login attempts,
 * 9,000 weekly e-mails), so that only a run that is stuck goes over it.
 * - audit-retentie: 76 s at L with its verification and signing, once a year over a
 *   year's backlog; bounded batches with pauses: 3 hours.
 * - audit-verificatie: 14 s at L on the slow machine (357 k entries/s); 1 hour leaves
 *   room for a chain of ten times that on a busy disk.
 * - beveiligingslog-retentie, db-onderhoud: 13 s / a quick_check over the whole file at
 *   L; an hour each.
 * - weekrapport: 12 s for 9,000 messages; bound by the SMTP server (timeouts of 15–30 s
 *   per connection): an hour.
 * - audit-anker: 28 s the first time over 5 M entries, under a second per night: 30 minutes.
 * - dagrapport: 13 ms, 0.2 s with the mail: 10 minutes (an SMTP server timing out).
 * - backup-controle, taken-controle, beveiligingslog-analyse: milliseconds; they run
 *   every hour or quarter: 5 minutes. backup-status (one insert): 2 minutes.
 */
const maxRuntimeMinutes: Record<JobName, number> = {
  weekrapport: 60,
  "audit-retentie": 180,
  "beveiligingslog-retentie": 60,
  "audit-verificatie": 60,
  dagrapport: 10,
  "audit-anker": 30,
  "backup-controle": 5,
  "taken-controle": 5,
  "beveiligingslog-analyse": 5,
  "db-onderhoud": 60,
  "backup-status": 2,
};

export const SCHEDULE: readonly ScheduleEntry[] = JOB_NAMES.map((job) => ({
  job,
  cron: cron[job],
  maxRuntimeMinutes: maxRuntimeMinutes[job],
}));

/** The schedule entry of one job. */
export function scheduleOf(job: JobName): ScheduleEntry {
  return SCHEDULE.find((e) => e.job === job)!;
}

/** A job's maximum run time in milliseconds. */
export function maxRuntimeMs(job: JobName): number {
  return maxRuntimeMinutes[job] * 60_000;
}

export function jobPath(job: JobName): `/api/cron/${JobName}` {
  return `/api/cron/${job}`;
}
