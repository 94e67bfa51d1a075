// The WAL checkpointer's thread (src/checkpointer.ts): its own connection to the
// database, a PASSIVE checkpoint every few milliseconds. PASSIVE copies what it can
// and never waits for readers or writers, so it holds up nobody, and the fsync it does
// happens here instead of inside some request's COMMIT on the event loop.
// Built into the binary as an entry point of its own (see package.json "build").
import { Database } from "bun:sqlite";
import { closeSync, openSync, readSync, statSync } from "node:fs";
import { checkpointDue, walProbe, walStep, type WalLimits } from "./checkpointer.ts";

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
  // walProbe on the -wal file, through one descriptor of its own. SQLite holds no lock on
  // this file (only on the database and -shm files), so closing it drops none. Null when
  // there is no -wal file (a WAL that cannot be read counts as much pending).
  const probeWal = (last: { salts: string; frame: number }, pages: number) => {
    let fd: number;
    try {
      fd = openSync(`${dbPath}-wal`, "r");
    } catch {
      return null;
    }
    try {
      return walProbe(
        (offset, length) => {
          const buf = Buffer.alloc(length);
          return buf.subarray(0, readSync(fd, buf, 0, length, offset));
        },
        last,
        pages,
      );
    } finally {
      closeSync(fd);
    }
  };
  let seen = -1;
  let complete = true;
  let changedAt = performance.now();
  let shrunk = false;
  // The WAL as the last checkpoint found it: its salts (walProbe) and its frames, and when.
  let lastSalts = "";
  let lastFrame = 0;
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
      // A trickle waits (checkpointDue); `seen` stays, so a later tick takes it. A WAL
      // that cannot be read counts as much pending: checkpointed as before.
      const probe = probeWal({ salts: lastSalts, frame: lastFrame }, limits.tricklePages);
      if (!forced && !checkpointDue({ manyPending: probe?.manyPending ?? true, agoMs: performance.now() - lastAt }, limits)) return;
      if (version !== seen) {
        changedAt = performance.now();
        shrunk = false;
      }
      seen = version;
      let r = checkpoint.get() as { busy: number; log: number; checkpointed: number };
      // The frames this checkpoint found, of the WAL probed before it (rewound in between:
      // other salts at the next probe, all pending). Not when it was busy (below): it copied nothing.
      if (r.log >= 0) {
        lastSalts = probe?.salts ?? "";
        lastFrame = r.log;
        lastAt = performance.now();
      }
      // Rewound when walStep says so; busy_timeout 0: never waiting for anyone.
      if (walStep(r, () => (dataVersion.get() as { data_version: number }).data_version === version, limits) === "restart") r = restart.get() as typeof r;
      // Another connection's checkpoint running: SQLite answers busy with -1 for both, and
      // this one copied nothing; the next tick tries again.
      complete = r.log >= 0 && r.checkpointed === r.log;
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
