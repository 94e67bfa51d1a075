// Would another clustering of the audit entries reach 50,000 entries/s with 500-entry
// batches spread over 1,000 tenants? A prototype, not the service: the write path alone,
// in one process, with no HTTP, JSON or validation.
//
//   direct  what the service does: each entry into audit_entries, a WITHOUT ROWID table
//           clustered by (tenant_id, seq), and its two tenant-ordered indexes (created_at,
//           sleutel). A spread batch dirties about three pages per entry.
//   inbox   each entry into an arrival-ordered table (rowid order: a spread batch fills
//           consecutive pages), the chain heads in a table of their own; every
//           --flush-every entries the inbox is moved into audit_entries in
//           (tenant_id, seq) order, --chunk tenants per transaction, so each tenant's
//           pages are written once per flush instead of once per entry.
//
// Both with the service's pragmas (WAL, synchronous FULL, no automatic checkpoint, 64 MB
// page cache) and its checkpoint thread (src/checkpointer.ts). The baseline is `direct`,
// measured first in the same run. Writes into --db: run it on a copy of the L database.
//
//   cp .bench-data/L-seed42-*.db /tmp/L.db
//   bun bench/clustering.ts --db /tmp/L.db [--seconds 15] [--flush-every 50000] [--chunk 100] [--keys serial|uuid]
//
// One JSON line per figure: {"bench":"clustering","metric","value","unit","baseline","ratio"}.
import { Database } from "bun:sqlite";
import { canonicalText, sha256Hex } from "../src/audit/chain.ts";
import { startCheckpointer } from "../src/checkpointer.ts";
import { SERVICE_CACHE_KIB } from "../src/server.ts";

const arg = (name: string, fallback: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1]! : fallback;
};
const DB = arg("db", "");
if (!DB) throw new Error("--db <copy of the L database> is required: this bench writes into it");
const SECONDS = Number(arg("seconds", "15"));
const FLUSH_EVERY = Number(arg("flush-every", "50000"));
const CHUNK = Number(arg("chunk", "100"));
const KEYS = arg("keys", "serial");
const BATCH = 500;

const db = new Database(DB);
db.run("PRAGMA busy_timeout = 5000");
db.run("PRAGMA journal_mode = WAL");
db.run("PRAGMA synchronous = FULL");
db.run("PRAGMA wal_autocheckpoint = 0");
db.run(`PRAGMA cache_size = -${SERVICE_CACHE_KIB}`);
const checkpointer = startCheckpointer(db, DB);

const COLUMNS = "tenant_id, seq, id, created_at, actor, action, subject, details, prev_hash, hash, sleutel, inhoud";
db.run(`CREATE TABLE IF NOT EXISTS bench_inbox (rid INTEGER PRIMARY KEY, tenant_id INTEGER NOT NULL, seq INTEGER NOT NULL, id INTEGER NOT NULL,
  created_at TEXT NOT NULL, actor TEXT NOT NULL, action TEXT NOT NULL, subject TEXT NOT NULL, details TEXT NOT NULL,
  prev_hash TEXT NOT NULL, hash TEXT NOT NULL, sleutel TEXT, inhoud TEXT)`);
db.run("CREATE UNIQUE INDEX IF NOT EXISTS bench_inbox_sleutel ON bench_inbox (tenant_id, sleutel) WHERE sleutel IS NOT NULL");
db.run("CREATE INDEX IF NOT EXISTS bench_inbox_tenant ON bench_inbox (tenant_id, seq)");
db.run("CREATE TABLE IF NOT EXISTS bench_heads (tenant_id INTEGER PRIMARY KEY, seq INTEGER NOT NULL, hash TEXT NOT NULL)");
// A run stopped halfway leaves its inbox: move it first, so every chain stays whole.
db.run(`INSERT INTO audit_entries (${COLUMNS}) SELECT ${COLUMNS} FROM bench_inbox ORDER BY tenant_id, seq`);
db.run("DELETE FROM bench_inbox");

const tenants = (db.query("SELECT id FROM tenants ORDER BY id").all() as { id: number }[]).map((r) => r.id);
const heads = new Map<number, { seq: number; hash: string }>();
for (const r of db.query("SELECT e.tenant_id AS t, e.seq, e.hash FROM audit_entries e WHERE e.seq = (SELECT max(seq) FROM audit_entries WHERE tenant_id = e.tenant_id) AND e.tenant_id IN (SELECT id FROM tenants)").all() as { t: number; seq: number; hash: string }[])
  heads.set(r.t, { seq: r.seq, hash: r.hash });
db.run("DELETE FROM bench_heads");
const putHead = db.query("INSERT INTO bench_heads (tenant_id, seq, hash) VALUES (?, ?, ?) ON CONFLICT (tenant_id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash");
for (const [t, h] of heads) putHead.run(t, h.seq, h.hash);
let nextId = (db.query("SELECT max(id) AS m FROM audit_entries").get() as { m: number }).m + 1;

let seed = 42;
const rand = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;
const run = Date.now();
let serial = 0;
const findKey = (table: string) => db.query(`SELECT seq FROM ${table} WHERE tenant_id = ? AND sleutel = ?`);
const inMain = findKey("audit_entries");
const inInbox = findKey("bench_inbox");

function appendBatch(into: "audit_entries" | "bench_inbox") {
  const insert = db.query(`INSERT INTO ${into} (${COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`);
  const createdAt = new Date().toISOString();
  const touched = new Set<number>();
  db.run("BEGIN IMMEDIATE");
  for (let i = 0; i < BATCH; i++) {
    const tenantId = tenants[Math.floor(rand() * tenants.length)]!;
    const sleutel = KEYS === "uuid" ? crypto.randomUUID() : `b${run}-${serial++}`;
    // The idempotency lookups the write API makes: the key must be new to the tenant.
    if (inMain.get(tenantId, sleutel) || (into === "bench_inbox" && inInbox.get(tenantId, sleutel))) throw new Error(`sleutel ${sleutel} exists`);
    const head = heads.get(tenantId) ?? { seq: 0, hash: "0".repeat(64) };
    const details = JSON.stringify({ ip: `10.${Math.floor(rand() * 256)}.${Math.floor(rand() * 256)}.1`, nieuw: "gesloten", oud: "open", veld: "status" });
    const fields = { tenantId, seq: head.seq + 1, createdAt, actor: `gebruiker-${i % 50}`, action: "status.gewijzigd", subject: `zaak-${i}`, details, prevHash: head.hash };
    const hash = sha256Hex(canonicalText(fields));
    insert.run(tenantId, fields.seq, nextId++, createdAt, fields.actor, fields.action, fields.subject, details, head.hash, hash, sleutel, sha256Hex(details));
    heads.set(tenantId, { seq: fields.seq, hash });
    touched.add(tenantId);
  }
  if (into === "bench_inbox") for (const t of touched) putHead.run(t, heads.get(t)!.seq, heads.get(t)!.hash);
  db.run("COMMIT");
}

/** Moves the inbox into audit_entries, CHUNK tenants per transaction; returns each transaction's ms. */
function flush(): number[] {
  const upto = (db.query("SELECT max(rid) AS m FROM bench_inbox").get() as { m: number | null }).m;
  if (upto === null) return [];
  const move = db.query(`INSERT INTO audit_entries (${COLUMNS}) SELECT ${COLUMNS} FROM bench_inbox WHERE tenant_id BETWEEN ? AND ? AND rid <= ? ORDER BY tenant_id, seq`);
  const drop = db.query("DELETE FROM bench_inbox WHERE tenant_id BETWEEN ? AND ? AND rid <= ?");
  const took: number[] = [];
  for (let i = 0; i < tenants.length; i += CHUNK) {
    const lo = tenants[i]!;
    const hi = tenants[Math.min(i + CHUNK, tenants.length) - 1]!;
    const t0 = performance.now();
    db.run("BEGIN IMMEDIATE");
    move.run(lo, hi, upto);
    drop.run(lo, hi, upto);
    db.run("COMMIT");
    took.push(performance.now() - t0);
  }
  return took;
}

const quantile = (xs: number[], q: number) => (xs.length ? [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * q))]! : 0);

async function measure(mode: "direct" | "inbox") {
  const batchMs: number[] = [];
  const flushMs: number[] = [];
  let entries = 0;
  let sinceFlush = 0;
  const t0 = performance.now();
  while (performance.now() - t0 < SECONDS * 1000) {
    const b0 = performance.now();
    appendBatch(mode === "direct" ? "audit_entries" : "bench_inbox");
    batchMs.push(performance.now() - b0);
    entries += BATCH;
    sinceFlush += BATCH;
    if (mode === "inbox" && sinceFlush >= FLUSH_EVERY) {
      flushMs.push(...flush());
      sinceFlush = 0;
    }
    await new Promise((r) => setImmediate(r)); // the checkpoint thread's messages
  }
  if (mode === "inbox") flushMs.push(...flush()); // the run ends with every entry in place
  const seconds = (performance.now() - t0) / 1000;
  return { perSecond: entries / seconds, batchP50: quantile(batchMs, 0.5), batchP99: quantile(batchMs, 0.99), flushSeconds: flushMs.reduce((a, b) => a + b, 0) / 1000, flushMax: Math.max(0, ...flushMs), entries };
}

const line = (metric: string, value: number, unit: string, baseline?: number, note?: string) =>
  console.log(JSON.stringify({ bench: "clustering", metric, value: +value.toFixed(1), unit, ...(baseline ? { baseline: +baseline.toFixed(1), ratio: +(value / baseline).toFixed(2) } : {}), keys: KEYS, flushEvery: FLUSH_EVERY, chunk: CHUNK, ...(note ? { note } : {}) }));

const direct = await measure("direct");
line("direct entries/s", direct.perSecond, "entries/s", undefined, `batch p50 ${direct.batchP50.toFixed(1)} ms, p99 ${direct.batchP99.toFixed(1)} ms`);
const inbox = await measure("inbox");
line("inbox entries/s", inbox.perSecond, "entries/s", direct.perSecond, `batch p50 ${inbox.batchP50.toFixed(1)} ms, p99 ${inbox.batchP99.toFixed(1)} ms; flushes ${inbox.flushSeconds.toFixed(2)} s of the run, longest transaction ${inbox.flushMax.toFixed(1)} ms`);
line("inbox flush µs/entry", (inbox.flushSeconds * 1e6) / inbox.entries, "µs/entry");
line("inbox append-only entries/s", (BATCH * 1000) / inbox.batchP50, "entries/s", direct.perSecond, "one batch's p50 alone: the ceiling were the move free");

// Every chain the run wrote is whole: each entry's prev_hash is its predecessor's hash.
const broken = db.query("SELECT count(*) AS n FROM audit_entries e JOIN audit_entries p ON p.tenant_id = e.tenant_id AND p.seq = e.seq - 1 WHERE e.id >= ? AND e.prev_hash <> p.hash").get(nextId - direct.entries - inbox.entries) as { n: number };
if (broken.n > 0) throw new Error(`${broken.n} entries do not link to their predecessor`);
await checkpointer.stop();
db.close();
