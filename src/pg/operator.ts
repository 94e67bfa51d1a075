// `nachtwacht adopt` and `nachtwacht accept-restore` on PostgreSQL: the store the rules
// of src/audit/operator.ts (adoptChainOn, acceptRestoreOn; they live there, for any
// store) read and write through. The comparison of the anchor file with audit_anchor_log
// in one read-only snapshot, as verify does (src/pg/offline.ts); without --ja the plan in
// one read-only snapshot; with --ja one transaction that first takes the lock of the
// anchor file's appenders (ANCHOR_FILE_LOCK, as audit-anker and audit-retentie take it),
// then the chains' locks of the tenants concerned (as the write API's appenders take
// them), so neither the service's runs nor its appends interleave — what SQLite's write
// lock does there.
import { moveState, newerPgSchemaProblem, pgPool, unprovedCopyMelding } from "./store.ts";
import { SQL } from "bun";
import { CannotCheck } from "../audit/offline.ts";
import type { EntryHead, OperatorStore, OperatorTx } from "../audit/operator.ts";
import { RunAppend } from "../audit/anchor-file.ts";
import { appendingTransactionPg, insertRowsPg, lockAndSyncTailPg } from "./anchor-file.ts";
import { writeRunPg } from "./anchoring.ts";
import { chainStartPg, copyRows, lockChainsPg, readEntriesPg } from "./chain.ts";
import { compareWithFilePg } from "./offline.ts";
import { redactUrl } from "./url.ts";

/** The operator's connection to the service's PostgreSQL database (no migration runs: the service's schema must be there). */
export async function openOperatorPg(url: string): Promise<SQL> {
  const sql = pgPool(url, 1);
  let newer: string | null;
  try {
    await sql`SELECT 1 FROM audit_anchor_log LIMIT 1`;
    newer = await newerPgSchemaProblem(sql);
  } catch (e) {
    await sql.close().catch(() => {});
    throw new CannotCheck(`database niet te openen: ${redactUrl(url)}: ${(e instanceof Error ? e.message : String(e)).replaceAll(url, redactUrl(url))}`);
  }
  // Nothing signed into a database of a newer version (src/audit/operator.ts openOperatorDatabase, the same on SQLite).
  if (newer !== null) {
    await sql.close();
    throw new CannotCheck(`${redactUrl(url)}: ${newer}; niets geschreven`);
  }
  // Nor into a move's copy that was never proved (the service does not start on it either).
  if ((await moveState(sql)) === "onbewezen") {
    await sql.close();
    throw new CannotCheck(`${unprovedCopyMelding(redactUrl(url))}; niets geschreven`);
  }
  return sql;
}

export function pgOperatorStore(sql: SQL): OperatorStore {
  return {
    compare: (path, verifiers) => compareWithFilePg(sql, path, verifiers),
    transaction: (writes, work) =>
      writes
        ? // READ COMMITTED: each statement after the lock sees what the lock's previous holder committed.
          // A failure (also at COMMIT) takes back what it appended (appendingTransactionPg).
          appendingTransactionPg(sql, (tx, run) => work(operatorTx(tx, run)))
        : sql.begin("ISOLATION LEVEL REPEATABLE READ READ ONLY", (tx) => work(operatorTx(tx, new RunAppend()))),
  };
}

function operatorTx(tx: SQL, appended: RunAppend): OperatorTx {
  return {
    async oldestEntry(tenantId) {
      const [r] = (await tx`SELECT seq, id, prev_hash, created_at FROM audit_entries WHERE tenant_id = ${tenantId} ORDER BY seq LIMIT 1`) as { seq: string; id: string; prev_hash: string; created_at: string }[];
      return r ? { seq: Number(r.seq), id: Number(r.id), prev_hash: r.prev_hash, created_at: r.created_at } satisfies EntryHead : null;
    },
    chainStart: (tenantId, firstSeq, verifiers) => chainStartPg(tx, tenantId, firstSeq, verifiers),
    entries: (tenantId, afterSeq, take) => readEntriesPg(tx, tenantId, afterSeq, null, (r) => (take(r), true)),
    async retentionAnchor(tenantId) {
      const [r] = (await tx`SELECT seq, hash FROM audit_retention_anchors WHERE tenant_id = ${tenantId}`) as { seq: string; hash: string }[];
      return r ? { seq: Number(r.seq), hash: r.hash } : null;
    },
    async *positions() {
      for await (const rows of copyRows(tx, "SELECT positie FROM audit_anchor_log ORDER BY positie")) yield rows.map((f) => Number(f[0]));
    },
    lockChains: (tenantIds) => (tenantIds.length > 0 ? lockChainsPg(tx, tenantIds) : Promise.resolve()),
    // The anchor file's lock is held already (transaction); taking it again is a no-op.
    syncTail: (path, verifiers) => lockAndSyncTailPg(tx, path, verifiers),
    insertRows: (rows) => insertRowsPg(tx, rows),
    writeRun: (path, keys, lines) => writeRunPg(tx, path, keys, lines, appended),
  };
}
