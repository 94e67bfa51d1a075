// audit-retentie's work on PostgreSQL, by the same rules as on SQLite (src/audit/retention.ts
// has them and the reasons): the anchor file against its copy; per tenant its prefix,
// each entry checked as the verifier does and the prefix proved against a signed
// checkpoint that covers it (checkPrefix); per group one signed retention record per
// tenant appended to the anchor file (fsynced) and copied into audit_anchor_log with the
// retention anchors in one transaction, before a single entry is deleted; then the
// prefixes in short batches, round robin over the group. A crash at any point leaves
// chains that link up to their records, as on SQLite.
//
// What differs: no gap between batches (PostgreSQL locks only the deleted rows, so the
// host application's appends never wait for them), and the anchor file's appenders are
// ordered by a transaction advisory lock instead of SQLite's write lock.
import type { SQL } from "bun";
import {
  CHAIN_FIRST_SQL,
  CHECKPOINTS_FROM_SQL,
  checkPrefix,
  checkPrefixes,
  checkPrefixesOnWorkers,
  FIRST_NOT_OLDER_SQL,
  HELD_BACK_COUNT_SQL,
  heldBack,
  retentionLines,
  TENANT_GROUP,
  type AuditRetentionResult,
  type DeletionPlan,
  type PrefixCheck,
  type PrefixSource,
  type PrefixTask,
  type RetentionOptions,
  type RetentionPhases,
  type RetentionSigning,
  type RetentionStop,
} from "../audit/retention.ts";
import type { Verifier } from "../audit/note.ts";
import { appendRun } from "../audit/anchoring.ts";
import { appendingTransactionPg, insertRowsPg, lockAndSyncTailPg } from "./anchor-file.ts";
import { chainStartPg, readEntriesPg } from "./chain.ts";
import { compareWithFilePg } from "./offline.ts";

/** What a batch aims at, ms: short transactions, as the login attempts' (src/pg/retention.ts). */
const TARGET_MS = 100;

/** What a retention record needs on PostgreSQL; `url` (the database's) for the checks on worker threads, when `workers` > 0. */
export type PgRetentionSigning = Omit<RetentionSigning, "dbPath"> & { url?: string };

/** Without worker threads: tenants checked side by side, each on its own connection (one is read by the server while another is hashed). */
const PARALLEL_CHECKS = 2;

/** Deletes old audit entries of every tenant that has any; see the top of this file. */
export async function deleteOldAuditEntriesPg(sql: SQL, grens: string, now: Date, signing: PgRetentionSigning, o: RetentionOptions = {}): Promise<AuditRetentionResult> {
  const candidates = ((await sql`
    SELECT id FROM tenants t WHERE (SELECT min(created_at) FROM audit_entries WHERE tenant_id = t.id) < ${grens} ORDER BY id`) as { id: number }[]).map((r) => r.id);
  const gestopt: RetentionStop[] = [];
  if (candidates.length === 0) return { verwijderd: 0, gestopt, achtergehouden: [] };
  const { verifiers } = signing.keys;
  const phases: RetentionPhases = { checkMs: 0, deleteMs: 0 };
  let t0 = performance.now();
  const cmp = await compareWithFilePg(sql, signing.path, verifiers);
  const plans = await checkPrefixes(cmp, candidates, grens, gestopt, (tasks) => checkPrefixesPg(sql, tasks, verifiers, signing));
  phases.checkMs = performance.now() - t0;
  const tijdstip = now.toISOString();
  let verwijderd = 0;
  t0 = performance.now();
  for (let g = 0; g < plans.length; g += TENANT_GROUP) {
    const group = plans.slice(g, g + TENANT_GROUP);
    await recordPlansPg(sql, group, signing, grens, tijdstip);
    verwijderd += await deletePlannedPg(sql, group, o);
  }
  phases.deleteMs = performance.now() - t0;
  o.onPhases?.(phases);
  const achtergehouden = await heldBack(candidates, gestopt, {
    count: async (t) => Number(((await sql.unsafe(HELD_BACK_COUNT_SQL, [t, grens])) as { n: string }[])[0]!.n),
    first: async (t) => {
      const [r] = (await sql.unsafe(CHAIN_FIRST_SQL, [t])) as { seq: string; created_at: string }[];
      return { seq: Number(r!.seq), createdAt: r!.created_at };
    },
  });
  return { verwijderd, gestopt, achtergehouden };
}

/**
 * checkPrefix for every task: on `workers` threads (pg-verify-worker.ts, each its own
 * connection; hashing is CPU-bound, as verification's), or in this thread.
 */
async function checkPrefixesPg(sql: SQL, tasks: PrefixTask[], verifiers: Verifier[], signing: PgRetentionSigning): Promise<Map<number, PrefixCheck>> {
  if (signing.workers > 0 && signing.url !== undefined && tasks.length > 0) return checkPrefixesOnWorkers("pg-verify-worker", { url: signing.url }, tasks, signing.workers, verifiers);
  const results = new Map<number, PrefixCheck>();
  const queue = [...tasks];
  await Promise.all(
    Array.from({ length: PARALLEL_CHECKS }, async () => {
      for (let t = queue.shift(); t !== undefined; t = queue.shift()) results.set(t.tenantId, await checkPrefixPg(sql, t, verifiers));
    }),
  );
  return results;
}

/** checkPrefix for one tenant on PostgreSQL, in one snapshot. */
export function checkPrefixPg(sql: SQL, task: PrefixTask, verifiers: Verifier[]): Promise<PrefixCheck> {
  const { tenantId, grens } = task;
  return sql.begin("ISOLATION LEVEL REPEATABLE READ READ ONLY", async (tx) => {
    const src: PrefixSource = {
      first: async () => {
        const [r] = (await tx`SELECT seq, id FROM audit_entries WHERE tenant_id = ${tenantId} ORDER BY seq LIMIT 1`) as { seq: string; id: string }[];
        return r ? { seq: Number(r.seq), id: Number(r.id) } : null;
      },
      start: (firstSeq) => chainStartPg(tx, tenantId, firstSeq, verifiers),
      firstNotOlder: async (afterSeq) => {
        const [r] = (await tx.unsafe(FIRST_NOT_OLDER_SQL, [tenantId, afterSeq, grens])) as { seq: string }[];
        return r ? Number(r.seq) : null;
      },
      last: async () => Number(((await tx`SELECT max(seq) AS n FROM audit_entries WHERE tenant_id = ${tenantId}`) as { n: string }[])[0]!.n),
      checkpointsFrom: async (atLeast, after) => ((await tx.unsafe(CHECKPOINTS_FROM_SQL, [tenantId, atLeast, after])) as { note: string }[]).map((r) => r.note),
      entries: (uptoSeq, take) =>
        readEntriesPg(tx, tenantId, 0, uptoSeq, (r) => {
          take(r);
          return true;
        }),
    };
    return checkPrefix(src, task, verifiers);
  });
}

/**
 * The group's retention records: appended to the anchor file (fsynced) inside the
 * transaction that copies them into audit_anchor_log and moves the retention anchors,
 * so the database never relies on a record the file lacks. First the file's tail that
 * a crash may have left (tailRows), as on SQLite.
 */
async function recordPlansPg(sql: SQL, plans: DeletionPlan[], signing: PgRetentionSigning, grens: string, tijdstip: string): Promise<void> {
  const lines = retentionLines(plans, signing, grens, tijdstip);
  // A failure (also at COMMIT) takes the appended records back (appendingTransactionPg).
  await appendingTransactionPg(sql, async (tx, run) => {
    await lockAndSyncTailPg(tx, signing.path, signing.keys.verifiers);
    if (lines.length > 0) await insertRowsPg(tx, appendRun(signing.path, lines, run));
    // Where an append starts once a whole chain is gone (src/pg/chain.ts appendEntriesPg).
    for (let i = 0; i < plans.length; i += 1000) {
      const anchors = plans.slice(i, i + 1000).map((p) => ({ tenant_id: p.tenantId, seq: p.seq, hash: p.hash, bijgewerkt: tijdstip }));
      await tx`
        INSERT INTO audit_retention_anchors ${tx(anchors)}
        ON CONFLICT (tenant_id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash, bijgewerkt = excluded.bijgewerkt`;
    }
  });
}

/**
 * The planned prefixes, in batches of one transaction: the next rows of every unfinished
 * tenant of the group (round robin). Sized so a batch takes about TARGET_MS.
 */
export async function deletePlannedPg(sql: SQL, plans: DeletionPlan[], o: RetentionOptions): Promise<number> {
  const clock = o.clock ?? (() => performance.now());
  const next = new Map(plans.map((p) => [p.tenantId, p.from]));
  let active = plans.filter((p) => p.from <= p.seq);
  let size = o.batchSize ?? 2000;
  let verwijderd = 0;
  while (active.length > 0) {
    const per = Math.max(1, Math.floor(size / active.length));
    const upTo = active.map((p) => Math.min(p.seq, next.get(p.tenantId)! + per - 1));
    const ids = active.map((p) => p.tenantId);
    const t0 = clock();
    // In a transaction, though it is one statement: the server goes on with a statement
    // whose client died, and would commit it; a transaction waits for the client's COMMIT.
    // The write API's idempotency keys are in the entries' rows: they go with them.
    const n = await sql.begin(async (tx) => {
      const [{ n }] = (await tx`
        WITH gone AS (
          DELETE FROM audit_entries e USING unnest(${ids}::int[], ${upTo}::bigint[]) AS u(t, s)
          WHERE e.tenant_id = u.t AND e.seq <= u.s RETURNING 1
        ) SELECT count(*)::int AS n FROM gone`) as [{ n: number }];
      return n;
    });
    const lockMs = clock() - t0;
    // Committed: only now does the progress move on (a batch that failed is taken again by the next run).
    active.forEach((p, i) => next.set(p.tenantId, upTo[i]! + 1));
    active = active.filter((p) => next.get(p.tenantId)! <= p.seq);
    verwijderd += n;
    o.afterBatch?.(verwijderd);
    o.onBatch?.({ rows: n, chunks: 1, lockMs, commitMs: 0, checkpointMs: 0 });
    if (o.batchSize === undefined) size = Math.max(200, Math.min(50_000, Math.round(size * Math.min(1.5, Math.sqrt(TARGET_MS / Math.max(lockMs, 1))))));
  }
  return verwijderd;
}
