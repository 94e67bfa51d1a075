// Peak memory of chain verification against chain length. For each size it builds a
// database with fillDemoData (in a child process), then verifies every tenant's chain
// in a fresh child process and prints one JSON line: entries, tenants, seconds, RSS
// after opening the database, and peak RSS (getrusage maxrss) after verifying.
// Flat memory means the peak does not grow with the number of entries.
//
//   bun run bench/verify-memory.ts                    # 200k and 1M entries, 1 and 4 tenants
//   bun run bench/verify-memory.ts --sizes 200000,1000000 --tenants 4 --workers 0,2 --keep /tmp/dbs
//
// `workers` 0 verifies in the calling thread (verifyTenantChain per tenant); more goes
// through the worker pool audit-verificatie uses (verify-parallel.ts).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { verifyTenants } from "../src/audit/verify-parallel.ts";
import { fillDemoData } from "../src/cli/demo-data.ts";
import { openStore } from "../src/db.ts";

const NOW = new Date("2026-07-23T12:00:00.000Z");
const MB = 1024 * 1024;

function peakRssMb(): number {
  // maxRSS is in kilobytes on Linux
  return +(process.resourceUsage().maxRSS / 1024).toFixed(1);
}

async function child(args: string[]): Promise<string> {
  const p = Bun.spawn([process.execPath, import.meta.path, ...args], { stdout: "pipe", stderr: "inherit" });
  const out = await new Response(p.stdout).text();
  if ((await p.exited) !== 0) throw new Error(`child ${args.join(" ")} failed`);
  return out.trim();
}

async function main() {
  const { values } = parseArgs({
    args: Bun.argv.slice(2),
    options: {
      sizes: { type: "string", default: "200000,1000000" },
      tenants: { type: "string", default: "1,4" },
      workers: { type: "string", default: "0,2" },
      keep: { type: "string" },
      // internal: the child roles
      build: { type: "string" },
      verify: { type: "string" },
      entries: { type: "string" },
    },
  });

  if (values.build) {
    const store = openStore(values.build, NOW);
    fillDemoData(store.sqlite, { tenants: Number(values.tenants), admins: 0, audit: Number(values.entries), logins: 0, backups: 0 }, NOW);
    store.close();
    return;
  }

  if (values.verify) {
    const store = openStore(values.verify, NOW);
    const tenants = (store.sqlite.query("SELECT id FROM tenants ORDER BY id").values() as [number][]).map(([id]) => id);
    const rssOpen = +(process.memoryUsage().rss / MB).toFixed(1);
    const workers = Number(values.workers);
    const t0 = performance.now();
    const results = await verifyTenants(
      store.sqlite,
      values.verify,
      tenants.map((tenantId) => ({ tenantId, checkpoint: null })),
      workers,
      [],
    );
    const seconds = +((performance.now() - t0) / 1000).toFixed(2);
    const entries = [...results.values()].reduce((n, r) => n + r.aantalEntries, 0);
    const intact = [...results.values()].every((r) => r.intact);
    console.log(JSON.stringify({ entries, tenants: tenants.length, workers, intact, seconds, rssAfterOpenMb: rssOpen, peakRssMb: peakRssMb() }));
    store.close();
    return;
  }

  const dir = values.keep ?? mkdtempSync(join(tmpdir(), "nachtwacht-verify-mem-"));
  try {
    for (const tenants of values.tenants!.split(",")) {
      for (const n of values.sizes!.split(",").map(Number)) {
        const db = join(dir, `verify-${n}-${tenants}.db`);
        if (!(await Bun.file(db).exists())) await child(["--build", db, "--entries", String(n), "--tenants", tenants]);
        const dbMb = +(Bun.file(db).size / MB).toFixed(0);
        for (const workers of values.workers!.split(",")) {
          const line = JSON.parse(await child(["--verify", db, "--workers", workers]));
          console.log(JSON.stringify({ ...line, dbMb, bun: Bun.version }));
        }
      }
    }
  } finally {
    if (!values.keep) rmSync(dir, { recursive: true, force: true });
  }
}

await main();
