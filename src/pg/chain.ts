// The audit chain on PostgreSQL: appending under a per-tenant lock, and verification
// that streams the chains through COPY … TO STDOUT. The rules are those of
// src/audit/ (canonical text and hash: chain.ts; the walk and where a chain starts:
// verify.ts); only the reading and writing differ.
import type { SQL } from "bun";
import { onWorkers } from "../worker-pool.ts";
import { GENESIS_HASH, linkEntries, ORPHAN_CHAINS_SQL, requireStoredAsAppended, type AppendedEntry, type ChainHead, type ChainInput, type EntryRow } from "../audit/chain.ts";
import { chainStartFromRecords, ChainWalk, START_KINDS, unstartedChain, type ChainStart, type CheckpointRef, type TenantChainResult, type VerifyOptions } from "../audit/verify.ts";

/**
 * Key 1 of the per-tenant chain lock, pg_advisory_xact_lock(CHAIN_LOCK, tenantId):
 * its own number, apart from LOCK_NAMESPACE's locks (src/pg/store.ts).
 */
export const CHAIN_LOCK = 0x6e7701;

/**
 * Takes the chain locks of these tenants until the transaction ends, in ascending order:
 * one round trip for every lock (the sorted subquery feeds the aggregate row by row), so
 * a batch over 500 tenants costs one statement, not 500. PostgreSQL documents that
 * feeding order as what usually happens, not a promise; should two batches ever lock in
 * opposite orders, it detects the deadlock and fails one of them (40P01, answered 503),
 * which is then not stored. Taking a lock the transaction holds already returns at once.
 */
export async function lockChainsPg(tx: SQL, tenantIds: readonly number[]): Promise<void> {
  const sorted = [...new Set(tenantIds)].sort((a, b) => a - b);
  await tx`SELECT count(pg_advisory_xact_lock(${CHAIN_LOCK}, t)) FROM (SELECT unnest(${sorted}::int[]) AS t ORDER BY 1) AS sorted`;
}

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
  const tenantIds = [...new Set(inputs.map((i) => i.tenantId))].sort((a, b) => a - b);
  // The ids first, before the locks: a sequence needs none, and batches over many tenants
  // queue on the locks, so every round trip taken out from under them counts.
  const idRows: { id: string }[] = await tx`SELECT nextval(pg_get_serial_sequence('audit_entries', 'id')) AS id FROM generate_series(1, ${inputs.length})`;
  await lockChainsPg(tx, tenantIds);
  const headRows: { t: number; seq: string | null; hash: string | null; aseq: string | null; ahash: string | null }[] = await tx`
    SELECT t, e.seq, e.hash, r.seq AS aseq, r.hash AS ahash
    FROM unnest(${tenantIds}::int[]) AS t
    LEFT JOIN LATERAL (SELECT seq, hash FROM audit_entries WHERE tenant_id = t ORDER BY seq DESC LIMIT 1) AS e ON true
    LEFT JOIN audit_retention_anchors AS r ON r.tenant_id = t`;
  const heads = new Map<number, ChainHead>();
  // The newest entry; after audit-retentie deleted the whole chain, the retention anchor; else genesis.
  for (const h of headRows) heads.set(h.t, h.seq !== null ? { seq: Number(h.seq), hash: h.hash! } : h.aseq !== null ? { seq: Number(h.aseq), hash: h.ahash! } : { seq: 0, hash: GENESIS_HASH });
  const ids = idRows.map((r) => Number(r.id)).sort((a, b) => a - b);
  let next = 0;
  const out = linkEntries(inputs, (tenantId) => heads.get(tenantId)!, () => ids[next++]!);
  // One statement of twelve arrays (unnest), not a VALUES list of twelve parameters per
  // row: PostgreSQL parses and plans it once, whatever the batch's size, and Bun binds
  // twelve values instead of thousands (bench/pg-ingest-profile.ts).
  const stored: { id: string; hash: string }[] = await tx`INSERT INTO audit_entries (tenant_id, seq, id, created_at, actor, action, subject, details, prev_hash, hash, sleutel, inhoud)
    SELECT * FROM unnest(${out.map((e) => e.tenantId)}::int[], ${out.map((e) => e.seq)}::bigint[], ${out.map((e) => e.id)}::bigint[],
      ${out.map((e) => e.createdAt)}::text[], ${out.map((e) => e.actor)}::text[], ${out.map((e) => e.action)}::text[], ${out.map((e) => e.subject)}::text[],
      ${out.map((e) => e.details)}::text[], ${out.map((e) => e.prevHash)}::text[], ${out.map((e) => e.hash)}::text[],
      ${out.map((e) => e.key?.sleutel ?? null)}::text[], ${out.map((e) => e.key?.inhoud ?? null)}::text[])
    RETURNING id, hash`;
  requireStoredAsAppended(out, stored.map((r) => ({ id: Number(r.id), hash: r.hash })));
  return out;
}

/** ORPHAN_CHAINS_SQL on PostgreSQL (orphanChains on SQLite). */
export async function orphanChainsPg(sql: SQL): Promise<number[]> {
  return ((await sql.unsafe(ORPHAN_CHAINS_SQL)) as { id: number }[]).map((r) => Number(r.id));
}

/** COPY's text format as PostgreSQL writes it: a backslash before b f n r t v or itself. */
const UNESCAPED: Record<string, string> = { b: "\b", f: "\f", n: "\n", r: "\r", t: "\t", v: "\v", "\\": "\\" };
export function copyUnescape(field: string): string {
  return field.indexOf("\\") < 0 ? field : field.replace(/\\(.)/g, (_, ch: string) => UNESCAPED[ch] ?? ch);
}

/**
 * The rows of `COPY (query) TO STDOUT` (text format), each as its fields still escaped,
 * streamed a chunk's rows at a time: memory holds one chunk, not the result. No field
 * may be NULL (\N).
 */
export async function* copyRows(tx: SQL, query: string): AsyncGenerator<string[][]> {
  const reader = tx.unsafe(`COPY (${query}) TO STDOUT`).readable().getReader();
  const decoder = new TextDecoder();
  let rest = "";
  let finished = false;
  try {
    for (let r = await reader.read(); !r.done; r = await reader.read()) {
      const lines = (rest + decoder.decode(r.value, { stream: true })).split("\n");
      rest = lines.pop()!;
      yield lines.map((line) => line.split("\t"));
    }
    finished = true;
    if (rest !== "") throw new Error("COPY ended in the middle of a row");
  } finally {
    // A consumer that broke off (or an error) ends the COPY, so the connection is not
    // left in the middle of one.
    if (!finished) await reader.cancel().catch(() => {});
  }
}

/** The columns every chain read selects, in this order (entryRowOf reads them). */
export const ENTRY_COLUMNS = "seq, id, created_at, actor, action, subject, details, prev_hash, hash";

/** An audit_entries row from COPY's fields, ENTRY_COLUMNS starting at field `at`. */
export function entryRowOf(f: readonly string[], at: number): EntryRow {
  return {
    seq: Number(f[at]),
    id: Number(f[at + 1]),
    created_at: f[at + 2]!,
    actor: copyUnescape(f[at + 3]!),
    action: copyUnescape(f[at + 4]!),
    subject: copyUnescape(f[at + 5]!),
    details: copyUnescape(f[at + 6]!),
    prev_hash: f[at + 7]!,
    hash: f[at + 8]!,
  };
}

export interface PgTenantTask {
  tenantId: number;
  checkpoint: CheckpointRef | null;
}

/**
 * Verifies one tenant's chain; see verifyTenantsPg. Given a transaction (sql.begin's
 * client), it reads in that transaction's snapshot.
 */
export async function verifyTenantChainPg(sql: SQL, tenantId: number, opts: VerifyOptions): Promise<TenantChainResult> {
  const results = await verifyRangePg(sql, [{ tenantId, checkpoint: opts.checkpoint }], opts.verifiers);
  return results.get(tenantId)!;
}

/**
 * Verifies a range of tenants in one snapshot (REPEATABLE READ, read only): each
 * tenant's start (genesis, a signed retention record or adoption) and its entries are read
 * together, as on SQLite. The entries of the whole range come in one streamed
 * `COPY … TO STDOUT` in (tenant, seq) order — read and parsed here about twice as fast
 * as a cursor's FETCH — and each row goes into its tenant's ChainWalk, the same walk as
 * on SQLite. Memory holds one chunk and one walk per tenant of the range.
 */
export async function verifyRangePg(sql: SQL, tasks: readonly PgTenantTask[], verifiers: VerifyOptions["verifiers"]): Promise<Map<number, TenantChainResult>> {
  for (const t of tasks) if (!Number.isSafeInteger(t.tenantId)) throw new Error(`tenant id ${t.tenantId} is not an integer`);
  const inTransaction = typeof (sql as { savepoint?: unknown }).savepoint === "function";
  return inTransaction ? verifyRangeSnapshot(sql, tasks, verifiers) : sql.begin("ISOLATION LEVEL REPEATABLE READ READ ONLY", (tx) => verifyRangeSnapshot(tx, tasks, verifiers));
}

async function verifyRangeSnapshot(tx: SQL, tasks: readonly PgTenantTask[], verifiers: VerifyOptions["verifiers"]): Promise<Map<number, TenantChainResult>> {
  if (tasks.length === 0) return new Map();
  const ids = tasks.map((t) => t.tenantId);
  const firsts: { t: number; seq: string | null; id: string | null }[] = await tx`
    SELECT t, e.seq, e.id FROM unnest(${ids}::int[]) AS t
    LEFT JOIN LATERAL (SELECT seq, id FROM audit_entries WHERE tenant_id = t ORDER BY seq LIMIT 1) AS e ON true`;
  const firstOf = new Map(firsts.map((f) => [f.t, f.seq === null ? null : { seq: Number(f.seq), id: Number(f.id) }]));
  const walks = new Map<number, ChainWalk>();
  const unstarted = new Map<number, { reden: "retentie-ontbreekt" | "retentie-ongeldig"; count: number }>();
  const recordsOf = await startRecords(tx, ids);
  for (const task of tasks) {
    const first = firstOf.get(task.tenantId) ?? null;
    const start = chainStartFromRecords(recordsOf.get(task.tenantId) ?? [], task.tenantId, first?.seq ?? null, verifiers);
    if (start.ok) walks.set(task.tenantId, new ChainWalk(task.tenantId, start, first, task.checkpoint));
    else unstarted.set(task.tenantId, { reden: start.reden, count: 0 });
  }
  // COPY takes no bind parameters: the tenant ids are checked integers.
  const query = `SELECT tenant_id, ${ENTRY_COLUMNS} FROM audit_entries WHERE tenant_id IN (${ids.join(", ")}) ORDER BY tenant_id, seq`;
  let tenantId = -1;
  let walk: ChainWalk | undefined;
  for await (const rows of copyRows(tx, query)) {
    for (const f of rows) {
      const t = Number(f[0]);
      if (t !== tenantId) {
        tenantId = t;
        walk = walks.get(t);
      }
      if (walk === undefined) {
        unstarted.get(t)!.count++;
        continue;
      }
      walk.push(entryRowOf(f, 1));
    }
  }
  const results = new Map<number, TenantChainResult>();
  for (const task of tasks) {
    const w = walks.get(task.tenantId);
    if (w) results.set(task.tenantId, w.result());
    else {
      const u = unstarted.get(task.tenantId)!;
      results.set(task.tenantId, unstartedChain(firstOf.get(task.tenantId) ?? null, u.count, u.reden));
    }
  }
  return results;
}

/**
 * Every start record (retention records, adoptions) of these tenants, in one query,
 * keyed by tenant; chainStartFromRecords picks and orders them as on SQLite.
 */
export async function startRecords(tx: SQL, tenantIds: readonly number[]): Promise<Map<number, { note: string; grootte: number; positie: number }[]>> {
  const rows: { tenant_id: number; note: string; grootte: string; positie: string }[] = await tx`
    SELECT tenant_id, note, grootte, positie FROM audit_anchor_log
    WHERE tenant_id = ANY(${tenantIds}::int[]) AND soort IN ${tx(START_KINDS as unknown as string[])}`;
  const byTenant = new Map<number, { note: string; grootte: number; positie: number }[]>();
  for (const r of rows) {
    const list = byTenant.get(r.tenant_id) ?? [];
    list.push({ note: r.note, grootte: Number(r.grootte), positie: Number(r.positie) });
    byTenant.set(r.tenant_id, list);
  }
  return byTenant;
}

/** chainStart (src/audit/verify.ts) on PostgreSQL: the tenant's start records read in `tx`. */
export async function chainStartPg(tx: SQL, tenantId: number, firstSeq: number | null, verifiers: VerifyOptions["verifiers"]): Promise<ChainStart> {
  return chainStartFromRecords((await startRecords(tx, [tenantId])).get(tenantId) ?? [], tenantId, firstSeq, verifiers);
}

/**
 * entriesAfter (src/audit/chain.ts) on PostgreSQL: a tenant's entries with
 * afterSeq < seq <= uptoSeq in seq order, streamed through COPY in `tx`, each handed to
 * `take` until it answers false. The rest is read and ignored: breaking off a COPY
 * cancels the statement, which aborts the transaction.
 */
export async function readEntriesPg(tx: SQL, tenantId: number, afterSeq: number, uptoSeq: number | null, take: (r: EntryRow) => boolean): Promise<void> {
  // COPY takes no bind parameters: the numbers are checked integers.
  for (const n of [tenantId, afterSeq, uptoSeq ?? 0]) if (!Number.isSafeInteger(n)) throw new Error(`${n} is not an integer`);
  const upTo = uptoSeq === null ? "" : ` AND seq <= ${uptoSeq}`;
  let taking = true;
  for await (const rows of copyRows(tx, `SELECT ${ENTRY_COLUMNS} FROM audit_entries WHERE tenant_id = ${tenantId} AND seq > ${afterSeq}${upTo} ORDER BY seq`)) {
    for (const r of rows) if (taking) taking = take(entryRowOf(r, 0));
  }
}

/** Tenants per snapshot: enough rows per COPY to stream, few enough to share the work out. */
const RANGE_TENANTS = 64;

/**
 * Verifies many tenants, in ranges of contiguous tenant ids, `parallel` ranges at a
 * time. With `workers` (and the database's URL) each range is parsed and hashed in a
 * worker thread with its own connection: the JavaScript work per row is what bounds a
 * single thread (docs/performance.md). Otherwise in this thread, each range on its own
 * pooled connection of `sql`. Results keyed by tenant.
 */
export async function verifyTenantsPg(
  sql: SQL,
  tasks: readonly PgTenantTask[],
  opts: { parallel: number; verifiers: VerifyOptions["verifiers"]; workers?: { url: string; count: number } },
): Promise<Map<number, TenantChainResult>> {
  const sorted = [...tasks].sort((a, b) => a.tenantId - b.tenantId);
  const ranges: PgTenantTask[][] = [];
  for (let i = 0; i < sorted.length; i += RANGE_TENANTS) ranges.push(sorted.slice(i, i + RANGE_TENANTS));
  const results = new Map<number, TenantChainResult>();
  if (opts.workers && opts.workers.count > 0) {
    const init = { url: opts.workers.url, verifierKeys: opts.verifiers.map((v) => v.verifierKey) };
    await onWorkers<PgTenantTask[], [number, TenantChainResult][]>("pg-verify-worker", init, ranges, opts.workers.count, (_, r) => {
      for (const [t, result] of r) results.set(t, result);
    });
    return results;
  }
  let next = 0;
  const worker = async () => {
    while (next < ranges.length) {
      for (const [t, r] of await verifyRangePg(sql, ranges[next++]!, opts.verifiers)) results.set(t, r);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(opts.parallel, ranges.length)) }, worker));
  return results;
}
