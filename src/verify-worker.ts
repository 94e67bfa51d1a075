// A verification worker: opens its own read-only connection (WAL lets readers run
// beside the writer) and checks the tenants the pool hands it, one at a time: a whole
// chain (audit-verificatie, verify) or the prefix audit-retentie would delete; or, for
// db-onderhoud, the whole file (quick_check; ANALYZE, the incremental vacuum and the WAL
// checkpoint on a writable connection of its own: src/maintenance/whole-file.ts).
// Built into the binary as a second entry point (see package.json "build").
import { Database } from "bun:sqlite";
import { parseVerifierKey, type Verifier } from "./audit/note.ts";
import { verifyTenantChain, type TenantChainResult } from "./audit/verify.ts";
import type { TenantTask } from "./audit/verify-parallel.ts";
import { checkPrefixSqlite, prefixCheckMessage, type PrefixCheckMessage, type PrefixTask } from "./audit/retention.ts";
import { BUSY_TIMEOUT_MS } from "./db.ts";
import { checkpointTruncate, optimize, quickCheck, vacuumInSteps, type WholeFileTask } from "./maintenance/whole-file.ts";

declare var self: Worker;

let db: Database | null = null;
let dbPath = "";
let verifiers: Verifier[] = [];

self.onmessage = async (e: MessageEvent<{ init: { dbPath: string; verifierKeys: string[] } } | { task: TenantTask | PrefixTask | WholeFileTask }>) => {
  const msg = e.data;
  if ("init" in msg) {
    dbPath = msg.init.dbPath;
    db = new Database(dbPath, { readonly: true });
    db.run("PRAGMA busy_timeout = 5000");
    verifiers = msg.init.verifierKeys.map(parseVerifierKey);
    return;
  }
  const task = msg.task;
  if ("quickCheck" in task || "optimize" in task || "vacuum" in task || "walCheckpoint" in task) {
    // One task per worker. Its connections are closed before the answer: the job's next
    // step may be a TRUNCATE checkpoint, which must not meet one of them closing.
    db!.close();
    db = null;
    const what = Object.keys(task)[0]!;
    try {
      const conn = new Database(dbPath, { readonly: "quickCheck" in task });
      try {
        conn.run(`PRAGMA busy_timeout = ${BUSY_TIMEOUT_MS}`);
        // quickCheck reports its own failures as findings.
        const result =
          "quickCheck" in task ? quickCheck(conn) : "optimize" in task ? (optimize(conn), null) : "vacuum" in task ? await vacuumInSteps(conn) : checkpointTruncate(conn, BUSY_TIMEOUT_MS);
        self.postMessage({ result });
      } finally {
        conn.close();
      }
    } catch (err) {
      self.postMessage({ error: `${what}: ${err instanceof Error ? err.message : String(err)}` });
    }
    return;
  }
  try {
    const result: TenantChainResult | PrefixCheckMessage =
      "grens" in task ? prefixCheckMessage(await checkPrefixSqlite(db!, task, verifiers)) : verifyTenantChain(db!, task.tenantId, { checkpoint: task.checkpoint, verifiers });
    self.postMessage({ result });
  } catch (err) {
    self.postMessage({ error: `tenant ${task.tenantId}: ${err instanceof Error ? err.message : String(err)}` });
  }
};
