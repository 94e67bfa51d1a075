// The write API's writes on SQLite, grouped: calls are queued, and after the turn of the
// event loop that read them, the queue is written group after group, each group one
// IMMEDIATE transaction made durable by one COMMIT, each call in it in its own SAVEPOINT.
// A group takes the calls that fit GROUP_BUDGET_MS by the cost per row of recent groups,
// so many small requests share a COMMIT's WAL write and fsync (32 clients sending single
// entries: about three times as many a second as with a transaction each), while a
// large batch goes alone, as before. After TURN_BUDGET_MS of groups the rest waits for
// the next turn, so timers and other requests get theirs. A caller's answer comes only
// after its group's COMMIT: nothing is acknowledged before it is durable.
//
// The calls run in the order they arrived, each seeing what the ones before it wrote,
// exactly as if each had its own transaction: a retried batch behind its first attempt
// gets that attempt's receipts, a sleutel reused with other content is refused (409).
// A call that throws a Refusal, any error of its own or a constraint violation is rolled
// back to its savepoint (alone in its group: with the transaction), and only it fails;
// any other error from SQLite (a full disk, an I/O error) may have ended the transaction,
// so it fails the whole group, nothing of which is then stored. Waiting for another
// process's write lock does not block the event loop (writeTransaction, src/db.ts), and
// each call waits at most BUSY_TIMEOUT_MS from its arrival: the groups behind one that
// waited get no new wait of their own. Part of that wait may be spent in this queue,
// behind other calls: a call given up on is told how the wait went (WriteWaitGivenUp).
import { Database, SQLiteError } from "bun:sqlite";
import { BUSY_TIMEOUT_MS, isBusy, writeTransaction } from "../db.ts";

/**
 * How long one group's transaction may take by the estimate, ms: it runs on the event
 * loop, so /health and every other request wait behind it. Two spread 500-entry batches
 * at L in one group held it 170–200 ms and wrote no faster than one transaction each
 * (docs/performance.md, round 14).
 */
export const GROUP_BUDGET_MS = 40;
/**
 * How long one turn of the event loop writes group after group, ms, before it lets the
 * rest of the service have a turn.
 */
export const TURN_BUDGET_MS = 100;
/**
 * The most rows one group takes, whatever the estimate: refused or repeated batches cost
 * little per row, and after a few of them the estimate would let thousands of fresh rows in.
 */
export const GROUP_MAX_ROWS = 1000;
/** How many groups' cost per row the estimate takes the largest of. */
const GROUPS_REMEMBERED = 8;

/**
 * A call's wait given up: another connection held the write lock (SQLITE_BUSY, which is
 * its `code` and `cause`, so it is read as that error everywhere) when the wait from the
 * call's arrival ran out. How the wait went: `queuedMs` in this writer's own queue,
 * behind other calls, then `lockWaitMs` for the lock (0: the deadline passed in the
 * queue, and the lock was tried once).
 */
export class WriteWaitGivenUp extends Error {
  override readonly name = "WriteWaitGivenUp";
  readonly code: string;
  constructor(
    busy: SQLiteError,
    readonly queuedMs: number,
    readonly lockWaitMs: number,
  ) {
    super(busy.message, { cause: busy });
    this.code = busy.code ?? "SQLITE_BUSY";
  }
}

interface Call {
  rows: number;
  /** performance.now() at its arrival. */
  arrived: number;
  /** performance.now() past which it no longer waits for the write lock. */
  deadline: number;
  work: () => unknown;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

/** What a writer committed so far: transactions, and the calls they stored (/metrics; a refused call counts in neither). */
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
export function groupedWriter(sqlite: Database, o: { budgetMs?: number; stats?: GroupStats; clock?: () => number; lockWaitMs?: number } = {}): GroupedWriter {
  const budgetMs = o.budgetMs ?? GROUP_BUDGET_MS;
  const lockWaitMs = o.lockWaitMs ?? BUSY_TIMEOUT_MS;
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
    while (queue.length > 0 && rows + queue[0]!.rows <= GROUP_MAX_ROWS && (rows + queue[0]!.rows) * msPerRow <= budgetMs) {
      rows += queue[0]!.rows;
      group.push(queue.shift()!);
    }
    return group;
  };

  /** One group's transaction; every call of it is answered (never throws). */
  const commit = async (group: Call[]) => {
    let outcomes: ({ ok: true; value: unknown } | { ok: false; error: unknown })[] = [];
    let t0 = 0;
    const begun = performance.now();
    const deadline = Math.min(...group.map((c) => c.deadline));
    try {
      // Nothing may be open on this connection: BEGIN would become a savepoint of that
      // transaction, and the answers would go out before anything is committed.
      if (sqlite.inTransaction) throw new Error("group-commit: a transaction is already open on the service's connection; nothing of this group was written");
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
            // SQLite's other errors may have ended the transaction (its savepoints with it).
            if (error instanceof SQLiteError && !(error.code ?? "").startsWith("SQLITE_CONSTRAINT")) throw error;
            sqlite.run("ROLLBACK TO ingest_call");
            sqlite.run("RELEASE ingest_call");
            return { ok: false, error };
          }
        });
      }, Math.max(0, deadline - begun));
    } catch (error) {
      const lockWaited = Math.round(Math.max(0, deadline - begun));
      for (const call of group) {
        const queuedMs = Math.round(begun - call.arrived);
        call.reject(error instanceof SQLiteError && isBusy(error) ? new WriteWaitGivenUp(error, queuedMs, lockWaited) : error);
      }
      return;
    }
    // The transaction's time, COMMIT included (the await resumes right after it).
    recent.push((clock() - t0) / Math.max(1, group.reduce((n, c) => n + c.rows, 0)));
    if (recent.length > GROUPS_REMEMBERED) recent.shift();
    stats.groups++;
    stats.calls += outcomes.filter((o) => o.ok).length;
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
        const arrived = performance.now();
        queue.push({ rows, arrived, deadline: arrived + lockWaitMs, work, resolve: resolve as (v: unknown) => void, reject });
        if (flushing) return;
        flushing = true;
        // After this turn of the event loop: the other requests read in it join the group.
        setImmediate(() => void flush());
      });
    },
  };
}
