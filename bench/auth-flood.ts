// A flood of wrong tokens (issue 8): how many 401s per second the service answers on
// loopback, and how much a correct call slows down meanwhile.
//
//   bun bench/auth-flood.ts [--seconds 8] [--connections 32] [--threads 1] [--calls 200] [--fetch]
//
// The service runs as its own process (`bun src/index.ts`, a fresh database in a temp
// dir). The flood comes from `wrk` (POST with a wrong bearer token); without wrk, from
// a Bun fetch loop in a child process. The correct call is beveiligingslog-analyse
// (a real job: one indexed query and a job-run row), made one at a time, first with
// the service idle, then during the flood. Every figure is one JSON line:
//   {"bench":"auth-flood","metric","value","unit","note"?}
// The request loops are bounded in count and in time.
import { Database } from "bun:sqlite";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { openStore } from "../src/db.ts";

const ROOT = resolve(import.meta.dir, "..");
const BUN = process.execPath;
const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
};
const SECONDS = arg("seconds", 8);
const CONNECTIONS = arg("connections", 32);
const THREADS = arg("threads", 1);
const CALLS = arg("calls", 200);

const SECRET = Array.from(crypto.getRandomValues(new Uint8Array(32)), (b) => b.toString(16).padStart(2, "0")).join("");
const WRONG = "f".repeat(64); // same length as the secret

function figure(metric: string, value: number, unit: string, note?: string) {
  console.log(JSON.stringify({ bench: "auth-flood", metric, value: +value.toFixed(3), unit, ...(note ? { note } : {}) }));
}

const dir = mkdtempSync(join(tmpdir(), "nachtwacht-flood-"));
const dbPath = join(dir, "data", "nachtwacht.db");
{
  // A little data for the correct call to look at: failed logins of the last hour.
  const store = openStore(dbPath);
  const ins = store.sqlite.prepare("INSERT INTO login_attempts (tijdstip, account, ip, gelukt) VALUES (?, ?, ?, 0)");
  store.sqlite.transaction(() => {
    for (let i = 0; i < 2000; i++) ins.run(new Date(Date.now() - i * 1000).toISOString(), `user${i % 50}`, `10.0.${i % 7}.${i % 250}`);
  })();
  store.close();
}

const port = (() => {
  const l = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const p = l.port;
  l.stop(true);
  return p;
})();
const url = `http://127.0.0.1:${port}`;
const service = Bun.spawn([BUN, join(ROOT, "src/index.ts")], {
  cwd: dir,
  env: { PATH: process.env.PATH!, CRON_SECRET: SECRET, DATABASE_PATH: dbPath, PORT: String(port), HOST: "127.0.0.1", INLOG_DREMPEL_IP: "100000", INLOG_DREMPEL_ACCOUNT: "100000" },
  stdout: "ignore",
  stderr: "ignore",
});

async function cleanup() {
  service.kill("SIGTERM");
  await service.exited;
  rmSync(dir, { recursive: true, force: true });
}

try {
  for (let i = 0; ; i++) {
    try {
      if ((await fetch(`${url}/health`)).ok) break;
    } catch {}
    if (i > 400) throw new Error("service did not start");
    await Bun.sleep(25);
  }
  const wrongAnswer = await fetch(`${url}/api/cron/beveiligingslog-analyse`, { method: "POST", headers: { authorization: `Bearer ${WRONG}` } });
  if (wrongAnswer.status !== 401) throw new Error(`wrong token answered ${wrongAnswer.status}`);

  /** Correct calls one after the other, for at most `ms`: latencies in ms. */
  async function correctCalls(max: number, ms: number): Promise<number[]> {
    const out: number[] = [];
    const until = performance.now() + ms;
    while (out.length < max && performance.now() < until) {
      const t0 = performance.now();
      const r = await fetch(`${url}/api/cron/beveiligingslog-analyse`, { method: "POST", headers: { authorization: `Bearer ${SECRET}` } });
      await r.arrayBuffer();
      if (r.status !== 200) throw new Error(`correct call answered ${r.status}`);
      out.push(performance.now() - t0);
      await Bun.sleep(5);
    }
    return out;
  }
  const pct = (xs: number[], p: number) => {
    const s = [...xs].sort((a, b) => a - b);
    return s[Math.min(s.length - 1, Math.floor(s.length * p))]!;
  };

  await correctCalls(20, 2000); // warm-up
  const idle = await correctCalls(CALLS, 10_000);

  // The flood.
  const haveWrk = !process.argv.includes("--fetch") && Bun.spawnSync(["sh", "-c", "command -v wrk"]).exitCode === 0;
  let flood: ReturnType<typeof Bun.spawn>;
  if (haveWrk) {
    const lua = join(dir, "wrong-token.lua");
    writeFileSync(lua, `wrk.method = "POST"\nwrk.headers["Authorization"] = "Bearer ${WRONG}"\n`);
    flood = Bun.spawn(["wrk", `-t${THREADS}`, `-c${CONNECTIONS}`, `-d${SECONDS}s`, "-s", lua, `${url}/api/cron/beveiligingslog-analyse`], { stdout: "pipe", stderr: "pipe" });
  } else {
    // Fallback: a Bun fetch loop with CONNECTIONS requests in flight.
    const script = join(dir, "flood.ts");
    writeFileSync(
      script,
      `const until = performance.now() + ${SECONDS * 1000}; let n = 0, s401 = 0;
       await Promise.all(Array.from({ length: ${CONNECTIONS} }, async () => {
         while (performance.now() < until) {
           const r = await fetch("${url}/api/cron/beveiligingslog-analyse", { method: "POST", headers: { authorization: "Bearer ${WRONG}" } });
           await r.arrayBuffer(); n++; if (r.status === 401) s401++;
         }
       }));
       console.log("Requests/sec: " + (n / ${SECONDS}).toFixed(2)); console.log("401: " + s401 + " of " + n);`,
    );
    flood = Bun.spawn([BUN, script], { stdout: "pipe", stderr: "pipe" });
  }
  await Bun.sleep(1000); // let the flood reach full speed
  const during = await correctCalls(CALLS, (SECONDS - 2) * 1000);
  await flood.exited;
  const text = await new Response(flood.stdout as ReadableStream).text();
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(text)?.[1] ?? NaN);
  const total = Number(/(\d+) requests in/.exec(text)?.[1] ?? /of (\d+)/.exec(text)?.[1] ?? NaN);
  // wrk counts every non-2xx answer; all of them are the 401s (checked above), none failed.
  const non2xx = Number(/Non-2xx or 3xx responses: (\d+)/.exec(text)?.[1] ?? /401: (\d+)/.exec(text)?.[1] ?? NaN);
  const errors = /Socket errors: (.*)/.exec(text)?.[1];

  const tool = haveWrk ? `wrk -t${THREADS} -c${CONNECTIONS} -d${SECONDS}s` : `bun fetch loop, ${CONNECTIONS} in flight, ${SECONDS} s`;
  figure("401-per-second", rps, "req/s", `${tool}; ${non2xx} of ${total} answers were 401${errors ? `; socket errors: ${errors}` : ""}`);
  figure("correct-call-p50-idle", pct(idle, 0.5), "ms", `${idle.length} calls`);
  figure("correct-call-p95-idle", pct(idle, 0.95), "ms");
  figure("correct-call-p50-flood", pct(during, 0.5), "ms", `${during.length} calls during the flood`);
  figure("correct-call-p95-flood", pct(during, 0.95), "ms");
  figure("correct-call-p50-ratio", pct(during, 0.5) / pct(idle, 0.5), "x", "p50 during the flood / p50 idle");
  figure("correct-call-p95-ratio", pct(during, 0.95) / pct(idle, 0.95), "x", "p95 during the flood / p95 idle");

  // The flood left nothing behind: no job ran for a wrong token.
  const s = new Database(dbPath, { readonly: true });
  const runs = (s.query("SELECT count(*) AS n FROM job_runs").get() as { n: number }).n;
  s.close();
  figure("job-runs-recorded", runs, "rows", `= the ${20 + idle.length + during.length} correct calls; the 401s left none`);
} finally {
  await cleanup();
}
