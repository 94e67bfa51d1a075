// audit-anker itself: what one run signs, where it puts it, and what it refuses.
// The attacks the checkpoints defend against are in audit-tamper.test.ts; the Go peer
// that opens the notes in checkpoint-go.test.ts.
import { afterEach, describe, expect, test } from "bun:test";
import { readFileSync, truncateSync } from "node:fs";
import { LARGEST_INSTALLATION_SQL, TreeExtension } from "../src/audit/anchoring.ts";
import { entriesAfter, entryHash, type EntryRow } from "../src/audit/chain.ts";
import { CompactRange } from "../src/audit/merkle.ts";
import { openNote, parseVerifierKey } from "../src/audit/note.ts";
import { chainStart, type ChainStart } from "../src/audit/verify.ts";
import type { AnyStore } from "../src/deps.ts";
import { chainStartPg, readEntriesPg } from "../src/pg/chain.ts";
import { anchorFileLines, call, mth, NOW, statementsDuring, TEST_VERIFIER_KEY } from "./helpers.ts";
import { addTenant, chainRoot, copyDatabase, fillChain, makeEnv, restoreCopy, sqliteOnly, type Env } from "./dialect.ts";

let env: Env;
afterEach(() => env?.cleanup());

/** Entries `n` of a tenant, made a second apart in the hour before NOW. */
const fill = (e: Env, tenantId: number, n: number) => fillChain(e.store, tenantId, n, { at: (i) => new Date(NOW.getTime() - 3600_000 + i * 1000) });

const logRows = (e: Env) =>
  e.db.all<{
    soort: string;
    tenant_id: number | null;
    grootte: number;
    note: string;
  }>("SELECT soort, tenant_id, grootte, note FROM audit_anchor_log ORDER BY positie");

/**
 * What a database writer without the key can do: a tenant's entries from `fromSeq` on
 * rewritten with valid hashes, the first linking to `firstPrev` (default: its own
 * prev_hash), each next one to the one before.
 */
async function rehash(e: Env, tenantId: number, fromSeq: number, firstPrev?: string) {
  const rows = await e.db.all<Record<string, any>>("SELECT * FROM audit_entries WHERE tenant_id = ? AND seq >= ? ORDER BY seq", tenantId, fromSeq);
  let prev: string = firstPrev ?? rows[0]!.prev_hash;
  for (const r of rows) {
    const hash = entryHash({ tenantId, seq: r.seq, createdAt: r.created_at, actor: r.actor, action: r.action, subject: r.subject, details: r.details, prevHash: prev });
    await e.db.run("UPDATE audit_entries SET prev_hash = ?, hash = ? WHERE tenant_id = ? AND seq = ?", prev, hash, tenantId, r.seq);
    prev = hash;
  }
}

/** The compact range in a tenant's checkpoint rows made useless, so audit-anker rebuilds the tree from the chain's start. */
const spoilRange = (e: Env, tenantId: number) => e.db.run("UPDATE audit_anchor_log SET bereik = 'kapot' WHERE tenant_id = ? AND soort = 'checkpoint'", tenantId);

/** A tenant's entries in seq order, read as audit-anker reads them on the store (entriesAfter, readEntriesPg). */
async function entries(store: AnyStore, tenantId: number): Promise<EntryRow[]> {
  if (store.kind === "sqlite") return [...entriesAfter(store.sqlite, tenantId)];
  const rows: EntryRow[] = [];
  await store.sql.begin("ISOLATION LEVEL REPEATABLE READ READ ONLY", (tx) => readEntriesPg(tx, tenantId, 0, null, (r) => rows.push(r) > 0));
  return rows;
}

/** Where a tenant's chain starts, read from the store (chainStart, chainStartPg). */
async function startOf(store: AnyStore, tenantId: number, firstSeq: number): Promise<ChainStart> {
  const verifiers = [parseVerifierKey(TEST_VERIFIER_KEY)];
  if (store.kind === "sqlite") return chainStart(store.sqlite, tenantId, firstSeq, verifiers);
  return store.sql.begin((tx) => chainStartPg(tx, tenantId, firstSeq, verifiers));
}

/** A run that refuses exactly `refused` and signs no line for those tenants. */
async function expectRefused(e: Env, refused: { tenantId: number; seq: number; reden: string }[]) {
  const linesBefore = anchorFileLines(e.config.auditAnkerBestand).filter((l) => l.soort === "checkpoint");
  const r = await call(e.app, "/api/cron/audit-anker");
  expect(r.status).toBe(409);
  expect(r.json.geweigerd).toEqual(refused);
  const ids = refused.map((x) => x.tenantId);
  expect(r.json.checkpoints.filter((c: { tenantId: number }) => ids.includes(c.tenantId))).toEqual([]);
  const linesAfter = anchorFileLines(e.config.auditAnkerBestand).filter((l) => l.soort === "checkpoint");
  expect(linesAfter.filter((l) => ids.includes(l.tenantId!))).toEqual(linesBefore.filter((l) => ids.includes(l.tenantId!)));
  return r;
}

describe("audit-anker", () => {
  sqliteOnly("the chains are read on a connection of the anchoring's own, never the service's: a walk that gives the event loop turns inside a read transaction of the shared connection would let a request's write start in it", async () => {
    env = await makeEnv();
    const a = await addTenant(env.db, "Gemeente Delft");
    const b = await addTenant(env.db, "Stichting Leiden");
    await fill(env, a, 30);
    await fill(env, b, 40);
    if (env.store.kind !== "sqlite") throw new Error("sqliteOnly");
    const { sqlite } = env.store;
    const { seen, result: r } = await statementsDuring(sqlite, () => call(env.app, "/api/cron/audit-anker"));
    expect(r.status).toBe(200);
    expect(r.json.checkpoints).toEqual([
      { tenantId: a, grootte: 30, root: await chainRoot(env.db, a) },
      { tenantId: b, grootte: 40, root: await chainRoot(env.db, b) },
    ]);
    // The service's connection wrote the run, and read no entry of a chain.
    expect(seen.some((q) => q.includes("audit_anchor_log"))).toBe(true);
    expect(seen.filter((q) => /FROM audit_entries WHERE tenant_id = \? AND seq > \?/.test(q))).toEqual([]);
  });

  test("signs per tenant a checkpoint (origin, newest seq, RFC 6962 root) and one installation checkpoint; the file and the database hold the same lines", async () => {
    env = await makeEnv();
    const a = await addTenant(env.db, "Gemeente Delft");
    const b = await addTenant(env.db, "Stichting Leiden");
    await addTenant(env.db, "Leeg BV");
    await fill(env, a, 7);
    await fill(env, b, 16);

    const r = await call(env.app, "/api/cron/audit-anker");
    expect(r.status).toBe(200);
    expect(r.json.ok).toBe(true);
    expect(r.json.aantal).toBe(2);
    expect(r.json.verificatieSleutel).toBe(TEST_VERIFIER_KEY);
    expect(r.json.checkpoints).toEqual([
      { tenantId: a, grootte: 7, root: await chainRoot(env.db, a) },
      { tenantId: b, grootte: 16, root: await chainRoot(env.db, b) },
    ]);

    const verifier = parseVerifierKey(TEST_VERIFIER_KEY);
    const lines = anchorFileLines(env.config.auditAnkerBestand);
    expect(lines.map((l) => l.soort)).toEqual(["checkpoint", "checkpoint", "installatie"]);
    const first = openNote(lines[0]!.note, [verifier]);
    expect(first.ok && first.text).toBe(`nachtwacht.test/sleutel/tenant/${a}\n7\n${await chainRoot(env.db, a)}\n`);
    const inst = openNote(lines[2]!.note, [verifier]);
    expect(inst.ok).toBe(true);
    expect(r.json.installatie).toBe(lines[2]!.note);
    // The installation checkpoint covers the two tenant lines: size 2, root over their note bytes.
    const instRoot = Buffer.from(mth(lines.slice(0, 2).map((l) => new TextEncoder().encode(l.note)))).toString("base64");
    expect(inst.ok && inst.text).toBe(`nachtwacht.test/sleutel/installatie\n2\n${instRoot}\n`);

    expect((await logRows(env)).map((x) => [x.soort, x.tenant_id, x.note])).toEqual(lines.map((l) => [l.soort, l.tenantId ?? null, l.note]));
    // A note altered by one byte no longer opens.
    const forged = lines[0]!.note.replace("\n7\n", "\n8\n");
    expect(openNote(forged, [verifier]).ok).toBe(false);
  });

  test("a second run without new entries signs nothing; after new entries only the grown tenant gets a checkpoint, its root over the whole chain", async () => {
    env = await makeEnv();
    const a = await addTenant(env.db, "A");
    const b = await addTenant(env.db, "B");
    await fill(env, a, 5);
    await fill(env, b, 5);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);

    const again = await call(env.app, "/api/cron/audit-anker");
    expect(again.status).toBe(200);
    expect(again.json.aantal).toBe(0);
    expect(again.json.ongewijzigd).toBe(2);
    expect(again.json.installatie).toBeNull();
    expect(anchorFileLines(env.config.auditAnkerBestand)).toHaveLength(3);

    await fill(env, b, 6);
    const grown = await call(env.app, "/api/cron/audit-anker");
    expect(grown.status).toBe(200);
    expect(grown.json.checkpoints).toEqual([{ tenantId: b, grootte: 11, root: await chainRoot(env.db, b) }]);
    expect(grown.json.ongewijzigd).toBe(1);
    const lines = anchorFileLines(env.config.auditAnkerBestand);
    expect(lines.map((l) => l.soort)).toEqual(["checkpoint", "checkpoint", "installatie", "checkpoint", "installatie"]);
    expect(await logRows(env)).toHaveLength(5);
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
  });

  test("new entries that do not link to the signed chain are refused: 409, alarm, nothing signed for that tenant, the others signed", async () => {
    env = await makeEnv();
    const a = await addTenant(env.db, "A");
    const b = await addTenant(env.db, "B");
    await fill(env, a, 5);
    await fill(env, b, 5);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    await fill(env, a, 3);
    await fill(env, b, 3);
    await env.db.run("UPDATE audit_entries SET prev_hash = ? WHERE tenant_id = ? AND seq = 7", "0".repeat(64), a);

    const r = await call(env.app, "/api/cron/audit-anker");
    expect(r.status).toBe(409);
    expect(r.json.ok).toBe(false);
    expect(r.json.geweigerd).toEqual([{ tenantId: a, seq: 7, reden: expect.any(String) }]);
    expect(r.json.checkpoints.map((c: { tenantId: number }) => c.tenantId)).toEqual([b]);
    expect(env.alarms.raised.map((x) => x.type)).toContain("audit-chain-broken");
    const forA = anchorFileLines(env.config.auditAnkerBestand).filter((l) => l.tenantId === a);
    expect(forA).toHaveLength(1);
  });

  test("the first new entry recomputed to link elsewhere (valid hash, wrong prev_hash) is refused, not signed over: koppeling-verbroken", async () => {
    env = await makeEnv();
    const a = await addTenant(env.db, "A");
    await fill(env, a, 5);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    await fill(env, a, 3);
    // Entry 6 rewritten to follow a forged predecessor, its own hash made valid again,
    // and the rest of the chain recomputed on top of it.
    const rows = await env.db.all<Record<string, any>>("SELECT * FROM audit_entries WHERE tenant_id = ? AND seq >= 6 ORDER BY seq", a);
    let prev = "f".repeat(64);
    for (const r of rows) {
      const hash = entryHash({ tenantId: a, seq: r.seq, createdAt: r.created_at, actor: r.actor, action: r.action, subject: r.subject, details: r.details, prevHash: prev });
      await env.db.run("UPDATE audit_entries SET prev_hash = ?, hash = ? WHERE tenant_id = ? AND seq = ?", prev, hash, a, r.seq);
      prev = hash;
    }
    const r = await call(env.app, "/api/cron/audit-anker");
    expect(r.status).toBe(409);
    expect(r.json.geweigerd).toEqual([{ tenantId: a, seq: 6, reden: "koppeling-verbroken" }]);
    expect(r.json.aantal).toBe(0);
    expect(anchorFileLines(env.config.auditAnkerBestand).filter((l) => l.tenantId === a)).toHaveLength(1);
  });

  test("a line the file holds but the database lost to a crash before COMMIT is copied back (hersteld), not signed twice", async () => {
    env = await makeEnv();
    const a = await addTenant(env.db, "A");
    await fill(env, a, 4);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    await fill(env, a, 2);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    // The crash: the second run's lines reached the file, its transaction never committed.
    await env.db.run("DELETE FROM audit_anchor_log WHERE positie NOT IN (SELECT positie FROM audit_anchor_log ORDER BY positie LIMIT 2)");
    expect(await logRows(env)).toHaveLength(2);

    const r = await call(env.app, "/api/cron/audit-anker");
    expect(r.status).toBe(200);
    expect(r.json.hersteld).toBe(2);
    expect(r.json.aantal).toBe(0);
    expect((await logRows(env)).map((x) => x.note)).toEqual(anchorFileLines(env.config.auditAnkerBestand).map((l) => l.note));
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
  });

  test("a run whose append was torn just before its last newline (its transaction rolled back): the next runs and audit-verificatie are 200, no restore alarm", async () => {
    env = await makeEnv();
    const a = await addTenant(env.db, "A");
    await fill(env, a, 4);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    const rowsBefore = (await logRows(env)).length;
    await fill(env, a, 2);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    // The fault: the run's lines reached the file but the last one's newline did not, the
    // write failed and the transaction rolled back.
    await env.db.run("DELETE FROM audit_anchor_log WHERE positie NOT IN (SELECT positie FROM audit_anchor_log ORDER BY positie LIMIT ?)", rowsBefore);
    truncateSync(env.config.auditAnkerBestand, readFileSync(env.config.auditAnkerBestand).length - 1);

    await fill(env, a, 1);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    const v = await call(env.app, "/api/cron/audit-verificatie");
    expect(v.status).toBe(200);
    await fill(env, a, 1);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
    expect(env.alarms.raised.map((x) => x.type)).toEqual([]);
  });

  test("the largest installation checkpoint, read inside the write lock, is an index seek, not a walk of the whole log", async () => {
    env = await makeEnv();
    const a = await addTenant(env.db, "A");
    await fill(env, a, 3);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    const { store } = env;
    if (store.kind === "sqlite") {
      const plan = store.sqlite.query(`EXPLAIN QUERY PLAN ${LARGEST_INSTALLATION_SQL}`).all() as { detail: string }[];
      expect(plan.map((p) => p.detail)).toEqual(["SEARCH audit_anchor_log USING COVERING INDEX audit_anchor_log_tenant_idx (tenant_id=? AND soort=?)"]);
    } else {
      // The planner takes a sequential scan of a table this small whatever the indexes; without it, the seek's condition shows.
      const plan = await store.sql.begin(async (tx) => {
        await tx.unsafe("SET LOCAL enable_seqscan = off");
        return ((await tx.unsafe(`EXPLAIN ${LARGEST_INSTALLATION_SQL}`)) as { "QUERY PLAN": string }[]).map((r) => r["QUERY PLAN"]).join("\n");
      });
      expect(plan).toMatch(/Index (Only )?Cond: \(\(tenant_id IS NULL\) AND \(soort = 'installatie'::text\)\)/);
    }
    const largest = await env.db.get<{ n: number | string }>(LARGEST_INSTALLATION_SQL);
    expect(Number(largest!.n)).toBe((await logRows(env)).find((r) => r.soort === "installatie")!.grootte);
  });

  /** Anchors `runs` more runs after a copy of the database, then puts the copy back as a restore would. */
  async function rolledBack(runs: number): Promise<{ a: number; sizeBefore: number }> {
    env = await makeEnv();
    const a = await addTenant(env.db, "A");
    await fill(env, a, 4);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    const copy = await copyDatabase(env);
    for (let i = 0; i < runs; i++) {
      await fill(env, a, 3);
      expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    }
    const sizeBefore = readFileSync(env.config.auditAnkerBestand).length;
    await restoreCopy(env, copy);
    return { a, sizeBefore };
  }

  test("a database older than the anchor file by more than one run is not signed over: 409 database-teruggezet, the alarm, the file untouched", async () => {
    const { sizeBefore } = await rolledBack(2);
    const r = await call(env.app, "/api/cron/audit-anker");
    expect(r.status).toBe(409);
    expect(r.json.reden).toBe("database-teruggezet");
    expect(r.json.aantal).toBe(0);
    expect(env.alarms.raised.map((x) => x.type)).toContain("audit-chain-broken");
    expect(readFileSync(env.config.auditAnkerBestand).length).toBe(sizeBefore);
  });

  test("a database older by exactly one run looks like a crash before COMMIT: the lines are copied back, and the tenant whose entries are gone is refused (kop-ontbreekt)", async () => {
    const { a, sizeBefore } = await rolledBack(1);
    const r = await call(env.app, "/api/cron/audit-anker");
    expect(r.status).toBe(409);
    expect(r.json.hersteld).toBe(2);
    expect(r.json.aantal).toBe(0);
    expect(r.json.geweigerd).toEqual([{ tenantId: a, seq: 7, reden: "kop-ontbreekt" }]);
    expect(env.alarms.raised.map((x) => x.type)).toContain("audit-chain-broken");
    expect(readFileSync(env.config.auditAnkerBestand).length).toBe(sizeBefore);
  });

  test("a new entry changed after it was appended, its hash left as it was, is refused, not signed: hash-afwijkend", async () => {
    env = await makeEnv();
    const a = await addTenant(env.db, "A");
    const b = await addTenant(env.db, "B");
    await fill(env, a, 5);
    await fill(env, b, 5);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    await fill(env, a, 3);
    await fill(env, b, 3);
    await env.db.run("UPDATE audit_entries SET actor = 'iemand-anders' WHERE tenant_id = ? AND seq = 7", a);
    const r = await expectRefused(env, [{ tenantId: a, seq: 7, reden: "hash-afwijkend" }]);
    expect(r.json.checkpoints).toEqual([{ tenantId: b, grootte: 8, root: await chainRoot(env.db, b) }]);
  });

  test("rebuilding the tree (its compact range spoilt), a signed entry changed with its hash left as it was is refused: hash-afwijkend", async () => {
    env = await makeEnv();
    const a = await addTenant(env.db, "A");
    await fill(env, a, 5);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    await fill(env, a, 3);
    await env.db.run("UPDATE audit_entries SET subject = 'dossier/verzonnen' WHERE tenant_id = ? AND seq = 3", a);
    await spoilRange(env, a);
    await expectRefused(env, [{ tenantId: a, seq: 3, reden: "hash-afwijkend" }]);
  });

  test("a compact range that folds to another root (a recomputed chain's, written into the row) is not extended: rebuilt, checkpoint-afwijkend", async () => {
    env = await makeEnv();
    const a = await addTenant(env.db, "A");
    await fill(env, a, 5);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    await env.db.run("UPDATE audit_entries SET subject = 'dossier/verzonnen' WHERE tenant_id = ? AND seq = 3", a);
    await rehash(env, a, 3);
    const forged = new CompactRange();
    for (const { hash } of await env.db.all<{ hash: string }>("SELECT hash FROM audit_entries WHERE tenant_id = ? ORDER BY seq", a)) forged.pushEntryHash(hash);
    await env.db.run("UPDATE audit_anchor_log SET bereik = ? WHERE tenant_id = ? AND soort = 'checkpoint'", forged.encode(), a);
    await fill(env, a, 2);
    await expectRefused(env, [{ tenantId: a, seq: 5, reden: "checkpoint-afwijkend" }]);
  });

  test("rebuilding the tree, the signed head gone with newer entries after it is refused: kop-ontbreekt at the head", async () => {
    env = await makeEnv();
    const a = await addTenant(env.db, "A");
    await fill(env, a, 5);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    await fill(env, a, 3);
    await env.db.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq = 5", a);
    await spoilRange(env, a);
    await expectRefused(env, [{ tenantId: a, seq: 5, reden: "kop-ontbreekt" }]);
  });

  test("the first entry after the tree's known base must link to that base's hash: anker-afwijkend from genesis, after a rebuild, and for the rebuild's first entry", async () => {
    env = await makeEnv();
    const fresh = await addTenant(env.db, "Nieuw");
    const grown = await addTenant(env.db, "Gegroeid");
    const rebuilt = await addTenant(env.db, "Herbouwd");
    await fill(env, grown, 5);
    await fill(env, rebuilt, 5);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    // No checkpoint yet: entry 1 must link to genesis.
    await fill(env, fresh, 3);
    await rehash(env, fresh, 1, "f".repeat(64));
    // Rebuilt up to its checkpoint: entry 6 must link to the rebuilt head.
    await fill(env, grown, 3);
    await rehash(env, grown, 6, "f".repeat(64));
    await spoilRange(env, grown);
    // Rebuilt from genesis: entry 1 must link to genesis (the root then differs too).
    await fill(env, rebuilt, 2);
    await rehash(env, rebuilt, 1, "f".repeat(64));
    await spoilRange(env, rebuilt);
    await expectRefused(env, [
      { tenantId: fresh, seq: 1, reden: "anker-afwijkend" },
      { tenantId: grown, seq: 6, reden: "anker-afwijkend" },
      { tenantId: rebuilt, seq: 1, reden: "anker-afwijkend" },
    ]);
  });

  test("a chain deleted by audit-retentie up to its signed head: the next entry must link to the retention record's hash (anker-afwijkend)", async () => {
    env = await makeEnv({ AUDIT_RETENTIE_DAGEN: "900" });
    const a = await addTenant(env.db, "A");
    await fillChain(env.store, a, 10); // 1000 to 991 days old: past the 900 days
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    const ret = await call(env.app, "/api/cron/audit-retentie");
    expect(ret.status).toBe(200);
    expect(ret.json.verwijderd).toBe(10);
    await fillChain(env.store, a, 3, { from: 200 }); // seq 11-13, 800 days old: kept
    await rehash(env, a, 11, "f".repeat(64));
    await expectRefused(env, [{ tenantId: a, seq: 11, reden: "anker-afwijkend" }]);
  });

  test("TreeExtension, whatever store feeds it: rows repeated, out of order or at and below where it reads from are refused, and a refusal stays", async () => {
    env = await makeEnv();
    const a = await addTenant(env.db, "A");
    await fill(env, a, 8);
    const rows = await entries(env.store, a);
    const bySeq = (...seqs: number[]) => seqs.map((q) => rows[q - 1]!);
    const head = new CompactRange();
    for (const r of rows.slice(0, 5)) head.pushEntryHash(r.hash);
    const prev = { size: 5, root: head.root(), basis: 0 };
    /** The result of feeding `fed` to an extension from the signed head at 5: its stored range, or rebuilt (null). */
    const run = async (stored: string | null, fed: EntryRow[], feedAll = false) => {
      const ext = new TreeExtension(a, 1, prev, await startOf(env.store, a, 1), stored);
      for (const r of fed) if (!ext.push(r) && !feedAll) break;
      const res = ext.result();
      return "refusal" in res ? res.refusal : { size: res.basis + res.range.size, root: Buffer.from(res.range.root()).toString("base64") };
    };
    const whole = { size: 8, root: await chainRoot(env.db, a) };
    for (const stored of [head.encode(), null]) {
      const from = stored === null ? 0 : 4;
      expect(await run(stored, rows.filter((r) => r.seq > from))).toEqual(whole);
      expect(await run(stored, [...bySeq(...(stored === null ? [1, 2, 3, 4] : [])), ...bySeq(5, 6, 6, 7, 8)])).toEqual({ tenantId: a, seq: 6, reden: "volgnummer-gat" });
      expect(await run(stored, [...bySeq(...(stored === null ? [1, 2, 3, 4] : [])), ...bySeq(5, 7, 6, 8)])).toEqual({ tenantId: a, seq: 7, reden: stored === null ? "anker-afwijkend" : "volgnummer-gat" });
      // Rows after a refusal change nothing, even when a caller goes on feeding them.
      const altered = { ...rows[6]!, actor: "iemand-anders" };
      expect(await run(stored, [...rows.filter((r) => r.seq > from && r.seq < 7), altered, rows[6]!, rows[7]!], true)).toEqual({ tenantId: a, seq: 7, reden: "hash-afwijkend" });
    }
    // At or below where it reads from: refused, not skipped.
    expect(await run(head.encode(), bySeq(3, 4, 5, 6, 7, 8))).toEqual({ tenantId: a, seq: 3, reden: "volgnummer-gat" });
    expect(await run(null, bySeq(1, 1, 2, 3, 4, 5, 6, 7, 8))).toEqual({ tenantId: a, seq: 1, reden: "volgnummer-gat" });
    expect(await run(null, bySeq(1, 2, 3, 4, 5, 5, 6, 7, 8))).toEqual({ tenantId: a, seq: 5, reden: "volgnummer-gat" });
  });
});
