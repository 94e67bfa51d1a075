// Verifies many tenants' chains on several cores. Hashing a chain is CPU-bound and one
// core reaches ~0.65 M entries/s; each worker reads the same database file through its
// own read-only connection, taking the next tenant from a shared queue when it is
// done, so one long chain does not hold the others up.
import type { Database } from "bun:sqlite";
import { cpus } from "node:os";
import { onWorkers } from "../worker-pool.ts";
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

  await onWorkers<TenantTask, TenantChainResult>("verify-worker", { dbPath, verifierKeys }, tasks, workers, (t, result) => results.set(t.tenantId, result));
  return results;
}
