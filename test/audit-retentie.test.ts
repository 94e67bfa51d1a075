import { afterEach, describe, expect, test } from "bun:test";
import { appendLines, insertRows, readLines } from "../src/audit/anchor-file.ts";
import { appendAuditEntry, entriesAfter, entryHash, GENESIS_HASH, type AppendedEntry } from "../src/audit/chain.ts";
import { auditKeys } from "../src/audit/keys.ts";
import { CompactRange } from "../src/audit/merkle.ts";
import { parseSignerKey, parseVerifierKey } from "../src/audit/note.ts";
import { anchorLineText, openRetentionRecord, signRetentionRecord, type AnchorLine, type RetentionRecord } from "../src/audit/records.ts";
import { deleteOldAuditEntries, PrefixPlan, retentionBoundary, type RetentionSigning, type RetentionStop } from "../src/audit/retention.ts";
import { chainStart } from "../src/audit/verify.ts";
import { runAuditRetentie } from "../src/jobs/audit-retentie.ts";
import { addTenant, call, makeTestEnv, NOW, TEST_SIGNING_KEY, TEST_VERIFIER_KEY, type TestEnv } from "./helpers.ts";

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
const VERIFIERS = [parseVerifierKey(TEST_VERIFIER_KEY)];

/** What audit-retentie passes to deleteOldAuditEntries. */
function signing(e: TestEnv): RetentionSigning {
  return { path: e.config.auditAnkerBestand, keys: auditKeys(e.config), retentieDagen: e.config.auditRetentieDagen, dbPath: e.store.path, workers: 0 };
}
/** The retention records in audit_anchor_log (of one tenant, or all), opened with the test key, in file order. */
function records(e: TestEnv, tenantId?: number): RetentionRecord[] {
  const rows = e.store.sqlite
    .query("SELECT tenant_id AS t, note FROM audit_anchor_log WHERE soort = 'retentie' AND (?1 IS NULL OR tenant_id = ?1) ORDER BY positie")
    .all(tenantId ?? null) as { t: number; note: string }[];
  return rows.map((r) => {
    const o = openRetentionRecord(r.note, r.t, VERIFIERS);
    if (!o.ok) throw new Error(`record of tenant ${r.t} does not open: ${o.error}`);
    return o.record;
  });
}
/** The anchor file's lines, and the database copy's rows rendered as lines: the same, position for position. */
function fileAndCopy(e: TestEnv) {
  const file = [...readLines(e.config.auditAnkerBestand)].map((l) => ({ positie: l.positie, text: l.text }));
  const rows = e.store.sqlite.query("SELECT positie, soort, tenant_id AS tenantId, note FROM audit_anchor_log ORDER BY positie").all() as (AnchorLine & { positie: number })[];
  return { file, copy: rows.map((r) => ({ positie: r.positie, text: anchorLineText(r) })) };
}
/** The tree's compact range over a tenant's entry hashes 1..seq (all still present). */
function rangeUpTo(e: TestEnv, tenantId: number, seq: number): CompactRange {
  const r = new CompactRange();
  for (const [h] of e.store.sqlite.query("SELECT hash FROM audit_entries WHERE tenant_id = ? AND seq <= ? ORDER BY seq").values(tenantId, seq) as [string][]) r.pushEntryHash(h);
  return r;
}

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
    // and the deletion is justified by one signed record of exactly that
    const [rec, ...more] = records(env, t);
    expect(more).toEqual([]);
    expect(rec).toMatchObject({ tenantId: t, seq: 2, hash: last.hash, createdAt: last.createdAt, grens: GRENS, retentieDagen: 2555, tijdstip: NOW.toISOString() });
    expect(rec!.bereik.size).toBe(2);
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
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
    // one signed record per tenant touched, in the anchor file and in its database copy
    expect(records(env).map((r) => [r.tenantId, r.seq])).toEqual([
      [mixed, 8],
      [old, 4],
    ]);
    const { file, copy } = fileAndCopy(env);
    expect(file).toHaveLength(2);
    expect(copy).toEqual(file);

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
    const lines = fileAndCopy(env);
    const r = await call(env.app, "/api/cron/audit-retentie");
    expect(r.json.verwijderd).toBe(0);
    expect(anchor(env, t)).toEqual(before);
    // nothing deleted, nothing signed
    expect(fileAndCopy(env)).toEqual(lines);
    expect(lines.file).toHaveLength(1);
  });

  test("deletes in bounded batches after signing one record for the whole prefix; a crash between batches leaves a verifiable chain, and the rerun finishes without signing again", async () => {
    env = makeTestEnv();
    const t = addTenant(env.store);
    for (let i = 0; i < 11; i++) add(env, t, iso(Date.parse("2011-01-01T00:00:00Z") + i * DAY));
    add(env, t, "2024-01-01T00:00:00.000Z");
    const grens = retentionBoundary(NOW, 2555);
    const seen: { first: number; records: number[]; anchor: unknown }[] = [];
    await expect(
      deleteOldAuditEntries(env.store.sqlite, grens, NOW, signing(env), {
        batchSize: 3,
        pause: async () => {},
        afterBatch: (n) => {
          seen.push({ first: seqs(env, t)[0]!, records: records(env, t).map((r) => r.seq), anchor: (anchor(env, t) as { seq: number }).seq });
          if (n >= 6) throw new Error("simulated crash");
        },
      }),
    ).rejects.toThrow("simulated crash");
    // The record (and the anchor) cover all 11 from before the first batch on.
    expect(seen).toEqual([
      { first: 4, records: [11], anchor: 11 },
      { first: 7, records: [11], anchor: 11 },
    ]);
    expect(seqs(env, t)).toEqual([7, 8, 9, 10, 11, 12]);
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);

    // the next run finishes the job under the record it finds
    const r = await runAuditRetentie(env.deps, NOW, { batchSize: 3, pause: async () => {} });
    expect(r.body.verwijderd).toBe(5);
    expect(seqs(env, t)).toEqual([12]);
    expect(records(env, t).map((x) => x.seq)).toEqual([11]);
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
    expect(env.alarms.raised).toEqual([]);
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
    const seen: [number, number][] = [];
    await expect(
      deleteOldAuditEntries(env.store.sqlite, grens, NOW, signing(env), {
        batchSize: 4, // two rows of each tenant per batch
        pause: async () => {},
        afterBatch: (n) => {
          seen.push([seqs(env, a)[0]!, seqs(env, b)[0]!]);
          if (n >= 4) throw new Error("simulated crash");
        },
      }),
    ).rejects.toThrow("simulated crash");
    expect(seen).toEqual([[3, 3]]);
    expect(seqs(env, a)).toEqual([3, 4, 5, 6]);
    expect(seqs(env, b)).toEqual([3, 4]);
    expect(records(env).map((r) => [r.tenantId, r.seq])).toEqual([
      [a, 5],
      [b, 3],
    ]);
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);

    const r = await runAuditRetentie(env.deps, NOW, { batchSize: 4, pause: async () => {} });
    expect(r.body.verwijderd).toBe(4);
    expect(seqs(env, a)).toEqual([6]);
    expect(seqs(env, b)).toEqual([4]);
    expect(records(env)).toHaveLength(2);
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
  });

  test("a batch that rolls back (SQLITE_BUSY inside it) is taken again from the last COMMIT: nothing is skipped", async () => {
    env = makeTestEnv();
    const tenants = [addTenant(env.store, "A"), addTenant(env.store, "B")];
    for (const [i, t] of tenants.entries()) {
      for (let k = 0; k < 5 + i; k++) add(env, t, iso(Date.parse("2011-01-01T00:00:00Z") + k * DAY));
      add(env, t, "2024-01-01T00:00:00.000Z");
    }
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    // The clock is read inside each batch's transaction; once, in the second batch after
    // its chunk ran, it fails as SQLite does when busy: that batch rolls back and
    // retryWhenBusy runs it again, from where the first batch's COMMIT left each tenant.
    let inside = 0;
    const clock = () => {
      if (env!.store.sqlite.inTransaction && ++inside === 7) throw Object.assign(new Error("database is locked"), { code: "SQLITE_BUSY" });
      return performance.now();
    };
    const rows: number[] = [];
    const r = await runAuditRetentie(env.deps, NOW, { batchSize: 4, clock, pause: async () => {}, onBatch: (b) => rows.push(b.rows) });
    expect(inside).toBeGreaterThan(7);
    expect(r.status).toBe(200);
    expect(r.body.verwijderd).toBe(5 + 6);
    expect(rows).toEqual([4, 4, 3]);
    expect(seqs(env, tenants[0]!)).toEqual([6]);
    expect(seqs(env, tenants[1]!)).toEqual([7]);
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
  });

  test("however many batches, each tenant touched gets exactly one signed record, in the anchor file and in audit_anchor_log; verification after retention is 200", async () => {
    env = makeTestEnv();
    const tenants = [addTenant(env.store, "A"), addTenant(env.store, "B"), addTenant(env.store, "C")];
    addTenant(env.store, "Jong");
    for (const [i, t] of tenants.entries()) {
      for (let k = 0; k < 7 + i; k++) add(env, t, iso(Date.parse("2011-01-01T00:00:00Z") + k * DAY));
      add(env, t, "2024-01-01T00:00:00.000Z");
    }
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    const batches: number[] = [];
    const r = await runAuditRetentie(env.deps, NOW, { batchSize: 3, pause: async () => {}, onBatch: (b) => batches.push(b.rows) });
    expect(r.status).toBe(200);
    expect(r.body.verwijderd).toBe(7 + 8 + 9);
    expect(batches.length).toBeGreaterThan(3);
    expect(records(env).map((x) => [x.tenantId, x.seq])).toEqual(tenants.map((t, i) => [t, 7 + i]));
    // The file is the authority; its copy in the database has every line at the same position.
    const { file, copy } = fileAndCopy(env);
    expect(copy).toEqual(file);
    expect(file.filter((l) => l.text.includes('"soort":"retentie"'))).toHaveLength(3);
    const v = await call(env.app, "/api/cron/audit-verificatie");
    expect(v.status).toBe(200);
    expect(v.json.resultaten.map((x: { aantalEntries: number }) => x.aantalEntries)).toEqual([1, 1, 1, 0]);
    // and audit-anker goes on from the records and the checkpoints before them
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
    expect(env.alarms.raised).toEqual([]);
  });

  test("a tampered entry in the old part is not deleted: the chain is kept whole as evidence, an alarm is raised, verification still finds it", async () => {
    env = makeTestEnv();
    const t = addTenant(env.store, "Zorggroep");
    add(env, t, "2012-01-01T00:00:00.000Z");
    add(env, t, "2012-02-01T00:00:00.000Z");
    add(env, t, "2012-03-01T00:00:00.000Z");
    add(env, t, "2024-01-01T00:00:00.000Z");
    env.store.sqlite.run("UPDATE audit_entries SET actor = 'mallory' WHERE tenant_id = ? AND seq = 2", [t]);
    const r = await call(env.app, "/api/cron/audit-retentie");
    expect(r.status).toBe(200);
    // audit-retentie first checks the whole chain, as audit-verificatie does: nothing of it is deleted or signed
    expect(r.json.verwijderd).toBe(0);
    expect(seqs(env, t)).toEqual([1, 2, 3, 4]);
    expect(records(env)).toEqual([]);
    expect(env.alarms.raised).toHaveLength(1);
    expect(env.alarms.raised[0]).toMatchObject({
      type: "audit-chain-broken",
      context: { gestopt: [{ tenantId: t, seq: 2, reden: "hash-afwijkend" }] },
    });
    const v = await call(env.app, "/api/cron/audit-verificatie");
    expect(v.status).toBe(409);
    expect(v.json.resultaten[0].fout).toMatchObject({ seq: 2, reden: "hash-afwijkend" });
  });

  test("old entries deleted by hand (no signed record) make retention keep the rest: verification stays 409 retentie-ontbreekt", async () => {
    env = makeTestEnv();
    const t = addTenant(env.store);
    add(env, t, "2012-01-01T00:00:00.000Z");
    add(env, t, "2012-02-01T00:00:00.000Z");
    add(env, t, "2024-01-01T00:00:00.000Z");
    env.store.sqlite.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq = 1", [t]);
    const r = await call(env.app, "/api/cron/audit-retentie");
    expect(r.json.verwijderd).toBe(0);
    expect(anchor(env, t)).toBeNull();
    expect(records(env)).toEqual([]);
    expect(env.alarms.raised[0]).toMatchObject({ type: "audit-chain-broken", context: { gestopt: [{ seq: 2, reden: "retentie-ontbreekt" }] } });
    const v = await call(env.app, "/api/cron/audit-verificatie");
    expect(v.status).toBe(409);
    expect(v.json.resultaten[0].fout).toMatchObject({ seq: 2, reden: "retentie-ontbreekt" });
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

  /**
   * A record signed with the real key (by whoever holds it) and written as audit-retentie
   * writes it, file line and database row, then the prefix deleted: the signature holds,
   * the justification does not.
   */
  async function unjustified(e: TestEnv, t: number, seq: number, fields: { grens: string; tijdstip?: string; retentieDagen?: number; createdAt?: string }) {
    const last = e.store.sqlite.query("SELECT hash, created_at FROM audit_entries WHERE tenant_id = ? AND seq = ?").get(t, seq) as { hash: string; created_at: string };
    const note = signRetentionRecord(parseSignerKey(TEST_SIGNING_KEY), {
      tenantId: t,
      seq,
      hash: last.hash,
      createdAt: fields.createdAt ?? last.created_at,
      grens: fields.grens,
      retentieDagen: fields.retentieDagen ?? 2555,
      tijdstip: fields.tijdstip ?? NOW.toISOString(),
      bereik: rangeUpTo(e, t, seq),
    });
    const line = { soort: "retentie" as const, tenantId: t, note };
    const [positie] = appendLines(e.config.auditAnkerBestand, [line]);
    e.store.sqlite.transaction(() => insertRows(e.store.sqlite, [{ ...line, positie: positie!, grootte: seq, bereik: null }]))();
    e.store.sqlite.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= ?", [t, seq]);
  }

  test("a validly signed record whose last deleted entry is not older than its grens → retentie-ongeldig", async () => {
    env = makeTestEnv();
    const t = addTenant(env.store, "T");
    for (let i = 0; i < 4; i++) add(env, t, iso(NOW.getTime() - (10 - i) * DAY)); // recent: nothing is due
    add(env, t, NOW);
    // grens is the created_at of the last entry it deletes (not older than it), and itself long enough ago
    const third = (env.store.sqlite.query("SELECT created_at FROM audit_entries WHERE tenant_id = ? AND seq = 3").get(t) as { created_at: string }).created_at;
    await unjustified(env, t, 3, { grens: third, retentieDagen: 1 });
    const v = await call(env.app, "/api/cron/audit-verificatie");
    expect(v.status).toBe(409);
    expect(v.json.ankerbestand).toMatchObject({ intact: true });
    expect(v.json.resultaten[0].fout).toMatchObject({ seq: 4, reden: "retentie-ongeldig" });
  });

  test("a validly signed record whose grens is later than its tijdstip minus its retention days → retentie-ongeldig; audit-retentie keeps that chain", async () => {
    env = makeTestEnv({ AUDIT_RETENTIE_DAGEN: "3" }); // so entry 4 (7 days old) is due for this run
    const t = addTenant(env.store, "T");
    for (let i = 0; i < 4; i++) add(env, t, iso(NOW.getTime() - (10 - i) * DAY));
    add(env, t, NOW);
    // entries 6 to 9 days old deleted under a "2555 days" record whose grens is 5 days before its tijdstip
    await unjustified(env, t, 3, { grens: iso(NOW.getTime() - 5 * DAY) });
    const v = await call(env.app, "/api/cron/audit-verificatie");
    expect(v.status).toBe(409);
    expect(v.json.resultaten[0].fout).toMatchObject({ seq: 4, reden: "retentie-ongeldig" });
    // A justified record a day later (1 day of retention) is the same deletion, justified.
    const ok = makeTestEnv();
    try {
      const u = addTenant(ok.store, "T");
      for (let i = 0; i < 4; i++) add(ok, u, iso(NOW.getTime() - (10 - i) * DAY));
      await unjustified(ok, u, 3, { grens: iso(NOW.getTime() - 5 * DAY), retentieDagen: 5 });
      expect((await call(ok.app, "/api/cron/audit-verificatie")).status).toBe(200);
    } finally {
      await ok.cleanup();
    }
    // audit-retentie does not build on it: nothing deleted, its alarm names it
    const r = await call(env.app, "/api/cron/audit-retentie");
    expect(r.status).toBe(200);
    expect(r.json.verwijderd).toBe(0);
    expect(seqs(env, t)).toEqual([4, 5]);
    expect(env.alarms.raised.at(-1)).toMatchObject({ type: "audit-chain-broken", context: { gestopt: [{ tenantId: t, seq: 4, reden: "retentie-ongeldig" }] } });
  });

  test("a crash between appending the records to the file and the COMMIT never gives a false alarm; the next run copies them in and finishes", async () => {
    env = makeTestEnv();
    const t = addTenant(env.store, "T");
    for (let i = 0; i < 6; i++) add(env, t, iso(Date.parse("2011-01-01T00:00:00Z") + i * DAY));
    add(env, t, "2024-01-01T00:00:00.000Z");
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    const grens = retentionBoundary(NOW, 2555);
    // What the run signs and fsyncs before its COMMIT: the record of seq 1..6. The crash
    // comes before its row, its anchor and any deletion are committed.
    const last = env.store.sqlite.query("SELECT hash, created_at FROM audit_entries WHERE tenant_id = ? AND seq = 6").get(t) as { hash: string; created_at: string };
    const note = signRetentionRecord(parseSignerKey(TEST_SIGNING_KEY), {
      tenantId: t,
      seq: 6,
      hash: last.hash,
      createdAt: last.created_at,
      grens,
      retentieDagen: 2555,
      tijdstip: NOW.toISOString(),
      bereik: rangeUpTo(env, t, 6),
    });
    appendLines(env.config.auditAnkerBestand, [{ soort: "retentie", tenantId: t, note }]);
    expect(records(env)).toEqual([]);
    expect(anchor(env, t)).toBeNull();

    const v = await call(env.app, "/api/cron/audit-verificatie");
    expect(v.status).toBe(200);
    expect(v.json.ankerbestand).toMatchObject({ intact: true });

    const r = await call(env.app, "/api/cron/audit-retentie");
    expect(r.status).toBe(200);
    expect(r.json.verwijderd).toBe(6);
    expect(seqs(env, t)).toEqual([7]);
    // the crashed run's line is in the database now, at its place in the file
    const { file, copy } = fileAndCopy(env);
    expect(copy).toEqual(file);
    expect(copy.some((l) => l.text.includes(JSON.stringify(note)))).toBe(true);
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
    expect(env.alarms.raised).toEqual([]);
  });
});

describe("PrefixPlan: each entry checked again while planning (a change made after the verification)", () => {
  /** The plan for one tenant, driven as planTenant drives it. */
  function plan(e: TestEnv, tenantId: number) {
    const s = e.store.sqlite;
    const first = s.query("SELECT seq, id FROM audit_entries WHERE tenant_id = ? ORDER BY seq LIMIT 1").get(tenantId) as { seq: number; id: number };
    const gestopt: RetentionStop[] = [];
    const p = new PrefixPlan(tenantId, first, chainStart(s, tenantId, first.seq, VERIFIERS), GRENS, gestopt);
    if (p.open) for (const r of entriesAfter(s, tenantId, p.from)) if (!p.push(r)) break;
    return { result: p.result(), gestopt: gestopt.map(({ seq, reden }) => ({ seq, reden })) };
  }
  /** Six entries, the first five older than GRENS. */
  function chain(e: TestEnv, name: string): number {
    const t = addTenant(e.store, name);
    for (let i = 1; i <= 5; i++) add(e, t, `2012-0${i}-01T00:00:00.000Z`);
    add(e, t, "2024-01-01T00:00:00.000Z");
    return t;
  }
  /** Entry `seq` given prev_hash `prev` and a valid hash again, the later entries left as they are. */
  function relink(e: TestEnv, tenantId: number, seq: number, prev: string) {
    const r = e.store.sqlite.query("SELECT * FROM audit_entries WHERE tenant_id = ? AND seq = ?").get(tenantId, seq) as Record<string, any>;
    const hash = entryHash({ tenantId, seq, createdAt: r.created_at, actor: r.actor, action: r.action, subject: r.subject, details: r.details, prevHash: prev });
    e.store.sqlite.query("UPDATE audit_entries SET prev_hash = ?, hash = ? WHERE tenant_id = ? AND seq = ?").run(prev, hash, tenantId, seq);
  }

  test("an intact chain: the prefix older than grens, with a record to sign", () => {
    env = makeTestEnv();
    const t = chain(env, "Heel");
    const { result, gestopt } = plan(env, t);
    expect(gestopt).toEqual([]);
    expect(result).toMatchObject({ tenantId: t, from: 1, seq: 5, record: { seq: 5, createdAt: "2012-05-01T00:00:00.000Z" } });
    expect(result!.record!.bereik.encode()).toBe(rangeUpTo(env, t, 5).encode());
  });

  test("the prefix ends before an entry whose hash, link or start does not check out; that entry is named (gestopt)", () => {
    env = makeTestEnv();
    const changed = chain(env, "Gewijzigd");
    env.store.sqlite.query("UPDATE audit_entries SET actor = 'mallory' WHERE tenant_id = ? AND seq = 4").run(changed);
    const unlinked = chain(env, "Ontkoppeld");
    relink(env, unlinked, 4, "f".repeat(64));
    const unanchored = chain(env, "Los van genesis");
    relink(env, unanchored, 1, "f".repeat(64));
    const cut = chain(env, "Ingekort");
    env.store.sqlite.query("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= 2").run(cut);

    expect(plan(env, changed)).toEqual({ result: expect.objectContaining({ seq: 3 }), gestopt: [{ seq: 4, reden: "hash-afwijkend" }] });
    expect(plan(env, unlinked)).toEqual({ result: expect.objectContaining({ seq: 3 }), gestopt: [{ seq: 4, reden: "koppeling-verbroken" }] });
    expect(plan(env, unanchored)).toEqual({ result: null, gestopt: [{ seq: 1, reden: "anker-afwijkend" }] });
    expect(plan(env, cut)).toEqual({ result: null, gestopt: [{ seq: 3, reden: "retentie-ontbreekt" }] });
  });
});
