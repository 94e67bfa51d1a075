// audit-anker at scale:
//   --mode history      the checkpoints audit-anker would have signed had it run once a
//                       quarter over the data's ten years (--every-days 91): one run per
//                       quarter, a checkpoint per tenant of its chain as it stood then
//                       (the demo data's created_at rises with seq), signed with the
//                       bench key; their rows keep no compact range, so the first run
//                       below still hashes every entry. Retention proves a prefix against
//                       the first of them that covers it, as it would on an installation
//                       that audit-anker has anchored every night since it began.
//   --mode full         the first run over a database without checkpoints: every entry hashed
//   --mode incremental  a day of new entries (--new N, spread over the tenants), then a run:
//                       only those entries are hashed (the previous checkpoint's compact range)
//
//   bun bench/cases/anker.ts --db <file> --mode full
import { appendAuditEntry } from "../../src/audit/chain.ts";
import { appendingTransaction, type StoredLine } from "../../src/audit/anchor-file.ts";
import { checkpointLine, writeRun } from "../../src/audit/anchoring.ts";
import { auditKeys } from "../../src/audit/keys.ts";
import { CompactRange } from "../../src/audit/merkle.ts";
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
} else if (mode === "history") {
  const everyDays = Number(arg("every-days", "91"));
  const keys = auditKeys(deps.config);
  const path = deps.config.auditAnkerBestand;
  const tenants = (store.sqlite.query("SELECT id FROM tenants ORDER BY id").values() as [number][]).map(([id]) => id);
  const oldest = Date.parse((store.sqlite.query("SELECT min(created_at) AS m FROM audit_entries").get() as { m: string }).m);
  const sizeAt = store.sqlite.query("SELECT max(seq) AS n FROM audit_entries WHERE tenant_id = ? AND created_at < ?");
  const hashes = store.sqlite.query("SELECT hash FROM audit_entries WHERE tenant_id = ? AND seq > ? AND seq <= ? ORDER BY seq");
  const trees = new Map(tenants.map((t) => [t, new CompactRange()]));
  const t0 = performance.now();
  let runs = 0;
  let lines = 0;
  for (let at = oldest + everyDays * 86_400_000; at < NOW.getTime() - everyDays * 86_400_000; at += everyDays * 86_400_000) {
    const run: StoredLine[] = [];
    for (const t of tenants) {
      const tree = trees.get(t)!;
      const size = (sizeAt.get(t, new Date(at).toISOString()) as { n: number | null }).n ?? 0;
      if (size <= tree.size) continue;
      for (const { hash } of hashes.iterate(t, tree.size, size) as IterableIterator<{ hash: string }>) tree.pushEntryHash(hash);
      run.push({ ...checkpointLine(keys, t, tree, 0), bereik: null });
    }
    appendingTransaction(store.sqlite, (appended) => writeRun(store.sqlite, path, keys, run, appended));
    runs++;
    lines += run.length;
  }
  store.close();
  report({ mode, seconds: (performance.now() - t0) / 1000, runs, checkpoints: lines });
  process.exit(0);
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
