// The log lines themselves (src/logger.ts): a warning repeated by every scrape or request
// while a fault lasts is written once per interval, the next saying how many were held.
import { expect, spyOn, test } from "bun:test";
import { limitedLog, repeatGate, type Schedule } from "../src/logger.ts";
import { MAX_ALARM_LINE, stderrAlarmLine } from "../src/alarms/alarm.ts";

/** A Schedule the test drives: each timer asked for, fired by hand (`run`), and whether it was cancelled. */
function manualTimers() {
  const timers: { run: () => void; ms: number; cancelled: boolean }[] = [];
  const schedule: Schedule = (run, ms) => {
    const timer = { run, ms, cancelled: false };
    timers.push(timer);
    return () => void (timer.cancelled = true);
  };
  return { timers, schedule };
}

/** Runs `f` with stderr's lines captured. */
function capturing(f: (lines: string[]) => void): void {
  const lines: string[] = [];
  const spy = spyOn(process.stderr, "write").mockImplementation(((chunk: unknown) => (lines.push(String(chunk)), true)) as typeof process.stderr.write);
  try {
    f(lines);
  } finally {
    spy.mockRestore();
  }
}

test("limitedLog: one line per message and interval; the next written says how many were held back; another message is its own", () => {
  const lines: string[] = [];
  const spy = spyOn(process.stderr, "write").mockImplementation(((chunk: unknown) => (lines.push(String(chunk)), true)) as typeof process.stderr.write);
  try {
    let now = 1_000_000;
    const { timers, schedule } = manualTimers();
    const warn = limitedLog(600_000, () => now, schedule);
    for (let i = 0; i < 2300; i++) warn("warn", "/metrics could not read the database", { code: "ERR_POSTGRES_CONNECTION_REFUSED" });
    warn("warn", "/metrics could not read the free space of the disks", { error: "EACCES" });
    expect(lines.map((l) => JSON.parse(l).message)).toEqual(["/metrics could not read the database", "/metrics could not read the free space of the disks"]);
    now += 599_999;
    warn("warn", "/metrics could not read the database", { code: "ERR_POSTGRES_CONNECTION_REFUSED" });
    expect(lines).toHaveLength(2);
    now += 1;
    warn("warn", "/metrics could not read the database", { code: "ERR_POSTGRES_CONNECTION_REFUSED" });
    expect(JSON.parse(lines[2]!)).toMatchObject({ level: "warn", message: "/metrics could not read the database", code: "ERR_POSTGRES_CONNECTION_REFUSED", herhaaldSindsVorige: 2300 });
    // The count went with that line: the window's timer was cancelled, and firing it anyway writes nothing.
    expect(timers.map((t) => [t.ms, t.cancelled])).toEqual([[600_000, true]]);
    timers[0]!.run();
    expect(lines).toHaveLength(3);
    // A clock put back writes at once.
    now -= 3_600_000;
    warn("warn", "/metrics could not read the database", {});
    expect(lines).toHaveLength(4);
    expect(JSON.parse(lines[3]!).herhaaldSindsVorige).toBeUndefined();
  } finally {
    spy.mockRestore();
  }
});

test("limitedLog: when the fault stops, the count held back is written at the window's end, once; nothing when nothing was held", () => {
  capturing((lines) => {
    let now = 1_000_000;
    const { timers, schedule } = manualTimers();
    const warn = limitedLog(600_000, () => now, schedule);
    // Once, no repeat: no timer, no second line.
    warn("warn", "/metrics could not read the free space of the disks", { error: "EACCES" });
    expect(timers).toEqual([]);
    // 40 repeats held back, then the fault stops: no next line would ever carry the count.
    warn("warn", "/metrics could not read the database", { code: "ERR_POSTGRES_CONNECTION_REFUSED" });
    now += 1000;
    for (let i = 0; i < 40; i++) warn("warn", "/metrics could not read the database", { code: i < 39 ? "ERR_POSTGRES_CONNECTION_REFUSED" : "08006" });
    expect(lines).toHaveLength(2);
    // One timer, armed at the first repeat held, for the rest of the window.
    expect(timers.map((t) => [t.ms, t.cancelled])).toEqual([[599_000, false]]);
    timers[0]!.run();
    expect(lines).toHaveLength(3);
    // The last held one's fields, and the count of all held: it stands for them.
    expect(JSON.parse(lines[2]!)).toMatchObject({ level: "warn", message: "/metrics could not read the database", code: "08006", herhaaldSindsVorige: 40 });
    // Reset: fired again nothing; the next occurrence is a line of its own without a count.
    timers[0]!.run();
    expect(lines).toHaveLength(3);
    now += 600_000;
    warn("warn", "/metrics could not read the database", {});
    expect(lines).toHaveLength(4);
    expect(JSON.parse(lines[3]!).herhaaldSindsVorige).toBeUndefined();
    expect(timers).toHaveLength(1);
  });
});

test("repeatGate: a key forgotten for the bound (maxKeys) hands its held count over at once, its timer cancelled", () => {
  const { timers, schedule } = manualTimers();
  const handed: [string, number, string][] = [];
  const gate = repeatGate<string>(60_000, () => 0, { maxKeys: 2, schedule, heldAtEnd: (held, last, key) => handed.push([key, held, last]) });
  expect(gate("a", "a1")).toEqual({ held: 0 });
  expect(gate("a", "a2")).toBeNull();
  expect(gate("a", "a3")).toBeNull();
  expect(gate("b", "b1")).toEqual({ held: 0 });
  expect(handed).toEqual([]);
  // A third key: "a", the oldest, is forgotten, and its count goes out now.
  expect(gate("c", "c1")).toEqual({ held: 0 });
  expect(handed).toEqual([["a", 2, "a3"]]);
  expect(timers.map((t) => t.cancelled)).toEqual([true]);
  timers[0]!.run();
  expect(handed).toHaveLength(1);
});

test("the window's timer keeps no process alive: a repeat held under an hour's window, and the process exits at once", () => {
  const script = `import { limitedLog } from ${JSON.stringify(`${import.meta.dir}/../src/logger.ts`)};
const warn = limitedLog(3_600_000);
warn("warn", "x"); warn("warn", "x");`;
  const r = Bun.spawnSync([process.execPath, "-e", script], { stdout: "pipe", stderr: "pipe", timeout: 20_000 });
  expect(r.exitCode).toBe(0);
  expect(r.signalCode ?? null).toBeNull();
  expect(r.stderr.toString().split("\n").filter(Boolean).map((l) => JSON.parse(l).message)).toEqual(["x"]);
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
