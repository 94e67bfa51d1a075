// Retention at scale, on a fresh copy of the database each run, while bench/writer.ts
// inserts a row every 10 ms in another process:
//   --kind login  beveiligingslog-retentie (≈ ½ of the login attempts)
//   --kind audit  audit-retentie (≈ ⅓ of the audit entries)
//   --mode job    the real job;  --mode delete  one unbatched DELETE of the same rows
//
//   bun bench/cases/retention.ts --db <copy> --kind login --mode job
import { retentionBoundary, type RetentionPhases } from "../../src/audit/retention.ts";
import { startCheckpointer } from "../../src/checkpointer.ts";
import { openStore } from "../../src/db.ts";
import { runAuditRetentie } from "../../src/jobs/audit-retentie.ts";
import { runBeveiligingslogRetentie } from "../../src/jobs/beveiligingslog-retentie.ts";
import { arg, benchDeps, BUN, NOW, report } from "../lib.ts";

const db = arg("db");
const kind = arg("kind");
const mode = arg("mode");
const store = openStore(db, NOW);
// As the service runs (src/server.ts): WAL checkpoints in their own thread, for the job
// and for the one-DELETE baseline alike, and one right after each of the job's batches.
const checkpointer = startCheckpointer(store.sqlite, db);
const deps = { ...benchDeps(store), checkpointNow: () => checkpointer.now() };

const writer = Bun.spawn([BUN, new URL("../writer.ts", import.meta.url).pathname, "--db", db, "--kind", kind], { stdout: "pipe", stderr: "inherit" });
const reader = writer.stdout.getReader();
const decoder = new TextDecoder();
let out = "";
while (!out.includes("ready\n")) {
  const r = await reader.read();
  if (r.done) throw new Error("writer exited before it was ready");
  out += decoder.decode(r.value, { stream: true });
}
out = out.slice(out.indexOf("ready\n") + 6);
await Bun.sleep(300); // the writer's waits before the run, for comparison

// The job's batches: how long each held the write lock, and its checkpoint after.
type Batch = { rows: number; chunks: number; lockMs: number; commitMs: number; checkpointMs: number };
const batches: Batch[] = [];
const onBatch = (b: Batch) => batches.push(b);
let phases: RetentionPhases | null = null;
const onPhases = (p: RetentionPhases) => void (phases = p);

const t0 = performance.now();
const startedAt = Date.now();
let deleted: number;
if (mode === "job") {
  const r = kind === "login" ? await runBeveiligingslogRetentie(deps, NOW, { onBatch }) : await runAuditRetentie(deps, NOW, { onBatch, onPhases });
  deleted = r.body.verwijderd;
} else {
  const grens = retentionBoundary(NOW, kind === "login" ? deps.config.beveiligingslogRetentieDagen : deps.config.auditRetentieDagen);
  deleted =
    kind === "login"
      ? store.sqlite.query("DELETE FROM login_attempts WHERE tijdstip < ?").run(grens).changes
      : store.sqlite.query("DELETE FROM audit_entries WHERE created_at < ?").run(grens).changes;
}
const seconds = (performance.now() - t0) / 1000;
// What is still owed after the clock stopped: the WAL pages not yet copied into the
// database file. The thread finishes the checkpoint it is in, then one FULL from here.
const k0 = performance.now();
await checkpointer.stop();
const ckpt = store.sqlite.query("PRAGMA wal_checkpoint(FULL)").get() as { busy: number; log: number; checkpointed: number };
const checkpointAfterSeconds = (performance.now() - k0) / 1000;
// A FULL checkpoint that could not finish would understate what this mode left behind.
if (ckpt.busy !== 0 || ckpt.checkpointed !== ckpt.log) console.error(`WARNING: the FULL checkpoint after the ${mode} did not finish: ${JSON.stringify(ckpt)}`);
await Bun.sleep(300);

writer.kill("SIGTERM");
for (let r = await reader.read(); !r.done; r = await reader.read()) out += decoder.decode(r.value, { stream: true });
await writer.exited;
const w = JSON.parse(out.trim().split("\n").at(-1)!) as { inserts: number; maxMs: number; p99Ms: number; p50Ms: number; maxAt: number };
// When the longest wait began, in seconds from the start of the run (negative: before it).
const waits = { ...w, maxAtSeconds: (w.maxAt - startedAt) / 1000 };
store.close();
const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
const lock = sorted(batches.map((b) => b.lockMs));
const sizes = sorted(batches.map((b) => b.rows));
const commits = sorted(batches.map((b) => b.commitMs));
const profile = batches.length
  ? {
      batches: batches.length,
      lockSeconds: lock.reduce((a, b) => a + b, 0) / 1000,
      checkpointSeconds: batches.reduce((a, b) => a + b.checkpointMs, 0) / 1000,
      lockMsP50: lock[Math.floor(lock.length / 2)],
      lockMsMax: lock.at(-1),
      sizeP50: sizes[Math.floor(sizes.length / 2)],
      chunksP50: sorted(batches.map((b) => b.chunks))[Math.floor(batches.length / 2)],
      commitMsP50: commits[Math.floor(commits.length / 2)],
      commitMsMax: commits.at(-1),
    }
  : null;
report({ kind, mode, seconds, deleted, writer: waits, profile, phases, checkpointAfter: { seconds: checkpointAfterSeconds, ...ckpt } });
