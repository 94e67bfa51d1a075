// audit-anker's work on PostgreSQL, by the rules of src/audit/anchoring.ts (they live
// there, for any store): the anchor file against its rows first (a problem stops the
// run), then per tenant its tree extended to its head in one snapshot (TreeExtension),
// every new entry checked; then, in one transaction, the file's crash tail copied in,
// the tenants' checkpoints and an installation checkpoint over the whole file appended
// (fsynced) and copied into audit_anchor_log. The anchor file's appenders are ordered by
// the advisory lock audit-retentie takes too (src/pg/audit-retention.ts).
import type { SQL } from "bun";
import { endOf } from "../audit/anchor-file.ts";
import { compareRowsWithFile } from "../audit/anchor-check.ts";
import { anchorTenants, appendRun, installationRangeFrom, runLines, settledByHead, tailRows, throwIfProblem, TreeExtension, type AnchoringResult, type InstallationRow, type Refusal } from "../audit/anchoring.ts";
import type { CompactRange } from "../audit/merkle.ts";
import type { Verifier } from "../audit/note.ts";
import type { AnchorLine, Keys } from "../audit/records.ts";
import { chainStartFromRecords, type CheckpointRef } from "../audit/verify.ts";
import { ANCHOR_FILE_LOCK, insertRowsPg } from "./audit-retention.ts";
import { copyRows, ENTRY_COLUMNS, entryRowOf, startRecords } from "./chain.ts";
import { anchorRows } from "./offline.ts";

export async function anchorAllPg(sql: SQL, path: string, keys: Keys): Promise<AnchoringResult> {
  const cmp = await sql.begin("ISOLATION LEVEL REPEATABLE READ READ ONLY", (tx) => compareRowsWithFile(anchorRows(tx), path, keys.verifiers));
  throwIfProblem(cmp.probleem);
  const tenants = ((await sql`SELECT id FROM tenants ORDER BY id`) as { id: number }[]).map((t) => t.id);
  const { lines, refused, checkpoints, unchanged } = await anchorTenants(tenants, cmp, keys, (tenantId, prev) => extendTenantPg(sql, tenantId, prev, keys.verifiers));

  return sql.begin(async (tx) => {
    await tx`SELECT pg_advisory_xact_lock(${ANCHOR_FILE_LOCK}, 0)`;
    const [last] = (await tx`SELECT positie, soort, tenant_id, note FROM audit_anchor_log ORDER BY positie DESC LIMIT 1`) as { positie: string; soort: AnchorLine["soort"]; tenant_id: number | null; note: string }[];
    const tail = tailRows(path, endOf(last ? { positie: Number(last.positie), soort: last.soort, tenantId: last.tenant_id, note: last.note } : null), keys.verifiers);
    await insertRowsPg(tx, tail);
    const [inst] = (await tx`SELECT positie, note, grootte, bereik FROM audit_anchor_log WHERE soort = 'installatie' ORDER BY positie DESC LIMIT 1`) as { positie: string; note: string; grootte: string; bereik: string | null }[];
    const installRow: InstallationRow | null = inst ? { positie: Number(inst.positie), note: inst.note, grootte: Number(inst.grootte), bereik: inst.bereik } : null;
    const [{ n: largest }] = (await tx`SELECT coalesce(max(grootte), 0)::bigint AS n FROM audit_anchor_log WHERE soort = 'installatie'`) as [{ n: string }];
    const run = runLines(installationRangeFrom(installRow, path, keys.verifiers), Number(largest), keys, lines);
    if (run.all.length > 0) await insertRowsPg(tx, appendRun(path, run.all));
    return { checkpoints, unchanged, refused, installatie: run.installatie, hersteld: tail.length, herbouwd: run.herbouwd };
  });
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
    const start = chainStartFromRecords((await startRecords(tx, [tenantId])).get(tenantId) ?? [], tenantId, first!, verifiers);
    const ext = new TreeExtension(tenantId, first!, prev, start, stored);
    if (ext.reads) {
      // Read to the end even after a refusal: breaking off a COPY cancels the statement
      // and aborts the snapshot's transaction. COPY takes no bind parameters: the numbers
      // are integers from the database.
      let reading = true;
      for await (const rows of copyRows(tx, `SELECT ${ENTRY_COLUMNS} FROM audit_entries WHERE tenant_id = ${tenantId} AND seq > ${ext.from} ORDER BY seq`)) {
        for (const r of rows) if (reading) reading = ext.push(entryRowOf(r, 0));
      }
    }
    return ext.result();
  });
}
