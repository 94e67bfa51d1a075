// Builds one benchmark database with the demo-data filler (run as a child process by
// bench/run.ts): the size's tenants, administrators, audit chains and login attempts
// at NOW, plus a burst of failed logins in the last hour for beveiligingslog-analyse.
// Writes to `<db>.tmp` and renames when complete, so an interrupted build is never reused.
//
//   bun bench/build.ts --db .bench-data/L-seed42-xxxx.db --size L --seed 42
import { renameSync, rmSync, writeFileSync } from "node:fs";
import { fillDemoData } from "../src/cli/demo-data.ts";
import { openStore } from "../src/db.ts";
import { arg, BURST, NOW, SIZES, type SizeName } from "./lib.ts";

const db = arg("db");
const size = arg("size") as SizeName;
const seed = Number(arg("seed", "42"));
const tmp = `${db}.tmp`;
for (const f of [tmp, `${tmp}-wal`, `${tmp}-shm`]) rmSync(f, { force: true });

const t0 = performance.now();
const store = openStore(tmp, NOW);
// A throw-away cache: no fsync, and a large page cache for the index inserts.
store.sqlite.run("PRAGMA synchronous = OFF");
store.sqlite.run("PRAGMA cache_size = -262144");
fillDemoData(store.sqlite, SIZES[size], NOW, seed);

// The burst: a few addresses and accounts over their thresholds (20 and 10 an hour).
const ins = store.sqlite.prepare("INSERT INTO login_attempts (tijdstip, account, ip, gelukt, reden, tenant_id) VALUES (?, ?, ?, 0, 'wachtwoord-onjuist', NULL)");
store.sqlite.transaction(() => {
  for (let i = 0; i < BURST.ips; i++)
    for (let j = 0; j < BURST.perIp; j++) ins.run(new Date(NOW.getTime() - 3_000_000 + i * 1000 + j * 60_000).toISOString(), `slachtoffer${j}@example.nl`, `198.51.100.${i + 1}`);
  for (let i = 0; i < BURST.accounts; i++)
    for (let j = 0; j < BURST.perAccount; j++) ins.run(new Date(NOW.getTime() - 2_000_000 + i * 1000 + j * 90_000).toISOString(), `directie${i}@example.nl`, `192.0.2.${j + 1}`);
})();
store.sqlite.run("PRAGMA wal_checkpoint(TRUNCATE)");
store.close();
renameSync(tmp, db);
// the WAL was truncated by the checkpoint; a connection whose cached statements keep it
// open until exit may leave the empty files behind under the temporary name
for (const f of [`${tmp}-wal`, `${tmp}-shm`]) rmSync(f, { force: true });
const seconds = +((performance.now() - t0) / 1000).toFixed(1);
writeFileSync(`${db}.json`, JSON.stringify({ size, seed, ...SIZES[size], now: NOW.toISOString(), seconds, bun: Bun.version }) + "\n");
console.log(JSON.stringify({ built: db, seconds }));
