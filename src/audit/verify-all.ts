// Verification of a whole installation — the database's chains against the anchor
// file — as the nightly audit-verificatie and the offline `verify` command both do it.
import type { Database } from "bun:sqlite";
import { compareWithFile, type AnchorComparison, type FileProblem, type RowReason } from "./anchor-check.ts";
import type { Verifier } from "./note.ts";
import { verifyTenants, type TenantTask } from "./verify-parallel.ts";
import type { BreakReason, CheckpointRef, TenantChainResult } from "./verify.ts";
import { orphanChains } from "./chain.ts";

export interface TenantVerdict {
  tenantId: number;
  intact: boolean;
  aantalEntries: number;
  fout?: { seq: number; entryId: number | null; reden: BreakReason | RowReason };
}

export interface InstallationVerdict {
  tenants: TenantVerdict[];
  /** The first problem of the anchor file as a whole. */
  probleem?: FileProblem;
  regels: number;
  waarschuwingen: string[];
}

/** A chain that does not reach a checkpoint from the file's tail: the database lost a run. */
const LOST_REASONS = new Set<string>(["kop-ontbreekt", "checkpoint-afwijkend"]);

/**
 * The file-level problem a tenant's break points to, if any: a chain that does not reach
 * a head only the file's tail holds (a run whose commit the database lacks) means the
 * database is older than the file.
 */
export function databaseBehindFile(tenantId: number, reden: string, cmp: Pick<AnchorComparison, "checkpoints">): FileProblem | undefined {
  if (!LOST_REASONS.has(reden) || !cmp.checkpoints.get(tenantId)?.inTail) return undefined;
  return {
    reden: "database-teruggezet",
    positie: null,
    toelichting: `tenant ${tenantId} haalt een checkpoint niet dat alleen het bestand nog kent: de database is ouder dan het bestand`,
  };
}

export interface VerifyAllOptions {
  workers: number;
  /** Check the chains against these checkpoints instead of the file's newest (verify --checkpoint). */
  checkpoints?: Map<number, CheckpointRef>;
}

/**
 * The standing warnings for what an operator accepted by hand (docs/audit-chain.md):
 * every adoption and restore acceptance the anchor file holds, for as long as it holds
 * them. Never a silent pass: the verdict is 200, but it says what was taken on trust.
 */
export function operatorWarnings(cmp: Pick<AnchorComparison, "adopties" | "herstellingen">): string[] {
  const out: string[] = [];
  for (const a of cmp.adopties) {
    out.push(
      `tenant ${a.tenantId} is op ${a.tijdstip} geadopteerd vanaf seq ${a.seq + 1}: de entries 1 t/m ${a.seq} zijn door een eerdere versie verwijderd ` +
        `zonder ondertekend retentierecord en zijn niet te controleren (adoptierecord op positie ${a.positie}).`,
    );
  }
  for (const h of cmp.herstellingen) {
    out.push(
      `tenant ${h.tenantId}: op ${h.tijdstip} is een teruggezette database geaccepteerd; de keten ging terug van seq ${h.van} naar ${h.naar}` +
        (h.naar < h.van ? `; de ondertekende entries ${h.naar + 1} t/m ${h.van} zijn verloren` : `; de ondertekende keten tot seq ${h.van} is vervangen door die uit de database`) +
        ` (herstelrecord op positie ${h.positie}).`,
    );
  }
  return out;
}

export async function verifyInstallation(
  sqlite: Database,
  dbPath: string,
  anchorPath: string,
  tenantIds: number[],
  verifiers: Verifier[],
  o: VerifyAllOptions,
): Promise<InstallationVerdict> {
  return verifyInstallationOf(
    {
      compare: () => compareWithFile(dbPath, anchorPath, verifiers),
      // Each chain is streamed (verify.ts): memory does not grow with its length.
      verifyChains: (tasks) => verifyTenants(sqlite, dbPath, tasks, o.workers, verifiers.map((v) => v.verifierKey)),
      oldHeadAnchors: async () => (sqlite.query("SELECT count(*) AS n FROM audit_head_anchors").get() as { n: number }).n,
      orphanChains: async () => orphanChains(sqlite),
    },
    tenantIds,
    o.checkpoints,
  );
}

/** What verifyInstallationOf needs of a store (SQLite above, PostgreSQL in src/pg/offline.ts). */
export interface InstallationSource {
  /** The anchor file against the store's copy of it. */
  compare(): Promise<AnchorComparison>;
  /** Every task's chain against its checkpoint. */
  verifyChains(tasks: TenantTask[]): Promise<Map<number, TenantChainResult>>;
  /** Rows of audit_head_anchors (an earlier version's, no longer trusted). */
  oldHeadAnchors(): Promise<number>;
  /** Tenants with audit entries but no row in tenants (ORPHAN_CHAINS_SQL). */
  orphanChains(): Promise<number[]>;
}

/** The rule of a whole installation's verdict, for any store. */
export async function verifyInstallationOf(src: InstallationSource, tenantIds: number[], checkpoints?: VerifyAllOptions["checkpoints"]): Promise<InstallationVerdict> {
  // The anchor file is the authority: its rows in the database must equal its lines, and
  // each tenant's newest checkpoint in it is what the chain must still reach.
  const cmp = await src.compare();
  // That pass leaves a short-lived object or two per line of the file (a line per tenant
  // per audit-anker run); collected now, before the chains' worker threads start, not
  // while they run: the peak RSS at L came down from 148–151 to 124–128 MB, and its
  // growth from a fifth of the data from 18–24 to 5–12 MB (docs/performance.md, round 13).
  // Synchronous: the event loop waits for it once per run (about 15–20 ms at L); the
  // asynchronous Bun.gc(false) left the peak where it was (23.7 MB growth).
  Bun.gc(true);
  const targets = checkpoints ?? cmp.checkpoints;
  // A tenant the file has checkpoints for, or whose entries are there, is checked even
  // when its row is gone from the tenants table: deleting that row must not take its
  // chain out of the check.
  const orphans = await src.orphanChains();
  // And every tenant id a row problem was filed under, whether or not it has a chain.
  const ids = [...new Set([...tenantIds, ...targets.keys(), ...orphans, ...cmp.perTenant.keys()])].sort((a, b) => a - b);
  const tasks = ids.map((tenantId) => {
    const c = targets.get(tenantId);
    return { tenantId, checkpoint: c ? { size: c.size, root: c.root, basis: c.basis ?? 0 } : null };
  });
  const checked = await src.verifyChains(tasks);

  let probleem = cmp.probleem;
  const tenants: TenantVerdict[] = [];
  for (const tenantId of ids) {
    const r = checked.get(tenantId)!;
    const row = cmp.perTenant.get(tenantId);
    // The chain's own break first; else a row of the database copy that does not match the file.
    const fout = r.fout ?? (row ? { seq: row.seq, entryId: null, reden: row.reden } : undefined);
    if (r.fout && !checkpoints) probleem ??= databaseBehindFile(tenantId, r.fout.reden, cmp);
    tenants.push({ tenantId, intact: !fout, aantalEntries: r.aantalEntries, ...(fout ? { fout } : {}) });
  }
  const waarschuwingen = [...cmp.waarschuwingen, ...operatorWarnings(cmp)];
  for (const id of orphans) waarschuwingen.push(`tenant ${id} heeft audit-entries maar geen rij in de tabel tenants (buiten nachtwacht om verwijderd?); de keten wordt gewoon gecontroleerd.`);
  // Head anchors of earlier versions (HMAC-signed or unsigned) are retired: never trusted, only counted.
  if (cmp.oudeRegels > 0) waarschuwingen.push(`${cmp.oudeRegels} regel(s) uit een eerdere versie (HMAC-kopankers) in het ankerbestand worden niet meer vertrouwd.`);
  const oldRows = await src.oldHeadAnchors();
  if (oldRows > 0) waarschuwingen.push(`${oldRows} kop-anker(s) uit een eerdere versie (HMAC) in de database worden niet meer vertrouwd; ondertekende checkpoints vervangen ze.`);
  return { tenants, ...(probleem ? { probleem } : {}), regels: cmp.regels, waarschuwingen };
}
