// weekrapport's failed logins under an attack concentrated in one instant (round 22 of
// docs/performance.md; a one-off, not part of `bun run bench`). A fresh SQLite file with
// 1,000 tenants and an L-like week (79,000 attempts, half failures from 255 addresses),
// plus 167,000 failures of one tenant from distinct IPv6 addresses all at one instant.
// weekLogins of this checkout and of the code before (--baseline, a checkout of it with
// node_modules, e.g. `git worktree add /tmp/wk-before <commit>`) run alternately, three
// times each, on the same file, while a setImmediate chain records the longest gap
// between two turns of the event loop (the longest synchronous step).
//
//   bun bench/weekrapport-attack.ts --baseline /tmp/wk-before [--runs 3]
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { deepEqual } from "node:assert/strict";
import { openStore, type Db } from "../src/db.ts";
import { WEEK_MS, weekLogins, type TenantWeekLogins } from "../src/reports/weekly.ts";
import { arg, NOW } from "./lib.ts";

type WeekLogins = (db: Db, van: Date, tot: Date) => Promise<Map<number, TenantWeekLogins>>;
const baselineDir = resolve(arg("baseline"));
const before = ((await import(join(baselineDir, "src/reports/weekly.ts"))) as { weekLogins: WeekLogins }).weekLogins;
const runs = Number(arg("runs", "3"));

const dir = mkdtempSync(join(tmpdir(), "nachtwacht-weekrapport-attack-"));
try {
  const store = openStore(join(dir, "nachtwacht.db"), NOW);
  const { sqlite } = store;
  const van = new Date(NOW.getTime() - WEEK_MS);
  const TENANTS = 1_000;
  const ATTEMPTS = 79_000;
  const ATTACK = 167_000;
  sqlite.transaction(() => {
    sqlite.run(
      `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${TENANTS})
       INSERT INTO tenants (naam, aangemaakt) SELECT 'tenant ' || i, ? FROM n`,
      [van.toISOString()],
    );
    // The week: attempts evenly over it, every tenant, every other one failed, 255 addresses.
    sqlite.run(
      `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${ATTEMPTS})
       INSERT INTO login_attempts (tijdstip, account, ip, gelukt, tenant_id)
       SELECT strftime('%Y-%m-%dT%H:%M:%fZ', ? / 1000.0 + i * ${WEEK_MS / 1000 / ATTEMPTS}, 'unixepoch'), 'gebruiker' || (i % 5000), '10.0.' || (i % 255) || '.1', i % 2, 1 + i % ${TENANTS} FROM n`,
      [van.getTime()],
    );
    // The attack: one tenant's login form, distinct addresses, one instant three days ago.
    sqlite.run(
      `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${ATTACK})
       INSERT INTO login_attempts (tijdstip, account, ip, gelukt, tenant_id)
       SELECT ?, 'admin', '2001:db8::' || printf('%x', i), 0, 7 FROM n`,
      [new Date(NOW.getTime() - 3 * 24 * 3600_000).toISOString()],
    );
  })();
  sqlite.run("ANALYZE");
  sqlite.run("PRAGMA wal_checkpoint(TRUNCATE)");

  /** The call's time and the longest gap between two turns of the event loop meanwhile. */
  async function measure(f: WeekLogins) {
    let longest = 0;
    let last = performance.now();
    let done = false;
    const tick = () => {
      const now = performance.now();
      longest = Math.max(longest, now - last);
      last = now;
      if (!done) setImmediate(tick);
    };
    setImmediate(tick);
    const t0 = performance.now();
    const result = await f(store.db, van, NOW);
    const ms = performance.now() - t0;
    done = true;
    // The last step's gap, should the call have ended without a turn after it.
    longest = Math.max(longest, performance.now() - last);
    await new Promise((r) => setImmediate(r));
    return { ms, longest, result };
  }

  const variants: [string, WeekLogins][] = [
    ["before", before],
    ["now", weekLogins],
  ];
  const figures: Record<string, { longest: number[]; ms: number[] }> = { before: { longest: [], ms: [] }, now: { longest: [], ms: [] } };
  let reference: Map<number, TenantWeekLogins> | undefined;
  for (let run = 0; run < runs; run++) {
    for (const [name, f] of run % 2 === 0 ? variants : [...variants].reverse()) {
      const { ms, longest, result } = await measure(f);
      if (reference === undefined) reference = result;
      else deepEqual(result, reference, `${name} gave another result`);
      figures[name]!.longest.push(longest);
      figures[name]!.ms.push(ms);
      process.stderr.write(`run ${run + 1} ${name}: longest step ${longest.toFixed(1)} ms, call ${ms.toFixed(0)} ms\n`);
    }
  }
  store.close();

  const note = `1,000 tenants, ${ATTEMPTS} attempts over the week, + ${ATTACK} failures from distinct addresses at one instant; ${runs} runs each, alternating`;
  const line = (metric: string, unit: string, key: "longest" | "ms") =>
    console.log(
      JSON.stringify({
        bench: "weekrapport-attack",
        metric,
        unit,
        value: Math.max(...figures.now![key]),
        values: figures.now![key].map((v) => Math.round(v * 10) / 10),
        baseline: Math.max(...figures.before![key]),
        baselines: figures.before![key].map((v) => Math.round(v * 10) / 10),
        target: key === "longest" ? "value <= 100" : null,
        note,
      }),
    );
  line("longest-step-ms", "ms", "longest");
  line("call-ms", "ms", "ms");
} finally {
  rmSync(dir, { recursive: true, force: true });
}
