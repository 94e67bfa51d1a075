// The audit hash chain: canonical form, hashing and appending. docs/audit-chain.md is
// the specification for other implementations; test/vectors/audit-chain.json holds
// known-answer vectors that both must reproduce.
import type { Database } from "bun:sqlite";
import { isStorableText } from "../format.ts";
import { isExistingMoment } from "../time.ts";

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

/**
 * The tenants whose audit entries have no row in tenants — deleted behind nachtwacht's
 * back: on SQLite by a connection without foreign keys, on PostgreSQL past the trigger of
 * migration 0002 — in ascending order. Verification and audit-anker take them on like
 * any chain: deleting a tenant's row must not take its entries out of the check. A loose
 * index scan: one seek on the primary key (tenant_id, seq) per tenant, however long the
 * chains. The same SQL on both stores.
 */
export const ORPHAN_CHAINS_SQL = `
  WITH RECURSIVE chain(id) AS (
    SELECT min(tenant_id) FROM audit_entries
    UNION ALL
    SELECT (SELECT min(tenant_id) FROM audit_entries WHERE tenant_id > chain.id) FROM chain WHERE chain.id IS NOT NULL
  )
  SELECT id FROM chain WHERE id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM tenants t WHERE t.id = chain.id) ORDER BY id`;

/** ORPHAN_CHAINS_SQL on SQLite (orphanChainsPg on PostgreSQL). */
export function orphanChains(sqlite: Database): number[] {
  return (sqlite.query(ORPHAN_CHAINS_SQL).values() as [number][]).map(([id]) => id);
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
export function entriesAfter(sqlite: Database, tenantId: number, afterSeq = 0, uptoSeq?: number): IterableIterator<EntryRow> {
  // Without an upper bound unless one is given: SQLite sorts a text seq (a row a writer
  // put there by hand; the column has no type check) after every number, and a bound
  // would leave it unread. Read, it is a break in the chain (volgnummer-gat).
  const columns = "SELECT seq, id, created_at, actor, action, subject, details, prev_hash, hash FROM audit_entries WHERE tenant_id = ? AND seq > ?";
  if (uptoSeq === undefined) return sqlite.query(`${columns} ORDER BY seq`).iterate(tenantId, afterSeq) as IterableIterator<EntryRow>;
  return sqlite.query(`${columns} AND seq <= ? ORDER BY seq`).iterate(tenantId, afterSeq, uptoSeq) as IterableIterator<EntryRow>;
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
    // Without a prototype: a key "__proto__" (JSON.parse makes it an own property) is
    // then a key like any other, not a prototype that assigning would set and drop.
    const out: Record<string, unknown> = Object.create(null);
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
  key?: EntryKey;
}

/** An entry ready to be chained: every field in its stored form. */
export interface ChainInput {
  tenantId: number;
  /** ISO 8601 UTC with milliseconds. */
  createdAt: string;
  actor: string;
  action: string;
  subject: string;
  /** Canonical JSON text (canonicalJson). */
  details: string;
  /** Sent through the write API with an idempotency key: stored in the entry's row, not hashed (src/ingest/audit.ts). */
  key?: EntryKey;
}

/** An entry's idempotency key and the SHA-256 of its content as sent (audit_entries.sleutel, .inhoud). */
export interface EntryKey {
  sleutel: string;
  inhoud: string;
}

/**
 * Appends entries to their tenants' chains, in order, and returns them as stored. Must
 * run inside an IMMEDIATE transaction (appendAuditEntry, src/ingest/audit.ts): SQLite's
 * single writer lock then serialises appenders from any number of processes, and the
 * primary key (tenant_id, seq) would refuse a fork even if it did not. Each tenant's head
 * is read once per call: its newest entry; after audit-retentie deleted the whole chain,
 * the retention anchor; for a new chain, genesis.
 */
export function appendEntries(sqlite: Database, inputs: readonly ChainInput[]): AppendedEntry[] {
  const head = sqlite.query("SELECT seq, hash FROM audit_entries WHERE tenant_id = ? ORDER BY seq DESC LIMIT 1");
  const anchor = sqlite.query("SELECT seq, hash FROM audit_retention_anchors WHERE tenant_id = ?");
  let { nextId } = sqlite.query("SELECT coalesce(max(id), 0) + 1 AS nextId FROM audit_entries").get() as { nextId: number };
  const insert = sqlite.query(
    `INSERT INTO audit_entries (tenant_id, seq, id, created_at, actor, action, subject, details, prev_hash, hash, sleutel, inhoud)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  const out = linkEntries(
    inputs,
    (tenantId) => (head.get(tenantId) as ChainHead | null) ?? (anchor.get(tenantId) as ChainHead | null) ?? { seq: 0, hash: GENESIS_HASH },
    () => nextId++,
  );
  const stored: { id: number; hash: string }[] = [];
  for (const e of out) {
    const r = insert.run(e.tenantId, e.seq, e.id, e.createdAt, e.actor, e.action, e.subject, e.details, e.prevHash, e.hash, e.key?.sleutel ?? null, e.key?.inhoud ?? null);
    // A row a trigger skipped (RAISE(IGNORE)) changes nothing: no receipt for it.
    if (r.changes === 1) stored.push({ id: e.id, hash: e.hash });
  }
  requireStoredAsAppended(out, stored);
  return out;
}

/**
 * Refuses (throws, so the transaction rolls back) unless every appended entry was stored
 * as computed: its id with its hash. A trigger, rule or row security policy that someone
 * who can change the database's schema put on audit_entries could skip or alter a row,
 * and the caller would get a receipt for what is not there.
 */
export function requireStoredAsAppended(appended: readonly AppendedEntry[], stored: readonly { id: number; hash: string }[]): void {
  const byId = new Map(stored.map((r) => [r.id, r.hash]));
  const wrong = appended.filter((e) => byId.get(e.id) !== e.hash);
  if (wrong.length > 0 || stored.length !== appended.length) {
    const e = wrong[0];
    throw new Error(
      `audit_entries: ${appended.length - wrong.length} van ${appended.length} entries opgeslagen zoals berekend` +
        (e ? ` (niet: tenant ${e.tenantId} seq ${e.seq})` : "") +
        "; een trigger, regel of beleid in de database weigert of wijzigt ze. Niets van deze batch is opgeslagen.",
    );
  }
}

/**
 * Refuses (throws) a moment that is not ISO 8601 UTC with milliseconds, as
 * Date.toISOString() writes it, or names no existing moment (isExistingMoment: the write
 * API's rule): 2026-02-30 would be hashed as written and read as 2026-03-02.
 */
function requireMoment(field: string, value: string): void {
  if (!ISO_UTC.test(value)) throw new Error(`${field} must be ISO 8601 UTC with milliseconds, got ${value}`);
  if (!isExistingMoment(value)) throw new Error(`${field} is no existing moment (the write API's "geen bestaand tijdstip"), got ${value}`);
}

/**
 * Refuses (throws) text that not both stores keep as it is (isStorableText, the write
 * API's rule): a NUL, which PostgreSQL's text cannot hold (a signed entry with one could
 * never move there: migrate-to), or a lone UTF-16 surrogate, which both keep as U+FFFD
 * (an entry hashed over it would never verify again).
 */
function requireStorableText(field: string, value: string): void {
  if (!isStorableText(value)) throw new Error(`${field} holds a NUL character (U+0000) or a lone UTF-16 surrogate, which the stores cannot keep as written: not stored`);
}

/** A chain's head: the seq and hash the next entry links to. */
export interface ChainHead {
  seq: number;
  hash: string;
}

/**
 * The one rule of appending, for any store: each input, in order, gets the next seq of
 * its tenant, links to that tenant's head (`headOf`, asked once per tenant: its newest
 * entry; after audit-retentie deleted the whole chain, the retention anchor; for a new
 * chain, genesis) and gets its hash and the next id. The caller writes the result.
 */
export function linkEntries(inputs: readonly ChainInput[], headOf: (tenantId: number) => ChainHead, nextId: () => number): AppendedEntry[] {
  const heads = new Map<number, ChainHead>();
  return inputs.map((input) => {
    // What the write API refuses with a 400, refused here for every other writer
    // (appendAuditEntry, the operator's commands) before anything is stored.
    requireMoment("createdAt", input.createdAt);
    for (const field of ["actor", "action", "subject", "details"] as const) requireStorableText(field, input[field]);
    const prev = heads.get(input.tenantId) ?? headOf(input.tenantId);
    // A head whose seq is no integer was written by hand (SQLite's column checks no type).
    if (!Number.isSafeInteger(prev.seq)) throw new Error(`the chain of tenant ${input.tenantId} ends in an entry whose seq is not an integer (${JSON.stringify(prev.seq)}): not appended; audit-verificatie reports it`);
    const fields: ChainFields = { ...input, seq: prev.seq + 1, prevHash: prev.hash };
    const hash = entryHash(fields);
    heads.set(input.tenantId, { seq: fields.seq, hash });
    return { ...fields, id: nextId(), hash };
  });
}

/** Appends one entry to a tenant's chain, in its own IMMEDIATE transaction. */
export function appendAuditEntry(sqlite: Database, input: NewAuditEntry): AppendedEntry {
  const createdAt =
    input.createdAt === undefined
      ? new Date().toISOString()
      : typeof input.createdAt === "string"
        ? input.createdAt
        : input.createdAt.toISOString();
  const entry: ChainInput = {
    tenantId: input.tenantId,
    createdAt,
    actor: input.actor,
    action: input.action,
    subject: input.subject,
    details: canonicalJson(input.details ?? {}),
  };
  return sqlite.transaction(() => appendEntries(sqlite, [entry])[0]!).immediate();
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
  requireMoment("tijdstip", tijdstip);
  requireStorableText("account", a.account);
  requireStorableText("ip", a.ip);
  if (a.reden != null) requireStorableText("reden", a.reden);
  const row = sqlite
    .query(
      "INSERT INTO login_attempts (tijdstip, account, ip, gelukt, reden, tenant_id) VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
    )
    .get(tijdstip, a.account, a.ip, a.gelukt ? 1 : 0, a.reden ?? null, a.tenantId ?? null) as { id: number };
  return row.id;
}
