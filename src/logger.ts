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

/**
 * Per key, whether a repeat within `everyMs` of the last one let through is held back:
 * null when held, else how many were held since that one. For what would repeat with
 * every request or scrape while a fault lasts (limitedLog, and the alarm sink's
 * per-request alarms): journald drops a service's lines past its rate limit, and the
 * dropped ones would be the alarms. A clock put back lets the next one through. At most
 * `maxKeys` keys are remembered (the oldest forgotten first), whatever the keys say.
 */
export function repeatGate(everyMs: number, clock: () => number, maxKeys = 256) {
  const last = new Map<string, { at: number; held: number }>();
  return (key: string): { held: number } | null => {
    const now = clock();
    const seen = last.get(key);
    if (seen && now >= seen.at && now - seen.at < everyMs) {
      seen.held++;
      return null;
    }
    last.delete(key);
    if (last.size >= maxKeys) last.delete(last.keys().next().value!);
    last.set(key, { at: now, held: 0 });
    return { held: seen?.held ?? 0 };
  };
}

/**
 * A log line written at most once per `everyMs` per message (repeatGate), for a warning
 * that would repeat with every request or scrape while a fault lasts (an unreadable
 * database under a Prometheus that scrapes every few seconds, or a local process that
 * scrapes in a loop). The next line that is written says how many were held back
 * (`herhaaldSindsVorige`).
 */
export function limitedLog(everyMs: number, clock: () => number = Date.now) {
  const gate = repeatGate(everyMs, clock);
  return (level: Level, message: string, fields: Record<string, unknown> = {}): void => {
    const passed = gate(message);
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
