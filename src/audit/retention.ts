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
//   copy them, fsync included, and wait (435–440 ms seen, docs/performance.md). Not at once
//   while only the write API writes (jobRetentionOptions): it shares this connection.
// - The gap is long enough for a writer that waited through the whole batch: SQLite's
//   busy handler sleeps 1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100, 100 … ms between
//   tries, so after a 30 ms batch it tries again within 15 ms, after up to 128 ms
//   within 25 ms, later within 50 or 100 ms (gapAfter()). A batch that ends before a
//   writer's try at 128 ms lets it in within about 130 ms; one that overran would keep
//   it waiting until 178 ms, which is why the budget is a deadline.
// - While the host application writes through the write API in this process
//   (RetentionOptions.appWriting, src/ingest/activity.ts), batches aim at a shorter
//   target (Pacing.whileAppWrites): such a write waits on the event loop for the whole
//   batch, not for the lock at the gap.
import type { Database } from "bun:sqlite";
import { appendingTransaction, insertRows, type StoredLine } from "./anchor-file.ts";
import { compareWithFile, type AnchorComparison, type RowReason } from "./anchor-check.ts";
import { appendRun, syncTail, throwIfProblem } from "./anchoring.ts";
import { retryWhenBusy } from "../db.ts";
import { onWorkers } from "../worker-pool.ts";
import type { WorkerName } from "../workers.ts";
import type { Deps } from "../deps.ts";
import { databaseBehindFile } from "./verify-all.ts";
import { entriesAfter, type EntryRow } from "./chain.ts";
import { CompactRange } from "./merkle.ts";
import type { Verifier } from "./note.ts";
import { openTreeHead, signRetentionRecord, type Keys, type RetentionRecord } from "./records.ts";
import { chainStart, ChainWalk, type BreakReason, type ChainStart, type CheckpointRef } from "./verify.ts";

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

/**
 * The options the retention jobs run with on the service's SQLite connection: a checkpoint
 * by the WAL thread after each batch, and the shorter batches while the host application
 * writes through the write API. What the caller gives (tests) comes first.
 *
 * While the application writes through the write API and no other connection wrote since
 * the batch before, no checkpoint right after the batch: the appends' COMMITs (an fsync
 * each) then met the thread's writes and fsync of the batch's pages, and waited for them
 * (append p99 during audit-retentie 47 ms against 40 without, three runs each,
 * docs/performance.md round 23). The thread still checkpoints at its own pace, and the
 * write API's appends share this connection, which has no automatic checkpoints to do it
 * in their COMMIT instead. A writer in another process (the host application writing the
 * file too) keeps its checkpoint after every batch: its COMMIT would do it otherwise.
 */
export function jobRetentionOptions(deps: Pick<Deps, "checkpointNow" | "writeApi">, o: RetentionOptions): RetentionOptions {
  const appWriting = o.appWriting ?? (() => deps.writeApi?.recent() ?? false);
  const checkpoint = deps.checkpointNow;
  const afterCommit =
    o.afterCommit ??
    (checkpoint === undefined
      ? undefined
      : ({ othersWrote }: AfterCommit) => {
          if (othersWrote || !appWriting()) checkpoint();
        });
  return { ...o, afterCommit, appWriting };
}

/** What a batch's COMMIT is told: whether another connection (another process) committed since the batch before. */
export interface AfterCommit {
  othersWrote: boolean;
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
  afterCommit?: (c: AfterCommit) => void;
  /**
   * Whether the host application is writing through the write API in this process
   * (Deps.writeApi): then each batch is paced by Pacing.whileAppWrites, since such a
   * write waits on the event loop for the whole batch.
   */
  appWriting?: () => boolean;
  /** The clock batches are paced by, ms (tests); performance.now by default. */
  clock?: () => number;
  /** What each batch cost (the benchmark's profile). */
  onBatch?: (b: { rows: number; chunks: number; lockMs: number; commitMs: number; checkpointMs: number }) => void;
  /** What each part of audit-retentie took in all, ms (the benchmark's profile): checking the prefixes, and recording and deleting them. */
  onPhases?: (p: RetentionPhases) => void;
}

export interface RetentionPhases {
  checkMs: number;
  deleteMs: number;
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
  /**
   * The target and chunks per batch while the host application writes through the write
   * API (RetentionOptions.appWriting): its writes wait for a whole batch on the event
   * loop, where a writer in another process waits for the lock and gets in at the gap.
   */
  whileAppWrites?: { targetMs: number; chunks: number };
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

/** What one chunk of `p` aims at, ms. */
const chunkTargetMs = (p: Pacing) => p.targetMs / p.chunks;

/** `rows`, rounded and within the bounds of `p`. */
const chunkWithin = (p: Pacing, rows: number) => Math.max(p.min, Math.min(p.max, Math.round(rows)));

/**
 * The next chunk size: scaled towards its share of the target lock time (square root, so
 * one slow chunk on a busy machine does not halve the next), growing at most 1.5× a step.
 */
export function nextChunkSize(size: number, chunkMs: number, p: Pacing): number {
  const factor = Math.min(1.5, Math.sqrt(chunkTargetMs(p) / Math.max(chunkMs, 0.1)));
  return chunkWithin(p, size * factor);
}

/**
 * Runs `chunk` (deleting at most `rows` rows; done when nothing older is left) in write
 * transactions of as many chunks as fit the target lock time, checkpointing after each
 * transaction and pausing between them as described above.
 */
async function inBatches(
  sqlite: Database,
  o: RetentionOptions,
  given: Pacing,
  chunk: (rows: number) => { n: number; done: boolean },
  /** The caller's own progress, kept in step with what is committed (a batch that throws rolls back). */
  progress?: { save(): void; restore(): void },
): Promise<number> {
  const now = o.clock ?? (() => performance.now());
  /** The pacing of the next batch: `given`, or its whileAppWrites while the application writes through the write API. */
  const pacingNow = (): Pacing => (given.whileAppWrites !== undefined && o.appWriting?.() ? { ...given, ...given.whileAppWrites } : given);
  let pacing = pacingNow();
  let rows = o.batchSize ?? pacing.initial;
  // What a row costs the COMMIT (writing the batch's pages to the WAL: a quarter to a
  // third of a batch at L). It swings from batch to batch (13–51 ms for similar batches
  // at L), so a batch plans with the largest of the last COMMITS_REMEMBERED; until one was
  // measured, a chunk's share of the target for the first chunk's rows.
  let commitMsPerRow = chunkTargetMs(pacing) / rows;
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
  // Changes when another connection commits (not this one): AfterCommit.othersWrote.
  const dataVersion = sqlite.query("PRAGMA data_version");
  const version = () => (dataVersion.get() as { data_version: number }).data_version;
  let seenVersion = version();
  sqlite.run("PRAGMA wal_autocheckpoint = 0");
  const unpinCache = given.cacheKib === undefined ? () => {} : pinCacheSize(sqlite, given.cacheKib);
  try {
    for (;;) {
      const next = pacingNow();
      // The chunk sized for one target, scaled to the other's when the application starts or stops writing.
      if (o.batchSize === undefined) rows = chunkWithin(next, (rows * chunkTargetMs(next)) / chunkTargetMs(pacing));
      pacing = next;
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
      const current = version();
      o.afterCommit?.({ othersWrote: current !== seenVersion });
      seenVersion = current;
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
  /** Tenants that keep entries older than grens behind a newer one (heldBack). */
  achtergehouden: HeldBack[];
}

/**
 * Entries older than grens that a chain still holds after the run: retention deletes a
 * prefix, so an entry dated later than the ones after it (a writer's clock ahead, a
 * created_at written by hand) keeps them all, run after run, past the retention period.
 * Reported, with the entry that holds them: the chain's first kept one.
 */
export interface HeldBack {
  tenantId: number;
  aantal: number;
  seq: number;
  tijdstip: string;
}

export const HELD_BACK_COUNT_SQL = "SELECT count(*) AS n FROM audit_entries WHERE tenant_id = $1 AND created_at < $2";
export const CHAIN_FIRST_SQL = "SELECT seq, created_at FROM audit_entries WHERE tenant_id = $1 ORDER BY seq LIMIT 1";

/**
 * heldBack after a run, for any store: of the candidates (tenants that had entries older
 * than grens), those not stopped for a broken chain (already reported, their old part
 * kept as evidence) that still have some. Index probes per candidate (tenant_id, created_at).
 */
export async function heldBack(
  candidates: readonly number[],
  gestopt: readonly RetentionStop[],
  src: { count(tenantId: number): Promise<number> | number; first(tenantId: number): Promise<{ seq: number; createdAt: string }> | { seq: number; createdAt: string } },
): Promise<HeldBack[]> {
  const stopped = new Set(gestopt.map((g) => g.tenantId));
  const out: HeldBack[] = [];
  for (const tenantId of candidates) {
    if (stopped.has(tenantId)) continue;
    const aantal = await src.count(tenantId);
    if (aantal === 0) continue;
    const first = await src.first(tenantId);
    out.push({ tenantId, aantal, seq: first.seq, tijdstip: first.createdAt });
  }
  return out;
}

/** heldBack on a SQLite connection. */
function heldBackSqlite(sqlite: Database, candidates: readonly number[], gestopt: readonly RetentionStop[], grens: string): Promise<HeldBack[]> {
  const count = sqlite.query(HELD_BACK_COUNT_SQL);
  const first = sqlite.query(CHAIN_FIRST_SQL);
  return heldBack(candidates, gestopt, {
    count: (t) => (count.get(t, grens) as { n: number }).n,
    first: (t) => {
      const r = first.get(t) as { seq: number; created_at: string };
      return { seq: r.seq, createdAt: r.created_at };
    },
  });
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
 * Deletes old audit entries of every tenant that has any. Before anything is deleted,
 * each tenant's prefix is checked as the verifier checks a chain (hash, link to the
 * previous entry or the chain's signed start, no seq gap) and proved against a signed
 * checkpoint that covers it (checkPrefix): retention must not erase the evidence of
 * tampering, so a tenant whose prefix does not check out keeps every entry (gestopt).
 * A chunk deletes at most its size in rows, spread over a group of tenants; a long
 * prefix continues in the next.
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
  if (candidates.length === 0) return { verwijderd: 0, gestopt, achtergehouden: [] };

  const { verifiers } = signing.keys;
  const phases: RetentionPhases = { checkMs: 0, deleteMs: 0 };
  let t0 = performance.now();
  const cmp = await compareWithFile(signing.dbPath, signing.path, verifiers);
  const plans = await checkPrefixes(cmp, candidates, grens, gestopt, (tasks) => checkPrefixesSqlite(sqlite, signing.dbPath, tasks, signing.workers, verifiers));
  phases.checkMs = performance.now() - t0;

  const tijdstip = now.toISOString();
  let verwijderd = 0;
  // The gap a waiting writer needs after a write of `ms` (see gapAfter), between the
  // records and the first batch, and between one group's last batch and the next
  // group's records: back to back, a writer that waited through one would wait through
  // the next as well (131–432 ms at L, against 59–79 with planning in between).
  const gap = (ms: number) => (o.pause ? o.pause(ms) : Bun.sleep(gapAfter(ms)));
  let lastLockMs = 0;
  const batches: RetentionOptions = { ...o, onBatch: (b) => ((lastLockMs = b.lockMs), o.onBatch?.(b)) };
  // Groups of tenants: their records signed together, then deleted side by side.
  t0 = performance.now();
  for (let g = 0; g < plans.length; g += TENANT_GROUP) {
    const group = plans.slice(g, g + TENANT_GROUP);
    const r0 = performance.now();
    recordPlans(sqlite, group, signing, grens, tijdstip);
    await gap(performance.now() - r0);
    verwijderd += await deletePlanned(sqlite, group, batches);
    if (g + TENANT_GROUP < plans.length) await gap(lastLockMs);
  }
  phases.deleteMs = performance.now() - t0;
  o.onPhases?.(phases);
  return { verwijderd, gestopt, achtergehouden: await heldBackSqlite(sqlite, candidates, gestopt, grens) };
}

/**
 * The rule around checkPrefix, for any store: the anchor file must match its database
 * copy (a problem stops everything: AnchorFileError); a tenant whose rows do not match
 * the file, or whose prefix does not check out, keeps its entries (gestopt); the others'
 * plans, in tenant order. `check` runs checkPrefix for each task on the store.
 */
export async function checkPrefixes(
  cmp: AnchorComparison,
  candidates: readonly number[],
  grens: string,
  gestopt: RetentionStop[],
  check: (tasks: PrefixTask[]) => Promise<Map<number, PrefixCheck>>,
): Promise<DeletionPlan[]> {
  throwIfProblem(cmp.probleem);
  // A checkpoint from before the tenant's newest adoption or restore acceptance was
  // signed over another chain: only later ones may prove a prefix.
  const lastReset = new Map<number, number>();
  for (const r of [...cmp.adopties, ...cmp.herstellingen]) lastReset.set(r.tenantId, Math.max(lastReset.get(r.tenantId) ?? -1, r.positie));
  const tasks: PrefixTask[] = [];
  for (const tenantId of candidates) {
    const row = cmp.perTenant.get(tenantId);
    if (row) {
      gestopt.push({ tenantId, seq: row.seq, entryId: null, reden: row.reden });
      continue;
    }
    const c = cmp.checkpoints.get(tenantId);
    tasks.push({ tenantId, grens, newest: c ? { size: c.size, root: c.root, basis: c.basis } : null, after: lastReset.get(tenantId) ?? -1 });
  }
  const checked = await check(tasks);
  const plans: DeletionPlan[] = [];
  for (const t of tasks) {
    const r = checked.get(t.tenantId)!;
    if ("stop" in r) {
      throwIfProblem(databaseBehindFile(t.tenantId, r.stop.reden, cmp));
      gestopt.push(r.stop);
    } else if (r.plan) plans.push(r.plan);
  }
  return plans;
}

/** One tenant's retention check (checkPrefix). `newest` is the file's newest head of its chain; `after` the byte position a proving checkpoint must lie beyond. */
export interface PrefixTask {
  tenantId: number;
  grens: string;
  newest: CheckpointRef | null;
  after: number;
}

/** What checkPrefix found: a plan (null: nothing to delete), or why the tenant keeps everything. */
export type PrefixCheck = { plan: DeletionPlan | null } | { stop: RetentionStop };

type Maybe<T> = T | Promise<T>;

/** What checkPrefix reads of one tenant, all in one snapshot; each store answers from its own. */
export interface PrefixSource {
  /** The oldest entry (null: none). */
  first(): Maybe<{ seq: number; id: number } | null>;
  /** The chain's start (chainStart). */
  start(firstSeq: number): Maybe<ChainStart>;
  /** The seq of the first entry after `afterSeq` not older than grens; null when there is none. */
  firstNotOlder(afterSeq: number): Maybe<number | null>;
  /** The newest seq. */
  last(): Maybe<number>;
  /** Notes of audit_anchor_log's checkpoints of at least `atLeast` written after byte `after`, smallest first (a few). */
  checkpointsFrom(atLeast: number, after: number): Maybe<string[]>;
  /** The entries with seq <= uptoSeq, in seq order, each to `take`. */
  entries(uptoSeq: number, take: (r: EntryRow) => void): Maybe<void>;
}

/** The SQL of PrefixSource.firstNotOlder and .checkpointsFrom, the same on both stores (parameters: tenant, seq or size, grens or position). */
export const FIRST_NOT_OLDER_SQL = "SELECT seq FROM audit_entries WHERE tenant_id = $1 AND seq > $2 AND created_at >= $3 ORDER BY seq LIMIT 1";
export const CHECKPOINTS_FROM_SQL =
  "SELECT note FROM audit_anchor_log WHERE tenant_id = $1 AND soort = 'checkpoint' AND grootte >= $2 AND positie > $3 ORDER BY grootte, positie LIMIT 3";

/**
 * One tenant's retention check, for any store. The prefix older than grens runs from the
 * chain's start (genesis, a signed retention record or an adoption) up to the entry
 * before the first one not older than grens; entries that a stopped run's record already
 * covers go too. Every entry from the oldest up to the prefix's end is checked as the
 * verifier checks it, and the tree over them is proved against the smallest signed
 * checkpoint that covers the prefix: the entries between the prefix and that checkpoint
 * are checked as well. The rest of the chain is audit-verificatie's: a break there is
 * evidence of its own, which deleting older, proved entries does not touch. Without
 * such a checkpoint, the proof is the file's newest head, and the prefix's entries past
 * it are new since audit-anker, as the verifier accepts them.
 *
 * The checkpoint comes from audit_anchor_log, which the file was compared with just
 * before; it counts only when its signature holds for this tenant under a trusted key
 * and it was written after the tenant's newest adoption or restore acceptance. A row
 * removed by an attacker only means that a larger checkpoint, or the newest head, proves
 * the prefix.
 */
export async function checkPrefix(src: PrefixSource, task: PrefixTask, verifiers: Verifier[]): Promise<PrefixCheck> {
  const { tenantId, newest } = task;
  const first = await src.first();
  if (!first) return { plan: null };
  const start = await src.start(first.seq);
  if (!start.ok) return { stop: { tenantId, seq: first.seq, entryId: first.id, reden: start.reden } };
  const last = await src.last();
  // A seq that is no integer (SQLite sorts it last): written by hand; kept, as verification reports it.
  if (!Number.isSafeInteger(last)) return { stop: { tenantId, seq: first.seq, entryId: first.id, reden: "volgnummer-gat" } };
  // Entries cut off the chain's end: everything kept, as verification reports it.
  if (newest && newest.size > last) return { stop: { tenantId, seq: newest.size, entryId: null, reden: "kop-ontbreekt" } };
  const notOlder = await src.firstNotOlder(start.seq);
  /** The last entry to delete: the prefix's, or the start record's when no entry past it is older than grens. */
  const end = Math.max(start.seq, notOlder === null ? last : notOlder - 1);
  if (end < first.seq) return { plan: null };
  let proof: CheckpointRef | null = null;
  if (end > start.seq) {
    for (const note of await src.checkpointsFrom(end, task.after)) {
      const o = openTreeHead(note, tenantId, verifiers, "checkpoint");
      if (o.ok && o.head.size >= end) {
        proof = { size: o.head.size, root: o.head.root, basis: o.head.basis };
        break;
      }
    }
  }
  // Without a covering checkpoint: the newest head, the tree built on to the prefix's end.
  const cp = proof ?? newest;
  const walk = new ChainWalk(tenantId, start, first, cp, proof === null, end > start.seq ? end : null);
  await src.entries(Math.max(end, cp?.size ?? 0), (r) => walk.push(r));
  const result = walk.result();
  if (result.fout) return { stop: { tenantId, seq: result.fout.seq, entryId: result.fout.entryId, reden: result.fout.reden } };
  if (end === start.seq) return { plan: { tenantId, from: first.seq, seq: end, hash: start.hash, record: null } };
  const kept = walk.at();
  if (kept?.seq !== end) throw new Error(`audit-retentie: tenant ${tenantId}: the walk did not reach seq ${end}`);
  return {
    plan: {
      tenantId,
      from: first.seq,
      seq: end,
      hash: kept.hash,
      // The record continues the chain's tree: for an adopted chain, the one from its adoption.
      record: { tenantId, seq: end, hash: kept.hash, createdAt: kept.createdAt, bereik: kept.range, basis: start.basis },
    },
  };
}

/** checkPrefix's source on a SQLite connection, inside the caller's read transaction. */
export function prefixSourceSqlite(sqlite: Database, tenantId: number, grens: string, verifiers: Verifier[]): PrefixSource {
  return {
    first: () => sqlite.query("SELECT seq, id FROM audit_entries WHERE tenant_id = ? ORDER BY seq LIMIT 1").get(tenantId) as { seq: number; id: number } | null,
    start: (firstSeq) => chainStart(sqlite, tenantId, firstSeq, verifiers),
    firstNotOlder: (afterSeq) => (sqlite.query(FIRST_NOT_OLDER_SQL).get(tenantId, afterSeq, grens) as { seq: number } | null)?.seq ?? null,
    last: () => (sqlite.query("SELECT max(seq) AS n FROM audit_entries WHERE tenant_id = ?").get(tenantId) as { n: number }).n,
    checkpointsFrom: (atLeast, after) => (sqlite.query(CHECKPOINTS_FROM_SQL).all(tenantId, atLeast, after) as { note: string }[]).map((r) => r.note),
    entries: (uptoSeq, take) => {
      for (const r of entriesAfter(sqlite, tenantId, 0, uptoSeq)) take(r);
    },
  };
}

/** checkPrefix for one tenant on a SQLite connection, in one read snapshot. */
export async function checkPrefixSqlite(sqlite: Database, task: PrefixTask, verifiers: Verifier[]): Promise<PrefixCheck> {
  sqlite.run("BEGIN");
  try {
    return await checkPrefix(prefixSourceSqlite(sqlite, task.tenantId, task.grens, verifiers), task, verifiers);
  } finally {
    sqlite.run("COMMIT");
  }
}

/** A PrefixCheck as a worker thread sends it: the compact range as its encoding. */
export type PrefixCheckMessage = { plan: (Omit<DeletionPlan, "record"> & { record: (Omit<NonNullable<DeletionPlan["record"]>, "bereik"> & { bereik: string }) | null }) | null } | { stop: RetentionStop };

export function prefixCheckMessage(c: PrefixCheck): PrefixCheckMessage {
  if ("stop" in c || c.plan === null || c.plan.record === null) return c as PrefixCheckMessage;
  return { plan: { ...c.plan, record: { ...c.plan.record, bereik: c.plan.record.bereik.encode() } } };
}

export function prefixCheckOf(m: PrefixCheckMessage): PrefixCheck {
  if ("stop" in m || m.plan === null || m.plan.record === null) return m as PrefixCheck;
  const r = m.plan.record;
  return { plan: { ...m.plan, record: { ...r, bereik: CompactRange.decode(r.seq - (r.basis ?? 0), r.bereik) } } };
}

/**
 * checkPrefix for every task on SQLite: on `workers` threads, each with its own read-only
 * connection (verify-worker.ts), or with none in this thread, giving the event loop a
 * turn between tenants.
 */
async function checkPrefixesSqlite(sqlite: Database, dbPath: string, tasks: PrefixTask[], workers: number, verifiers: Verifier[]): Promise<Map<number, PrefixCheck>> {
  if (workers > 0 && dbPath !== ":memory:" && tasks.length > 0) return checkPrefixesOnWorkers("verify-worker", { dbPath }, tasks, workers, verifiers);
  const results = new Map<number, PrefixCheck>();
  for (const t of tasks) {
    results.set(t.tenantId, await checkPrefixSqlite(sqlite, t, verifiers));
    await new Promise((r) => setImmediate(r));
  }
  return results;
}

/** checkPrefix for every task on `count` threads of a verification worker (`init`: its store, plus the verifier keys), for either store. */
export async function checkPrefixesOnWorkers(worker: WorkerName, init: object, tasks: PrefixTask[], count: number, verifiers: Verifier[]): Promise<Map<number, PrefixCheck>> {
  const results = new Map<number, PrefixCheck>();
  const verifierKeys = verifiers.map((v) => v.verifierKey);
  await onWorkers<PrefixTask, PrefixCheckMessage>(worker, { ...init, verifierKeys }, tasks, count, (t, m) => results.set(t.tenantId, prefixCheckOf(m)));
  return results;
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
  // A failure (also at COMMIT) takes the appended records back (appendingTransaction).
  appendingTransaction(sqlite, (run) => {
    // Records a crash left in the file after its fsync but before its COMMIT.
    syncTail(sqlite, signing.path, signing.keys.verifiers);
    if (lines.length > 0) insertRows(sqlite, appendRun(signing.path, lines, run));
    // Where an append starts once a whole chain is gone (src/audit/chain.ts).
    for (const p of plans) upsertAnchor.run(p.tenantId, p.seq, p.hash, tijdstip);
  });
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
  // round 9). 20 ms while the application writes through the write API: its appends
  // waited for a whole batch, p99 50.7 ms at 30 and 41.3 at 20; at 20 throughout the job
  // would take 1.78× one DELETE instead of 1.45× (docs/performance.md, round 12). 12 since
  // round 23: a batch's COMMIT comes on top of its one chunk (10–15 ms at L), and at 20
  // batches held the event loop 30–38 ms and the appends' p99 was 55–67 ms in four runs
  // on another machine (43.8–50.6 at 12).
  const pacing: Pacing = { targetMs: 30, chunks: 1, initial: 2000, min: 200, max: 50_000, cacheKib: 2048, whileAppWrites: { targetMs: 12, chunks: 1 } };
  return inBatches(sqlite, o, pacing, chunk, progress);
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
  // 30 ms in 3 chunks (the same chunk size) while the application writes through the
  // write API, whose appends would otherwise wait up to a whole 100 ms batch.
  const pacing: Pacing = { targetMs: 100, chunks: 10, initial: 5000, min: 500, max: 200_000, cacheKib: 65_536, whileAppWrites: { targetMs: 30, chunks: 3 } };
  return inBatches(sqlite, o, pacing, chunk);
}
