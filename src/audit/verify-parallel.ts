// Verifies many tenants' chains on several cores. Hashing a chain is CPU-bound and one
// core reaches ~0.65 M entries/s; each worker reads the same database file through its
// own read-only connection, taking the next tenant from a shared queue when it is
// done, so one long chain does not hold the others up.
import type { Database } from "bun:sqlite";
import { cpus } from "node:os";
import { parseVerifierKey } from "./note.ts";
import { verifyTenantChain, type CheckpointRef, type TenantChainResult } from "./verify.ts";

export interface TenantTask {
  tenantId: number;
  /** The tenant's newest signed checkpoint from the anchor file. */
  checkpoint: CheckpointRef | null;
}

/** Workers worth starting for this many entries: below the threshold one is enough. */
export function workerCount(totalEntries: number, max = Math.min(4, cpus().length)): number {
  if (totalEntries < 200_000) return 0;
  return Math.max(1, max);
}

/**
 * Verifies every task; results keyed by tenant id. With `workers` 0 (or a database
 * that is not a file) the work runs in this thread on `sqlite`.
 */
export async function verifyTenants(
  sqlite: Database,
  dbPath: string,
  tasks: TenantTask[],
  workers: number,
  /** Verifier keys (note format) trusted for retention records. */
  verifierKeys: string[],
): Promise<Map<number, TenantChainResult>> {
  const results = new Map<number, TenantChainResult>();
  if (workers <= 0 || dbPath === ":memory:" || tasks.length === 0) {
    const verifiers = verifierKeys.map(parseVerifierKey);
    let lastYield = performance.now();
    for (const t of tasks) {
      results.set(t.tenantId, verifyTenantChain(sqlite, t.tenantId, { checkpoint: t.checkpoint, verifiers }));
      // Every ~20 ms give the event loop a real turn (a macrotask, not a microtask) so
      // /health and a second call of this job (409) are answered meanwhile.
      if (performance.now() - lastYield > 20) {
        await new Promise((r) => setImmediate(r));
        lastYield = performance.now();
      }
    }
    return results;
  }

  const queue = [...tasks];
  const pool = Array.from({ length: Math.min(workers, tasks.length) }, () => new Worker(new URL("./verify-worker.ts", import.meta.url).href));
  try {
    await Promise.all(
      pool.map(
        (w) =>
          new Promise<void>((resolve, reject) => {
            const next = () => {
              const task = queue.shift();
              if (!task) return resolve();
              w.postMessage({ task });
            };
            w.onmessage = (e: MessageEvent<{ tenantId: number; result?: TenantChainResult; error?: string }>) => {
              if (e.data.error !== undefined) return reject(new Error(`verifying tenant ${e.data.tenantId}: ${e.data.error}`));
              results.set(e.data.tenantId, e.data.result!);
              next();
            };
            w.onerror = (e) => reject(new Error(`verification worker failed: ${e.message}`));
            w.postMessage({ dbPath, verifierKeys });
            next();
          }),
      ),
    );
  } finally {
    for (const w of pool) w.terminate();
  }
  return results;
}
