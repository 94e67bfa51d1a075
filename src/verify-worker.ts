// A verification worker: opens its own read-only connection (WAL lets readers run
// beside the writer) and checks the tenants the pool hands it, one at a time: a whole
// chain (audit-verificatie, verify) or the prefix audit-retentie would delete.
// Built into the binary as a second entry point (see package.json "build").
import { Database } from "bun:sqlite";
import { parseVerifierKey, type Verifier } from "./audit/note.ts";
import { verifyTenantChain, type TenantChainResult } from "./audit/verify.ts";
import type { TenantTask } from "./audit/verify-parallel.ts";
import { checkPrefixSqlite, prefixCheckMessage, type PrefixCheckMessage, type PrefixTask } from "./audit/retention.ts";

declare var self: Worker;

let db: Database | null = null;
let verifiers: Verifier[] = [];

self.onmessage = async (e: MessageEvent<{ init: { dbPath: string; verifierKeys: string[] } } | { task: TenantTask | PrefixTask }>) => {
  const msg = e.data;
  if ("init" in msg) {
    db = new Database(msg.init.dbPath, { readonly: true });
    db.run("PRAGMA busy_timeout = 5000");
    verifiers = msg.init.verifierKeys.map(parseVerifierKey);
    return;
  }
  const task = msg.task;
  try {
    const result: TenantChainResult | PrefixCheckMessage =
      "grens" in task ? prefixCheckMessage(await checkPrefixSqlite(db!, task, verifiers)) : verifyTenantChain(db!, task.tenantId, { checkpoint: task.checkpoint, verifiers });
    self.postMessage({ result });
  } catch (err) {
    self.postMessage({ error: `tenant ${task.tenantId}: ${err instanceof Error ? err.message : String(err)}` });
  }
};
