// A PostgreSQL verification worker: its own connection, one range of tenants at a time
// from the pool (src/worker-pool.ts, src/pg/chain.ts verifyTenantsPg). Parsing COPY's
// rows and hashing them is CPU-bound: several threads verify at once.
// Built into the binary as another entry point (package.json "build").
import { SQL } from "bun";
import { parseVerifierKey, type Verifier } from "./audit/note.ts";
import { verifyRangePg, type PgTenantTask } from "./pg/chain.ts";

declare var self: Worker;

let sql: SQL | null = null;
let verifiers: Verifier[] = [];

self.onmessage = async (e: MessageEvent<{ init: { url: string; verifierKeys: string[] } } | { task: PgTenantTask[] }>) => {
  const msg = e.data;
  if ("init" in msg) {
    sql = new SQL(msg.init.url, { max: 1 });
    verifiers = msg.init.verifierKeys.map(parseVerifierKey);
    return;
  }
  try {
    const results = await verifyRangePg(sql!, msg.task, verifiers);
    self.postMessage({ result: [...results] });
  } catch (err) {
    // Never the URL: it may carry a password.
    self.postMessage({ error: `tenants ${msg.task[0]?.tenantId}–${msg.task.at(-1)?.tenantId}: ${err instanceof Error ? err.message : String(err)}` });
  }
};
