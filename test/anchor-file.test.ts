// The anchor file's append (src/audit/anchor-file.ts appendLines): a write that fails
// part way leaves nothing behind, and a line torn by a crash never turns into a record.
import { afterEach, expect, test } from "bun:test";
import { readFileSync, statSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { appendLines, readLines, TORN_LINE_END } from "../src/audit/anchor-file.ts";
import { anchorLineText, type AnchorLine } from "../src/audit/records.ts";
import { tempDir } from "./helpers.ts";

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0)) c();
});

function file(): string {
  const { dir, cleanup } = tempDir();
  cleanups.push(cleanup);
  return join(dir, "ankers.jsonl");
}

const line = (tenantId: number, note = `nachtwacht.test/audit/tenant/${tenantId}\n${tenantId}\nAAAA\n\n\u2014 sig ${"x".repeat(200)}\n`): AnchorLine => ({ soort: "checkpoint", tenantId, note });
const kinds = (path: string) => [...readLines(path)].map((l) => l.parsed.kind);

test("a whole record torn off just before its newline stays unreadable after the next append, never a record the database lacks", () => {
  const path = file();
  appendLines(path, [line(1), line(2)]);
  // The crash: the third line's write reached the disk but its newline did not.
  const whole = readFileSync(path).length;
  appendLines(path, [line(3)]);
  truncateSync(path, statSync(path).size - 1);
  expect(kinds(path)).toEqual(["record", "record", "onleesbaar"]);

  const positions = appendLines(path, [line(4)]);
  const lines = [...readLines(path)];
  expect(lines.map((l) => l.parsed.kind)).toEqual(["record", "record", "onleesbaar", "record"]);
  expect(lines[2]!.text).toBe(anchorLineText(line(3)) + TORN_LINE_END.slice(0, -1));
  expect(lines[3]!.positie).toBe(positions[0]!);
  expect(lines[3]!.parsed).toEqual({ kind: "record", line: line(4) });
  // Everything before the torn line is as it was: append-only.
  expect(lines[2]!.positie).toBe(whole);
});

test("a torn line of any length (cut anywhere in a record) is closed unreadable", () => {
  const text = anchorLineText(line(7));
  for (const cut of [1, 2, Math.floor(text.length / 2), text.length - 2, text.length - 1, text.length]) {
    const path = file();
    appendLines(path, [line(1)]);
    writeFileSync(path, text.slice(0, cut), { flag: "a" });
    appendLines(path, [line(2)]);
    expect({ cut, kinds: kinds(path) }).toEqual({ cut, kinds: ["record", "onleesbaar", "record"] });
  }
});

test("a write that fails part way (the file size limit: EFBIG after a short write) is cut back off: the file is as before", () => {
  const path = file();
  appendLines(path, [line(1), line(2), line(3)]);
  const before = readFileSync(path);
  const many = Array.from({ length: 40 }, (_, i) => line(100 + i));
  // A child under `ulimit -f`: its writes past the limit fail (SIGXFSZ ignored, so EFBIG),
  // the first one short, as on a disk that fills up during the write.
  const limitBlocks = Math.ceil((before.length + 2048) / 1024);
  const script = `const { appendLines } = await import(${JSON.stringify(join(import.meta.dir, "../src/audit/anchor-file.ts"))});
try { appendLines(process.env.ANCHOR_PATH, JSON.parse(process.env.ANCHOR_LINES)); console.log("appended"); } catch (e) { console.log("failed", e.code ?? e.message); }`;
  const r = Bun.spawnSync(["bash", "-c", `trap '' XFSZ; ulimit -f ${limitBlocks}; exec "$0" -e "$1"`, process.execPath, script], {
    env: { ...process.env, ANCHOR_PATH: path, ANCHOR_LINES: JSON.stringify(many) },
    stdout: "pipe",
    stderr: "pipe",
  });
  expect(r.stdout.toString().trim()).toBe("failed EFBIG");
  expect(readFileSync(path).equals(before)).toBe(true);
  // and the file takes the next append as if nothing happened
  appendLines(path, [line(4)]);
  expect(kinds(path)).toEqual(["record", "record", "record", "record"]);
});
