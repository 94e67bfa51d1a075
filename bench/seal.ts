// What the row seals cost (src/row-seal.ts): signing a row (each job start and end, each
// backup report, each lease take and renewal, each tenant's verification result), checking
// a seal cold, and checking one this process already knows (signed here, or opened once).
// The baseline in the same run is the SHA-256 of the same text (what any row check costs
// at least); the figure that matters is a cold /metrics or daily report over N tenants'
// verification results after a restart (every seal checked once), and warm (cached).
//
//   bun bench/seal.ts [--tenants 1000] [--rounds 5]
//
// One JSON line per figure: {"bench":"seal","metric","value","unit","baseline","ratio"}.
import { createHash } from "node:crypto";
import { auditKeys } from "../src/audit/keys.ts";
import { countsAsVerification, rowSeal, type VerificationColumns } from "../src/row-seal.ts";
import { verificationSummary } from "../src/reports/daily.ts";
import { BENCH_SIGNING_KEY, NOW } from "./lib.ts";

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
};
const TENANTS = arg("tenants", 1000);
const ROUNDS = arg("rounds", 5);
const keys = auditKeys({ auditAnkerSleutel: BENCH_SIGNING_KEY, auditVertrouwdeSleutels: [] });

const rows: VerificationColumns[] = Array.from({ length: TENANTS }, (_, i) => ({
  tenantId: i + 1,
  gecontroleerd: NOW.toISOString(),
  intact: i % 97 !== 0,
  aantalEntries: 5000 + i,
  foutSeq: i % 97 === 0 ? 12 : null,
  foutEntryId: i % 97 === 0 ? 1000 + i : null,
  foutReden: i % 97 === 0 ? "hash-afwijkend" : null,
}));

const median = (xs: number[]) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const perRow = (ms: number) => (ms * 1000) / TENANTS;
const line = (metric: string, value: number, baseline: number) =>
  console.log(JSON.stringify({ bench: "seal", metric, value: +value.toFixed(1), unit: "µs/row", baseline: +baseline.toFixed(2), ratio: +(value / baseline).toFixed(1), tenants: TENANTS }));

const sha: number[] = [];
const sign: number[] = [];
const cold: number[] = [];
const warm: number[] = [];
const signedHere: number[] = [];
for (let round = 0; round < ROUNDS; round++) {
  let t = performance.now();
  for (const r of rows) createHash("sha256").update(JSON.stringify(r)).digest();
  sha.push(performance.now() - t);

  // Signed by another process (a fresh seal per round: nothing known yet).
  const writer = rowSeal(keys);
  t = performance.now();
  const sealed = rows.map((r) => ({ ...r, zegel: writer.sealVerification(r) }));
  sign.push(performance.now() - t);

  const reader = rowSeal(keys);
  t = performance.now();
  let counted = 0;
  for (const r of sealed) if (countsAsVerification(r, reader, NOW, null)) counted++;
  cold.push(performance.now() - t);
  t = performance.now();
  for (const r of sealed) if (countsAsVerification(r, reader, NOW, null)) counted++;
  warm.push(performance.now() - t);
  // The process that signed them reads them (audit-verificatie's rows, then /metrics).
  t = performance.now();
  for (const r of sealed) if (countsAsVerification(r, writer, NOW, null)) counted++;
  signedHere.push(performance.now() - t);
  if (counted !== 3 * TENANTS) throw new Error(`only ${counted} of ${3 * TENANTS} seals opened`);
}

const base = perRow(median(sha));
line("sign", perRow(median(sign)), base);
line("check-cold", perRow(median(cold)), base);
line("check-warm", perRow(median(warm)), base);
line("check-signed-here", perRow(median(signedHere)), base);
console.log(
  JSON.stringify({ bench: "seal", metric: "cold-read-of-all-tenants", value: +median(cold).toFixed(1), unit: "ms", tenants: TENANTS, note: "every seal checked once: the first /metrics scrape or daily report after a restart" }),
);

// The longest the event loop waits during such a cold read: verificationSummary checks
// the seals a chunk at a time; the baseline is the same checks in one go.
async function longestStall(work: () => Promise<unknown>): Promise<number> {
  let last = performance.now();
  let longest = 0;
  let on = true;
  const probe = async () => {
    while (on) {
      await new Promise((r) => setImmediate(r));
      const t = performance.now();
      longest = Math.max(longest, t - last);
      last = t;
    }
  };
  const p = probe();
  await work();
  on = false;
  await p;
  return longest;
}
const signer = rowSeal(keys);
const named = rows.map((r) => ({ ...r, zegel: signer.sealVerification(r), tenant: `T${r.tenantId}` }));
const chunked: number[] = [];
const inOneGo: number[] = [];
for (let round = 0; round < ROUNDS; round++) {
  const reader = rowSeal(keys);
  chunked.push(await longestStall(() => verificationSummary(named, TENANTS, reader, NOW, null)));
  const other = rowSeal(keys);
  inOneGo.push(await longestStall(async () => named.filter((r) => countsAsVerification(r, other, NOW, null))));
}
console.log(
  JSON.stringify({
    bench: "seal",
    metric: "longest-event-loop-stall-cold-read",
    value: +median(chunked).toFixed(1),
    unit: "ms",
    baseline: +median(inOneGo).toFixed(1),
    ratio: +(median(chunked) / median(inOneGo)).toFixed(3),
    tenants: TENANTS,
    note: "verificationSummary (chunks of 64) against the same checks in one go",
  }),
);
