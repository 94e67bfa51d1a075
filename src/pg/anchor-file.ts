// The anchor file's copy in PostgreSQL (audit_anchor_log), as src/audit/anchor-file.ts
// and syncTail (src/audit/anchoring.ts) keep it on SQLite: the file is the authority,
// appended to (fsynced) inside the transaction that inserts its rows.
import type { SQL } from "bun";
import { endOf, logUndoFailed, RunAppend, takeBack, type StoredLine } from "../audit/anchor-file.ts";
import { tailRows } from "../audit/anchoring.ts";
import type { Verifier } from "../audit/note.ts";
import type { AnchorLine } from "../audit/records.ts";

/**
 * Key 1 of the lock that orders appenders of the anchor file: pg_advisory_xact_lock(ANCHOR_FILE_LOCK, 0).
 * Beside CHAIN_LOCK (src/pg/chain.ts), in nachtwacht's own range.
 */
export const ANCHOR_FILE_LOCK = 0x6e7702;

/**
 * Inside the caller's transaction, before it appends: takes the anchor file's lock (SQLite's
 * write lock does this there), then copies the file's tail — records after the database's
 * last row, left by a crash between an append's fsync and its COMMIT — into
 * audit_anchor_log. How many rows it copied.
 */
export async function lockAndSyncTailPg(tx: SQL, path: string, verifiers: Verifier[]): Promise<number> {
  await lockAnchorFilePg(tx);
  const tail = tailRows(path, await databaseEndPg(tx), verifiers);
  await insertRowsPg(tx, tail);
  return tail.length;
}

/** The anchor file's lock, until the transaction ends. */
async function lockAnchorFilePg(tx: SQL): Promise<void> {
  await tx`SELECT pg_advisory_xact_lock(${ANCHOR_FILE_LOCK}, 0)`;
}

/** databaseEnd (src/audit/anchor-file.ts) on PostgreSQL: where the file's tail starts. */
async function databaseEndPg(tx: SQL): Promise<number> {
  const [last] = (await tx`SELECT positie, soort, tenant_id, note FROM audit_anchor_log ORDER BY positie DESC LIMIT 1`) as { positie: string; soort: AnchorLine["soort"]; tenant_id: number | null; note: string }[];
  return endOf(last ? { positie: Number(last.positie), soort: last.soort, tenantId: last.tenant_id, note: last.note } : null);
}

/**
 * The transaction of a run that appends to the anchor file, on PostgreSQL (appendingTransaction
 * of src/audit/anchor-file.ts): `work` with the anchor file's lock taken; on a failure (also at
 * COMMIT, or a dropped connection) the run's lines taken back (undoFailedAppendPg) and the
 * failure thrown.
 */
export async function appendingTransactionPg<T>(sql: SQL, work: (tx: SQL, run: RunAppend) => Promise<T>): Promise<T> {
  const run = new RunAppend();
  try {
    return await sql.begin(async (tx) => {
      await lockAnchorFilePg(tx);
      return work(tx, run);
    });
  } catch (e) {
    await undoFailedAppendPg(sql, run);
    throw e;
  }
}

/**
 * takeBack (src/audit/anchor-file.ts) after a failed transaction, in a new one (a new
 * connection when the old one dropped) holding the anchor file's lock. Never throws: its
 * own failure is logged, the caller reports the one it follows.
 */
export async function undoFailedAppendPg(sql: SQL, run: RunAppend): Promise<void> {
  if (run.appended === null) return;
  try {
    await sql.begin(async (tx) => {
      await lockAnchorFilePg(tx);
      takeBack(run, await databaseEndPg(tx));
    });
  } catch (e) {
    logUndoFailed(run, e);
  }
}

/** Anchor-file lines into audit_anchor_log (inside the caller's transaction). */
export async function insertRowsPg(tx: SQL, rows: StoredLine[]): Promise<void> {
  for (let i = 0; i < rows.length; i += 1000) {
    const values = rows.slice(i, i + 1000).map((r) => ({ positie: r.positie, soort: r.soort, tenant_id: r.tenantId, grootte: r.grootte, note: r.note, bereik: r.bereik }));
    await tx`INSERT INTO audit_anchor_log ${tx(values)}`;
  }
}
