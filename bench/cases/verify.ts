// audit-verificatie at scale, one mode per process (so VmHWM is the mode's own peak):
//   job            the real runAuditVerificatie with real deps (no-op mailer/alarm sink)
//   floor          one thread: read the same rows in the same order, hash the same bytes
//   floor-parallel the floor over the same number of worker threads the job uses
//   naive          per tenant `.all()` of its rows, hash JSON.stringify(row)
//
//   bun bench/cases/verify.ts --db <file> --mode job
import { workerCount } from "../../src/audit/verify-parallel.ts";
import { sha256Hex } from "../../src/audit/chain.ts";
import { openStore } from "../../src/db.ts";
import { runAuditVerificatie } from "../../src/jobs/audit-verificatie.ts";
import { floorScan } from "../floor.ts";
import { arg, benchDeps, floorOnWorkers, NOW, report } from "../lib.ts";

const db = arg("db");
const mode = arg("mode");
const store = openStore(db, NOW);
const { sqlite } = store;
const tenants = (sqlite.query("SELECT id FROM tenants ORDER BY id").all() as { id: number }[]).map((t) => t.id);

if (mode === "job") {
  const t0 = performance.now();
  const r = await runAuditVerificatie(benchDeps(store), NOW);
  const seconds = (performance.now() - t0) / 1000;
  const entries = r.body.resultaten.reduce((s, x) => s + x.aantalEntries, 0);
  if (r.status !== 200) throw new Error(`verification found ${r.body.aantalGebroken} broken chains`);
  const workers = workerCount(entries);
  report({ mode, seconds, entries, workers });
} else if (mode === "floor") {
  const t0 = performance.now();
  const { n, mismatches } = floorScan(sqlite, tenants[0] ?? 0, tenants.at(-1) ?? 0);
  report({ mode, seconds: (performance.now() - t0) / 1000, entries: n, mismatches, workers: 0 });
} else if (mode === "floor-parallel") {
  // The job's worker count for this many entries, and, like its pool, a shared queue:
  // here of contiguous tenant ranges (each one range scan), several per worker so a
  // worker slowed by the shared machine does not hold up the end.
  const { n: total } = sqlite.query("SELECT count(*) AS n FROM audit_entries").get() as { n: number };
  const workers = workerCount(total);
  const t0 = performance.now();
  let n = 0;
  let mismatches = 0;
  if (workers === 0) {
    ({ n, mismatches } = floorScan(sqlite, tenants[0] ?? 0, tenants.at(-1) ?? 0));
  } else {
    ({ n, mismatches } = await floorOnWorkers(new URL("../floor-worker.ts", import.meta.url), { dbPath: db }, tenants, workers));
  }
  report({ mode, seconds: (performance.now() - t0) / 1000, entries: n, mismatches, workers });
} else if (mode === "naive") {
  const stmt = sqlite.query("SELECT * FROM audit_entries WHERE tenant_id = ? ORDER BY seq");
  const t0 = performance.now();
  let n = 0;
  let h = "";
  for (const id of tenants) {
    for (const row of stmt.all(id)) {
      n++;
      h = sha256Hex(JSON.stringify(row));
    }
  }
  report({ mode, seconds: (performance.now() - t0) / 1000, entries: n, last: h.slice(0, 8), workers: 0 });
} else {
  throw new Error(`unknown mode ${mode}`);
}
store.close();
