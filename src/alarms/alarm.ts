// The one alarm sink every job raises through. Channels: a structured JSON line on
// stderr (always), an error-tracking event (when SENTRY_DSN is set) and, for the
// alarms that need a person, an e-mail to the daily-report recipient.

import { jsonLine } from "../format.ts";

export type AlarmType =
  | "audit-chain-broken"
  | "audit-retention-held"
  | "backup-failure"
  | "mail-failure"
  | "backup-missing"
  | "job-missed"
  | "job-interrupted"
  | "job-hung"
  | "job-overlap"
  | "db-integrity"
  | "login-bruteforce"
  | "internal-error";

export interface Alarm {
  type: AlarmType;
  /** One Dutch sentence an operator can act on. */
  message: string;
  /** Facts for the event; never a secret. */
  context?: Record<string, unknown>;
}

export interface AlarmSink {
  raise(alarm: Alarm): Promise<void>;
  /**
   * Alarms a channel did not deliver since the process started (it threw: refused,
   * unreachable, no answer in time), per channel name; read by /metrics. Absent on
   * sinks without channels of their own (tests).
   */
  readonly undelivered?: Readonly<Record<string, number>>;
}

/** Writes one JSON line per alarm; `write` defaults to stderr. */
export function stderrAlarmLine(alarm: Alarm, now: Date, write: (line: string) => void = (l) => process.stderr.write(l)): void {
  write(
    jsonLine({ time: now.toISOString(), level: "error", alarm: alarm.type, message: alarm.message, ...(alarm.context ? { context: alarm.context } : {}) }) +
      "\n",
  );
}
