// audit-anker at scale:
//   --mode full         the first run over a database without checkpoints: every entry hashed
//   --mode incremental  a day of new entries (--new N, spread over the tenants), then a run:
//                       only those entries are hashed (the previous checkpoint's compact range)
//
//   bun bench/cases/anker.ts --db <file> --mode full
import { appendAuditEntry } from "../../src/audit/chain.ts";
import { openStore } from "../../src/db.ts";
import { runAuditAnker } from "../../src/jobs/audit-anker.ts";
import { arg, benchDeps, NOW, report } from "../lib.ts";

const db = arg("db");
const mode = arg("mode");
const store = openStore(db, NOW);
const deps = benchDeps(store);
let added = 0;
if (mode === "incremental") {
  const n = Number(arg("new", "5000"));
  const tenants = (store.sqlite.query("SELECT id FROM tenants ORDER BY id").values() as [number][]).map(([id]) => id);
  const at = new Date(NOW.getTime() + 3600_000);
  for (let i = 0; i < n; i++) {
    appendAuditEntry(store.sqlite, { tenantId: tenants[i % tenants.length]!, actor: "bench@example.nl", action: "dossier.bekeken", subject: `dossier/${i}`, details: { i }, createdAt: at });
  }
  added = n;
} else if (mode !== "full") {
  throw new Error(`unknown mode ${mode}`);
}
const t0 = performance.now();
const r = await runAuditAnker(deps, NOW);
const seconds = (performance.now() - t0) / 1000;
if (r.status !== 200) throw new Error(`audit-anker answered ${r.status}: ${JSON.stringify(r.body).slice(0, 300)}`);
const { n: entries } = store.sqlite.query("SELECT count(*) AS n FROM audit_entries").get() as { n: number };
store.close();
report({ mode, seconds, checkpoints: r.body.aantal, unchanged: r.body.ongewijzigd, added, entries });
