// The anchor file against the database's copy of it when the copy is longer than one
// chunk of rows (the comparison reads rows in chunks of 1,000 from any store): a line
// beyond the first chunk that differs, or is missing from the database, is still found
// at its place.
import { afterEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { compareWithFile } from "../src/audit/anchor-check.ts";
import { parseVerifierKey } from "../src/audit/note.ts";
import { addTenant, call, fillChain, makeTestEnv, TEST_VERIFIER_KEY, type TestEnv } from "./helpers.ts";

setDefaultTimeout(60_000);
let env: TestEnv;
afterEach(() => env?.cleanup());
const VERIFIERS = [parseVerifierKey(TEST_VERIFIER_KEY)];

describe("compareWithFile over more rows than one chunk", () => {
  test("2,402 lines in agreement; then a row past the first 1,000 changed, then one deleted: each found at its place", async () => {
    env = makeTestEnv();
    // 1,200 tenants, two audit-anker runs: 2 × (1,200 checkpoints + 1 installation checkpoint).
    for (let i = 0; i < 1200; i++) fillChain(env.store, addTenant(env.store, `T${i}`), 1);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    for (const { id } of env.store.sqlite.query("SELECT id FROM tenants").all() as { id: number }[]) fillChain(env.store, id, 1, { from: 1 });
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    const s = env.store.sqlite;
    expect((s.query("SELECT count(*) AS n FROM audit_anchor_log").get() as { n: number }).n).toBe(2402);

    const clean = await compareWithFile(env.config.databasePath, env.config.auditAnkerBestand, VERIFIERS);
    expect(clean.probleem).toBeUndefined();
    expect(clean.perTenant.size).toBe(0);
    expect(clean.checkpoints.size).toBe(1200);
    expect(clean.regels).toBe(2402);

    // Row number 1,500 (in the second chunk): its note altered by a database writer.
    const victim = s.query("SELECT positie, tenant_id AS tenantId, grootte FROM audit_anchor_log ORDER BY positie LIMIT 1 OFFSET 1500").get() as { positie: number; tenantId: number; grootte: number };
    s.query("UPDATE audit_anchor_log SET note = replace(note, '\n\n', '\n\nx') WHERE positie = ?").run(victim.positie);
    const changed = await compareWithFile(env.config.databasePath, env.config.auditAnkerBestand, VERIFIERS);
    expect(changed.perTenant.get(victim.tenantId)).toMatchObject({ reden: "checkpoint-niet-in-bestand", positie: victim.positie });
    expect(changed.perTenant.size).toBe(1);

    // Deleted instead: the file's line has no row any more.
    s.query("DELETE FROM audit_anchor_log WHERE positie = ?").run(victim.positie);
    const deleted = await compareWithFile(env.config.databasePath, env.config.auditAnkerBestand, VERIFIERS);
    expect(deleted.perTenant.get(victim.tenantId)).toMatchObject({ reden: "checkpoint-ontbreekt", positie: victim.positie });
    expect(deleted.perTenant.size).toBe(1);
  });
});
