// Structured log lines on stdout (info) and stderr (warnings, errors). Callers pass
// facts, never the secret: config is logged through redactedConfig().
import { jsonLine } from "./format.ts";

type Level = "info" | "warn" | "error";

export function log(level: Level, message: string, fields: Record<string, unknown> = {}): void {
  const line = jsonLine({ time: new Date().toISOString(), level, message, ...fields }) + "\n";
  if (level === "info") process.stdout.write(line);
  else process.stderr.write(line);
}
