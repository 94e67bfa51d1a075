// The WAL checkpointer's thread (src/checkpointer.ts): its own connection to the
// database, a PASSIVE checkpoint every few milliseconds. PASSIVE copies what it can
// and never waits for readers or writers, so it holds up nobody, and the fsync it does
// happens here instead of inside some request's COMMIT on the event loop.
// Built into the binary as an entry point of its own (see package.json "build").
import { Database } from "bun:sqlite";

declare var self: Worker;

/** WAL pages (4 KiB) past which a fully copied WAL is rewound with RESTART: 40 MB. */
const MAX_WAL_PAGES = 10_000;

let db: Database | null = null;
let timer: ReturnType<typeof setInterval> | null = null;

self.onmessage = (e: MessageEvent<{ dbPath: string; intervalMs: number } | "stop">) => {
  if (e.data === "stop") {
    if (timer) clearInterval(timer);
    db?.close();
    self.postMessage({ stopped: true });
    return;
  }
  db = new Database(e.data.dbPath);
  db.run("PRAGMA busy_timeout = 0");
  const checkpoint = db.query("PRAGMA wal_checkpoint(PASSIVE)");
  const restart = db.query("PRAGMA wal_checkpoint(RESTART)");
  // data_version changes when another connection commits: a checkpoint only then (or
  // while the last one was incomplete). An idle checkpoint would still take the WAL's
  // locks, and a writer starting at that moment cannot rewind the WAL to its start.
  const dataVersion = db.query("PRAGMA data_version");
  let seen = -1;
  let complete = true;
  timer = setInterval(() => {
    try {
      const version = (dataVersion.get() as { data_version: number }).data_version;
      if (version === seen && complete) return;
      seen = version;
      let r = checkpoint.get() as { busy: number; log: number; checkpointed: number };
      // A WAL that was never rewound (writers kept coming): everything is copied back, so
      // RESTART only has to make the next writer start at the beginning again; with
      // busy_timeout 0 it gives up at once rather than wait for anyone.
      if (r.log > MAX_WAL_PAGES && r.checkpointed === r.log) r = restart.get() as typeof r;
      complete = r.checkpointed === r.log;
      if (r.log > 0) self.postMessage({ log: r.log, checkpointed: r.checkpointed });
    } catch (err) {
      complete = false;
      // SQLITE_BUSY: another checkpoint runs (the host application's, say); next tick.
      const code = (err as { code?: string }).code ?? "";
      if (!code.startsWith("SQLITE_BUSY")) self.postMessage({ error: err instanceof Error ? err.message : String(err) });
    }
  }, e.data.intervalMs);
};
