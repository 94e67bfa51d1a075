// audit-anker's work on PostgreSQL, by the rules of src/audit/anchoring.ts (they live
// there, for any store): the anchor file against its rows first (a problem stops the
// run), then per tenant its tree extended to its head in one snapshot (TreeExtension),
// every new entry checked; then, in one transaction, the file's crash tail copied in,
// the tenants' checkpoints and an installation checkpoint over the whole file appended
// (fsynced) and copied into audit_anchor_log. The anchor file's appenders are ordered by
// the advisory lock audit-retentie takes too (src/pg/anchor-file.ts).
import type { SQL } from "bun";
import { anchorTenants, appendRun, installationRangeFrom, LARGEST_INSTALLATION_SQL, NEWEST_INSTALLATION_SQL, runLines, settledByHead, throwIfProblem, TreeExtension, type AnchoringResult, type InstallationRow, type Refusal } from "../audit/anchoring.ts";
import type { CompactRange } from "../audit/merkle.ts";
import type { Verifier } from "../audit/note.ts";
import type { Keys } from "../audit/records.ts";
import type { CheckpointRef } from "../audit/verify.ts";
import type { RunAppend, StoredLine } from "../audit/anchor-file.ts";
import { appendingTransactionPg, insertRowsPg, lockAndSyncTailPg } from "./anchor-file.ts";
import { chainStartPg, orphanChainsPg, readEntriesPg } from "./chain.ts";
import { compareWithFilePg } from "./offline.ts";

export async function anchorAllPg(sql: SQL, path: string, keys: Keys): Promise<AnchoringResult> {
  const cmp = await compareWithFilePg(sql, path, keys.verifiers);
  throwIfProblem(cmp.probleem);
  // Every tenant, and every chain whose tenant's row is gone (ORPHAN_CHAINS_SQL); once each
  // (a row deleted between the two reads is in both).
  const tenants = [
    ...new Set([...((await sql`SELECT id FROM tenants`) as { id: number }[]).map((t) => t.id), ...(await orphanChainsPg(sql))]),
  ].sort((a, b) => a - b);
  const { lines, refused, checkpoints, unchanged } = await anchorTenants(tenants, cmp, keys, (tenantId, prev) => extendTenantPg(sql, tenantId, prev, keys.verifiers));

  // A failure (also at COMMIT) takes the appended lines back (appendingTransactionPg).
  return appendingTransactionPg(sql, async (tx, appended) => {
    const hersteld = await lockAndSyncTailPg(tx, path, keys.verifiers);
    const run = await writeRunPg(tx, path, keys, lines, appended);
    return { checkpoints, unchanged, refused, installatie: run.installatie, hersteld, herbouwd: run.herbouwd };
  });
}

/**
 * writeRun (src/audit/anchoring.ts) on PostgreSQL, inside the caller's transaction that
 * holds the anchor file's lock (appendingTransactionPg, whose `appended` it takes):
 * `lines` and an installation checkpoint over the whole file, appended (fsynced) and
 * inserted. audit-anker's run, and the operator's (src/pg/operator.ts).
 */
export async function writeRunPg(tx: SQL, path: string, keys: Keys, lines: StoredLine[], appended: RunAppend): Promise<{ installatie: string | null; herbouwd: boolean }> {
  const [inst] = (await tx.unsafe(NEWEST_INSTALLATION_SQL)) as { positie: string; note: string; grootte: string; bereik: string | null }[];
  const installRow: InstallationRow | null = inst ? { positie: Number(inst.positie), note: inst.note, grootte: Number(inst.grootte), bereik: inst.bereik } : null;
  const [largestRow] = (await tx.unsafe(LARGEST_INSTALLATION_SQL)) as { n: string | null }[];
  const largest = largestRow?.n ?? 0;
  const run = runLines(installationRangeFrom(installRow, path, keys.verifiers), Number(largest), keys, lines);
  if (run.all.length > 0) await insertRowsPg(tx, appendRun(path, run.all, appended));
  return { installatie: run.installatie, herbouwd: run.herbouwd };
}

/** One tenant's tree extended to its head, read in one snapshot (TreeExtension). Null when nothing changed. */
async function extendTenantPg(sql: SQL, tenantId: number, prev: CheckpointRef | null, verifiers: Verifier[]): Promise<{ range: CompactRange; basis: number } | { refusal: Refusal } | null> {
  return sql.begin("ISOLATION LEVEL REPEATABLE READ READ ONLY", async (tx) => {
    const [ends] = (await tx`SELECT min(seq) AS first, max(seq) AS head FROM audit_entries WHERE tenant_id = ${tenantId}`) as { first: string | null; head: string | null }[];
    const first = ends?.first == null ? null : Number(ends.first);
    const settled = settledByHead(tenantId, prev, first === null ? null : Number(ends!.head));
    if (settled !== undefined) return settled;
    let stored: string | null = null;
    if (prev) {
      const [row] = (await tx`
        SELECT bereik FROM audit_anchor_log WHERE tenant_id = ${tenantId} AND soort IN ('checkpoint', 'herstel') AND grootte = ${prev.size} AND bereik IS NOT NULL
        ORDER BY positie DESC LIMIT 1`) as { bereik: string }[];
      stored = row?.bereik ?? null;
    }
    const ext = new TreeExtension(tenantId, first!, prev, await chainStartPg(tx, tenantId, first!, verifiers), stored);
    if (ext.reads) await readEntriesPg(tx, tenantId, ext.from, null, (r) => ext.push(r));
    return ext.result();
  });
}
