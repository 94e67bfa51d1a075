// A verification worker: opens its own read-only connection (WAL lets readers run
// beside the writer) and verifies the tenants the pool hands it, one at a time.
// Built into the binary as a second entry point (see package.json "build").
import { Database } from "bun:sqlite";
import { verifyTenantChain, type TenantChainResult } from "./verify.ts";
import type { TenantTask } from "./verify-parallel.ts";

declare var self: Worker;

let db: Database | null = null;

self.onmessage = (e: MessageEvent<{ dbPath: string } | { task: TenantTask } | { close: true }>) => {
  const msg = e.data;
  if ("dbPath" in msg) {
    db = new Database(msg.dbPath, { readonly: true });
    db.run("PRAGMA busy_timeout = 5000");
    return;
  }
  if ("close" in msg) {
    db?.close();
    db = null;
    self.postMessage({ closed: true });
    return;
  }
  try {
    const result: TenantChainResult = verifyTenantChain(db!, msg.task.tenantId, msg.task);
    self.postMessage({ tenantId: msg.task.tenantId, result });
  } catch (err) {
    self.postMessage({ tenantId: msg.task.tenantId, error: err instanceof Error ? err.message : String(err) });
  }
};
