// Moves SQLite's WAL checkpoint off the event loop. By default the connection that
// commits past 1,000 WAL pages copies them back into the database file and fsyncs it,
// inside that COMMIT: an append of 500 entries then took 31–40 ms instead of 4, and the
// single-entry p99 was 10 ms (bench/ingest.ts, docs/performance.md). The service's
// connection therefore does no automatic checkpoints, and a worker thread with its own
// connection runs a PASSIVE checkpoint every 50 ms. Should the worker fail, the
// connection's automatic checkpoints are switched back on: the WAL never grows unbounded.
import type { Database } from "bun:sqlite";
import { log } from "./logger.ts";
import { startWorker } from "./workers.ts";

/** SQLite's default wal_autocheckpoint (pages), restored when the worker fails. */
const DEFAULT_AUTOCHECKPOINT = 1000;

export interface CheckpointResult {
  log: number;
  checkpointed: number;
}

export interface Checkpointer {
  /** A checkpoint now, in the thread (after a large commit), besides the periodic ones. */
  now(): void;
  stop(): Promise<void>;
}

export function startCheckpointer(sqlite: Database, dbPath: string, options: { intervalMs?: number; onCheckpoint?: (r: CheckpointResult) => void } = {}): Checkpointer {
  const worker = startWorker("checkpoint-worker");
  let failed = false;
  const fallBack = (why: string) => {
    if (failed) return;
    failed = true;
    sqlite.run(`PRAGMA wal_autocheckpoint = ${DEFAULT_AUTOCHECKPOINT}`);
    log("error", "the WAL checkpointer thread failed; automatic checkpoints are back on the service's connection", { error: why });
  };
  let stopped: (() => void) | null = null;
  worker.onmessage = (e: MessageEvent<CheckpointResult | { error: string } | { stopped: true }>) => {
    const m = e.data;
    if ("stopped" in m) stopped?.();
    else if ("error" in m) fallBack(m.error);
    else options.onCheckpoint?.(m);
  };
  worker.onerror = (e) => fallBack(e.message);
  sqlite.run("PRAGMA wal_autocheckpoint = 0");
  worker.postMessage({ dbPath, intervalMs: options.intervalMs ?? 50 });
  return {
    now: () => {
      if (!failed) worker.postMessage("now");
    },
    async stop() {
      const done = new Promise<void>((r) => (stopped = r));
      worker.postMessage("stop");
      await Promise.race([done, Bun.sleep(1000)]);
      worker.terminate();
      sqlite.run(`PRAGMA wal_autocheckpoint = ${DEFAULT_AUTOCHECKPOINT}`);
    },
  };
}
