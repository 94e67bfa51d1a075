// The host application during retention: a separate process inserting one row every
// 10 ms (a login attempt, or an audit entry through appendAuditEntry) and timing each
// insert, lock waits included. Prints "ready", and on SIGTERM one JSON line with the
// waits (and when the longest began, ms since the epoch). Its busy timeout is long so an unbatched DELETE's whole wait is measured
// instead of ending in SQLITE_BUSY.
//
//   bun bench/writer.ts --db <file> --kind login|audit [--interval 10]
import { appendAuditEntry, recordLoginAttempt } from "../src/audit/chain.ts";
import { openStore } from "../src/db.ts";
import { arg, NOW } from "./lib.ts";

const store = openStore(arg("db"), NOW);
const { sqlite } = store;
sqlite.run("PRAGMA busy_timeout = 600000");
const kind = arg("kind");
const interval = Number(arg("interval", "10"));
const tenants = (sqlite.query("SELECT id FROM tenants ORDER BY id").all() as { id: number }[]).map((t) => t.id);

const waits: number[] = [];
/** When the longest wait began (ms since the epoch), to place it in the job's phases. */
let longest = { ms: -1, at: 0 };
let stop = false;
process.on("SIGTERM", () => {
  stop = true;
});

let i = 0;
function insertOne() {
  // after NOW, so no retention run deletes what the writer adds
  const at = new Date(NOW.getTime() + 1000 + i++).toISOString();
  if (kind === "login") {
    recordLoginAttempt(sqlite, { account: `schrijver${i % 100}@example.nl`, ip: "192.0.2.200", gelukt: true, tenantId: tenants[i % tenants.length]!, tijdstip: at });
  } else {
    appendAuditEntry(sqlite, { tenantId: tenants[(i * 7919) % tenants.length]!, actor: "bench-schrijver", action: "dossier.bekeken", subject: `dossier/${i}`, details: { i }, createdAt: at });
  }
}

insertOne(); // warm up the statements before the clock starts
console.log("ready");
let next = performance.now();
while (!stop) {
  const t0 = performance.now();
  const at = Date.now();
  insertOne();
  const ms = performance.now() - t0;
  waits.push(ms);
  if (ms > longest.ms) longest = { ms, at };
  next += interval;
  await Bun.sleep(Math.max(0, next - performance.now()));
}
waits.sort((a, b) => a - b);
const q = (p: number) => +(waits[Math.min(waits.length - 1, Math.floor(p * waits.length))] ?? 0).toFixed(1);
console.log(JSON.stringify({ inserts: waits.length, maxMs: q(1), p99Ms: q(0.99), p50Ms: q(0.5), maxAt: longest.at }));
store.close();
