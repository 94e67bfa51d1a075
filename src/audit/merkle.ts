// RFC 6962 Merkle trees over a chain's entry hashes (docs/audit-chain.md, "Checkpoints").
//
// Leaf data is the 32 raw bytes of an entry's `hash`; leaf hash SHA-256(0x00 ‖ data),
// node hash SHA-256(0x01 ‖ left ‖ right). The same trees as golang.org/x/mod/sumdb/tlog
// (RecordHash, NodeHash, TreeHash), which test/merkle-go.test.ts checks.
//
// A compact range is the list of roots of the perfect subtrees that make up a tree of
// size n, largest first (one per set bit of n). It is all that is needed to go on
// appending leaves and to compute the root at any later size, so audit-anker extends a
// checkpoint with only the entries since, and audit-retentie keeps it in its signed
// record when the leaves themselves are deleted.

const LEAF = Buffer.alloc(33); // 0x00 ‖ 32 bytes
const NODE = Buffer.alloc(65); // 0x01 ‖ 32 ‖ 32
NODE[0] = 1;

function sha256(data: Uint8Array): Uint8Array {
  return Bun.CryptoHasher.hash("sha256", data) as unknown as Uint8Array;
}

/** SHA-256(0x00 ‖ data) for 32 bytes of data. */
export function leafHash(data: Uint8Array): Uint8Array {
  LEAF.set(data, 1);
  return sha256(LEAF);
}

/** The leaf hash of an entry hash given as 64 lowercase hex characters. */
export function leafHashOfHex(hex: string): Uint8Array {
  LEAF.write(hex, 1, "hex");
  return sha256(LEAF);
}

/** SHA-256(0x00 ‖ data) for data of any length (the installation tree's leaves: whole notes). */
export function leafHashOfBytes(data: Uint8Array): Uint8Array {
  const b = new Uint8Array(data.length + 1);
  b.set(data, 1);
  return sha256(b);
}

/** The installation tree's leaf hash of an anchor-file line: its whole signed note as UTF-8 (docs/audit-chain.md, "Installation checkpoint"). */
export function installationLeafHash(note: string): Uint8Array {
  return leafHashOfBytes(Buffer.from(note, "utf8"));
}

/** SHA-256(0x01 ‖ left ‖ right). */
export function nodeHash(left: Uint8Array, right: Uint8Array): Uint8Array {
  NODE.set(left, 1);
  NODE.set(right, 33);
  return sha256(NODE);
}

/** The hash of an empty tree: SHA-256 of nothing. */
export const EMPTY_ROOT: Uint8Array = sha256(new Uint8Array(0));

/** The heights of the perfect subtrees of a tree of `size` leaves, largest first. */
function heights(size: number): number[] {
  const out: number[] = [];
  for (let h = 52; h >= 0; h--) if (Math.floor(size / 2 ** h) % 2 === 1) out.push(h);
  return out;
}

const TMP = Buffer.alloc(32);

function hashInto(data: Uint8Array, out: Uint8Array): void {
  Bun.CryptoHasher.hash("sha256", data, out as unknown as Uint8Array);
}

/**
 * A growing tree, kept as its compact range: O(log n) memory, O(1) amortised per leaf,
 * and no allocation per leaf (the verifier pushes millions): each height has one
 * buffer, since a compact range holds at most one subtree of each height.
 */
export class CompactRange {
  #size: number;
  /** Heights of the subtrees present, largest first. */
  #heights: number[];
  /** #slot[h]: the root of the subtree of height h, when h is in #heights. */
  #slot: Buffer[] = [];

  constructor(size = 0, hashes: Uint8Array[] = []) {
    const hs = heights(size);
    if (hs.length !== hashes.length) throw new Error(`a compact range of size ${size} has ${hs.length} hashes, got ${hashes.length}`);
    this.#size = size;
    this.#heights = hs;
    hs.forEach((h, i) => this.#buf(h).set(hashes[i]!));
  }

  #buf(h: number): Buffer {
    return (this.#slot[h] ??= Buffer.alloc(32));
  }

  get size(): number {
    return this.#size;
  }

  /** Appends one leaf, given as its leaf hash. */
  pushLeafHash(h: Uint8Array): void {
    TMP.set(h);
    this.#pushTmp();
  }

  /** Appends an entry by its hash (64 hex characters): leaf hash SHA-256(0x00 ‖ bytes). */
  pushEntryHash(hex: string): void {
    LEAF.write(hex, 1, "hex");
    hashInto(LEAF, TMP);
    this.#pushTmp();
  }

  /** Merges TMP (a subtree of height 0) into the range. */
  #pushTmp(): void {
    let height = 0;
    const hs = this.#heights;
    while (hs.length > 0 && hs[hs.length - 1] === height) {
      NODE.set(this.#slot[height]!, 1);
      NODE.set(TMP, 33);
      hashInto(NODE, TMP);
      hs.pop();
      height++;
    }
    this.#buf(height).set(TMP);
    hs.push(height);
    this.#size++;
  }

  /** The RFC 6962 root at the current size. */
  root(): Uint8Array {
    const hs = this.#heights;
    if (hs.length === 0) return EMPTY_ROOT;
    let r: Uint8Array = Buffer.from(this.#slot[hs[hs.length - 1]!]!);
    for (let i = hs.length - 2; i >= 0; i--) r = nodeHash(this.#slot[hs[i]!]!, r);
    return r;
  }

  /** The subtree roots, largest first (copies). */
  hashes(): Uint8Array[] {
    return this.#heights.map((h) => new Uint8Array(this.#slot[h]!));
  }

  clone(): CompactRange {
    return new CompactRange(this.#size, this.hashes());
  }

  /** Base64 hashes separated by one space ("" for size 0): how records and the database store it. */
  encode(): string {
    return this.#heights.map((h) => this.#slot[h]!.toString("base64")).join(" ");
  }

  static decode(size: number, text: string): CompactRange {
    const parts = text === "" ? [] : text.split(" ");
    return new CompactRange(
      size,
      parts.map((p) => {
        const b = Buffer.from(p, "base64");
        if (b.length !== 32 || b.toString("base64") !== p) throw new Error("a compact range hash is not 32 bytes of base64");
        return new Uint8Array(b);
      }),
    );
  }
}

/** The RFC 6962 root over a list of leaf hashes. */
export function treeHash(leafHashes: Uint8Array[]): Uint8Array {
  const r = new CompactRange();
  for (const h of leafHashes) r.pushLeafHash(h);
  return r.root();
}

function largestPowerOfTwoBelow(n: number): number {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}

/**
 * RFC 6962 §2.1.1: the leaf ranges [lo, hi) whose subtree hashes make the audit path of
 * leaf `index` in a tree of `size`, in the path's order (nearest the leaf first). They
 * are disjoint, so one pass over the leaves can hash them all (inclusionProofOf).
 */
export function proofRanges(size: number, index: number): [number, number][] {
  if (!Number.isSafeInteger(index) || index < 0 || index >= size) throw new Error(`leaf ${index} is not in a tree of ${size}`);
  const path = (lo: number, hi: number): [number, number][] => {
    if (hi - lo === 1) return [];
    const k = largestPowerOfTwoBelow(hi - lo);
    if (index < lo + k) return [...path(lo, lo + k), [lo + k, hi]];
    return [...path(lo + k, hi), [lo, lo + k]];
  };
  return path(0, size);
}

/**
 * The audit path of leaf `index` in the tree of `size` whose leaf hashes `leaves` yields
 * in order (at least `size` of them; the rest is not read), without holding them: each
 * leaf goes into the compact range of the proof range it lies in.
 */
export function inclusionProofOf(leaves: Iterable<Uint8Array>, size: number, index: number): Uint8Array[] {
  const ranges = proofRanges(size, index).map(([lo, hi]) => ({ lo, hi, range: new CompactRange() }));
  const byStart = [...ranges].sort((a, b) => a.lo - b.lo);
  let i = 0;
  let at = 0;
  for (const leaf of leaves) {
    if (at >= size) break;
    while (i < byStart.length && byStart[i]!.hi <= at) i++;
    const r = byStart[i];
    if (r !== undefined && r.lo <= at) r.range.pushLeafHash(leaf);
    at++;
  }
  if (at < size) throw new Error(`a tree of ${size} leaves, but only ${at} given`);
  return ranges.map((r) => r.range.root());
}

/** RFC 6962 §2.1.1 audit path of leaf `index` in the tree over `leaves` (leaf hashes). */
export function inclusionProof(leaves: Uint8Array[], index: number): Uint8Array[] {
  return inclusionProofOf(leaves, leaves.length, index);
}

/** RFC 9162 §2.1.3.2: does `proof` show leaf `index` (leaf hash `leaf`) in the tree of `size` with `root`? */
export function verifyInclusion(leaf: Uint8Array, index: number, size: number, proof: Uint8Array[], root: Uint8Array): boolean {
  if (index < 0 || index >= size) return false;
  let fn = index;
  let sn = size - 1;
  let r = leaf;
  for (const p of proof) {
    if (sn === 0) return false;
    if (fn % 2 === 1 || fn === sn) {
      r = nodeHash(p, r);
      if (fn % 2 === 0) {
        while (fn % 2 === 0 && fn !== 0) {
          fn = Math.floor(fn / 2);
          sn = Math.floor(sn / 2);
        }
      }
    } else {
      r = nodeHash(r, p);
    }
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  return sn === 0 && Buffer.from(r).equals(Buffer.from(root));
}
