// Work handed out to a few worker threads from one queue: each worker gets `init` once,
// then one task at a time, and takes the next when it answers, so one long task does not
// hold the others up. Used by chain verification on SQLite (src/audit/verify-parallel.ts)
// and on PostgreSQL (src/pg/chain.ts): hashing a chain is CPU-bound.
//
// A worker answers each task with `{ result }` or `{ error }` (a message string).
import { startWorker, type WorkerName } from "./workers.ts";

export async function onWorkers<Task, Result>(name: WorkerName, init: unknown, tasks: readonly Task[], workers: number, onResult: (task: Task, result: Result) => void): Promise<void> {
  const queue = [...tasks];
  const pool = Array.from({ length: Math.min(workers, tasks.length) }, () => startWorker(name));
  try {
    await Promise.all(
      pool.map(
        (w) =>
          new Promise<void>((resolve, reject) => {
            let current: Task | undefined;
            const next = () => {
              current = queue.shift();
              if (current === undefined) return resolve();
              w.postMessage({ task: current });
            };
            w.onmessage = (e: MessageEvent<{ result?: Result; error?: string }>) => {
              if (e.data.error !== undefined) return reject(new Error(e.data.error));
              onResult(current!, e.data.result!);
              next();
            };
            w.onerror = (e) => reject(new Error(`worker failed: ${e.message}`));
            w.postMessage({ init });
            next();
          }),
      ),
    );
  } finally {
    for (const w of pool) w.terminate();
  }
}
