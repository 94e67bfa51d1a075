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

/**
 * Whether a date-time text (`2026-02-28T23:59:59…`, its date and time of day read from
 * its start) names a moment that exists: a day the month has, an hour up to 23, minutes
 * and seconds up to 59. Date would read 2026-02-30 as 2026-03-02, and a shape check lets
 * 2026-13-45T25:61:61 through. The one rule for the write API's tijdstip (storedMoment,
 * src/ingest/audit.ts) and the library appenders' createdAt and tijdstip (src/audit/chain.ts).
 */
export function isExistingMoment(dateTime: string): boolean {
  if (!DATE_TIME_START.test(dateTime)) return false;
  // By digits, not Date: it runs for every entry appended (0.03 against 0.3 µs), and Date
  // rolls 2026-02-30 over instead of refusing it. The Gregorian calendar, as Date's.
  const n = (at: number, digits: number) => {
    let v = 0;
    for (let i = at; i < at + digits; i++) v = v * 10 + dateTime.charCodeAt(i) - 48;
    return v;
  };
  const [y, mo, d] = [n(0, 4), n(5, 2), n(8, 2)];
  if (mo < 1 || mo > 12 || d < 1) return false;
  const leap = y % 4 === 0 && (y % 100 !== 0 || y % 400 === 0);
  return d <= (mo === 2 && leap ? 29 : MONTH_DAYS[mo - 1]!) && n(11, 2) <= 23 && n(14, 2) <= 59 && n(17, 2) <= 59;
}

const DATE_TIME_START = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}/;
const MONTH_DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/**
 * How far after `now` a run's start may lie and still count as a start: for "done since
 * the scheduled time" (doneSince), a job's last run (lastRun, lastRunPg) and "started
 * since" (dueStateOf), and the newest verification run (verificationSince); and a
 * backup report's arrival (receivedBy, src/jobs/backup-controle.ts: one report dated a
 * year ahead would otherwise stay the newest, hiding every later one, failed or missing,
 * from backup-controle, /metrics and the daily report). Two instances' clocks differ by
 * seconds, not more. A run dated later was recorded while the
 * host clock ran ahead (an RTC wrong at boot, a VM restored with a skewed clock, a typo in
 * `date -s`): after the clock is put right it would otherwise count as done until real
 * time catches up with it, and the job would not run (answered 204) nor be missed. Such a
 * run is reported instead (taken-controle: `gemist`, with `toekomstigeStart`), as is such
 * a report (backup-controle: `toekomst`).
 */
export const FUTURE_START_MARGIN_MS = 5 * 60_000;

/** The latest `gestart` that counts as a start at `now` (FUTURE_START_MARGIN_MS), as ISO text, compared as the database compares it. */
export const latestCountingStart = (now: Date): string => new Date(now.getTime() + FUTURE_START_MARGIN_MS).toISOString();

// This process's start on both clocks: the wall clock (which NTP, `date -s` or a
// hypervisor may step) and the monotonic one (which never steps). Taken when this module
// is first loaded, at the process's start.
const wallAtStart = Date.now();
const monoAtStart = performance.now();

/**
 * How far this host's wall clock has been stepped since the process started, in
 * milliseconds: positive forward. The wall clock's advance minus the monotonic clock's.
 * NTP slews small drift (well under a second a day); a step of minutes is a clock put
 * wrong (a typo in `date -s`), or one put right that was wrong when the process started,
 * or time the monotonic clock did not count (a suspend, a paused VM).
 */
export const wallClockStepMs = (): number => Date.now() - wallAtStart - (performance.now() - monoAtStart);

/** A forward step of the wall clock (wallClockStepMs) above which the retention jobs delete nothing (src/jobs/retention-clock.ts). */
export const CLOCK_STEP_LIMIT_MS = 10 * 60_000;
