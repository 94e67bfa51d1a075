// The log lines themselves (src/logger.ts): a warning repeated by every scrape or request
// while a fault lasts is written once per interval, the next saying how many were held.
import { expect, spyOn, test } from "bun:test";
import { limitedLog } from "../src/logger.ts";
import { MAX_ALARM_LINE, stderrAlarmLine } from "../src/alarms/alarm.ts";

test("limitedLog: one line per message and interval; the next written says how many were held back; another message is its own", () => {
  const lines: string[] = [];
  const spy = spyOn(process.stderr, "write").mockImplementation(((chunk: unknown) => (lines.push(String(chunk)), true)) as typeof process.stderr.write);
  try {
    let now = 1_000_000;
    const warn = limitedLog(600_000, () => now);
    for (let i = 0; i < 2300; i++) warn("warn", "/metrics could not read the database", { code: "ERR_POSTGRES_CONNECTION_REFUSED" });
    warn("warn", "/metrics could not read the free space of the disks", { error: "EACCES" });
    expect(lines.map((l) => JSON.parse(l).message)).toEqual(["/metrics could not read the database", "/metrics could not read the free space of the disks"]);
    now += 599_999;
    warn("warn", "/metrics could not read the database", { code: "ERR_POSTGRES_CONNECTION_REFUSED" });
    expect(lines).toHaveLength(2);
    now += 1;
    warn("warn", "/metrics could not read the database", { code: "ERR_POSTGRES_CONNECTION_REFUSED" });
    expect(JSON.parse(lines[2]!)).toMatchObject({ level: "warn", message: "/metrics could not read the database", code: "ERR_POSTGRES_CONNECTION_REFUSED", herhaaldSindsVorige: 2300 });
    // A clock put back writes at once.
    now -= 3_600_000;
    warn("warn", "/metrics could not read the database", {});
    expect(lines).toHaveLength(4);
    expect(JSON.parse(lines[3]!).herhaaldSindsVorige).toBeUndefined();
  } finally {
    spy.mockRestore();
  }
});

test("an alarm line stays under MAX_ALARM_LINE (journald splits longer ones): a failed backup's report of 8,192 control characters is cut short, marked afgekapt, and still one JSON line", () => {
  const lines: string[] = [];
  const report = "\u0001".repeat(8192);
  stderrAlarmLine({ type: "backup-failure", message: report, context: { foutmelding: report, bestandsnaam: "\u0002".repeat(1024) } }, new Date("2026-07-23T12:00:00Z"), (l) => lines.push(l));
  expect(lines).toHaveLength(1);
  expect(Buffer.byteLength(lines[0]!)).toBeLessThan(MAX_ALARM_LINE);
  expect(lines[0]!.endsWith("\n")).toBe(true);
  const parsed = JSON.parse(lines[0]!);
  expect(parsed).toMatchObject({ alarm: "backup-failure", afgekapt: true });
  expect(parsed.message).toBe("\u0001".repeat(1000));
  // A short alarm is written whole.
  stderrAlarmLine({ type: "backup-failure", message: "schijf vol", context: { exitCode: 1 } }, new Date("2026-07-23T12:00:00Z"), (l) => lines.push(l));
  expect(JSON.parse(lines[1]!)).toEqual({ time: "2026-07-23T12:00:00.000Z", level: "error", alarm: "backup-failure", message: "schijf vol", context: { exitCode: 1 } });
});
