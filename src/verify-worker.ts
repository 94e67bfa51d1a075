// A verification worker: opens its own read-only connection (WAL lets readers run
// beside the writer) and verifies the tenants the pool hands it, one at a time.
// Built into the binary as a second entry point (see package.json "build").
import { Database } from "bun:sqlite";
import { parseVerifierKey, type Verifier } from "./audit/note.ts";
import { verifyTenantChain, type TenantChainResult } from "./audit/verify.ts";
import type { TenantTask } from "./audit/verify-parallel.ts";

declare var self: Worker;

let db: Database | null = null;
let verifiers: Verifier[] = [];

self.onmessage = (e: MessageEvent<{ init: { dbPath: string; verifierKeys: string[] } } | { task: TenantTask }>) => {
  const msg = e.data;
  if ("init" in msg) {
    db = new Database(msg.init.dbPath, { readonly: true });
    db.run("PRAGMA busy_timeout = 5000");
    verifiers = msg.init.verifierKeys.map(parseVerifierKey);
    return;
  }
  try {
    const result: TenantChainResult = verifyTenantChain(db!, msg.task.tenantId, { checkpoint: msg.task.checkpoint, verifiers });
    self.postMessage({ result });
  } catch (err) {
    self.postMessage({ error: `tenant ${msg.task.tenantId}: ${err instanceof Error ? err.message : String(err)}` });
  }
};
