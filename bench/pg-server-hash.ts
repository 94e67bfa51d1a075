// Whether PostgreSQL could check the audit chain's hashes itself, so audit-retentie's
// checked delete would cost less than reading the rows out and hashing them here (a
// diagnosis, not a scored figure; bench/cases/pg.ts measures the job at L). On a
// throw-away cluster: the oldest 1.5 M entries of the L data (seq ≤ 1500 of every
// tenant), the chain's canonical text built in SQL (to_json of each text, as
// JSON.stringify writes it) and hashed with sha256(); beside it one plain DELETE of the
// same rows, the baseline, each DELETE rolled back so every round sees the same rows.
//
//   bun run bench -- L --cases verify   # once, to build the L data
//   bun bench/pg-server-hash.ts
import { Database } from "bun:sqlite";
import { SQL } from "bun";
import { existsSync } from "node:fs";
import { startCluster } from "../test/pg.ts";
import { rowHash } from "../src/audit/chain.ts";
import { dbPath } from "./lib.ts";

const source = dbPath("L", 42);
if (!existsSync(source)) throw new Error(`${source} missing: build the L data first (bun run bench -- L --cases verify)`);
const PER_TENANT = 1500;
const cluster = await startCluster();
try {
  const sql = new SQL(await cluster.createDatabase("hash"), { max: 4 });
  await sql.unsafe(`CREATE TABLE audit_entries (tenant_id integer NOT NULL, seq bigint NOT NULL, id bigint NOT NULL, created_at text COLLATE "C" NOT NULL,
    actor text NOT NULL, action text NOT NULL, subject text NOT NULL, details text NOT NULL, prev_hash text NOT NULL, hash text NOT NULL, PRIMARY KEY (tenant_id, seq))`);
  const lite = new Database(source, { readonly: true });
  const rows = lite.query("SELECT tenant_id, seq, id, created_at, actor, action, subject, details, prev_hash, hash FROM audit_entries WHERE seq <= ?").all(PER_TENANT) as any[];
  const jsBad = rows.filter((r) => rowHash(r.tenant_id, r) !== r.hash).length;
  for (let i = 0; i < rows.length; i += 5000) await sql`INSERT INTO audit_entries ${sql(rows.slice(i, i + 5000))}`;
  await sql.unsafe("VACUUM ANALYZE audit_entries");
  // The canonical text of src/audit/chain.ts canonicalTextOf, in SQL.
  const canonical = `'["nachtwacht-audit-v1",' || tenant_id || ',' || seq || ',' || to_json(created_at)::text || ',' || to_json(actor)::text || ',' || to_json(action)::text || ',' || to_json(subject)::text || ',' || to_json(details)::text || ',' || to_json(prev_hash)::text || ']'`;
  const computed = `encode(sha256(convert_to(${canonical}, 'UTF8')), 'hex')`;
  const rolledBack = (query: string) => sql.begin(async (tx) => Promise.reject({ result: await tx.unsafe(query) })).catch((e) => e.result);
  const time = async (f: () => Promise<unknown>) => {
    const t0 = performance.now();
    const result = await f();
    return { ms: Math.round(performance.now() - t0), result };
  };
  console.log(`rows ${rows.length}; hashed here, not matching: ${jsBad}`);
  for (let round = 1; round <= 2; round++) {
    const plain = await time(() => rolledBack("DELETE FROM audit_entries"));
    const check = await time(() => sql.unsafe(`SELECT count(*) FILTER (WHERE ${computed} <> hash) AS bad FROM audit_entries`));
    const checked = await time(() => rolledBack(`WITH d AS (DELETE FROM audit_entries RETURNING hash, ${computed} AS c) SELECT count(*) FILTER (WHERE c <> hash) AS bad FROM d`));
    const returning = await time(() => rolledBack("WITH d AS (DELETE FROM audit_entries RETURNING tenant_id, seq, hash) SELECT count(*) AS n FROM d"));
    const ratio = (ms: number) => (ms / plain.ms).toFixed(2);
    console.log(
      `round ${round}: one DELETE ${plain.ms} ms (baseline); hashes checked in SQL ${check.ms} ms = ${ratio(check.ms)}× (not matching: ${(check.result as any)[0].bad}); ` +
        `DELETE checking in SQL ${checked.ms} ms = ${ratio(checked.ms)}× (not matching: ${(checked.result as any)[0].bad}); DELETE … RETURNING the hashes ${returning.ms} ms = ${ratio(returning.ms)}×`,
    );
  }
  await sql.close();
} finally {
  await cluster.stop();
}
