// The audit chain on PostgreSQL: appending under a per-tenant lock, and verification
// that streams each chain through a server-side cursor. The rules are those of
// src/audit/ (canonical text and hash: chain.ts; the walk and where a chain starts:
// verify.ts); only the reading and writing differ.
import type { SQL } from "bun";
import { entryHash, GENESIS_HASH, type AppendedEntry, type ChainFields, type ChainInput, type EntryRow } from "../audit/chain.ts";
import { chainStartFrom, ChainWalk, unstartedChain, type CheckpointRef, type TenantChainResult, type VerifyOptions } from "../audit/verify.ts";

/**
 * Key 1 of the per-tenant chain lock, pg_advisory_xact_lock(CHAIN_LOCK, tenantId):
 * its own number, apart from LOCK_NAMESPACE's locks (src/pg/store.ts).
 */
export const CHAIN_LOCK = 0x6e7701;

const ISO_UTC = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/**
 * Appends entries to their tenants' chains, in order, and returns them as stored.
 * `tx` must be a transaction (sql.begin). Appenders are serialised per tenant, not per
 * table: a transaction-scoped advisory lock on each tenant of the batch, taken in
 * ascending tenant order so two batches never wait for each other in a cycle, then the
 * tenant's head is read (READ COMMITTED: a fresh snapshot after the lock, so it sees
 * the previous holder's commit). Appenders to other tenants run at the same time, and
 * the primary key (tenant_id, seq) would refuse a fork even if the lock were skipped.
 * Ids come from the identity sequence: unique, and increasing in the order given.
 */
export async function appendEntriesPg(tx: SQL, inputs: readonly ChainInput[]): Promise<AppendedEntry[]> {
  if (inputs.length === 0) return [];
  for (const input of inputs) {
    if (!ISO_UTC.test(input.createdAt)) throw new Error(`createdAt must be ISO 8601 UTC with milliseconds, got ${input.createdAt}`);
  }
  const tenantIds = [...new Set(inputs.map((i) => i.tenantId))].sort((a, b) => a - b);
  // One round trip for every lock, in ascending order (the sorted subquery feeds the
  // aggregate row by row), and one for every head: a batch over 500 tenants costs a
  // few statements, not a thousand.
  await tx`SELECT count(pg_advisory_xact_lock(${CHAIN_LOCK}, t)) FROM (SELECT unnest(${tenantIds}::int[]) AS t ORDER BY 1) AS sorted`;
  const headRows: { t: number; seq: string | null; hash: string | null; aseq: string | null; ahash: string | null }[] = await tx`
    SELECT t, e.seq, e.hash, r.seq AS aseq, r.hash AS ahash
    FROM unnest(${tenantIds}::int[]) AS t
    LEFT JOIN LATERAL (SELECT seq, hash FROM audit_entries WHERE tenant_id = t ORDER BY seq DESC LIMIT 1) AS e ON true
    LEFT JOIN audit_retention_anchors AS r ON r.tenant_id = t`;
  const heads = new Map<number, { seq: number; hash: string }>();
  // The newest entry; after audit-retentie deleted the whole chain, the retention anchor; else genesis.
  for (const h of headRows) heads.set(h.t, h.seq !== null ? { seq: Number(h.seq), hash: h.hash! } : h.aseq !== null ? { seq: Number(h.aseq), hash: h.ahash! } : { seq: 0, hash: GENESIS_HASH });
  const idRows: { id: string }[] = await tx`SELECT nextval(pg_get_serial_sequence('audit_entries', 'id')) AS id FROM generate_series(1, ${inputs.length})`;
  const ids = idRows.map((r) => Number(r.id)).sort((a, b) => a - b);
  const out: AppendedEntry[] = [];
  const rows = inputs.map((input, i) => {
    const prev = heads.get(input.tenantId)!;
    const fields: ChainFields = { ...input, seq: prev.seq + 1, prevHash: prev.hash };
    const hash = entryHash(fields);
    heads.set(input.tenantId, { seq: fields.seq, hash });
    out.push({ ...fields, id: ids[i]!, hash });
    return {
      tenant_id: fields.tenantId,
      seq: fields.seq,
      id: ids[i]!,
      created_at: fields.createdAt,
      actor: fields.actor,
      action: fields.action,
      subject: fields.subject,
      details: fields.details,
      prev_hash: fields.prevHash,
      hash,
    };
  });
  // Bun's bulk insert: one statement per batch of rows.
  for (let i = 0; i < rows.length; i += 1000) await tx`INSERT INTO audit_entries ${tx(rows.slice(i, i + 1000))}`;
  return out;
}

/** Rows fetched from the cursor per round trip: constant memory, few round trips. */
const FETCH_ROWS = 5000;

/**
 * Verifies one tenant's chain in one snapshot (REPEATABLE READ, read only): its start
 * and its entries are read together, as on SQLite. The entries stream through a
 * server-side cursor, FETCH_ROWS at a time, into the same walk as on SQLite. Given a
 * transaction (sql.begin's client), it reads in that transaction's snapshot instead.
 */
export async function verifyTenantChainPg(sql: SQL, tenantId: number, opts: VerifyOptions): Promise<TenantChainResult> {
  if (!Number.isSafeInteger(tenantId)) throw new Error(`tenant id ${tenantId} is not an integer`);
  const inTransaction = typeof (sql as { savepoint?: unknown }).savepoint === "function";
  return inTransaction ? verifySnapshotPg(sql, tenantId, opts) : sql.begin("ISOLATION LEVEL REPEATABLE READ READ ONLY", (tx) => verifySnapshotPg(tx, tenantId, opts));
}

async function verifySnapshotPg(tx: SQL, tenantId: number, opts: VerifyOptions): Promise<TenantChainResult> {
  const [firstRow] = await tx`SELECT seq, id FROM audit_entries WHERE tenant_id = ${tenantId} ORDER BY seq LIMIT 1`;
  const first = firstRow ? { seq: Number(firstRow.seq), id: Number(firstRow.id) } : null;
  const notes: { note: string }[] =
    first === null
      ? await tx`SELECT note FROM audit_anchor_log WHERE tenant_id = ${tenantId} AND soort = 'retentie' ORDER BY grootte DESC, positie DESC`
      : first.seq === 1
        ? []
        : await tx`SELECT note FROM audit_anchor_log WHERE tenant_id = ${tenantId} AND soort = 'retentie' AND grootte >= ${first.seq - 1} ORDER BY grootte, positie DESC`;
  const start = chainStartFrom(
    notes.map((n) => n.note),
    tenantId,
    first?.seq ?? null,
    opts.verifiers,
  );
  if (!start.ok) {
    const [{ n }] = await tx`SELECT count(*) AS n FROM audit_entries WHERE tenant_id = ${tenantId}`;
    return unstartedChain(first, Number(n), start.reden);
  }
  const walk = new ChainWalk(tenantId, start, first, opts.checkpoint);
  // DECLARE takes no bind parameters: the tenant id is a checked integer literal.
  await tx.unsafe(
    `DECLARE chain NO SCROLL CURSOR FOR
       SELECT seq, id, created_at, actor, action, subject, details, prev_hash, hash
       FROM audit_entries WHERE tenant_id = ${tenantId} ORDER BY seq`,
  );
  for (;;) {
    const batch: EntryRow[] = await tx.unsafe(`FETCH ${FETCH_ROWS} FROM chain`);
    for (const r of batch) {
      // bigint columns arrive as text; the canonical form has numbers.
      r.seq = Number(r.seq);
      r.id = Number(r.id);
      walk.push(r);
    }
    if (batch.length < FETCH_ROWS) break;
  }
  await tx.unsafe("CLOSE chain");
  return walk.result();
}

export interface PgTenantTask {
  tenantId: number;
  checkpoint: CheckpointRef | null;
}

/**
 * Verifies many tenants, `parallel` at a time, each on its own pooled connection:
 * the server reads the next rows while this process hashes. Results keyed by tenant.
 */
export async function verifyTenantsPg(sql: SQL, tasks: readonly PgTenantTask[], opts: { parallel: number; verifiers: VerifyOptions["verifiers"] }): Promise<Map<number, TenantChainResult>> {
  const results = new Map<number, TenantChainResult>();
  let next = 0;
  const worker = async () => {
    while (next < tasks.length) {
      const t = tasks[next++]!;
      results.set(t.tenantId, await verifyTenantChainPg(sql, t.tenantId, { checkpoint: t.checkpoint, verifiers: opts.verifiers }));
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(opts.parallel, tasks.length)) }, worker));
  return results;
}
