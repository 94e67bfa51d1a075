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
 * A log line written at most once per `everyMs` per key, for a warning that would repeat
 * with every request or scrape while a fault lasts (an unreadable database under a
 * Prometheus that scrapes every few seconds, or a local process that scrapes in a loop):
 * journald drops a service's lines past its rate limit, and the dropped ones would be the
 * alarms. The next line that is written says how many were held back (`herhaaldSindsVorige`).
 * Keys are few and fixed (the message), so the map stays small.
 */
export function limitedLog(everyMs: number, clock: () => number = Date.now) {
  const last = new Map<string, { at: number; held: number }>();
  return (level: Level, message: string, fields: Record<string, unknown> = {}): void => {
    const now = clock();
    const seen = last.get(message);
    if (seen && now >= seen.at && now - seen.at < everyMs) {
      seen.held++;
      return;
    }
    last.set(message, { at: now, held: 0 });
    log(level, message, seen && seen.held > 0 ? { ...fields, herhaaldSindsVorige: seen.held } : fields);
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
