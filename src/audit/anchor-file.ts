// AUDIT_ANKER_BESTAND: the append-only file of every signed record, in nachtwacht's own
// state directory where the host application cannot write. It is the authority; the
// table audit_anchor_log is its copy in the database, one row per line, keyed by the
// line's byte offset (`positie`).
//
// Appending happens inside the caller's write transaction (BEGIN IMMEDIATE), before its
// COMMIT: SQLite's write lock then also orders the appenders of every process, and a
// crash between the fsync and the COMMIT leaves lines in the file that the database
// lacks (the "tail", which verification accepts for at most one run and the next run
// copies into the database: syncTail). The reverse order could lose a record that the
// database already relies on.
import type { Database } from "bun:sqlite";
import { closeSync, existsSync, fstatSync, fsyncSync, ftruncateSync, mkdirSync, openSync, readSync, writeSync } from "node:fs";
import { dirname } from "node:path";
import { fsyncPath } from "../durable-file.ts";
import { anchorLineText, parseAnchorLineText, type AnchorLine, type ParsedLine } from "./records.ts";

export interface StoredLine extends AnchorLine {
  positie: number;
  grootte: number;
  bereik: string | null;
}

/**
 * What closes a torn last line before the next append. A write torn just before its
 * newline leaves a whole record without one: closed with only "\n" it would become a
 * record that no row refers to, in the middle of the file, and every later check would
 * call the database restored. A record line ends in "}", so the line cannot parse
 * with this after it.
 */
export const TORN_LINE_END = " (afgebroken)\n";

/**
 * Appends lines and forces them to disk; returns each line's byte offset. A file that
 * does not end in a newline (a write torn by a crash) is closed with TORN_LINE_END
 * first, so the torn line stays an unreadable line of its own. A write or fsync that
 * fails is cut back off the file (as far as the file system lets it), so the caller's
 * rolled-back transaction leaves no line behind.
 */
export function appendLines(path: string, lines: AnchorLine[]): number[] {
  const dir = dirname(path);
  mkdirSync(dir, { recursive: true });
  const isNew = !existsSync(path);
  const fd = openSync(path, "a", 0o640);
  const positions: number[] = [];
  try {
    const start = fstatSync(fd).size;
    let pos = start;
    let prefix = "";
    if (pos > 0) {
      const last = Buffer.alloc(1);
      const rfd = openSync(path, "r");
      try {
        readSync(rfd, last, 0, 1, pos - 1);
      } finally {
        closeSync(rfd);
      }
      if (last[0] !== 0x0a) prefix = TORN_LINE_END;
    }
    const parts: Buffer[] = [Buffer.from(prefix, "utf8")];
    pos += parts[0]!.length;
    for (const l of lines) {
      const b = Buffer.from(anchorLineText(l) + "\n", "utf8");
      positions.push(pos);
      pos += b.length;
      parts.push(b);
    }
    const buf = Buffer.concat(parts);
    try {
      let off = 0;
      while (off < buf.length) off += writeSync(fd, buf, off, buf.length - off);
      fsyncSync(fd);
    } catch (e) {
      try {
        ftruncateSync(fd, start);
        fsyncSync(fd);
      } catch {
        // Left for the next append: TORN_LINE_END closes what stayed.
      }
      throw e;
    }
  } finally {
    closeSync(fd);
  }
  // The directory entry too, so a new file survives a power loss.
  if (isNew) fsyncPath(dir);
  return positions;
}

export interface FileLine {
  positie: number;
  text: string;
  parsed: ParsedLine;
}

/**
 * The file's lines from byte `from` on, read in chunks (synchronously, so a caller may
 * hold a transaction on the shared connection without yielding); a last line without
 * newline is yielded too, as unreadable. Nothing when the file does not exist.
 */
export function* readLines(path: string, from = 0): Generator<FileLine> {
  if (!existsSync(path)) return;
  const fd = openSync(path, "r");
  try {
    const chunk = Buffer.alloc(1 << 20);
    let pending: Buffer = Buffer.alloc(0);
    let pos = from;
    let readAt = from;
    for (;;) {
      const n = readSync(fd, chunk, 0, chunk.length, readAt);
      if (n === 0) break;
      readAt += n;
      const buf = pending.length > 0 ? Buffer.concat([pending, chunk.subarray(0, n)]) : chunk.subarray(0, n);
      let start = 0;
      let nl: number;
      while ((nl = buf.indexOf(0x0a, start)) >= 0) {
        const text = buf.toString("utf8", start, nl);
        yield { positie: pos, text, parsed: parseAnchorLineText(text) };
        pos += nl - start + 1;
        start = nl + 1;
      }
      pending = Buffer.from(buf.subarray(start));
    }
    if (pending.length > 0) yield { positie: pos, text: pending.toString("utf8"), parsed: { kind: "onleesbaar" } };
  } finally {
    closeSync(fd);
  }
}

/**
 * The text of the file's line that starts at byte `positie` (where a row says its line
 * stands), or null when there is none: a positie past the end, or not a byte offset.
 * A positie inside a line gives that line's rest, which matches no row's line.
 */
export function lineAt(path: string, positie: number): string | null {
  if (!Number.isSafeInteger(positie) || positie < 0) return null;
  for (const fl of readLines(path, positie)) return fl.text;
  return null;
}

export function fileSize(path: string): number | null {
  return existsSync(path) ? Bun.file(path).size : null;
}

/** Inserts file lines into audit_anchor_log (inside the caller's transaction). */
export function insertRows(sqlite: Database, rows: StoredLine[]): void {
  const insert = sqlite.query(
    "INSERT INTO audit_anchor_log (positie, soort, tenant_id, grootte, note, bereik) VALUES (?, ?, ?, ?, ?, ?)",
  );
  for (const r of rows) insert.run(r.positie, r.soort, r.tenantId, r.grootte, r.note, r.bereik);
}

/** The end of the last row the database holds: where the file's tail starts. */
export function databaseEnd(sqlite: Database): number {
  const row = sqlite.query("SELECT positie, soort, tenant_id AS tenantId, note FROM audit_anchor_log ORDER BY positie DESC LIMIT 1").get() as
    | (AnchorLine & { positie: number })
    | null;
  return endOf(row);
}

/** Where the line after a row starts in the file (0 without a row): databaseEnd's rule for any store. */
export function endOf(row: (AnchorLine & { positie: number }) | null): number {
  return row === null ? 0 : row.positie + Buffer.byteLength(anchorLineText(row), "utf8") + 1;
}
