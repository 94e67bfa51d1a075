// audit-anker's work on PostgreSQL (src/pg/anchoring.ts) against a real server
// (test/pg.ts): on a copy of the same installation it signs what the SQLite job signs —
// the anchor file byte for byte (Ed25519 signatures are deterministic) and its rows —
// whether it extends a stored compact range or rebuilds the tree, and it refuses a chain
// that does not check out.
import { afterEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { SQL } from "bun";
import { copyFileSync, existsSync, readFileSync } from "node:fs";
import { appendAuditEntry } from "../src/audit/chain.ts";
import { auditKeys } from "../src/audit/keys.ts";
import { parseVerifierKey } from "../src/audit/note.ts";
import { anchorAllPg } from "../src/pg/anchoring.ts";
import { compareTable, migrateToPostgres, tableShape } from "../src/pg/migrate-to.ts";
import { verifyInstallationPg } from "../src/pg/offline.ts";
import * as pgSchema from "../db/schema-pg.ts";
import { addTenant, call, makeTestEnv, NOW, TEST_VERIFIER_KEY, type TestEnv } from "./helpers.ts";
import { useTestCluster } from "./pg.ts";

setDefaultTimeout(60_000);
const DAY = 24 * 3600 * 1000;
const VERIFIERS = [parseVerifierKey(TEST_VERIFIER_KEY)];

const cluster = useTestCluster();
let env: TestEnv | undefined;
const clients: SQL[] = [];
afterEach(async () => {
  env?.cleanup();
  env = undefined;
  for (const c of clients.splice(0)) await c.close();
});

const COLUMNS = "tenant_id, seq, id, created_at, actor, action, subject, details, prev_hash, hash";

/** Appends `n` entries per tenant on SQLite and copies the same rows into PostgreSQL. */
async function appendBoth(sql: SQL, tenants: number[], n: number, from: number) {
  const sqlite = env!.store.sqlite;
  const before = (sqlite.query("SELECT coalesce(max(id), 0) AS m FROM audit_entries").get() as { m: number }).m;
  for (const t of tenants) {
    for (let i = 0; i < n; i++) appendAuditEntry(sqlite, { tenantId: t, actor: `u${i}@example.nl`, action: "dossier.gewijzigd", subject: `dossier/${from + i}`, details: { i: from + i }, createdAt: new Date(NOW.getTime() - (n - i) * DAY) });
  }
  const rows = sqlite.query(`SELECT ${COLUMNS} FROM audit_entries WHERE id > ? ORDER BY id`).all(before) as Record<string, unknown>[];
  for (let i = 0; i < rows.length; i += 500) await sql`INSERT INTO audit_entries ${sql(rows.slice(i, i + 500))}`;
}

/** Three tenants moved to PostgreSQL before any checkpoint; the PostgreSQL side gets its own copy of the anchor file. */
async function installation() {
  env = makeTestEnv();
  const tenants: [number, number, number] = [addTenant(env.store, "Alfa"), addTenant(env.store, "Beta"), addTenant(env.store, "Leeg")];
  for (let i = 0; i < 20; i++) appendAuditEntry(env.store.sqlite, { tenantId: tenants[0]!, actor: `a${i}`, action: "x", subject: "s", details: { i }, createdAt: new Date(NOW.getTime() - (40 - i) * DAY) });
  for (let i = 0; i < 7; i++) appendAuditEntry(env.store.sqlite, { tenantId: tenants[1]!, actor: `b${i}`, action: "y", subject: "s", details: {}, createdAt: new Date(NOW.getTime() - (30 - i) * DAY) });
  const url = await cluster.createDatabase();
  const moved = await migrateToPostgres({ dbPath: env.config.databasePath, anchorPath: env.config.auditAnkerBestand, url, verifiers: VERIFIERS, log: () => {} });
  expect(moved.uitkomst).toBe("klaar");
  const pgPath = `${env.config.auditAnkerBestand}.pg`;
  // No anchor file yet (no run has signed anything): each side starts its own.
  if (existsSync(env.config.auditAnkerBestand)) copyFileSync(env.config.auditAnkerBestand, pgPath);
  const sql = new SQL(url, { max: 4 });
  clients.push(sql);
  return { tenants, url, sql, pgPath, keys: auditKeys(env.config) };
}

async function sameAsSqlite(sql: SQL, pgPath: string) {
  expect(readFileSync(pgPath, "utf8")).toBe(readFileSync(env!.config.auditAnkerBestand, "utf8"));
  expect((await compareTable(env!.store.sqlite, sql, tableShape(pgSchema.auditAnchorLog))).verschil).toBeNull();
}

describe("audit-anker on PostgreSQL", () => {
  test("signs what the SQLite job signs: a first run, then a run that extends the stored ranges", async () => {
    const { tenants, url, sql, pgPath, keys } = await installation();
    expect((await call(env!.app, "/api/cron/audit-anker")).status).toBe(200);
    const first = await anchorAllPg(sql, pgPath, keys);
    expect(first.refused).toEqual([]);
    expect(first.checkpoints.map((c) => [c.tenantId, c.size])).toEqual([[tenants[0], 20], [tenants[1], 7]]);
    expect(first.unchanged).toBe(1);
    expect(first.installatie).not.toBeNull();
    await sameAsSqlite(sql, pgPath);

    // Nothing new: no lines at all.
    const idle = await anchorAllPg(sql, pgPath, keys);
    expect(idle.installatie).toBeNull();
    expect(idle.unchanged).toBe(3);

    await appendBoth(sql, [tenants[0]!, tenants[2]!], 5, 100);
    expect((await call(env!.app, "/api/cron/audit-anker")).status).toBe(200);
    const second = await anchorAllPg(sql, pgPath, keys);
    expect(second.checkpoints.map((c) => [c.tenantId, c.size])).toEqual([[tenants[0], 25], [tenants[2], 5]]);
    expect(second.herbouwd).toBe(false);
    await sameAsSqlite(sql, pgPath);
    const verdict = await verifyInstallationPg(url, pgPath, VERIFIERS, { workers: 0 });
    expect(verdict.probleem).toBeUndefined();
    expect(verdict.tenants.every((t) => t.intact)).toBe(true);
  });

  test("without a usable stored range it rebuilds the tree from the chain's start and signs the same", async () => {
    const { tenants, sql, pgPath, keys } = await installation();
    expect((await call(env!.app, "/api/cron/audit-anker")).status).toBe(200);
    await anchorAllPg(sql, pgPath, keys);
    // The stored ranges go (a restored dump without them, say): both sides must rebuild.
    env!.store.sqlite.run("UPDATE audit_anchor_log SET bereik = NULL WHERE soort = 'checkpoint'");
    await sql`UPDATE audit_anchor_log SET bereik = NULL WHERE soort = 'checkpoint'`;
    await appendBoth(sql, [tenants[1]!], 3, 200);
    expect((await call(env!.app, "/api/cron/audit-anker")).status).toBe(200);
    const r = await anchorAllPg(sql, pgPath, keys);
    expect(r.refused).toEqual([]);
    expect(r.checkpoints.map((c) => [c.tenantId, c.size])).toEqual([[tenants[1], 10]]);
    await sameAsSqlite(sql, pgPath);
  });

  test("a chain that does not check out is refused, not signed; the others are", async () => {
    const { tenants, sql, pgPath, keys } = await installation();
    await anchorAllPg(sql, pgPath, keys);
    await appendBoth(sql, [tenants[0]!, tenants[1]!], 4, 300);
    // A database writer changes a new entry of Alfa's (and an old one, rehashed consistently, of Beta's: the rebuild must catch it).
    await sql`UPDATE audit_entries SET actor = 'iemand-anders' WHERE tenant_id = ${tenants[0]} AND seq = 22`;
    await sql`UPDATE audit_anchor_log SET bereik = NULL WHERE tenant_id = ${tenants[1]}`;
    await sql`UPDATE audit_entries SET subject = 'herschreven' WHERE tenant_id = ${tenants[1]} AND seq = 3`;
    const r = await anchorAllPg(sql, pgPath, keys);
    expect(r.refused).toEqual([
      { tenantId: tenants[0], seq: 22, reden: "hash-afwijkend" },
      { tenantId: tenants[1], seq: 3, reden: "hash-afwijkend" },
    ]);
    expect(r.checkpoints).toEqual([]);
    // Only an installation checkpoint over the unchanged file: no tenant line was written.
    expect(readFileSync(pgPath, "utf8").split("\n").filter((l) => l.includes('"soort":"checkpoint"')).length).toBe(2);
  });
});
