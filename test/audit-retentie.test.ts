import { afterEach, describe, expect, test } from "bun:test";
import { appendAuditEntry, GENESIS_HASH, type AppendedEntry } from "../src/audit/chain.ts";
import { deleteOldAuditEntries, retentionBoundary } from "../src/audit/retention.ts";
import { runAuditRetentie } from "../src/jobs/audit-retentie.ts";
import { addTenant, call, makeTestEnv, NOW, type TestEnv } from "./helpers.ts";

let env: TestEnv;
afterEach(() => env?.cleanup());

const DAY = 24 * 3600 * 1000;
/** NOW − 2555 × 24 h */
const GRENS = "2019-07-25T12:00:00.000Z";

function add(e: TestEnv, tenantId: number, createdAt: string | Date, action = "dossier.bekeken"): AppendedEntry {
  return appendAuditEntry(e.store.sqlite, { tenantId, actor: "anna@example.nl", action, subject: "dossier/1", details: { n: 1 }, createdAt });
}
function seqs(e: TestEnv, tenantId: number): number[] {
  return (e.store.sqlite.query("SELECT seq FROM audit_entries WHERE tenant_id = ? ORDER BY seq").values(tenantId) as [number][]).map(([s]) => s);
}
function anchor(e: TestEnv, tenantId: number) {
  return e.store.sqlite.query("SELECT seq, hash, bijgewerkt FROM audit_retention_anchors WHERE tenant_id = ?").get(tenantId);
}
const iso = (ms: number) => new Date(ms).toISOString();

describe("audit-retentie", () => {
  test("grens is now − 2555 × 24 h; entries strictly older are deleted, an entry exactly at grens is kept", async () => {
    env = makeTestEnv();
    const t = addTenant(env.store, "Gemeente Delft");
    const g = Date.parse(GRENS);
    add(env, t, "2015-01-01T00:00:00.000Z");
    const last = add(env, t, iso(g - 1));
    add(env, t, GRENS);
    add(env, t, "2024-01-01T00:00:00.000Z");
    const r = await call(env.app, "/api/cron/audit-retentie");
    expect(r.status).toBe(200);
    expect(r.json).toEqual({ ok: true, verwijderd: 2, retentieDagen: 2555, grens: GRENS });
    expect(seqs(env, t)).toEqual([3, 4]);
    // the retention anchor is the last deleted entry, written at the job's clock
    expect(anchor(env, t)).toEqual({ seq: 2, hash: last.hash, bijgewerkt: NOW.toISOString() });
  });

  test("AUDIT_RETENTIE_DAGEN is honoured", async () => {
    env = makeTestEnv({ AUDIT_RETENTIE_DAGEN: "30" });
    const t = addTenant(env.store);
    add(env, t, "2026-06-23T11:59:59.999Z");
    add(env, t, "2026-06-23T12:00:00.000Z");
    const r = await call(env.app, "/api/cron/audit-retentie");
    expect(r.json).toEqual({ ok: true, verwijderd: 1, retentieDagen: 30, grens: "2026-06-23T12:00:00.000Z" });
    expect(seqs(env, t)).toEqual([2]);
    expect(retentionBoundary(NOW, 30)).toBe("2026-06-23T12:00:00.000Z");
  });

  test("an out-of-order timestamp stops the prefix: no hole, and the chain still verifies", async () => {
    env = makeTestEnv();
    const t = addTenant(env.store);
    add(env, t, "2014-01-01T00:00:00.000Z");
    add(env, t, "2015-01-01T00:00:00.000Z");
    add(env, t, "2025-01-01T00:00:00.000Z"); // written with a wrong (future) clock
    add(env, t, "2016-01-01T00:00:00.000Z"); // older than grens, but after seq 3 in the chain
    add(env, t, "2025-06-01T00:00:00.000Z");
    const r = await call(env.app, "/api/cron/audit-retentie");
    expect(r.json.verwijderd).toBe(2);
    expect(seqs(env, t)).toEqual([3, 4, 5]);
    const v = await call(env.app, "/api/cron/audit-verificatie");
    expect(v.status).toBe(200);
    expect(v.json.resultaten[0]).toEqual({ tenantId: t, tenant: "Tenant", intact: true, aantalEntries: 3 });
  });

  test("only the tenants with old entries are touched; after retention every chain verifies (200)", async () => {
    env = makeTestEnv();
    const young = addTenant(env.store, "Jong");
    const mixed = addTenant(env.store, "Gemengd");
    const old = addTenant(env.store, "Oud");
    addTenant(env.store, "Leeg");
    for (let i = 0; i < 5; i++) add(env, young, iso(NOW.getTime() - (5 - i) * DAY));
    for (let i = 0; i < 10; i++) add(env, mixed, iso(Date.parse("2012-01-01T00:00:00Z") + i * 365 * DAY));
    for (let i = 0; i < 4; i++) add(env, old, iso(Date.parse("2010-01-01T00:00:00Z") + i * DAY));
    const r = await call(env.app, "/api/cron/audit-retentie");
    expect(r.status).toBe(200);
    // mixed: 2012..2019-07-24 are older than grens 2019-07-25 → 8 deleted (2012..2019)
    expect(seqs(env, mixed)).toEqual([9, 10]);
    expect(seqs(env, old)).toEqual([]);
    expect(seqs(env, young)).toEqual([1, 2, 3, 4, 5]);
    expect(r.json.verwijderd).toBe(8 + 4);
    expect(anchor(env, young)).toBeNull();
    expect((anchor(env, old) as { seq: number }).seq).toBe(4);

    const v = await call(env.app, "/api/cron/audit-verificatie");
    expect(v.status).toBe(200);
    expect(v.json.aantalGebroken).toBe(0);
    expect(v.json.resultaten.map((x: { aantalEntries: number }) => x.aantalEntries)).toEqual([5, 2, 0, 0]);

    // a chain deleted whole continues from its anchor, and still verifies
    const next = add(env, old, NOW);
    expect(next.seq).toBe(5);
    const v2 = await call(env.app, "/api/cron/audit-verificatie");
    expect(v2.status).toBe(200);
  });

  test("a second run right after deletes nothing and keeps the anchors", async () => {
    env = makeTestEnv();
    const t = addTenant(env.store);
    add(env, t, "2012-01-01T00:00:00.000Z");
    add(env, t, "2020-01-01T00:00:00.000Z");
    await call(env.app, "/api/cron/audit-retentie");
    const before = anchor(env, t);
    const r = await call(env.app, "/api/cron/audit-retentie");
    expect(r.json.verwijderd).toBe(0);
    expect(anchor(env, t)).toEqual(before);
  });

  test("deletes in bounded batches, each moving the anchor; a crash between batches leaves a verifiable chain", async () => {
    env = makeTestEnv();
    const t = addTenant(env.store);
    for (let i = 0; i < 11; i++) add(env, t, iso(Date.parse("2011-01-01T00:00:00Z") + i * DAY));
    add(env, t, "2024-01-01T00:00:00.000Z");
    const grens = retentionBoundary(NOW, 2555);
    const anchorsSeen: unknown[] = [];
    await expect(
      deleteOldAuditEntries(env.store.sqlite, grens, NOW, {
        batchSize: 3,
        pause: async () => {},
        afterBatch: (n) => {
          anchorsSeen.push(anchor(env, t));
          if (n >= 6) throw new Error("simulated crash");
        },
      }),
    ).rejects.toThrow("simulated crash");
    expect(anchorsSeen.map((a) => (a as { seq: number }).seq)).toEqual([3, 6]);
    expect(seqs(env, t)).toEqual([7, 8, 9, 10, 11, 12]);
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);

    // the next run finishes the job
    const r = await runAuditRetentie(env.deps, NOW, { batchSize: 3, pause: async () => {} });
    expect(r.body.verwijderd).toBe(5);
    expect(seqs(env, t)).toEqual([12]);
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
  });

  test("a batch takes the next rows of several tenants; a crash between batches leaves every chain verifiable", async () => {
    env = makeTestEnv();
    const a = addTenant(env.store, "Alfa");
    const b = addTenant(env.store, "Beta");
    for (let i = 0; i < 5; i++) add(env, a, iso(Date.parse("2011-01-01T00:00:00Z") + i * DAY));
    for (let i = 0; i < 3; i++) add(env, b, iso(Date.parse("2012-01-01T00:00:00Z") + i * DAY));
    add(env, a, "2024-01-01T00:00:00.000Z");
    add(env, b, "2024-01-01T00:00:00.000Z");
    const grens = retentionBoundary(NOW, 2555);
    const seen: [unknown, unknown][] = [];
    await expect(
      deleteOldAuditEntries(env.store.sqlite, grens, NOW, {
        batchSize: 4, // two rows of each tenant per batch
        pause: async () => {},
        afterBatch: (n) => {
          seen.push([(anchor(env, a) as { seq: number }).seq, (anchor(env, b) as { seq: number }).seq]);
          if (n >= 4) throw new Error("simulated crash");
        },
      }),
    ).rejects.toThrow("simulated crash");
    expect(seen).toEqual([[2, 2]]);
    expect(seqs(env, a)).toEqual([3, 4, 5, 6]);
    expect(seqs(env, b)).toEqual([3, 4]);
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);

    const r = await runAuditRetentie(env.deps, NOW, { batchSize: 4, pause: async () => {} });
    expect(r.body.verwijderd).toBe(4);
    expect(seqs(env, a)).toEqual([6]);
    expect(seqs(env, b)).toEqual([4]);
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
  });

  test("a tampered entry in the old part is not deleted: deletion stops before it, an alarm is raised, verification still finds it", async () => {
    env = makeTestEnv();
    const t = addTenant(env.store, "Zorggroep");
    add(env, t, "2012-01-01T00:00:00.000Z");
    add(env, t, "2012-02-01T00:00:00.000Z");
    add(env, t, "2012-03-01T00:00:00.000Z");
    add(env, t, "2024-01-01T00:00:00.000Z");
    env.store.sqlite.run("UPDATE audit_entries SET actor = 'mallory' WHERE tenant_id = ? AND seq = 2", [t]);
    const r = await call(env.app, "/api/cron/audit-retentie");
    expect(r.status).toBe(200);
    expect(r.json.verwijderd).toBe(1);
    expect(seqs(env, t)).toEqual([2, 3, 4]);
    expect(env.alarms.raised).toHaveLength(1);
    expect(env.alarms.raised[0]).toMatchObject({
      type: "audit-chain-broken",
      context: { gestopt: [{ tenantId: t, seq: 2, reden: "hash-afwijkend" }] },
    });
    const v = await call(env.app, "/api/cron/audit-verificatie");
    expect(v.status).toBe(409);
    expect(v.json.resultaten[0].fout).toMatchObject({ seq: 2, reden: "hash-afwijkend" });
  });

  test("old entries deleted by hand (no anchor) make retention keep the rest: verification stays 409 anker-afwijkend", async () => {
    env = makeTestEnv();
    const t = addTenant(env.store);
    add(env, t, "2012-01-01T00:00:00.000Z");
    add(env, t, "2012-02-01T00:00:00.000Z");
    add(env, t, "2024-01-01T00:00:00.000Z");
    env.store.sqlite.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq = 1", [t]);
    const r = await call(env.app, "/api/cron/audit-retentie");
    expect(r.json.verwijderd).toBe(0);
    expect(anchor(env, t)).toBeNull();
    expect(env.alarms.raised[0]).toMatchObject({ type: "audit-chain-broken", context: { gestopt: [{ seq: 2, reden: "anker-afwijkend" }] } });
    const v = await call(env.app, "/api/cron/audit-verificatie");
    expect(v.status).toBe(409);
    expect(v.json.resultaten[0].fout).toMatchObject({ seq: 2, reden: "anker-afwijkend" });
  });

  test("the first entry of a fresh chain links to the genesis value, which retention checks too", async () => {
    env = makeTestEnv();
    const t = addTenant(env.store);
    const first = add(env, t, "2012-01-01T00:00:00.000Z");
    expect(first.prevHash).toBe(GENESIS_HASH);
    const r = await call(env.app, "/api/cron/audit-retentie");
    expect(r.json.verwijderd).toBe(1);
    expect(env.alarms.raised).toEqual([]);
  });
});
