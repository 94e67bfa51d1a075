// Structured log lines on stdout (info) and stderr (warnings, errors). Callers pass
// facts, never the secret: config is logged through redactedConfig().
type Level = "info" | "warn" | "error";

export function log(level: Level, message: string, fields: Record<string, unknown> = {}): void {
  const line = JSON.stringify({ time: new Date().toISOString(), level, message, ...fields }) + "\n";
  if (level === "info") process.stdout.write(line);
  else process.stderr.write(line);
}
