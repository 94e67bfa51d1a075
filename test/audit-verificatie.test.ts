import { afterEach, describe, expect, test } from "bun:test";
import { appendEntries, canonicalJson, entryHash, type AppendedEntry, type ChainInput } from "../src/audit/chain.ts";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { mailAlarmChannel } from "../src/alarms/mail-channel.ts";
import type { AnyStore } from "../src/deps.ts";
import { runAuditAnker } from "../src/jobs/audit-anker.ts";
import { runAuditVerificatie } from "../src/jobs/audit-verificatie.ts";
import { createMailer } from "../src/mail/transport.ts";
import { appendEntriesPg } from "../src/pg/chain.ts";
import { call, NOW, stateZegel } from "./helpers.ts";
import { addTenant, makeEnv, type Env } from "./dialect.ts";
import { startSmtp } from "./smtp.ts";

let env: Env;
afterEach(() => env?.cleanup());

const PATH = "/api/cron/audit-verificatie";
const DAY = 24 * 3600 * 1000;

/** Appends entries as the write API does, on either store, and returns them as stored. */
async function append(store: AnyStore, inputs: ChainInput[]): Promise<AppendedEntry[]> {
  if (store.kind === "sqlite") return store.sqlite.transaction(() => appendEntries(store.sqlite, inputs)).immediate();
  return store.sql.begin((tx) => appendEntriesPg(tx, inputs));
}

/** A tenant with `n` entries, one a day, the newest yesterday. */
async function chain(e: Env, naam: string, n: number): Promise<{ tenantId: number; entries: AppendedEntry[] }> {
  const tenantId = await addTenant(e.db, naam);
  const inputs: ChainInput[] = [];
  for (let i = 0; i < n; i++) {
    inputs.push({
      tenantId,
      actor: `user${i}@example.nl`,
      action: i % 2 ? "dossier.gewijzigd" : "dossier.bekeken",
      subject: `dossier/${i}`,
      details: canonicalJson({ i }),
      createdAt: new Date(NOW.getTime() - (n - i) * DAY).toISOString(),
    });
  }
  return { tenantId, entries: await append(e.store, inputs) };
}

type Row = { tenant_id: number; seq: number; created_at: string; actor: string; action: string; subject: string; details: string; prev_hash: string; hash: string };
async function row(e: Env, tenantId: number, seq: number): Promise<Row> {
  return (await e.db.get<Row>("SELECT * FROM audit_entries WHERE tenant_id = ? AND seq = ?", tenantId, seq))!;
}
/** The body's ankerbestand part when nothing was ever anchored: no file, no rows. */
const noFile = (e: Env) => ({ intact: true, bestand: e.config.auditAnkerBestand, regels: 0, waarschuwingen: [] });

function rehash(r: Row): string {
  return entryHash({ tenantId: r.tenant_id, seq: r.seq, createdAt: r.created_at, actor: r.actor, action: r.action, subject: r.subject, details: r.details, prevHash: r.prev_hash });
}

describe("audit-verificatie", () => {
  test("every tenant is checked; intact chains are 200 with the result per tenant, no alarm, and the state is kept", async () => {
    env = await makeEnv();
    const a = await chain(env, "Gemeente Delft", 5);
    const b = await chain(env, "Stichting Leiden", 3);
    const empty = await addTenant(env.db, "Nieuw", false);
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
      schema: { intact: true, afwijkingen: [] },
      tijdstip: NOW.toISOString(),
    });
    expect(env.alarms.raised).toEqual([]);
    const state = await env.db.all("SELECT * FROM audit_verification_state ORDER BY tenant_id");
    expect(state).toEqual([
      { tenant_id: a.tenantId, gecontroleerd: NOW.toISOString(), intact: 1, aantal_entries: 5, fout_seq: null, fout_entry_id: null, fout_reden: null, zegel: stateZegel({ tenantId: a.tenantId, gecontroleerd: NOW.toISOString(), intact: true, aantalEntries: 5 }) },
      { tenant_id: b.tenantId, gecontroleerd: NOW.toISOString(), intact: 1, aantal_entries: 3, fout_seq: null, fout_entry_id: null, fout_reden: null, zegel: stateZegel({ tenantId: b.tenantId, gecontroleerd: NOW.toISOString(), intact: true, aantalEntries: 3 }) },
      { tenant_id: empty, gecontroleerd: NOW.toISOString(), intact: 1, aantal_entries: 0, fout_seq: null, fout_entry_id: null, fout_reden: null, zegel: stateZegel({ tenantId: empty, gecontroleerd: NOW.toISOString(), intact: true, aantalEntries: 0 }) },
    ]);
  });

  test("a trigger or view that nachtwacht did not make, in the database's schema: 409 with the alarm, though every chain is intact", async () => {
    env = await makeEnv();
    await chain(env, "Gemeente Delft", 3);
    expect((await call(env.app, PATH)).status).toBe(200);
    if (env.dialect === "sqlite") {
      await env.db.run("CREATE TRIGGER stil AFTER INSERT ON audit_entries BEGIN UPDATE audit_entries SET actor = 'iemand-anders' WHERE tenant_id = NEW.tenant_id AND seq = NEW.seq AND NEW.actor = 'mallory'; END");
      await env.db.run("CREATE VIEW kopie AS SELECT * FROM audit_entries");
    } else {
      await env.db.run("CREATE FUNCTION stil() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$");
      await env.db.run("CREATE TRIGGER stil AFTER INSERT ON audit_entries FOR EACH ROW EXECUTE FUNCTION stil()");
      await env.db.run("CREATE VIEW kopie AS SELECT * FROM audit_entries");
    }
    const r = await call(env.app, PATH);
    expect(r.status).toBe(409);
    expect(r.json.aantalGebroken).toBe(0);
    expect(r.json.schema).toEqual({ intact: false, afwijkingen: ["trigger stil op audit_entries", "view kopie"] });
    const alarm = env.alarms.raised.at(-1)!;
    expect(alarm.type).toBe("audit-chain-broken");
    expect(alarm.message).toContain("Het schema van de database wijkt af van wat nachtwacht aanmaakte (trigger stil op audit_entries; view kopie)");
  });

  test("no tenants: 200 with nothing checked", async () => {
    env = await makeEnv();
    const r = await call(env.app, PATH);
    expect(r.status).toBe(200);
    expect(r.json).toEqual({ gecontroleerd: 0, aantalGebroken: 0, resultaten: [], ankerbestand: noFile(env), schema: { intact: true, afwijkingen: [] }, tijdstip: NOW.toISOString() });
  });

  const tampers: [string, (e: Env, t: number, es: AppendedEntry[]) => Promise<void>, { seq: number; reden: string; entry?: number | null }][] = [
    [
      "a field changed",
      (e, t) => e.db.run("UPDATE audit_entries SET details = '{\"i\":99}' WHERE tenant_id = ? AND seq = 4", t),
      { seq: 4, reden: "hash-afwijkend" },
    ],
    [
      "a stored hash changed",
      (e, t) => e.db.run("UPDATE audit_entries SET hash = ? WHERE tenant_id = ? AND seq = 6", "ab".repeat(32), t),
      { seq: 6, reden: "hash-afwijkend" },
    ],
    [
      "a field changed and its hash recomputed",
      async (e, t) => {
        const r = { ...(await row(e, t, 3)), actor: "mallory@example.nl" };
        await e.db.run("UPDATE audit_entries SET actor = ?, hash = ? WHERE tenant_id = ? AND seq = 3", r.actor, rehash(r), t);
      },
      // entry 3 is self-consistent now, but entry 4 still points at its old hash
      { seq: 4, reden: "koppeling-verbroken" },
    ],
    [
      "a middle entry deleted",
      (e, t) => e.db.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq = 5", t),
      { seq: 6, reden: "volgnummer-gat" },
    ],
    [
      "two entries swapped, hashes recomputed for their new positions",
      async (e, t) => {
        const r3 = await row(e, t, 3);
        const r4 = await row(e, t, 4);
        // entry 4's content at position 3, linked to entry 2; entry 3's content at position 4
        const n3 = { ...r4, seq: 3, prev_hash: r3.prev_hash };
        n3.hash = rehash(n3);
        const n4 = { ...r3, seq: 4, prev_hash: n3.hash };
        n4.hash = rehash(n4);
        const upd = "UPDATE audit_entries SET created_at = ?, actor = ?, action = ?, subject = ?, details = ?, prev_hash = ?, hash = ? WHERE tenant_id = ? AND seq = ?";
        for (const n of [n3, n4]) await e.db.run(upd, n.created_at, n.actor, n.action, n.subject, n.details, n.prev_hash, n.hash, t, n.seq);
      },
      // 3 and 4 are consistent among themselves; entry 5 still links to the old entry 4
      { seq: 5, reden: "koppeling-verbroken" },
    ],
    [
      "a sequence gap: an entry appended with a skipped number but a valid hash and link",
      async (e, t, es) => {
        const head = es[es.length - 1]!;
        const forged = { tenant_id: t, seq: head.seq + 2, created_at: NOW.toISOString(), actor: "x", action: "y", subject: "z", details: "{}", prev_hash: head.hash, hash: "" };
        forged.hash = rehash(forged);
        await e.db.run(
          "INSERT INTO audit_entries (tenant_id, seq, id, created_at, actor, action, subject, details, prev_hash, hash) VALUES (?, ?, 9999, ?, ?, ?, ?, ?, ?, ?)",
          t,
          forged.seq,
          forged.created_at,
          forged.actor,
          forged.action,
          forged.subject,
          forged.details,
          forged.prev_hash,
          forged.hash,
        );
      },
      { seq: 10, reden: "volgnummer-gat", entry: 9999 },
    ],
    [
      "the oldest entries deleted by hand, without a signed retention record",
      (e, t) => e.db.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= 2", t),
      { seq: 3, reden: "retentie-ontbreekt" },
    ],
    [
      "the newest entries cut off below a signed checkpoint",
      async (e, t) => {
        expect((await runAuditAnker(e.deps, NOW)).status).toBe(200);
        await e.db.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq >= 7", t);
      },
      { seq: 8, reden: "kop-ontbreekt", entry: null },
    ],
  ];

  for (const [what, tamper, expected] of tampers) {
    test(`${what} → 409 ${expected.reden} at seq ${expected.seq}, alarm, state kept`, async () => {
      env = await makeEnv();
      const ok = await chain(env, "Intact BV", 4);
      const { tenantId, entries } = await chain(env, "Zorggroep Zwolle", 8);
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
        schema: { intact: true, afwijkingen: [] },
        gebroken: [{ tenantId, tenant: "Zorggroep Zwolle", fout: { seq: expected.seq, entryId, reden: expected.reden } }],
      });
      const state = await env.db.get("SELECT intact, fout_seq, fout_reden FROM audit_verification_state WHERE tenant_id = ?", tenantId);
      expect(state).toEqual({ intact: 0, fout_seq: expected.seq, fout_reden: expected.reden });
    });
  }

  test("a signed retention record altered in the database copy → retentie-ongeldig", async () => {
    env = await makeEnv({ AUDIT_RETENTIE_DAGEN: "3" });
    const { tenantId, entries } = await chain(env, "T", 5); // days −5 … −1: −5 and −4 are older than grens
    expect((await runAuditAnker(env.deps, NOW)).status).toBe(200);
    const ret = await call(env.app, "/api/cron/audit-retentie");
    expect(ret.json.verwijderd).toBe(2);
    expect((await call(env.app, PATH)).status).toBe(200);
    const rec = (await env.db.get<{ positie: number; note: string }>("SELECT positie, note FROM audit_anchor_log WHERE tenant_id = ? AND soort = 'retentie'", tenantId))!;
    expect(rec.note).toContain(`\nhash ${entries[1]!.hash}\n`);
    // The record now names another hash for the last deleted entry; its signature no longer holds.
    await env.db.run("UPDATE audit_anchor_log SET note = ? WHERE positie = ?", rec.note.replace(entries[1]!.hash, "cd".repeat(32)), rec.positie);
    const r = await call(env.app, PATH);
    expect(r.status).toBe(409);
    expect(r.json.resultaten[0].fout).toEqual({ seq: 3, entryId: entries[2]!.id, reden: "retentie-ongeldig" });
  });

  test("the ankerbestand part: after audit-anker its lines are counted; a file problem alone is 409 with no broken chain, and the alarm names it", async () => {
    env = await makeEnv();
    await chain(env, "A", 4);
    await chain(env, "B", 2);
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
    env = await makeEnv();
    const a = await chain(env, "Alfa", 3);
    await chain(env, "Beta", 3);
    const c = await chain(env, "Gamma", 3);
    for (const t of [a.tenantId, c.tenantId]) await env.db.run("UPDATE audit_entries SET actor = 'x' WHERE tenant_id = ? AND seq = 2", t);
    const r = await call(env.app, PATH);
    expect(r.status).toBe(409);
    expect(r.json.aantalGebroken).toBe(2);
    expect(env.alarms.raised).toHaveLength(1);
    expect(env.alarms.raised[0]!.message).toContain("Alfa");
    expect(env.alarms.raised[0]!.message).toContain("Gamma");
    expect(env.alarms.raised[0]!.message).not.toContain("Beta");
  });

  test("the alarm mail of a broken chain shows a tenant named with U+202E without it, in the HTML and the text", async () => {
    env = await makeEnv();
    const a = await chain(env, "\u202eGemeente Noord", 3);
    await env.db.run("UPDATE audit_entries SET actor = 'x' WHERE tenant_id = ? AND seq = 2", a.tenantId);
    expect((await call(env.app, PATH)).status).toBe(409);
    const [alarm] = env.alarms.raised;
    expect(alarm!.type).toBe("audit-chain-broken");
    // The alarm as the service's e-mail channel mails it, over real SMTP.
    const smtp = await startSmtp();
    const mailer = createMailer({ smtpUrl: smtp.url, from: "nw@example.test", outboxDir: join(env.config.databasePath, "..", "outbox") });
    try {
      await mailAlarmChannel({ mailer, recipient: "ops@example.test", tijdzone: "Europe/Amsterdam", clock: () => NOW }).raise(alarm!);
    } finally {
      await mailer.close();
      await smtp.stop();
    }
    const [m] = smtp.received;
    for (const part of [m!.subject, m!.text, m!.html]) {
      expect(part).toContain("Gemeente Noord");
      expect(part).not.toContain("\u202e");
    }
    // The context's rows too: the tenant's name in `gebroken`.
    expect(m!.text).toMatch(/gebroken\s+tenantId: \d+, tenant: Gemeente Noord,/);
  });

  test("a repaired chain is reported intact again, and the kept state follows", async () => {
    env = await makeEnv();
    const { tenantId } = await chain(env, "T", 3);
    await env.db.run("UPDATE audit_entries SET actor = 'x' WHERE tenant_id = ? AND seq = 2", tenantId);
    expect((await call(env.app, PATH)).status).toBe(409);
    await env.db.run("UPDATE audit_entries SET actor = 'user1@example.nl' WHERE tenant_id = ? AND seq = 2", tenantId);
    env.setNow(new Date(NOW.getTime() + DAY));
    expect((await call(env.app, PATH)).status).toBe(200);
    const state = await env.db.get("SELECT gecontroleerd, intact, fout_reden FROM audit_verification_state");
    expect(state).toEqual({ gecontroleerd: new Date(NOW.getTime() + DAY).toISOString(), intact: 1, fout_reden: null });
  });

  test("after audit-retentie the chain verifies (200); an out-of-order timestamp leaves no hole", async () => {
    env = await makeEnv({ AUDIT_RETENTIE_DAGEN: "3" });
    const { tenantId } = await chain(env, "T", 8); // days −8 … −1
    // an out-of-order entry: written now with an old timestamp
    await append(env.store, [{ tenantId, actor: "a", action: "b", subject: "c", details: canonicalJson({}), createdAt: new Date(NOW.getTime() - 30 * DAY).toISOString() }]);
    const ret = await call(env.app, "/api/cron/audit-retentie");
    // days −8 … −4 are older than grens (−3); −3 is exactly at grens and kept; seq 9 stays behind it
    expect(ret.json.verwijderd).toBe(5);
    const r = await call(env.app, PATH);
    expect(r.status).toBe(200);
    expect(r.json.resultaten[0]).toMatchObject({ intact: true, aantalEntries: 4 });
  });

  test("verifying on worker threads gives the same results as in-thread", async () => {
    env = await makeEnv();
    await chain(env, "A", 20);
    const b = await chain(env, "B", 15);
    await chain(env, "C", 0);
    await chain(env, "D", 7);
    await env.db.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq = 9", b.tenantId);
    const inThread = await runAuditVerificatie(env.deps, NOW, { workers: 0 });
    const pooled = await runAuditVerificatie(env.deps, NOW, { workers: 2 });
    expect(pooled).toEqual(inThread);
    expect(pooled.status).toBe(409);
    expect(pooled.body.resultaten[1]!.fout).toEqual({ seq: 10, entryId: b.entries[9]!.id, reden: "volgnummer-gat" });
    expect(pooled.body.resultaten.map((r) => r.aantalEntries)).toEqual([20, 14, 0, 7]);
  });

  test("the verification run is recorded as afwijking in the job-run history when a chain is broken", async () => {
    env = await makeEnv();
    const { tenantId } = await chain(env, "T", 3);
    await env.db.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq = 2", tenantId);
    await call(env.app, PATH);
    const run = await env.db.get("SELECT job, uitkomst, http_status FROM job_runs");
    expect(run).toEqual({ job: "audit-verificatie", uitkomst: "afwijking", http_status: 409 });
  });
});
