// What a GET /metrics scrape costs on SQLite with N tenants: the service's own job run of
// audit-verificatie (through its HTTP route, so its run and every tenant's result are
// sealed as in production), then scrapes answered by the route on a loopback server:
// the first after a restart (a new process's seal: every seal checked once), and warm
// ones (seals remembered). The baseline in the same run is what any scrape reads at the
// least: the verification rows, the job runs' newest rows and the newest backup report,
// read without seals. Also the longest event-loop stall a cold scrape causes.
//
//   bun bench/metrics-scrape.ts [--tenants 1000] [--rounds 5]
//
// One JSON line per figure: {"bench":"metrics-scrape","metric","value","unit","baseline","ratio"}.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createApp } from "../src/app.ts";
import { fillDemoData } from "../src/cli/demo-data.ts";
import { openStore } from "../src/db.ts";
import { rowSealOf } from "../src/row-seal.ts";
import { jobPath } from "../src/schedule.ts";
import { benchDeps, NOW } from "./lib.ts";

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
};
const TENANTS = arg("tenants", 1000);
const ROUNDS = arg("rounds", 5);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const dir = mkdtempSync(join(tmpdir(), "nachtwacht-metrics-"));
try {
  const path = join(dir, "bench.db");
  const store = openStore(path, NOW);
  fillDemoData(store.sqlite, { tenants: TENANTS, admins: TENANTS, audit: TENANTS * 20, logins: 10_000, backups: 30 }, NOW, 42, rowSealOf(benchDeps(store).config));

  // audit-verificatie as the crontab runs it: a sealed run and a sealed result per tenant.
  const verifying = benchDeps(store);
  const run = await createApp(verifying).handle(
    new Request(`http://localhost${jobPath("audit-verificatie")}`, { method: "POST", headers: { authorization: `Bearer ${verifying.config.cronSecret}` } }),
  );
  const verified = (await run.json()) as { aantalTenants?: number; gecontroleerd?: number };
  if (run.status !== 200) throw new Error(`audit-verificatie answered ${run.status}: ${JSON.stringify(verified)}`);

  /** A loopback server of a fresh app (a fresh config: a fresh seal, as after a restart). */
  const serve = () => createApp(benchDeps(store)).listen({ hostname: "127.0.0.1", port: 0 });
  const scrape = async (url: string) => {
    const t = performance.now();
    const r = await fetch(url);
    const text = await r.text();
    const ms = performance.now() - t;
    if (r.status !== 200) throw new Error(`/metrics answered ${r.status}: ${text}`);
    const checked = /^nachtwacht_audit_tenants_checked (\d+)$/m.exec(text)?.[1];
    if (Number(checked) !== TENANTS) throw new Error(`/metrics counted ${checked} verified tenants, not ${TENANTS}`);
    return ms;
  };

  // What a scrape reads at the least, without the seals.
  const floor = () => {
    const t = performance.now();
    store.sqlite.query("SELECT * FROM audit_verification_state").all();
    store.sqlite.query("SELECT * FROM job_runs WHERE job = ? ORDER BY gestart DESC LIMIT 20").all("audit-verificatie");
    store.sqlite.query("SELECT * FROM backup_statuses ORDER BY ontvangen DESC LIMIT 20").all();
    return performance.now() - t;
  };

  const cold: number[] = [];
  const warm: number[] = [];
  const stalls: number[] = [];
  const floors: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    floors.push(floor());
    const app = serve();
    const url = `http://127.0.0.1:${app.server!.port}/metrics`;
    // The event loop's longest wait while the cold scrape runs in the same process.
    let last = performance.now();
    let longest = 0;
    let on = true;
    const probe = (async () => {
      while (on) {
        await new Promise((r) => setImmediate(r));
        const t = performance.now();
        longest = Math.max(longest, t - last);
        last = t;
      }
    })();
    cold.push(await scrape(url));
    on = false;
    await probe;
    stalls.push(longest);
    const w: number[] = [];
    for (let i = 0; i < 5; i++) w.push(await scrape(url));
    warm.push(median(w));
    await app.stop(true);
  }
  store.close();

  const base = median(floors);
  const line = (metric: string, value: number, note: string) =>
    console.log(JSON.stringify({ bench: "metrics-scrape", metric, value: +value.toFixed(2), unit: "ms", baseline: +base.toFixed(2), ratio: +(value / base).toFixed(1), tenants: TENANTS, note }));
  line("cold-scrape", median(cold), "first scrape of a new process (every seal checked once), over HTTP on loopback");
  line("warm-scrape", median(warm), "later scrapes (seals remembered), median of 5 per round");
  line("cold-scrape-longest-event-loop-stall", median(stalls), "the longest gap between turns of the event loop during the cold scrape");
  console.log(JSON.stringify({ bench: "metrics-scrape", metric: "rounds", cold: cold.map((x) => +x.toFixed(1)), warm: warm.map((x) => +x.toFixed(1)), floor: floors.map((x) => +x.toFixed(2)) }));
} finally {
  rmSync(dir, { recursive: true, force: true });
}
