// The streaming chain verifier: walks one tenant's entries in seq order with a
// statement iterator, keeping only the previous entry's seq and hash and the Merkle
// tree's compact range, so memory does not grow with the length of the chain.
//
// Besides the links it recomputes the RFC 6962 root over the entry hashes and compares
// it with the tenant's newest signed checkpoint (from the anchor file), and it starts
// a chain that audit-retentie shortened from that deletion's signed retention record,
// and a chain the operator adopted (`nachtwacht adopt`) from its signed adoption.
import type { Database } from "bun:sqlite";
import { entriesAfter, GENESIS_HASH, rowHash, type EntryRow } from "./chain.ts";
import { CompactRange } from "./merkle.ts";
import type { Verifier } from "./note.ts";
import { openStartRecord, retentionUnjustified, type AdoptionRecord, type RetentionRecord } from "./records.ts";

export type BreakReason =
  | "hash-afwijkend"
  | "koppeling-verbroken"
  | "volgnummer-gat"
  | "anker-afwijkend"
  | "kop-ontbreekt"
  | "checkpoint-afwijkend"
  | "retentie-ontbreekt"
  | "retentie-ongeldig";

export interface ChainBreak {
  seq: number;
  entryId: number | null;
  reden: BreakReason;
}

export interface TenantChainResult {
  intact: boolean;
  aantalEntries: number;
  fout?: ChainBreak;
}

/**
 * The one rule for a broken link, shared by the verifier, audit-retentie and audit-anker: hash first, then the first entry's link to the start, then gaps, then links.
 */
export function linkBreak(hashDiffers: boolean, isFirst: boolean, seq: number, rowPrevHash: string, prevSeq: number, prevHash: string): BreakReason | null {
  if (hashDiffers) return "hash-afwijkend";
  if (isFirst && (seq !== prevSeq + 1 || rowPrevHash !== prevHash)) return "anker-afwijkend";
  if (seq !== prevSeq + 1) return "volgnummer-gat";
  if (rowPrevHash !== prevHash) return "koppeling-verbroken";
  return null;
}

/** A signed tree head the chain must still reach: size (its newest seq) and 32-byte root. */
export interface CheckpointRef {
  size: number;
  root: Uint8Array;
  /** The seq before the tree's first leaf: 0 (from genesis; the default) or S for a chain adopted at S. */
  basis?: number;
}

export interface VerifyOptions {
  /** The tenant's newest signed checkpoint; null when it has none yet. */
  checkpoint: CheckpointRef | null;
  /** Keys whose signatures on retention records are trusted. */
  verifiers: Verifier[];
}

/**
 * Where a chain's tree starts: genesis, a signed retention record, or a signed
 * adoption. Entries up to `seq` may still exist (a retention run signs its records
 * before it deletes, and may have been stopped part way): they must then link up to
 * the record's hash. `range` is the tree's compact range at `seq` (size seq − basis).
 */
export type ChainStart =
  | {
      ok: true;
      seq: number;
      hash: string;
      range: CompactRange;
      /** The seq before the tree's first leaf: 0 from genesis, S for a chain adopted at S. */
      basis: number;
      /** The retention record it starts from, if it does. */
      record: RetentionRecord | null;
      /** The adoption it starts from, if it does. */
      adoption: AdoptionRecord | null;
      /** The signed note of that record (null from genesis). */
      note: string | null;
    }
  | { ok: false; reden: "retentie-ontbreekt" | "retentie-ongeldig" };

/** The kinds of audit_anchor_log rows a chain can start from: what chainStartFrom's `notes` are. */
export const START_KINDS = ["retentie", "adoptie"] as const;

/**
 * The start of a chain whose oldest remaining entry has `firstSeq` (null: no entries):
 * genesis for seq 1; else the validly signed start record (a justified retention
 * record, or an adoption) in audit_anchor_log with the lowest seq at or after
 * firstSeq − 1 (for an empty chain: the newest one). No such record: the older
 * entries went missing some other way.
 */
export function chainStart(sqlite: Database, tenantId: number, firstSeq: number | null, verifiers: Verifier[]): ChainStart {
  if (firstSeq === 1) return chainStartFrom([], tenantId, firstSeq, verifiers);
  // Raw SQL: read per tenant on the verification path, beside the streamed scan.
  const rows = (
    firstSeq === null
      ? sqlite.query("SELECT note FROM audit_anchor_log WHERE tenant_id = ? AND soort IN ('retentie', 'adoptie') ORDER BY grootte DESC, positie DESC").all(tenantId)
      : sqlite.query("SELECT note FROM audit_anchor_log WHERE tenant_id = ? AND soort IN ('retentie', 'adoptie') AND grootte >= ? ORDER BY grootte, positie DESC").all(tenantId, firstSeq - 1)
  ) as { note: string }[];
  return chainStartFrom(rows.map((r) => r.note), tenantId, firstSeq, verifiers);
}

/**
 * chainStart over records from any store (the anchor file itself, for instance): picks
 * and orders them as chainStart's SQL does. `grootte` is a retention record's seq or an
 * adoption's seq; `positie` the line's byte offset.
 */
export function chainStartFromRecords(records: readonly { note: string; grootte: number; positie: number }[], tenantId: number, firstSeq: number | null, verifiers: Verifier[]): ChainStart {
  if (firstSeq === 1) return chainStartFrom([], tenantId, firstSeq, verifiers);
  const picked =
    firstSeq === null
      ? [...records].sort((a, b) => b.grootte - a.grootte || b.positie - a.positie)
      : records.filter((r) => r.grootte >= firstSeq - 1).sort((a, b) => a.grootte - b.grootte || b.positie - a.positie);
  return chainStartFrom(picked.map((r) => r.note), tenantId, firstSeq, verifiers);
}

/**
 * The rule of chainStart, for any store: `notes` are the tenant's start records (soort
 * in START_KINDS: retention records and adoptions) in audit_anchor_log — for an empty
 * chain (firstSeq null) newest first, else those with seq >= firstSeq − 1, lowest seq
 * first (and the later line first among equal seqs). A retention record counts when it
 * opens under a trusted key and justifies its deletion, an adoption when it opens.
 */
export function chainStartFrom(notes: readonly string[], tenantId: number, firstSeq: number | null, verifiers: Verifier[]): ChainStart {
  const genesis: ChainStart = { ok: true, seq: 0, hash: GENESIS_HASH, range: new CompactRange(), basis: 0, record: null, adoption: null, note: null };
  if (firstSeq === 1) return genesis;
  if (notes.length === 0) return firstSeq === null ? genesis : { ok: false, reden: "retentie-ontbreekt" };
  for (const note of notes) {
    const o = openStartRecord(note, tenantId, verifiers);
    if (!o.ok) continue;
    if ("retention" in o) {
      const r = o.retention;
      if (retentionUnjustified(r) !== null || (firstSeq !== null && r.seq < firstSeq - 1)) continue;
      return { ok: true, seq: r.seq, hash: r.hash, range: r.bereik, basis: r.basis, record: r, adoption: null, note };
    }
    const a = o.adoption;
    if (firstSeq !== null && a.seq < firstSeq - 1) continue;
    return { ok: true, seq: a.seq, hash: a.hash, range: new CompactRange(), basis: a.seq, record: null, adoption: a, note };
  }
  return { ok: false, reden: "retentie-ongeldig" };
}

/**
 * Verifies one tenant's chain in one read snapshot: its start (genesis, a retention
 * record or an adoption) and its entries are read together, so an audit-retentie batch
 * committing meanwhile (which deletes entries and adds their record in one transaction)
 * can never make the two disagree.
 */
export function verifyTenantChain(sqlite: Database, tenantId: number, opts: VerifyOptions): TenantChainResult {
  const own = !sqlite.inTransaction;
  if (own) sqlite.run("BEGIN");
  try {
    return verifySnapshot(sqlite, tenantId, opts);
  } finally {
    if (own) sqlite.run("COMMIT");
  }
}

export const rootsEqual = (a: Uint8Array, b: Uint8Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(b);

function verifySnapshot(sqlite: Database, tenantId: number, opts: VerifyOptions): TenantChainResult {
  const first = sqlite.query("SELECT seq, id FROM audit_entries WHERE tenant_id = ? ORDER BY seq LIMIT 1").get(tenantId) as {
    seq: number;
    id: number;
  } | null;
  const start = chainStart(sqlite, tenantId, first?.seq ?? null, opts.verifiers);
  if (!start.ok) {
    const count = (sqlite.query("SELECT count(*) AS n FROM audit_entries WHERE tenant_id = ?").get(tenantId) as { n: number }).n;
    return unstartedChain(first, count, start.reden);
  }
  const walk = new ChainWalk(tenantId, start, first, opts.checkpoint);
  for (const r of entriesAfter(sqlite, tenantId)) walk.push(r);
  return walk.result();
}

/** A chain whose start cannot be established: the break is at its first entry, or at the signed record's place when no entry is left. */
export function unstartedChain(first: { seq: number; id: number } | null, count: number, reden: "retentie-ontbreekt" | "retentie-ongeldig"): TenantChainResult {
  return { intact: false, aantalEntries: count, fout: first ? { seq: first.seq, entryId: first.id, reden } : { seq: 0, entryId: null, reden } };
}

/** A chain's tree kept at one entry (ChainWalk.at). */
export interface KeptTree {
  seq: number;
  hash: string;
  createdAt: string;
  range: CompactRange;
}

/**
 * The walk over one tenant's entries in seq order, whatever store streams them
 * (SQLite's statement iterator here, a PostgreSQL cursor in src/pg/): push each row,
 * then take the result. It keeps only the previous seq and hash and the tree's compact
 * range, so memory does not grow with the chain.
 */
export class ChainWalk {
  private readonly range: CompactRange;
  private readonly basis: number;
  private readonly pending: boolean;
  private count = 0;
  private prevSeq: number;
  private prevHash: string | null;
  private fout: ChainBreak | undefined;
  private kept: KeptTree | null = null;
  private readonly roots = new Map<number, ReturnType<CompactRange["root"]>>();

  constructor(
    private readonly tenantId: number,
    private readonly start: Extract<ChainStart, { ok: true }>,
    /** The tenant's oldest remaining entry (null: none). */
    first: { seq: number } | null,
    private readonly cp: CheckpointRef | null,
    /** Build the tree up to the last entry, not only up to the checkpoint (see tree()). */
    private readonly wholeTree = false,
    /** Keep the tree as it stands after this seq (at()): where audit-retentie's prefix ends. */
    private readonly keepAt: number | null = null,
    /** Tree sizes whose root to keep as walked (rootAt()): the signed heads a restored chain must still reach. */
    private readonly rootsAt: ReadonlySet<number> = new Set(),
  ) {
    this.range = start.range.clone();
    this.basis = start.basis ?? 0;
    // A head of another tree (from genesis against an adopted chain, or the other way
    // round) is never reached: the chain was not the one signed.
    if (cp && (cp.basis ?? 0) !== this.basis) this.fout = { seq: cp.size, entryId: null, reden: "checkpoint-afwijkend" };
    // A checkpoint exactly at the retention point is compared with the record's range.
    else if (cp && cp.size === this.basis + this.range.size && !rootsEqual(this.range.root(), cp.root)) this.fout = { seq: cp.size, entryId: null, reden: "checkpoint-afwijkend" };
    // Entries up to start.seq still there (retention signed their deletion but had not
    // finished it): they are in the record's range already and must link up to its hash.
    this.pending = first !== null && first.seq <= start.seq;
    this.prevSeq = this.pending ? first!.seq - 1 : start.seq;
    this.prevHash = this.pending ? null : start.hash;
  }

  push(r: EntryRow): void {
    this.count++;
    if (this.fout) return; // first break found: only count the rest
    const { seq, id, prev_hash: rowPrevHash, hash } = r;
    // A seq that is no integer (SQLite's column checks no type; text sorts last): a row
    // written by hand, named by the place it took.
    if (!Number.isSafeInteger(seq)) {
      this.fout = { seq: this.prevSeq + 1, entryId: id, reden: "volgnummer-gat" };
      return;
    }
    const { start, cp } = this;
    // The oldest entry after the start must link to genesis or to its start record's hash.
    const reden = linkBreak(rowHash(this.tenantId, r) !== hash, !this.pending && this.count === 1, seq, rowPrevHash, this.prevSeq, this.prevHash ?? rowPrevHash);
    if (reden) {
      this.fout = { seq, entryId: id, reden };
    } else if (seq <= start.seq) {
      if (seq === start.seq && hash !== start.hash) this.fout = { seq, entryId: id, reden: "anker-afwijkend" };
    } else if (this.wholeTree || (cp && cp.size >= seq)) {
      this.range.pushEntryHash(hash);
      // Entries past the checkpoint are new since audit-anker: nothing signed covers them yet.
      if (cp && this.basis + this.range.size === cp.size && !rootsEqual(this.range.root(), cp.root)) this.fout = { seq, entryId: id, reden: "checkpoint-afwijkend" };
      if (seq === this.keepAt) this.kept = { seq, hash, createdAt: r.created_at, range: this.range.clone() };
      if (this.rootsAt.has(this.basis + this.range.size)) this.roots.set(this.basis + this.range.size, this.range.root());
    }
    this.prevSeq = seq;
    this.prevHash = hash;
  }

  /**
   * The tree as walked: its basis, the newest seq it covers and its compact range there
   * (up to the last entry with wholeTree, else up to the checkpoint). Meaningful only
   * while result() is intact.
   */
  tree(): { basis: number; size: number; range: CompactRange } {
    return { basis: this.basis, size: this.basis + this.range.size, range: this.range.clone() };
  }

  /** The tree after the entry `keepAt` (its seq, hash, created_at and compact range), once walked past it; null before. */
  at(): KeptTree | null {
    return this.kept;
  }

  /** The root at a size of `rootsAt`, as walked; undefined when the walk did not get there. */
  rootAt(size: number): ReturnType<CompactRange["root"]> | undefined {
    return this.roots.get(size);
  }

  result(): TenantChainResult {
    const { start, cp, count } = this;
    let fout = this.fout;
    // Pending entries that stop short of the record: the ones up to it are gone.
    if (!fout && this.pending && this.prevSeq < start.seq) fout = { seq: start.seq, entryId: null, reden: "kop-ontbreekt" };
    // A signed checkpoint beyond the last entry: the newest entries were cut off.
    if (!fout && cp && cp.size > this.prevSeq) fout = { seq: cp.size, entryId: null, reden: "kop-ontbreekt" };
    return fout ? { intact: false, aantalEntries: count, fout } : { intact: true, aantalEntries: count };
  }
}
