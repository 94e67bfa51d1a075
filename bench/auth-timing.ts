// The secret comparison's timing: a wrong token sharing a 60-character prefix with the
// secret must cost what one sharing nothing costs; an early-exit comparison, measured in
// the same run as the baseline, shows that the harness can see a difference.
//
//   bun bench/auth-timing.ts [--rounds 300] [--batch 200]
//
// Interleaved batches (alternating which goes first), medians in ns per check. One JSON
// line per figure: {"bench":"auth-timing","metric","value","unit","baseline","ratio","note"}.
// Target: the gate's near/far ratio within 0.85–1.15 while the early-exit ratio is > 1.4.
import { bearerChecker } from "../src/http/auth.ts";

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
};
const ROUNDS = arg("rounds", 300);
const BATCH = arg("batch", 200);
const SECRET = "a1b2c3d4".repeat(8);
const check = bearerChecker(SECRET);
const near = `Bearer ${SECRET.slice(0, 60)}zzzz`;
const far = `Bearer ${"y".repeat(64)}`;

/** The comparison the gate must not be: stops at the first differing character. */
const earlyExit = (h: string) => {
  const t = h.slice(7);
  if (t.length !== SECRET.length) return false;
  for (let i = 0; i < t.length; i++) if (t.charCodeAt(i) !== SECRET.charCodeAt(i)) return false;
  return true;
};

function medians(f: (h: string) => boolean) {
  const ta: number[] = [];
  const tb: number[] = [];
  let accepted = 0;
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? ([[near, ta], [far, tb]] as const) : ([[far, tb], [near, ta]] as const);
    for (const [token, out] of order) {
      const t0 = Bun.nanoseconds();
      for (let i = 0; i < BATCH; i++) if (f(token)) accepted++;
      out.push((Bun.nanoseconds() - t0) / BATCH);
    }
  }
  if (accepted !== 0) throw new Error("a wrong token was accepted");
  const med = (x: number[]) => x.sort((p, q) => p - q)[x.length >> 1]!;
  return { near: med(ta), far: med(tb) };
}

medians(check); // warm-up (JIT)
const gate = medians(check);
const naive = medians(earlyExit);
const line = (metric: string, value: number, baseline: number, ok: boolean | null, note: string) =>
  console.log(JSON.stringify({ bench: "auth-timing", metric, value: +value.toFixed(1), unit: "ns", baseline: +baseline.toFixed(1), ratio: +(value / baseline).toFixed(3), ok, note }));
line("gate-near-vs-far", gate.near, gate.far, gate.near / gate.far > 0.85 && gate.near / gate.far < 1.15, "target ratio 0.85–1.15: no prefix leak");
line("early-exit-near-vs-far", naive.near, naive.far, naive.near / naive.far > 1.4, "control: the harness sees an early exit (target ratio > 1.4)");
