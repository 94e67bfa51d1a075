// Whether audit-retentie on PostgreSQL could reach 1.5× one DELETE by trusting an earlier
// verification for the entries' content (a diagnosis, not a scored figure; bench/cases/pg.ts
// measures the job at L). Such a job would rehash nothing: a row changed since the night's
// verification carries a newer transaction id (xmin), which no SQL writer can set. It would
// still read every prefix entry's hash: a retention record carries the tree's compact
// range at the prefix's end. On a throw-away cluster with the L data (migrate-to), each round:
//   delete     one DELETE of the entries older than the 2555-day boundary and a CHECKPOINT,
//              on a fresh copy of the database (the baseline, as bench/cases/pg.ts)
//   hashes     each tenant's prefix read as (seq, hash, xmin) by COPY on two connections, one
//              REPEATABLE READ transaction per tenant, each hash made a tree leaf here
//   rows       the same prefixes as whole rows (what the job's check reads now), not hashed
//   pipelined  on another fresh copy: per group of 100 tenants, (seq, id, created_at,
//              prev_hash, hash, whether xmin is newer than the verification) read and
//              leaf-hashed as above while the group before is deleted by the job's own
//              batches (deletePlannedPg, about 100 ms each), then a CHECKPOINT: such a
//              job's reading and deleting, without its anchor file, proofs, records or
//              per-tenant queries
//
//   bun run bench -- L --cases verify   # once, to build the L data
//   bun bench/pg-prefix-read.ts [--rounds 2]
import { SQL } from "bun";
import { existsSync } from "node:fs";
import { parseSignerKey, parseVerifierKey } from "../src/audit/note.ts";
import { leafHashOfHex } from "../src/audit/merkle.ts";
import { copyRows, ENTRY_COLUMNS } from "../src/pg/chain.ts";
import { deletePlannedPg } from "../src/pg/audit-retention.ts";
import { migrateToPostgres } from "../src/pg/migrate-to.ts";
import { retentionBoundary } from "../src/time.ts";
import { startCluster } from "../test/pg.ts";
import { anchorFileOf, arg, BENCH_SIGNING_KEY, dbPath, NOW } from "./lib.ts";

type Prefix = { t: number; f: string; s: string };

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
  const prefixes = (await sql`SELECT tenant_id AS t, min(seq)::bigint AS f, max(seq)::bigint AS s FROM audit_entries WHERE created_at < ${grens} GROUP BY tenant_id ORDER BY tenant_id`) as Prefix[];
  const total = prefixes.reduce((n, p) => n + Number(p.s) - Number(p.f) + 1, 0);
  // The oldest transaction a verification now would still see running: rows with an xmin from it on count as changed.
  const [{ horizon }] = (await sql`SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS horizon`) as [{ horizon: string }];
  // The template of every copy below may have no session open on it.
  await sql.close();
  const reads = new SQL(await cluster.createDatabase("reads", { template: "prefix" }), { max: 4 });
  /** COPY of each prefix's `query` on two connections of `db`, every row to `row`. */
  const onTwo = async (db: SQL, group: readonly Prefix[], query: (p: Prefix) => string, row: (f: string[]) => void) => {
    const queue = [...group];
    await Promise.all(
      [0, 1].map(async () => {
        for (let p = queue.shift(); p; p = queue.shift()) {
          const q = query(p);
          await db.begin("ISOLATION LEVEL REPEATABLE READ READ ONLY", async (tx) => {
            for await (const chunk of copyRows(tx, q)) for (const f of chunk) row(f);
          });
        }
      }),
    );
  };
  /** A fresh copy of the database, connected. */
  const copy = async (name: string) => {
    const db = new SQL(await cluster.createDatabase(name, { template: "prefix" }), { max: 4 });
    await db`CHECKPOINT`;
    return db;
  };
  for (let round = 1; round <= rounds; round++) {
    let db = await copy(`delete_${round}`);
    t0 = performance.now();
    const deleted = ((await db`WITH gone AS (DELETE FROM audit_entries WHERE created_at < ${grens} RETURNING 1) SELECT count(*)::int AS n FROM gone`) as { n: number }[])[0]!.n;
    await db`CHECKPOINT`;
    const del = performance.now() - t0;
    await db.close();
    await cluster.dropDatabase(`delete_${round}`);

    t0 = performance.now();
    let hashed = 0;
    await onTwo(reads, prefixes, (p) => `SELECT seq, hash, xmin FROM audit_entries WHERE tenant_id = ${p.t} AND seq <= ${p.s} ORDER BY seq`, (f) => {
      leafHashOfHex(f[1]!);
      hashed++;
    });
    const hashes = performance.now() - t0;
    t0 = performance.now();
    let read = 0;
    await onTwo(reads, prefixes, (p) => `SELECT ${ENTRY_COLUMNS} FROM audit_entries WHERE tenant_id = ${p.t} AND seq <= ${p.s} ORDER BY seq`, () => read++);
    const rows = performance.now() - t0;

    db = await copy(`pipelined_${round}`);
    t0 = performance.now();
    // How many transactions since the horizon: a row whose xmin lies within them (age() counts back from now) is newer.
    const [{ since }] = (await db`SELECT pg_current_xact_id()::text::bigint - ${horizon}::bigint AS since`) as [{ since: string }];
    let walked = 0;
    let changed = 0;
    const check = (group: readonly Prefix[]) =>
      onTwo(
        db,
        group,
        (p) => `SELECT seq, id, created_at, prev_hash, hash, age(xmin) BETWEEN 0 AND ${Number(since)} FROM audit_entries WHERE tenant_id = ${p.t} AND seq <= ${p.s} ORDER BY seq`,
        (f) => {
          leafHashOfHex(f[4]!);
          walked++;
          if (f[5] === "t") changed++;
        },
      );
    const groups: Prefix[][] = [];
    for (let g = 0; g < prefixes.length; g += 100) groups.push(prefixes.slice(g, g + 100));
    let checking: Promise<void> | null = check(groups[0]!);
    let gone = 0;
    for (let g = 0; g < groups.length; g++) {
      await checking;
      checking = g + 1 < groups.length ? check(groups[g + 1]!) : null;
      gone += await deletePlannedPg(db, groups[g]!.map((p) => ({ tenantId: p.t, from: Number(p.f), seq: Number(p.s), hash: "", record: null })), {});
    }
    await db`CHECKPOINT`;
    const pipelined = performance.now() - t0;
    await db.close();
    await cluster.dropDatabase(`pipelined_${round}`);

    for (const [what, n] of [["hashes", hashed], ["rows", read], ["pipelined read", walked], ["pipelined delete", gone], ["prefixes", total]] as const) {
      if (n !== deleted) throw new Error(`${what}: ${n} entries, the DELETE ${deleted}`);
    }
    if (changed !== 0) throw new Error(`${changed} rows newer than the horizon, none expected`);
    const x = (ms: number) => `${Math.round(ms)} ms = ${(ms / del).toFixed(2)}×`;
    console.log(
      `round ${round}: ${deleted} entries of ${prefixes.length} tenants; one DELETE and a CHECKPOINT ${Math.round(del)} ms (baseline); hashes ${x(hashes)}; rows ${x(rows)}; pipelined ${x(pipelined)}`,
    );
  }
  await reads.close();
} finally {
  await cluster.stop();
}
