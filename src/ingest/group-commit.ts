// The write API's calls on SQLite that arrive together are written in one transaction,
// each in a savepoint of its own: a call that fails (a Refusal, or any other error) rolls
// back only itself and gets its own answer, and one COMMIT — one WAL write and one fsync
// — carries the others. A batch spread over many tenants dirties a page per tenant in
// each of audit_entries' tenant-ordered B-trees; batches that share a transaction share
// those pages, and the fsync (docs/performance.md, round 12). Every caller is answered
// only after the COMMIT (or its failure): nothing is acknowledged that is not on disk, and
// a crash before the COMMIT leaves every call of the group unstored, as its client's retry
// expects. PostgreSQL groups commits itself; src/pg/ingest.ts writes each call alone.
import type { Database } from "bun:sqlite";
import { writeTransaction } from "../db.ts";

/** How long queued calls wait at most for announced calls whose bodies are still being read. */
export const GROUP_WAIT_MS = 5;
/**
 * A transaction takes queued calls, in order, while their weights (a batch's entries)
 * add up to at most this (always at least one call): the write lock and the event loop
 * are held for one transaction at a time, and it stays about as long as four batches.
 */
export const GROUP_MAX_WEIGHT = 2000;

/** A call that will write (announced before its body is read). */
export interface Ticket {
  /** Queues `work` for the next transaction; settles once that transaction committed (its value) or failed (its error, or `work`'s own). */
  write<T>(work: () => T, weight?: number): Promise<T>;
  /** The call ends without writing (its body refused, say): no transaction waits for it any more. Harmless after write. */
  close(): void;
}

export interface GroupWriter {
  /** A call that is about to write: queued calls wait up to GROUP_WAIT_MS for it, to share its transaction. */
  announce(): Ticket;
}

interface Queued {
  work: () => unknown;
  weight: number;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

type Outcome = { ok: true; value: unknown } | { ok: false; error: unknown };

/** `counted.sqliteTransactions` grows by one per transaction begun (the write API's counters, read by /metrics). */
export function groupWriter(
  sqlite: Database,
  counted: { sqliteTransactions: number },
  waitMs = GROUP_WAIT_MS,
  maxWeight = GROUP_MAX_WEIGHT,
): GroupWriter {
  const queue: Queued[] = [];
  /** Tickets neither written nor closed. */
  let announced = 0;
  let writing = false;
  let immediate = false;
  let timer: ReturnType<typeof setTimeout> | null = null;

  /** Starts the next transaction when nothing announced is outstanding (or the queue is full); else waits at most waitMs. */
  function schedule(): void {
    if (writing || queue.length === 0) return;
    const full = queue.reduce((w, q) => w + q.weight, 0) >= maxWeight;
    if (announced > 0 && !full) {
      timer ??= setTimeout(() => void flush(), waitMs);
      return;
    }
    if (immediate) return;
    immediate = true;
    // After this turn's other callbacks, so calls queued in the same turn share the transaction.
    setImmediate(() => {
      immediate = false;
      void flush();
    });
  }

  async function flush(): Promise<void> {
    if (timer !== null) clearTimeout(timer);
    timer = null;
    if (writing || queue.length === 0) return;
    let weight = 0;
    let n = 0;
    while (n < queue.length && (n === 0 || weight + queue[n]!.weight <= maxWeight)) weight += queue[n++]!.weight;
    const group = queue.splice(0, n);
    writing = true;
    counted.sqliteTransactions++;
    let outcomes: Outcome[] = [];
    try {
      // Run again in whole when the write lock was taken (retryWhenBusy): outcomes anew.
      await writeTransaction(sqlite, () => {
        outcomes = group.map((call) => {
          sqlite.run("SAVEPOINT nachtwacht_call");
          try {
            const value = call.work();
            sqlite.run("RELEASE nachtwacht_call");
            return { ok: true, value };
          } catch (error) {
            // SQLite ended the whole transaction (an I/O error, a full disk): nothing of
            // the group is kept, and no later call may run outside it; all get this error.
            if (!sqlite.inTransaction) throw error;
            sqlite.run("ROLLBACK TO nachtwacht_call");
            sqlite.run("RELEASE nachtwacht_call");
            return { ok: false, error };
          }
        });
      });
      for (const [i, call] of group.entries()) {
        const o = outcomes[i]!;
        if (o.ok) call.resolve(o.value);
        else call.reject(o.error);
      }
    } catch (error) {
      // BEGIN (the write lock stayed taken), a call that ended the transaction, or the
      // COMMIT failed: every call gets that error, which says what the client may assume
      // (an I/O error at COMMIT leaves the outcome open: ingest-routes.ts storedNothing).
      for (const call of group) call.reject(error);
    } finally {
      writing = false;
      schedule();
    }
  }

  return {
    announce(): Ticket {
      announced++;
      let open = true;
      const close = () => {
        if (!open) return;
        open = false;
        announced--;
        schedule();
      };
      return {
        write<T>(work: () => T, weight = 1): Promise<T> {
          if (!open) return Promise.reject(new Error("a ticket writes once"));
          const written = new Promise<T>((resolve, reject) => queue.push({ work, weight, resolve: resolve as (v: unknown) => void, reject }));
          close();
          return written;
        },
        close,
      };
    },
  };
}
