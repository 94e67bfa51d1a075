// The audit hash chain: canonical form, hashing and appending. docs/audit-chain.md is
// the specification for other implementations; test/vectors/audit-chain.json holds
// known-answer vectors that both must reproduce.
import type { Database } from "bun:sqlite";

/** prevHash of a tenant's first entry (seq 1). */
export const GENESIS_HASH = "0".repeat(64);
/** First element of the canonical array; changes if the format ever does. */
export const CHAIN_VERSION = "nachtwacht-audit-v1";

export interface ChainFields {
  tenantId: number;
  seq: number;
  createdAt: string;
  actor: string;
  action: string;
  subject: string;
  /** Canonical JSON text (see canonicalJson), hashed exactly as stored. */
  details: string;
  prevHash: string;
}

/**
 * The bytes that are hashed: a JSON array (ECMAScript JSON.stringify, no whitespace)
 * of the version tag and the fields in a fixed order, encoded as UTF-8.
 */
export function canonicalText(e: ChainFields): string {
  return canonicalTextOf(e.tenantId, e.seq, e.createdAt, e.actor, e.action, e.subject, e.details, e.prevHash);
}

/**
 * The one place the canonical array is written. Positional, so the verifier's loop
 * builds no object per row: one native JSON.stringify of the array is the cheapest
 * way to the bytes (faster than concatenating per-field escapes).
 */
function canonicalTextOf(tenantId: number, seq: number, createdAt: string, actor: string, action: string, subject: string, details: string, prevHash: string): string {
  return JSON.stringify([CHAIN_VERSION, tenantId, seq, createdAt, actor, action, subject, details, prevHash]);
}

/** An audit_entries row as stored. */
export interface EntryRow {
  seq: number;
  id: number;
  created_at: string;
  actor: string;
  action: string;
  subject: string;
  details: string;
  prev_hash: string;
  hash: string;
}

/** The hash a stored row's fields give (compare with its `hash` column). */
export function rowHash(tenantId: number, r: EntryRow): string {
  return sha256Hex(canonicalTextOf(tenantId, r.seq, r.created_at, r.actor, r.action, r.subject, r.details, r.prev_hash));
}

/**
 * A tenant's entries with afterSeq < seq <= uptoSeq, in seq order, streamed: iterate()
 * steps the cursor row by row (values() would build every row first: 1M entries, 1.4 GB
 * peak RSS and 3x slower, bench/verify-memory.ts). Raw SQL: the verification scan.
 */
export function entriesAfter(sqlite: Database, tenantId: number, afterSeq = 0, uptoSeq = Number.MAX_SAFE_INTEGER): IterableIterator<EntryRow> {
  return sqlite
    .query(
      `SELECT seq, id, created_at, actor, action, subject, details, prev_hash, hash
       FROM audit_entries WHERE tenant_id = ? AND seq > ? AND seq <= ? ORDER BY seq`,
    )
    .iterate(tenantId, afterSeq, uptoSeq) as IterableIterator<EntryRow>;
}

export function sha256Hex(text: string): string {
  return Bun.CryptoHasher.hash("sha256", text, "hex") as string;
}

export function entryHash(e: ChainFields): string {
  return sha256Hex(canonicalText(e));
}

/** JSON with object keys sorted (recursively) and no whitespace. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(sortKeys(value));
}

function sortKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v !== null && typeof v === "object") {
    const out: Record<string, unknown> = {};
    for (const k of Object.keys(v as object).sort()) out[k] = sortKeys((v as Record<string, unknown>)[k]);
    return out;
  }
  return v;
}

/** ISO 8601 UTC with milliseconds: `2026-11-21T05:25:39.123Z`. */
const ISO_UTC = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

export interface NewAuditEntry {
  tenantId: number;
  actor: string;
  action: string;
  subject: string;
  details?: unknown;
  /** Defaults to now. */
  createdAt?: Date | string;
}

export interface AppendedEntry extends ChainFields {
  id: number;
  hash: string;
}

/**
 * Appends one entry to a tenant's chain. The read of the head and the insert run in
 * one IMMEDIATE transaction: SQLite's single writer lock then serialises appenders
 * from any number of processes, and the primary key (tenant_id, seq) would refuse a
 * fork even if it did not.
 */
export function appendAuditEntry(sqlite: Database, input: NewAuditEntry): AppendedEntry {
  const createdAt =
    input.createdAt === undefined
      ? new Date().toISOString()
      : typeof input.createdAt === "string"
        ? input.createdAt
        : input.createdAt.toISOString();
  if (!ISO_UTC.test(createdAt)) throw new Error(`createdAt must be ISO 8601 UTC with milliseconds, got ${createdAt}`);
  const details = canonicalJson(input.details ?? {});

  const append = sqlite.transaction((): AppendedEntry => {
    const head = sqlite
      .query("SELECT seq, hash FROM audit_entries WHERE tenant_id = ? ORDER BY seq DESC LIMIT 1")
      .get(input.tenantId) as { seq: number; hash: string } | null;
    // After audit-retentie deleted a whole chain the head is the retention anchor.
    const anchor = head
      ? null
      : (sqlite.query("SELECT seq, hash FROM audit_retention_anchors WHERE tenant_id = ?").get(input.tenantId) as {
          seq: number;
          hash: string;
        } | null);
    const prev = head ?? anchor;
    const { nextId } = sqlite.query("SELECT coalesce(max(id), 0) + 1 AS nextId FROM audit_entries").get() as {
      nextId: number;
    };
    const fields: ChainFields = {
      tenantId: input.tenantId,
      seq: prev ? prev.seq + 1 : 1,
      createdAt,
      actor: input.actor,
      action: input.action,
      subject: input.subject,
      details,
      prevHash: prev ? prev.hash : GENESIS_HASH,
    };
    const hash = entryHash(fields);
    sqlite
      .query(
        `INSERT INTO audit_entries (tenant_id, seq, id, created_at, actor, action, subject, details, prev_hash, hash)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      )
      .run(fields.tenantId, fields.seq, nextId, createdAt, fields.actor, fields.action, fields.subject, details, fields.prevHash, hash);
    return { ...fields, id: nextId, hash };
  });
  return append.immediate();
}

export interface NewLoginAttempt {
  account: string;
  ip: string;
  gelukt: boolean;
  reden?: string | null;
  tenantId?: number | null;
  tijdstip?: Date | string;
}

/** Records one login attempt (BeveiligingsLog); returns its id. */
export function recordLoginAttempt(sqlite: Database, a: NewLoginAttempt): number {
  const tijdstip =
    a.tijdstip === undefined ? new Date().toISOString() : typeof a.tijdstip === "string" ? a.tijdstip : a.tijdstip.toISOString();
  if (!ISO_UTC.test(tijdstip)) throw new Error(`tijdstip must be ISO 8601 UTC with milliseconds, got ${tijdstip}`);
  const row = sqlite
    .query(
      "INSERT INTO login_attempts (tijdstip, account, ip, gelukt, reden, tenant_id) VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
    )
    .get(tijdstip, a.account, a.ip, a.gelukt ? 1 : 0, a.reden ?? null, a.tenantId ?? null) as { id: number };
  return row.id;
}
