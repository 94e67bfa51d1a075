// The one rule by which nachtwacht puts a file in place (`nachtwacht backup`'s copies,
// `nachtwacht export --uit`, the witness files and the markers zegels-sinds and zegelsleutel beside the
// anchor file, the mail outbox's .eml files): written in full under a temporary name in the same
// folder, its data fsynced, renamed over the final name, and the folder fsynced, so that
// after a crash or power loss the name holds either nothing or the whole file, never half
// of it, and a file reported as written is on disk.
import { randomBytes } from "node:crypto";
import { closeSync, fchmodSync, fsyncSync, linkSync, openSync, renameSync, rmSync, unlinkSync, writeSync } from "node:fs";
import { basename, dirname, join } from "node:path";

/** fsync of a file or a folder by its path (a folder: its entries, e.g. a rename into it). */
export function fsyncPath(path: string): void {
  const fd = openSync(path, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * The rename succeeded, so the whole file is in place under its name, but the fsync of
 * its folder failed: the name may not survive a power loss. Not "not written": a reader
 * (the outbox's mail client, an operator) can already find the file. The original
 * error is the cause; its code, errno and syscall are kept.
 */
export class FolderNotSynced extends Error {
  readonly code?: string;
  readonly errno?: number;
  readonly syscall?: string;
  constructor(
    readonly path: string,
    cause: unknown,
  ) {
    super(cause instanceof Error ? cause.message : String(cause), { cause });
    this.name = "FolderNotSynced";
    const c = cause as { code?: string; errno?: number; syscall?: string } | null;
    if (c && typeof c === "object") {
      this.code = c.code;
      this.errno = c.errno;
      this.syscall = c.syscall;
    }
  }
}

/**
 * Puts a finished temporary file in place: its data fsynced, renamed to `path` (same
 * folder: atomic), then the folder fsynced so the new name survives a power loss. A
 * failure of that last fsync throws FolderNotSynced: the file is in place by then.
 * `exclusive`: never over an existing `path`: linked to the name (EEXIST when it exists,
 * also when another writer got there first), then the temporary name removed.
 */
export function renameDurably(tmp: string, path: string, exclusive = false): void {
  fsyncPath(tmp);
  if (exclusive) {
    linkSync(tmp, path);
    unlinkSync(tmp);
  } else renameSync(tmp, path);
  try {
    fsyncPath(dirname(path));
  } catch (e) {
    throw new FolderNotSynced(path, e);
  }
}

/**
 * Writes `data` to `path` by renameDurably: a new temporary file beside it (created
 * exclusively, so nothing planted under its name is followed), with exactly `mode`
 * whatever the umask. On failure the temporary file is removed and the error thrown (its
 * `path` the file's, not the temporary one's); `path` is then as it was, except after
 * FolderNotSynced: the file is at `path`.
 * `o.exclusive`: never over an existing `path` (renameDurably's `exclusive`).
 */
export function writeFileDurably(path: string, data: string | Uint8Array, mode = 0o600, o: { exclusive?: boolean } = {}): void {
  const tmp = join(dirname(path), `.${basename(path)}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`);
  const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : data;
  try {
    const fd = openSync(tmp, "wx", mode);
    try {
      fchmodSync(fd, mode);
      let off = 0;
      while (off < bytes.length) off += writeSync(fd, bytes, off, bytes.length - off);
    } finally {
      closeSync(fd);
    }
    renameDurably(tmp, path, o.exclusive);
  } catch (e) {
    // Never instead of the error itself: on a read-only file system removing even a name
    // that is not there fails (EROFS).
    try {
      rmSync(tmp, { force: true });
    } catch {}
    // The caller asked for `path`, and the operator knows that name (a start's failure
    // names the error's path, src/start-failure.ts): not the temporary one, now removed.
    const err = e as { path?: unknown };
    if (err && typeof err === "object" && err.path === tmp) err.path = path;
    throw e;
  }
}
