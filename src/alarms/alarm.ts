// The one alarm sink every job raises through. Channels: a structured JSON line on
// stderr (always), an error-tracking event (when SENTRY_DSN is set) and, for the
// alarms that need a person, an e-mail to the daily-report recipient. Personal data
// (Alarm.personal) reaches the first and the last, never the error tracker.

import { jsonLine } from "../format.ts";

export type AlarmType =
  | "audit-chain-broken"
  | "audit-retention-held"
  | "backup-failure"
  | "mail-failure"
  | "backup-missing"
  | "clock-ahead"
  | "job-missed"
  | "job-interrupted"
  | "job-hung"
  | "job-overlap"
  | "db-integrity"
  | "login-bruteforce"
  | "storage-unwritable"
  | "internal-error";

export interface Alarm {
  type: AlarmType;
  /** One Dutch sentence an operator can act on. */
  message: string;
  /** Facts for the event; never a secret, never personal data (that is `personal`'s). */
  context?: Record<string, unknown>;
  /**
   * Personal data the operator needs to act: account names and IP addresses (an attacker
   * types the account names, mostly e-mail addresses), recipient addresses, a mail
   * server's answer that may repeat them. It goes to the operator's own channels, the
   * stderr line and the alarm e-mail (forOperator), and never to the error tracker, a
   * third party that keeps it beyond the service's retention: that event has `message`
   * and `context` only, so they say enough without it (the counts, the window).
   * `message` is appended to the alarm's message, `context` joins its context.
   */
  personal?: { message?: string; context?: Record<string, unknown> };
  /**
   * The condition this alarm reports, for the e-mail channel's memory
   * (src/alarms/mail-channel.ts): a check that runs hourly raises it every run while the
   * condition lasts, and the operator is to get one mail when it starts, a reminder a day,
   * and one when it changes. `about` names the condition; `state` what it is now (the
   * newest backup and its reden, the rows counted): a new state is mailed at once. Two
   * alarm types may report one condition (ALARM_CONDITIONS.backup). Absent: every raise is
   * mailed. The stderr line and the error-tracking event are per raise either way. A check
   * that finds the condition gone calls AlarmSink.settled(about), so that its return, in
   * the same state too, is mailed again.
   */
  condition?: AlarmCondition;
}

export interface AlarmCondition {
  about: string;
  state: string;
}

/** The conditions several raisers share, so that they name them alike. */
const BACKUP_ABOUT = "backup";

export const ALARM_CONDITIONS = {
  /** ALARM_CONDITIONS.backup's `about`, for settled(). */
  backupAbout: BACKUP_ABOUT,
  /**
   * The host backup's state as backup-controle finds it: `reden` and the newest report
   * that counts (and one dated ahead). backup-status's backup-failure is the same
   * condition as backup-controle's "mislukt" about the same report: mailed once.
   */
  backup: (reden: string, ontvangen: string | null, toekomst: string | null = null): AlarmCondition => ({
    about: BACKUP_ABOUT,
    state: [reden, ontvangen ?? "-", ...(toekomst ? [toekomst] : [])].join(" "),
  }),
};

export interface AlarmSink {
  raise(alarm: Alarm): Promise<void>;
  /**
   * The check that raises the condition `about` (Alarm.condition) found it gone: the
   * channels forget it, so that it is mailed when it comes back, in the same state too
   * (a forged row deleted and forged again). Optional: sinks without memory (tests) need
   * none. Never rejects (a channel that fails is logged).
   */
  settled?(about: string): Promise<void>;
  /**
   * Alarms a channel did not deliver since the process started (it threw: refused,
   * unreachable, no answer in time), per channel name; read by /metrics. Absent on
   * sinks without channels of their own (tests).
   */
  readonly undelivered?: Readonly<Record<string, number>>;
  /**
   * Writes now the counts of repeated alarms held back (src/alarms/sink.ts), whose
   * windows would end after the process: at shutdown. Optional, as `undelivered`.
   */
  flushHeld?(): void;
}

/**
 * The alarm as the operator's own channels show it (the stderr line, the e-mail): its
 * personal part joined in. The error-tracking channel (src/alarms/sentry.ts) reads
 * `message` and `context` alone.
 */
export function forOperator(alarm: Alarm): { message: string; context?: Record<string, unknown> } {
  const { personal } = alarm;
  if (!personal) return { message: alarm.message, context: alarm.context };
  return {
    message: personal.message ? `${alarm.message} ${personal.message}` : alarm.message,
    context: alarm.context || personal.context ? { ...alarm.context, ...personal.context } : undefined,
  };
}

/**
 * The longest alarm line on stderr. journald splits a line longer than its LineMax (48 KiB
 * by default) into several records, and the JSON of each no longer parses: a failed
 * backup's report (8,192 characters, control characters escaped six bytes each, in the
 * message and again in the context) made one of 104 KB.
 */
export const MAX_ALARM_LINE = 16 * 1024;

/**
 * Writes one JSON line per alarm, its personal part included; `write` defaults to stderr.
 * A line longer than MAX_ALARM_LINE is written with its message and its context (as JSON
 * text) cut short and `afgekapt: true`; the whole is where the alarm came from (the
 * backup report in the database, the e-mail).
 */
export function stderrAlarmLine(alarm: Alarm, now: Date, write: (line: string) => void = (l) => process.stderr.write(l)): void {
  const { message, context } = forOperator(alarm);
  const head = { time: now.toISOString(), level: "error", alarm: alarm.type };
  let line = jsonLine({ ...head, message, ...(context ? { context } : {}) });
  // At most six bytes a character (escaped, or in UTF-8): 1,000 + 1,500 of them stay under the bound.
  if (Buffer.byteLength(line) > MAX_ALARM_LINE) line = jsonLine({ ...head, message: message.slice(0, 1000), afgekapt: true, ...(context ? { context: jsonLine(context).slice(0, 1500) } : {}) });
  write(line + "\n");
}
