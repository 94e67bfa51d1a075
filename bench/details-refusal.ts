// How long one POST /api/audit body of many tiny details values holds the event loop
// before it is refused: 340,000 empty objects in one entry's details, a body under
// 1 MiB. Before detailsProblem counted values, every one was walked and copied by
// canonicalJson before the 64 KiB check refused them (about 235 ms measured by a
// reviewer). In-process: the route's body reader (JSON.parse with exactNumbers, the
// schema check) and prepareAuditBatch, without HTTP.
//
//   bun bench/details-refusal.ts [--rounds 15] [--number]
//
// One JSON line per figure: {"bench":"details-refusal","metric","value","unit","note"}; medians.
import { jsonBodyReader } from "../src/http/body.ts";
import { AuditBatch, MAX_BATCH_BYTES, parseAuditBody, prepareAuditBatch } from "../src/ingest/audit.ts";
import { Refusal } from "../src/ingest/refusal.ts";

const i = process.argv.indexOf("--rounds");
const ROUNDS = i >= 0 ? Number(process.argv[i + 1]) : 15;
const read = jsonBodyReader(AuditBatch, MAX_BATCH_BYTES, "te groot", parseAuditBody);
// --number: with one number that makes parseAuditBody use its reviver (exactNumbers).
const number = process.argv.includes("--number") ? '"n":1e2,' : "";
const body = `{"entries":[{"tenantId":1,"actor":"x","action":"a","subject":"","details":{${number}"a":[${Array(340_000).fill("{}").join(",")}]}}]}`;
const request = () => new Request("http://localhost/api/audit", { method: "POST", body });

const median = (xs: number[]) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const readMs: number[] = [];
const prepareMs: number[] = [];
for (let r = 0; r < ROUNDS; r++) {
  const t0 = performance.now();
  const batch = await read(request());
  const t1 = performance.now();
  try {
    prepareAuditBatch(batch, new Date());
    throw new Error("not refused");
  } catch (e) {
    if (!(e instanceof Refusal) || !e.message.includes("groter dan 64 KiB")) throw e;
  }
  readMs.push(t1 - t0);
  prepareMs.push(performance.now() - t1);
}
const line = (metric: string, value: number, note: string) => console.log(JSON.stringify({ bench: "details-refusal", metric, value: +value.toFixed(1), unit: "ms", note }));
line("read-body", median(readMs), `${body.length} bytes: read, parseAuditBody${number ? " (with its reviver)" : ""}, schema check`);
line("prepare-refusal", median(prepareMs), "prepareAuditBatch until the 64 KiB refusal");
