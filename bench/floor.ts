// The verification floor: the least work any verifier must do — read every entry in
// chain order, hash its canonical bytes (the same JSON array verify.ts hashes), and
// hash it into its tenant's RFC 6962 tree up to the root — with no checks, no
// per-tenant state beyond the tree and no result bookkeeping.
import type { Database } from "bun:sqlite";
import { CHAIN_VERSION, sha256Hex } from "../src/audit/chain.ts";
import { CompactRange } from "../src/audit/merkle.ts";

type Row = { tenant_id: number; seq: number; created_at: string; actor: string; action: string; subject: string; details: string; prev_hash: string; hash: string };

/** Entries of tenants from..to (inclusive) in (tenant_id, seq) order: one range scan of the primary key. */
export function floorScan(db: Database, from: number, to: number): { n: number; mismatches: number; roots: number } {
  const stmt = db.query(
    `SELECT tenant_id, seq, created_at, actor, action, subject, details, prev_hash, hash
     FROM audit_entries WHERE tenant_id >= ? AND tenant_id <= ? ORDER BY tenant_id, seq`,
  );
  let n = 0;
  let mismatches = 0;
  let roots = 0;
  let tenant = -1;
  let tree = new CompactRange();
  for (const r of stmt.iterate(from, to) as IterableIterator<Row>) {
    n++;
    if (r.tenant_id !== tenant) {
      if (tree.size > 0) roots += tree.root()[0]!;
      tenant = r.tenant_id;
      tree = new CompactRange();
    }
    const text = JSON.stringify([CHAIN_VERSION, r.tenant_id, r.seq, r.created_at, r.actor, r.action, r.subject, r.details, r.prev_hash]);
    // compared, so the hash is not dead code
    if (sha256Hex(text) !== r.hash) mismatches++;
    tree.pushEntryHash(r.hash);
  }
  if (tree.size > 0) roots += tree.root()[0]!;
  return { n, mismatches, roots };
}
