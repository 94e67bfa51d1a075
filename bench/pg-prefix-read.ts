// Whether audit-retentie on PostgreSQL could reach 1.5× one DELETE by trusting an earlier
// verification for the entries' content (a diagnosis, not a scored figure; bench/cases/pg.ts
// measures the job at L). A retention record needs the tree's compact range at the end of
// each tenant's prefix, so even a check that rehashed nothing would still read every
// prefix entry's hash. On a throw-away cluster with the L data (migrate-to), each round:
//   delete   one DELETE of the entries older than the 2555-day boundary, rolled back (the baseline)
//   hashes   each tenant's prefix read as (seq, hash, xmin) by COPY on two connections, one
//            REPEATABLE READ transaction per tenant, each hash made a tree leaf here
//   rows     the same prefixes as whole rows (what the job's check reads now), not hashed
//
//   bun run bench -- L --cases verify   # once, to build the L data
//   bun bench/pg-prefix-read.ts [--rounds 2]
import { SQL } from "bun";
import { existsSync } from "node:fs";
import { parseSignerKey, parseVerifierKey } from "../src/audit/note.ts";
import { leafHashOfHex } from "../src/audit/merkle.ts";
import { copyRows, ENTRY_COLUMNS } from "../src/pg/chain.ts";
import { migrateToPostgres } from "../src/pg/migrate-to.ts";
import { retentionBoundary } from "../src/time.ts";
import { startCluster } from "../test/pg.ts";
import { anchorFileOf, arg, BENCH_SIGNING_KEY, dbPath, NOW } from "./lib.ts";

const source = dbPath("L", 42);
if (!existsSync(source)) throw new Error(`${source} missing: build the L data first (bun run bench -- L --cases verify)`);
const rounds = Number(arg("rounds", "2"));
const signer = parseSignerKey(BENCH_SIGNING_KEY);
const cluster = await startCluster();
try {
  const url = await cluster.createDatabase("prefix");
  let t0 = performance.now();
  const moved = await migrateToPostgres({ dbPath: source, anchorPath: anchorFileOf(source), url, verifiers: [parseVerifierKey(signer.verifierKey)], log: () => {}, parallel: 2 });
  if (moved.uitkomst !== "klaar") throw new Error(`migrate-to: ${moved.uitkomst}`);
  console.log(`migrate-to ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  const sql = new SQL(url, { max: 4 });
  await sql`VACUUM ANALYZE`;
  await sql`CHECKPOINT`;
  const grens = retentionBoundary(NOW, 2555);
  // Each tenant's prefix as the job finds it when no entry is out of order: up to its last entry older than grens.
  const prefixes = (await sql`SELECT tenant_id AS t, max(seq)::bigint AS s FROM audit_entries WHERE created_at < ${grens} GROUP BY tenant_id ORDER BY tenant_id`) as { t: number; s: string }[];
  const onTwo = async (query: (p: { t: number; s: string }) => string, row: (f: string[]) => void) => {
    const queue = [...prefixes];
    await Promise.all(
      [0, 1].map(async () => {
        for (let p = queue.shift(); p; p = queue.shift()) {
          const q = query(p);
          await sql.begin("ISOLATION LEVEL REPEATABLE READ READ ONLY", async (tx) => {
            for await (const chunk of copyRows(tx, q)) for (const f of chunk) row(f);
          });
        }
      }),
    );
  };
  for (let round = 1; round <= rounds; round++) {
    t0 = performance.now();
    let deleted = 0;
    await sql
      .begin(async (tx) => {
        deleted = ((await tx`WITH gone AS (DELETE FROM audit_entries WHERE created_at < ${grens} RETURNING 1) SELECT count(*)::int AS n FROM gone`) as { n: number }[])[0]!.n;
        throw new Error("rolled back");
      })
      .catch((e: Error) => {
        if (e.message !== "rolled back") throw e;
      });
    const del = performance.now() - t0;
    t0 = performance.now();
    let hashed = 0;
    await onTwo(
      (p) => `SELECT seq, hash, xmin FROM audit_entries WHERE tenant_id = ${p.t} AND seq <= ${p.s} ORDER BY seq`,
      (f) => {
        leafHashOfHex(f[1]!);
        hashed++;
      },
    );
    const hashes = performance.now() - t0;
    t0 = performance.now();
    let read = 0;
    await onTwo(
      (p) => `SELECT ${ENTRY_COLUMNS} FROM audit_entries WHERE tenant_id = ${p.t} AND seq <= ${p.s} ORDER BY seq`,
      () => read++,
    );
    const rows = performance.now() - t0;
    if (hashed !== deleted || read !== deleted) throw new Error(`the prefixes hold ${hashed}/${read} entries, the DELETE ${deleted}`);
    const x = (ms: number) => `${Math.round(ms)} ms = ${(ms / del).toFixed(2)}×`;
    console.log(`round ${round}: ${deleted} entries of ${prefixes.length} tenants; one DELETE ${Math.round(del)} ms (baseline); hashes ${x(hashes)}; rows ${x(rows)}`);
  }
  await sql.close();
} finally {
  await cluster.stop();
}
