// The write API's writes on SQLite, one transaction per turn of the event loop: calls
// are queued, and each turn takes what fits its time budget (GROUP_BUDGET_MS, by the cost
// per row of recent groups) into one IMMEDIATE transaction, each call in its own
// SAVEPOINT, made durable by one COMMIT. Between two groups, timers and other requests
// get their turn: before, every request read in one turn wrote its transaction in that
// same turn, back to back, and the event loop stood still for all of them (200–360 ms
// under four clients' spread 500-entry batches at L, docs/performance.md round 14). Small
// calls share the COMMIT's WAL write and fsync, and the pages they touch; a call that alone
// exceeds the budget goes alone. A caller's answer comes only after its group's COMMIT:
// nothing is acknowledged before it is durable, as with one transaction per call.
//
// The calls run in the order they arrived, each seeing what the ones before it wrote,
// exactly as if each had its own transaction: a retried batch behind its first attempt
// gets that attempt's receipts, a sleutel reused with other content is refused (409).
// A call that throws a Refusal or any error of its own (not SQLite's) is rolled back to
// its savepoint (or, alone in its group, with the transaction), and only it fails; an error from SQLite itself (a full disk, an I/O
// error) may have ended the transaction, so it fails the whole group, nothing of which
// is then stored. Waiting for another process's write lock does not block the event
// loop (writeTransaction, src/db.ts).
import { Database, SQLiteError } from "bun:sqlite";
import { writeTransaction } from "../db.ts";

/**
 * How long one group's transaction may take by the estimate, ms: it runs on the event
 * loop, so /health and every other request may wait that long behind it. Two spread
 * 500-entry batches at L in one group held it 170–200 ms (one alone 110), for at most a
 * fifth more throughput (docs/performance.md, round 14).
 */
export const GROUP_BUDGET_MS = 40;
/**
 * How long one turn of the event loop writes group after group, ms, before it lets the
 * rest of the service have a turn.
 */
export const TURN_BUDGET_MS = 100;
/** How many groups' cost per row the estimate takes the largest of. */
const GROUPS_REMEMBERED = 8;

interface Call {
  rows: number;
  work: () => unknown;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

/** What a writer committed so far: transactions, and the calls they held (/metrics). */
export interface GroupStats {
  groups: number;
  calls: number;
}

export interface GroupedWriter {
  /**
   * Runs `work` (synchronous, database work only; `rows` is about how many rows it
   * writes) inside the next group's transaction; resolves with its result once that
   * transaction is committed.
   */
  write<T>(rows: number, work: () => T): Promise<T>;
  readonly stats: GroupStats;
}

/** A grouped writer on `sqlite` (see the top of this file), counting into `stats`; `clock` for the tests. */
export function groupedWriter(sqlite: Database, o: { budgetMs?: number; stats?: GroupStats; clock?: () => number } = {}): GroupedWriter {
  const budgetMs = o.budgetMs ?? GROUP_BUDGET_MS;
  const stats = o.stats ?? { groups: 0, calls: 0 };
  const clock = o.clock ?? (() => performance.now());
  const queue: Call[] = [];
  /** ms per row of the last GROUPS_REMEMBERED groups; until one is measured, a group is one call. */
  const recent: number[] = [];
  let flushing = false;

  /** The calls at the head of the queue that fit the budget by the estimate (at least one). */
  const nextGroup = (): Call[] => {
    const group: Call[] = [queue.shift()!];
    const msPerRow = recent.length > 0 ? Math.max(...recent) : Infinity;
    let rows = group[0]!.rows;
    while (queue.length > 0 && (rows + queue[0]!.rows) * msPerRow <= budgetMs) {
      rows += queue[0]!.rows;
      group.push(queue.shift()!);
    }
    return group;
  };

  /** One group's transaction; every call of it is answered (never throws). */
  const commit = async (group: Call[]) => {
    let outcomes: ({ ok: true; value: unknown } | { ok: false; error: unknown })[] = [];
    let t0 = 0;
    try {
      await writeTransaction(sqlite, () => {
        // Run again from the start when BEGIN found the lock taken (nothing was written).
        t0 = clock();
        // One call alone needs no savepoint: its error rolls the transaction back. (A
        // savepoint copies each page it changes first into a statement journal, a fifth
        // of a spread 500-entry batch's time.)
        if (group.length === 1) return void (outcomes = [{ ok: true, value: group[0]!.work() }]);
        outcomes = group.map((call) => {
          sqlite.run("SAVEPOINT ingest_call");
          try {
            const value = call.work();
            sqlite.run("RELEASE ingest_call");
            return { ok: true, value };
          } catch (error) {
            if (error instanceof SQLiteError) throw error;
            sqlite.run("ROLLBACK TO ingest_call");
            sqlite.run("RELEASE ingest_call");
            return { ok: false, error };
          }
        });
      });
    } catch (error) {
      for (const call of group) call.reject(error);
      return;
    }
    // The transaction's time, COMMIT included (the await resumes right after it).
    recent.push((clock() - t0) / Math.max(1, group.reduce((n, c) => n + c.rows, 0)));
    if (recent.length > GROUPS_REMEMBERED) recent.shift();
    stats.groups++;
    stats.calls += group.length;
    group.forEach((call, i) => {
      const o = outcomes[i]!;
      if (o.ok) call.resolve(o.value);
      else call.reject(o.error);
    });
  };

  // Groups back to back for up to TURN_BUDGET_MS of one turn of the event loop, then the
  // next turn: timers and other requests get theirs, and what was read meanwhile joins.
  const flush = async () => {
    const t0 = clock();
    try {
      do await commit(nextGroup());
      while (queue.length > 0 && clock() - t0 < TURN_BUDGET_MS);
    } finally {
      // The look at the queue and the decision in one synchronous step: no call is left behind.
      if (queue.length > 0) setImmediate(() => void flush());
      else flushing = false;
    }
  };

  return {
    stats,
    write<T>(rows: number, work: () => T): Promise<T> {
      return new Promise<T>((resolve, reject) => {
        queue.push({ rows, work, resolve: resolve as (v: unknown) => void, reject });
        if (flushing) return;
        flushing = true;
        // After this turn of the event loop: the other requests read in it join the group.
        setImmediate(() => void flush());
      });
    },
  };
}
