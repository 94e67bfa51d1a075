// Structured log lines on stdout (info) and stderr (warnings, errors). Callers pass
// facts, never the secret: config is logged through redactedConfig().
import { DrizzleQueryError } from "drizzle-orm/errors";
import { jsonLine } from "./format.ts";

type Level = "info" | "warn" | "error";

export function log(level: Level, message: string, fields: Record<string, unknown> = {}): void {
  const line = jsonLine({ time: new Date().toISOString(), level, message, ...fields }) + "\n";
  if (level === "info") process.stdout.write(line);
  else process.stderr.write(line);
}

/** Runs `run` once after `ms` without keeping the process alive; returns what cancels it. */
export type Schedule = (run: () => void, ms: number) => () => void;

/** The Schedule the service runs with: an unref'd setTimeout. */
export const unrefTimeout: Schedule = (run, ms) => {
  const timer = setTimeout(run, ms);
  timer.unref();
  return () => clearTimeout(timer);
};

export interface RepeatGateOptions<T> {
  /**
   * Writes the count of repeats of `key` held back (`held`, at least 1; `last` is what the
   * last of them passed) when its window ends without another let through, or when the
   * key is forgotten (maxKeys). An error it throws is dropped: there is nowhere to write it.
   */
  heldAtEnd(held: number, last: T, key: string): void;
  /** At most this many keys are remembered (the oldest forgotten first); 256 by default. */
  maxKeys?: number;
  /** The timer for a window's end; unrefTimeout by default (tests drive their own). */
  schedule?: Schedule;
}

/**
 * Per key, whether a repeat within `everyMs` of the last one let through is held back:
 * null when held, else how many were held since that one. For what would repeat with
 * every request or scrape while a fault lasts (limitedLog, and the alarm sink's
 * per-request alarms): journald drops a service's lines past its rate limit, and the
 * dropped ones would be the alarms. A clock put back lets the next one through. When the
 * fault stops, no next one comes to carry the count: a timer armed at the first repeat
 * held (`schedule`, unref'd: it keeps no process alive) hands it to `heldAtEnd` at the
 * window's end, and the key starts afresh. At most `maxKeys` keys are remembered, whatever
 * the keys say; a key forgotten hands its count over too, and `flush` hands over every
 * count at once (a process that stops).
 */
export function repeatGate<T>(everyMs: number, clock: () => number, o: RepeatGateOptions<T>) {
  const maxKeys = o.maxKeys ?? 256;
  const schedule = o.schedule ?? unrefTimeout;
  interface Window {
    at: number;
    held: number;
    last?: T;
    cancel?: () => void;
  }
  const windows = new Map<string, Window>();
  /** Ends `w`, the window of `key`: its timer cancelled, and its count handed over when `handOver` and any was held. */
  const end = (key: string, w: Window, handOver: boolean) => {
    w.cancel?.();
    windows.delete(key);
    if (!handOver || w.held === 0) return;
    try {
      o.heldAtEnd(w.held, w.last as T, key);
    } catch {
      // stderr closed: nowhere to write the count
    }
  };
  const pass = (key: string, value: T): { held: number } | null => {
    const now = clock();
    const seen = windows.get(key);
    if (seen && now >= seen.at && now - seen.at < everyMs) {
      seen.held++;
      seen.last = value;
      seen.cancel ??= schedule(() => {
        // Only when it is still this window (not let through or forgotten since).
        if (windows.get(key) === seen) end(key, seen, true);
      }, seen.at + everyMs - now);
      return null;
    }
    // This one goes out with the count.
    if (seen) end(key, seen, false);
    if (windows.size >= maxKeys) {
      const [oldest, w] = windows.entries().next().value!;
      end(oldest, w, true);
    }
    windows.set(key, { at: now, held: 0 });
    return { held: seen?.held ?? 0 };
  };
  /** Ends every window now, each count held handed over and every timer cancelled: at shutdown, when no window's end will come. */
  const flush = (): void => {
    for (const [key, w] of [...windows]) end(key, w, true);
  };
  return Object.assign(pass, { flush });
}

/**
 * A log line written at most once per `everyMs` per message (repeatGate), for a warning
 * that would repeat with every request or scrape while a fault lasts (an unreadable
 * database under a Prometheus that scrapes every few seconds, or a local process that
 * scrapes in a loop). The next line that is written says how many were held back
 * (`herhaaldSindsVorige`); when none comes before the interval ends, one line at its end
 * does (with the last held one's fields: it stands for them, not one more).
 */
export function limitedLog(everyMs: number, clock: () => number = Date.now, schedule: Schedule = unrefTimeout) {
  const gate = repeatGate<{ level: Level; fields: Record<string, unknown> }>(everyMs, clock, {
    schedule,
    heldAtEnd: (held, { level, fields }, message) => log(level, message, { ...fields, herhaaldSindsVorige: held }),
  });
  return (level: Level, message: string, fields: Record<string, unknown> = {}): void => {
    const passed = gate(message, { level, fields });
    if (passed === null) return;
    log(level, message, passed.held > 0 ? { ...fields, herhaaldSindsVorige: passed.held } : fields);
  };
}

/**
 * An error as logs, alarms and job_runs show it, bounded. Drizzle's query error spells
 * out the statement's parameters (e-mail addresses, account names, audit details), which
 * must not travel to the error tracker: it is shown as its cause and the statement only.
 * Personal data an alarm needs goes in its `personal` part (src/alarms/alarm.ts).
 */
export function errorText(e: unknown): string {
  if (e instanceof DrizzleQueryError) return errorText(`${e.cause instanceof Error ? `${e.cause.name}: ${e.cause.message}` : "query failed"} (statement: ${e.query.slice(0, 300)})`);
  const msg = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
  return msg.length > 2000 ? msg.slice(0, 1999) + "…" : msg;
}
