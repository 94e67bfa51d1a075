// The WAL checkpointer's thread (src/checkpointer.ts): its own connection to the
// database, a PASSIVE checkpoint every few milliseconds. PASSIVE copies what it can
// and never waits for readers or writers, so it holds up nobody, and the fsync it does
// happens here instead of inside some request's COMMIT on the event loop.
// Built into the binary as an entry point of its own (see package.json "build").
import { Database } from "bun:sqlite";
import { closeSync, openSync, readSync, statSync } from "node:fs";
import { checkpointDue, walStep, type WalLimits } from "./checkpointer.ts";

declare var self: Worker;

let db: Database | null = null;
let timer: ReturnType<typeof setInterval> | null = null;

let tick: ((forced?: boolean) => void) | null = null;

self.onmessage = (e: MessageEvent<{ dbPath: string; intervalMs: number; limits: WalLimits } | "stop" | "now">) => {
  if (e.data === "now") {
    // A large commit just happened (a retention batch): copy it back before the next
    // writer's COMMIT would, inside that writer's own transaction, with its fsync.
    tick?.(true);
    return;
  }
  if (e.data === "stop") {
    if (timer) clearInterval(timer);
    tick = null;
    db?.close();
    self.postMessage({ stopped: true });
    return;
  }
  db = new Database(e.data.dbPath);
  db.run("PRAGMA busy_timeout = 0");
  const checkpoint = db.query("PRAGMA wal_checkpoint(PASSIVE)");
  // data_version changes when another connection commits: a checkpoint only then (or
  // while the last one was incomplete). An idle checkpoint would still take the WAL's
  // locks, and a writer starting at that moment cannot rewind the WAL to its start.
  const dataVersion = db.query("PRAGMA data_version");
  const restart = db.query("PRAGMA wal_checkpoint(RESTART)");
  const truncate = db.query("PRAGMA wal_checkpoint(TRUNCATE)");
  const { dbPath, limits } = e.data;
  const walBytes = () => {
    try {
      return statSync(`${dbPath}-wal`).size;
    } catch {
      return 0;
    }
  };
  // Which WAL this is: its header's checkpoint sequence and first salt (bytes 12–19, SQLite's
  // file format), new each time a writer rewinds it. A WAL written again from its start to
  // the same length as before is new pages, not none.
  const header = Buffer.alloc(8);
  const walGeneration = () => {
    try {
      const fd = openSync(`${dbPath}-wal`, "r");
      try {
        return readSync(fd, header, 0, 8, 12) === 8 ? header.toString("hex") : "";
      } finally {
        closeSync(fd);
      }
    } catch {
      return "";
    }
  };
  let seen = -1;
  let complete = true;
  let changedAt = performance.now();
  let shrunk = false;
  // What the last checkpoint found: which WAL, its length then, how much it had grown, when.
  let lastGeneration = "";
  let lastLog = 0;
  let grownPages = Number.POSITIVE_INFINITY;
  let lastAt = Number.NEGATIVE_INFINITY;
  tick = (forced = false) => {
    try {
      const version = (dataVersion.get() as { data_version: number }).data_version;
      if (version === seen && complete) {
        // Quiet: once per quiet spell, a WAL file a burst left large is truncated (see walStep).
        if (!shrunk && performance.now() - changedAt >= limits.shrinkAfterMs) {
          shrunk = true;
          if (walBytes() > limits.shrinkBytes) truncate.get();
        }
        return;
      }
      // A trickle waits (checkpointDue); `seen` stays, so a later tick takes it.
      if (!forced && !checkpointDue({ grownPages, agoMs: performance.now() - lastAt }, limits)) return;
      if (version !== seen) {
        changedAt = performance.now();
        shrunk = false;
      }
      seen = version;
      let r = checkpoint.get() as { busy: number; log: number; checkpointed: number };
      // A rewound WAL (another generation, or shorter) has grown from its start. Read after
      // the checkpoint: a rewind in between counts the whole WAL, a checkpoint too many.
      // One that found nothing new (a writer just rewound the WAL: its header changed, not
      // yet its pages) leaves the last finding in force.
      const generation = walGeneration();
      const grown = generation === lastGeneration && r.log >= lastLog ? r.log - lastLog : r.log;
      lastGeneration = generation;
      if (grown > 0) {
        grownPages = grown;
        lastAt = performance.now();
      }
      // Rewound when walStep says so; busy_timeout 0: never waiting for anyone.
      if (walStep(r, () => (dataVersion.get() as { data_version: number }).data_version === version, limits) === "restart") r = restart.get() as typeof r;
      lastLog = r.log;
      complete = r.checkpointed === r.log;
      if (r.log > 0) self.postMessage({ log: r.log, checkpointed: r.checkpointed });
    } catch (err) {
      complete = false;
      // SQLITE_BUSY: another checkpoint runs (the host application's, say); next tick.
      const code = (err as { code?: string }).code ?? "";
      if (!code.startsWith("SQLITE_BUSY")) self.postMessage({ error: err instanceof Error ? err.message : String(err) });
    }
  };
  timer = setInterval(tick, e.data.intervalMs);
};
