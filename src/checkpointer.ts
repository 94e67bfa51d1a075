// Moves SQLite's WAL checkpoint off the event loop. By default the connection that
// commits past 1,000 WAL pages copies them back into the database file and fsyncs it,
// inside that COMMIT: an append of 500 entries then took 31–40 ms instead of 4, and the
// single-entry p99 was 10 ms (bench/ingest.ts, docs/performance.md). The service's
// connection therefore does no automatic checkpoints, and a worker thread with its own
// connection runs a PASSIVE checkpoint every 50 ms (every 500 ms while only a trickle is
// written: checkpointDue). Should the worker fail, the
// connection's automatic checkpoints are switched back on: the WAL never grows unbounded.
// A failed checkpoint (a full disk: the database file cannot grow) does not end the
// thread: it tries again each tick, and its first success moves the checkpoints off the
// commit path again. Only a thread that died (an uncaught error) is given up for good.
import type { Database } from "bun:sqlite";
import { log } from "./logger.ts";
import { startWorker } from "./workers.ts";

/** SQLite's default wal_autocheckpoint (pages), restored when the worker fails. */
const DEFAULT_AUTOCHECKPOINT = 1000;

/** When the worker rewinds or truncates the WAL (walStep, and its idle shrink); tests pass smaller ones. */
export interface WalLimits {
  /** WAL pages (4 KiB) from which a copied, quiet WAL is rewound: 16 MB. */
  rewindPages: number;
  /** WAL pages past which it is rewound while writers keep committing: 64 MB. */
  growLimitPages: number;
  /** A WAL file larger than this, after shrinkAfterMs without a commit, is truncated: 64 MB. */
  shrinkBytes: number;
  shrinkAfterMs: number;
  /**
   * Past growLimitPages, the most frames the PASSIVE may have left for a RESTART to be
   * tried: 16 MB. More are left when a reader's snapshot holds them in the WAL (a
   * backup, a verification), and then a RESTART cannot rewind it but would take the write
   * lock every tick.
   */
  restartLagPages: number;
  /**
   * Fewer WAL pages than this written since the last checkpoint (4 MB) are a trickle; see
   * checkpointDue. At 256 (1 MB) the benchmark's idle appends (some 1,600 pages a second)
   * were checkpointed every 160 ms, and their p99 was 2.95–4.53 ms against 2.44–2.90.
   */
  tricklePages: number;
  /** A trickle is copied back this long after the last checkpoint: 500 ms. */
  trickleWaitMs: number;
}

export const WAL_LIMITS: WalLimits = { rewindPages: 4096, growLimitPages: 16384, shrinkBytes: 64 * 1024 * 1024, shrinkAfterMs: 1000, restartLagPages: 4096, tricklePages: 1024, trickleWaitMs: 500 };

/**
 * Whether the worker's tick checkpoints now: `manyPending` when at least tricklePages were
 * written to the WAL since the last checkpoint (walProbe), which was `agoMs` ago. Each
 * checkpoint ends with an fsync of the database file, and a COMMIT's own fsync of the WAL
 * waits behind it on the disk: at one every 50 ms, single-entry appends (a few pages
 * each) had a p99 of 2.7–3.8 ms against 1.9–2.3 ms at one every 500 ms, in four runs each
 * (docs/performance.md, round 22). So a trickle is copied back once trickleWaitMs have
 * passed; more at the next tick, as before, and Checkpointer.now() never waits.
 */
export function checkpointDue(since: { manyPending: boolean; agoMs: number }, limits: WalLimits = WAL_LIMITS): boolean {
  return since.manyPending || since.agoMs >= limits.trickleWaitMs;
}

/**
 * Whether `pages` frames or more were written to the WAL since frame `last.frame` of the
 * WAL whose salts were `last.salts` (since its start, when it has other salts now: it was
 * rewound), read from the -wal file alone (https://www.sqlite.org/fileformat2.html, "WAL
 * file format"): its 32-byte header (magic, the page size at 8, the salts at 16–23) and the
 * 24-byte header of the frame `pages` further on, which carries the salts of the WAL it was
 * written into; frames are written in order, so one there means all before it. `read`
 * gives the bytes at an offset, fewer at the file's end. Null when the file has no WAL
 * header. Not the -shm file's wal-index, although it says the length at once: SQLite
 * holds its locks there, and closing any descriptor of a file drops every POSIX lock the
 * process holds on it — the service connection's read and write locks with it (the first
 * version of this did, and other processes' writes then corrupted the database).
 */
export function walProbe(read: (offset: number, length: number) => Uint8Array, last: { salts: string; frame: number }, pages: number): { salts: string; manyPending: boolean } | null {
  const header = read(0, 32);
  if (header.length < 32) return null;
  const view = new DataView(header.buffer, header.byteOffset, 32);
  const magic = view.getUint32(0);
  if (magic !== 0x377f0682 && magic !== 0x377f0683) return null;
  const pageSize = view.getUint32(8) === 1 ? 65536 : view.getUint32(8);
  const salts = Buffer.from(header.subarray(16, 24)).toString("hex");
  const from = salts === last.salts ? last.frame : 0;
  const frame = read(32 + (from + pages - 1) * (pageSize + 24), 24);
  return { salts, manyPending: frame.length === 24 && Buffer.from(frame.subarray(8, 16)).toString("hex") === salts };
}

/**
 * Whether the worker rewinds the WAL (RESTART) after its PASSIVE checkpoint (`r`):
 * - copied back entirely and nobody wrote since (`quiet`, asked only then): when it holds
 *   more than rewindPages, so the next writer begins at its start again (a small, hot
 *   WAL; without it beveiligingslog-retentie at L took 1.5–1.7× one DELETE instead of 0.8×).
 * - past growLimitPages, also while writers write. Writers that commit back to back (the
 *   write API under load) are never quiet, and SQLite rewinds only a WAL copied entirely
 *   when a write begins: it grew by 200–250 MB a second, to 2.4 GB in 10 s, and every
 *   read searched it (docs/performance.md, round 9). RESTART takes the write lock if it
 *   is free at that moment (busy_timeout 0: else it stays the PASSIVE, and the next tick
 *   tries again; waiting 30 ms for it held other processes' writers up to 330–430 ms
 *   during audit retention, against 55–105 ms), copies the frames the PASSIVE left (a
 *   batch or two; not tried when more than restartLagPages are left: a reader holds
 *   them) and fsyncs, and the next writer starts at the beginning.
 *   Writers wait meanwhile: the service's without blocking (retryWhenBusy), others by
 *   their busy timeout. Not sooner: with frames left, RESTART holds the write lock while
 *   it copies and fsyncs (writers in other processes waited up to 530 ms during retention).
 * A rewound WAL file keeps its size, to be written over; the worker truncates one larger
 * than shrinkBytes once it has been quiet for shrinkAfterMs (not at every rewind: growing
 * the file again under load cost a fifth of the write API's throughput).
 */
export function walStep(r: { log: number; checkpointed: number }, quiet: () => boolean, limits: WalLimits = WAL_LIMITS): "none" | "restart" {
  if (r.log > limits.growLimitPages) return r.log - r.checkpointed <= limits.restartLagPages ? "restart" : "none";
  return r.log > limits.rewindPages && r.checkpointed === r.log && quiet() ? "restart" : "none";
}

export interface CheckpointResult {
  log: number;
  checkpointed: number;
}

export interface Checkpointer {
  /** A checkpoint now, in the thread (after a large commit), besides the periodic ones. */
  now(): void;
  /** Whether the thread failed and the service's connection checkpoints inside its commits (`nachtwacht_wal_checkpointer_fallback`). */
  fallenBack(): boolean;
  stop(): Promise<void>;
}

export function startCheckpointer(sqlite: Database, dbPath: string, options: { intervalMs?: number; limits?: WalLimits; onCheckpoint?: (r: CheckpointResult) => void } = {}): Checkpointer {
  const worker = startWorker("checkpoint-worker");
  let failed = false;
  const fallBack = (why: string) => {
    if (failed) return;
    failed = true;
    sqlite.run(`PRAGMA wal_autocheckpoint = ${DEFAULT_AUTOCHECKPOINT}`);
    log("error", "the WAL checkpointer thread failed; automatic checkpoints are back on the service's connection", { error: why });
  };
  // The thread itself died: nothing will checkpoint there again, the fallback stays.
  let dead = false;
  let stopped: (() => void) | null = null;
  worker.onmessage = (e: MessageEvent<CheckpointResult | { error: string } | { stopped: true }>) => {
    const m = e.data;
    if ("stopped" in m) stopped?.();
    else if ("error" in m) fallBack(m.error);
    else {
      // The thread checkpoints again (space freed, the I/O fault gone): a single full disk
      // left the checkpoints on the commit path until the next restart.
      if (failed && !dead) {
        failed = false;
        sqlite.run("PRAGMA wal_autocheckpoint = 0");
        log("info", "the WAL checkpointer thread checkpoints again; automatic checkpoints are off the service's connection again");
      }
      options.onCheckpoint?.(m);
    }
  };
  worker.onerror = (e) => {
    dead = true;
    fallBack(e.message);
  };
  sqlite.run("PRAGMA wal_autocheckpoint = 0");
  worker.postMessage({ dbPath, intervalMs: options.intervalMs ?? 50, limits: options.limits ?? WAL_LIMITS });
  return {
    now: () => {
      if (!failed) worker.postMessage("now");
    },
    fallenBack: () => failed,
    async stop() {
      const done = new Promise<void>((r) => (stopped = r));
      worker.postMessage("stop");
      await Promise.race([done, Bun.sleep(1000)]);
      worker.terminate();
      sqlite.run(`PRAGMA wal_autocheckpoint = ${DEFAULT_AUTOCHECKPOINT}`);
    },
  };
}
