// The benchmark runner (issue 7). Builds (or reuses) the demo databases of a size under
// .bench-data/, runs every case in its own child process (so each peak RSS is that
// case's own), and prints every figure as one JSON line:
//   {"bench","size","metric","value","unit","target","baseline","ratio","ok"}
// then a summary table. Targets hold at size L; at other sizes `ok` is null.
//
//   bun run bench -- S          # small: under a minute
//   bun run bench -- L          # 1,000 tenants, 10,000 administrators, 5M + 5M rows
//   bun run bench -- M --seed 7 --cases verify,retention
//
// Cases: verify, anker, retention, weekrapport, reports, ingest, binary, pg.
import { Database } from "bun:sqlite";
import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { cpus, totalmem } from "node:os";
import { anchorFileOf, BUN, DATA_DIR, dbPath, FIFTH, ROOT, SIZES, type SizeName } from "./lib.ts";
import type { RetentionPhases } from "../src/audit/retention.ts";

const args = process.argv.slice(2).filter((a) => a !== "--");
const flag = (name: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args.splice(i, 2)[1] : undefined;
};
const seed = Number(flag("seed") ?? "42");
const only = flag("cases")?.split(",");
/** Server settings for the PostgreSQL case's cluster, `name=value,…` (none by default: initdb's). */
const pgSettings = flag("pg-settings");
const size = (args[0] ?? "S").toUpperCase() as SizeName;
if (!(size in SIZES) || size === "XS") {
  console.error("usage: bun run bench -- S|M|L [--seed 42] [--cases verify,anker,retention,weekrapport,reports,ingest,binary,pg] [--pg-settings name=value,…]");
  process.exit(2);
}
const scored = size === "L";
const wants = (c: string) => !only || only.includes(c);

type Target = { op: "<=" | ">="; limit: number; on: "value" | "ratio" };
interface Figure {
  bench: string;
  size: SizeName;
  metric: string;
  value: number | null;
  unit: string;
  target: string | null;
  baseline: number | null;
  ratio: number | null;
  ok: boolean | null;
  note?: string;
}
const figures: Figure[] = [];

const round = (x: number) => (Math.abs(x) >= 1000 ? Math.round(x) : Math.abs(x) >= 10 ? +x.toFixed(1) : +x.toFixed(3));

function fig(
  bench: string,
  metric: string,
  value: number | null,
  unit: string,
  o: { target?: Target; baseline?: number | null; ratio?: number | null; note?: string; sizeName?: SizeName } = {},
): void {
  const ratio = o.ratio ?? (o.baseline != null && value != null && o.baseline !== 0 ? value / o.baseline : null);
  const t = o.target;
  let ok: boolean | null = null;
  if (t && scored && value !== null) {
    const x = t.on === "ratio" ? ratio : value;
    ok = x !== null && (t.op === "<=" ? x <= t.limit : x >= t.limit);
  }
  const f: Figure = {
    bench,
    size: o.sizeName ?? size,
    metric,
    value: value === null ? null : round(value),
    unit,
    target: t ? `${t.on === "ratio" ? "ratio " : ""}${t.op} ${t.limit}` : null,
    baseline: o.baseline == null ? null : round(o.baseline),
    ratio: ratio === null ? null : +ratio.toFixed(2),
    ok,
    ...(o.note ? { note: o.note } : {}),
  };
  figures.push(f);
  console.log(JSON.stringify(f));
}

/** Runs a child and returns its last stdout line as JSON; stderr passes through. */
async function child<T>(cmd: string[], label: string): Promise<T | null> {
  const p = Bun.spawn([BUN, ...cmd], { cwd: ROOT, stdout: "pipe", stderr: "inherit" });
  const out = await new Response(p.stdout).text();
  const code = await p.exited;
  const last = out.trim().split("\n").at(-1) ?? "";
  if (code !== 0 || !last.startsWith("{")) {
    console.error(`[bench] ${label} failed (exit ${code})`);
    fig(label, "failed", null, "", { note: `exit ${code}` });
    return null;
  }
  return JSON.parse(last) as T;
}

const log = (msg: string) => console.error(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}`);

function checkpoint(file: string): void {
  const db = new Database(file);
  db.run("PRAGMA busy_timeout = 5000");
  db.run("PRAGMA wal_checkpoint(TRUNCATE)");
  db.close();
}

async function ensureDb(s: SizeName): Promise<string> {
  const file = dbPath(s, seed);
  if (existsSync(file)) return file;
  mkdirSync(DATA_DIR, { recursive: true });
  // a database of this size and seed built by older code is stale: make room
  const prefix = `${s}-seed${seed}-`;
  for (const f of readdirSync(DATA_DIR)) if (f.startsWith(prefix)) rmSync(join(DATA_DIR, f), { force: true });
  log(`building ${s} (${JSON.stringify(SIZES[s])}) into ${file}`);
  const r = await child<{ seconds: number }>(["bench/build.ts", "--db", file, "--size", s, "--seed", String(seed)], `build-${s}`);
  if (!r) throw new Error(`building ${s} failed`);
  fig("demo-data", "build-seconds", r.seconds, "s", { sizeName: s });
  return file;
}

/**
 * Signs the quarterly checkpoints a cached database's history would have (bench/cases/anker.ts
 * --mode history), then every chain once more (audit-anker's first run: every entry
 * hashed), so verification has checkpoints to recompute; the figure is kept beside it.
 */
async function ensureAnchored(file: string, s: SizeName): Promise<void> {
  const cached = `${file}.anker-full.json`;
  if (!existsSync(anchorFileOf(file)) || !existsSync(cached)) {
    rmSync(anchorFileOf(file), { force: true });
    log(`audit-anker: quarterly checkpoints over the data's history, then a first run over ${s} (every entry)`);
    const h = await child<{ seconds: number; runs: number; checkpoints: number }>(["bench/cases/anker.ts", "--db", file, "--mode", "history"], `anker-history-${s}`);
    if (!h) throw new Error("anchoring the history failed");
    const r = await child<{ seconds: number; checkpoints: number; entries: number }>(["bench/cases/anker.ts", "--db", file, "--mode", "full"], `anker-full-${s}`);
    if (!r) throw new Error("anchoring failed");
    writeFileSync(cached, JSON.stringify(r));
    checkpoint(file);
  }
  const r = JSON.parse(await Bun.file(cached).text()) as { seconds: number; checkpoints: number; entries: number };
  fig("audit-anker", "first-run-seconds", r.seconds, "s", { sizeName: s, note: `${r.checkpoints} checkpoints over ${r.entries} entries (measured when the data was built)` });
}

/** A copy of a database and its anchor file, for a case that changes them. */
async function copyWithAnchors(file: string, copy: string): Promise<void> {
  for (const f of [copy, `${copy}-wal`, `${copy}-shm`, anchorFileOf(copy)]) rmSync(f, { force: true });
  await Bun.spawn(["cp", file, copy]).exited;
  await Bun.spawn(["cp", anchorFileOf(file), anchorFileOf(copy)]).exited;
  // flush the copy now, or the first checkpoint's fsync would write all of it
  await Bun.spawn(["sync", copy]).exited;
}

function removeCopy(copy: string): void {
  for (const f of [copy, `${copy}-wal`, `${copy}-shm`, anchorFileOf(copy)]) rmSync(f, { force: true });
}

async function warm(file: string): Promise<void> {
  // Read the file once so no case pays for cold disk reads that another does not.
  await Bun.spawn(["cat", file], { stdout: "ignore" }).exited;
}

const t0 = performance.now();
const db = await ensureDb(size);
await ensureAnchored(db, size);
const fifth = FIFTH[size];
const fifthDb = fifth && wants("verify") ? await ensureDb(fifth) : null;
if (fifthDb && fifth) await ensureAnchored(fifthDb, fifth);
const sz = SIZES[size];

// 1. audit-verificatie
if (wants("verify")) {
  type V = { seconds: number; entries: number; workers: number; peakRssMb: number; mismatches?: number };
  await warm(db);
  // Warmed before every run: this VM's page reclaim (DAMON) evicts pages unused for a
  // minute or two, and a run that reads half its data from disk measures the disk.
  const run = async (file: string, mode: string) => {
    await warm(file);
    return child<V>(["bench/cases/verify.ts", "--db", file, "--mode", mode], `verify-${mode}`);
  };
  log("audit-verificatie: floor (parallel), job, twice each; floor (one thread); naive");
  const fp1 = await run(db, "floor-parallel");
  const job1 = await run(db, "job");
  const fp2 = await run(db, "floor-parallel");
  const job2 = await run(db, "job");
  const f1 = await run(db, "floor");
  const naive = await run(db, "naive");
  let jobFifth: V | null = null;
  if (fifthDb) {
    await warm(fifthDb);
    jobFifth = await run(fifthDb, "job");
  }
  const best = (a: V | null, b: V | null) => (a && b ? (a.seconds <= b.seconds ? a : b) : (a ?? b));
  const job = best(job1, job2);
  const fp = best(fp1, fp2);
  if (job) {
    const peak = Math.max(job1?.peakRssMb ?? 0, job2?.peakRssMb ?? 0);
    fig("audit-verificatie", "entries-per-second", job.entries / job.seconds, "entries/s", { target: { op: ">=", limit: 1_000_000, on: "value" }, note: `${job.entries} entries, ${job.workers} workers, best of 2` });
    fig("audit-verificatie", "seconds", job.seconds, "s");
    fig("audit-verificatie", "peak-rss", peak, "MB", { target: { op: "<=", limit: 200, on: "value" } });
    if (jobFifth) {
      fig("audit-verificatie", "peak-rss-growth-vs-fifth", peak - jobFifth.peakRssMb, "MB", {
        target: { op: "<=", limit: 20, on: "value" },
        baseline: jobFifth.peakRssMb,
        ratio: peak / jobFifth.peakRssMb,
        note: `baseline: peak RSS at ${fifth} (${jobFifth.entries} entries, ${jobFifth.workers} workers, ${round(jobFifth.entries / jobFifth.seconds)} entries/s)`,
      });
    }
    if (fp) fig("audit-verificatie", "time-vs-floor-same-parallelism", job.seconds, "s", { target: { op: "<=", limit: 1.5, on: "ratio" }, baseline: fp.seconds, note: `floor: ${fp.workers} workers, ${round(fp.entries / fp.seconds)} entries/s, best of 2` });
    if (f1) fig("audit-verificatie", "time-vs-floor-one-thread", job.seconds, "s", { baseline: f1.seconds, note: `information; floor one thread ${round(f1.entries / f1.seconds)} entries/s, peak ${f1.peakRssMb} MB` });
    if (naive) fig("audit-verificatie", "time-vs-naive", job.seconds, "s", { baseline: naive.seconds, note: `naive .all() + JSON.stringify(row): ${round(naive.entries / naive.seconds)} entries/s, peak ${naive.peakRssMb} MB` });
  }
}

// 1b. audit-anker after a day of new entries: incremental, O(new entries)
if (wants("anker")) {
  type A = { seconds: number; checkpoints: number; added: number; entries: number };
  const copy = join(DATA_DIR, "work-anker.db");
  await copyWithAnchors(db, copy);
  log("audit-anker: a day of new entries (5,000 over every tenant), then a run");
  const a = await child<A>(["bench/cases/anker.ts", "--db", copy, "--mode", "incremental", "--new", "5000"], "anker-incremental");
  removeCopy(copy);
  const full = JSON.parse(await Bun.file(`${db}.anker-full.json`).text()) as { seconds: number; entries: number };
  if (a) {
    fig("audit-anker", "incremental-run-seconds", a.seconds, "s", {
      baseline: full.seconds,
      note: `${a.added} new entries, ${a.checkpoints} checkpoints, ${a.entries} entries in all; baseline: the first run over every entry`,
    });
  }
}

// 2. retention, each run on a fresh copy, with a concurrent writer process
if (wants("retention")) {
  type R = {
    seconds: number;
    deleted: number;
    peakRssMb: number;
    writer: { inserts: number; maxMs: number; p99Ms: number; p50Ms: number; maxAtSeconds: number };
    profile: { batches: number; lockSeconds: number; checkpointSeconds: number; lockMsP50: number; lockMsMax: number; sizeP50: number; chunksP50: number; commitMsP50: number; commitMsMax: number } | null;
    /** The FULL checkpoint right after the clock stopped: what the run left in the WAL. */
    checkpointAfter: { seconds: number; log: number };
    phases: RetentionPhases | null;
  };
  checkpoint(db);
  for (const [kind, bench, rows] of [
    ["login", "beveiligingslog-retentie", sz.logins],
    ["audit", "audit-retentie", sz.audit],
  ] as const) {
    const res: Record<string, R | null> = {};
    for (const mode of ["delete", "job"] as const) {
      const copy = join(DATA_DIR, `work-${kind}-${mode}.db`);
      const c0 = performance.now();
      await copyWithAnchors(db, copy);
      log(`${bench}: ${mode === "job" ? "the job" : "one unbatched DELETE"} (copy took ${round((performance.now() - c0) / 1000)} s)`);
      res[mode] = await child<R>(["bench/cases/retention.ts", "--db", copy, "--kind", kind, "--mode", mode], `${bench}-${mode}`);
      removeCopy(copy);
    }
    const { job, delete: del } = res;
    if (job && del) {
      if (job.deleted !== del.deleted) log(`WARNING ${bench}: job deleted ${job.deleted}, DELETE ${del.deleted}`);
      // Both up to the same state: every deleted page copied from the WAL into the database
      // file. The one DELETE leaves its whole WAL for after its clock (at L 324 MB, about
      // 0.5 s), the job's batches are checkpointed while it runs (docs/performance.md).
      const through = (r: R) => r.seconds + r.checkpointAfter.seconds;
      fig(bench, "time-vs-unbatched-delete", through(job), "s", {
        target: { op: "<=", limit: 1.5, on: "ratio" },
        baseline: through(del),
        note: `each through its WAL checkpoint (job ${round(job.checkpointAfter.seconds)} s, DELETE ${round(del.checkpointAfter.seconds)} s of it); ${job.deleted} of ${rows} rows (${round((100 * job.deleted) / rows)}%), ${round(job.deleted / job.seconds)} rows/s; DELETE removed ${del.deleted}`,
      });
      fig(bench, "time-vs-unbatched-delete-statement", job.seconds, "s", {
        baseline: del.seconds,
        note: "information: up to the end of the job and of the DELETE statement, the WAL checkpoint after either left out (the figure of rounds 1 to 4)",
      });
      fig(bench, "writer-max-wait", job.writer.maxMs, "ms", { target: { op: "<=", limit: 150, on: "value" }, baseline: del.writer.maxMs, note: `baseline: the writer's worst wait during the unbatched DELETE; ${job.writer.inserts} inserts during the job; the worst began ${round(job.writer.maxAtSeconds)} s into it${job.phases ? ` (checking ended at ${round(job.phases.checkMs / 1000)} s)` : ""}` });
      fig(bench, "writer-p99-wait", job.writer.p99Ms, "ms", { baseline: del.writer.p99Ms, note: `baseline: p99 during the unbatched DELETE; p50 ${job.writer.p50Ms} / ${del.writer.p50Ms} ms` });
      fig(bench, "peak-rss", job.peakRssMb, "MB", { note: "information (no target)" });
      const p = job.profile;
      if (p) {
        fig(bench, "profile-lock-held", p.lockSeconds, "s", { note: `${p.batches} batches of about ${p.sizeP50} rows in ${p.chunksP50} chunks; lock held p50 ${round(p.lockMsP50)} ms, max ${round(p.lockMsMax)} ms; commit p50 ${round(p.commitMsP50)} ms, max ${round(p.commitMsMax)} ms` });
        fig(bench, "profile-checkpoints", p.checkpointSeconds, "s", { note: "after each batch, outside the write lock; the rest of the job time is the gaps" });
      }
      const ph = job.phases;
      if (ph) {
        fig(bench, "profile-phases", (ph.checkMs + ph.deleteMs) / 1000, "s", {
          note: `checking the prefixes (each against the smallest signed checkpoint that covers it) ${round(ph.checkMs / 1000)} s, records and deletion ${round(ph.deleteMs / 1000)} s`,
        });
      }
    }
  }
}

// 3. weekrapport to a local SMTP sink
if (wants("weekrapport")) {
  type W = {
    seconds: number;
    verstuurd: number;
    received: number;
    perSecond: number;
    jobPeakRssMb: number;
    tenants: number;
    profile: { statsSeconds: number; renderSeconds: number; renderMsPerTenant: number; htmlKbPerMessage: number; smtpBytesPerMessage: number };
  };
  log(`weekrapport: ${sz.admins} administrators to an SMTP sink`);
  const w = await child<W>(["bench/cases/weekrapport.ts", "--db", db], "weekrapport");
  if (w) {
    const p = w.profile;
    fig("weekrapport", "messages-per-second", w.perSecond, "msg/s", {
      target: { op: ">=", limit: 200, on: "value" },
      note: `${w.verstuurd} messages (${w.received} received by the sink) in ${round(w.seconds)} s; active administrators of active tenants`,
    });
    fig("weekrapport", "peak-rss", w.jobPeakRssMb, "MB", { target: { op: "<=", limit: 250, on: "value" } });
    fig("weekrapport", "profile-sqlite-stats", p.statsSeconds, "s", { note: `per-tenant statistics of ${w.tenants} tenants alone` });
    fig("weekrapport", "profile-render", p.renderSeconds, "s", { note: `${round(p.renderMsPerTenant)} ms per tenant (once per tenant), ${round(p.htmlKbPerMessage)} KB HTML; extrapolated from 100 tenants` });
    fig("weekrapport", "profile-smtp-and-rest", w.seconds - p.statsSeconds - p.renderSeconds, "s", { note: `job time minus statistics and rendering; ${round(p.smtpBytesPerMessage / 1024)} KB per message on the wire` });
  }
}

// 4. dagrapport and beveiligingslog-analyse
if (wants("reports")) {
  type D = { firstMs: number; medianMs: number; status: number; peakRssMb: number; aantalVerdacht?: { ip: number; account: number }; verzonden?: boolean; received?: number };
  const d = await child<D>(["bench/cases/reports.ts", "--db", db, "--job", "dagrapport"], "dagrapport");
  if (d) fig("dagrapport", "duration", d.firstMs, "ms", { target: { op: "<=", limit: 250, on: "value" }, note: `no recipient; first run in a fresh process, median of 5 more ${round(d.medianMs)} ms` });
  const ds = await child<D>(["bench/cases/reports.ts", "--db", db, "--job", "dagrapport", "--smtp"], "dagrapport-smtp");
  if (ds) fig("dagrapport", "duration-with-mail", ds.firstMs, "ms", { note: `information: rendered and sent to the SMTP sink (${ds.received} received); median of 5 more ${round(ds.medianMs)} ms` });
  const a = await child<D>(["bench/cases/reports.ts", "--db", db, "--job", "analyse"], "beveiligingslog-analyse");
  if (a) fig("beveiligingslog-analyse", "duration", a.firstMs, "ms", { target: { op: "<=", limit: 100, on: "value" }, note: `status ${a.status}, offenders ${JSON.stringify(a.aantalVerdacht)}; median of 5 more ${round(a.medianMs)} ms` });
}

// 4b. the write API (bench/ingest.ts): throughput, latency, appends and /health while jobs run; on a fresh copy
if (wants("ingest")) {
  type Lat = { n: number; p50Ms: number; p99Ms: number; maxMs: number };
  type Probe = { ticks: number; p99Ms: number; maxMs: number; stallsOver30: number };
  type Win = { label: string; seconds: number; status?: number; summary?: Record<string, unknown>; closedAfterSeconds?: number; append: Lat & { errors: number }; health: Lat & { errors: number }; probe: Probe };
  type I = {
    tenants: number;
    idle: { append: Lat; health: Lat; errors: number; probe: Probe };
    throughput: {
      clients: number;
      batch: number;
      seconds: number;
      entries: number;
      perSecond: number;
      walMaxMb: number;
      errors: number;
      requestLatency: Lat;
      direct: { entries: number; seconds: number; perSecond: number };
      storeAuditBatch: { entries: number; seconds: number; perSecond: number };
      requestsPerTransaction: number;
      probe: Probe;
      concentrated: { tenantsPerBatch: number; entries: number; seconds: number; perSecond: number; errors: number; requestLatency: Lat; requestsPerTransaction: number; eventLoopMaxMs: number }[];
    };
    small: Record<"one" | "many", { clients: number; requests: number; perSecond: number; errors: number; latency: Lat; requestsPerTransaction: number }>;
    windows: Win[];
    smtpReceived: number;
    peakRssMb: number;
  };
  const copy = join(DATA_DIR, "work-ingest.db");
  const c0 = performance.now();
  await copyWithAnchors(db, copy);
  log(`ingest: the write API on a copy (copy took ${round((performance.now() - c0) / 1000)} s); service process + clients, SMTP sink`);
  const r = await child<I>(["bench/ingest.ts", "--db", copy, "--seconds", "10", "--also-tenants-per-batch", "10,1"], "ingest");
  removeCopy(copy);
  if (r) {
    const t = r.throughput;
    fig("ingest", "entries-per-second", t.perSecond, "entries/s", {
      target: { op: ">=", limit: 50_000, on: "value" },
      baseline: t.direct.perSecond,
      note: `${t.clients} clients, ${t.batch}-entry batches over ${r.tenants} tenants, each entry with a sleutel: ${t.entries} in ${t.seconds} s, ${t.errors} errors, request p50 ${t.requestLatency.p50Ms} ms, ${t.requestsPerTransaction} requests per transaction, event loop at most ${t.probe.maxMs} ms; baseline: appendEntries of the same entries in this process, 500-entry IMMEDIATE transactions, the service's page cache (${t.direct.entries} in ${t.direct.seconds} s)`,
    });
    for (const c of t.concentrated) {
      fig("ingest", `entries-per-second-${c.tenantsPerBatch}-tenant${c.tenantsPerBatch === 1 ? "" : "s"}-per-batch`, c.perSecond, "entries/s", {
        target: { op: ">=", limit: 50_000, on: "value" },
        baseline: t.perSecond,
        note: `the same, with each batch's entries from ${c.tenantsPerBatch} tenant(s): ${c.entries} in ${c.seconds} s, ${c.errors} errors, request p50 ${c.requestLatency.p50Ms} ms, ${c.requestsPerTransaction} requests per transaction, event loop at most ${c.eventLoopMaxMs} ms; measured after the job windows; baseline: the spread batches above`,
      });
    }
    const { one, many } = r.small;
    fig("ingest", "small-requests-per-second", many.perSecond, "requests/s", {
      baseline: one.perSecond,
      note: `information: ${many.clients} clients posting single-entry batches for 5 s: ${many.requests} stored, ${many.errors} errors, p50 ${many.latency.p50Ms} ms, p99 ${many.latency.p99Ms} ms, ${many.requestsPerTransaction} requests per transaction (src/ingest/group-commit.ts); baseline: the same from 1 client, one at a time (p50 ${one.latency.p50Ms} ms, ${one.requestsPerTransaction} per transaction)`,
    });
    fig("ingest", "wal-max-during-throughput", t.walMaxMb, "MB", {
      note: "information: the WAL file's largest size, sampled every 100 ms while the clients wrote (the checkpoint thread rewinds it past 64 MB of frames)",
    });
    fig("ingest", "store-audit-batch-entries-per-second", t.storeAuditBatch.perSecond, "entries/s", {
      baseline: t.direct.perSecond,
      note: "information: prepareAuditBatch + storeAuditBatch in writeTransaction in one process (the API without HTTP, JSON and validation), same batches under new sleutels",
    });
    const i = r.idle;
    fig("ingest", "append-p99-idle", i.append.p99Ms, "ms", {
      target: { op: "<=", limit: 5, on: "value" },
      baseline: i.health.p99Ms,
      note: `${i.append.n} sequential single-entry appends, p50 ${i.append.p50Ms} ms, max ${i.append.maxMs} ms; baseline: GET /health interleaved, p50 ${i.health.p50Ms} ms, p99 ${i.health.p99Ms} ms, max ${i.health.maxMs} ms`,
    });
    const quiet = r.windows.find((w) => w.label === "quiet");
    for (const w of r.windows) {
      const during = w.label === "quiet" ? "without a job" : `during ${w.label}`;
      const scoredHere = w.label !== "quiet";
      const what = w.label === "quiet" ? "quiet" : w.label;
      fig("ingest", `append-p99-${what}`, w.append.p99Ms, "ms", {
        ...(scoredHere ? { target: { op: "<=", limit: 50, on: "value" } as Target } : {}),
        baseline: scoredHere ? (quiet?.append.p99Ms ?? null) : null,
        note: `single-entry appends every 10 ms (open loop) ${during}: ${w.append.n} sent, ${w.append.errors} errors, p50 ${w.append.p50Ms} ms${scoredHere ? `; job ${w.seconds} s, HTTP ${w.status}, ${JSON.stringify(w.summary)}${w.closedAfterSeconds !== undefined ? ` (the job's own request got no answer: the server closed it after ${w.closedAfterSeconds} s, Elysia's idleTimeout; status and result from job_runs)` : ""}; baseline: p99 without a job` : `; ${w.seconds} s`}`,
      });
      fig("ingest", `append-max-${what}`, w.append.maxMs, "ms", {
        ...(scoredHere ? { target: { op: "<=", limit: 250, on: "value" } as Target } : {}),
        baseline: scoredHere ? (quiet?.append.maxMs ?? null) : null,
        ...(scoredHere ? { note: "baseline: the worst without a job" } : {}),
      });
      fig("ingest", `health-max-${what}`, w.health.maxMs, "ms", {
        ...(scoredHere ? { target: { op: "<=", limit: 100, on: "value" } as Target } : {}),
        baseline: scoredHere ? (quiet?.health.maxMs ?? null) : null,
        note: `GET /health every 10 ms ${during}, send to answer: ${w.health.n} sent, ${w.health.errors} errors, p99 ${w.health.p99Ms} ms`,
      });
      fig("ingest", `event-loop-max-${what}`, w.probe.maxMs, "ms", {
        ...(scoredHere ? { target: { op: "<=", limit: 100, on: "value" } as Target } : {}),
        note: `inside the service process: the longest interval of a 10 ms setInterval ${during} (${w.probe.ticks} ticks, p99 ${w.probe.p99Ms} ms, ${w.probe.stallsOver30} over 30 ms)`,
      });
    }
    fig("ingest", "peak-rss-clients", r.peakRssMb, "MB", { note: `information: the client process (pre-generated batches); SMTP sink received ${r.smtpReceived}` });
  }
}

// 5. the binary (bench/startup.ts: builds it with the package.json build command)
if (wants("binary")) {
  log("binary: start to first answer, idle RSS (bench/startup.ts)");
  const p = Bun.spawn([BUN, "bench/startup.ts", "5"], { cwd: ROOT, stdout: "pipe", stderr: "inherit" });
  const out = await new Response(p.stdout).text();
  const summary = out
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .find((l) => l.bench === "startup-summary") as
    | { runs: number; binaryMb: number; startToFirstAnswerMs: { median: number; min: number; max: number }; rssIdleMb: number; rssAfterSpecAndJobMb: number }
    | undefined;
  if ((await p.exited) !== 0 || !summary) fig("binary", "failed", null, "", { note: "bench/startup.ts failed" });
  else {
    const s = summary.startToFirstAnswerMs;
    fig("binary", "start-to-first-answer", s.median, "ms", { target: { op: "<=", limit: 200, on: "value" }, note: `median of ${summary.runs} (min ${s.min}, max ${s.max}), new database each; binary ${summary.binaryMb} MB` });
    fig("binary", "idle-rss", summary.rssIdleMb, "MB", { target: { op: "<=", limit: 100, on: "value" }, note: `after serving the spec and a job: ${summary.rssAfterSpecAndJobMb} MB` });
  }
}

// 6. PostgreSQL (bench/cases/pg.ts starts its own throw-away cluster): the move, then
//    verification beside its floor (COPY … TO STDOUT of the same rows, hashed) and ingestion.
if (wants("pg")) {
  type PgWal = { mb: number; fullPages: number; checkpointsRequested: number; checkpointsTimed: number };
  const walNote = (w: PgWal) => `WAL ${w.mb} MB, ${w.fullPages} full-page images, checkpoints ${w.checkpointsRequested} requested / ${w.checkpointsTimed} timed`;
  type PgRetention = { seconds: number; statementSeconds: number; deleted: number; writer: { inserts: number; maxMs: number; p99Ms: number }; batches: number; batchMsMax: number | null; phases: RetentionPhases | null; coreSeconds: { server: number; bench: number; writer: number } };
  type P = {
    migrateSeconds: number;
    copiedRows: number;
    entries: number;
    verifySeconds: number;
    verifyRuns: number[];
    floorSeconds: number;
    floorRuns: number[];
    floorOneSeconds: number;
    rowFloorSeconds: number;
    rowFloorRuns: number[];
    rowFloorEntries: number;
    /** The row floor's CPU: the machine's busy core-seconds, and this process's (parsing and hashing) among them. */
    rowFloorCpu: { machine: number; own: number };
    retentionDelete: PgRetention;
    retentionJob: PgRetention;
    auditRetentionDelete: PgRetention;
    auditRetentionJob: PgRetention;
    auditRetentionChecked: PgRetention;
    ingestEntries: number;
    ingestSeconds: number;
    ingestBatchP99Ms: number | null;
    ingestWal: PgWal;
    api: { entries: number; seconds: number; batchP99Ms: number | null; wal: PgWal };
    serverSettings: Record<string, string>;
    peakRssMb: number;
  };
  log("PostgreSQL: migrate-to, verification twice beside its floors, ingestion from 4 clients, login retention");
  const p = await child<P>(["bench/cases/pg.ts", "--db", db, "--ingest", String(Math.min(200_000, sz.audit / 5)), ...(pgSettings ? ["--pg-settings", pgSettings] : [])], "pg");
  if (p) {
    fig("pg", "migrate-to-seconds", p.migrateSeconds, "s", { note: `${p.copiedRows} rows: source verified, copied (COPY), compared row by row, every chain verified on PostgreSQL` });
    fig("pg", "verify-entries-per-second", p.entries / p.verifySeconds, "entries/s", { target: { op: ">=", limit: 500_000, on: "value" }, note: `best of ${p.verifyRuns.map((x) => x.toFixed(2)).join(" / ")} s` });
    fig("pg", "verify-vs-row-floor", p.verifySeconds, "s", {
      baseline: p.rowFloorSeconds,
      target: { op: "<=", limit: 1.5, on: "ratio" },
      note: `floor: COPY TO STDOUT of the same rows on 2 worker threads, each row's canonical bytes hashed into its tenant's tree, as on SQLite (${p.rowFloorEntries} entries; best of ${p.rowFloorRuns.map((x) => x.toFixed(2)).join(" / ")} s)`,
    });
    fig("pg", "verify-vs-copy-floor", p.verifySeconds, "s", {
      baseline: p.floorSeconds,
      note: `information: COPY TO STDOUT of the same rows, the stream hashed as a whole, over 2 streams: the server's side alone (best of ${p.floorRuns.map((x) => x.toFixed(2)).join(" / ")} s; one stream ${p.floorOneSeconds.toFixed(2)} s)`,
    });
    fig("pg", "ingest-entries-per-second", p.ingestEntries / p.ingestSeconds, "entries/s", {
      target: { op: ">=", limit: 20_000, on: "value" },
      note: `${p.ingestEntries} entries, batches of 500 from 4 clients, appendEntriesPg direct; batch p99 ${p.ingestBatchP99Ms?.toFixed(1)} ms; ${walNote(p.ingestWal)}; server settings: ${Object.entries(p.serverSettings).map(([k, v]) => `${k}=${v}`).join(" ") || "initdb's defaults"}`,
    });
    fig("pg", "api-ingest-entries-per-second", p.api.entries / p.api.seconds, "entries/s", {
      target: { op: ">=", limit: 20_000, on: "value" },
      note: `${p.api.entries} entries through POST /api/audit (the service as its own process on PostgreSQL), batches of 500 with a sleutel each from 4 HTTP clients; batch p99 ${p.api.batchP99Ms?.toFixed(1)} ms; ${walNote(p.api.wal)}; direct appends in the same run as the baseline`,
    });
    fig("pg", "api-ingest-vs-direct", (p.api.seconds / p.api.entries) * 1e6, "µs/entry", {
      baseline: (p.ingestSeconds / p.ingestEntries) * 1e6,
      note: "information: the write API's cost per entry against appendEntriesPg's",
    });
    const cpuNote = (r: PgRetention) => `${(r.coreSeconds.server + r.coreSeconds.bench).toFixed(2)} core-s (server ${r.coreSeconds.server}, bench process ${r.coreSeconds.bench})`;
    for (const [bench, rj, rd] of [
      ["beveiligingslog-retentie", p.retentionJob, p.retentionDelete],
      ["audit-retentie", p.auditRetentionJob, p.auditRetentionDelete],
    ] as const) {
      if (rj.deleted !== rd.deleted) log(`WARNING pg ${bench}: job deleted ${rj.deleted}, DELETE ${rd.deleted}`);
      fig("pg", `${bench}-vs-unbatched-delete`, rj.seconds, "s", {
        baseline: rd.seconds,
        target: { op: "<=", limit: 1.5, on: "ratio" },
        note: `each through a CHECKPOINT after it (statements alone: job ${rj.statementSeconds.toFixed(2)} s, DELETE ${rd.statementSeconds.toFixed(2)} s); CPU: job ${cpuNote(rj)}, DELETE ${cpuNote(rd)}; ${rj.deleted} rows in ${rj.batches} batches (longest ${rj.batchMsMax?.toFixed(0)} ms)${bench === "audit-retentie" ? `${rj.phases ? `; checking the prefixes ${(rj.phases.checkMs / 1000).toFixed(2)} s, records and deletion ${(rj.phases.deleteMs / 1000).toFixed(2)} s` : ""}` : ""}`,
      });
      fig("pg", `${bench}-writer-max-wait`, rj.writer.maxMs, "ms", {
        baseline: rd.writer.maxMs,
        target: { op: "<=", limit: 150, on: "value" },
        note: `a writer process ${bench === "audit-retentie" ? "appending an audit entry" : "inserting a login attempt"} every 10 ms (${rj.writer.inserts} writes, p99 ${rj.writer.p99Ms} ms); baseline: its worst wait during the one DELETE (p99 ${rd.writer.p99Ms} ms)`,
      });
    }
    // What any audit-retentie needs at the least on this machine's cores: the one DELETE's
    // CPU (the server's, through its CHECKPOINT) and, for every row it deletes, what the
    // row floor's threads spent parsing and hashing one row (its server side left out: a
    // DELETE … RETURNING reads the rows in the same pass), spread over every core at once.
    const rd = p.auditRetentionDelete;
    const hashPerRow = p.rowFloorCpu.own / p.rowFloorEntries;
    const boundSeconds = (rd.coreSeconds.server + rd.coreSeconds.bench + rd.deleted * hashPerRow) / cpus().length;
    fig("pg", "audit-retentie-cpu-bound-vs-unbatched-delete", boundSeconds, "s", {
      baseline: rd.seconds,
      note: `information: the least a deletion that checks what it deletes can take on ${cpus().length} cores, from CPU time measured in this run: the one DELETE's ${(rd.coreSeconds.server + rd.coreSeconds.bench).toFixed(2)} core-s + ${rd.deleted} rows × ${(hashPerRow * 1e6).toFixed(2)} core-µs (the row floor's parsing and hashing per row: ${p.rowFloorCpu.own} of its ${p.rowFloorCpu.machine} core-s for ${p.rowFloorEntries} rows), all cores busy all the time; a ratio above 1.5 means no such job meets ≤ 1.5× here`,
    });
    fig("pg", "audit-retentie-checked-delete-vs-unbatched-delete", p.auditRetentionChecked.seconds, "s", {
      baseline: p.auditRetentionDelete.seconds,
      note: `information: what a deletion that checks what it deletes costs here at the least (bench/cases/pg.ts checkedDelete: a DELETE … RETURNING through COPY per range of tenants on 2 threads, each row's hash recomputed, then links and the tree per tenant; no anchor file, no checkpoint root, no records), through a CHECKPOINT (statement ${p.auditRetentionChecked.statementSeconds.toFixed(2)} s); CPU ${cpuNote(p.auditRetentionChecked)}; ${p.auditRetentionChecked.deleted} rows; writer max ${p.auditRetentionChecked.writer.maxMs} ms`,
    });
    fig("pg", "peak-rss", p.peakRssMb, "MB");
  } else fig("pg", "failed", null, "", { note: "bench/cases/pg.ts failed" });
}

const totalSeconds = (performance.now() - t0) / 1000;
fig("bench", "total-seconds", totalSeconds, "s", { note: `${size}, seed ${seed}, database building included` });

// Summary table
const machine = {
  nproc: cpus().length,
  model: cpus()[0]?.model ?? "?",
  memGb: +(totalmem() / 1024 ** 3).toFixed(1),
  bun: Bun.version,
  loadavg: (await Bun.file("/proc/loadavg").text()).split(" ").slice(0, 3).join(" "),
};
const rows = figures.map((f) => [
  f.bench,
  f.metric,
  f.value === null ? "-" : `${f.value} ${f.unit}`,
  f.target ?? "",
  f.baseline === null ? "" : String(f.baseline),
  f.ratio === null ? "" : String(f.ratio),
  f.ok === null ? "" : f.ok ? "ok" : "MISSED",
]);
const head = ["bench", "metric", "value", "target", "baseline", "ratio", "ok"];
const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
const line = (r: string[]) => r.map((c, i) => c.padEnd(widths[i]!)).join("  ");
console.error("");
console.error(`Summary, size ${size} (${JSON.stringify(sz)}), ${machine.nproc} × ${machine.model}, ${machine.memGb} GB, Bun ${machine.bun}, load ${machine.loadavg}`);
console.error(line(head));
for (const r of rows) console.error(line(r));
if (!scored) console.error(`(targets are scored at size L only)`);
writeFileSync(join(DATA_DIR, `last-${size}.json`), JSON.stringify({ size, seed, machine, at: new Date().toISOString(), figures }, null, 2) + "\n");
