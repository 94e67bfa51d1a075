// The one schedule table: every job's cron expression (five fields, UTC) and its path
// (jobPath). The crontab in ops/ is generated from it and taken-controle reads it;
// the arithmetic on it (when a job was due) is src/schedule-due.ts.

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

export const SCHEDULE: readonly ScheduleEntry[] = JOB_NAMES.map((job) => ({
  job,
  cron: cron[job],
}));

export function jobPath(job: JobName): `/api/cron/${JobName}` {
  return `/api/cron/${job}`;
}
