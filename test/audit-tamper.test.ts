// The attacks of docs/audit-chain.md's threat model, tried as a database writer would:
// with plain SQL on the database (and, for root, on the anchor file), after audit-anker
// signed the chains. Each must make the nightly audit-verificatie, called over HTTP,
// answer 409 with the reason that says what happened, and raise the alarm.
import { afterEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { readFileSync, rmSync, truncateSync, writeFileSync } from "node:fs";
import { appendEntries, entryHash } from "../src/audit/chain.ts";
import { runAuditRetentie } from "../src/jobs/audit-retentie.ts";
import { call, NOW } from "./helpers.ts";
import { addTenant, copyDatabase, fillChain, makeEnv, restoreCopy, sqliteOnly, type Env, type TestDb } from "./dialect.ts";

// On the PostgreSQL run the first test may start the cluster (test/dialect.ts), on a shared host that takes seconds.
setDefaultTimeout(30_000);
let env: Env;
afterEach(() => env?.cleanup());

/** Two tenants with 40 and 25 entries, signed by audit-anker. */
async function anchored(): Promise<{ a: number; b: number }> {
  env = await makeEnv();
  const a = await addTenant(env.db, "Gemeente Delft");
  const b = await addTenant(env.db, "Stichting Leiden");
  await fillChain(env.store, a, 40);
  await fillChain(env.store, b, 25);
  const r = await call(env.app, "/api/cron/audit-anker");
  expect(r.status).toBe(200);
  expect(r.json.aantal).toBe(2);
  return { a, b };
}

async function verify() {
  return call(env.app, "/api/cron/audit-verificatie");
}

function tenantResult(body: any, tenantId: number) {
  return body.resultaten.find((r: any) => r.tenantId === tenantId);
}

type Row = { tenant_id: number; seq: number; created_at: string; actor: string; action: string; subject: string; details: string; prev_hash: string; hash: string };

/** Rewrites a tenant's chain from `fromSeq` on so that every hash and link is consistent again. */
async function recompute(db: TestDb, tenantId: number, fromSeq: number) {
  const rows = await db.all<Row>("SELECT * FROM audit_entries WHERE tenant_id = ? AND seq >= ? ORDER BY seq", tenantId, fromSeq);
  let prev = (await db.get<{ hash: string }>("SELECT hash FROM audit_entries WHERE tenant_id = ? AND seq = ?", tenantId, fromSeq - 1))?.hash;
  for (const r of rows) {
    const prevHash = prev ?? r.prev_hash;
    const hash = entryHash({ tenantId, seq: r.seq, createdAt: r.created_at, actor: r.actor, action: r.action, subject: r.subject, details: r.details, prevHash });
    await db.run("UPDATE audit_entries SET prev_hash = ?, hash = ? WHERE tenant_id = ? AND seq = ?", prevHash, hash, tenantId, r.seq);
    prev = hash;
  }
}

function expectAlarm() {
  expect(env.alarms.raised.map((x) => x.type)).toContain("audit-chain-broken");
}

describe("tamper evidence: the nightly check, over HTTP, against a database writer", () => {
  test("untouched: 200, the anchor file and every chain intact", async () => {
    const { a } = await anchored();
    const r = await verify();
    expect(r.status).toBe(200);
    expect(r.json.ankerbestand).toMatchObject({ intact: true });
    expect(tenantResult(r.json, a)).toMatchObject({ intact: true, aantalEntries: 40 });
    expect(env.alarms.raised).toEqual([]);
  });

  test("a field changed → hash-afwijkend", async () => {
    const { a } = await anchored();
    await env.db.run("UPDATE audit_entries SET actor = 'iemand-anders' WHERE tenant_id = ? AND seq = 12", a);
    const r = await verify();
    expect(r.status).toBe(409);
    expect(tenantResult(r.json, a).fout).toMatchObject({ seq: 12, reden: "hash-afwijkend" });
    expectAlarm();
  });

  test("a middle entry deleted → volgnummer-gat", async () => {
    const { a } = await anchored();
    await env.db.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq = 20", a);
    const r = await verify();
    expect(r.status).toBe(409);
    expect(tenantResult(r.json, a).fout).toMatchObject({ seq: 21, reden: "volgnummer-gat" });
  });

  test("two entries swapped (contents exchanged) → koppeling-verbroken or hash-afwijkend at the first", async () => {
    const { a } = await anchored();
    const db = env.db;
    const r10 = (await db.get<Row>("SELECT * FROM audit_entries WHERE tenant_id = ? AND seq = 10", a))!;
    const r11 = (await db.get<Row>("SELECT * FROM audit_entries WHERE tenant_id = ? AND seq = 11", a))!;
    const put = "UPDATE audit_entries SET created_at = ?, actor = ?, action = ?, subject = ?, details = ?, prev_hash = ?, hash = ? WHERE tenant_id = ? AND seq = ?";
    await db.run(put, r11.created_at, r11.actor, r11.action, r11.subject, r11.details, r11.prev_hash, r11.hash, a, 10);
    await db.run(put, r10.created_at, r10.actor, r10.action, r10.subject, r10.details, r10.prev_hash, r10.hash, a, 11);
    const r = await verify();
    expect(r.status).toBe(409);
    expect(tenantResult(r.json, a).fout).toMatchObject({ seq: 10, reden: "hash-afwijkend" });
  });

  test("a sequence gap (seq renumbered) → volgnummer-gat", async () => {
    const { a } = await anchored();
    // Renumber the newest entry: seq 40 becomes 42, hash recomputed to match its content.
    await env.db.run("UPDATE audit_entries SET seq = 42 WHERE tenant_id = ? AND seq = 40", a);
    await recompute(env.db, a, 42);
    const r = await verify();
    expect(r.status).toBe(409);
    expect(tenantResult(r.json, a).fout).toMatchObject({ seq: 42, reden: "volgnummer-gat" });
  });

  test("oldest entries deleted and the retention anchor rewritten to match → retentie-ontbreekt", async () => {
    const { a } = await anchored();
    const db = env.db;
    const h = (await db.get<{ hash: string }>("SELECT hash FROM audit_entries WHERE tenant_id = ? AND seq = 15", a))!.hash;
    await db.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= 15", a);
    await db.run("INSERT INTO audit_retention_anchors (tenant_id, seq, hash, bijgewerkt) VALUES (?, 15, ?, ?)", a, h, NOW.toISOString());
    const r = await verify();
    expect(r.status).toBe(409);
    expect(tenantResult(r.json, a).fout).toMatchObject({ seq: 16, reden: "retentie-ontbreekt" });
    expectAlarm();
  });

  test("oldest entries deleted and a retention record forged into the database → retentie-ongeldig", async () => {
    const { a } = await anchored();
    // A real record of another tenant, its origin edited: the signature no longer holds.
    env.setNow(new Date(NOW.getTime()));
    const db = env.db;
    await db.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= 15", a);
    const note = `nachtwacht.test/sleutel/tenant/${a}/retentie\nseq 15\nhash ${"0".repeat(64)}\ncreated-at 2020-01-01T00:00:00.000Z\ngrens 2021-01-01T00:00:00.000Z\nretentiedagen 1\ntijdstip 2026-01-01T00:00:00.000Z\nbereik ${"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= ".repeat(4).trim()}\n\n— nachtwacht.test/sleutel BHBvdg${"A".repeat(82)}==\n`;
    await db.run("INSERT INTO audit_anchor_log (positie, soort, tenant_id, grootte, note) VALUES (999999, 'retentie', ?, 15, ?)", a, note);
    const r = await verify();
    expect(r.status).toBe(409);
    expect(tenantResult(r.json, a).fout).toMatchObject({ seq: 16, reden: "retentie-ongeldig" });
  });

  test("a whole chain deleted and a retention record forged for it: 409 retentie-ongeldig (no entry left to name), not a 500", async () => {
    const { a } = await anchored();
    const db = env.db;
    await db.run("DELETE FROM audit_entries WHERE tenant_id = ?", a);
    const note = `nachtwacht.test/sleutel/tenant/${a}/retentie\nseq 40\nhash ${"0".repeat(64)}\ncreated-at 2020-01-01T00:00:00.000Z\ngrens 2021-01-01T00:00:00.000Z\nretentiedagen 1\ntijdstip 2026-01-01T00:00:00.000Z\nbereik ${"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= ".repeat(4).trim()}\n\n— nachtwacht.test/sleutel BHBvdg${"A".repeat(82)}==\n`;
    await db.run("INSERT INTO audit_anchor_log (positie, soort, tenant_id, grootte, note) VALUES (999999, 'retentie', ?, 40, ?)", a, note);
    const r = await verify();
    expect(r.status).toBe(409);
    expect(tenantResult(r.json, a)).toMatchObject({ intact: false, aantalEntries: 0, fout: { entryId: null, reden: "retentie-ongeldig" } });
    expectAlarm();
  });

  test("newest entries cut and every checkpoint row of that tenant deleted → kop-ontbreekt", async () => {
    const { a } = await anchored();
    await env.db.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq > 30", a);
    await env.db.run("DELETE FROM audit_anchor_log WHERE tenant_id = ?", a);
    const r = await verify();
    expect(r.status).toBe(409);
    expect(tenantResult(r.json, a).fout).toMatchObject({ seq: 40, entryId: null, reden: "kop-ontbreekt" });
    expectAlarm();
  });

  test("the chain recomputed from one entry on and every checkpoint row deleted → checkpoint-afwijkend", async () => {
    const { a } = await anchored();
    await env.db.run("UPDATE audit_entries SET subject = 'dossier/verzonnen' WHERE tenant_id = ? AND seq = 25", a);
    await recompute(env.db, a, 25);
    await env.db.run("DELETE FROM audit_anchor_log WHERE tenant_id = ?", a);
    const r = await verify();
    expect(r.status).toBe(409);
    expect(tenantResult(r.json, a).fout).toMatchObject({ seq: 40, reden: "checkpoint-afwijkend" });
  });

  test("only the checkpoint rows deleted (chain intact) → checkpoint-ontbreekt", async () => {
    const { a } = await anchored();
    // A second run so the deleted rows are not the database's last (that would be a crash's tail).
    await fillChain(env.store, a, 3, { from: 40 });
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    await env.db.run("DELETE FROM audit_anchor_log WHERE tenant_id = ? AND grootte = 40", a);
    const r = await verify();
    expect(r.status).toBe(409);
    expect(tenantResult(r.json, a).fout).toMatchObject({ seq: 40, reden: "checkpoint-ontbreekt" });
  });

  test("a checkpoint row altered → checkpoint-niet-in-bestand", async () => {
    const { b } = await anchored();
    const row = (await env.db.get<{ positie: number; note: string }>("SELECT positie, note FROM audit_anchor_log WHERE tenant_id = ? AND soort = 'checkpoint'", b))!;
    await env.db.run("UPDATE audit_anchor_log SET note = ? WHERE positie = ?", row.note.replace("\n25\n", "\n20\n"), row.positie);
    const r = await verify();
    expect(r.status).toBe(409);
    expect(tenantResult(r.json, b).fout).toMatchObject({ reden: "checkpoint-niet-in-bestand" });
  });

  test("a forged checkpoint row inserted → checkpoint-niet-in-bestand", async () => {
    const { b } = await anchored();
    const row = (await env.db.get<{ note: string }>("SELECT note FROM audit_anchor_log WHERE tenant_id = ? AND soort = 'checkpoint'", b))!;
    await env.db.run("INSERT INTO audit_anchor_log (positie, soort, tenant_id, grootte, note) VALUES (5, 'checkpoint', ?, 30, ?)", b, row.note.replace("\n25\n", "\n30\n"));
    const r = await verify();
    expect(r.status).toBe(409);
    expect(tenantResult(r.json, b).fout).toMatchObject({ reden: "checkpoint-niet-in-bestand" });
  });

  test("a row of a kind nachtwacht never writes → checkpoint-niet-in-bestand of its tenant, not a file problem; audit-anker refuses only that tenant", async () => {
    const { a, b } = await anchored();
    await env.db.run("INSERT INTO audit_anchor_log (positie, soort, tenant_id, grootte, note, bereik) VALUES (999999999, 'onzin', ?, 0, 'niet ondertekend', NULL)", b);
    const r = await verify();
    expect(r.status).toBe(409);
    expect(r.json.ankerbestand).toMatchObject({ intact: true });
    expect(tenantResult(r.json, b).fout).toMatchObject({ reden: "checkpoint-niet-in-bestand" });
    expect(tenantResult(r.json, a)).toMatchObject({ intact: true });
    await fillChain(env.store, a, 2, { from: 40 });
    await fillChain(env.store, b, 2, { from: 25 });
    const anker = await call(env.app, "/api/cron/audit-anker");
    expect(anker.status).toBe(409);
    expect(anker.json.geweigerd).toEqual([expect.objectContaining({ tenantId: b, reden: "checkpoint-niet-in-bestand" })]);
    expect(anker.json.checkpoints).toEqual([expect.objectContaining({ tenantId: a, grootte: 42 })]);
  });

  sqliteOnly("a row with a text seq (SQLite checks no column type; text sorts after every number) → volgnummer-gat; nothing is appended after it or signed", async () => {
    const { a } = await anchored();
    await env.db.run(
      "INSERT INTO audit_entries (tenant_id, seq, id, created_at, actor, action, subject, details, prev_hash, hash) VALUES (?, 'x', 100000, '2026-01-01T00:00:00.000Z', '', '', '', '{}', '', '')",
      a,
    );
    const r = await verify();
    expect(r.status).toBe(409);
    expect(tenantResult(r.json, a).fout).toEqual({ seq: 41, entryId: 100000, reden: "volgnummer-gat" });
    expect(tenantResult(r.json, a).aantalEntries).toBe(41);
    // the appender does not build on it ("x" + 1), and audit-anker does not sign it
    const s = env.store;
    if (s.kind !== "sqlite") throw new Error("SQLite only");
    expect(() => s.sqlite.transaction(() => appendEntries(s.sqlite, [{ tenantId: a, createdAt: "2026-01-02T00:00:00.000Z", actor: "x", action: "a", subject: "", details: "{}" }])).immediate()).toThrow(
      "is not an integer",
    );
    const anker = await call(env.app, "/api/cron/audit-anker");
    expect(anker.status).toBe(409);
    expect(anker.json.geweigerd).toEqual([expect.objectContaining({ tenantId: a, reden: "volgnummer-gat" })]);
  });

  test("a checkpoint row moved to a tenant id nobody has → still found, under the tenant whose line it is", async () => {
    const { b } = await anchored();
    await env.db.run("UPDATE audit_anchor_log SET tenant_id = 999 WHERE tenant_id = ? AND soort = 'checkpoint'", b);
    const r = await verify();
    expect(r.status).toBe(409);
    expect(tenantResult(r.json, b).fout).toMatchObject({ reden: "checkpoint-niet-in-bestand" });
    expect(tenantResult(r.json, 999).fout).toMatchObject({ reden: "checkpoint-niet-in-bestand" });
  });

  test("a forged installation row under a tenant id → the file as a whole does not match (bestand-gewijzigd)", async () => {
    await anchored();
    await env.db.run("INSERT INTO audit_anchor_log (positie, soort, tenant_id, grootte, note) VALUES (1000000000, 'installatie', 999, 1000000, 'rommel')");
    const r = await verify();
    expect(r.status).toBe(409);
    expect(r.json.ankerbestand).toMatchObject({ intact: false, reden: "bestand-gewijzigd" });
  });

  test("the database replaced by an older copy → database-teruggezet", async () => {
    const { a } = await anchored();
    const copy = await copyDatabase(env);
    // Two more days of entries and anchoring.
    for (const day of [1, 2]) {
      await fillChain(env.store, a, 5, { from: 40 + (day - 1) * 5 });
      expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    }
    await restoreCopy(env, copy);
    const r = await verify();
    expect(r.status).toBe(409);
    expect(r.json.ankerbestand).toMatchObject({ intact: false, reden: "database-teruggezet" });
    expect(tenantResult(r.json, a).fout).toMatchObject({ seq: 50, reden: "kop-ontbreekt" });
    expectAlarm();
  });

  test("the anchor file truncated while the database is intact → bestand-ingekort", async () => {
    await anchored();
    const size = readFileSync(env.config.auditAnkerBestand).length;
    truncateSync(env.config.auditAnkerBestand, Math.floor(size / 2));
    const r = await verify();
    expect(r.status).toBe(409);
    expect(r.json.ankerbestand).toMatchObject({ intact: false, reden: expect.stringMatching(/^bestand-(ingekort|gewijzigd)$/) });
    expectAlarm();
  });

  test("the anchor file truncated at a line boundary → bestand-ingekort", async () => {
    await anchored();
    const text = readFileSync(env.config.auditAnkerBestand, "utf8");
    writeFileSync(env.config.auditAnkerBestand, text.split("\n").slice(0, 1).join("\n") + "\n");
    const r = await verify();
    expect(r.status).toBe(409);
    expect(r.json.ankerbestand).toMatchObject({ intact: false, reden: "bestand-ingekort" });
  });

  test("the anchor file altered → bestand-gewijzigd", async () => {
    await anchored();
    const text = readFileSync(env.config.auditAnkerBestand, "utf8");
    writeFileSync(env.config.auditAnkerBestand, text.replace("\\n40\\n", "\\n41\\n"));
    const r = await verify();
    expect(r.status).toBe(409);
    expect(r.json.ankerbestand).toMatchObject({ intact: false, reden: "bestand-gewijzigd" });
  });

  test("the anchor file removed → bestand-ontbreekt", async () => {
    await anchored();
    rmSync(env.config.auditAnkerBestand);
    const r = await verify();
    expect(r.status).toBe(409);
    expect(r.json.ankerbestand).toMatchObject({ intact: false, reden: "bestand-ontbreekt" });
    expectAlarm();
  });
});

describe("no false alarm", () => {
  test("anchoring twice, growing chains, audit-retentie in between: every verification is 200", async () => {
    env = await makeEnv({ AUDIT_RETENTIE_DAGEN: "900" });
    const a = await addTenant(env.db, "A");
    const b = await addTenant(env.db, "B");
    await fillChain(env.store, a, 40);
    await fillChain(env.store, b, 10);
    for (const job of ["audit-anker", "audit-verificatie", "audit-retentie", "audit-verificatie", "audit-anker", "audit-verificatie"]) {
      const r = await call(env.app, `/api/cron/${job}`);
      expect({ job, status: r.status }).toEqual({ job, status: 200 });
      if (job === "audit-retentie") expect(r.json.verwijderd).toBeGreaterThan(0);
    }
    await fillChain(env.store, a, 5, { from: 40 });
    expect((await call(env.app, "/api/cron/audit-anker")).json.aantal).toBe(1);
    const r = await verify();
    expect(r.status).toBe(200);
    expect(env.alarms.raised).toEqual([]);
  });
});

describe("retention that stops part way", () => {
  test("records signed, deletion interrupted after one batch: no false alarm, and the rerun finishes", async () => {
    env = await makeEnv({ AUDIT_RETENTIE_DAGEN: "900" });
    const a = await addTenant(env.db, "A");
    await fillChain(env.store, a, 40); // 1000 to 961 days old: past the 900 days
    await fillChain(env.store, a, 30, { from: 200 }); // 800 to 771 days old: kept
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    await expect(runAuditRetentie(env.deps, NOW, { batchSize: 3, afterBatch: () => { throw new Error("gestopt na één batch"); } })).rejects.toThrow("gestopt");
    const first = (await env.db.get<{ f: number }>("SELECT min(seq) AS f FROM audit_entries WHERE tenant_id = ?", a))!;
    expect(first.f).toBe(4);
    const record = (await env.db.get<{ grootte: number }>("SELECT grootte FROM audit_anchor_log WHERE soort = 'retentie'"))!;
    expect(record.grootte).toBe(40);
    expect((await verify()).status).toBe(200);
    const again = await runAuditRetentie(env.deps, NOW);
    expect(again.status).toBe(200);
    const after = (await env.db.get<{ f: number }>("SELECT min(seq) AS f FROM audit_entries WHERE tenant_id = ?", a))!;
    expect(after.f).toBe(41);
    expect((await verify()).status).toBe(200);
    expect(env.alarms.raised).toEqual([]);
  });

  test("entries left between an interrupted deletion and its record, then recomputed: anker-afwijkend", async () => {
    env = await makeEnv({ AUDIT_RETENTIE_DAGEN: "900" });
    const a = await addTenant(env.db, "A");
    await fillChain(env.store, a, 40);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    await expect(runAuditRetentie(env.deps, NOW, { batchSize: 3, afterBatch: () => { throw new Error("gestopt"); } })).rejects.toThrow();
    const { grootte } = (await env.db.get<{ grootte: number }>("SELECT grootte FROM audit_anchor_log WHERE soort = 'retentie'"))!;
    await env.db.run("UPDATE audit_entries SET actor = 'x' WHERE tenant_id = ? AND seq = 5", a);
    await recompute(env.db, a, 5);
    const r = await verify();
    expect(r.status).toBe(409);
    expect(tenantResult(r.json, a).fout).toMatchObject({ seq: grootte, reden: "anker-afwijkend" });
  });
});

describe("tamper evidence: what the check itself reads", () => {
  /** Statements of one parameter each, past the keys that guard tenants' rows: SQLite's foreign keys off; on PostgreSQL replica mode, which skips triggers (a superuser's). */
  async function pastTheKeys(statements: readonly (readonly [string, number])[]): Promise<void> {
    const s = env.store;
    if (s.kind === "sqlite") {
      s.sqlite.run("PRAGMA foreign_keys = OFF");
      for (const [q, p] of statements) s.sqlite.query(q).run(p);
      s.sqlite.run("PRAGMA foreign_keys = ON");
    } else {
      await s.sql.begin(async (tx) => {
        await tx`SET LOCAL session_replication_role = replica`;
        for (const [q, p] of statements) await tx.unsafe(q.replace("?", "$1"), [p]);
      });
    }
  }

  test("a tenant's row deleted (foreign keys off) and its entries changed: the file still names it, so it is checked", async () => {
    const { a } = await anchored();
    await pastTheKeys([
      ["DELETE FROM audit_verification_state WHERE tenant_id = ?", a],
      ["DELETE FROM tenants WHERE id = ?", a],
      ["UPDATE audit_entries SET actor = 'x' WHERE tenant_id = ? AND seq = 3", a],
    ]);
    const r = await verify();
    expect(r.status).toBe(409);
    expect(tenantResult(r.json, a)).toMatchObject({ intact: false, fout: { seq: 3, reden: "hash-afwijkend" } });
  });

  test("a tenant never anchored, its row deleted past the keys: its entries are still checked, with a warning naming it, and audit-anker anchors them; changed afterwards, verification finds it", async () => {
    const { a } = await anchored();
    const weg = await addTenant(env.db, "Weg");
    // After the anchoring: the file does not name this tenant.
    await fillChain(env.store, weg, 7);
    await pastTheKeys([["DELETE FROM tenants WHERE id = ?", weg]]);
    let r = await verify();
    expect(r.status).toBe(200);
    expect(tenantResult(r.json, weg)).toMatchObject({ intact: true, aantalEntries: 7, tenant: "(niet meer in de tabel tenants)" });
    expect(tenantResult(r.json, a)).toMatchObject({ intact: true, aantalEntries: 40 });
    expect(r.json.ankerbestand.waarschuwingen).toContain(`tenant ${weg} heeft audit-entries maar geen rij in de tabel tenants (buiten nachtwacht om verwijderd?); de keten wordt gewoon gecontroleerd.`);

    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    const checkpoints = await env.db.all<{ grootte: number }>("SELECT grootte FROM audit_anchor_log WHERE soort = 'checkpoint' AND tenant_id = ?", weg);
    expect(checkpoints.map((c) => c.grootte)).toEqual([7]);

    await pastTheKeys([["UPDATE audit_entries SET actor = 'x' WHERE tenant_id = ? AND seq = 3", weg]]);
    r = await verify();
    expect(r.status).toBe(409);
    expect(tenantResult(r.json, weg)).toMatchObject({ intact: false, fout: { seq: 3, reden: "hash-afwijkend" } });
  });

  test("head anchors of an earlier version (HMAC) in the database and the file are retired: never used, reported as a warning", async () => {
    env = await makeEnv();
    const a = await addTenant(env.db, "Gemeente Delft");
    await fillChain(env.store, a, 10);
    // An old anchor claiming a head the chain never had: if it were still trusted, this would break the chain.
    const old = { tenantId: a, seq: 99, hash: "f".repeat(64), tijdstip: NOW.toISOString(), handtekening: null };
    await env.db.run("INSERT INTO audit_head_anchors (tenant_id, seq, hash, tijdstip, handtekening) VALUES (?, ?, ?, ?, NULL)", a, old.seq, old.hash, old.tijdstip);
    writeFileSync(env.config.auditAnkerBestand, JSON.stringify(old) + "\n");
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    const r = await verify();
    expect(r.status).toBe(200);
    expect(r.json.ankerbestand.waarschuwingen).toEqual([
      expect.stringContaining("1 regel(s) uit een eerdere versie"),
      expect.stringContaining("1 kop-anker(s) uit een eerdere versie"),
    ]);
  });

  test("audit-anker does not launder: a recomputed chain whose checkpoint rows were deleted is refused, and the next verification still finds it", async () => {
    const { a } = await anchored();
    await env.db.run("UPDATE audit_entries SET subject = 'dossier/verzonnen' WHERE tenant_id = ? AND seq = 25", a);
    await recompute(env.db, a, 25);
    await env.db.run("DELETE FROM audit_anchor_log WHERE tenant_id = ?", a);
    await fillChain(env.store, a, 2, { from: 40 });
    const anker = await call(env.app, "/api/cron/audit-anker");
    expect(anker.status).toBe(409);
    expect(anker.json.geweigerd).toEqual([expect.objectContaining({ tenantId: a })]);
    expect(anker.json.checkpoints.map((c: { tenantId: number }) => c.tenantId)).not.toContain(a);
    const r = await verify();
    expect(r.status).toBe(409);
    expect(tenantResult(r.json, a).fout).toMatchObject({ seq: 40, reden: "checkpoint-afwijkend" });
  });

  test("audit-anker does not launder: a recomputed chain with a spoilt compact range in its row is refused (checkpoint-afwijkend)", async () => {
    const { a } = await anchored();
    await env.db.run("UPDATE audit_entries SET subject = 'dossier/verzonnen' WHERE tenant_id = ? AND seq = 25", a);
    await recompute(env.db, a, 25);
    await env.db.run("UPDATE audit_anchor_log SET bereik = 'kapot' WHERE tenant_id = ? AND soort = 'checkpoint'", a);
    await fillChain(env.store, a, 2, { from: 40 });
    const anker = await call(env.app, "/api/cron/audit-anker");
    expect(anker.status).toBe(409);
    expect(anker.json.geweigerd).toEqual([{ tenantId: a, seq: 40, reden: "checkpoint-afwijkend" }]);
    expect((await verify()).status).toBe(409);
  });
});
