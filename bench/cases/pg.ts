// PostgreSQL at scale, against a throw-away cluster started here (test/pg.ts):
//   migrate-to   the cached SQLite database (with its anchor file) copied and proved
//   verify       every chain on PostgreSQL (verifyTenantsPg: COPY per range of tenants,
//                two worker threads, the Merkle roots against the signed checkpoints)
//   floor        COPY (the same rows, same order) TO STDOUT, every byte hashed, over the
//                same two streams: what reading the rows costs at the least
//   row floor    the same COPY on two worker threads, each row's canonical bytes hashed
//                and pushed into its tenant's tree (bench/pg-floor-worker.ts, as
//                bench/floor.ts on SQLite): what any verifier must do at the least
//   ingest       appendEntriesPg in batches of 500 from 4 concurrent clients (the
//                baseline), then the same through the write API: the service as its own
//                process (`bun src/index.ts` with DATABASE_URL), 4 HTTP clients on
//                loopback posting 500-entry batches with a sleutel per entry
//   retention    beveiligingslog-retentie's deletion (src/pg/retention.ts) and
//                audit-retentie's (src/pg/audit-retention.ts: each prefix checked and
//                proved against a signed checkpoint, then signed records, then the
//                prefixes deleted) against one DELETE of the
//                same rows, each on its own copy of the database (CREATE DATABASE …
//                TEMPLATE) while bench/pg-writer.ts writes every 10 ms; and beside them
//                what an audit deletion that checks what it deletes costs here at the
//                least (checkedDelete below), to tell how near the target a sound job can get
//
//   bun bench/cases/pg.ts --db <file> --ingest 200000
import { SQL } from "bun";
import { compareWithFile } from "../../src/audit/anchor-check.ts";
import { parseSignerKey, parseVerifierKey } from "../../src/audit/note.ts";
import { appendEntriesPg, verifyTenantsPg } from "../../src/pg/chain.ts";
import { migrateToPostgres } from "../../src/pg/migrate-to.ts";
import { deleteOldLoginAttemptsPg } from "../../src/pg/retention.ts";
import { deleteOldAuditEntriesPg } from "../../src/pg/audit-retention.ts";
import type { RetentionPhases } from "../../src/audit/retention.ts";
import { copyFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { retentionBoundary } from "../../src/time.ts";
import { freePort } from "../../test/binary.ts";
import { startCluster } from "../../test/pg.ts";
import { cpuMeter, processCpu } from "../cpu.ts";
import { anchorFileOf, arg, BENCH_SIGNING_KEY, BUN, floorOnWorkers, NOW, peakRssMb, report } from "../lib.ts";

const db = arg("db");
const ingestTotal = Number(arg("ingest", "200000"));
// Server settings for this run's cluster, `name=value,name=value` (the default: none, as initdb leaves them).
const serverSettings = Object.fromEntries(
  arg("pg-settings", "")
    .split(",")
    .filter((kv) => kv !== "")
    .map((kv) => kv.split("=", 2) as [string, string]),
);
const signer = parseSignerKey(BENCH_SIGNING_KEY);
const verifiers = [parseVerifierKey(signer.verifierKey)];
const cluster = await startCluster({ settings: serverSettings });
try {
  const url = await cluster.createDatabase("bench");
  let t0 = performance.now();
  const moved = await migrateToPostgres({ dbPath: db, anchorPath: anchorFileOf(db), url, verifiers, log: () => {}, parallel: 2 });
  const migrateSeconds = (performance.now() - t0) / 1000;
  if (moved.uitkomst !== "klaar") throw new Error(`migrate-to: ${moved.uitkomst}: ${"toelichting" in moved ? moved.toelichting : ""}`);
  const sql = new SQL(url, { max: 6 });
  await sql`VACUUM ANALYZE`;
  const tenants = ((await sql`SELECT id FROM tenants ORDER BY id`) as { id: number }[]).map((t) => t.id);
  const checkpoints = (await compareWithFile(db, anchorFileOf(db), verifiers)).checkpoints;
  const tasks = tenants.map((tenantId) => ({ tenantId, checkpoint: checkpoints.get(tenantId) ?? null }));

  // Warm the server's cache once (both runs below then read from memory alike), streamed.
  const warm = sql.unsafe("COPY (SELECT * FROM audit_entries) TO STDOUT").readable().getReader();
  while (!(await warm.read()).done);

  const floor = async (streams: number) => {
    const start = performance.now();
    const per = Math.ceil(tenants.length / streams);
    let bytes = 0;
    await Promise.all(
      Array.from({ length: streams }, async (_, i) => {
        const from = tenants[i * per];
        const to = tenants[Math.min((i + 1) * per, tenants.length) - 1];
        if (from === undefined || to === undefined) return;
        const hasher = new Bun.CryptoHasher("sha256");
        const query = `COPY (SELECT seq, id, created_at, actor, action, subject, details, prev_hash, hash FROM audit_entries WHERE tenant_id BETWEEN ${from} AND ${to} ORDER BY tenant_id, seq) TO STDOUT`;
        const reader = sql.unsafe(query).readable().getReader();
        for (let r = await reader.read(); !r.done; r = await reader.read()) {
          hasher.update(r.value);
          bytes += r.value.byteLength;
        }
        hasher.digest();
      }),
    );
    return { seconds: (performance.now() - start) / 1000, bytes };
  };

  // Per entry, over two worker threads (the verification's count), a shared queue of
  // tenant ranges as its pool has.
  const rowFloor = async (threads: number) => {
    const start = performance.now();
    const cpu = cpuMeter();
    const { n: entries, mismatches } = await floorOnWorkers(new URL("../pg-floor-worker.ts", import.meta.url), { url }, tenants, threads);
    if (mismatches > 0) throw new Error(`row floor: ${mismatches} hashes differ`);
    return { seconds: (performance.now() - start) / 1000, entries, cpu: cpu() };
  };

  const verify = async () => {
    const start = performance.now();
    const results = await verifyTenantsPg(sql, tasks, { parallel: 2, verifiers, workers: { url, count: 2 } });
    let entries = 0;
    for (const r of results.values()) {
      if (!r.intact) throw new Error(`a chain does not verify on PostgreSQL: ${JSON.stringify(r.fout)}`);
      entries += r.aantalEntries;
    }
    return { seconds: (performance.now() - start) / 1000, entries };
  };

  const f1 = await floor(2);
  const v1 = await verify();
  const f2 = await floor(2);
  const v2 = await verify();
  const floorOne = await floor(1);
  const r1 = await rowFloor(2);
  const r2 = await rowFloor(2);

  // Ingestion: 4 clients, each its own connection, batches of 500 over every tenant.
  const ingestWal = await walActivity(sql);
  const clients = 4;
  const batch = 500;
  const batchesPerClient = Math.max(1, Math.round(ingestTotal / clients / batch));
  t0 = performance.now();
  const batchMs: number[] = [];
  await Promise.all(
    Array.from({ length: clients }, async (_, c) => {
      const conn = new SQL(url, { max: 1 });
      try {
        for (let b = 0; b < batchesPerClient; b++) {
          const createdAt = new Date().toISOString();
          const inputs = Array.from({ length: batch }, (_, i) => ({
            tenantId: tenants[(c * 7919 + b * batch + i) % tenants.length]!,
            createdAt,
            actor: `bench${c}@example.nl`,
            action: "bench.append",
            subject: `b/${c}/${b}/${i}`,
            details: JSON.stringify({ c, b, i }),
          }));
          const s = performance.now();
          await conn.begin((tx) => appendEntriesPg(tx, inputs));
          batchMs.push(performance.now() - s);
        }
      } finally {
        await conn.close();
      }
    }),
  );
  const ingestSeconds = (performance.now() - t0) / 1000;
  const ingestWalUsed = await ingestWal();
  batchMs.sort((a, b) => a - b);
  const apiWal = await walActivity(sql);
  const api = { ...(await ingestThroughApi(url, tenants, clients, batch, batchesPerClient)), wal: await apiWal() };
  await sql.close();

  // Retention of half the login attempts, each mode on a fresh copy, a writer beside it.
  // Both clocks run to the end of a CHECKPOINT after the deletion (what it left in the
  // WAL written into the tables' files), as on SQLite; the statement alone is kept too.
  const retention = async (kind: "login" | "audit", mode: "delete" | "job" | "checked") => {
    const name = `bench_${kind}_${mode}`;
    const copyUrl = await cluster.createDatabase(name, { template: "bench" });
    // The job appends retention records: to its own copy of the anchor file.
    const anchorCopy = `${anchorFileOf(db)}.${name}`;
    copyFileSync(anchorFileOf(db), anchorCopy);
    const conn = new SQL(copyUrl, { max: 2 });
    try {
      await conn`CHECKPOINT`;
      const writer = Bun.spawn([BUN, new URL("../pg-writer.ts", import.meta.url).pathname, "--url", copyUrl, "--kind", kind], { stdout: "pipe", stderr: "inherit" });
      const reader = writer.stdout.getReader();
      const decoder = new TextDecoder();
      let out = "";
      while (!out.includes("ready\n")) {
        const r = await reader.read();
        if (r.done) throw new Error("pg-writer exited before it was ready");
        out += decoder.decode(r.value, { stream: true });
      }
      out = out.slice(out.indexOf("ready\n") + 6);
      await Bun.sleep(300);
      const start = performance.now();
      const cpu = cpuMeter();
      const writerCpu0 = processCpu(writer.pid);
      const batches: number[] = [];
      const onBatch = (b: { lockMs: number }) => batches.push(b.lockMs);
      let phases: RetentionPhases | null = null;
      const onPhases = (p: RetentionPhases) => void (phases = p);
      const grens = retentionBoundary(NOW, kind === "login" ? 90 : 2555);
      const deleted =
        mode === "checked"
          ? await checkedDelete(copyUrl, grens, tenants)
          : mode === "delete"
          ? kind === "login"
            ? ((await conn`WITH gone AS (DELETE FROM login_attempts WHERE tijdstip < ${grens} RETURNING 1) SELECT count(*)::int AS n FROM gone`) as { n: number }[])[0]!.n
            : ((await conn`WITH gone AS (DELETE FROM audit_entries WHERE created_at < ${grens} RETURNING 1) SELECT count(*)::int AS n FROM gone`) as { n: number }[])[0]!.n
          : kind === "login"
            ? await deleteOldLoginAttemptsPg(conn, grens, { onBatch })
            : (await deleteOldAuditEntriesPg(conn, grens, NOW, { path: anchorCopy, keys: { signer, verifiers }, retentieDagen: 2555, workers: 2, url: copyUrl }, { onBatch, onPhases })).verwijderd;
      const statementSeconds = (performance.now() - start) / 1000;
      await conn`CHECKPOINT`;
      const seconds = (performance.now() - start) / 1000;
      // The writer beside it is no part of the deletion's cost.
      const used = cpu();
      const writerCpu = processCpu(writer.pid) - writerCpu0;
      const coreSeconds = { server: +(used.machine - used.own - writerCpu).toFixed(2), bench: used.own, writer: +writerCpu.toFixed(2) };
      await Bun.sleep(300);
      writer.kill("SIGTERM");
      for (let r = await reader.read(); !r.done; r = await reader.read()) out += decoder.decode(r.value, { stream: true });
      await writer.exited;
      const waits = JSON.parse(out.trim().split("\n").at(-1)!) as { inserts: number; maxMs: number; p99Ms: number };
      batches.sort((a, b) => a - b);
      return { seconds, statementSeconds, deleted, writer: waits, batches: batches.length, batchMsMax: batches.at(-1) ?? null, phases, coreSeconds };
    } finally {
      await conn.close();
      await cluster.dropDatabase(name);
      rmSync(anchorCopy, { force: true });
    }
  };
  const retentionDelete = await retention("login", "delete");
  const retentionJob = await retention("login", "job");
  const auditRetentionDelete = await retention("audit", "delete");
  const auditRetentionJob = await retention("audit", "job");
  const auditRetentionChecked = await retention("audit", "checked");
  report({
    migrateSeconds,
    copiedRows: moved.tabellen.reduce((n, t) => n + t.rijen, 0),
    entries: v1.entries,
    verifySeconds: Math.min(v1.seconds, v2.seconds),
    verifyRuns: [v1.seconds, v2.seconds],
    floorSeconds: Math.min(f1.seconds, f2.seconds),
    floorRuns: [f1.seconds, f2.seconds],
    floorOneSeconds: floorOne.seconds,
    floorBytes: f1.bytes,
    rowFloorSeconds: Math.min(r1.seconds, r2.seconds),
    rowFloorRuns: [r1.seconds, r2.seconds],
    rowFloorEntries: r1.entries,
    rowFloorCpu: r1.seconds <= r2.seconds ? r1.cpu : r2.cpu,
    ingestEntries: clients * batchesPerClient * batch,
    ingestSeconds,
    ingestBatchP99Ms: batchMs[Math.floor(batchMs.length * 0.99)] ?? null,
    ingestWal: ingestWalUsed,
    serverSettings,
    api,
    retentionDelete,
    retentionJob,
    auditRetentionDelete,
    auditRetentionJob,
    auditRetentionChecked,
    peakRssMb: peakRssMb(),
  });
} finally {
  await cluster.stop();
}

/**
 * What the server wrote to its WAL from now until the returned function is called: bytes,
 * full-page images (the first change of a page after a checkpoint writes the whole page)
 * and checkpoints (requested: by max_wal_size; timed: checkpoint_timeout).
 */
async function walActivity(sql: SQL): Promise<() => Promise<{ mb: number; fullPages: number; checkpointsRequested: number; checkpointsTimed: number }>> {
  const read = async () =>
    ((await sql`SELECT w.wal_bytes::float8 AS bytes, w.wal_fpi::float8 AS fpi, b.checkpoints_req::float8 AS req, b.checkpoints_timed::float8 AS timed
      FROM pg_stat_wal w, pg_stat_bgwriter b`) as { bytes: number; fpi: number; req: number; timed: number }[])[0]!;
  const before = await read();
  return async () => {
    const after = await read();
    return { mb: Math.round((after.bytes - before.bytes) / 1e5) / 10, fullPages: after.fpi - before.fpi, checkpointsRequested: after.req - before.req, checkpointsTimed: after.timed - before.timed };
  };
}

/**
 * The least a deletion of the audit entries older than `grens` costs here when it checks
 * what it deletes: bench/pg-checked-delete-worker.ts on two threads over a queue of
 * tenant ranges (one `DELETE … RETURNING` each, every row's hash recomputed, links and
 * the tree per tenant, rolled back when anything does not check out), as verification
 * runs on two. It leaves out what audit-retentie needs besides (the anchor file, the
 * tree's root at a signed checkpoint over the entries kept, the signed records), so a
 * job that checks what it deletes can hardly be faster on this machine.
 */
async function checkedDelete(url: string, grens: string, tenants: readonly number[]): Promise<number> {
  const r = await floorOnWorkers(new URL("../pg-checked-delete-worker.ts", import.meta.url), { url, grens }, tenants, 2);
  if (r.mismatches > 0) throw new Error(`checkedDelete: ${r.mismatches} rows did not check out`);
  return r.n;
}

/**
 * The write API on PostgreSQL: the service as its own process on the bench database, and
 * `clients` HTTP clients each posting `batches` batches of `batch` entries over every
 * tenant (each entry with its own sleutel, as applications retrying after a timeout do).
 */
async function ingestThroughApi(url: string, tenants: number[], clients: number, batch: number, batches: number) {
  const dir = mkdtempSync(join(tmpdir(), "nachtwacht-bench-api-"));
  const port = freePort();
  const appSecret = "bench-app-" + "1".repeat(54);
  const service = Bun.spawn([BUN, new URL("../../src/index.ts", import.meta.url).pathname], {
    env: {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      HOME: dir,
      CRON_SECRET: "bench-" + "0".repeat(58),
      APP_SECRET: appSecret,
      AUDIT_ANKER_SLEUTEL: BENCH_SIGNING_KEY,
      AUDIT_ANKER_BESTAND: join(dir, "ankers.jsonl"),
      DATABASE_URL: url,
      DATABASE_PATH: join(dir, "data", "unused.db"),
      PORT: String(port),
      HOST: "127.0.0.1",
    },
    stdout: "ignore",
    stderr: "inherit",
  });
  try {
    const base = `http://127.0.0.1:${port}`;
    for (let tries = 0; ; tries++) {
      if (service.exitCode !== null || tries > 1500) throw new Error("the service on PostgreSQL did not start");
      try {
        if ((await fetch(`${base}/health`)).ok) break;
      } catch {
        await Bun.sleep(20); // polling /health while the service starts
      }
    }
    const run = Date.now().toString(36);
    const bodies = Array.from({ length: clients }, (_, c) =>
      Array.from({ length: batches }, (_, b) =>
        JSON.stringify({
          entries: Array.from({ length: batch }, (_, i) => ({
            tenantId: tenants[(c * 7919 + b * batch + i + 13) % tenants.length]!,
            actor: `api${c}@example.nl`,
            action: "bench.api",
            subject: `a/${c}/${b}/${i}`,
            details: { c, b, i },
            sleutel: `${run}-${c}-${b}-${i}`,
          })),
        }),
      ),
    );
    const headers = { authorization: `Bearer ${appSecret}`, "content-type": "application/json" };
    const batchMs: number[] = [];
    const t0 = performance.now();
    await Promise.all(
      bodies.map(async (mine) => {
        for (const body of mine) {
          const s = performance.now();
          const r = await fetch(`${base}/api/audit`, { method: "POST", headers, body });
          if (r.status !== 200) throw new Error(`POST /api/audit: ${r.status} ${await r.text()}`);
          await r.arrayBuffer();
          batchMs.push(performance.now() - s);
        }
      }),
    );
    const seconds = (performance.now() - t0) / 1000;
    batchMs.sort((a, b) => a - b);
    return { entries: clients * batches * batch, seconds, batchP99Ms: batchMs[Math.floor(batchMs.length * 0.99)] ?? null };
  } finally {
    service.kill("SIGTERM");
    await service.exited;
    rmSync(dir, { recursive: true, force: true });
  }
}
