// The steps of db-onderhoud that read or rewrite much of the file, run on a worker thread
// with a connection of their own (src/verify-worker.ts) so the event loop, and with it every
// request and /health, stays free. On the service's connection, at 5 M audit entries
// (3.3 GB; bench/ingest.ts with a db-onderhoud window at L), they held it:
// - PRAGMA quick_check reads every page: about 3 s with a warm page cache, up to 20 s cold;
// - PRAGMA optimize's ANALYZE counts every row of a table it analyses, 0.5–1 s for
//   audit_entries (it analyses only a table never analysed, or one whose row count grew or
//   shrank many times over since);
// - the incremental vacuum after beveiligingslog-retentie freed half the login attempts:
//   168 steps of 1,000 pages, 60–83 ms each;
// - the TRUNCATE checkpoint after it: 110–250 ms.
// The write lock is another matter: the analysis holds it from start to end (0.7 s there)
// and each vacuum step for its duration, so the application's appends wait for them, on
// their own async path, without blocking the event loop. Vacuum steps are small
// (VACUUM_STEP_PAGES) with a pause between them for that reason.
import type { Database } from "bun:sqlite";
import { onWorkers } from "../worker-pool.ts";

/** quick_check reports at most this many problems; more add nothing an operator needs. */
export const MAX_PROBLEMS = 100;

/** Rows ANALYZE samples per index (SQLite's advice for PRAGMA optimize); it still counts the table's rows. */
const ANALYSIS_LIMIT = 400;

/** Pages freed per incremental-vacuum transaction (1 MiB at the default page size: about 20 ms at L). */
export const VACUUM_STEP_PAGES = 250;
/** Pause between vacuum steps, so a waiting writer gets the lock in between. */
export const STEP_PAUSE_MS = 5;
/** How long the TRUNCATE checkpoint may wait for readers and writers before falling back to PASSIVE. */
const CHECKPOINT_WAIT_MS = 250;

/** A task a verification worker answers on its own connection to the file (see the top of this file). */
export type WholeFileTask = { quickCheck: true } | { optimize: true } | { vacuum: true } | { walCheckpoint: true };

/** What the WAL checkpoint did (db-onderhoud's `checkpoint`, whose schema documents it). */
export interface CheckpointResult {
  modus: "TRUNCATE" | "PASSIVE";
  busy: boolean;
  logPaginas: number;
  gecheckpoint: number;
}

/** "ok", or what quick_check found (at most MAX_PROBLEMS lines of at most 500 characters). */
export function quickCheck(sqlite: Database): "ok" | string[] {
  try {
    const rows = sqlite.query(`PRAGMA quick_check(${MAX_PROBLEMS})`).values() as [string][];
    if (rows.length === 1 && rows[0]![0] === "ok") return "ok";
    // SQLite may put several findings in one row, one per line.
    return rows
      .flatMap((r) => String(r[0]).split("\n"))
      .filter((l) => l.trim() !== "")
      .slice(0, MAX_PROBLEMS)
      .map((l) => l.slice(0, 500));
  } catch (e) {
    // A damaged header or schema page makes the check itself fail: that is a finding too.
    return [`quick_check kon niet worden uitgevoerd: ${e instanceof Error ? e.message : String(e)}`];
  }
}

/**
 * Refreshes the planner's statistics where they are stale, each index sampled
 * (ANALYSIS_LIMIT). 0x10002: every table is looked at (0x10000), not only those this
 * connection has used, which on a fresh connection are none; ANALYZE where it helps (0x2).
 */
export function optimize(sqlite: Database): void {
  sqlite.run(`PRAGMA analysis_limit = ${ANALYSIS_LIMIT}`);
  sqlite.run("PRAGMA optimize(0x10002)");
}

/** A PRAGMA's single number (page_size, freelist_count, auto_vacuum), 0 when it gives none. */
export function pragmaNumber(sqlite: Database, name: string): number {
  return Number(sqlite.query(`PRAGMA ${name}`).values()[0]?.[0] ?? 0);
}

/**
 * Gives free pages back to the file system, VACUUM_STEP_PAGES per write transaction with a
 * pause between them, until none are left or a step frees nothing; the steps taken.
 */
export async function vacuumInSteps(sqlite: Database): Promise<number> {
  let steps = 0;
  let free = pragmaNumber(sqlite, "freelist_count");
  while (free > 0) {
    sqlite.run(`PRAGMA incremental_vacuum(${VACUUM_STEP_PAGES})`);
    steps++;
    const left = pragmaNumber(sqlite, "freelist_count");
    if (left >= free) break; // no progress: never loop forever
    free = left;
    if (free > 0) await Bun.sleep(STEP_PAUSE_MS);
  }
  return steps;
}

/**
 * Copies the WAL into the file and empties it. TRUNCATE also empties the -wal file, but it
 * waits for readers and writers; a short busy timeout bounds how long it may hold up a
 * writer. When busy, a PASSIVE checkpoint copies what it can without waiting for anyone.
 * `restoreMs`: the busy timeout the connection goes on with.
 */
export function checkpointTruncate(sqlite: Database, restoreMs: number): CheckpointResult {
  sqlite.run(`PRAGMA busy_timeout = ${CHECKPOINT_WAIT_MS}`);
  let r: { busy: number; log: number; checkpointed: number };
  let modus: CheckpointResult["modus"] = "TRUNCATE";
  try {
    r = sqlite.query("PRAGMA wal_checkpoint(TRUNCATE)").get() as typeof r;
  } finally {
    sqlite.run(`PRAGMA busy_timeout = ${restoreMs}`);
  }
  if (r.busy !== 0) {
    modus = "PASSIVE";
    r = sqlite.query("PRAGMA wal_checkpoint(PASSIVE)").get() as typeof r;
  }
  return { modus, busy: r.busy !== 0, logPaginas: r.log, gecheckpoint: r.checkpointed };
}

/** `task` on a worker thread for the database file at `dbPath`; its failure is thrown. */
async function onWorker<R>(dbPath: string, task: WholeFileTask): Promise<R> {
  let result: R | undefined;
  await onWorkers<WholeFileTask, R>("verify-worker", { dbPath, verifierKeys: [] }, [task], 1, (_, r) => (result = r));
  return result!;
}

/** quickCheck of the database file at `dbPath`, on a worker thread: the event loop stays free meanwhile. */
export async function quickCheckOnWorker(dbPath: string): Promise<"ok" | string[]> {
  try {
    return await onWorker<"ok" | string[]>(dbPath, { quickCheck: true });
  } catch (e) {
    // The worker could not open or read the file: a finding, as on the service's own connection.
    return [`quick_check kon niet worden uitgevoerd: ${e instanceof Error ? e.message : String(e)}`];
  }
}

/** optimize on a worker thread's own writable connection to `dbPath`; a failure (SQLITE_BUSY past the busy timeout, a full disk) is thrown. */
export async function optimizeOnWorker(dbPath: string): Promise<void> {
  await onWorker<null>(dbPath, { optimize: true });
}

/** vacuumInSteps on a worker thread's own writable connection; the steps taken. */
export function vacuumOnWorker(dbPath: string): Promise<number> {
  return onWorker<number>(dbPath, { vacuum: true });
}

/** checkpointTruncate on a worker thread's own connection. */
export function checkpointOnWorker(dbPath: string): Promise<CheckpointResult> {
  return onWorker<CheckpointResult>(dbPath, { walCheckpoint: true });
}
