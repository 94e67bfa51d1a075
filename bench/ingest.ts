// The write API (POST /api/audit) at scale, on a copy of a benchmark database (L: 1,000
// tenants, 5 M audit entries), with the service as its own process and the clients in
// this one, over loopback:
//   1. throughput: 4 concurrent clients, batches of 500 entries over every tenant, for
//      --seconds; baselines in the same run: the same entries appended in this process
//      by appendEntries (src/audit/chain.ts) in 500-entry IMMEDIATE transactions (the
//      floor), and by prepareAuditBatch + storeAuditBatch in writeTransaction (the
//      API's work without HTTP, JSON and validation; information);
//   2. single-entry appends on the idle service, sequential, interleaved with GET
//      /health (the baseline); and at the end, single-entry appends from 32 concurrent
//      clients for 5 s against the same from one client (what the grouped writer,
//      src/ingest/group-commit.ts, makes of many small requests);
//   3. appends while a job runs (audit-verificatie, weekrapport, audit-retentie,
//      beveiligingslog-retentie, one at a time, each started over HTTP with
//      CRON_SECRET): one single-entry append every 10 ms, open loop (sent on time
//      whether or not the one before was answered), and a quiet window without a job
//      first as the baseline;
//   4. meanwhile GET /health every 10 ms (open loop): the largest time from a request's
//      send to its answer; and inside the service process an event-loop drift probe
//      (setInterval 10 ms): the service runs as `bun bench/ingest.ts --serve`, which
//      is src/index.ts's serve path (startServer(parseConfig(process.env))) plus the
//      probe, reporting on a line from stdin.
// The clock is the wall clock (as in production): with the L data built up to
// 2026-07-23, audit-retentie at its default 2555 days deletes roughly a third.
// weekrapport delivers to bench/smtp-sink.ts (its own process) over SMTP_URL.
//
//   bun bench/ingest.ts --db <copy> [--seconds 10] [--jobs audit-verificatie,weekrapport,audit-retentie,beveiligingslog-retentie,db-onderhoud,audit-anker,dagrapport,beveiligingslog-analyse,taken-controle,backup-controle]
//                       (every scheduled job by default, db-onderhoud after the retention jobs as at night;
//                       not backup-status, which the host's backup calls with a report)
//                       [--tenants-per-batch N] [--also-tenants-per-batch 10,1] [--profile] [--variant checkpoint-thread,cache64]
//   bun bench/ingest.ts --db <copy> --commit-profile     (where a spread batch's time goes, without the service)
//   (bench/run.ts L --cases ingest makes the copy, runs this and prints the figures)
//
// --profile: the service process times every SQLite statement, exec and transaction
// (body and BEGIN + COMMIT apart) that takes INGEST_PROFILE_MS (20) or longer on its
// event loop, and names what ran during the longest stalls of each window (diagnosis).
// --variant: a proposed fix tried in the bench's service process only (see
// checkpointInAThread); --tenants-per-batch N: throughput batches from N tenants each;
// --also-tenants-per-batch 10,1: the throughput measured again after the job windows, with
// batches from that many tenants each (no baselines).
import { Database } from "bun:sqlite";
import { appendEntries, canonicalJson, type ChainInput } from "../src/audit/chain.ts";
import { applyPragmas } from "../src/db.ts";
import { prepareAuditBatch, storeAuditBatch, type AuditBatch } from "../src/ingest/audit.ts";
import { writeTransaction } from "../src/db.ts";
import { SERVICE_CACHE_KIB } from "../src/server.ts";
import { statSync } from "node:fs";
import { seededRandom } from "../src/cli/demo-data.ts";
import { anchorFileOf, arg, BENCH_SIGNING_KEY, BUN, report } from "./lib.ts";
import { startSink } from "./sink-client.ts";

const PERIOD_MS = 10;
/** The service process's output (printed when the run fails) and the process itself. */
let serviceLog = "";
let service: ReturnType<typeof Bun.spawn> | null = null;
let smtpSink: Awaited<ReturnType<typeof startSink>> | null = null;

if (process.argv.includes("--serve")) {
  await serve();
} else if (process.argv.includes("--commit-profile")) {
  commitProfile();
} else {
  await drive();
}

/**
 * Where a spread batch's time goes, in this process without the service: 40 batches of
 * 500 entries (each from a random tenant, or all from one) appended by appendEntries, the
 * statements and the COMMIT timed apart, under the service's pragmas and variations of
 * them. One JSON line per variation. `bun bench/ingest.ts --db <copy> --commit-profile`
 */
function commitProfile(): void {
  const dbPath = arg("db");
  const variations: { name: string; pragmas: string[]; oneTenant?: boolean; perCommit?: number }[] = [
    { name: "service pragmas", pragmas: [] },
    { name: "service pragmas, four batches per commit (group commit)", pragmas: [], perCommit: 4 },
    { name: "as the service (its cache, checkpoints elsewhere)", pragmas: ["PRAGMA wal_autocheckpoint = 0", `PRAGMA cache_size = -${SERVICE_CACHE_KIB}`] },
    { name: "as the service, four batches per commit", pragmas: ["PRAGMA wal_autocheckpoint = 0", `PRAGMA cache_size = -${SERVICE_CACHE_KIB}`], perCommit: 4 },
    { name: "wal_autocheckpoint = 0", pragmas: ["PRAGMA wal_autocheckpoint = 0"] },
    { name: "synchronous = OFF", pragmas: ["PRAGMA synchronous = OFF"] },
    { name: "wal_autocheckpoint = 0, cache 256 MB", pragmas: ["PRAGMA wal_autocheckpoint = 0", "PRAGMA cache_size = -262144"] },
    { name: "service pragmas, every entry to one tenant", pragmas: [], oneTenant: true },
  ];
  const rand = seededRandom(7);
  for (const v of variations) {
    const db = new Database(dbPath, { strict: true });
    applyPragmas(db);
    for (const p of v.pragmas) db.run(p);
    const tenants = (db.query("SELECT id FROM tenants ORDER BY id").values() as [number][]).map(([id]) => id);
    const begin = db.prepare("BEGIN IMMEDIATE");
    const commit = db.prepare("COMMIT");
    let statementsMs = 0;
    let commitMs = 0;
    const t0 = performance.now();
    const perCommit = v.perCommit ?? 1;
    for (let b = 0; b < 40; b++) {
      const inputs: ChainInput[] = Array.from({ length: 500 }, (_, i) => ({
        tenantId: v.oneTenant ? tenants[0]! : tenants[Math.floor(rand() * tenants.length)]!,
        createdAt: new Date().toISOString(),
        actor: "profiel@example.nl",
        action: "dossier.bekeken",
        subject: `dossier/${b}/${i}`,
        details: canonicalJson({ ip: "10.0.0.1", veld: "status", oud: "open", nieuw: "gesloten" }),
      }));
      if (b % perCommit === 0) begin.run();
      let t = performance.now();
      appendEntries(db, inputs);
      statementsMs += performance.now() - t;
      if (b % perCommit !== perCommit - 1) continue;
      t = performance.now();
      commit.run();
      commitMs += performance.now() - t;
    }
    const seconds = (performance.now() - t0) / 1000;
    const c0 = performance.now();
    db.run("PRAGMA wal_checkpoint(TRUNCATE)");
    const checkpointAfterMs = performance.now() - c0;
    db.close();
    console.log(
      JSON.stringify({
        bench: "ingest-commit-profile",
        variation: v.name,
        entriesPerSecond: Math.round(20_000 / seconds),
        statementsMsPerBatch: +(statementsMs / 40).toFixed(1),
        commitMsPerBatch: +(commitMs / 40).toFixed(1),
        batchesPerCommit: perCommit,
        checkpointAfterMs: +checkpointAfterMs.toFixed(0),
      }),
    );
  }
}

// ------------------------------------------------------------------ the service side

/** The service as src/index.ts serves it, plus an event-loop drift probe (and, with INGEST_PROFILE=1, slow-statement timing). */
async function serve(): Promise<void> {
  const slow: { at: number; ms: number; what: string }[] = [];
  if (process.env.INGEST_PROFILE === "1") instrumentSqlite(slow);
  const { parseConfig } = await import("../src/config.ts");
  const { startServer } = await import("../src/server.ts");
  const { deps } = startServer(parseConfig(process.env));
  const variants = (process.env.INGEST_VARIANT ?? "").split(",");
  if (variants.includes("checkpoint-thread")) checkpointInAThread(deps.store.sqlite, deps.store.path);
  // Experiment: a 64 MB page cache on the service's connection (SQLite's default is 2 MB).
  if (variants.includes("cache64")) deps.store.sqlite.run("PRAGMA cache_size = -65536");

  let last = performance.now();
  let intervals: number[] = [];
  let stalls: { at: number; ms: number }[] = [];
  setInterval(() => {
    const t = performance.now();
    const d = t - last;
    last = t;
    intervals.push(d);
    if (d > 3 * PERIOD_MS) stalls.push({ at: Date.now() - d, ms: +d.toFixed(1) });
  }, PERIOD_MS);
  for await (const line of console) {
    const label = line.trim();
    if (label === "") continue;
    const s = intervals.slice().sort((a, b) => a - b);
    const q = (p: number) => +(s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? 0).toFixed(1);
    const top = stalls.sort((a, b) => b.ms - a.ms).slice(0, 12);
    const slowTop = slow.slice().sort((a, b) => b.ms - a.ms).slice(0, 15);
    // Slow calls by kind (the statement's first 40 characters): how many, how long in all, the longest.
    const byKind: Record<string, { n: number; totalMs: number; maxMs: number }> = {};
    for (const x of slow) {
      const k = x.what.replace(/[0-9]+/g, "N").slice(0, 48);
      const e = (byKind[k] ??= { n: 0, totalMs: 0, maxMs: 0 });
      e.n++;
      e.totalMs = +(e.totalMs + x.ms).toFixed(1);
      e.maxMs = Math.max(e.maxMs, x.ms);
    }
    // What ran during the five longest stalls (slow calls that overlap them).
    const during = top.slice(0, 5).map((st) => ({
      stall: st,
      calls: slow.filter((x) => x.at < st.at + st.ms && x.at + x.ms > st.at).map((x) => ({ offsetMs: +(x.at - st.at).toFixed(1), ms: x.ms, what: x.what })),
    }));
    process.stdout.write(JSON.stringify({ probe: label, ticks: s.length, p50Ms: q(0.5), p99Ms: q(0.99), maxMs: q(1), stallsOver30: stalls.length, top, slow: slowTop, slowByKind: byKind, during }) + "\n");
    intervals = [];
    stalls = [];
    slow.length = 0;
  }
}

/**
 * An experiment, not the service as it is (--variant checkpoint-thread): the fix this
 * benchmark proposes, tried from outside src/. The service's connection stops
 * checkpointing inside its commits (wal_autocheckpoint = 0) and a worker thread with
 * its own connection runs PRAGMA wal_checkpoint(PASSIVE) every 50 ms, so the page
 * write-back and its fsyncs leave the event loop and the write lock.
 */
function checkpointInAThread(sqlite: Database, path: string): void {
  sqlite.run("PRAGMA wal_autocheckpoint = 0");
  const code = `
    import { Database } from "bun:sqlite";
    const db = new Database(${JSON.stringify(path)});
    db.run("PRAGMA busy_timeout = 5000");
    db.run("PRAGMA synchronous = NORMAL");
    setInterval(() => db.run("PRAGMA wal_checkpoint(PASSIVE)"), 50);
  `;
  new Worker(URL.createObjectURL(new Blob([code], { type: "application/typescript" })));
}

/**
 * Times bun:sqlite's synchronous calls (statements, exec; BEGIN and COMMIT of a
 * transaction are statements too) and keeps those of `--profile-ms` (20) or more.
 */
function instrumentSqlite(slow: { at: number; ms: number; what: string }[]): void {
  const threshold = Number(process.env.INGEST_PROFILE_MS ?? "20");
  const databaseProto = Database.prototype as unknown as Record<string, unknown>;
  const wrap = (target: Record<string, unknown>, name: string, describe: (self: any, args: unknown[]) => string) => {
    const original = target[name] as ((...a: unknown[]) => unknown) | undefined;
    if (typeof original !== "function") return;
    target[name] = function (this: unknown, ...args: unknown[]) {
      const t0 = performance.now();
      try {
        return original.apply(this, args);
      } finally {
        const ms = performance.now() - t0;
        if (ms >= threshold) slow.push({ at: Date.now() - ms, ms: +ms.toFixed(1), what: describe(this, args).replace(/\s+/g, " ").slice(0, 120) });
      }
    };
  };
  // A Statement's methods are its own properties: wrapped on each statement as it is made
  // (query() caches statements, so once each); transactions prepare BEGIN and COMMIT too.
  const wrapped = new WeakSet<object>();
  for (const make of ["query", "prepare"]) {
    const original = databaseProto[make] as (...a: unknown[]) => Record<string, unknown>;
    databaseProto[make] = function (this: unknown, ...args: unknown[]) {
      const st = original.apply(this, args);
      if (!wrapped.has(st)) {
        wrapped.add(st);
        for (const m of ["run", "get", "all", "values"]) wrap(st, m, (self) => `${m}: ${String(self?.toString?.() ?? "?")}`);
      }
      return st;
    };
  }
  wrap(databaseProto, "run", (_self, args) => `exec: ${String(args[0])}`);
  // A transaction: its whole time and its body's, so BEGIN + COMMIT (and the WAL
  // checkpoint a COMMIT may run) is the difference.
  const transaction = databaseProto.transaction as (fn: (...a: unknown[]) => unknown) => Record<string, unknown>;
  databaseProto.transaction = function (this: unknown, fn: (...a: unknown[]) => unknown) {
    // Where the transaction was made: the first frame in src/.
    const where = (new Error().stack ?? "").split("\n").find((l) => l.includes("/src/"))?.replace(/^.*\/src\//, "").replace(/\)$/, "") ?? "?";
    let bodyMs = 0;
    const timedBody = function (this: unknown, ...a: unknown[]) {
      const t0 = performance.now();
      try {
        return fn.apply(this, a);
      } finally {
        bodyMs = performance.now() - t0;
      }
    };
    const tx = transaction.call(this, timedBody);
    const timed = (call: (...a: unknown[]) => unknown, kind: string) =>
      function (this: unknown, ...a: unknown[]) {
        const t0 = performance.now();
        try {
          return call.apply(this, a);
        } finally {
          const ms = performance.now() - t0;
          if (ms >= threshold) slow.push({ at: Date.now() - ms, ms: +ms.toFixed(1), what: `transaction ${kind} (${where}): body ${bodyMs.toFixed(0)} ms, begin+commit ${(ms - bodyMs).toFixed(0)} ms` });
        }
      };
    const out = timed(tx as unknown as (...a: unknown[]) => unknown, "default") as unknown as Record<string, unknown>;
    for (const kind of ["deferred", "immediate", "exclusive"]) out[kind] = timed(tx[kind] as (...a: unknown[]) => unknown, kind);
    return out;
  };
}

// ------------------------------------------------------------------ the client side

interface Stats {
  n: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}
function stats(xs: number[]): Stats {
  const s = xs.slice().sort((a, b) => a - b);
  const q = (p: number) => +(s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? 0).toFixed(2);
  return { n: s.length, p50Ms: q(0.5), p99Ms: q(0.99), maxMs: q(1) };
}

interface Entry {
  tenantId: number;
  actor: string;
  action: string;
  subject: string;
  details: Record<string, unknown>;
  tijdstip: string;
  sleutel: string;
}

async function drive(): Promise<void> {
  try {
    await driveAll();
  } catch (e) {
    console.error(`[ingest] failed: ${e instanceof Error ? e.stack : String(e)}\n--- service output (last 6000 characters) ---\n${serviceLog.slice(-6000)}`);
    if (service && service.exitCode === null) {
      service.kill("SIGKILL");
      await service.exited;
    }
    console.error(`service exit: ${service?.exitCode} ${service?.signalCode ?? ""}`);
    await smtpSink?.stop();
    process.exit(1);
  }
}

async function driveAll(): Promise<void> {
  const dbPath = arg("db");
  const seconds = Number(arg("seconds", "10"));
  const jobs = arg("jobs", "audit-verificatie,weekrapport,audit-retentie,beveiligingslog-retentie,db-onderhoud,audit-anker,dagrapport,beveiligingslog-analyse,taken-controle,backup-controle").split(",").filter(Boolean);
  const profile = process.argv.includes("--profile");
  const variant = arg("variant", "");
  /** Tenants per throughput batch: 0 = every entry from any tenant. */
  const perBatch = Number(arg("tenants-per-batch", "0"));
  const seed = Number(arg("seed", "42"));
  const rand = seededRandom(seed);
  const t0 = performance.now();
  const log = (m: string) => console.error(`[ingest ${((performance.now() - t0) / 1000).toFixed(1)} s] ${m}`);

  const probeDb = new Database(dbPath, { readonly: true });
  const tenants = (probeDb.query("SELECT id FROM tenants ORDER BY id").values() as [number][]).map(([id]) => id);
  const entriesBefore = (probeDb.query("SELECT count(*) AS n FROM audit_entries").get() as { n: number }).n;
  probeDb.close();

  const CRON_SECRET = "bench-" + "0".repeat(58);
  const APP_SECRET = "bench-app-" + "1".repeat(54);
  const sink = await startSink();
  smtpSink = sink;
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const svc = Bun.spawn([BUN, import.meta.path, "--serve"], {
    env: {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      HOME: process.env.HOME ?? "/tmp",
      CRON_SECRET,
      APP_SECRET,
      AUDIT_ANKER_SLEUTEL: BENCH_SIGNING_KEY,
      DATABASE_PATH: dbPath,
      AUDIT_ANKER_BESTAND: anchorFileOf(dbPath),
      SMTP_URL: sink.url,
      PORT: String(port),
      HOST: "127.0.0.1",
      ...(profile ? { INGEST_PROFILE: "1", INGEST_PROFILE_MS: process.env.INGEST_PROFILE_MS ?? "20" } : {}),
      ...(variant ? { INGEST_VARIANT: variant } : {}),
    },
    stdin: "pipe",
    stdout: "pipe",
    stderr: "pipe",
  });
  service = svc;
  const probeWaiters: ((r: ProbeReport) => void)[] = [];
  const lines = async (s: ReadableStream<Uint8Array>, onLine: (l: string) => void) => {
    const decoder = new TextDecoder();
    let buf = "";
    const reader = s.getReader();
    for (let r = await reader.read(); !r.done; r = await reader.read()) {
      buf += decoder.decode(r.value, { stream: true });
      for (let i = buf.indexOf("\n"); i >= 0; i = buf.indexOf("\n")) {
        onLine(buf.slice(0, i));
        buf = buf.slice(i + 1);
      }
    }
  };
  const drained = Promise.all([
    lines(svc.stdout, (l) => {
      if (l.startsWith('{"probe"')) probeWaiters.shift()?.(JSON.parse(l) as ProbeReport);
      else serviceLog += l + "\n";
    }),
    lines(svc.stderr, (l) => (serviceLog += l + "\n")),
  ]);
  const mark = (label: string) =>
    new Promise<ProbeReport>((res) => {
      probeWaiters.push(res);
      svc.stdin.write(label + "\n");
      svc.stdin.flush();
    });

  const deadline = performance.now() + 30_000;
  for (;;) {
    if (svc.exitCode !== null || performance.now() > deadline) throw new Error(`the service did not start:\n${serviceLog}`);
    try {
      if ((await fetch(`${url}/health`)).ok) break;
    } catch {
      await Bun.sleep(20); // polling /health while the service starts
    }
  }
  log(`service up on ${url} (${tenants.length} tenants, ${entriesBefore} entries); SMTP sink ${sink.url}`);

  const appHeaders = { authorization: `Bearer ${APP_SECRET}`, "content-type": "application/json" };
  /** The service's grouped writer so far (src/ingest/group-commit.ts), from /metrics. */
  const sqliteGrouping = async () => {
    const text = await (await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${APP_SECRET}` } })).text();
    const counter = (name: string) => Number(new RegExp(`^nachtwacht_${name} (\\S+)$`, "m").exec(text)?.[1] ?? NaN);
    return { groups: counter("ingest_sqlite_transactions_total"), calls: counter("ingest_sqlite_grouped_requests_total") };
  };
  /** Requests per transaction from now until the returned function is called. */
  const groupingFrom = async () => {
    const before = await sqliteGrouping();
    return async () => {
      const after = await sqliteGrouping();
      return +((after.calls - before.calls) / Math.max(1, after.groups - before.groups)).toFixed(2);
    };
  };
  // Sleutels unique to this run, so a reused copy never sees one twice.
  const run = Date.now().toString(36);
  let serial = 0;
  const entry = (tenantId: number, prefix: string): Entry => ({
    tenantId,
    actor: `gebruiker${Math.floor(rand() * 500)}@example.nl`,
    action: ["dossier.bekeken", "dossier.gewijzigd", "factuur.verwijderd", "gebruiker.ingelogd"][Math.floor(rand() * 4)]!,
    subject: `dossier/${Math.floor(rand() * 1e6)}`,
    details: { ip: `10.${Math.floor(rand() * 256)}.${Math.floor(rand() * 256)}.${Math.floor(rand() * 256)}`, veld: "status", oud: "open", nieuw: "gesloten" },
    tijdstip: new Date(Date.now() - Math.floor(rand() * 60_000)).toISOString(),
    sleutel: `${run}-${prefix}-${serial++}`,
  });
  const pick = () => tenants[Math.floor(rand() * tenants.length)]!;
  const appendOne = async (prefix: string) => {
    const r = await fetch(`${url}/api/audit`, { method: "POST", headers: appHeaders, body: JSON.stringify({ entries: [entry(pick(), prefix)] }) });
    await r.arrayBuffer();
    return r.status;
  };
  const health = async () => {
    const r = await fetch(`${url}/health`);
    await r.arrayBuffer();
    return r.status;
  };

  // Warm-up: statements prepared, JIT warm, connections open.
  for (let i = 0; i < 200; i++) {
    await health();
    await appendOne("warm");
  }

  // 2. single-entry latency on the idle service, interleaved with /health
  log("idle: 2,000 single-entry appends interleaved with 2,000 GET /health, sequential");
  await mark("before-idle");
  const idleAppend: number[] = [];
  const idleHealth: number[] = [];
  let idleErrors = 0;
  for (let i = 0; i < 2000; i++) {
    let s = performance.now();
    if ((await health()) !== 200) idleErrors++;
    idleHealth.push(performance.now() - s);
    s = performance.now();
    if ((await appendOne("idle")) !== 200) idleErrors++;
    idleAppend.push(performance.now() - s);
  }
  const idleProbe = await mark("idle");

  // 1. throughput: 4 clients, 500-entry batches, for `seconds`; first with entries from
  //    any tenant (or `perBatch` tenants per batch), then once per --also-tenants-per-batch value
  const BATCH = 500;
  const CLIENTS = 4;
  const throughputPhase = async (tenantsPerBatch: number) => {
    const pregenerated = Math.ceil(seconds * 240); // batches for up to 120k entries/s
    log(`throughput: generating ${pregenerated} batches of ${BATCH} entries over ${tenantsPerBatch > 0 ? `${tenantsPerBatch} tenant(s) each, of` : ""} ${tenants.length} tenants`);
    const batches: { entries: Entry[]; body: string }[] = [];
    for (let b = 0; b < pregenerated; b++) {
      // Each entry from any tenant (the default), or from `tenantsPerBatch` tenants picked per batch.
      const own = tenantsPerBatch > 0 ? Array.from({ length: tenantsPerBatch }, pick) : null;
      const entries = Array.from({ length: BATCH }, () => entry(own ? own[Math.floor(rand() * own.length)]! : pick(), "tp"));
      batches.push({ entries, body: JSON.stringify({ entries }) });
    }
    log(`throughput: ${CLIENTS} clients for ${seconds} s`);
    await mark("before-throughput");
    const grouping = await groupingFrom();
    let nextBatch = 0;
    let stored = 0;
    let errors = 0;
    const done: number[] = [];
    const latency: number[] = [];
    // The WAL file's size meanwhile: bounded by the checkpoint thread (src/checkpointer.ts walStep).
    let walMaxBytes = 0;
    const walWatch = setInterval(() => {
      try {
        walMaxBytes = Math.max(walMaxBytes, statSync(`${dbPath}-wal`).size);
      } catch {}
    }, 100);
    const tp0 = performance.now();
    const stopAt = tp0 + seconds * 1000;
    await Promise.all(
      Array.from({ length: CLIENTS }, async () => {
        while (performance.now() < stopAt && nextBatch < batches.length) {
          const i = nextBatch++;
          const s = performance.now();
          const r = await fetch(`${url}/api/audit`, { method: "POST", headers: appHeaders, body: batches[i]!.body });
          const body = (await r.json()) as { opgeslagen?: number };
          latency.push(performance.now() - s);
          if (r.status !== 200) errors++;
          else {
            stored += body.opgeslagen!;
            done.push(i);
          }
        }
      }),
    );
    const tpSeconds = (performance.now() - tp0) / 1000;
    clearInterval(walWatch);
    const probe = await mark("throughput");
    const requestsPerTransaction = await grouping();
    const rate = stored / tpSeconds;
    log(
      `throughput: ${stored} entries in ${tpSeconds.toFixed(2)} s = ${Math.round(rate)} entries/s (${errors} errors, ${nextBatch >= batches.length ? "ran out of batches" : "time up"}); ` +
        `WAL file at most ${Math.round(walMaxBytes / 1e6)} MB; ${requestsPerTransaction} requests per transaction; event loop at most ${probe.maxMs} ms`,
    );
    return { batches, done, tpSeconds, stored, errors, latency, walMaxBytes, probe, rate, requestsPerTransaction };
  };
  const main = await throughputPhase(perBatch);
  const { batches, done, tpSeconds, stored, walMaxBytes } = main;
  const tpErrors = main.errors;
  const tpLatency = main.latency;
  const tpProbe = main.probe;
  const apiRate = main.rate;

  // 1. baselines, in this process on its own connection, while the service idles: the same batches
  done.sort((a, b) => a - b);
  const sqlite = new Database(dbPath, { strict: true });
  applyPragmas(sqlite);
  // The service's page cache (src/server.ts), so the baselines compare like with like.
  sqlite.run(`PRAGMA cache_size = -${SERVICE_CACHE_KIB}`);
  const inputs: ChainInput[][] = done.map((i) =>
    batches[i]!.entries.map((e) => ({ tenantId: e.tenantId, createdAt: e.tijdstip, actor: e.actor, action: e.action, subject: e.subject, details: canonicalJson(e.details) })),
  );
  log(`direct: appendEntries of the same ${inputs.length} batches in ${BATCH}-entry IMMEDIATE transactions`);
  let d0 = performance.now();
  let directEntries = 0;
  for (const chunk of inputs) directEntries += sqlite.transaction(() => appendEntries(sqlite, chunk).length).immediate();
  const directSeconds = (performance.now() - d0) / 1000;
  const directRate = directEntries / directSeconds;
  log(`direct: ${directEntries} entries in ${directSeconds.toFixed(2)} s = ${Math.round(directRate)} entries/s`);
  log("in-process storeAuditBatch (sleutels, no HTTP) of the same batches under new sleutels");
  const withKeys: AuditBatch[] = done.map((i) => ({ entries: batches[i]!.entries.map((e) => ({ ...e, sleutel: `${e.sleutel}-d` })) }));
  d0 = performance.now();
  let storeEntries = 0;
  for (const b of withKeys) {
    const prepared = prepareAuditBatch(b, new Date());
    storeEntries += (await writeTransaction(sqlite, () => storeAuditBatch(sqlite, prepared))).opgeslagen;
  }
  const storeSeconds = (performance.now() - d0) / 1000;
  const storeRate = storeEntries / storeSeconds;
  log(`storeAuditBatch: ${storeEntries} entries in ${storeSeconds.toFixed(2)} s = ${Math.round(storeRate)} entries/s`);
  sqlite.close();
  batches.length = 0;


  // 3 + 4. appends and /health probes while each job runs (and in a quiet window first)
  interface Window {
    label: string;
    seconds: number;
    status?: number;
    summary?: unknown;
    /** The job's HTTP request got no answer: the server closed it after this many seconds. */
    closedAfterSeconds?: number;
    append: Stats & { errors: number; failures: Record<string, number>; worst: { at: number; ms: number }[] };
    health: Stats & { errors: number; worst: { at: number; ms: number }[] };
    probe: ProbeReport;
  }
  const windows: Window[] = [];
  const underLoad = async (label: string, during: () => Promise<{ status?: number; summary?: unknown; closedAfterSeconds?: number }>): Promise<Window> => {
    await mark(`before-${label}`);
    const appendMs: { at: number; ms: number }[] = [];
    const healthMs: { at: number; ms: number }[] = [];
    let appendErrors = 0;
    let healthErrors = 0;
    // What the failed appends were answered (an HTTP status, or the fetch's error), and how often.
    const appendFailures: Record<string, number> = {};
    const inFlight = new Set<Promise<void>>();
    const fire = (send: () => Promise<number>, into: { at: number; ms: number }[], fail: (why: string) => void) => {
      const at = Date.now();
      const s = performance.now();
      const p = send().then(
        (status) => {
          into.push({ at, ms: performance.now() - s });
          if (status !== 200) fail(String(status));
        },
        (e) => fail(e instanceof Error ? e.name : String(e)),
      );
      inFlight.add(p);
      void p.finally(() => inFlight.delete(p));
    };
    // Open loop: one of each every 10 ms, on time, answered or not.
    const timer = setInterval(() => {
      fire(() => appendOne(`load-${label}`), appendMs, (why) => (appendErrors++, (appendFailures[why] = (appendFailures[why] ?? 0) + 1)));
      fire(health, healthMs, () => healthErrors++);
    }, PERIOD_MS);
    const w0 = performance.now();
    const r = await during();
    const secs = (performance.now() - w0) / 1000;
    clearInterval(timer);
    await Promise.all(inFlight);
    const probe = await mark(label);
    const worst = (xs: { at: number; ms: number }[]) => xs.slice().sort((a, b) => b.ms - a.ms).slice(0, 8).map((x) => ({ at: x.at, ms: +x.ms.toFixed(1) }));
    const w: Window = {
      label,
      seconds: +secs.toFixed(2),
      ...r,
      append: { ...stats(appendMs.map((x) => x.ms)), errors: appendErrors, failures: appendFailures, worst: worst(appendMs) },
      health: { ...stats(healthMs.map((x) => x.ms)), errors: healthErrors, worst: worst(healthMs) },
      probe,
    };
    log(
      `${label}: ${w.seconds} s${w.status ? ` (HTTP ${w.status})` : ""}; appends p99 ${w.append.p99Ms} max ${w.append.maxMs} ms (${w.append.n}, ${appendErrors} errors${appendErrors > 0 ? ` ${JSON.stringify(appendFailures)}` : ""}); ` +
        `/health max ${w.health.maxMs} ms; event-loop interval max ${probe.maxMs} ms`,
    );
    windows.push(w);
    return w;
  };

  await underLoad("quiet", async () => {
    await Bun.sleep(3000); // the length of the quiet window
    return {};
  });
  const summaries: Record<string, string[]> = {
    "audit-verificatie": ["gecontroleerd", "aantalGebroken"],
    weekrapport: ["verstuurd", "fouten", "overgeslagen", "bezorging"],
    "audit-retentie": ["verwijderd", "grens", "retentieDagen"],
    "beveiligingslog-retentie": ["verwijderd", "grens", "retentieDagen"],
    "db-onderhoud": ["integriteit", "vacuumStappen", "vrijgemaakt"],
  };
  for (const job of jobs) {
    log(`${job}: started over HTTP, with appends and /health every ${PERIOD_MS} ms`);
    await underLoad(job, async () => {
      const j0 = performance.now();
      let status: number;
      let body: Record<string, unknown>;
      let closedAfterSeconds: number | undefined;
      try {
        const r = await fetch(`${url}/api/cron/${job}`, { method: "POST", headers: { authorization: `Bearer ${CRON_SECRET}` }, keepalive: false });
        status = r.status;
        body = (await r.json()) as Record<string, unknown>;
      } catch (e) {
        // Elysia's default idleTimeout (30 s) closes the connection of a request that has
        // not been answered by then; the job goes on. Its end is read from job_runs.
        closedAfterSeconds = +((performance.now() - j0) / 1000).toFixed(2);
        log(`${job}: the connection was closed after ${closedAfterSeconds} s without an answer (${String(e)}); service alive: ${svc.exitCode === null}; waiting for the run's end in job_runs`);
        const ended = await runEnd(dbPath, job, 1800_000);
        status = ended.httpStatus;
        body = ended.samenvatting;
      }
      if (status !== 200) log(`${job}: HTTP ${status} ${JSON.stringify(body).slice(0, 600)}\n  service said: ${serviceLog.slice(-1500)}`);
      const summary = Object.fromEntries((summaries[job] ?? []).map((k) => [k, body[k]]));
      return { status, summary, ...(closedAfterSeconds !== undefined ? { closedAfterSeconds } : {}) };
    });
  }

  // 1b. throughput again with entries from fewer tenants per batch (an application that
  //     batches per tenant); last, so the job windows above see the database as before
  const concentrated: { tenantsPerBatch: number; entries: number; seconds: number; perSecond: number; errors: number; walMaxMb: number; requestLatency: Stats; requestsPerTransaction: number; eventLoopMaxMs: number }[] = [];
  for (const n of arg("also-tenants-per-batch", "").split(",").filter(Boolean).map(Number)) {
    const p = await throughputPhase(n);
    p.batches.length = 0;
    concentrated.push({ tenantsPerBatch: n, entries: p.stored, seconds: +p.tpSeconds.toFixed(2), perSecond: Math.round(p.rate), errors: p.errors, walMaxMb: Math.round(p.walMaxBytes / 1e6), requestLatency: stats(p.latency), requestsPerTransaction: p.requestsPerTransaction, eventLoopMaxMs: p.probe.maxMs });
  }

  // 1c. many small requests: SMALL_CLIENTS clients posting single-entry batches (an
  //     application on several servers sending each entry as it happens), against the
  //     same requests from one client, one at a time (no two ever share a transaction)
  const SMALL_CLIENTS = 32;
  const smallPhase = async (clients: number, label: string) => {
    const latency: number[] = [];
    let stored = 0;
    let errors = 0;
    const grouping = await groupingFrom();
    const t0 = performance.now();
    const stopAt = t0 + 5000;
    await Promise.all(
      Array.from({ length: clients }, async () => {
        while (performance.now() < stopAt) {
          const s = performance.now();
          const status = await appendOne(`small-${label}`);
          latency.push(performance.now() - s);
          if (status === 200) stored++;
          else errors++;
        }
      }),
    );
    const secs = (performance.now() - t0) / 1000;
    const requestsPerTransaction = await grouping();
    log(`small requests, ${clients} client(s): ${stored} single-entry appends in ${secs.toFixed(2)} s = ${Math.round(stored / secs)}/s (${errors} errors); ${requestsPerTransaction} requests per transaction`);
    return { clients, requests: stored, perSecond: Math.round(stored / secs), errors, latency: stats(latency), requestsPerTransaction };
  };
  const small = { one: await smallPhase(1, "one"), many: await smallPhase(SMALL_CLIENTS, "many") };

  svc.kill("SIGTERM");
  const exit = await svc.exited;
  await drained;
  const mail = await sink.stop();
  smtpSink = null;
  if (exit !== 0) console.error(serviceLog);
  report({
    tenants: tenants.length,
    entriesBefore,
    serviceExit: exit,
    idle: { append: stats(idleAppend), health: stats(idleHealth), errors: idleErrors, probe: idleProbe },
    throughput: {
      tenantsPerBatch: perBatch > 0 ? perBatch : tenants.length,
      clients: CLIENTS,
      batch: BATCH,
      seconds: +tpSeconds.toFixed(2),
      entries: stored,
      perSecond: Math.round(apiRate),
      errors: tpErrors,
      walMaxMb: Math.round(walMaxBytes / 1e6),
      requestLatency: stats(tpLatency),
      requestsPerTransaction: main.requestsPerTransaction,
      probe: tpProbe,
      direct: { entries: directEntries, seconds: +directSeconds.toFixed(2), perSecond: Math.round(directRate) },
      storeAuditBatch: { entries: storeEntries, seconds: +storeSeconds.toFixed(2), perSecond: Math.round(storeRate) },
      concentrated,
    },
    small,
    windows,
    smtpReceived: mail.received,
  });
}

/** Polls (50 ms steps, bounded) the newest run of `job` in job_runs until it has ended: its status and summary. */
async function runEnd(dbPath: string, job: string, deadlineMs: number): Promise<{ httpStatus: number; samenvatting: Record<string, unknown> }> {
  const db = new Database(dbPath, { readonly: true });
  try {
    const until = performance.now() + deadlineMs;
    for (;;) {
      const row = db.query("SELECT beeindigd, http_status AS httpStatus, samenvatting FROM job_runs WHERE job = ? ORDER BY id DESC LIMIT 1").get(job) as {
        beeindigd: string | null;
        httpStatus: number | null;
        samenvatting: string | null;
      } | null;
      if (row?.beeindigd) return { httpStatus: row.httpStatus ?? 0, samenvatting: row.samenvatting ? (JSON.parse(row.samenvatting) as Record<string, unknown>) : {} };
      if (performance.now() > until) throw new Error(`${job} did not end within ${deadlineMs / 1000} s`);
      await Bun.sleep(50); // polling the run history for the job's end
    }
  } finally {
    db.close();
  }
}

interface ProbeReport {
  probe: string;
  ticks: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  stallsOver30: number;
  top: { at: number; ms: number }[];
  slow: { at: number; ms: number; what: string }[];
  slowByKind: Record<string, { n: number; totalMs: number; maxMs: number }>;
  during: { stall: { at: number; ms: number }; calls: { offsetMs: number; ms: number; what: string }[] }[];
}

/** A port that was free a moment ago. */
async function freePort(): Promise<number> {
  const l = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const p = l.port;
  l.stop(true);
  return p;
}
