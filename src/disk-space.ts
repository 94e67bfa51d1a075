// The free space of the file systems nachtwacht writes to on this host: the SQLite
// database's, the anchor file's and, without SMTP_URL, the outbox's. A disk that fills
// up over the years stops the audit log (SQLITE_FULL), the anchor file and the backups;
// the daily report and /metrics say so while there is still room (SCHIJF_MIN_VRIJ_PROCENT).
import { existsSync, statfsSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import type { Config } from "./config.ts";

/** What nachtwacht keeps on a file system of this host. */
export const WATCHED_FILES = ["database", "ankerbestand", "outbox"] as const;
export type WatchedFile = (typeof WATCHED_FILES)[number];

/** The outbox folder, where mail goes as .eml files without SMTP_URL: beside the database file. */
export function outboxDirOf(config: Pick<Config, "databasePath">): string {
  return join(dirname(resolve(config.databasePath)), "outbox");
}

/**
 * The paths of what nachtwacht writes on this host, by what they are. `database`: the
 * SQLite file's path; null on PostgreSQL, whose files are the server's, on its own disk.
 */
export function watchedPaths(config: Pick<Config, "databasePath" | "auditAnkerBestand" | "smtpUrl">, database: string | null): { bestand: WatchedFile; pad: string }[] {
  const out: { bestand: WatchedFile; pad: string }[] = [];
  if (database !== null && database !== ":memory:") out.push({ bestand: "database", pad: resolve(database) });
  out.push({ bestand: "ankerbestand", pad: resolve(config.auditAnkerBestand) });
  if (config.smtpUrl === null) out.push({ bestand: "outbox", pad: outboxDirOf(config) });
  return out;
}

/** One file system and what nachtwacht keeps on it. */
export interface FileSystemSpace {
  bestanden: WatchedFile[];
  /** The folder it was measured at: the nearest existing one of the first file's. */
  map: string;
  /** Free for an unprivileged writer (the service's user): statfs's f_bavail. */
  vrijBytes: number;
  totaalBytes: number;
}

/** The nearest existing folder at or above `path`'s own (a file not made yet is measured where it will be). */
function existingFolder(path: string, isFolder: boolean): string {
  let dir = isFolder ? path : dirname(path);
  while (!existsSync(dir) && dirname(dir) !== dir) dir = dirname(dir);
  return dir;
}

/** The free space of each file system holding one of `paths`, each file system once (by its device), in the order of `paths`. */
export function fileSystemSpace(paths: { bestand: WatchedFile; pad: string }[]): FileSystemSpace[] {
  const byDevice = new Map<number, FileSystemSpace>();
  for (const { bestand, pad } of paths) {
    const map = existingFolder(pad, bestand === "outbox");
    const device = statSync(map).dev;
    const known = byDevice.get(device);
    if (known) {
      known.bestanden.push(bestand);
      continue;
    }
    const s = statfsSync(map);
    byDevice.set(device, { bestanden: [bestand], map, vrijBytes: s.bavail * s.bsize, totaalBytes: s.blocks * s.bsize });
  }
  return [...byDevice.values()];
}

/**
 * Less free than this for the service's user on the SQLite database's file system, and
 * /health says `schijf-vol`: writes fail now, not soon (that is SCHIJF_MIN_VRIJ_PROCENT's
 * warning). Not 0: a commit needs its pages in the WAL (4 KiB each) and the checkpoint a
 * database file that can grow; with a few pages left the next writes fail with
 * SQLITE_FULL while a small one may still pass. 1 MiB is 256 pages: room for the WAL and
 * the file to grow a little, and far below any disk the daily report would call fine.
 */
export const DISK_FULL_BELOW_BYTES = 1024 * 1024;

/** Whether the file system holding the SQLite database at `path` is full by DISK_FULL_BELOW_BYTES (statfs, as fileSystemSpace measures it). */
export function databaseDiskFull(path: string): boolean {
  if (path === ":memory:") return false;
  const [fs] = fileSystemSpace([{ bestand: "database", pad: resolve(path) }]);
  return fs !== undefined && fs.vrijBytes < DISK_FULL_BELOW_BYTES;
}

/** The share of a file system that is free, in percent (0 for one of size 0). */
export function freePercent(fs: Pick<FileSystemSpace, "vrijBytes" | "totaalBytes">): number {
  return fs.totaalBytes === 0 ? 0 : (100 * fs.vrijBytes) / fs.totaalBytes;
}

/**
 * How serious a file system's free space is against SCHIJF_MIN_VRIJ_PROCENT: `let-op`
 * below it, `actie` below half of it (writes will soon fail), else ok. The one rule for
 * the daily report; /metrics exports the threshold for the alert rule.
 */
export function diskLevel(fs: Pick<FileSystemSpace, "vrijBytes" | "totaalBytes">, minVrijProcent: number): "ok" | "let-op" | "actie" {
  const free = freePercent(fs);
  if (free < minVrijProcent / 2) return "actie";
  if (free < minVrijProcent) return "let-op";
  return "ok";
}
