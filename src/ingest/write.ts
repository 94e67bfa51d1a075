// How the write API (and the retention batches) write: one IMMEDIATE transaction per
// request, all or nothing, and never a synchronous wait for the write lock. bun:sqlite is synchronous, so SQLite's
// busy handler (busy_timeout) would sleep on the event loop while another process (the
// host application, `nachtwacht backup`) holds the lock: every request, /health
// included, would stall with it. Here the lock is tried without waiting and, when it is
// taken, tried again after an awaited pause, until a deadline; then the caller gets 503
// with Retry-After, and nothing of the batch is stored.
import type { Database } from "bun:sqlite";
import { BUSY_TIMEOUT_MS } from "../db.ts";

/** A batch refused as a whole: the status and the Dutch message the client gets. */
export class Refusal extends Error {
  constructor(
    readonly status: 400 | 404 | 409 | 422,
    message: string,
  ) {
    super(message);
    this.name = "Refusal";
  }
}

export function isBusy(e: unknown): boolean {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === "string" && code.startsWith("SQLITE_BUSY");
}

/**
 * Runs `write` (synchronous; it opens and ends its own transaction) with SQLite's busy
 * wait switched off, so a taken write lock fails at once with SQLITE_BUSY instead of
 * sleeping on the event loop; then tries again after an awaited pause of 1, 2, 4 … 32 ms
 * (with jitter), for at most `deadlineMs`. `write` must only touch the database and
 * leave it unchanged when it throws (a transaction that rolls back): it may run again.
 * Any other error is passed on; after the deadline, the last SQLITE_BUSY.
 */
export async function retryWhenBusy<T>(sqlite: Database, write: () => T, deadlineMs = BUSY_TIMEOUT_MS): Promise<T> {
  const deadline = performance.now() + deadlineMs;
  for (let attempt = 0; ; attempt++) {
    // Synchronous from here to the restore: nothing else on this connection runs in between.
    sqlite.run("PRAGMA busy_timeout = 0");
    try {
      return write();
    } catch (e) {
      if (!isBusy(e) || performance.now() >= deadline) throw e;
    } finally {
      sqlite.run(`PRAGMA busy_timeout = ${BUSY_TIMEOUT_MS}`);
    }
    const pause = Math.min(32, 2 ** attempt);
    await Bun.sleep(pause / 2 + Math.random() * (pause / 2));
  }
}

/**
 * Runs `work` in one IMMEDIATE transaction, waiting for the write lock without blocking
 * the event loop (retryWhenBusy). A Refusal or any other error thrown by `work` rolls the
 * whole transaction back and is passed on.
 */
export function writeTransaction<T>(sqlite: Database, work: () => T, deadlineMs = BUSY_TIMEOUT_MS): Promise<T> {
  return retryWhenBusy(sqlite, () => sqlite.transaction(work).immediate(), deadlineMs);
}
