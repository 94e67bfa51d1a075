// audit-retentie's work on PostgreSQL (src/pg/audit-retention.ts) against a real server
// (test/pg.ts): on a copy of the same installation it does exactly what the SQLite job
// does — the same rows deleted, the same retention records byte for byte in the anchor
// file, the same anchors — keeps a tampered chain as evidence, and a run stopped after a
// batch is completed by the next one with every chain verifying.
import { afterEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { SQL } from "bun";
import { copyFileSync, readFileSync } from "node:fs";
import { appendAuditEntry } from "../src/audit/chain.ts";
import { auditKeys } from "../src/audit/keys.ts";
import { parseVerifierKey } from "../src/audit/note.ts";
import { retentionBoundary } from "../src/audit/retention.ts";
import { runAuditRetentie } from "../src/jobs/audit-retentie.ts";
import { deleteOldAuditEntriesPg, type PgRetentionSigning } from "../src/pg/audit-retention.ts";
import { compareTable, migrateToPostgres, tableShape } from "../src/pg/migrate-to.ts";
import { verifyInstallationPg } from "../src/pg/offline.ts";
import * as pgSchema from "../db/schema-pg.ts";
import { addTenant, call, makeTestEnv, NOW, TEST_VERIFIER_KEY, type TestEnv } from "./helpers.ts";
import { useTestCluster } from "./pg.ts";

setDefaultTimeout(60_000);
const DAY = 24 * 3600 * 1000;
const VERIFIERS = [parseVerifierKey(TEST_VERIFIER_KEY)];
const GRENS = retentionBoundary(NOW, 2555);

const cluster = useTestCluster();
let env: TestEnv | undefined;
const clients: SQL[] = [];
afterEach(async () => {
  env?.cleanup();
  env = undefined;
  for (const c of clients.splice(0)) await c.close();
});

/**
 * Three tenants with checkpoints: a (12 of 30 entries past the retention period), b (all
 * recent), c (7 of 9 old, one more old entry after a recent one: the prefix stops there).
 * Moved to PostgreSQL; the PostgreSQL side gets its own copy of the anchor file.
 */
async function installation() {
  env = makeTestEnv();
  const a = addTenant(env.store, "Alfa");
  const b = addTenant(env.store, "Beta");
  const c = addTenant(env.store, "Gamma");
  const add = (tenantId: number, ageDays: number, i: number) =>
    appendAuditEntry(env!.store.sqlite, { tenantId, actor: `u${i}@example.nl`, action: "dossier.gewijzigd", subject: `dossier/${i}`, details: { i }, createdAt: new Date(NOW.getTime() - ageDays * DAY) });
  for (let i = 0; i < 30; i++) add(a, i < 12 ? 3000 - i : 100 - i, i);
  for (let i = 0; i < 10; i++) add(b, 50 - i, i);
  for (let i = 0; i < 9; i++) add(c, i < 7 ? 2900 - i : i === 7 ? 10 : 2800, i);
  expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
  const url = await cluster.createDatabase();
  const moved = await migrateToPostgres({ dbPath: env.config.databasePath, anchorPath: env.config.auditAnkerBestand, url, verifiers: VERIFIERS, log: () => {} });
  expect(moved.uitkomst).toBe("klaar");
  const pgAnchorPath = `${env.config.auditAnkerBestand}.pg`;
  copyFileSync(env.config.auditAnkerBestand, pgAnchorPath);
  const sql = new SQL(url, { max: 4 });
  clients.push(sql);
  const signing: PgRetentionSigning = { path: pgAnchorPath, keys: auditKeys(env.config), retentieDagen: env.config.auditRetentieDagen, workers: 0 };
  return { a, b, c, url, sql, signing, pgAnchorPath };
}

const pgSeqs = async (sql: SQL, tenantId: number) => ((await sql`SELECT seq FROM audit_entries WHERE tenant_id = ${tenantId} ORDER BY seq`) as { seq: string }[]).map((r) => Number(r.seq));

describe("audit-retentie on PostgreSQL", () => {
  test("does what the SQLite job does on the same installation: rows, records (byte for byte) and anchors", async () => {
    const { a, b, c, url, sql, signing, pgAnchorPath } = await installation();
    const lite = await runAuditRetentie(env!.deps, NOW);
    expect(lite.status).toBe(200);
    const pg = await deleteOldAuditEntriesPg(sql, GRENS, NOW, signing);
    expect(pg.gestopt).toEqual([]);
    expect(pg.verwijderd).toBe((lite.body as { verwijderd: number }).verwijderd);
    expect(pg.verwijderd).toBe(12 + 7);
    expect(await pgSeqs(sql, a)).toEqual(Array.from({ length: 18 }, (_, i) => i + 13));
    expect(await pgSeqs(sql, b)).toHaveLength(10);
    // c's prefix ends at the recent entry: the old one after it stays.
    expect(await pgSeqs(sql, c)).toEqual([8, 9]);
    // Ed25519 signatures are deterministic: the same records, the same bytes.
    expect(readFileSync(pgAnchorPath, "utf8")).toBe(readFileSync(env!.config.auditAnkerBestand, "utf8"));
    for (const table of [pgSchema.auditEntries, pgSchema.auditAnchorLog, pgSchema.auditRetentionAnchors]) {
      expect((await compareTable(env!.store.sqlite, sql, tableShape(table))).verschil).toBeNull();
    }
    const verdict = await verifyInstallationPg(url, pgAnchorPath, VERIFIERS, { workers: 0 });
    expect(verdict.probleem).toBeUndefined();
    expect(verdict.tenants.every((t) => t.intact)).toBe(true);
  });

  test("a long chain: its prefix is read up to its end and no further", async () => {
    const { url, sql, signing } = await installation();
    const d = addTenant(env!.store, "Delta");
    // Copied straight into PostgreSQL after the move: 1,500 old entries, then 3,000 recent ones.
    const rows = env!.store.sqlite.transaction(() => {
      for (let i = 0; i < 4500; i++) {
        appendAuditEntry(env!.store.sqlite, { tenantId: d, actor: `u${i}@example.nl`, action: "dossier.bekeken", subject: `dossier/${i}`, details: { i, pad: "x".repeat(200) }, createdAt: new Date(NOW.getTime() - (i < 1500 ? 3000 : 30) * DAY + i) });
      }
      return env!.store.sqlite.query("SELECT tenant_id, seq, id, created_at, actor, action, subject, details, prev_hash, hash FROM audit_entries WHERE tenant_id = ? ORDER BY seq").all(d) as Record<string, unknown>[];
    })();
    await sql`INSERT INTO tenants (id, naam, actief, aangemaakt) VALUES (${d}, 'Delta', true, ${NOW.toISOString()})`;
    for (let i = 0; i < rows.length; i += 500) await sql`INSERT INTO audit_entries ${sql(rows.slice(i, i + 500))}`;
    const r = await deleteOldAuditEntriesPg(sql, GRENS, NOW, signing);
    expect(r.gestopt).toEqual([]);
    expect(r.verwijderd).toBe(12 + 7 + 1500);
    expect(await pgSeqs(sql, d)).toHaveLength(3000);
    const verdict = await verifyInstallationPg(url, signing.path, VERIFIERS, { workers: 0 });
    expect(verdict.tenants.every((t) => t.intact)).toBe(true);
  });

  test("a changed old entry is evidence: that tenant keeps its entries, the others' are deleted", async () => {
    const { a, c, url, sql, signing } = await installation();
    await sql`UPDATE audit_entries SET actor = 'iemand-anders' WHERE tenant_id = ${a} AND seq = 5`;
    const r = await deleteOldAuditEntriesPg(sql, GRENS, NOW, signing);
    expect(r.gestopt).toEqual([{ tenantId: a, seq: 5, entryId: expect.any(Number), reden: "hash-afwijkend" }]);
    expect(await pgSeqs(sql, a)).toHaveLength(30);
    expect(r.verwijderd).toBe(7);
    expect(await pgSeqs(sql, c)).toEqual([8, 9]);
  });

  test("a run stopped after a batch leaves verifying chains; the next run deletes the rest, once", async () => {
    const { a, c, url, sql, signing, pgAnchorPath } = await installation();
    await expect(deleteOldAuditEntriesPg(sql, GRENS, NOW, signing, { batchSize: 4, afterBatch: () => { throw new Error("gestopt na één batch"); } })).rejects.toThrow("gestopt");
    // The records are signed and the first batch committed: 2 of a's and 2 of c's entries.
    expect(await pgSeqs(sql, a)).toHaveLength(28);
    const halfway = await verifyInstallationPg(url, signing.path, VERIFIERS, { workers: 0 });
    expect(halfway.tenants.every((t) => t.intact)).toBe(true);
    const records = readFileSync(pgAnchorPath, "utf8").split("\n").filter((l) => l.includes("retentie")).length;
    const r = await deleteOldAuditEntriesPg(sql, GRENS, NOW, signing, { batchSize: 4 });
    expect(r.verwijderd).toBe(12 + 7 - 4);
    expect(await pgSeqs(sql, a)).toHaveLength(18);
    expect(await pgSeqs(sql, c)).toEqual([8, 9]);
    // The earlier run's records already cover what is left: no new ones.
    expect(readFileSync(pgAnchorPath, "utf8").split("\n").filter((l) => l.includes("retentie")).length).toBe(records);
    const after = await verifyInstallationPg(url, signing.path, VERIFIERS, { workers: 0 });
    expect(after.probleem).toBeUndefined();
    expect(after.tenants.every((t) => t.intact)).toBe(true);
  });
});
