import { afterEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import type { SQL } from "bun";
import { appendLines, insertRows, readLines, type StoredLine } from "../src/audit/anchor-file.ts";
import { appendEntries, canonicalJson, entryHash, GENESIS_HASH, type AppendedEntry, type ChainInput } from "../src/audit/chain.ts";
import { auditKeys } from "../src/audit/keys.ts";
import { CompactRange } from "../src/audit/merkle.ts";
import { parseSignerKey, parseVerifierKey } from "../src/audit/note.ts";
import { anchorLineText, openRetentionRecord, signRetentionRecord, type AnchorLine, type RetentionRecord } from "../src/audit/records.ts";
import { deleteOldAuditEntries, jobRetentionOptions, retentionBoundary, type AuditRetentionResult, type RetentionOptions } from "../src/audit/retention.ts";
import { runAuditRetentie } from "../src/jobs/audit-retentie.ts";
import { insertRowsPg } from "../src/pg/anchor-file.ts";
import { deleteOldAuditEntriesPg } from "../src/pg/audit-retention.ts";
import { appendEntriesPg } from "../src/pg/chain.ts";
import { call, NOW, TEST_SIGNING_KEY, TEST_VERIFIER_KEY, workDrivenClock } from "./helpers.ts";
import { addTenant, makeEnv, sqliteOnly, type Env } from "./dialect.ts";

// On the PostgreSQL run the first test may start the cluster (test/dialect.ts), on a shared host that takes seconds.
setDefaultTimeout(30_000);
let env: Env;
afterEach(() => env?.cleanup());

const DAY = 24 * 3600 * 1000;
/** NOW − 2555 × 24 h */
const GRENS = "2019-07-25T12:00:00.000Z";

/** One entry appended as appendAuditEntry does, on either store; as stored. */
async function add(e: Env, tenantId: number, createdAt: string | Date, action = "dossier.bekeken"): Promise<AppendedEntry> {
  const input: ChainInput = {
    tenantId,
    actor: "anna@example.nl",
    action,
    subject: "dossier/1",
    details: canonicalJson({ n: 1 }),
    createdAt: typeof createdAt === "string" ? createdAt : createdAt.toISOString(),
  };
  const s = e.store;
  if (s.kind === "sqlite") return s.sqlite.transaction(() => appendEntries(s.sqlite, [input])[0]!).immediate();
  return (await s.sql.begin((tx) => appendEntriesPg(tx, [input])))[0]!;
}
async function seqs(e: Env, tenantId: number): Promise<number[]> {
  return (await e.db.all<{ seq: number }>("SELECT seq FROM audit_entries WHERE tenant_id = ? ORDER BY seq", tenantId)).map((r) => r.seq);
}
function anchor(e: Env, tenantId: number) {
  return e.db.get<{ seq: number; hash: string; bijgewerkt: string }>("SELECT seq, hash, bijgewerkt FROM audit_retention_anchors WHERE tenant_id = ?", tenantId);
}
const iso = (ms: number) => new Date(ms).toISOString();
const VERIFIERS = [parseVerifierKey(TEST_VERIFIER_KEY)];

/**
 * What the test reads between batches: afterBatch is synchronous, so it starts the
 * reads (observe) and the next batch begins only once they are done (settle). SQLite's
 * batches wait in `pause`; PostgreSQL's, which do not pause (src/pg/audit-retention.ts),
 * in their `sql.begin`.
 */
function observer() {
  const pending: Promise<unknown>[] = [];
  return {
    observe: (p: Promise<unknown>) => void pending.push(p),
    settle: async () => void (await Promise.all(pending.splice(0))),
  };
}
/** `sql` whose transactions begin only after `before()`. */
function beginAfter(sql: SQL, before: () => Promise<void>): SQL {
  return new Proxy(sql, {
    get(target, p) {
      if (p === "begin") return async (...args: unknown[]) => (await before(), (target.begin as (...a: unknown[]) => unknown)(...args));
      const v = Reflect.get(target, p, target);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
}
/** What audit-retentie does with deleteOldAuditEntries (SQLite) or deleteOldAuditEntriesPg, with the test's options; `settle` as observer's. */
function deleteOld(e: Env, grens: string, o: RetentionOptions, settle: () => Promise<void> = async () => {}): Promise<AuditRetentionResult> {
  const signing = { path: e.config.auditAnkerBestand, keys: auditKeys(e.config), retentieDagen: e.config.auditRetentieDagen, workers: 0 };
  const s = e.store;
  if (s.kind === "sqlite") return deleteOldAuditEntries(s.sqlite, grens, NOW, { ...signing, dbPath: s.path }, { ...o, pause: async (ms) => (await settle(), await o.pause?.(ms)) });
  return deleteOldAuditEntriesPg(beginAfter(s.sql, settle), grens, NOW, signing, o);
}
/** The retention records in audit_anchor_log (of one tenant, or all), opened with the test key, in file order. */
async function records(e: Env, tenantId?: number): Promise<RetentionRecord[]> {
  const rows = await e.db.all<{ t: number; note: string }>(
    `SELECT tenant_id AS t, note FROM audit_anchor_log WHERE soort = 'retentie'${tenantId === undefined ? "" : " AND tenant_id = ?"} ORDER BY positie`,
    ...(tenantId === undefined ? [] : [tenantId]),
  );
  return rows.map((r) => {
    const o = openRetentionRecord(r.note, r.t, VERIFIERS);
    if (!o.ok) throw new Error(`record of tenant ${r.t} does not open: ${o.error}`);
    return o.record;
  });
}
/** The anchor file's lines, and the database copy's rows rendered as lines: the same, position for position. */
async function fileAndCopy(e: Env) {
  const file = [...readLines(e.config.auditAnkerBestand)].map((l) => ({ positie: l.positie, text: l.text }));
  const rows = await e.db.all<AnchorLine & { positie: number }>(`SELECT positie, soort, tenant_id AS "tenantId", note FROM audit_anchor_log ORDER BY positie`);
  return { file, copy: rows.map((r) => ({ positie: r.positie, text: anchorLineText(r) })) };
}
/** The tree's compact range over a tenant's entry hashes 1..seq (all still present). */
async function rangeUpTo(e: Env, tenantId: number, seq: number): Promise<CompactRange> {
  const r = new CompactRange();
  for (const { hash } of await e.db.all<{ hash: string }>("SELECT hash FROM audit_entries WHERE tenant_id = ? AND seq <= ? ORDER BY seq", tenantId, seq)) r.pushEntryHash(hash);
  return r;
}
/** An anchor-file line's row into audit_anchor_log, as audit-retentie writes it (insertRows / insertRowsPg, in a transaction). */
async function insertLine(e: Env, row: StoredLine): Promise<void> {
  const s = e.store;
  if (s.kind === "sqlite") s.sqlite.transaction(() => insertRows(s.sqlite, [row]))();
  else await s.sql.begin((tx) => insertRowsPg(tx, [row]));
}

describe("audit-retentie", () => {
  test("grens is now − 2555 × 24 h; entries strictly older are deleted, an entry exactly at grens is kept", async () => {
    env = await makeEnv();
    const t = await addTenant(env.db, "Gemeente Delft");
    const g = Date.parse(GRENS);
    await add(env, t, "2015-01-01T00:00:00.000Z");
    const last = await add(env, t, iso(g - 1));
    await add(env, t, GRENS);
    await add(env, t, "2024-01-01T00:00:00.000Z");
    const r = await call(env.app, "/api/cron/audit-retentie");
    expect(r.status).toBe(200);
    expect(r.json).toEqual({ ok: true, verwijderd: 2, retentieDagen: 2555, grens: GRENS, achtergehouden: 0, achtergehoudenBij: [] });
    expect(await seqs(env, t)).toEqual([3, 4]);
    // the retention anchor is the last deleted entry, written at the job's clock
    expect(await anchor(env, t)).toEqual({ seq: 2, hash: last.hash, bijgewerkt: NOW.toISOString() });
    // and the deletion is justified by one signed record of exactly that
    const [rec, ...more] = await records(env, t);
    expect(more).toEqual([]);
    expect(rec).toMatchObject({ tenantId: t, seq: 2, hash: last.hash, createdAt: last.createdAt, grens: GRENS, retentieDagen: 2555, tijdstip: NOW.toISOString() });
    expect(rec!.bereik.size).toBe(2);
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
  });

  test("AUDIT_RETENTIE_DAGEN is honoured", async () => {
    env = await makeEnv({ AUDIT_RETENTIE_DAGEN: "30" });
    const t = await addTenant(env.db);
    await add(env, t, "2026-06-23T11:59:59.999Z");
    await add(env, t, "2026-06-23T12:00:00.000Z");
    const r = await call(env.app, "/api/cron/audit-retentie");
    expect(r.json).toEqual({ ok: true, verwijderd: 1, retentieDagen: 30, grens: "2026-06-23T12:00:00.000Z", achtergehouden: 0, achtergehoudenBij: [] });
    expect(await seqs(env, t)).toEqual([2]);
    expect(retentionBoundary(NOW, 30)).toBe("2026-06-23T12:00:00.000Z");
  });

  test("an out-of-order timestamp stops the prefix: no hole, and the chain still verifies", async () => {
    env = await makeEnv();
    const t = await addTenant(env.db);
    await add(env, t, "2014-01-01T00:00:00.000Z");
    await add(env, t, "2015-01-01T00:00:00.000Z");
    await add(env, t, "2025-01-01T00:00:00.000Z"); // written with a wrong (future) clock
    await add(env, t, "2016-01-01T00:00:00.000Z"); // older than grens, but after seq 3 in the chain
    await add(env, t, "2025-06-01T00:00:00.000Z");
    const r = await call(env.app, "/api/cron/audit-retentie");
    expect(r.json.verwijderd).toBe(2);
    expect(await seqs(env, t)).toEqual([3, 4, 5]);
    // the entry of 2016 stays past the retention period: said, and alarmed
    expect(r.status).toBe(200);
    expect([r.json.achtergehouden, r.json.achtergehoudenBij]).toEqual([1, [{ tenantId: t, aantal: 1, seq: 3, tijdstip: "2025-01-01T00:00:00.000Z" }]]);
    expect(env.alarms.raised.map((a) => [a.type, a.context?.aantal])).toEqual([["audit-retention-held", 1]]);
    const v = await call(env.app, "/api/cron/audit-verificatie");
    expect(v.status).toBe(200);
    expect(v.json.resultaten[0]).toEqual({ tenantId: t, tenant: "Tenant", intact: true, aantalEntries: 3 });
  });

  test("an entry dated far ahead holds every older entry behind it, run after run: each run says how many and alarms; nothing held, nothing said", async () => {
    env = await makeEnv();
    const held = await addTenant(env.db, "Vooruit");
    const fine = await addTenant(env.db, "Gewoon");
    await add(env, held, "2014-01-01T00:00:00.000Z");
    await add(env, held, "2099-01-01T00:00:00.000Z"); // a writer's clock 75 years ahead
    for (let i = 0; i < 8; i++) await add(env, held, `2015-0${i + 1}-01T00:00:00.000Z`);
    for (let i = 0; i < 3; i++) await add(env, fine, `2014-0${i + 1}-01T00:00:00.000Z`);
    await add(env, fine, "2025-01-01T00:00:00.000Z");
    for (let run = 0; run < 2; run++) {
      const r = await call(env.app, "/api/cron/audit-retentie");
      expect(r.status).toBe(200);
      expect(r.json.verwijderd).toBe(run === 0 ? 4 : 0);
      expect(r.json.achtergehouden).toBe(8);
      expect(r.json.achtergehoudenBij).toEqual([{ tenantId: held, aantal: 8, seq: 2, tijdstip: "2099-01-01T00:00:00.000Z" }]);
    }
    expect(env.alarms.raised.map((a) => a.type)).toEqual(["audit-retention-held", "audit-retention-held"]);
    expect(await seqs(env, fine)).toEqual([4]);
    // the held entries gone (by whoever fixes the chain's dates), the answer says nothing more
    await env.db.run("DELETE FROM audit_entries WHERE tenant_id = ?", held);
    const clear = await call(env.app, "/api/cron/audit-retentie");
    expect([clear.json.achtergehouden, clear.json.achtergehoudenBij]).toEqual([0, []]);
    expect(env.alarms.raised).toHaveLength(2);
  });

  test("only the tenants with old entries are touched; after retention every chain verifies (200)", async () => {
    env = await makeEnv();
    const young = await addTenant(env.db, "Jong");
    const mixed = await addTenant(env.db, "Gemengd");
    const old = await addTenant(env.db, "Oud");
    await addTenant(env.db, "Leeg");
    for (let i = 0; i < 5; i++) await add(env, young, iso(NOW.getTime() - (5 - i) * DAY));
    for (let i = 0; i < 10; i++) await add(env, mixed, iso(Date.parse("2012-01-01T00:00:00Z") + i * 365 * DAY));
    for (let i = 0; i < 4; i++) await add(env, old, iso(Date.parse("2010-01-01T00:00:00Z") + i * DAY));
    const r = await call(env.app, "/api/cron/audit-retentie");
    expect(r.status).toBe(200);
    // mixed: 2012..2019-07-24 are older than grens 2019-07-25 → 8 deleted (2012..2019)
    expect(await seqs(env, mixed)).toEqual([9, 10]);
    expect(await seqs(env, old)).toEqual([]);
    expect(await seqs(env, young)).toEqual([1, 2, 3, 4, 5]);
    expect(r.json.verwijderd).toBe(8 + 4);
    expect(await anchor(env, young)).toBeNull();
    expect((await anchor(env, old))!.seq).toBe(4);
    // one signed record per tenant touched, in the anchor file and in its database copy
    expect((await records(env)).map((r) => [r.tenantId, r.seq])).toEqual([
      [mixed, 8],
      [old, 4],
    ]);
    const { file, copy } = await fileAndCopy(env);
    expect(file).toHaveLength(2);
    expect(copy).toEqual(file);

    const v = await call(env.app, "/api/cron/audit-verificatie");
    expect(v.status).toBe(200);
    expect(v.json.aantalGebroken).toBe(0);
    expect(v.json.resultaten.map((x: { aantalEntries: number }) => x.aantalEntries)).toEqual([5, 2, 0, 0]);

    // a chain deleted whole continues from its anchor, and still verifies
    const next = await add(env, old, NOW);
    expect(next.seq).toBe(5);
    const v2 = await call(env.app, "/api/cron/audit-verificatie");
    expect(v2.status).toBe(200);
  });

  test("a second run right after deletes nothing and keeps the anchors", async () => {
    env = await makeEnv();
    const t = await addTenant(env.db);
    await add(env, t, "2012-01-01T00:00:00.000Z");
    await add(env, t, "2020-01-01T00:00:00.000Z");
    await call(env.app, "/api/cron/audit-retentie");
    const before = await anchor(env, t);
    const lines = await fileAndCopy(env);
    const r = await call(env.app, "/api/cron/audit-retentie");
    expect(r.json.verwijderd).toBe(0);
    expect(await anchor(env, t)).toEqual(before);
    // nothing deleted, nothing signed
    expect(await fileAndCopy(env)).toEqual(lines);
    expect(lines.file).toHaveLength(1);
  });

  test("deletes in bounded batches after signing one record for the whole prefix; a crash between batches leaves a verifiable chain, and the rerun finishes without signing again", async () => {
    env = await makeEnv();
    const e = env;
    const t = await addTenant(env.db);
    for (let i = 0; i < 11; i++) await add(env, t, iso(Date.parse("2011-01-01T00:00:00Z") + i * DAY));
    await add(env, t, "2024-01-01T00:00:00.000Z");
    const grens = retentionBoundary(NOW, 2555);
    const seen: { first: number; records: number[]; anchor: unknown }[] = [];
    const { observe, settle } = observer();
    const state = async () => ({ first: (await seqs(e, t))[0]!, records: (await records(e, t)).map((r) => r.seq), anchor: (await anchor(e, t))!.seq });
    await expect(
      deleteOld(
        env,
        grens,
        {
          batchSize: 3,
          pause: async () => {},
          afterBatch: (n) => {
            observe(state().then((s) => seen.push(s)));
            if (n >= 6) throw new Error("simulated crash");
          },
        },
        settle,
      ),
    ).rejects.toThrow("simulated crash");
    await settle();
    // The record (and the anchor) cover all 11 from before the first batch on.
    expect(seen).toEqual([
      { first: 4, records: [11], anchor: 11 },
      { first: 7, records: [11], anchor: 11 },
    ]);
    expect(await seqs(env, t)).toEqual([7, 8, 9, 10, 11, 12]);
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);

    // the next run finishes the job under the record it finds
    const r = await runAuditRetentie(env.deps, NOW, { batchSize: 3, pause: async () => {} });
    expect(r.body.verwijderd).toBe(5);
    expect(await seqs(env, t)).toEqual([12]);
    expect((await records(env, t)).map((x) => x.seq)).toEqual([11]);
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
    expect(env.alarms.raised).toEqual([]);
  });

  test("a batch takes the next rows of several tenants; a crash between batches leaves every chain verifiable", async () => {
    env = await makeEnv();
    const e = env;
    const a = await addTenant(env.db, "Alfa");
    const b = await addTenant(env.db, "Beta");
    for (let i = 0; i < 5; i++) await add(env, a, iso(Date.parse("2011-01-01T00:00:00Z") + i * DAY));
    for (let i = 0; i < 3; i++) await add(env, b, iso(Date.parse("2012-01-01T00:00:00Z") + i * DAY));
    await add(env, a, "2024-01-01T00:00:00.000Z");
    await add(env, b, "2024-01-01T00:00:00.000Z");
    const grens = retentionBoundary(NOW, 2555);
    const seen: [number, number][] = [];
    const { observe, settle } = observer();
    await expect(
      deleteOld(
        env,
        grens,
        {
          batchSize: 4, // two rows of each tenant per batch
          pause: async () => {},
          afterBatch: (n) => {
            observe(Promise.all([seqs(e, a), seqs(e, b)]).then(([sa, sb]) => seen.push([sa[0]!, sb[0]!])));
            if (n >= 4) throw new Error("simulated crash");
          },
        },
        settle,
      ),
    ).rejects.toThrow("simulated crash");
    await settle();
    expect(seen).toEqual([[3, 3]]);
    expect(await seqs(env, a)).toEqual([3, 4, 5, 6]);
    expect(await seqs(env, b)).toEqual([3, 4]);
    expect((await records(env)).map((r) => [r.tenantId, r.seq])).toEqual([
      [a, 5],
      [b, 3],
    ]);
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);

    const r = await runAuditRetentie(env.deps, NOW, { batchSize: 4, pause: async () => {} });
    expect(r.body.verwijderd).toBe(4);
    expect(await seqs(env, a)).toEqual([6]);
    expect(await seqs(env, b)).toEqual([4]);
    expect(await records(env)).toHaveLength(2);
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
  });

  // SQLite's own busy handling (retryWhenBusy takes a rolled-back batch again within the
  // run); PostgreSQL has no SQLITE_BUSY, and a batch that fails there ends the run, the
  // next one taking it again (src/pg/audit-retention.ts).
  sqliteOnly("a batch that rolls back (SQLITE_BUSY inside it) is taken again from the last COMMIT: nothing is skipped", async () => {
    env = await makeEnv();
    const s = env.store;
    if (s.kind !== "sqlite") throw new Error("SQLite only");
    const tenants = [await addTenant(env.db, "A"), await addTenant(env.db, "B")];
    for (const [i, t] of tenants.entries()) {
      for (let k = 0; k < 5 + i; k++) await add(env, t, iso(Date.parse("2011-01-01T00:00:00Z") + k * DAY));
      await add(env, t, "2024-01-01T00:00:00.000Z");
    }
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    // The clock is read inside each batch's transaction; once, in the second batch after
    // its chunk ran, it fails as SQLite does when busy: that batch rolls back and
    // retryWhenBusy runs it again, from where the first batch's COMMIT left each tenant.
    let inside = 0;
    const clock = () => {
      if (s.sqlite.inTransaction && ++inside === 7) throw Object.assign(new Error("database is locked"), { code: "SQLITE_BUSY" });
      return performance.now();
    };
    const rows: number[] = [];
    const r = await runAuditRetentie(env.deps, NOW, { batchSize: 4, clock, pause: async () => {}, onBatch: (b) => rows.push(b.rows) });
    expect(inside).toBeGreaterThan(7);
    expect(r.status).toBe(200);
    expect(r.body.verwijderd).toBe(5 + 6);
    expect(rows).toEqual([4, 4, 3]);
    expect(await seqs(env, tenants[0]!)).toEqual([6]);
    expect(await seqs(env, tenants[1]!)).toEqual([7]);
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
  });

  // The batches' length follows the clock: here one driven by the work done (workDrivenClock).
  sqliteOnly("a batch's chunk aims at 30 ms (its COMMIT on top), and at 20 ms from the first batch after the application starts writing through the write API (its appends wait on the event loop for a whole batch)", async () => {
    env = await makeEnv();
    const s = env.store;
    if (s.kind !== "sqlite") throw new Error("SQLite only");
    const tenants = [await addTenant(env.db, "A"), await addTenant(env.db, "B"), await addTenant(env.db, "C")];
    const old = Date.parse("2011-01-01T00:00:00Z");
    const OLD = 20_000;
    s.sqlite.transaction(() => {
      for (const t of tenants) {
        const inputs: ChainInput[] = [];
        for (let i = 0; i < OLD; i++) inputs.push({ tenantId: t, actor: "anna@example.nl", action: "dossier.bekeken", subject: "dossier/1", details: "{}", createdAt: iso(old + i * 1000) });
        inputs.push({ tenantId: t, actor: "anna@example.nl", action: "dossier.bekeken", subject: "dossier/1", details: "{}", createdAt: "2024-01-01T00:00:00.000Z" });
        appendEntries(s.sqlite, inputs);
      }
    }).immediate();
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    const count = s.sqlite.query("SELECT count(*) AS n FROM audit_entries");
    const clock = workDrivenClock(s.sqlite, () => 3 * (OLD + 1) - (count.get() as { n: number }).n);
    /** Each batch's chunk: the lock time without the COMMIT. */
    const batches: { chunkMs: number; writing: boolean }[] = [];
    let writing = false;
    const r = await runAuditRetentie(env.deps, NOW, {
      clock,
      pause: async () => {},
      appWriting: () => writing,
      onBatch: (b) => {
        batches.push({ chunkMs: b.lockMs - b.commitMs, writing });
        // The application's first call comes after the third batch.
        if (batches.length === 3) writing = true;
      },
    });
    expect(r.status).toBe(200);
    expect(r.body.verwijderd).toBe(3 * OLD);
    const before = batches.filter((b) => !b.writing);
    const after = batches.filter((b) => b.writing);
    expect(before).toHaveLength(3);
    expect(after.length).toBeGreaterThan(5);
    for (const b of before) expect(b.chunkMs).toBeLessThanOrEqual(30);
    // The first batch after the switch too: its chunk was scaled down from the 30 ms one.
    for (const b of after) expect(b.chunkMs).toBeLessThanOrEqual(12);
    // Each target filled: all but the first and the last batch reach more than half of it.
    for (const b of before.slice(1)) expect(b.chunkMs).toBeGreaterThan(15);
    for (const b of after.slice(0, -1)) expect(b.chunkMs).toBeGreaterThan(6);
    for (const t of tenants) expect(await seqs(env, t)).toEqual([OLD + 1]);
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
  });

  test("the job's checkpoint after each batch is asked of the WAL thread unless only the write API writes (the application writing through it, no other connection since the batch before); a caller's own afterCommit stands", () => {
    let asked = 0;
    let writing = false;
    const o = jobRetentionOptions({ checkpointNow: () => void asked++, writeApi: { recent: () => writing } as never }, {});
    const quiet = { othersWrote: false };
    o.afterCommit!(quiet);
    expect(asked).toBe(1);
    writing = true;
    o.afterCommit!(quiet);
    o.afterCommit!(quiet);
    expect(asked).toBe(1);
    expect(o.appWriting!()).toBe(true);
    // Another process wrote too: its COMMIT would do the checkpoint otherwise.
    o.afterCommit!({ othersWrote: true });
    expect(asked).toBe(2);
    writing = false;
    o.afterCommit!(quiet);
    expect(asked).toBe(3);
    let own = 0;
    jobRetentionOptions({ checkpointNow: () => void asked++, writeApi: { recent: () => true } as never }, { afterCommit: () => void own++ }).afterCommit!(quiet);
    expect([own, asked]).toEqual([1, 3]);
    expect(jobRetentionOptions({}, {}).afterCommit).toBeUndefined();
  });

  test("however many batches, each tenant touched gets exactly one signed record, in the anchor file and in audit_anchor_log; verification after retention is 200", async () => {
    env = await makeEnv();
    const tenants = [await addTenant(env.db, "A"), await addTenant(env.db, "B"), await addTenant(env.db, "C")];
    await addTenant(env.db, "Jong");
    for (const [i, t] of tenants.entries()) {
      for (let k = 0; k < 7 + i; k++) await add(env, t, iso(Date.parse("2011-01-01T00:00:00Z") + k * DAY));
      await add(env, t, "2024-01-01T00:00:00.000Z");
    }
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    const batches: number[] = [];
    const r = await runAuditRetentie(env.deps, NOW, { batchSize: 3, pause: async () => {}, onBatch: (b) => batches.push(b.rows) });
    expect(r.status).toBe(200);
    expect(r.body.verwijderd).toBe(7 + 8 + 9);
    expect(batches.length).toBeGreaterThan(3);
    expect((await records(env)).map((x) => [x.tenantId, x.seq])).toEqual(tenants.map((t, i) => [t, 7 + i]));
    // The file is the authority; its copy in the database has every line at the same position.
    const { file, copy } = await fileAndCopy(env);
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
    env = await makeEnv();
    const t = await addTenant(env.db, "Zorggroep");
    await add(env, t, "2012-01-01T00:00:00.000Z");
    await add(env, t, "2012-02-01T00:00:00.000Z");
    await add(env, t, "2012-03-01T00:00:00.000Z");
    await add(env, t, "2024-01-01T00:00:00.000Z");
    await env.db.run("UPDATE audit_entries SET actor = 'mallory' WHERE tenant_id = ? AND seq = 2", t);
    const r = await call(env.app, "/api/cron/audit-retentie");
    expect(r.status).toBe(200);
    // audit-retentie first checks the whole chain, as audit-verificatie does: nothing of it is deleted or signed
    expect(r.json.verwijderd).toBe(0);
    expect(await seqs(env, t)).toEqual([1, 2, 3, 4]);
    expect(await records(env)).toEqual([]);
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
    env = await makeEnv();
    const t = await addTenant(env.db);
    await add(env, t, "2012-01-01T00:00:00.000Z");
    await add(env, t, "2012-02-01T00:00:00.000Z");
    await add(env, t, "2024-01-01T00:00:00.000Z");
    await env.db.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq = 1", t);
    const r = await call(env.app, "/api/cron/audit-retentie");
    expect(r.json.verwijderd).toBe(0);
    expect(await anchor(env, t)).toBeNull();
    expect(await records(env)).toEqual([]);
    expect(env.alarms.raised[0]).toMatchObject({ type: "audit-chain-broken", context: { gestopt: [{ seq: 2, reden: "retentie-ontbreekt" }] } });
    const v = await call(env.app, "/api/cron/audit-verificatie");
    expect(v.status).toBe(409);
    expect(v.json.resultaten[0].fout).toMatchObject({ seq: 2, reden: "retentie-ontbreekt" });
  });

  test("the first entry of a fresh chain links to the genesis value, which retention checks too", async () => {
    env = await makeEnv();
    const t = await addTenant(env.db);
    const first = await add(env, t, "2012-01-01T00:00:00.000Z");
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
  async function unjustified(e: Env, t: number, seq: number, fields: { grens: string; tijdstip?: string; retentieDagen?: number; createdAt?: string }) {
    const last = (await e.db.get<{ hash: string; created_at: string }>("SELECT hash, created_at FROM audit_entries WHERE tenant_id = ? AND seq = ?", t, seq))!;
    const note = signRetentionRecord(parseSignerKey(TEST_SIGNING_KEY), {
      tenantId: t,
      seq,
      hash: last.hash,
      createdAt: fields.createdAt ?? last.created_at,
      grens: fields.grens,
      retentieDagen: fields.retentieDagen ?? 2555,
      tijdstip: fields.tijdstip ?? NOW.toISOString(),
      bereik: await rangeUpTo(e, t, seq),
    });
    const line = { soort: "retentie" as const, tenantId: t, note };
    const [positie] = appendLines(e.config.auditAnkerBestand, [line]);
    await insertLine(e, { ...line, positie: positie!, grootte: seq, bereik: null });
    await e.db.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= ?", t, seq);
  }

  test("a validly signed record whose last deleted entry is not older than its grens → retentie-ongeldig", async () => {
    env = await makeEnv();
    const t = await addTenant(env.db, "T");
    for (let i = 0; i < 4; i++) await add(env, t, iso(NOW.getTime() - (10 - i) * DAY)); // recent: nothing is due
    await add(env, t, NOW);
    // grens is the created_at of the last entry it deletes (not older than it), and itself long enough ago
    const third = (await env.db.get<{ created_at: string }>("SELECT created_at FROM audit_entries WHERE tenant_id = ? AND seq = 3", t))!.created_at;
    await unjustified(env, t, 3, { grens: third, retentieDagen: 1 });
    const v = await call(env.app, "/api/cron/audit-verificatie");
    expect(v.status).toBe(409);
    expect(v.json.ankerbestand).toMatchObject({ intact: true });
    expect(v.json.resultaten[0].fout).toMatchObject({ seq: 4, reden: "retentie-ongeldig" });
  });

  test("a validly signed record whose grens is later than its tijdstip minus its retention days → retentie-ongeldig; audit-retentie keeps that chain", async () => {
    env = await makeEnv({ AUDIT_RETENTIE_DAGEN: "3" }); // so entry 4 (7 days old) is due for this run
    const t = await addTenant(env.db, "T");
    for (let i = 0; i < 4; i++) await add(env, t, iso(NOW.getTime() - (10 - i) * DAY));
    await add(env, t, NOW);
    // entries 6 to 9 days old deleted under a "2555 days" record whose grens is 5 days before its tijdstip
    await unjustified(env, t, 3, { grens: iso(NOW.getTime() - 5 * DAY) });
    const v = await call(env.app, "/api/cron/audit-verificatie");
    expect(v.status).toBe(409);
    expect(v.json.resultaten[0].fout).toMatchObject({ seq: 4, reden: "retentie-ongeldig" });
    // A justified record a day later (1 day of retention) is the same deletion, justified.
    const ok = await makeEnv();
    try {
      const u = await addTenant(ok.db, "T");
      for (let i = 0; i < 4; i++) await add(ok, u, iso(NOW.getTime() - (10 - i) * DAY));
      await unjustified(ok, u, 3, { grens: iso(NOW.getTime() - 5 * DAY), retentieDagen: 5 });
      expect((await call(ok.app, "/api/cron/audit-verificatie")).status).toBe(200);
    } finally {
      await ok.cleanup();
    }
    // audit-retentie does not build on it: nothing deleted, its alarm names it
    const r = await call(env.app, "/api/cron/audit-retentie");
    expect(r.status).toBe(200);
    expect(r.json.verwijderd).toBe(0);
    expect(await seqs(env, t)).toEqual([4, 5]);
    expect(env.alarms.raised.at(-1)).toMatchObject({ type: "audit-chain-broken", context: { gestopt: [{ tenantId: t, seq: 4, reden: "retentie-ongeldig" }] } });
  });

  test("a crash between appending the records to the file and the COMMIT never gives a false alarm; the next run copies them in and finishes", async () => {
    env = await makeEnv();
    const t = await addTenant(env.db, "T");
    for (let i = 0; i < 6; i++) await add(env, t, iso(Date.parse("2011-01-01T00:00:00Z") + i * DAY));
    await add(env, t, "2024-01-01T00:00:00.000Z");
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    const grens = retentionBoundary(NOW, 2555);
    // What the run signs and fsyncs before its COMMIT: the record of seq 1..6. The crash
    // comes before its row, its anchor and any deletion are committed.
    const last = (await env.db.get<{ hash: string; created_at: string }>("SELECT hash, created_at FROM audit_entries WHERE tenant_id = ? AND seq = 6", t))!;
    const note = signRetentionRecord(parseSignerKey(TEST_SIGNING_KEY), {
      tenantId: t,
      seq: 6,
      hash: last.hash,
      createdAt: last.created_at,
      grens,
      retentieDagen: 2555,
      tijdstip: NOW.toISOString(),
      bereik: await rangeUpTo(env, t, 6),
    });
    appendLines(env.config.auditAnkerBestand, [{ soort: "retentie", tenantId: t, note }]);
    expect(await records(env)).toEqual([]);
    expect(await anchor(env, t)).toBeNull();

    const v = await call(env.app, "/api/cron/audit-verificatie");
    expect(v.status).toBe(200);
    expect(v.json.ankerbestand).toMatchObject({ intact: true });

    const r = await call(env.app, "/api/cron/audit-retentie");
    expect(r.status).toBe(200);
    expect(r.json.verwijderd).toBe(6);
    expect(await seqs(env, t)).toEqual([7]);
    // the crashed run's line is in the database now, at its place in the file
    const { file, copy } = await fileAndCopy(env);
    expect(copy).toEqual(file);
    expect(copy.some((l) => l.text.includes(JSON.stringify(note)))).toBe(true);
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
    expect(env.alarms.raised).toEqual([]);
  });
});

describe("checkPrefix: what audit-retentie checks before it deletes, and against which checkpoint", () => {
  /** Six entries, the first five older than GRENS. */
  async function chain(e: Env, name: string): Promise<number> {
    const t = await addTenant(e.db, name);
    for (let i = 1; i <= 5; i++) await add(e, t, `2012-0${i}-01T00:00:00.000Z`);
    await add(e, t, "2024-01-01T00:00:00.000Z");
    return t;
  }
  /** Entry `seq` given prev_hash `prev` and a valid hash again, the later entries left as they are. */
  async function relink(e: Env, tenantId: number, seq: number, prev: string) {
    const r = (await e.db.get<Record<string, any>>("SELECT * FROM audit_entries WHERE tenant_id = ? AND seq = ?", tenantId, seq))!;
    const hash = entryHash({ tenantId, seq, createdAt: r.created_at, actor: r.actor, action: r.action, subject: r.subject, details: r.details, prevHash: prev });
    await e.db.run("UPDATE audit_entries SET prev_hash = ?, hash = ? WHERE tenant_id = ? AND seq = ?", prev, hash, tenantId, seq);
  }
  /** Every entry from `seq` on given `actor`, each hash and link recomputed: a rewrite only a signed checkpoint can tell. */
  async function rewriteFrom(e: Env, tenantId: number, seq: number, actor: string) {
    let prev = (await e.db.get<{ hash: string }>("SELECT hash FROM audit_entries WHERE tenant_id = ? AND seq = ?", tenantId, seq - 1))?.hash ?? GENESIS_HASH;
    for (const r of await e.db.all<Record<string, any>>("SELECT * FROM audit_entries WHERE tenant_id = ? AND seq >= ? ORDER BY seq", tenantId, seq)) {
      const hash = entryHash({ tenantId, seq: r.seq, createdAt: r.created_at, actor, action: r.action, subject: r.subject, details: r.details, prevHash: prev });
      await e.db.run("UPDATE audit_entries SET actor = ?, prev_hash = ?, hash = ? WHERE tenant_id = ? AND seq = ?", actor, prev, hash, tenantId, r.seq);
      prev = hash;
    }
  }
  /** A fresh installation with one tenant: five old entries signed at 5, three new ones signed at 8. */
  async function signedTwice(name: string): Promise<number> {
    env = await makeEnv();
    const t = await addTenant(env.db, name);
    for (let i = 1; i <= 5; i++) await add(env, t, `2012-0${i}-01T00:00:00.000Z`);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200); // checkpoint at 5
    for (let i = 6; i <= 8; i++) await add(env, t, `2024-01-0${i}T00:00:00.000Z`);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200); // checkpoint at 8, the newest
    return t;
  }
  const run = async () => {
    const r = await deleteOld(env, GRENS, {});
    return { verwijderd: r.verwijderd, gestopt: r.gestopt.map(({ tenantId, seq, reden }) => ({ tenantId, seq, reden })) };
  };

  test("an intact chain: the prefix older than grens goes, with one signed record of its end", async () => {
    env = await makeEnv();
    const t = await chain(env, "Heel");
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    const before = await rangeUpTo(env, t, 5);
    expect(await run()).toEqual({ verwijderd: 5, gestopt: [] });
    expect(await seqs(env, t)).toEqual([6]);
    const [rec] = await records(env, t);
    expect(rec).toMatchObject({ seq: 5, createdAt: "2012-05-01T00:00:00.000Z" });
    expect(rec!.bereik.encode()).toBe(before.encode());
  });

  test("a prefix whose hash, link or start does not check out keeps every entry of its tenant, and names the entry", async () => {
    env = await makeEnv();
    const changed = await chain(env, "Gewijzigd");
    const unlinked = await chain(env, "Ontkoppeld");
    const unanchored = await chain(env, "Los van genesis");
    const cut = await chain(env, "Ingekort");
    const intact = await chain(env, "Heel");
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    await env.db.run("UPDATE audit_entries SET actor = 'mallory' WHERE tenant_id = ? AND seq = 4", changed);
    await relink(env, unlinked, 4, "f".repeat(64));
    await relink(env, unanchored, 1, "f".repeat(64));
    await env.db.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= 2", cut);

    expect(await run()).toEqual({
      verwijderd: 5,
      gestopt: [
        { tenantId: changed, seq: 4, reden: "hash-afwijkend" },
        { tenantId: unlinked, seq: 4, reden: "koppeling-verbroken" },
        { tenantId: unanchored, seq: 1, reden: "anker-afwijkend" },
        { tenantId: cut, seq: 3, reden: "retentie-ontbreekt" },
      ],
    });
    for (const t of [changed, unlinked, unanchored]) expect(await seqs(env, t)).toEqual([1, 2, 3, 4, 5, 6]);
    expect(await seqs(env, cut)).toEqual([3, 4, 5, 6]);
    expect(await seqs(env, intact)).toEqual([6]);
  });

  test("the prefix is proved against the smallest checkpoint that covers it: a change after that checkpoint stays for audit-verificatie, the proved prefix goes", async () => {
    const t = await signedTwice("Later gewijzigd");
    await env.db.run("UPDATE audit_entries SET actor = 'mallory' WHERE tenant_id = ? AND seq = 7", t);

    expect(await run()).toEqual({ verwijderd: 5, gestopt: [] });
    expect(await seqs(env, t)).toEqual([6, 7, 8]);
    // the change is still there, and verification names it
    const v = await call(env.app, "/api/cron/audit-verificatie");
    expect(v.status).toBe(409);
    expect(v.json.resultaten.find((r: { tenantId: number }) => r.tenantId === t).fout).toMatchObject({ seq: 7, reden: "hash-afwijkend" });
  });

  test("a rewrite of the prefix with every hash and link recomputed does not match the covering checkpoint: nothing goes", async () => {
    const t = await signedTwice("Herschreven");
    await rewriteFrom(env, t, 2, "mallory");

    expect(await run()).toEqual({ verwijderd: 0, gestopt: [{ tenantId: t, seq: 5, reden: "checkpoint-afwijkend" }] });
    expect(await seqs(env, t)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
  });

  test("a prefix past the newest checkpoint is proved by that checkpoint and linked on: the entries since audit-anker go too", async () => {
    env = await makeEnv();
    const t = await addTenant(env.db, "Niet verankerd");
    for (let i = 1; i <= 3; i++) await add(env, t, `2012-0${i}-01T00:00:00.000Z`);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200); // checkpoint at 3
    for (let i = 4; i <= 5; i++) await add(env, t, `2012-0${i}-01T00:00:00.000Z`);
    await add(env, t, "2024-01-01T00:00:00.000Z");
    const before = await rangeUpTo(env, t, 5);
    expect(await run()).toEqual({ verwijderd: 5, gestopt: [] });
    expect((await records(env, t))[0]!.bereik.encode()).toBe(before.encode());
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);

    // the same with an entry past the checkpoint changed: nothing goes
    env.cleanup();
    env = await makeEnv();
    const u = await addTenant(env.db, "Niet verankerd, gewijzigd");
    for (let i = 1; i <= 3; i++) await add(env, u, `2012-0${i}-01T00:00:00.000Z`);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    for (let i = 4; i <= 5; i++) await add(env, u, `2012-0${i}-01T00:00:00.000Z`);
    await add(env, u, "2024-01-01T00:00:00.000Z");
    await env.db.run("UPDATE audit_entries SET subject = 'x' WHERE tenant_id = ? AND seq = 5", u);
    expect(await run()).toEqual({ verwijderd: 0, gestopt: [{ tenantId: u, seq: 5, reden: "hash-afwijkend" }] });
  });

  test("on worker threads (each its own connection) the same checks and plans as in this thread", async () => {
    const outcome = async (workers: number) => {
      env = await makeEnv();
      const intact = await chain(env, "Heel");
      const changed = await chain(env, "Gewijzigd");
      const late = await addTenant(env.db, "Na het anker");
      for (let i = 1; i <= 3; i++) await add(env, late, `2012-0${i}-01T00:00:00.000Z`);
      expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
      await add(env, late, "2012-04-01T00:00:00.000Z");
      await add(env, late, "2024-01-01T00:00:00.000Z");
      await env.db.run("UPDATE audit_entries SET actor = 'mallory' WHERE tenant_id = ? AND seq = 2", changed);
      const s = env.store;
      const signing = { path: env.config.auditAnkerBestand, keys: auditKeys(env.config), retentieDagen: 2555, workers };
      const r =
        s.kind === "sqlite"
          ? await deleteOldAuditEntries(s.sqlite, GRENS, NOW, { ...signing, dbPath: s.path }, { pause: async () => {} })
          : await deleteOldAuditEntriesPg(s.sql, GRENS, NOW, { ...signing, url: s.url });
      const out = { r, left: [await seqs(env, intact), await seqs(env, changed), await seqs(env, late)], records: (await records(env)).map((x) => [x.seq, x.hash, x.bereik.encode()]) };
      expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(409);
      env.cleanup();
      return out;
    };
    const inThread = await outcome(0);
    const onWorkers = await outcome(2);
    expect(inThread.r).toEqual({ verwijderd: 9, gestopt: [{ tenantId: 2, seq: 2, entryId: expect.any(Number), reden: "hash-afwijkend" }], achtergehouden: [] });
    expect(inThread.left).toEqual([[6], [1, 2, 3, 4, 5, 6], [5]]);
    expect(onWorkers).toEqual(inThread);
  });

  test("a chain shorter than its newest checkpoint (entries cut off the end) keeps everything", async () => {
    env = await makeEnv();
    const t = await chain(env, "Kop weg");
    await add(env, t, "2024-02-01T00:00:00.000Z");
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200); // checkpoint at 7
    await env.db.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq = 7", t);
    expect(await run()).toEqual({ verwijderd: 0, gestopt: [{ tenantId: t, seq: 7, reden: "kop-ontbreekt" }] });
    expect(await seqs(env, t)).toEqual([1, 2, 3, 4, 5, 6]);
  });
});
