// What an auditor runs against an installation on PostgreSQL, with the public key(s)
// alone, as on SQLite (src/audit/offline.ts; the rules are there): the whole check of the
// database against its anchor file (verifyInstallationOf), and one tenant's bundle
// (exportBundleFrom). Read only: no migration runs, so a read-only role will do.
import { pgPool } from "./store.ts";
import { SQL } from "bun";
import { compareRowsWithFile, type AnchorComparison, type AnchorRow } from "../audit/anchor-check.ts";
import type { Verifier } from "../audit/note.ts";
import type { EntryRow } from "../audit/chain.ts";
import { exportBundleFrom, verifyAgainstInstallationCheckpointWith, type WitnessVerdict } from "../audit/offline.ts";
import { verifyInstallationOf, type InstallationVerdict } from "../audit/verify-all.ts";
import type { CheckpointRef } from "../audit/verify.ts";
import { chainStartPg, copyRows, copyUnescape, orphanChainsPg, readEntriesPg, verifyTenantsPg } from "./chain.ts";

/** audit_anchor_log in positie order, streamed through COPY in the transaction `tx`. */
export async function* anchorRows(tx: SQL): AsyncGenerator<AnchorRow[]> {
  for await (const rows of copyRows(tx, "SELECT positie, soort, tenant_id, grootte, note FROM audit_anchor_log ORDER BY positie")) {
    yield rows.map((f) => ({
      positie: Number(f[0]),
      soort: f[1] as AnchorRow["soort"],
      tenantId: f[2] === "\\N" ? null : Number(f[2]),
      grootte: Number(f[3]),
      note: copyUnescape(f[4]!),
    }));
  }
}

/** The whole check on PostgreSQL: every tenant, or `o.tenantIds` (and, as always, every tenant the anchor file has checkpoints of). */
/** compareWithFile (src/audit/anchor-check.ts) on PostgreSQL: audit_anchor_log read in one snapshot, then the file. */
export function compareWithFilePg(sql: SQL, anchorPath: string, verifiers: Verifier[]): Promise<AnchorComparison> {
  return sql.begin("ISOLATION LEVEL REPEATABLE READ READ ONLY", (tx) => compareRowsWithFile(anchorRows(tx), anchorPath, verifiers));
}

export async function verifyInstallationPg(url: string, anchorPath: string, verifiers: Verifier[], o: { workers: number; checkpoints?: Map<number, CheckpointRef>; tenantIds?: number[] }): Promise<InstallationVerdict> {
  const sql = pgPool(url, 3);
  try {
    const tenantIds = o.tenantIds ?? ((await sql`SELECT id FROM tenants ORDER BY id`) as { id: number }[]).map((t) => t.id);
    return await verifyInstallationOf(
      {
        compare: () => compareWithFilePg(sql, anchorPath, verifiers),
        verifyChains: (tasks) => verifyTenantsPg(sql, tasks, { parallel: 2, verifiers, ...(o.workers > 0 ? { workers: { url, count: o.workers } } : {}) }),
        oldHeadAnchors: async () => Number(((await sql`SELECT count(*) AS n FROM audit_head_anchors`) as { n: string }[])[0]!.n),
        orphanChains: () => orphanChainsPg(sql),
      },
      tenantIds,
      o.checkpoints,
    );
  } finally {
    await sql.close();
  }
}

/** `verify --checkpoint` on PostgreSQL: the database and anchor file against an installation checkpoint kept off the machine. */
export function verifyAgainstInstallationCheckpointPg(url: string, anchorPath: string, note: string, verifiers: Verifier[]): Promise<WitnessVerdict> {
  return verifyAgainstInstallationCheckpointWith(anchorPath, note, verifiers, (checkpoints) => verifyInstallationPg(url, anchorPath, verifiers, { workers: 0, ...(checkpoints ? { checkpoints } : {}) }));
}

/** One tenant's bundle for an auditor (`nachtwacht export --database-url`), its chain read in one snapshot. */
export async function exportBundlePg(url: string, anchorPath: string, tenantId: number, verifiers: Verifier[], proveSeq?: number): Promise<string[]> {
  if (!Number.isSafeInteger(tenantId)) throw new Error(`tenant id ${tenantId} is not an integer`);
  const sql = pgPool(url, 1);
  try {
    return await exportBundleFrom(
      (size) =>
        sql.begin("ISOLATION LEVEL REPEATABLE READ READ ONLY", async (tx) => {
          const [first] = (await tx`SELECT seq FROM audit_entries WHERE tenant_id = ${tenantId} ORDER BY seq LIMIT 1`) as { seq: string }[];
          const start = await chainStartPg(tx, tenantId, first ? Number(first.seq) : null, verifiers);
          const entries: EntryRow[] = [];
          if (start.ok) await readEntriesPg(tx, tenantId, start.seq, Math.trunc(size), (r) => entries.push(r) > 0);
          return { start, entries };
        }),
      anchorPath,
      tenantId,
      verifiers,
      proveSeq,
    );
  } finally {
    await sql.close();
  }
}
