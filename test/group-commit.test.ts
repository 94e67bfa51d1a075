// The grouped writer of the write API on SQLite (src/ingest/group-commit.ts), on a real
// database file: calls of one turn share one transaction, each in its own savepoint; a
// call that fails on its own fails alone; an error from SQLite fails the group; nothing
// is answered before its COMMIT; a group takes what fits its time budget and row cap, and
// a turn of the event loop what fits its own; a call waits for another connection's
// write lock at most its own wait, and one arriving meanwhile is not lost.
import { Database } from "bun:sqlite";
import { afterEach, expect, test } from "bun:test";
import { join } from "node:path";
import { BUSY_TIMEOUT_MS } from "../src/db.ts";
import { GROUP_MAX_ROWS, groupedWriter, WriteWaitGivenUp } from "../src/ingest/group-commit.ts";
import { Refusal } from "../src/ingest/refusal.ts";
import { tempDir } from "./helpers.ts";

let cleanup = () => {};
afterEach(() => cleanup());

function open() {
  const t = tempDir();
  const path = join(t.dir, "groep.db");
  const sqlite = new Database(path, { strict: true });
  sqlite.run("PRAGMA journal_mode = WAL");
  sqlite.run(`PRAGMA busy_timeout = ${BUSY_TIMEOUT_MS}`);
  sqlite.run("CREATE TABLE rij (naam TEXT NOT NULL)");
  // Another connection, as another process would see the file.
  const other = new Database(path, { strict: true });
  cleanup = () => {
    other.close();
    sqlite.close();
    t.cleanup();
  };
  const insert = (naam: string) => () => {
    expect(sqlite.inTransaction).toBe(true);
    sqlite.run("INSERT INTO rij (naam) VALUES (?)", [naam]);
    return naam;
  };
  const seen = () => (other.query("SELECT naam FROM rij ORDER BY rowid").values() as [string][]).map(([n]) => n);
  return { sqlite, other, insert, seen };
}

/** A writer past its first call (which goes alone), whose groups cost nothing by its clock: every call of a turn fits its budget. */
async function warm(sqlite: Database) {
  const w = groupedWriter(sqlite, { clock: () => 0 });
  expect(await w.write(1, () => "eerste")).toBe("eerste");
  return w;
}

test("calls of one turn share one transaction, in order, and are answered after its COMMIT", async () => {
  const { sqlite, insert, seen } = open();
  const w = await warm(sqlite);
  // Each sees what the calls before it wrote, as with a transaction each.
  const counted = () => (sqlite.query("SELECT count(*) AS n FROM rij").get() as { n: number }).n;
  // What another connection sees at the moment each call is answered: the whole group, committed.
  const atAnswer: string[][] = [];
  const calls = [w.write(1, insert("a")), w.write(1, counted), w.write(1, insert("b"))].map((c) => c.then((v) => (atAnswer.push(seen()), v)));
  expect(await Promise.all(calls)).toEqual(["a", 1, "b"]);
  expect(atAnswer).toEqual([["a", "b"], ["a", "b"], ["a", "b"]]);
  expect(w.stats).toEqual({ groups: 2, calls: 4 });
  expect(sqlite.inTransaction).toBe(false);
});

test("a call that throws (a Refusal or any error of its own) is rolled back to its savepoint; the others are stored", async () => {
  const { sqlite, insert, seen } = open();
  const w = await warm(sqlite);
  const refused = () => {
    insert("weg")();
    throw new Refusal(409, "Sleutel \"x\" is al gebruikt.");
  };
  const broken = () => {
    insert("ook weg")();
    throw new TypeError("kapot");
  };
  const results = await Promise.allSettled([w.write(1, insert("a")), w.write(1, refused), w.write(1, broken), w.write(1, insert("b"))]);
  expect(results.map((r) => r.status)).toEqual(["fulfilled", "rejected", "rejected", "fulfilled"]);
  expect((results[1] as PromiseRejectedResult).reason).toBeInstanceOf(Refusal);
  expect((results[2] as PromiseRejectedResult).reason).toBeInstanceOf(TypeError);
  // Counted: the stored calls only (the refused ones are answered as if never written).
  expect(w.stats).toEqual({ groups: 2, calls: 3 });
  expect(seen()).toEqual(["a", "b"]);
});

test("a constraint violation fails only its call; the others of the group are stored", async () => {
  const { sqlite, insert, seen } = open();
  sqlite.run("CREATE UNIQUE INDEX rij_naam ON rij (naam)");
  const w = await warm(sqlite);
  const results = await Promise.allSettled([w.write(1, insert("a")), w.write(1, insert("a")), w.write(1, insert("b"))]);
  expect(results.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
  expect(String((results[1] as PromiseRejectedResult).reason)).toContain("UNIQUE");
  expect(seen()).toEqual(["a", "b"]);
});

test("an error from SQLite fails every call of the group and stores nothing of it; the next group is written", async () => {
  const { sqlite, insert, seen } = open();
  const w = await warm(sqlite);
  const sqliteError = () => sqlite.run("INSERT INTO bestaat_niet VALUES (1)");
  const results = await Promise.allSettled([w.write(1, insert("a")), w.write(1, sqliteError), w.write(1, insert("b"))]);
  expect(results.map((r) => r.status)).toEqual(["rejected", "rejected", "rejected"]);
  for (const r of results) expect(String((r as PromiseRejectedResult).reason)).toContain("bestaat_niet");
  expect(seen()).toEqual([]);
  expect(sqlite.inTransaction).toBe(false);
  expect(w.stats).toEqual({ groups: 1, calls: 1 });
  expect(await w.write(1, insert("c"))).toBe("c");
  expect(seen()).toEqual(["c"]);
});

test("a group takes what fits the time budget by the cost per row of recent groups; the first call goes alone, a dear one alone", async () => {
  const { sqlite, insert, seen } = open();
  // A clock that only the work moves: each row "takes" `cost` ms.
  let now = 0;
  let cost = 1;
  const rowsOf = (naam: string, rows: number) => () => {
    now += rows * cost;
    return insert(naam)();
  };
  const w = groupedWriter(sqlite, { budgetMs: 40, clock: () => now });
  // Nothing measured yet: a group of one. Then 1 ms a row: 10 + 20 rows fit 40 ms, the next 20 do not.
  await Promise.all([w.write(10, rowsOf("a", 10)), w.write(10, rowsOf("b", 10)), w.write(20, rowsOf("c", 20)), w.write(20, rowsOf("d", 20))]);
  expect(w.stats).toEqual({ groups: 3, calls: 4 });
  // Dearer rows (3 ms): two calls of 10 no longer fit together; a call beyond the budget still goes, alone.
  cost = 3;
  await w.write(10, rowsOf("e", 10));
  await Promise.all([w.write(10, rowsOf("f", 10)), w.write(10, rowsOf("g", 10)), w.write(100, rowsOf("h", 100))]);
  expect(w.stats).toEqual({ groups: 7, calls: 8 });
  expect(seen()).toEqual(["a", "b", "c", "d", "e", "f", "g", "h"]);
});

test("a group holds at most GROUP_MAX_ROWS rows however cheap the estimate; after TURN_BUDGET_MS of groups the rest waits for the next turn", async () => {
  const { sqlite, insert, seen } = open();
  let now = 0;
  const w = groupedWriter(sqlite, { clock: () => now });
  await w.write(1, insert("eerste"));
  // Free rows by the clock: only the cap splits 600 + 600 + 600.
  await Promise.all([w.write(600, insert("a")), w.write(600, insert("b")), w.write(600, insert("c"))]);
  expect(w.stats).toEqual({ groups: 4, calls: 4 });
  // Each group of these "takes" 60 ms: two fill the turn's 100 ms, the third comes a turn later.
  const slow = (naam: string) => () => ((now += 60), insert(naam)());
  const calls = [w.write(GROUP_MAX_ROWS, slow("d")), w.write(GROUP_MAX_ROWS, slow("e")), w.write(GROUP_MAX_ROWS, slow("f"))];
  // Queued right behind the writer's turn: it runs after that turn and before the next.
  let groupsBetweenTurns = -1;
  setImmediate(() => (groupsBetweenTurns = w.stats.groups));
  await Promise.all(calls);
  expect(groupsBetweenTurns).toBe(6);
  expect(w.stats).toEqual({ groups: 7, calls: 7 });
  expect(seen()).toEqual(["eerste", "a", "b", "c", "d", "e", "f"]);
});

test("each call waits for another connection's write lock at most the wait from its own arrival, not a wait per group before it", async () => {
  const { sqlite, other, insert, seen } = open();
  const w = groupedWriter(sqlite, { lockWaitMs: 400 });
  other.run("BEGIN IMMEDIATE");
  const start = performance.now();
  // Three groups of one (nothing measured yet): before, each got a wait of its own, one after the other.
  const settled = await Promise.all([w.write(1, insert("a")), w.write(1, insert("b")), w.write(1, insert("c"))].map((c) => c.then(() => null, (e) => ({ e, at: performance.now() - start }))));
  other.run("ROLLBACK");
  for (const r of settled) expect((r?.e as { code?: string }).code).toBe("SQLITE_BUSY");
  // Each is told how its wait went: the first waited for the lock, the others' waits ran out in the queue behind it (one try of the lock).
  expect(settled.map((r) => r?.e instanceof WriteWaitGivenUp)).toEqual([true, true, true]);
  expect(settled.map((r) => (r?.e as WriteWaitGivenUp).lockWaitMs > (r?.e as WriteWaitGivenUp).queuedMs)).toEqual([true, false, false]);
  // All three arrived together: the later ones give up with the first (their deadline has passed), not 400 ms after it.
  expect(settled[2]!.at - settled[0]!.at).toBeLessThan(200);
  expect(seen()).toEqual([]);
  expect(await w.write(1, insert("d"))).toBe("d");
});

test("a group never begins inside a transaction already open on the connection: refused, nothing written", async () => {
  const { sqlite, insert, seen } = open();
  const w = groupedWriter(sqlite);
  sqlite.run("BEGIN");
  const r = await w.write(1, insert("a")).then(
    () => "answered",
    (e) => String(e),
  );
  sqlite.run("ROLLBACK");
  expect(r).toContain("already open");
  expect(seen()).toEqual([]);
});

test("while another connection holds the write lock the group waits without blocking; a call arriving meanwhile forms the next group", async () => {
  const { sqlite, other, insert, seen } = open();
  const w = groupedWriter(sqlite);
  other.run("BEGIN IMMEDIATE");
  let settled = false;
  const a = w.write(1, insert("a")).finally(() => (settled = true));
  // After the writer's turn: the group has tried BEGIN and waits (awaited back-off); this test goes on meanwhile.
  await new Promise((r) => setImmediate(r));
  expect(settled).toBe(false);
  const b = w.write(1, insert("b"));
  other.run("COMMIT");
  expect(await Promise.all([a, b])).toEqual(["a", "b"]);
  expect(w.stats).toEqual({ groups: 2, calls: 2 });
  expect(seen()).toEqual(["a", "b"]);
});
