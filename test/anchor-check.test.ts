// The anchor file against the database's copy of it when the copy is longer than one
// chunk of rows (the comparison reads rows in chunks of 1,000 from any store): a line
// beyond the first chunk that differs, or is missing from the database, is still found
// at its place.
import { afterEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { compareRowsWithFile, compareWithFile, type AnchorComparison } from "../src/audit/anchor-check.ts";
import { parseVerifierKey } from "../src/audit/note.ts";
import { anchorRows } from "../src/pg/offline.ts";
import { call, TEST_VERIFIER_KEY } from "./helpers.ts";
import { addTenant, anchorRowCount, fillChain, makeEnv, type Env } from "./dialect.ts";

setDefaultTimeout(60_000);
let env: Env;
afterEach(() => env?.cleanup());
const VERIFIERS = [parseVerifierKey(TEST_VERIFIER_KEY)];

/** The anchor file against the store's audit_anchor_log, as audit-verificatie and audit-anker compare them on that store. */
function compare(e: Env): Promise<AnchorComparison> {
  if (e.store.kind === "sqlite") return compareWithFile(e.config.databasePath, e.config.auditAnkerBestand, VERIFIERS);
  return e.store.sql.begin("ISOLATION LEVEL REPEATABLE READ READ ONLY", (tx) => compareRowsWithFile(anchorRows(tx), e.config.auditAnkerBestand, VERIFIERS));
}

describe("compareWithFile over more rows than one chunk", () => {
  test("2,402 lines in agreement; then a row past the first 1,000 changed, then one deleted: each found at its place", async () => {
    env = await makeEnv();
    // 1,200 tenants, two audit-anker runs: 2 × (1,200 checkpoints + 1 installation checkpoint).
    // Arranged side by side (each tenant its own append; on PostgreSQL over the pool's connections).
    const e = env;
    const ids = await Promise.all(Array.from({ length: 1200 }, (_, i) => addTenant(e.db, `T${i}`)));
    await Promise.all(ids.map((id) => fillChain(e.store, id, 1)));
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    await Promise.all(ids.map((id) => fillChain(e.store, id, 1, { from: 1 })));
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    expect(await anchorRowCount(env.db)).toBe(2402);

    const clean = await compare(env);
    expect(clean.probleem).toBeUndefined();
    expect(clean.perTenant.size).toBe(0);
    expect(clean.checkpoints.size).toBe(1200);
    expect(clean.regels).toBe(2402);

    // Row number 1,500 (in the second chunk): its note altered by a database writer.
    const victim = (await env.db.get<{ positie: number; tenantId: number; grootte: number }>(
      'SELECT positie, tenant_id AS "tenantId", grootte FROM audit_anchor_log ORDER BY positie LIMIT 1 OFFSET 1500',
    ))!;
    await env.db.run("UPDATE audit_anchor_log SET note = replace(note, '\n\n', '\n\nx') WHERE positie = ?", victim.positie);
    const changed = await compare(env);
    expect(changed.perTenant.get(victim.tenantId)).toMatchObject({ reden: "checkpoint-niet-in-bestand", positie: victim.positie });
    expect(changed.perTenant.size).toBe(1);

    // Deleted instead: the file's line has no row any more.
    await env.db.run("DELETE FROM audit_anchor_log WHERE positie = ?", victim.positie);
    const deleted = await compare(env);
    expect(deleted.perTenant.get(victim.tenantId)).toMatchObject({ reden: "checkpoint-ontbreekt", positie: victim.positie });
    expect(deleted.perTenant.size).toBe(1);
  });
});
