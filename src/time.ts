// Durations in milliseconds, defined once for the whole code base.

/** One day of 24 hours (retention days, the daily report's last 24 hours, ISO weeks), in milliseconds. */
export const DAY_MS = 24 * 3600 * 1000;
