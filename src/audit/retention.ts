// Retention: deleting what is older than `grens` in short write transactions, so the
// host application's own inserts (one writer at a time in SQLite) never wait long.
//
// Audit entries are deleted per tenant as a PREFIX of the chain, in seq order, up to
// the first entry that is not older than `grens`: an entry with an out-of-order
// timestamp stops the deletion there instead of leaving a hole. Each batch deletes and
// moves the retention anchor of every tenant it touched in the same transaction, so a
// crash between batches leaves chains that still link to their anchors.
//
// How the batches are paced (bench/run.ts measures it at 5 million rows):
// - A batch is one write transaction of chunks: it takes chunk after chunk until the
//   next, with the COMMIT of all it deleted (at the largest cost per row of the last few
//   COMMITs), would end past the target lock time: its length is bounded by the clock,
//   not predicted from a row count. Each chunk is sized to take its share of the target,
//   adapting to the machine and the data.
// - Right after each COMMIT the batch's pages are copied out of the WAL, outside the
//   write lock: by the service's checkpointer thread at once (afterCommit,
//   Deps.checkpointNow), or, where no such thread runs, by the job itself after a turn of
//   the event loop (automatic checkpoints are off on this connection meanwhile). Left to
//   the automatic checkpoint, the next writer's COMMIT — the host application's — would
//   copy them, fsync included, and wait (435–440 ms seen, docs/performance.md).
// - The gap is long enough for a writer that waited through the whole batch: SQLite's
//   busy handler sleeps 1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100, 100 … ms between
//   tries, so after a 30 ms batch it tries again within 15 ms, after up to 128 ms
//   within 25 ms, later within 50 or 100 ms (gapAfter()). A batch that ends before a
//   writer's try at 128 ms lets it in within about 130 ms; one that overran would keep
//   it waiting until 178 ms, which is why the budget is a deadline.
import type { Database } from "bun:sqlite";
import { insertRows, type StoredLine } from "./anchor-file.ts";
import type { RowReason } from "./anchor-check.ts";
import { appendRun, syncTail, throwIfProblem } from "./anchoring.ts";
import { retryWhenBusy } from "../db.ts";
import { verifyInstallation, type InstallationVerdict } from "./verify-all.ts";
import { entriesAfter, rowHash, type EntryRow } from "./chain.ts";
import type { CompactRange } from "./merkle.ts";
import { signRetentionRecord, type Keys, type RetentionRecord } from "./records.ts";
import { chainStart, linkBreak, type BreakReason, type ChainStart } from "./verify.ts";

export { retentionBoundary } from "../time.ts";

/** SQLite's default busy handler: the moments (ms after the first failed try) it tries again. */
const BUSY_RETRIES_MS = [0, 1, 3, 8, 18, 33, 53, 78, 103, 128, 178, 228];
/** Margin for a woken writer to start its transaction before the job takes the lock again (5 ms before round 4; 3 ms measured as enough, docs/performance.md). */
const GAP_MARGIN_MS = 3;

/**
 * The free time after a batch that held the write lock for `lockMs`: a writer that
 * started waiting during the batch has waited at most `lockMs`, so its next try comes
 * within the busy handler's interval at that point (25 ms up to 128 ms, later 50, 100).
 */
export function gapAfter(lockMs: number): number {
  let interval = 100;
  for (let i = 1; i < BUSY_RETRIES_MS.length; i++) {
    if (lockMs < BUSY_RETRIES_MS[i]!) {
      interval = BUSY_RETRIES_MS[i]! - BUSY_RETRIES_MS[i - 1]!;
      break;
    }
  }
  return interval + GAP_MARGIN_MS;
}

export interface RetentionOptions {
  /** Fixed rows per write transaction, in one chunk (audit: at least one per tenant of a group); without it the batch is paced by the clock. */
  batchSize?: number;
  /** Replaces the gap between batches (tests); gets the batch's lock time in ms. */
  pause?: (batchMs: number) => Promise<void>;
  /** Called after each committed batch (tests simulate a crash with it). */
  afterBatch?: (deletedSoFar: number) => void;
  /**
   * Called right after each COMMIT (Deps.checkpointNow): the batch's pages are copied out
   * of the WAL by the checkpointer's thread before a waiting writer's COMMIT would do it
   * itself — with the fsync, inside that writer's transaction.
   */
  afterCommit?: () => void;
  /** The clock batches are paced by, ms (tests); performance.now by default. */
  clock?: () => number;
  /** What each batch cost (the benchmark's profile). */
  onBatch?: (b: { rows: number; chunks: number; lockMs: number; commitMs: number; checkpointMs: number }) => void;
}

export interface Pacing {
  /**
   * Write-lock time a batch may take, its COMMIT included, ms. The first batch's COMMIT
   * is a guess (a chunk's share of the target for the first chunk's rows: at L 14× what
   * it costs); after that it is measured.
   */
  targetMs: number;
  /**
   * How many chunks a batch aims at: each is sized to take targetMs / chunks. With one,
   * the batch is one chunk sized to the whole target, and its COMMIT comes on top.
   */
  chunks: number;
  /** Rows of the first chunk, and the bounds of the adapted chunk size. */
  initial: number;
  min: number;
  max: number;
  /** SQLite page cache for the run (KiB), when the default 2 MB makes each batch spill. */
  cacheKib?: number;
}

/** Per connection: its page cache before any pin, and the pins in force, oldest first. */
const cachePins = new WeakMap<Database, { base: number; pins: { size: number }[] }>();

/**
 * Sets the connection's page cache to `kib` until the returned function is called; then
 * the newest pin still in force applies, or, when none is, the size before the first. The
 * service's one connection is shared by jobs that may overlap (audit and login retention
 * each pin their own), and each restoring what it found would leave the cache at the
 * size of whichever ended last.
 */
export function pinCacheSize(sqlite: Database, kib: number): () => void {
  let state = cachePins.get(sqlite);
  if (state === undefined) {
    state = { base: (sqlite.query("PRAGMA cache_size").get() as { cache_size: number }).cache_size, pins: [] };
    cachePins.set(sqlite, state);
  }
  const pin = { size: -kib };
  state.pins.push(pin);
  sqlite.run(`PRAGMA cache_size = ${pin.size}`);
  return () => {
    const s = state!;
    const i = s.pins.indexOf(pin);
    if (i < 0) return;
    s.pins.splice(i, 1);
    sqlite.run(`PRAGMA cache_size = ${s.pins.at(-1)?.size ?? s.base}`);
    if (s.pins.length === 0) cachePins.delete(sqlite);
  };
}

/** How many batches' COMMIT costs the estimate takes the largest of. */
const COMMITS_REMEMBERED = 4;

/**
 * The next chunk size: scaled towards its share of the target lock time (square root, so
 * one slow chunk on a busy machine does not halve the next), growing at most 1.5× a step.
 */
export function nextChunkSize(size: number, chunkMs: number, p: Pacing): number {
  const factor = Math.min(1.5, Math.sqrt(p.targetMs / p.chunks / Math.max(chunkMs, 0.1)));
  return Math.max(p.min, Math.min(p.max, Math.round(size * factor)));
}

/**
 * Runs `chunk` (deleting at most `rows` rows; done when nothing older is left) in write
 * transactions of as many chunks as fit the target lock time, checkpointing after each
 * transaction and pausing between them as described above.
 */
async function inBatches(
  sqlite: Database,
  o: RetentionOptions,
  pacing: Pacing,
  chunk: (rows: number) => { n: number; done: boolean },
  /** The caller's own progress, kept in step with what is committed (a batch that throws rolls back). */
  progress?: { save(): void; restore(): void },
): Promise<number> {
  const now = o.clock ?? (() => performance.now());
  let rows = o.batchSize ?? pacing.initial;
  // What a row costs the COMMIT (writing the batch's pages to the WAL: a quarter to a
  // third of a batch at L). It swings from batch to batch (13–51 ms for similar batches
  // at L), so a batch plans with the largest of the last COMMITS_REMEMBERED; until one was
  // measured, a chunk's share of the target for the first chunk's rows.
  let commitMsPerRow = pacing.targetMs / pacing.chunks / rows;
  const recentCommits: number[] = [];
  /** One batch: chunks until the next, with its share of the COMMIT, would end past the target. */
  const batch = sqlite.transaction(() => {
    const t0 = now();
    let n = 0;
    let chunks = 0;
    for (;;) {
      const c0 = now();
      const r = chunk(rows);
      const chunkMs = now() - c0;
      n += r.n;
      chunks++;
      if (r.done) return { n, chunks, done: true, bodyMs: now() - t0 };
      if (o.batchSize !== undefined) return { n, chunks, done: false, bodyMs: now() - t0 };
      const msPerRow = chunkMs / rows;
      rows = nextChunkSize(rows, chunkMs, pacing);
      // The next chunk (in this batch or the next) at about this one's pace per row, then the COMMIT of all of it.
      const elapsed = now() - t0;
      if (elapsed + (msPerRow * rows + commitMsPerRow * (n + rows)) * 1.25 > pacing.targetMs) return { n, chunks, done: false, bodyMs: elapsed };
    }
  });
  let verwijderd = 0;
  const { wal_autocheckpoint: autoCheckpoint } = sqlite.query("PRAGMA wal_autocheckpoint").get() as { wal_autocheckpoint: number };
  sqlite.run("PRAGMA wal_autocheckpoint = 0");
  const unpinCache = pacing.cacheKib === undefined ? () => {} : pinCacheSize(sqlite, pacing.cacheKib);
  try {
    for (;;) {
      // The batch waits for another process's write lock without blocking the event loop.
      let lockMs = 0;
      const { n, chunks, done, bodyMs } = await retryWhenBusy(sqlite, () => {
        const t0 = now();
        try {
          const r = batch.immediate();
          lockMs = now() - t0;
          return r;
        } catch (e) {
          // Rolled back (or never begun): the caller's progress goes back to the last COMMIT.
          progress?.restore();
          throw e;
        }
      });
      progress?.save();
      o.afterCommit?.();
      const t0 = now() - lockMs;
      // BEGIN is instant once the lock is had; the rest after the body is the COMMIT.
      const commitMs = Math.max(0, lockMs - bodyMs);
      if (n > 0) {
        recentCommits.push(commitMs / n);
        if (recentCommits.length > COMMITS_REMEMBERED) recentCommits.shift();
        commitMsPerRow = Math.max(...recentCommits);
      }
      verwijderd += n;
      const c0 = now();
      if (n > 0) {
        o.afterBatch?.(verwijderd);
        // PASSIVE: copies what it can, never waits for (or blocks) another writer. After
        // a turn of the event loop: batch and checkpoint back to back held it 87–117 ms.
        // The service's connection has no automatic checkpoints (src/checkpointer.ts does them).
        if (autoCheckpoint > 0) {
          await new Promise((r) => setImmediate(r));
          sqlite.run("PRAGMA wal_checkpoint(PASSIVE)");
        }
      }
      o.onBatch?.({ rows: n, chunks, lockMs, commitMs, checkpointMs: now() - c0 });
      if (done) break;
      if (o.pause) await o.pause(lockMs);
      else await Bun.sleep(Math.max(1, gapAfter(lockMs) - (now() - t0 - lockMs)));
    }
  } finally {
    // Only what this run switched off: had the checkpoint thread failed meanwhile, its
    // fallback switched automatic checkpoints back on (src/checkpointer.ts), and that stays.
    const { wal_autocheckpoint: now } = sqlite.query("PRAGMA wal_autocheckpoint").get() as { wal_autocheckpoint: number };
    if (now === 0) sqlite.run(`PRAGMA wal_autocheckpoint = ${autoCheckpoint}`);
    unpinCache();
  }
  return verwijderd;
}

/** The prefix of a tenant's chain stopped before an entry that does not link. */
export interface RetentionStop {
  tenantId: number;
  seq: number;
  entryId: number | null;
  reden: BreakReason | RowReason;
}

export interface AuditRetentionResult {
  verwijderd: number;
  /** Tenants whose deletion stopped at a broken link: the evidence is kept. */
  gestopt: RetentionStop[];
}

/** Tenants whose prefixes are deleted side by side (see deleteOldAuditEntries). */
export const TENANT_GROUP = 100;

/** What a retention record needs besides the deleted entries. */
export interface RetentionSigning {
  /** AUDIT_ANKER_BESTAND. */
  path: string;
  keys: Keys;
  retentieDagen: number;
  /** The database file, for the verification before anything is deleted (workers read it). */
  dbPath: string;
  /** Verification workers (see workerCount). */
  workers: number;
}

/**
 * Deletes old audit entries of every tenant that has any. Before an entry is deleted it
 * is checked like the verifier does (hash, link to the previous entry or the chain's
 * signed start, no seq gap): retention must not erase the evidence of tampering, so a
 * tenant's deletion stops before the first entry that does not check out. A chunk deletes
 * at most its size in rows, spread over a group of tenants; a long prefix continues in
 * the next.
 *
 * Per tenant one signed retention record (seq and hash of the last entry to delete, its
 * created_at, grens, the retention days, the run's time and the tree's compact range
 * there) goes to the anchor file and audit_anchor_log before anything is deleted:
 * verification accepts a shortened chain only from a record that justifies it.
 */
export async function deleteOldAuditEntries(
  sqlite: Database,
  grens: string,
  now: Date,
  signing: RetentionSigning,
  o: RetentionOptions = {},
): Promise<AuditRetentionResult> {
  // One index probe per tenant (tenant_id, created_at): tenants with nothing older
  // than grens cost nothing more.
  const oldest = sqlite.query("SELECT min(created_at) AS m FROM audit_entries WHERE tenant_id = ?");
  const candidates = (sqlite.query("SELECT id FROM tenants ORDER BY id").values() as [number][])
    .map(([id]) => id)
    .filter((id) => {
      const m = (oldest.get(id) as { m: string | null }).m;
      return m !== null && m < grens;
    });
  const gestopt: RetentionStop[] = [];
  if (candidates.length === 0) return { verwijderd: 0, gestopt };

  // First the whole check audit-verificatie makes (anchor file against its copy, every
  // chain against its newest signed checkpoint): what does not check out is evidence,
  // and deleting it would erase the proof of which entries were changed.
  const { verifiers } = signing.keys;
  const verdict = await verifyInstallation(sqlite, signing.dbPath, signing.path, candidates, verifiers, { workers: signing.workers });
  const tenants = deletable(verdict, candidates, gestopt);

  const tijdstip = now.toISOString();
  let verwijderd = 0;
  // Groups of tenants: planned (and their records signed) together, then deleted side by side.
  for (let g = 0; g < tenants.length; g += TENANT_GROUP) {
    const group = tenants.slice(g, g + TENANT_GROUP);
    const plans: DeletionPlan[] = [];
    for (const tenantId of group) {
      const p = planTenant(sqlite, tenantId, grens, verifiers, gestopt);
      if (p) plans.push(p);
      // Planning reads; give the event loop a turn between tenants.
      await new Promise((r) => setImmediate(r));
    }
    recordPlans(sqlite, plans, signing, grens, tijdstip);
    verwijderd += await deletePlanned(sqlite, plans, o);
  }
  return { verwijderd, gestopt };
}

/**
 * The candidates whose chains checked out, for any store: a problem with the anchor file
 * stops everything (AnchorFileError); a broken chain keeps that tenant's entries (gestopt).
 */
export function deletable(verdict: InstallationVerdict, candidates: number[], gestopt: RetentionStop[]): number[] {
  throwIfProblem(verdict.probleem);
  const broken = new Map(verdict.tenants.filter((t) => !t.intact).map((t) => [t.tenantId, t.fout!]));
  for (const [tenantId, f] of broken) if (candidates.includes(tenantId)) gestopt.push({ tenantId, seq: f.seq, entryId: f.entryId, reden: f.reden });
  return candidates.filter((id) => !broken.has(id));
}

/** What audit-retentie deletes of one tenant: every entry up to `seq`, justified by `record`. */
export interface DeletionPlan {
  tenantId: number;
  /** The oldest entry still there. */
  from: number;
  /** The last entry to delete. */
  seq: number;
  hash: string;
  /** A new record to sign; null when an earlier run's record already covers `seq` (it stopped part way). */
  record: Omit<RetentionRecord, "tijdstip" | "grens" | "retentieDagen"> | null;
}

/**
 * Reads one tenant's prefix older than grens (in one snapshot, no write lock), checking
 * each entry as the verifier does and extending the tree's compact range from the
 * chain's start. An entry that does not check out stops the prefix before it (gestopt).
 */
function planTenant(sqlite: Database, tenantId: number, grens: string, verifiers: Keys["verifiers"], gestopt: RetentionStop[]): DeletionPlan | null {
  sqlite.run("BEGIN");
  try {
    const first = sqlite.query("SELECT seq, id FROM audit_entries WHERE tenant_id = ? ORDER BY seq LIMIT 1").get(tenantId) as { seq: number; id: number } | null;
    if (!first) return null;
    const plan = new PrefixPlan(tenantId, first, chainStart(sqlite, tenantId, first.seq, verifiers), grens, gestopt);
    if (plan.open) for (const r of entriesAfter(sqlite, tenantId, plan.from)) if (!plan.push(r)) break;
    return plan.result();
  } finally {
    sqlite.run("COMMIT");
  }
}

/**
 * The rule of planning one tenant's deletion, for any store: given its first entry and
 * its chain's start, the entries after the start are pushed in seq order until push()
 * says stop (an entry not older than grens, or one that does not check out: it goes to
 * `gestopt`, and the prefix ends before it).
 */
export class PrefixPlan {
  private range: CompactRange | null = null;
  private prevSeq = 0;
  private prevHash = "";
  private lastCreatedAt = "";
  /** The seq after which entries are pushed (the chain's start). */
  readonly from: number;
  /** False when the chain's start is not justified by a signed record: nothing is deleted. */
  readonly open: boolean;

  constructor(
    private readonly tenantId: number,
    private readonly first: { seq: number; id: number },
    private readonly start: ChainStart,
    private readonly grens: string,
    private readonly gestopt: RetentionStop[],
  ) {
    this.open = start.ok;
    if (!start.ok) {
      // The chain's start is not justified by a signed record: keep everything as evidence.
      gestopt.push({ tenantId, seq: first.seq, entryId: first.id, reden: start.reden });
      this.from = first.seq;
      return;
    }
    this.from = start.seq;
    this.range = start.range.clone();
    this.prevSeq = start.seq;
    this.prevHash = start.hash;
  }

  /** One entry of the chain, in seq order; false: stop reading. */
  push(r: EntryRow): boolean {
    if (!this.start.ok || r.created_at >= this.grens) return false;
    const reden = linkBreak(rowHash(this.tenantId, r) !== r.hash, r.seq === this.start.seq + 1, r.seq, r.prev_hash, this.prevSeq, this.prevHash);
    if (reden) {
      this.gestopt.push({ tenantId: this.tenantId, seq: r.seq, entryId: r.id, reden });
      return false;
    }
    this.range!.pushEntryHash(r.hash);
    this.prevSeq = r.seq;
    this.prevHash = r.hash;
    this.lastCreatedAt = r.created_at;
    return true;
  }

  result(): DeletionPlan | null {
    if (!this.start.ok || this.prevSeq < this.first.seq) return null;
    const { tenantId, prevSeq, prevHash } = this;
    return {
      tenantId,
      from: this.first.seq,
      seq: prevSeq,
      hash: prevHash,
      // The record continues the chain's tree: for an adopted chain, the one from its adoption.
      record: prevSeq > this.start.seq ? { tenantId, seq: prevSeq, hash: prevHash, createdAt: this.lastCreatedAt, bereik: this.range!, basis: this.start.basis } : null,
    };
  }
}

/**
 * Signs the group's retention records and, in one short write transaction, appends them
 * to the anchor file (fsynced before the COMMIT) and its copy in the database, before a
 * single entry is deleted: a crash at any later point leaves entries that the record
 * already covers, which verification accepts when they link up to its hash.
 */
function recordPlans(sqlite: Database, plans: DeletionPlan[], signing: RetentionSigning, grens: string, tijdstip: string): void {
  const lines = retentionLines(plans, signing, grens, tijdstip);
  const upsertAnchor = sqlite.query(
    `INSERT INTO audit_retention_anchors (tenant_id, seq, hash, bijgewerkt) VALUES (?, ?, ?, ?)
     ON CONFLICT (tenant_id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash, bijgewerkt = excluded.bijgewerkt`,
  );
  sqlite.transaction(() => {
    // Records a crash left in the file after its fsync but before its COMMIT.
    syncTail(sqlite, signing.path, signing.keys.verifiers);
    if (lines.length > 0) insertRows(sqlite, appendRun(signing.path, lines));
    // Where an append starts once a whole chain is gone (src/audit/chain.ts).
    for (const p of plans) upsertAnchor.run(p.tenantId, p.seq, p.hash, tijdstip);
  }).immediate();
}

/** The signed retention records of the plans that need one, as anchor-file lines (positions set on append). */
export function retentionLines(plans: DeletionPlan[], signing: Pick<RetentionSigning, "keys" | "retentieDagen">, grens: string, tijdstip: string): StoredLine[] {
  const lines: StoredLine[] = [];
  for (const p of plans) {
    if (!p.record) continue;
    const note = signRetentionRecord(signing.keys.signer, { ...p.record, grens, retentieDagen: signing.retentieDagen, tijdstip });
    lines.push({ soort: "retentie", tenantId: p.tenantId, note, positie: 0, grootte: p.seq, bereik: null });
  }
  return lines;
}

/**
 * Deletes the planned prefixes in short write transactions. Each chunk takes the next
 * rows of every unfinished tenant of the group (round robin): chains lie apart in the
 * primary key, but the created_at index interleaves all tenants, so one tenant's prefix
 * touches a different index page for nearly every entry and a group's prefixes share
 * them (at 1,000 tenants: 55 s per tenant, 23 s per group; bench/run.ts).
 */
async function deletePlanned(sqlite: Database, plans: DeletionPlan[], o: RetentionOptions): Promise<number> {
  // The write API's idempotency keys are in the entries' rows: they go with them.
  const del = sqlite.query("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= ?");
  const next = new Map(plans.map((p) => [p.tenantId, p.from]));
  let active = plans.filter((p) => p.from <= p.seq);
  /** One chunk: the next `per` rows of every unfinished tenant of the group. */
  const chunk = (size: number): { n: number; done: boolean } => {
    const per = Math.max(1, Math.floor(size / Math.max(1, active.length)));
    let n = 0;
    for (const p of active) {
      const upTo = Math.min(p.seq, next.get(p.tenantId)! + per - 1);
      n += del.run(p.tenantId, upTo).changes;
      next.set(p.tenantId, upTo + 1);
    }
    active = active.filter((p) => next.get(p.tenantId)! <= p.seq);
    return { n, done: active.length === 0 };
  };
  if (active.length === 0) return 0;
  // Where each tenant stood at the last COMMIT: a batch that rolls back is taken again from there.
  let committed = { next: new Map(next), active };
  const progress = {
    save: () => void (committed = { next: new Map(next), active }),
    restore: () => {
      next.clear();
      for (const [k, v] of committed.next) next.set(k, v);
      active = committed.active;
    },
  };
  // A lower target than the login attempts': audit batches vary more (cold index
  // pages), and at 40 ms single batches reached 180 ms on a shared 2-core host. One
  // chunk per batch: a chunk is a DELETE per tenant of the group, and ten smaller rounds
  // took three times the lock time (bench/cases/retention.ts, 15.2 s against 5 s at L).
  // SQLite's default page cache, whatever the service's (src/server.ts): with 64 MB a
  // batch's dirty pages all went to the WAL in its COMMIT instead of spilling during
  // the DELETE, and appends during the job waited up to 155 ms (p99 89 ms) in one run;
  // with 2 MB, 105 and 72 ms (p99 64 and 56) in two (bench/ingest.ts, docs/performance.md
  // round 9).
  return inBatches(sqlite, o, { targetMs: 30, chunks: 1, initial: 2000, min: 200, max: 50_000, cacheKib: 2048 }, chunk, progress);
}

/** Deletes login attempts older than grens, in batches by the tijdstip index. */
export async function deleteOldLoginAttempts(sqlite: Database, grens: string, o: RetentionOptions = {}): Promise<number> {
  const del = sqlite.query(
    `DELETE FROM login_attempts WHERE id IN (
       SELECT id FROM login_attempts WHERE tijdstip < ? ORDER BY tijdstip LIMIT ?)`,
  );
  const chunk = (size: number) => {
    const n = del.run(grens, size).changes;
    return { n, done: n < size };
  };
  // 100 ms: every batch costs a gap of about 28 ms for a waiting writer, so longer batches
  // mean fewer gaps; a batch must end before a writer's try at 128 ms (see above). At 115
  // a slow COMMIT or chunk still pushed batches to 125–143 ms and writers to 180 ms in a
  // run of five or eight; at 100 the longest was 114 ms (docs/performance.md, round 5).
  // The 64 MB page cache: with the default 2 MB a batch re-read its own index pages.
  return inBatches(sqlite, o, { targetMs: 100, chunks: 10, initial: 5000, min: 500, max: 200_000, cacheKib: 65_536 }, chunk);
}
