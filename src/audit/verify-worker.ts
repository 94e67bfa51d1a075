// A verification worker: opens its own read-only connection (WAL lets readers run
// beside the writer) and verifies the tenants the pool hands it, one at a time.
// Built into the binary as a second entry point (see package.json "build").
import { Database } from "bun:sqlite";
import { parseVerifierKey, type Verifier } from "./note.ts";
import { verifyTenantChain, type TenantChainResult } from "./verify.ts";
import type { TenantTask } from "./verify-parallel.ts";

declare var self: Worker;

let db: Database | null = null;
let verifiers: Verifier[] = [];

self.onmessage = (e: MessageEvent<{ dbPath: string; verifierKeys: string[] } | { task: TenantTask }>) => {
  const msg = e.data;
  if ("dbPath" in msg) {
    db = new Database(msg.dbPath, { readonly: true });
    db.run("PRAGMA busy_timeout = 5000");
    verifiers = msg.verifierKeys.map(parseVerifierKey);
    return;
  }
  try {
    const result: TenantChainResult = verifyTenantChain(db!, msg.task.tenantId, { checkpoint: msg.task.checkpoint, verifiers });
    self.postMessage({ tenantId: msg.task.tenantId, result });
  } catch (err) {
    self.postMessage({ tenantId: msg.task.tenantId, error: err instanceof Error ? err.message : String(err) });
  }
};
