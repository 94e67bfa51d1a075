// Prints the figures of the last run of a size (.bench-data/last-<size>.json, written
// by bench/run.ts) as the Markdown table docs/performance.md keeps.
//
//   bun bench/table.ts L
import { join } from "node:path";
import { DATA_DIR } from "./lib.ts";

const size = (process.argv[2] ?? "L").toUpperCase();
const last = (await Bun.file(join(DATA_DIR, `last-${size}.json`)).json()) as {
  machine: { nproc: number; model: string; memGb: number; bun: string; loadavg: string };
  at: string;
  figures: { bench: string; metric: string; value: number | null; unit: string; target: string | null; baseline: number | null; ratio: number | null; ok: boolean | null; note?: string }[];
};
const m = last.machine;
console.log(`Size ${size}, ${last.at}, ${m.nproc} × ${m.model}, ${m.memGb} GB, Bun ${m.bun}, load average at the end ${m.loadavg}\n`);
console.log("| figure | target | result | baseline | ratio | ok | note |");
console.log("|---|---|---|---|---|---|---|");
for (const f of last.figures) {
  const ok = f.ok === null ? "" : f.ok ? "ok" : "**missed**";
  console.log(`| ${f.bench} ${f.metric} | ${f.target ?? ""} | ${f.value ?? "-"} ${f.unit} | ${f.baseline ?? ""} | ${f.ratio ?? ""} | ${ok} | ${(f.note ?? "").replaceAll("|", "/")} |`);
}
