// A PostgreSQL verification worker: its own connection, one range of tenants at a time
// from the pool (src/worker-pool.ts, src/pg/chain.ts verifyTenantsPg), or one tenant's
// prefix for audit-retentie (checkPrefixPg). Parsing COPY's rows and hashing them is
// CPU-bound: several threads verify at once.
// Built into the binary as another entry point (package.json "build").
import { pgPool } from "./pg/store.ts";
import { SQL } from "bun";
import { parseVerifierKey, type Verifier } from "./audit/note.ts";
import { verifyRangePg, type PgTenantTask } from "./pg/chain.ts";
import { prefixCheckMessage, type PrefixTask } from "./audit/retention.ts";
import { checkPrefixPg } from "./pg/audit-retention.ts";

declare var self: Worker;

let sql: SQL | null = null;
let verifiers: Verifier[] = [];

self.onmessage = async (e: MessageEvent<{ init: { url: string; verifierKeys: string[] } } | { task: PgTenantTask[] | PrefixTask }>) => {
  const msg = e.data;
  if ("init" in msg) {
    sql = pgPool(msg.init.url, 1);
    verifiers = msg.init.verifierKeys.map(parseVerifierKey);
    return;
  }
  const task = msg.task;
  try {
    // A range of chains to verify, or one tenant's prefix for audit-retentie (checkPrefix).
    if (Array.isArray(task)) self.postMessage({ result: [...(await verifyRangePg(sql!, task, verifiers))] });
    else self.postMessage({ result: prefixCheckMessage(await checkPrefixPg(sql!, task, verifiers)) });
  } catch (err) {
    // Never the URL: it may carry a password.
    const which = Array.isArray(task) ? `tenants ${task[0]?.tenantId}–${task.at(-1)?.tenantId}` : `tenant ${task.tenantId}`;
    self.postMessage({ error: `${which}: ${err instanceof Error ? err.message : String(err)}` });
  }
};
