// The write API's writes on SQLite, grouped: what arrives while the event loop is busy
// (the clients' batches are read and checked in the same turn) is written in one IMMEDIATE
// transaction, each call in its own SAVEPOINT, and made durable by one COMMIT. Spread
// batches from several clients then share the pages they touch (each tenant's newest
// leaves) and the COMMIT's WAL write and fsync, instead of each writing them again.
// A caller's answer comes only after that COMMIT: nothing is acknowledged before it is
// durable, as with one transaction per call.
//
// The calls run in the order they arrived, each seeing what the ones before it wrote,
// exactly as if each had its own transaction: a retried batch behind its first attempt
// gets that attempt's receipts, a sleutel reused with other content is refused (409).
// A call that throws a Refusal or any error of its own (not SQLite's) is rolled back to
// its savepoint, and only it fails; an error from SQLite itself (a full disk, an I/O
// error) may have ended the transaction, so it fails the whole group, nothing of which
// is then stored. Waiting for another process's write lock does not block the event
// loop (writeTransaction, src/db.ts).
import { Database, SQLiteError } from "bun:sqlite";
import { writeTransaction } from "../db.ts";

/**
 * How many rows one group holds at the most: the group's transaction runs on the event
 * loop, so it bounds how long /health and every other request can wait behind it
 * (about 45 ms for two spread 500-entry batches at L; docs/performance.md, round 14).
 */
export const GROUP_MAX_ROWS = 1000;

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

/** A grouped writer on `sqlite` (see the top of this file), counting into `stats`. */
export function groupedWriter(sqlite: Database, o: { maxRows?: number; stats?: GroupStats } = {}): GroupedWriter {
  const maxRows = o.maxRows ?? GROUP_MAX_ROWS;
  const stats = o.stats ?? { groups: 0, calls: 0 };
  const queue: Call[] = [];
  let flushing = false;

  /** The calls at the head of the queue that fit one group (at least one). */
  const nextGroup = (): Call[] => {
    const group: Call[] = [queue.shift()!];
    let rows = group[0]!.rows;
    while (queue.length > 0 && rows + queue[0]!.rows <= maxRows) {
      rows += queue[0]!.rows;
      group.push(queue.shift()!);
    }
    return group;
  };

  /** One group's transaction; every call of it is answered (never throws). */
  const commit = async (group: Call[]) => {
    let outcomes: ({ ok: true; value: unknown } | { ok: false; error: unknown })[] = [];
    try {
      await writeTransaction(sqlite, () => {
        // Run again from the start when BEGIN found the lock taken (nothing was written).
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
    stats.groups++;
    stats.calls += group.length;
    group.forEach((call, i) => {
      const o = outcomes[i]!;
      if (o.ok) call.resolve(o.value);
      else call.reject(o.error);
    });
  };

  // One group per turn of the event loop: between two, timers and other requests get
  // theirs, and what was read meanwhile joins the next group.
  const flush = async () => {
    try {
      await commit(nextGroup());
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
