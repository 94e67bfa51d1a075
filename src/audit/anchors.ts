// Head anchors (audit-anker, contract §4): a tenant's chain head (seq, hash) at a
// moment, HMAC-SHA256-signed with AUDIT_ANKER_SLEUTEL. A bare hash chain cannot show
// that its newest entries were cut off, nor that someone who can write the database
// recomputed it from some point on; a recorded head can, and the signature keeps that
// same someone from rewriting or inventing the anchors themselves.
//
// The signature covers a canonical text of the four facts, like the chain's own
// canonical form: a JSON array with a version tag, so another implementation can
// reproduce it byte for byte.
import type { Database } from "bun:sqlite";
import { createHmac, timingSafeEqual } from "node:crypto";
import type { AnchorRef } from "./verify.ts";

export const ANCHOR_VERSION = "nachtwacht-anker-v1";

export interface AnchorFacts {
  tenantId: number;
  seq: number;
  hash: string;
  /** ISO 8601 UTC with milliseconds, the moment audit-anker recorded the head. */
  tijdstip: string;
}

/** One anchor as stored in audit_head_anchors and as one line of AUDIT_ANKER_BESTAND. */
export interface AnchorRecord extends AnchorFacts {
  /** Hex HMAC-SHA256 of anchorText(); null when no key was set. */
  handtekening: string | null;
}

export function anchorText(a: AnchorFacts): string {
  return JSON.stringify([ANCHOR_VERSION, a.tenantId, a.seq, a.hash, a.tijdstip]);
}

export function signAnchor(key: string, a: AnchorFacts): string {
  return createHmac("sha256", key).update(anchorText(a)).digest("hex");
}

const HEX64 = /^[0-9a-f]{64}$/;

export function verifyAnchorSignature(key: string, a: AnchorFacts, handtekening: string | null | undefined): boolean {
  if (typeof handtekening !== "string" || !HEX64.test(handtekening)) return false;
  // Both sides are 32-byte digests, so timingSafeEqual never sees unequal lengths.
  return timingSafeEqual(Buffer.from(signAnchor(key, a), "hex"), Buffer.from(handtekening, "hex"));
}

/** Why an anchor's signature does not hold. */
export type SignatureProblem = "handtekening-ongeldig" | "handtekening-ontbreekt";

export interface InvalidAnchor {
  seq: number;
  /** The chain counts as broken with this reason (contract §3). */
  reden: "anker-afwijkend";
  probleem: SignatureProblem;
  /** audit_head_anchors.id of the offending row, for the operator. */
  ankerId: number;
}

export interface LoadedAnchors {
  /** Anchors with a valid signature (every anchor when no key is set), in seq order. */
  anchors: AnchorRef[];
  /** The lowest-seq anchor whose signature does not hold; absent when all hold. */
  invalid?: InvalidAnchor;
  /** Whether signatures were checked (a key was set). */
  gecontroleerd: boolean;
}

/**
 * The head anchors of one tenant, ready for verifyTenantChain({headAnchors}), and
 * whether any of them fails its signature. With a key every anchor must carry a
 * valid signature: an unsigned one counts as invalid too, or whoever rewrote an
 * anchor's hash could simply clear its signature. (Anchors written before a key was
 * configured are therefore reported; after checking them against the anchor file an
 * operator retires them once: DELETE FROM audit_head_anchors WHERE handtekening IS NULL.)
 * Without a key nothing can be checked and every anchor is passed on as it is.
 */
export function loadHeadAnchors(sqlite: Database, tenantId: number, key: string | null): LoadedAnchors {
  const rows = sqlite
    .query(
      `SELECT id, seq, hash, tijdstip, handtekening FROM audit_head_anchors
       WHERE tenant_id = ? ORDER BY seq, id`,
    )
    .all(tenantId) as { id: number; seq: number; hash: string; tijdstip: string; handtekening: string | null }[];
  if (key === null) return { anchors: rows.map((r) => ({ seq: r.seq, hash: r.hash })), gecontroleerd: false };

  const anchors: AnchorRef[] = [];
  let invalid: InvalidAnchor | undefined;
  for (const r of rows) {
    if (verifyAnchorSignature(key, { tenantId, seq: r.seq, hash: r.hash, tijdstip: r.tijdstip }, r.handtekening)) {
      anchors.push({ seq: r.seq, hash: r.hash });
    } else {
      invalid ??= {
        seq: r.seq,
        reden: "anker-afwijkend",
        probleem: r.handtekening === null ? "handtekening-ontbreekt" : "handtekening-ongeldig",
        ankerId: r.id,
      };
    }
  }
  return invalid ? { anchors, invalid, gecontroleerd: true } : { anchors, gecontroleerd: true };
}

/**
 * Folds a signature problem into a chain result: the chain is broken at the invalid
 * anchor, unless the walk already found an earlier break (the first break is reported).
 */
export function withAnchorSignatures<R extends { intact: boolean; fout?: { seq: number; entryId: number | null; reden: string } }>(
  sqlite: Database,
  tenantId: number,
  result: R,
  loaded: LoadedAnchors,
): R {
  const bad = loaded.invalid;
  if (!bad) return result;
  if (result.fout && result.fout.seq <= bad.seq) return result;
  const entry = sqlite.query("SELECT id FROM audit_entries WHERE tenant_id = ? AND seq = ?").get(tenantId, bad.seq) as {
    id: number;
  } | null;
  return { ...result, intact: false, fout: { seq: bad.seq, entryId: entry?.id ?? null, reden: bad.reden } };
}

/** One anchor as a line of AUDIT_ANKER_BESTAND (without the newline). */
export function anchorLine(a: AnchorRecord): string {
  return JSON.stringify({ tenantId: a.tenantId, seq: a.seq, hash: a.hash, tijdstip: a.tijdstip, handtekening: a.handtekening });
}

/** Parses one line of AUDIT_ANKER_BESTAND; null when it is not a well-formed anchor. */
export function parseAnchorLine(line: string): AnchorRecord | null {
  let v: unknown;
  try {
    v = JSON.parse(line);
  } catch {
    return null;
  }
  if (v === null || typeof v !== "object") return null;
  const o = v as Record<string, unknown>;
  if (!Number.isSafeInteger(o.tenantId) || !Number.isSafeInteger(o.seq) || (o.seq as number) < 1) return null;
  if (typeof o.hash !== "string" || !HEX64.test(o.hash) || typeof o.tijdstip !== "string") return null;
  if (o.handtekening !== undefined && o.handtekening !== null && typeof o.handtekening !== "string") return null;
  return {
    tenantId: o.tenantId as number,
    seq: o.seq as number,
    hash: o.hash,
    tijdstip: o.tijdstip,
    handtekening: (o.handtekening as string | null) ?? null,
  };
}
