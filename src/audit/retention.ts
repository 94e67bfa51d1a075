// Retention: deleting what is older than `grens` in small write transactions, so the
// host application's own inserts (one writer at a time in SQLite) never wait long.
//
// Audit entries are deleted per tenant as a PREFIX of the chain, in seq order, up to
// the first entry that is not older than `grens`: an entry with an out-of-order
// timestamp stops the deletion there instead of leaving a hole. Each batch deletes and
// moves the tenant's retention anchor in the same transaction, so a crash between
// batches leaves a chain that still links to its anchor.
import type { Database } from "bun:sqlite";
import { entryHash, GENESIS_HASH } from "./chain.ts";
import type { BreakReason } from "./verify.ts";

const DAY_MS = 24 * 3600 * 1000;

/** now − days × 24 h, as the ISO text the tables store (so `<` is a string compare). */
export function retentionBoundary(now: Date, days: number): string {
  return new Date(now.getTime() - days * DAY_MS).toISOString();
}

export interface RetentionOptions {
  /** Rows per write transaction. */
  batchSize?: number;
  /** Pause between batches, so writers of other processes get the lock. */
  pause?: (batchMs: number) => Promise<void>;
  /** Called after each committed batch (tests simulate a crash with it). */
  afterBatch?: (deletedSoFar: number) => void;
}

/**
 * Long enough for another process's busy handler (which sleeps and retries) to find
 * the lock free, at most half the time spent deleting.
 */
export const defaultPause = (batchMs: number) => Bun.sleep(Math.min(50, Math.max(2, Math.round(batchMs))));

/** The prefix of a tenant's chain stopped before an entry that does not link. */
export interface RetentionStop {
  tenantId: number;
  seq: number;
  entryId: number;
  reden: BreakReason;
}

export interface AuditRetentionResult {
  verwijderd: number;
  /** Tenants whose deletion stopped at a broken link: the evidence is kept. */
  gestopt: RetentionStop[];
}

type EntryRow = [number, number, string, string, string, string, string, string, string];

/**
 * Deletes old audit entries of every tenant that has any. Before an entry is deleted it
 * is checked like the verifier does (hash, link to the previous entry or the anchor,
 * no seq gap): retention must not erase the evidence of tampering, so a tenant's
 * deletion stops before the first entry that does not check out.
 */
export async function deleteOldAuditEntries(
  sqlite: Database,
  grens: string,
  now: Date,
  o: RetentionOptions = {},
): Promise<AuditRetentionResult> {
  const batchSize = o.batchSize ?? 2000;
  const pause = o.pause ?? defaultPause;
  // One index probe per tenant (tenant_id, created_at): tenants with nothing older
  // than grens cost nothing more.
  const oldest = sqlite.query("SELECT min(created_at) AS m FROM audit_entries WHERE tenant_id = ?");
  const tenants = (sqlite.query("SELECT id FROM tenants ORDER BY id").values() as [number][])
    .map(([id]) => id)
    .filter((id) => {
      const m = (oldest.get(id) as { m: string | null }).m;
      return m !== null && m < grens;
    });

  // The chain from its start, in seq order (the WITHOUT ROWID primary key).
  const head = sqlite.query(
    `SELECT seq, id, created_at, actor, action, subject, details, prev_hash, hash
     FROM audit_entries WHERE tenant_id = ? ORDER BY seq LIMIT ?`,
  );
  const anchorOf = sqlite.query("SELECT seq, hash FROM audit_retention_anchors WHERE tenant_id = ?");
  const del = sqlite.query("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= ?");
  const upsertAnchor = sqlite.query(
    `INSERT INTO audit_retention_anchors (tenant_id, seq, hash, bijgewerkt) VALUES (?, ?, ?, ?)
     ON CONFLICT (tenant_id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash, bijgewerkt = excluded.bijgewerkt`,
  );

  let verwijderd = 0;
  const gestopt: RetentionStop[] = [];

  /** One batch of one tenant; returns rows deleted and whether the tenant is done. */
  const batch = sqlite.transaction((tenantId: number): { n: number; done: boolean } => {
    const anchor = anchorOf.get(tenantId) as { seq: number; hash: string } | null;
    let prevSeq = anchor?.seq ?? 0;
    let prevHash = anchor?.hash ?? GENESIS_HASH;
    let n = 0;
    let done = false;
    let rows = 0;
    // At most batchSize rows: reading them as one array is bounded.
    for (const r of head.values(tenantId, batchSize) as EntryRow[]) {
      rows++;
      const [seq, id, createdAt, actor, action, subject, details, rowPrevHash, hash] = r;
      if (createdAt >= grens) {
        done = true;
        break;
      }
      const reden: BreakReason | null =
        entryHash({ tenantId, seq, createdAt, actor, action, subject, details, prevHash: rowPrevHash }) !== hash
          ? "hash-afwijkend"
          : n === 0 && (seq !== prevSeq + 1 || rowPrevHash !== prevHash)
            ? "anker-afwijkend"
            : seq !== prevSeq + 1
              ? "volgnummer-gat"
              : rowPrevHash !== prevHash
                ? "koppeling-verbroken"
                : null;
      if (reden) {
        gestopt.push({ tenantId, seq, entryId: id, reden });
        done = true;
        break;
      }
      n++;
      prevSeq = seq;
      prevHash = hash;
    }
    if (rows < batchSize) done = true;
    if (n > 0) {
      del.run(tenantId, prevSeq);
      upsertAnchor.run(tenantId, prevSeq, prevHash, now.toISOString());
    }
    return { n, done };
  });

  for (const tenantId of tenants) {
    for (;;) {
      const t0 = performance.now();
      const { n, done } = batch.immediate(tenantId);
      verwijderd += n;
      if (n > 0) o.afterBatch?.(verwijderd);
      if (done) break;
      await pause(performance.now() - t0);
    }
  }
  return { verwijderd, gestopt };
}

/** Deletes login attempts older than grens, in batches by the tijdstip index. */
export async function deleteOldLoginAttempts(sqlite: Database, grens: string, o: RetentionOptions = {}): Promise<number> {
  const batchSize = o.batchSize ?? 5000;
  const pause = o.pause ?? defaultPause;
  const del = sqlite.query(
    `DELETE FROM login_attempts WHERE id IN (
       SELECT id FROM login_attempts WHERE tijdstip < ? ORDER BY tijdstip LIMIT ?)`,
  );
  const batch = sqlite.transaction(() => del.run(grens, batchSize).changes);
  let verwijderd = 0;
  for (;;) {
    const t0 = performance.now();
    const n = batch.immediate();
    verwijderd += n;
    if (n > 0) o.afterBatch?.(verwijderd);
    if (n < batchSize) break;
    await pause(performance.now() - t0);
  }
  return verwijderd;
}
