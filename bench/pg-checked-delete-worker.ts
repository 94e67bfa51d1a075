// The least a checked deletion of old audit entries costs on PostgreSQL (bench/cases/pg.ts
// checkedDelete), one range of tenants per message: in one transaction, one
// `DELETE … RETURNING` through `COPY … TO STDOUT` (PostgreSQL deletes the whole range
// before it sends the first row), each row's canonical bytes hashed and compared with its
// stored hash, then per tenant in seq order the links and the tree's compact range over
// what was deleted; rolled back when anything does not check out. Two of these on two
// threads: the server deletes one range while the other is hashed.
import { SQL } from "bun";
import { rowHash } from "../src/audit/chain.ts";
import { CompactRange } from "../src/audit/merkle.ts";
import { copyRows, ENTRY_COLUMNS, entryRowOf } from "../src/pg/chain.ts";

declare var self: Worker;
let sql: SQL | null = null;
let grens = "";

self.onmessage = async (e: MessageEvent<{ url: string; grens: string } | { from: number; to: number }>) => {
  const msg = e.data;
  if ("url" in msg) {
    if (!/^[0-9T:.Z-]+$/.test(msg.grens)) throw new Error(`not a time: ${msg.grens}`);
    sql = new SQL(msg.url, { max: 1 });
    grens = msg.grens;
    return;
  }
  let n = 0;
  let mismatches = 0;
  await sql!.begin(async (tx) => {
    const perTenant = new Map<number, { seq: number; hash: string; prev: string }[]>();
    const query = `DELETE FROM audit_entries WHERE tenant_id BETWEEN ${msg.from} AND ${msg.to} AND created_at < '${grens}' RETURNING tenant_id, ${ENTRY_COLUMNS}`;
    for await (const rows of copyRows(tx, query)) {
      for (const f of rows) {
        const tenantId = Number(f[0]);
        const r = entryRowOf(f, 1);
        if (rowHash(tenantId, r) !== r.hash) mismatches++;
        let list = perTenant.get(tenantId);
        if (!list) perTenant.set(tenantId, (list = []));
        list.push({ seq: r.seq, hash: r.hash, prev: r.prev_hash });
      }
    }
    for (const list of perTenant.values()) {
      // RETURNING comes in the table's order, not the chain's.
      list.sort((a, b) => a.seq - b.seq);
      const range = new CompactRange();
      list.forEach((x, i) => {
        if (i > 0 && (x.seq !== list[i - 1]!.seq + 1 || x.prev !== list[i - 1]!.hash)) mismatches++;
        range.pushEntryHash(x.hash);
      });
      n += list.length;
    }
    if (mismatches > 0) throw new Error(`checked delete: ${mismatches} rows did not check out; rolled back`);
  });
  self.postMessage({ n, mismatches });
};
