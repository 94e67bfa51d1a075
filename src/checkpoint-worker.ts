// The WAL checkpointer's thread (src/checkpointer.ts): its own connection to the
// database, a PASSIVE checkpoint every few milliseconds. PASSIVE copies what it can
// and never waits for readers or writers, so it holds up nobody, and the fsync it does
// happens here instead of inside some request's COMMIT on the event loop.
// Built into the binary as an entry point of its own (see package.json "build").
import { Database } from "bun:sqlite";

declare var self: Worker;

/** WAL pages (4 KiB) from which a fully copied, quiet WAL is rewound: 16 MB. */
const REWIND_PAGES = 4096;


let db: Database | null = null;
let timer: ReturnType<typeof setInterval> | null = null;

let tick: (() => void) | null = null;

self.onmessage = (e: MessageEvent<{ dbPath: string; intervalMs: number } | "stop" | "now">) => {
  if (e.data === "now") {
    // A large commit just happened (a retention batch): copy it back before the next
    // writer's COMMIT would, inside that writer's own transaction, with its fsync.
    tick?.();
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
  let seen = -1;
  let complete = true;
  tick = () => {
    try {
      const version = (dataVersion.get() as { data_version: number }).data_version;
      if (version === seen && complete) return;
      seen = version;
      let r = checkpoint.get() as { busy: number; log: number; checkpointed: number };
      // A large WAL that is copied back entirely and that nobody wrote to since: RESTART
      // makes the next writer begin at its start again (a small, hot WAL; without it
      // beveiligingslog-retentie at L took 1.5–1.7× one DELETE instead of 0.8×). Only then:
      // with frames left to copy, RESTART would hold the write lock while it copies and
      // fsyncs (writers in other processes waited up to 530 ms). busy_timeout 0: it
      // never waits for anyone.
      if (r.log > REWIND_PAGES && r.checkpointed === r.log && (dataVersion.get() as { data_version: number }).data_version === version) {
        r = restart.get() as typeof r;
      }
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
