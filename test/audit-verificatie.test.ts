import { afterEach, describe, expect, test } from "bun:test";
import { appendAuditEntry, entryHash, type AppendedEntry } from "../src/audit/chain.ts";
import { readFileSync, writeFileSync } from "node:fs";
import { runAuditAnker } from "../src/jobs/audit-anker.ts";
import { runAuditVerificatie } from "../src/jobs/audit-verificatie.ts";
import { addTenant, call, makeTestEnv, NOW, type TestEnv } from "./helpers.ts";

let env: TestEnv;
afterEach(() => env?.cleanup());

const PATH = "/api/cron/audit-verificatie";
const DAY = 24 * 3600 * 1000;

/** A tenant with `n` entries, one a day, the newest yesterday. */
function chain(e: TestEnv, naam: string, n: number): { tenantId: number; entries: AppendedEntry[] } {
  const tenantId = addTenant(e.store, naam);
  const entries: AppendedEntry[] = [];
  for (let i = 0; i < n; i++) {
    entries.push(
      appendAuditEntry(e.store.sqlite, {
        tenantId,
        actor: `user${i}@example.nl`,
        action: i % 2 ? "dossier.gewijzigd" : "dossier.bekeken",
        subject: `dossier/${i}`,
        details: { i },
        createdAt: new Date(NOW.getTime() - (n - i) * DAY),
      }),
    );
  }
  return { tenantId, entries };
}

type Row = { tenant_id: number; seq: number; created_at: string; actor: string; action: string; subject: string; details: string; prev_hash: string; hash: string };
function row(e: TestEnv, tenantId: number, seq: number): Row {
  return e.store.sqlite.query("SELECT * FROM audit_entries WHERE tenant_id = ? AND seq = ?").get(tenantId, seq) as Row;
}
/** The body's ankerbestand part when nothing was ever anchored: no file, no rows. */
const noFile = (e: TestEnv) => ({ intact: true, bestand: e.config.auditAnkerBestand, regels: 0, waarschuwingen: [] });

function rehash(r: Row): string {
  return entryHash({ tenantId: r.tenant_id, seq: r.seq, createdAt: r.created_at, actor: r.actor, action: r.action, subject: r.subject, details: r.details, prevHash: r.prev_hash });
}

describe("audit-verificatie", () => {
  test("every tenant is checked; intact chains are 200 with the result per tenant, no alarm, and the state is kept", async () => {
    env = makeTestEnv();
    const a = chain(env, "Gemeente Delft", 5);
    const b = chain(env, "Stichting Leiden", 3);
    const empty = addTenant(env.store, "Nieuw", false);
    const r = await call(env.app, PATH);
    expect(r.status).toBe(200);
    expect(r.json).toEqual({
      gecontroleerd: 3,
      aantalGebroken: 0,
      resultaten: [
        { tenantId: a.tenantId, tenant: "Gemeente Delft", intact: true, aantalEntries: 5 },
        { tenantId: b.tenantId, tenant: "Stichting Leiden", intact: true, aantalEntries: 3 },
        { tenantId: empty, tenant: "Nieuw", intact: true, aantalEntries: 0 },
      ],
      ankerbestand: noFile(env),
      tijdstip: NOW.toISOString(),
    });
    expect(env.alarms.raised).toEqual([]);
    const state = env.store.sqlite.query("SELECT * FROM audit_verification_state ORDER BY tenant_id").all();
    expect(state).toEqual([
      { tenant_id: a.tenantId, gecontroleerd: NOW.toISOString(), intact: 1, aantal_entries: 5, fout_seq: null, fout_entry_id: null, fout_reden: null },
      { tenant_id: b.tenantId, gecontroleerd: NOW.toISOString(), intact: 1, aantal_entries: 3, fout_seq: null, fout_entry_id: null, fout_reden: null },
      { tenant_id: empty, gecontroleerd: NOW.toISOString(), intact: 1, aantal_entries: 0, fout_seq: null, fout_entry_id: null, fout_reden: null },
    ]);
  });

  test("no tenants: 200 with nothing checked", async () => {
    env = makeTestEnv();
    const r = await call(env.app, PATH);
    expect(r.status).toBe(200);
    expect(r.json).toEqual({ gecontroleerd: 0, aantalGebroken: 0, resultaten: [], ankerbestand: noFile(env), tijdstip: NOW.toISOString() });
  });

  const tampers: [string, (e: TestEnv, t: number, es: AppendedEntry[]) => void | Promise<void>, { seq: number; reden: string; entry?: number | null }][] = [
    [
      "a field changed",
      (e, t) => e.store.sqlite.run("UPDATE audit_entries SET details = '{\"i\":99}' WHERE tenant_id = ? AND seq = 4", [t]),
      { seq: 4, reden: "hash-afwijkend" },
    ],
    [
      "a stored hash changed",
      (e, t) => e.store.sqlite.run("UPDATE audit_entries SET hash = ? WHERE tenant_id = ? AND seq = 6", ["ab".repeat(32), t]),
      { seq: 6, reden: "hash-afwijkend" },
    ],
    [
      "a field changed and its hash recomputed",
      (e, t) => {
        const r = { ...row(e, t, 3), actor: "mallory@example.nl" };
        e.store.sqlite.run("UPDATE audit_entries SET actor = ?, hash = ? WHERE tenant_id = ? AND seq = 3", [r.actor, rehash(r), t]);
      },
      // entry 3 is self-consistent now, but entry 4 still points at its old hash
      { seq: 4, reden: "koppeling-verbroken" },
    ],
    [
      "a middle entry deleted",
      (e, t) => e.store.sqlite.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq = 5", [t]),
      { seq: 6, reden: "volgnummer-gat" },
    ],
    [
      "two entries swapped, hashes recomputed for their new positions",
      (e, t) => {
        const r3 = row(e, t, 3);
        const r4 = row(e, t, 4);
        // entry 4's content at position 3, linked to entry 2; entry 3's content at position 4
        const n3 = { ...r4, seq: 3, prev_hash: r3.prev_hash };
        n3.hash = rehash(n3);
        const n4 = { ...r3, seq: 4, prev_hash: n3.hash };
        n4.hash = rehash(n4);
        const upd = e.store.sqlite.query(
          "UPDATE audit_entries SET created_at = ?, actor = ?, action = ?, subject = ?, details = ?, prev_hash = ?, hash = ? WHERE tenant_id = ? AND seq = ?",
        );
        for (const n of [n3, n4]) upd.run(n.created_at, n.actor, n.action, n.subject, n.details, n.prev_hash, n.hash, t, n.seq);
      },
      // 3 and 4 are consistent among themselves; entry 5 still links to the old entry 4
      { seq: 5, reden: "koppeling-verbroken" },
    ],
    [
      "a sequence gap: an entry appended with a skipped number but a valid hash and link",
      (e, t, es) => {
        const head = es[es.length - 1]!;
        const forged = { tenant_id: t, seq: head.seq + 2, created_at: NOW.toISOString(), actor: "x", action: "y", subject: "z", details: "{}", prev_hash: head.hash, hash: "" };
        forged.hash = rehash(forged);
        e.store.sqlite.run(
          "INSERT INTO audit_entries (tenant_id, seq, id, created_at, actor, action, subject, details, prev_hash, hash) VALUES (?, ?, 9999, ?, ?, ?, ?, ?, ?, ?)",
          [t, forged.seq, forged.created_at, forged.actor, forged.action, forged.subject, forged.details, forged.prev_hash, forged.hash],
        );
      },
      { seq: 10, reden: "volgnummer-gat", entry: 9999 },
    ],
    [
      "the oldest entries deleted by hand, without a signed retention record",
      (e, t) => e.store.sqlite.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= 2", [t]),
      { seq: 3, reden: "retentie-ontbreekt" },
    ],
    [
      "the newest entries cut off below a signed checkpoint",
      async (e, t) => {
        expect((await runAuditAnker(e.deps, NOW)).status).toBe(200);
        e.store.sqlite.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq >= 7", [t]);
      },
      { seq: 8, reden: "kop-ontbreekt", entry: null },
    ],
  ];

  for (const [what, tamper, expected] of tampers) {
    test(`${what} → 409 ${expected.reden} at seq ${expected.seq}, alarm, state kept`, async () => {
      env = makeTestEnv();
      const ok = chain(env, "Intact BV", 4);
      const { tenantId, entries } = chain(env, "Zorggroep Zwolle", 8);
      await tamper(env, tenantId, entries);
      const r = await call(env.app, PATH);
      expect(r.status).toBe(409);
      expect(r.json.gecontroleerd).toBe(2);
      expect(r.json.aantalGebroken).toBe(1);
      expect(r.json.tijdstip).toBe(NOW.toISOString());
      expect(r.json.resultaten[0]).toEqual({ tenantId: ok.tenantId, tenant: "Intact BV", intact: true, aantalEntries: 4 });
      const broken = r.json.resultaten[1];
      expect(broken.intact).toBe(false);
      const entryId = expected.entry === undefined ? entries[expected.seq - 1]!.id : expected.entry;
      expect(broken.fout).toEqual({ seq: expected.seq, entryId, reden: expected.reden });

      expect(env.alarms.raised).toHaveLength(1);
      const alarm = env.alarms.raised[0]!;
      expect(alarm.type).toBe("audit-chain-broken");
      expect(alarm.message).toContain("Zorggroep Zwolle");
      // The anchor file itself is sound (or absent, when nothing was anchored): only the chain is broken.
      expect(r.json.ankerbestand).toMatchObject({ intact: true, bestand: env.config.auditAnkerBestand });
      expect(alarm.context).toEqual({
        aantalGebroken: 1,
        ankerbestand: r.json.ankerbestand,
        gebroken: [{ tenantId, tenant: "Zorggroep Zwolle", fout: { seq: expected.seq, entryId, reden: expected.reden } }],
      });
      const state = env.store.sqlite.query("SELECT intact, fout_seq, fout_reden FROM audit_verification_state WHERE tenant_id = ?").get(tenantId);
      expect(state).toEqual({ intact: 0, fout_seq: expected.seq, fout_reden: expected.reden });
    });
  }

  test("a signed retention record altered in the database copy → retentie-ongeldig", async () => {
    env = makeTestEnv({ AUDIT_RETENTIE_DAGEN: "3" });
    const { tenantId, entries } = chain(env, "T", 5); // days −5 … −1: −5 and −4 are older than grens
    expect((await runAuditAnker(env.deps, NOW)).status).toBe(200);
    const ret = await call(env.app, "/api/cron/audit-retentie");
    expect(ret.json.verwijderd).toBe(2);
    expect((await call(env.app, PATH)).status).toBe(200);
    const rec = env.store.sqlite.query("SELECT positie, note FROM audit_anchor_log WHERE tenant_id = ? AND soort = 'retentie'").get(tenantId) as { positie: number; note: string };
    expect(rec.note).toContain(`\nhash ${entries[1]!.hash}\n`);
    // The record now names another hash for the last deleted entry; its signature no longer holds.
    env.store.sqlite.run("UPDATE audit_anchor_log SET note = ? WHERE positie = ?", [rec.note.replace(entries[1]!.hash, "cd".repeat(32)), rec.positie]);
    const r = await call(env.app, PATH);
    expect(r.status).toBe(409);
    expect(r.json.resultaten[0].fout).toEqual({ seq: 3, entryId: entries[2]!.id, reden: "retentie-ongeldig" });
  });

  test("the ankerbestand part: after audit-anker its lines are counted; a file problem alone is 409 with no broken chain, and the alarm names it", async () => {
    env = makeTestEnv();
    chain(env, "A", 4);
    chain(env, "B", 2);
    expect((await runAuditAnker(env.deps, NOW)).status).toBe(200);
    const ok = await call(env.app, PATH);
    expect(ok.status).toBe(200);
    // two tenant checkpoints and one installation checkpoint
    expect(ok.json.ankerbestand).toEqual({ intact: true, bestand: env.config.auditAnkerBestand, regels: 3, waarschuwingen: [] });

    const text = readFileSync(env.config.auditAnkerBestand, "utf8");
    writeFileSync(env.config.auditAnkerBestand, text.replace("\\n4\\n", "\\n5\\n"));
    const r = await call(env.app, PATH);
    expect(r.status).toBe(409);
    expect(r.json.aantalGebroken).toBe(0);
    expect(r.json.ankerbestand).toMatchObject({ intact: false, reden: "bestand-gewijzigd", regels: 3 });
    expect(env.alarms.raised).toHaveLength(1);
    expect(env.alarms.raised[0]!.message).toContain("bestand-gewijzigd");
    expect(env.alarms.raised[0]!.context).toMatchObject({ aantalGebroken: 0, ankerbestand: r.json.ankerbestand });
  });

  test("several broken tenants raise ONE alarm per run, naming each", async () => {
    env = makeTestEnv();
    const a = chain(env, "Alfa", 3);
    chain(env, "Beta", 3);
    const c = chain(env, "Gamma", 3);
    for (const t of [a.tenantId, c.tenantId]) env.store.sqlite.run("UPDATE audit_entries SET actor = 'x' WHERE tenant_id = ? AND seq = 2", [t]);
    const r = await call(env.app, PATH);
    expect(r.status).toBe(409);
    expect(r.json.aantalGebroken).toBe(2);
    expect(env.alarms.raised).toHaveLength(1);
    expect(env.alarms.raised[0]!.message).toContain("Alfa");
    expect(env.alarms.raised[0]!.message).toContain("Gamma");
    expect(env.alarms.raised[0]!.message).not.toContain("Beta");
  });

  test("a repaired chain is reported intact again, and the kept state follows", async () => {
    env = makeTestEnv();
    const { tenantId } = chain(env, "T", 3);
    env.store.sqlite.run("UPDATE audit_entries SET actor = 'x' WHERE tenant_id = ? AND seq = 2", [tenantId]);
    expect((await call(env.app, PATH)).status).toBe(409);
    env.store.sqlite.run("UPDATE audit_entries SET actor = 'user1@example.nl' WHERE tenant_id = ? AND seq = 2", [tenantId]);
    env.setNow(new Date(NOW.getTime() + DAY));
    expect((await call(env.app, PATH)).status).toBe(200);
    const state = env.store.sqlite.query("SELECT gecontroleerd, intact, fout_reden FROM audit_verification_state").get();
    expect(state).toEqual({ gecontroleerd: new Date(NOW.getTime() + DAY).toISOString(), intact: 1, fout_reden: null });
  });

  test("after audit-retentie the chain verifies (200); an out-of-order timestamp leaves no hole", async () => {
    env = makeTestEnv({ AUDIT_RETENTIE_DAGEN: "3" });
    const { tenantId } = chain(env, "T", 8); // days −8 … −1
    // an out-of-order entry: written now with an old timestamp
    appendAuditEntry(env.store.sqlite, { tenantId, actor: "a", action: "b", subject: "c", createdAt: new Date(NOW.getTime() - 30 * DAY) });
    const ret = await call(env.app, "/api/cron/audit-retentie");
    // days −8 … −4 are older than grens (−3); −3 is exactly at grens and kept; seq 9 stays behind it
    expect(ret.json.verwijderd).toBe(5);
    const r = await call(env.app, PATH);
    expect(r.status).toBe(200);
    expect(r.json.resultaten[0]).toMatchObject({ intact: true, aantalEntries: 4 });
  });

  test("verifying on worker threads gives the same results as in-thread", async () => {
    env = makeTestEnv();
    chain(env, "A", 20);
    const b = chain(env, "B", 15);
    chain(env, "C", 0);
    chain(env, "D", 7);
    env.store.sqlite.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq = 9", [b.tenantId]);
    const inThread = await runAuditVerificatie(env.deps, NOW, { workers: 0 });
    const pooled = await runAuditVerificatie(env.deps, NOW, { workers: 2 });
    expect(pooled).toEqual(inThread);
    expect(pooled.status).toBe(409);
    expect(pooled.body.resultaten[1]!.fout).toEqual({ seq: 10, entryId: b.entries[9]!.id, reden: "volgnummer-gat" });
    expect(pooled.body.resultaten.map((r) => r.aantalEntries)).toEqual([20, 14, 0, 7]);
  });

  test("the verification run is recorded as afwijking in the job-run history when a chain is broken", async () => {
    env = makeTestEnv();
    const { tenantId } = chain(env, "T", 3);
    env.store.sqlite.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq = 2", [tenantId]);
    await call(env.app, PATH);
    const run = env.store.sqlite.query("SELECT job, uitkomst, http_status FROM job_runs").get();
    expect(run).toEqual({ job: "audit-verificatie", uitkomst: "afwijking", http_status: 409 });
  });
});
