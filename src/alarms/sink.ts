// The alarm sink the service runs with: always one JSON line on stderr, an
// error-tracking event when SENTRY_DSN is set, and any further channels (the e-mail
// channel joins from src/mail/). A channel that fails is logged and never stops the
// others, nor the job that raised the alarm; it is counted per channel for /metrics.
import { errorText, log, repeatGate, type Schedule } from "../logger.ts";
import { stderrAlarmLine, type Alarm, type AlarmSink, type AlarmType } from "./alarm.ts";
import { createSentryChannel, scrubSecrets } from "./sentry.ts";

/** One more way an alarm reaches someone. raise() may throw; the sink catches it. */
export interface AlarmChannel {
  /** For the log line when the channel fails, e.g. "e-mail". */
  name?: string;
  raise(alarm: Alarm): Promise<void>;
  /** The condition `about` is gone (AlarmSink.settled); for a channel that remembers conditions. May reject; the sink catches it. */
  settled?(about: string): Promise<void> | void;
}

export interface AlarmSinkOptions {
  sentryDsn: string | null;
  clock: () => Date;
  channels?: AlarmChannel[];
  /** Values scrubbed from every alarm before any channel sees it (the CRON_SECRET). */
  secrets?: string[];
  /** Longest wait for the error-tracking endpoint's answer; default 2000 ms. */
  sentryFlushTimeoutMs?: number;
  /** Where the JSON line goes; stderr by default. */
  writeLine?: (line: string) => void;
  /** The timer for the end of a repeat window (REPEAT_WINDOW_MS); an unref'd setTimeout by default. */
  schedule?: Schedule;
}

/**
 * The alarms raised per request while a fault lasts (src/app.ts onError): a full disk or
 * a database that is down fails every write-API call, and each raised its own stderr line
 * and error-tracking event — 2,000 a second under load, past journald's rate limit (whose
 * dropped lines were the other alarms) and through an error tracker's quota. A repeat with
 * the same type and message within REPEAT_WINDOW_MS of the one that went out is held back
 * and counted; the next that goes out says how many (context `herhaaldSindsVorige`). When
 * none goes out before the window ends (the fault stopped), the count would be lost: at
 * the window's end one stderr line of the last held alarm says it instead (the other
 * channels have had the alarm once; this line stands for the held ones, not one more).
 */
const PER_REQUEST_TYPES: ReadonlySet<AlarmType> = new Set(["internal-error", "storage-unwritable"]);
export const REPEAT_WINDOW_MS = 60_000;

export function createAlarmSink(o: AlarmSinkOptions): AlarmSink {
  const secrets = o.secrets ?? [];
  const channels: AlarmChannel[] = [];
  if (o.sentryDsn) {
    channels.push({ name: "sentry", ...createSentryChannel({ dsn: o.sentryDsn, secrets, flushTimeoutMs: o.sentryFlushTimeoutMs }) });
  }
  channels.push(...(o.channels ?? []));
  const nameOf = (i: number) => channels[i]!.name ?? `channel ${i}`;
  // Every channel's series from the start (at 0), so that increase() sees its first failure.
  const undelivered: Record<string, number> = Object.fromEntries(channels.map((_, i) => [nameOf(i), 0]));
  const counted = (alarm: Alarm, held: number): Alarm => (held > 0 ? { ...alarm, context: { ...alarm.context, herhaaldSindsVorige: held } } : alarm);
  // Per type and message of PER_REQUEST_TYPES (repeatGate, by the alarms' clock).
  const gate = repeatGate<Alarm>(REPEAT_WINDOW_MS, () => o.clock().getTime(), {
    schedule: o.schedule,
    heldAtEnd: (held, last) => stderrAlarmLine(scrubSecrets(counted(last, held), secrets), o.clock(), o.writeLine),
  });
  /** The alarm to deliver (with the count of those held before it), or null to hold it back. */
  const heldBack = (alarm: Alarm): Alarm | null => {
    if (!PER_REQUEST_TYPES.has(alarm.type)) return alarm;
    const passed = gate(`${alarm.type}\n${alarm.message}`, alarm);
    return passed === null ? null : counted(alarm, passed.held);
  };

  return {
    undelivered,
    flushHeld: () => gate.flush(),
    async settled(about) {
      const results = await Promise.allSettled(channels.map(async (c) => c.settled?.(about)));
      results.forEach((r, i) => {
        if (r.status === "rejected") {
          // The channel still remembers the condition: its return is mailed at its reminder, not at once.
          log("error", "alarm channel did not forget a condition that is gone", { channel: nameOf(i), about, error: scrubSecrets(errorText(r.reason), secrets) });
        }
      });
    },
    async raise(raised) {
      const raw = heldBack(raised);
      if (raw === null) return;
      const alarm = scrubSecrets(raw, secrets);
      try {
        stderrAlarmLine(alarm, o.clock(), o.writeLine);
      } catch {
        // stderr closed: the other channels still get the alarm
      }
      const results = await Promise.allSettled(channels.map((c) => c.raise(alarm)));
      results.forEach((r, i) => {
        if (r.status === "rejected") {
          const e = r.reason;
          const channel = nameOf(i);
          undelivered[channel] = (undelivered[channel] ?? 0) + 1;
          log("error", "alarm channel failed", {
            channel,
            alarm: alarm.type,
            error: scrubSecrets(e instanceof Error ? `${e.name}: ${e.message}` : String(e), secrets),
          });
        }
      });
    },
  };
}
