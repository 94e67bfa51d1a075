// Durations in milliseconds, defined once for the whole code base.

/** One day of 24 hours (retention days, the daily report's last 24 hours, ISO weeks), in milliseconds. */
export const DAY_MS = 24 * 3600 * 1000;

/**
 * The retention cut-off: `now` − `days` × 24 h, as the ISO text the tables store (so `<`
 * is a string compare). The one rule for both retention jobs and for checking a signed
 * retention record.
 */
export function retentionBoundary(now: Date, days: number): string {
  return new Date(now.getTime() - days * DAY_MS).toISOString();
}
