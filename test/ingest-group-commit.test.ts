// Write-API calls on SQLite that arrive together share one transaction
// (src/ingest/group-commit.ts), each in a savepoint of its own: what one call does wrong
// stays its own, what SQLite ends takes the whole group, and nobody is answered before
// the COMMIT. SQLite only: PostgreSQL writes each call in its own transaction.
import { Database } from "bun:sqlite";
import { afterEach, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { groupWriter } from "../src/ingest/group-commit.ts";
import { newIngestCounters } from "../src/ingest/counters.ts";
import { Refusal } from "../src/ingest/refusal.ts";
import { jobPath } from "../src/schedule.ts";
import { addTenant, call, makeTestEnv, tempDir, type TestEnv } from "./helpers.ts";
import { APP_SECRET, auditEntry } from "./ingest-fixtures.ts";

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A database file with a table t(x), the writer's connection, and a second connection that reads. */
function scratch() {
  const { dir, cleanup } = tempDir();
  const path = join(dir, "group.db");
  const db = new Database(path, { strict: true });
  db.run("PRAGMA journal_mode = WAL");
  db.run("CREATE TABLE t (x INTEGER NOT NULL)");
  const reader = new Database(path, { readonly: true });
  cleanups.push(cleanup, () => db.close(), () => reader.close());
  const count = (c: Database) => (c.query("SELECT count(*) AS n FROM t").get() as { n: number }).n;
  const values = () => (db.query("SELECT x FROM t ORDER BY rowid").values() as [number][]).map(([x]) => x);
  return { db, reader, count, values };
}

describe("groupWriter", () => {
  test("calls queued in one turn share one transaction: each sees the earlier ones' rows, another connection none until the COMMIT", async () => {
    const { db, reader, count, values } = scratch();
    const counted = { sqliteTransactions: 0 };
    const writer = groupWriter(db, counted);
    const seen: { own: number; other: number }[] = [];
    const work = (x: number) => () => {
      db.run("INSERT INTO t (x) VALUES (?)", [x]);
      seen.push({ own: count(db), other: count(reader) });
      return x * 10;
    };
    const answers = await Promise.all([1, 2, 3].map((x) => writer.announce().write(work(x))));
    expect(answers).toEqual([10, 20, 30]);
    expect(seen).toEqual([
      { own: 1, other: 0 },
      { own: 2, other: 0 },
      { own: 3, other: 0 },
    ]);
    expect(count(reader)).toBe(3);
    expect(values()).toEqual([1, 2, 3]);
    expect(counted.sqliteTransactions).toBe(1);
  });

  test("a call that throws rolls back only its own writes and gets its own error; the others are stored", async () => {
    const { db, values } = scratch();
    const counted = { sqliteTransactions: 0 };
    const writer = groupWriter(db, counted);
    const refusal = new Refusal(409, "Sleutel al gebruikt");
    const insert = (x: number, fail?: Error) => () => {
      db.run("INSERT INTO t (x) VALUES (?)", [x]);
      db.run("INSERT INTO t (x) VALUES (?)", [x + 100]);
      if (fail) throw fail;
      return x;
    };
    const results = await Promise.allSettled([writer.announce().write(insert(1)), writer.announce().write(insert(2, refusal)), writer.announce().write(insert(3))]);
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    expect((results[1] as PromiseRejectedResult).reason).toBe(refusal);
    expect(values()).toEqual([1, 101, 3, 103]);
    expect(counted.sqliteTransactions).toBe(1);
    expect(db.inTransaction).toBe(false);
  });

  test("a call after which SQLite ended the whole transaction: every call of the group fails with that error, nothing is stored, no later call ran outside it", async () => {
    const { db, values } = scratch();
    const writer = groupWriter(db, { sqliteTransactions: 0 });
    const ended = new Error("disk I/O error");
    let thirdRan = false;
    const results = await Promise.allSettled([
      writer.announce().write(() => db.run("INSERT INTO t (x) VALUES (1)")),
      writer.announce().write(() => {
        db.run("INSERT INTO t (x) VALUES (2)");
        db.run("ROLLBACK"); // as SQLite does itself after an I/O error or a full disk
        throw ended;
      }),
      writer.announce().write(() => {
        thirdRan = true;
        db.run("INSERT INTO t (x) VALUES (3)");
      }),
    ]);
    expect(results.map((r) => (r.status === "rejected" ? r.reason : r.status))).toEqual([ended, ended, ended]);
    expect(thirdRan).toBe(false);
    expect(values()).toEqual([]);
    // the writer goes on
    expect(await writer.announce().write(() => db.run("INSERT INTO t (x) VALUES (4)").changes)).toBe(1);
    expect(values()).toEqual([4]);
  });

  test("a transaction takes queued calls in order while their weights stay within the limit (at least one)", async () => {
    const { db, values } = scratch();
    const counted = { sqliteTransactions: 0 };
    const writer = groupWriter(db, counted, 5, 2000);
    const inTransaction: number[] = [];
    const weights = [1000, 1000, 1000, 2500, 1, 999];
    await Promise.all(
      weights.map((w, i) =>
        writer.announce().write(() => {
          db.run("INSERT INTO t (x) VALUES (?)", [i]);
          inTransaction.push(counted.sqliteTransactions);
        }, w),
      ),
    );
    expect(values()).toEqual([0, 1, 2, 3, 4, 5]);
    // [1000, 1000] [1000] [2500: alone, over the limit] [1, 999]
    expect(inTransaction).toEqual([1, 1, 2, 3, 4, 4]);
  });

  test("queued calls wait for an announced call still reading its body and share its transaction; a ticket closed without writing releases them", async () => {
    const { db, values } = scratch();
    const counted = { sqliteTransactions: 0 };
    // A wait far longer than the test: only the announced call itself can let the transaction begin.
    const writer = groupWriter(db, counted, 600_000);
    const slow = writer.announce();
    const quick = writer.announce().write(() => db.run("INSERT INTO t (x) VALUES (2)"));
    let quickDone = false;
    void quick.then(() => (quickDone = true));
    // Several turns of the event loop: the quick call waits while the slow one is announced.
    for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
    expect(quickDone).toBe(false);
    expect(values()).toEqual([]);
    await Promise.all([quick, slow.write(() => db.run("INSERT INTO t (x) VALUES (1)"))]);
    expect(values()).toEqual([2, 1]);
    expect(counted.sqliteTransactions).toBe(1);

    const refused = writer.announce(); // its body turned out invalid: it never writes
    const other = writer.announce().write(() => db.run("INSERT INTO t (x) VALUES (3)"));
    refused.close();
    await other;
    expect(values()).toEqual([2, 1, 3]);
    expect(counted.sqliteTransactions).toBe(2);
    // closing again, or after writing, changes nothing
    refused.close();
    expect(await refused.write(() => 1).catch((e: Error) => e.message)).toBe("a ticket writes once");
  });

  test("an announced call that never writes holds the others up for at most the wait", async () => {
    const { db, values } = scratch();
    const writer = groupWriter(db, { sqliteTransactions: 0 }, 1);
    const stuck = writer.announce();
    await writer.announce().write(() => db.run("INSERT INTO t (x) VALUES (1)"));
    expect(values()).toEqual([1]);
    stuck.close();
  });
});

describe("the write API on SQLite, calls sent together", () => {
  let env: TestEnv;
  const counters = newIngestCounters();
  const setup = () => {
    // The wait is long, so the calls below share a transaction however slow the machine.
    env = makeTestEnv({ APP_SECRET }, { counters, groupWaitMs: 600_000 });
    cleanups.push(() => env.cleanup());
    addTenant(env.store, "Eén");
    counters.sqliteTransactions = 0;
  };
  const post = (body: unknown) => call(env.app, "/api/audit", { token: APP_SECRET, body: JSON.stringify(body) });
  const rows = () =>
    env.store.sqlite.query("SELECT seq, id, hash, sleutel FROM audit_entries WHERE tenant_id = 1 ORDER BY seq").all() as { seq: number; id: number; hash: string; sleutel: string | null }[];

  test("one transaction; a refused batch among them stores nothing, the others get receipts that match the chain, which verifies", async () => {
    setup();
    const a = { entries: [0, 1, 2].map((i) => auditEntry(1, i, { sleutel: `a${i}` })) };
    const unknownTenant = { entries: [auditEntry(1, 10), auditEntry(99, 11)] };
    const c = { entries: [auditEntry(1, 20), auditEntry(1, 21, { sleutel: "c1" })] };
    const conflicting = { entries: [auditEntry(1, 30, { sleutel: "x" }), auditEntry(1, 31, { sleutel: "a0" })] };
    const [ra, rb, rc, rd] = await Promise.all([post(a), post(unknownTenant), post(c), post(conflicting)]);
    expect([ra.status, rb.status, rc.status, rd.status]).toEqual([200, 422, 200, 409]);
    expect(rb.json.error).toContain("entries[1].tenantId");
    expect(rd.json.error).toContain('"a0"');
    expect(counters.sqliteTransactions).toBe(1);
    const stored = rows();
    expect(stored.map((r) => r.seq)).toEqual([1, 2, 3, 4, 5]);
    // each batch's entries consecutive, in batch order; which batch came first is the arrival's
    const bySeq = (x: { seq: number }, y: { seq: number }) => x.seq - y.seq;
    const receipts = [...ra.json.ontvangstbewijzen, ...rc.json.ontvangstbewijzen].sort(bySeq);
    expect(receipts).toEqual(stored.map((r) => ({ tenantId: 1, seq: r.seq, id: r.id, hash: r.hash })));
    for (const r of [ra, rc]) {
      const seqs = r.json.ontvangstbewijzen.map((x: { seq: number }) => x.seq);
      expect(seqs).toEqual(seqs.map((_: number, i: number) => seqs[0] + i));
    }
    const sleutelOf = new Map(stored.map((r) => [r.seq, r.sleutel]));
    expect(ra.json.ontvangstbewijzen.map((x: { seq: number }) => sleutelOf.get(x.seq))).toEqual(["a0", "a1", "a2"]);
    expect(rc.json.ontvangstbewijzen.map((x: { seq: number }) => sleutelOf.get(x.seq))).toEqual([null, "c1"]);
    const verified = await call(env.app, jobPath("audit-verificatie"));
    expect(verified.status).toBe(200);
  });

  test("the same batch twice at once (a retry racing its first try): stored once, both answered with the same receipts", async () => {
    setup();
    const batch = { entries: [0, 1, 2].map((i) => auditEntry(1, i, { sleutel: `k${i}` })) };
    const [first, second] = await Promise.all([post(batch), post(batch)]);
    expect([first.status, second.status]).toEqual([200, 200]);
    expect(counters.sqliteTransactions).toBe(1);
    expect(second.json.ontvangstbewijzen).toEqual(first.json.ontvangstbewijzen);
    expect([first.json.opgeslagen, first.json.alBekend, second.json.opgeslagen, second.json.alBekend]).toEqual([3, 0, 0, 3]);
    expect(rows().map((r) => r.sleutel)).toEqual(["k0", "k1", "k2"]);
  });

  test("a call refused before it writes (an invalid body) lets the others' transaction begin at once", async () => {
    setup();
    const [bad, good] = await Promise.all([post({ entries: [{ ...auditEntry(1, 0), actor: "" }] }), post({ entries: [auditEntry(1, 1)] })]);
    expect(bad.status).toBe(400);
    expect(good.status).toBe(200);
    expect(counters.sqliteTransactions).toBe(1);
    expect(rows().length).toBe(1);
  });
});
