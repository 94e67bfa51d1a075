// The compiled binary: size, time from spawn to the first /health answer, and resident
// memory when idle (fresh, and after the Swagger spec and a job were served).
//
//   bun run bench/startup.ts [runs=10]
//
// Prints one JSON line per run and a summary line. Each run uses a new empty database
// in a new temp dir, so the time includes creating and migrating it.
import { readFileSync, statSync } from "node:fs";
import { buildBinary, startBinary } from "../test/binary.ts";

const runs = Number(process.argv[2] ?? 10);
const SECRET = "bench-" + "0".repeat(58);

function rssKb(pid: number): number {
  const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) : NaN;
}

const { path, ms: buildMs } = await buildBinary();
const bytes = statSync(path).size;
const starts: number[] = [];
const idle: number[] = [];
const used: number[] = [];
for (let i = 0; i < runs; i++) {
  const app = await startBinary(path, { CRON_SECRET: SECRET });
  await Bun.sleep(300);
  const rssIdle = rssKb(app.pid);
  await (await fetch(`${app.url}/docs/json`)).text();
  await (
    await fetch(`${app.url}/api/cron/backup-status`, {
      method: "POST",
      headers: { authorization: `Bearer ${SECRET}` },
      body: JSON.stringify({ exitCode: 0, bestandsnaam: "bench.db.gz", grootte: 1 }),
    })
  ).text();
  await Bun.sleep(300);
  const rssUsed = rssKb(app.pid);
  await app.stop();
  starts.push(app.startMs);
  idle.push(rssIdle);
  used.push(rssUsed);
  console.log(JSON.stringify({ bench: "startup", run: i + 1, startToFirstAnswerMs: Math.round(app.startMs), rssIdleMb: +(rssIdle / 1024).toFixed(1), rssAfterSpecAndJobMb: +(rssUsed / 1024).toFixed(1) }));
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
console.log(
  JSON.stringify({
    bench: "startup-summary",
    runs,
    binaryMb: +(bytes / 1024 / 1024).toFixed(1),
    buildS: +(buildMs / 1000).toFixed(1),
    startToFirstAnswerMs: { median: Math.round(median(starts)), min: Math.round(Math.min(...starts)), max: Math.round(Math.max(...starts)) },
    rssIdleMb: +(median(idle) / 1024).toFixed(1),
    rssAfterSpecAndJobMb: +(median(used) / 1024).toFixed(1),
  }),
);
