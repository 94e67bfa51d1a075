// The steps of db-onderhoud that read the whole file: PRAGMA quick_check (every page; at 5 M
// audit entries, 3.3 GB: about 3 s here, up to 20 s with a cold page cache) and PRAGMA
// optimize, whose ANALYZE counts every row of a table it analyses (0.5–1 s for
// audit_entries at that size; it analyses only a table never analysed, or one whose row
// count grew or shrank many times over since). The service runs both on a worker thread
// with a connection of its own (src/verify-worker.ts): on the service's connection they
// held the event loop, and with it every request and /health, for as long (bench/ingest.ts
// --jobs db-onderhoud at L: 4.4 s). The analysis holds the write lock from start to end
// (0.7 s there): the application's appends wait for it, without blocking the event loop,
// on the rare runs that analyse.
import type { Database } from "bun:sqlite";
import { onWorkers } from "../worker-pool.ts";

/** quick_check reports at most this many problems; more add nothing an operator needs. */
export const MAX_PROBLEMS = 100;

/** Rows ANALYZE samples per index (SQLite's advice for PRAGMA optimize); it still counts the table's rows. */
const ANALYSIS_LIMIT = 400;

/** A task a verification worker answers on its own connections: quickCheck, or optimize. */
export type WholeFileTask = { quickCheck: true } | { optimize: true };

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
