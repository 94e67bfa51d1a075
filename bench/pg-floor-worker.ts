// The PostgreSQL verification floor per entry (bench/cases/pg.ts): ranges of tenants'
// audit entries through `COPY … TO STDOUT` in (tenant_id, seq) order, each row split
// into its fields and its canonical bytes hashed and pushed into its tenant's RFC 6962
// tree, as bench/floor.ts does on SQLite: the least work any verifier must do, with no
// checks, no per-tenant state beyond the tree and no result bookkeeping.
import { SQL } from "bun";
import { CHAIN_VERSION, sha256Hex } from "../src/audit/chain.ts";
import { CompactRange } from "../src/audit/merkle.ts";
import { copyRows, copyUnescape } from "../src/pg/chain.ts";

declare var self: Worker;
let sql: SQL | null = null;

self.onmessage = async (e: MessageEvent<{ url: string } | { from: number; to: number }>) => {
  const msg = e.data;
  if ("url" in msg) {
    sql = new SQL(msg.url, { max: 1 });
    return;
  }
  let n = 0;
  let mismatches = 0;
  let roots = 0;
  let tenant = -1;
  let tree = new CompactRange();
  const query = `SELECT tenant_id, seq, created_at, actor, action, subject, details, prev_hash, hash FROM audit_entries WHERE tenant_id BETWEEN ${msg.from} AND ${msg.to} ORDER BY tenant_id, seq`;
  await sql!.begin("ISOLATION LEVEL REPEATABLE READ READ ONLY", async (tx) => {
    for await (const rows of copyRows(tx, query)) {
      for (const f of rows) {
        n++;
        const t = Number(f[0]);
        if (t !== tenant) {
          if (tree.size > 0) roots += tree.root()[0]!;
          tenant = t;
          tree = new CompactRange();
        }
        const text = JSON.stringify([CHAIN_VERSION, t, Number(f[1]), f[2], copyUnescape(f[3]!), copyUnescape(f[4]!), copyUnescape(f[5]!), copyUnescape(f[6]!), f[7]]);
        // compared, so the hash is not dead code
        if (sha256Hex(text) !== f[8]) mismatches++;
        tree.pushEntryHash(f[8]!);
      }
    }
  });
  if (tree.size > 0) roots += tree.root()[0]!;
  self.postMessage({ n, mismatches, roots });
};
