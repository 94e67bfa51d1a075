// A whole installation on PostgreSQL checked against its anchor file, as on SQLite
// (src/audit/verify-all.ts verifyInstallationOf holds the rule): the file against the
// database's copy of it, then every chain against the file's checkpoints. Read only: it
// runs no migration, so an auditor may run it with a read-only role.
import { SQL } from "bun";
import { compareRowsWithFile, type AnchorRow } from "../audit/anchor-check.ts";
import type { Verifier } from "../audit/note.ts";
import { verifyInstallationOf, type InstallationVerdict } from "../audit/verify-all.ts";
import { copyRows, copyUnescape, verifyTenantsPg } from "./chain.ts";

/** audit_anchor_log in positie order, streamed through COPY in the transaction `tx`. */
async function* anchorRows(tx: SQL): AsyncGenerator<AnchorRow[]> {
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

export async function verifyInstallationPg(url: string, anchorPath: string, verifiers: Verifier[], o: { workers: number }): Promise<InstallationVerdict> {
  const sql = new SQL(url, { max: 3 });
  try {
    const tenantIds = ((await sql`SELECT id FROM tenants ORDER BY id`) as { id: number }[]).map((t) => t.id);
    return await verifyInstallationOf(
      {
        compare: () => sql.begin("ISOLATION LEVEL REPEATABLE READ READ ONLY", (tx) => compareRowsWithFile(anchorRows(tx), anchorPath, verifiers)),
        verifyChains: (tasks) => verifyTenantsPg(sql, tasks, { parallel: 2, verifiers, ...(o.workers > 0 ? { workers: { url, count: o.workers } } : {}) }),
        oldHeadAnchors: async () => Number(((await sql`SELECT count(*) AS n FROM audit_head_anchors`) as { n: string }[])[0]!.n),
      },
      tenantIds,
    );
  } finally {
    await sql.close();
  }
}
