// The host application during retention on PostgreSQL (bench/cases/pg.ts): a separate
// process writing every 10 ms on its own connection — a login attempt, or (--kind audit)
// an audit entry appended to a tenant's chain — and timing each write, waits included.
// Prints "ready", and on SIGTERM one JSON line with the waits. The URL is the throw-away
// bench cluster's (trust authentication, no password).
//
//   bun bench/pg-writer.ts --url postgres://nw@127.0.0.1:PORT/db [--kind login|audit]
import { SQL } from "bun";
import { appendEntriesPg } from "../src/pg/chain.ts";
import { arg, NOW } from "./lib.ts";

const sql = new SQL(arg("url"), { max: 1 });
const kind = arg("kind", "login");
const tenants = ((await sql`SELECT id FROM tenants ORDER BY id`) as { id: number }[]).map((t) => t.id);
const waits: number[] = [];
let stop = false;
process.on("SIGTERM", () => {
  stop = true;
});

let i = 0;
// after NOW, so no retention run deletes what the writer adds
const insertOne = () => {
  const at = new Date(NOW.getTime() + 1000 + i++).toISOString();
  if (kind === "audit") {
    const tenantId = tenants[(i * 7919) % tenants.length]!;
    return sql.begin((tx) => appendEntriesPg(tx, [{ tenantId, createdAt: at, actor: "bench-schrijver", action: "dossier.bekeken", subject: `dossier/${i}`, details: JSON.stringify({ i }) }]));
  }
  return sql`INSERT INTO login_attempts (tijdstip, account, ip, gelukt) VALUES (${at}, ${`schrijver${i % 100}@example.nl`}, '192.0.2.200', true)`;
};

await insertOne(); // connection open, statement prepared, before the clock starts
console.log("ready");
let next = performance.now();
while (!stop) {
  const t0 = performance.now();
  await insertOne();
  waits.push(performance.now() - t0);
  next += 10;
  await Bun.sleep(Math.max(0, next - performance.now()));
}
waits.sort((a, b) => a - b);
const q = (p: number) => +(waits[Math.min(waits.length - 1, Math.floor(p * waits.length))] ?? 0).toFixed(1);
console.log(JSON.stringify({ inserts: waits.length, maxMs: q(1), p99Ms: q(0.99), p50Ms: q(0.5) }));
await sql.close();
