// Where the write API's time goes on PostgreSQL, without HTTP (a diagnosis, not a scored
// figure; bench/cases/pg.ts measures the API itself at L): on a throw-away cluster with
// 1,000 empty tenants, 4 concurrent clients × 25 batches of 500 entries spread over every
// tenant, appended directly (appendEntriesPg) and through storeAuditBatchPg (with a
// sleutel per entry), beside the cost of parsing and validating one batch's JSON.
//
//   bun bench/pg-ingest-profile.ts
import { startCluster } from "../test/pg.ts";
import { openPgStore } from "../src/pg/store.ts";
import { appendEntriesPg } from "../src/pg/chain.ts";
import { storeAuditBatchPg } from "../src/pg/ingest.ts";
import { AuditBatch, prepareAuditBatch } from "../src/ingest/audit.ts";
import { TypeCompiler } from "@sinclair/typebox/compiler";
const cluster = await startCluster();
try {
  const url = await cluster.createDatabase("p");
  const store = await openPgStore(url);
  await store.sql`INSERT INTO tenants (id, naam, actief, aangemaakt) SELECT g, 'T' || g, true, '2026-01-01T00:00:00.000Z' FROM generate_series(1, 1000) g`;
  const B = 25, N = 500, C = 4;
  const mk = (c: number, b: number, tag: string) => ({ entries: Array.from({ length: N }, (_, i) => ({ tenantId: ((c * 7919 + b * N + i) % 1000) + 1, actor: `a${c}@x.nl`, action: "bench.api", subject: `s/${c}/${b}/${i}`, details: { c, b, i }, sleutel: `${tag}-${c}-${b}-${i}` })) });
  let t = performance.now();
  await Promise.all(Array.from({ length: C }, async (_, c) => { for (let b = 0; b < B; b++) { const inputs = prepareAuditBatch(mk(c, b, "d") as any, new Date()); await store.sql.begin((tx) => appendEntriesPg(tx, inputs)); } }));
  console.log("direct (with prepare)", Math.round((C * B * N) / ((performance.now() - t) / 1000)), "/s");
  let prepMs = 0;
  t = performance.now();
  await Promise.all(Array.from({ length: C }, async (_, c) => { for (let b = 0; b < B; b++) { const s = performance.now(); const p = prepareAuditBatch(mk(c, b, "k") as any, new Date()); prepMs += performance.now() - s; await storeAuditBatchPg(store, p); } }));
  console.log("storeAuditBatchPg", Math.round((C * B * N) / ((performance.now() - t) / 1000)), "/s; prepare ms/batch", (prepMs / (C * B)).toFixed(2));
  // JSON parse + validation cost per batch
  const body = JSON.stringify(mk(0, 0, "j"));
  const check = TypeCompiler.Compile(AuditBatch);
  t = performance.now();
  for (let i = 0; i < 100; i++) { const v = JSON.parse(body); if (!check.Check(v)) throw new Error("invalid"); }
  console.log("parse+validate ms/batch", ((performance.now() - t) / 100).toFixed(2), "body bytes", body.length);
  await store.close();
} finally { await cluster.stop(); }
