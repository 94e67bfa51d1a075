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
// database already relies on. A transaction that fails after its append without a crash
// (a COMMIT on a full disk, a dropped connection) takes its lines back (undoFailedAppend),
// so that two failing runs in a row do not leave two runs' tail: only a kill leaves one.
import type { Database } from "bun:sqlite";
import { closeSync, existsSync, fstatSync, fsyncSync, ftruncateSync, mkdirSync, openSync, readSync, writeSync } from "node:fs";
import { dirname } from "node:path";
import { fsyncPath } from "../durable-file.ts";
import { errorText, log } from "../logger.ts";
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
 * What one write transaction appended to the anchor file (appendLines records it), so
 * that the transaction's failure can take it back (undoFailedAppend).
 */
export class RunAppend {
  /** The file, its size before the transaction's first append and after its last; null while it appended nothing. */
  appended: { path: string; before: number; after: number } | null = null;
}

/**
 * Appends lines and forces them to disk; returns each line's byte offset. A file that
 * does not end in a newline (a write torn by a crash) is closed with TORN_LINE_END
 * first, so the torn line stays an unreadable line of its own. A write or fsync that
 * fails is cut back off the file (as far as the file system lets it), so the caller's
 * rolled-back transaction leaves no line behind. `run` learns what was appended (a
 * transaction's, appendingTransaction).
 */
export function appendLines(path: string, lines: AnchorLine[], run: RunAppend = new RunAppend()): number[] {
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
        cutBack(fd, start);
      } catch {
        // Left for the next append: TORN_LINE_END closes what stayed.
      }
      throw e;
    }
    run.appended = { path, before: run.appended?.before ?? start, after: start + buf.length };
  } finally {
    closeSync(fd);
  }
  // The directory entry too, so a new file survives a power loss.
  if (isNew) fsyncPath(dir);
  return positions;
}

/** Cuts the file back to `size` bytes and forces that to disk. */
function cutBack(fd: number, size: number): void {
  ftruncateSync(fd, size);
  fsyncSync(fd);
}

/**
 * After the transaction that appended `run` failed and rolled back (under the same
 * exclusion as the appenders again, in a new transaction): takes the run's lines back
 * off the file when the database knows nothing past where they start (`databaseEnd`)
 * and the file is still exactly as the run left it. Otherwise (the run's rows did
 * commit, or someone appended since) the lines stay: a tail the next run copies in.
 * Whether it cut.
 */
export function takeBack(run: RunAppend, databaseEnd: number): boolean {
  const a = run.appended;
  if (a === null || databaseEnd > a.before || fileSize(a.path) !== a.after) return false;
  const fd = openSync(a.path, "r+");
  try {
    cutBack(fd, a.before);
  } finally {
    closeSync(fd);
  }
  return true;
}

/**
 * takeBack for a failed transaction on SQLite, under the write lock (BEGIN IMMEDIATE)
 * on the caller's connection, outside any transaction. It never throws: the failure
 * it follows is what the caller reports; its own is logged (a kill leaves such a tail
 * too, and the next run copies it in).
 */
export function undoFailedAppend(sqlite: Database, run: RunAppend): void {
  if (run.appended === null) return;
  try {
    sqlite.run("BEGIN IMMEDIATE");
    try {
      takeBack(run, databaseEnd(sqlite));
    } finally {
      sqlite.run("ROLLBACK");
    }
  } catch (e) {
    logUndoFailed(run, e);
  }
}

export function logUndoFailed(run: RunAppend, e: unknown): void {
  log("error", "anchor file: the lines of a failed run could not be taken back; the next run copies them in as its tail", { path: run.appended?.path, error: errorText(e) });
}

/**
 * The write transaction of a run that appends to the anchor file, on SQLite: BEGIN
 * IMMEDIATE, `work`, COMMIT; on a failure (also at COMMIT) abandoned (abandonAppend) and
 * the failure thrown. Synchronous: the connection may be shared with the rest of the process.
 */
export function appendingTransaction<T>(sqlite: Database, work: (run: RunAppend) => T): T {
  const run = new RunAppend();
  sqlite.run("BEGIN IMMEDIATE");
  try {
    const r = work(run);
    sqlite.run("COMMIT");
    return r;
  } catch (e) {
    abandonAppend(sqlite, run);
    throw e;
  }
}

/**
 * After an appending transaction on SQLite failed (also at COMMIT): rolled back unless
 * SQLite already did (on SQLITE_FULL it does, and a second ROLLBACK would throw and hide
 * the cause), then the run's lines taken back (undoFailedAppend). appendingTransaction's,
 * and the operator commands' transaction that awaits its work (src/audit/operator.ts).
 */
export function abandonAppend(sqlite: Database, run: RunAppend): void {
  if (sqlite.inTransaction) sqlite.run("ROLLBACK");
  undoFailedAppend(sqlite, run);
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
