// audit-anker, audit-verificatie, audit-retentie, beveiligingslog-retentie and
// db-onderhoud on PostgreSQL, through the app as the crontab calls them, against a real
// server (test/pg.ts). Each audit case puts the same tenants and entries on a SQLite and
// a PostgreSQL installation and runs the same jobs on both: the answers, the alarms, the
// kept verification state and the anchor file must be the same (the file's path aside).
import { afterEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import { asc } from "drizzle-orm";
import { readFileSync } from "node:fs";
import * as liteSchema from "../db/schema.ts";
import * as pgSchema from "../db/schema-pg.ts";
import { appendEntries, canonicalJson, type ChainInput } from "../src/audit/chain.ts";
import { retentionBoundary } from "../src/audit/retention.ts";
import { verificationWorkers } from "../src/jobs/audit-verificatie.ts";
import { dbOnderhoudJob, DbOnderhoudBody, runDbOnderhoud } from "../src/jobs/db-onderhoud.ts";
import { appendEntriesPg } from "../src/pg/chain.ts";
import { PgMaintenanceReport } from "../src/pg/maintenance.ts";
import { call, DAY_MS, eindzegel, makePgTestEnv, makeTestEnv, NOW, zegel, type PgTestEnv, type TestEnv } from "./helpers.ts";
import { useTestCluster } from "./pg.ts";

setDefaultTimeout(60_000);

const cluster = useTestCluster();
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

interface Both {
  lite: TestEnv;
  pg: PgTestEnv;
}

async function both(env: Record<string, string> = {}): Promise<Both> {
  const lite = makeTestEnv(env);
  cleanups.push(() => lite.cleanup());
  const pg = await makePgTestEnv(cluster, env);
  cleanups.push(() => pg.cleanup());
  return { lite, pg };
}

/** The same tenant on both stores; the same id, as both start from an empty table. */
async function addTenantBoth(b: Both, naam: string, actief = true): Promise<number> {
  const { id } = b.lite.store.sqlite.query("INSERT INTO tenants (naam, actief, aangemaakt) VALUES (?, ?, ?) RETURNING id").get(naam, actief ? 1 : 0, NOW.toISOString()) as { id: number };
  const [row] = await b.pg.store.db.insert(pgSchema.tenants).values({ naam, actief, aangemaakt: NOW.toISOString() }).returning({ id: pgSchema.tenants.id });
  expect(row!.id).toBe(id);
  return id;
}

/** Entries i = from … from + n − 1 of a tenant, `ageDays(i)` days before NOW, appended to both chains. */
async function appendBoth(b: Both, tenantId: number, n: number, ageDays: (i: number) => number, from = 0): Promise<void> {
  const inputs: ChainInput[] = [];
  for (let i = from; i < from + n; i++) {
    inputs.push({
      tenantId,
      createdAt: new Date(NOW.getTime() - ageDays(i) * DAY_MS).toISOString(),
      actor: `user${i}@example.nl`,
      action: i % 2 ? "dossier.gewijzigd" : "dossier.bekeken",
      subject: `dossier/${i}`,
      details: canonicalJson({ i }),
    });
  }
  const { sqlite } = b.lite.store;
  sqlite.transaction(() => appendEntries(sqlite, inputs)).immediate();
  await b.pg.store.sql.begin((tx) => appendEntriesPg(tx, inputs));
}

/** Changes one stored entry's actor on both stores, as a database writer would, without rehashing. */
async function tamperBoth(b: Both, tenantId: number, seq: number): Promise<void> {
  b.lite.store.sqlite.query("UPDATE audit_entries SET actor = 'iemand-anders' WHERE tenant_id = ? AND seq = ?").run(tenantId, seq);
  await b.pg.store.sql`UPDATE audit_entries SET actor = 'iemand-anders' WHERE tenant_id = ${tenantId} AND seq = ${seq}`;
}

/** The same job through both apps; the answers with each anchor file's path made one. */
async function runBoth(b: Both, job: string) {
  const lite = await call(b.lite.app, `/api/cron/${job}`);
  const pg = await call(b.pg.app, `/api/cron/${job}`);
  return { lite: { status: lite.status, json: samePath(b.lite, lite.json) }, pg: { status: pg.status, json: samePath(b.pg, pg.json) } };
}

/** `v` with the env's anchor file path written as <bestand>: each installation has its own file. */
function samePath(e: { config: { auditAnkerBestand: string } }, v: unknown): unknown {
  return JSON.parse(JSON.stringify(v).split(e.config.auditAnkerBestand).join("<bestand>"));
}

const alarmsOf = (e: TestEnv | PgTestEnv) => samePath(e, e.alarms.raised);
const anchorFile = (e: TestEnv | PgTestEnv) => readFileSync(e.config.auditAnkerBestand, "utf8");

async function stateRows(b: Both) {
  const lite = b.lite.store.db.select().from(liteSchema.auditVerificationState).orderBy(asc(liteSchema.auditVerificationState.tenantId)).all();
  const pg = await b.pg.store.db.select().from(pgSchema.auditVerificationState).orderBy(asc(pgSchema.auditVerificationState.tenantId));
  return { lite, pg };
}

const pgSeqs = async (e: PgTestEnv, tenantId: number) =>
  ((await e.store.sql`SELECT seq FROM audit_entries WHERE tenant_id = ${tenantId} ORDER BY seq`) as { seq: string }[]).map((r) => Number(r.seq));

describe("audit-anker and audit-verificatie on PostgreSQL", () => {
  test("anchored chains verify intact: 200, the same bodies, anchor file and kept state as on SQLite, no alarm", async () => {
    const b = await both();
    const alfa = await addTenantBoth(b, "Gemeente Delft");
    const beta = await addTenantBoth(b, "Stichting Leiden");
    const leeg = await addTenantBoth(b, "Nieuw", false);
    await appendBoth(b, alfa, 6, (i) => 10 - i);
    await appendBoth(b, beta, 3, (i) => 5 - i);

    const anker = await runBoth(b, "audit-anker");
    expect(anker.pg.status).toBe(200);
    expect(anker.pg.json).toMatchObject({ ok: true, aantal: 2, ongewijzigd: 1, geweigerd: [], hersteld: 0, bestand: "<bestand>" });
    expect((anker.pg.json as { checkpoints: unknown }).checkpoints).toEqual([
      { tenantId: alfa, grootte: 6, root: expect.any(String) },
      { tenantId: beta, grootte: 3, root: expect.any(String) },
    ]);
    expect(anker.pg).toEqual(anker.lite);
    // Ed25519 signatures are deterministic: the same lines, byte for byte.
    expect(anchorFile(b.pg)).toBe(anchorFile(b.lite));

    const verificatie = await runBoth(b, "audit-verificatie");
    expect(verificatie.pg.status).toBe(200);
    expect(verificatie.pg.json).toEqual({
      gecontroleerd: 3,
      aantalGebroken: 0,
      resultaten: [
        { tenantId: alfa, tenant: "Gemeente Delft", intact: true, aantalEntries: 6 },
        { tenantId: beta, tenant: "Stichting Leiden", intact: true, aantalEntries: 3 },
        { tenantId: leeg, tenant: "Nieuw", intact: true, aantalEntries: 0 },
      ],
      ankerbestand: { intact: true, bestand: "<bestand>", regels: 3, waarschuwingen: [] },
      schema: { intact: true, afwijkingen: [] },
      tijdstip: NOW.toISOString(),
    });
    expect(verificatie.pg).toEqual(verificatie.lite);
    expect(b.pg.alarms.raised).toEqual([]);
    expect(b.lite.alarms.raised).toEqual([]);

    const state = await stateRows(b);
    expect(state.pg).toEqual([
      { tenantId: alfa, gecontroleerd: NOW.toISOString(), intact: true, aantalEntries: 6, foutSeq: null, foutEntryId: null, foutReden: null, zegel: expect.any(String) },
      { tenantId: beta, gecontroleerd: NOW.toISOString(), intact: true, aantalEntries: 3, foutSeq: null, foutEntryId: null, foutReden: null, zegel: expect.any(String) },
      { tenantId: leeg, gecontroleerd: NOW.toISOString(), intact: true, aantalEntries: 0, foutSeq: null, foutEntryId: null, foutReden: null, zegel: expect.any(String) },
    ]);
    expect(state.pg).toEqual(state.lite);
  });

  test("a changed entry: audit-verificatie 409 with one audit-chain-broken alarm, body, alarm and kept state as on SQLite; a rerun overwrites the state", async () => {
    const b = await both();
    const alfa = await addTenantBoth(b, "Gemeente Delft");
    const beta = await addTenantBoth(b, "Stichting Leiden");
    await appendBoth(b, alfa, 6, (i) => 10 - i);
    await appendBoth(b, beta, 4, (i) => 5 - i);
    expect((await runBoth(b, "audit-anker")).pg.status).toBe(200);
    const first = await runBoth(b, "audit-verificatie");
    expect(first.pg.status).toBe(200);
    expect((await stateRows(b)).pg.map((s) => s.intact)).toEqual([true, true]);

    await tamperBoth(b, alfa, 3);
    const r = await runBoth(b, "audit-verificatie");
    expect(r.pg.status).toBe(409);
    const body = r.pg.json as { aantalGebroken: number; resultaten: { tenantId: number; intact: boolean; fout?: { seq: number; reden: string } }[] };
    expect(body.aantalGebroken).toBe(1);
    expect(body.resultaten.find((x) => x.tenantId === alfa)).toMatchObject({ intact: false, fout: { seq: 3, reden: "hash-afwijkend" } });
    expect(body.resultaten.find((x) => x.tenantId === beta)).toMatchObject({ intact: true, aantalEntries: 4 });
    expect(r.pg).toEqual(r.lite);

    expect(b.pg.alarms.raised).toHaveLength(1);
    expect(b.pg.alarms.raised[0]).toMatchObject({ type: "audit-chain-broken", context: { aantalGebroken: 1 } });
    expect(b.pg.alarms.raised[0]!.message).toContain("Gemeente Delft");
    expect(alarmsOf(b.pg)).toEqual(alarmsOf(b.lite));

    const state = await stateRows(b);
    expect(state.pg.find((s) => s.tenantId === alfa)).toMatchObject({ intact: false, foutSeq: 3, foutReden: "hash-afwijkend", aantalEntries: 6 });
    expect(state.pg.find((s) => s.tenantId === beta)).toMatchObject({ intact: true, foutSeq: null });
    expect(state.pg).toEqual(state.lite);
  });

  test("the kept state is the newest check's: a run that started earlier and finishes later (a lease taken over from a hung process) does not put back its older view, on either store", async () => {
    const b = await both();
    const alfa = await addTenantBoth(b, "Gemeente Delft");
    await appendBoth(b, alfa, 4, (i) => 10 - i);
    expect((await runBoth(b, "audit-anker")).pg.status).toBe(200);
    await tamperBoth(b, alfa, 2);
    // Half a minute later: a newer check dated further ahead than a minute of the older run's clock would be taken for a forged one (stateNotAfter).
    const later = new Date(NOW.getTime() + 30_000);
    b.lite.setNow(later);
    b.pg.setNow(later);
    expect((await runBoth(b, "audit-verificatie")).pg.status).toBe(409);
    // The older run, started at NOW, before the change was made: it found the chain intact.
    b.lite.store.sqlite.query("UPDATE audit_entries SET actor = ? WHERE tenant_id = ? AND seq = 2").run("user1@example.nl", alfa);
    await b.pg.store.sql`UPDATE audit_entries SET actor = 'user1@example.nl' WHERE tenant_id = ${alfa} AND seq = 2`;
    b.lite.setNow(NOW);
    b.pg.setNow(NOW);
    expect((await runBoth(b, "audit-verificatie")).pg.status).toBe(200);
    const state = await stateRows(b);
    expect(state.pg).toEqual(state.lite);
    expect(state.pg).toMatchObject([{ tenantId: alfa, gecontroleerd: later.toISOString(), intact: false, foutSeq: 2 }]);
  });

  test("with audit entry ids past 200k the PostgreSQL verification runs in worker threads and finds the same", async () => {
    const b = await both();
    // Ids are not hashed: a high one only makes verificationWorkers start threads.
    await b.pg.store.sql`SELECT setval(pg_get_serial_sequence('audit_entries', 'id'), 300000)`;
    const alfa = await addTenantBoth(b, "Alfa");
    const beta = await addTenantBoth(b, "Beta");
    await appendBoth(b, alfa, 6, (i) => 10 - i);
    await appendBoth(b, beta, 6, (i) => 10 - i);
    expect(await verificationWorkers(b.pg.store)).toBeGreaterThan(0);
    expect(await verificationWorkers(b.lite.store)).toBe(0);
    expect((await runBoth(b, "audit-anker")).pg.status).toBe(200);
    const intact = await runBoth(b, "audit-verificatie");
    expect(intact.pg.status).toBe(200);
    expect(intact.pg).toEqual(intact.lite);

    await tamperBoth(b, beta, 4);
    const r = await runBoth(b, "audit-verificatie");
    expect(r.pg.status).toBe(409);
    const [{ id }] = (await b.pg.store.sql`SELECT id FROM audit_entries WHERE tenant_id = ${beta} AND seq = 4`) as [{ id: string }];
    expect(Number(id)).toBeGreaterThan(300000);
    const fout = (x: unknown) => (x as { resultaten: { fout?: unknown }[] }).resultaten.map((t) => t.fout ?? null);
    expect(fout(r.pg.json)).toEqual([null, { seq: 4, entryId: Number(id), reden: "hash-afwijkend" }]);
    expect(fout(r.lite.json)).toEqual([null, { seq: 4, entryId: expect.any(Number), reden: "hash-afwijkend" }]);
    expect(b.pg.alarms.raised.map((a) => a.type)).toEqual(["audit-chain-broken"]);
  });

  test("audit-anker refuses a tenant whose new entry was changed: 409 with the alarm, the same as on SQLite; the others are signed", async () => {
    const b = await both();
    const alfa = await addTenantBoth(b, "Alfa");
    const beta = await addTenantBoth(b, "Beta");
    await appendBoth(b, alfa, 5, (i) => 10 - i);
    await appendBoth(b, beta, 5, (i) => 10 - i);
    expect((await runBoth(b, "audit-anker")).pg.status).toBe(200);
    await appendBoth(b, alfa, 3, () => 1, 5);
    await appendBoth(b, beta, 2, () => 1, 5);
    await tamperBoth(b, alfa, 7);

    const r = await runBoth(b, "audit-anker");
    expect(r.pg.status).toBe(409);
    expect(r.pg.json).toMatchObject({ ok: false, aantal: 1, geweigerd: [{ tenantId: alfa, seq: 7, reden: "hash-afwijkend" }], checkpoints: [{ tenantId: beta, grootte: 7 }] });
    expect(r.pg).toEqual(r.lite);
    expect(b.pg.alarms.raised.map((a) => a.type)).toEqual(["audit-chain-broken"]);
    expect(alarmsOf(b.pg)).toEqual(alarmsOf(b.lite));
    expect(anchorFile(b.pg)).toBe(anchorFile(b.lite));
  });

  test("an anchor file changed by hand: audit-anker signs nothing, 409 bestand-gewijzigd with the alarm, as on SQLite", async () => {
    const b = await both();
    const alfa = await addTenantBoth(b, "Alfa");
    await appendBoth(b, alfa, 4, (i) => 10 - i);
    expect((await runBoth(b, "audit-anker")).pg.status).toBe(200);
    for (const e of [b.lite, b.pg]) {
      const text = anchorFile(e);
      // The size in the first checkpoint's signed text: its signature no longer holds.
      const altered = text.replace(/\\n4\\n/, "\\n5\\n");
      expect(altered).not.toBe(text);
      await Bun.write(e.config.auditAnkerBestand, altered);
    }
    await appendBoth(b, alfa, 1, () => 1, 4);
    const r = await runBoth(b, "audit-anker");
    expect(r.pg.status).toBe(409);
    expect(r.pg.json).toMatchObject({ ok: false, aantal: 0, reden: "bestand-gewijzigd" });
    expect(r.pg).toEqual(r.lite);
    expect(alarmsOf(b.pg)).toEqual(alarmsOf(b.lite));
    expect(b.pg.alarms.raised.map((a) => a.type)).toEqual(["audit-chain-broken"]);
  });
});

describe("audit-retentie on PostgreSQL", () => {
  test("deletes the prefix older than grens, answers as on SQLite with the same records, and every chain still verifies", async () => {
    const b = await both();
    const alfa = await addTenantBoth(b, "Alfa");
    const beta = await addTenantBoth(b, "Beta");
    // Alfa: 12 entries past the retention period (2555 days), then 5 recent ones; Beta: all recent.
    await appendBoth(b, alfa, 17, (i) => (i < 12 ? 3000 - i : 20 - i));
    await appendBoth(b, beta, 4, (i) => 30 - i);
    expect((await runBoth(b, "audit-anker")).pg.status).toBe(200);

    const r = await runBoth(b, "audit-retentie");
    expect(r.pg).toEqual({
      status: 200,
      json: { ok: true, verwijderd: 12, retentieDagen: 2555, grens: retentionBoundary(NOW, 2555), achtergehouden: 0, achtergehoudenBij: [] },
    });
    expect(r.pg).toEqual(r.lite);
    expect(await pgSeqs(b.pg, alfa)).toEqual([13, 14, 15, 16, 17]);
    expect(await pgSeqs(b.pg, beta)).toEqual([1, 2, 3, 4]);
    // The signed retention records, byte for byte.
    expect(anchorFile(b.pg)).toBe(anchorFile(b.lite));
    expect(b.pg.alarms.raised).toEqual([]);

    const v = await runBoth(b, "audit-verificatie");
    expect(v.pg.status).toBe(200);
    expect((v.pg.json as { resultaten: unknown[] }).resultaten).toEqual([
      { tenantId: alfa, tenant: "Alfa", intact: true, aantalEntries: 5 },
      { tenantId: beta, tenant: "Beta", intact: true, aantalEntries: 4 },
    ]);
    expect(v.pg).toEqual(v.lite);
    expect(b.pg.alarms.raised).toEqual([]);
  });

  test("a broken old part is kept as evidence: 200 with the alarm, as on SQLite", async () => {
    const b = await both();
    const alfa = await addTenantBoth(b, "Alfa");
    const beta = await addTenantBoth(b, "Beta");
    await appendBoth(b, alfa, 8, (i) => (i < 5 ? 3000 - i : 10 - i));
    await appendBoth(b, beta, 8, (i) => (i < 5 ? 3000 - i : 10 - i));
    expect((await runBoth(b, "audit-anker")).pg.status).toBe(200);
    await tamperBoth(b, alfa, 2);

    const r = await runBoth(b, "audit-retentie");
    expect(r.pg).toMatchObject({ status: 200, json: { ok: true, verwijderd: 5 } });
    expect(r.pg).toEqual(r.lite);
    expect(await pgSeqs(b.pg, alfa)).toHaveLength(8);
    expect(await pgSeqs(b.pg, beta)).toEqual([6, 7, 8]);
    expect(b.pg.alarms.raised).toHaveLength(1);
    expect(b.pg.alarms.raised[0]).toMatchObject({ type: "audit-chain-broken", context: { aantal: 1, gestopt: [{ tenantId: alfa, seq: 2, reden: "hash-afwijkend" }] } });
    expect(alarmsOf(b.pg)).toEqual(alarmsOf(b.lite));
  });
});

describe("beveiligingslog-retentie on PostgreSQL", () => {
  test("deletes the login attempts strictly before grens, keeps the rest, answers as on SQLite", async () => {
    const b = await both();
    const grens = retentionBoundary(NOW, 90);
    // Ages around the boundary; one exactly at grens, which stays (strictly before goes).
    const times = [400 * DAY_MS, 91 * DAY_MS, 90 * DAY_MS + 1, 90 * DAY_MS, 89 * DAY_MS, 3600_000].map((ago) => new Date(NOW.getTime() - ago).toISOString());
    for (const [i, tijdstip] of times.entries()) {
      const row = { tijdstip, account: `gebruiker${i}@voorbeeld.nl`, ip: `10.0.0.${i}`, gelukt: i % 2 === 0, reden: i % 2 ? "wachtwoord-onjuist" : null };
      b.lite.store.sqlite.query("INSERT INTO login_attempts (tijdstip, account, ip, gelukt, reden) VALUES (?, ?, ?, ?, ?)").run(row.tijdstip, row.account, row.ip, row.gelukt ? 1 : 0, row.reden);
      await b.pg.store.db.insert(pgSchema.loginAttempts).values(row);
    }
    expect(times[3]).toBe(grens);

    const r = await runBoth(b, "beveiligingslog-retentie");
    expect(r.pg).toEqual({ status: 200, json: { ok: true, verwijderd: 3, retentieDagen: 90, grens } });
    expect(r.pg).toEqual(r.lite);
    const left = ((await b.pg.store.sql`SELECT tijdstip FROM login_attempts ORDER BY tijdstip`) as { tijdstip: string }[]).map((x) => x.tijdstip);
    expect(left).toEqual(times.slice(3));
    expect(b.lite.store.sqlite.query("SELECT tijdstip FROM login_attempts ORDER BY tijdstip").values().flat()).toEqual(left);
  });
});

describe("db-onderhoud on PostgreSQL", () => {
  const undeclared = (schema: { properties: Record<string, unknown> }, body: object) => Object.keys(body).filter((k) => !(k in schema.properties));

  test("answers 200 with PostgreSQL's report, which is the documented 200 (its PostgreSQL branch), and prunes old job_runs", async () => {
    const b = await both();
    const { pg } = b;
    // An old run of a job with a newer one: pruned; the newest run of a job stays however old.
    const old = new Date(NOW.getTime() - 200 * DAY_MS).toISOString();
    const newer = new Date(NOW.getTime() - 100 * DAY_MS).toISOString();
    // Sealed, as the job wrapper writes them (src/row-seal.ts): only sealed runs are kept for being newest.
    const sealed = (gestart: string, uitkomst: "fout" | "ok") => ({
      job: "dagrapport",
      gestart,
      beeindigd: gestart,
      uitkomst,
      zegel: zegel("dagrapport", gestart),
      eindzegel: eindzegel({ job: "dagrapport", gestart, beeindigd: gestart, uitkomst }),
    });
    await pg.store.db.insert(pgSchema.jobRuns).values([sealed(old, "fout"), sealed(newer, "ok")]);

    const r = await call(pg.app, "/api/cron/db-onderhoud");
    expect(r.status, r.text).toBe(200);
    const schema = dbOnderhoudJob.responses![200].schema;
    expect([...Value.Errors(schema, r.json)].map((e) => `${e.path}: ${e.message}`)).toEqual([]);
    expect(Value.Check(PgMaintenanceReport, r.json)).toBe(true);
    expect(Value.Check(DbOnderhoudBody, r.json)).toBe(false);
    expect(undeclared(PgMaintenanceReport, r.json)).toEqual([]);
    expect(r.json).toMatchObject({
      ok: true,
      // A fresh database has no amcheck: skipped, with how to enable it.
      integriteit: { status: "overgeslagen", aanwijzing: expect.stringContaining("CREATE EXTENSION amcheck;") },
      opgeschoond: { jobRuns: { verwijderd: 1, bewaarDagen: 90 }, backupStatuses: { verwijderd: 0 } },
      autovacuum: true,
    });
    expect(r.json.geanalyseerd).toContain("audit_entries");
    expect(r.json.overgeslagen.length).toBeGreaterThanOrEqual(3);
    const runs = (await pg.store.sql`SELECT gestart FROM job_runs WHERE job = 'dagrapport'`) as { gestart: string }[];
    expect(runs.map((x) => x.gestart)).toEqual([newer]);
    expect(pg.alarms.raised).toEqual([]);

    // SQLite's answer is the other branch of the same documented schema.
    const lite = await call(b.lite.app, "/api/cron/db-onderhoud");
    expect(lite.status).toBe(200);
    expect(Value.Check(schema, lite.json)).toBe(true);
    expect(Value.Check(DbOnderhoudBody, lite.json)).toBe(true);
    expect(Value.Check(PgMaintenanceReport, lite.json)).toBe(false);
  });

  test("an index amcheck finds out of order: 409 with the db-integrity alarm, nothing pruned, the documented 409", async () => {
    const { pg } = await both();
    const old = new Date(NOW.getTime() - 200 * DAY_MS).toISOString();
    await pg.store.db.insert(pgSchema.jobRuns).values(
      Array.from({ length: 20 }, (_, i) => ({ job: i % 2 ? "dagrapport" : "weekrapport", gestart: old, beeindigd: old, uitkomst: "fout" as const })),
    );
    // The test cluster's role is a superuser: it installs amcheck, and builds a B-tree with one
    // comparison that is then read with its reverse (what a changed collation does to an index).
    await pg.store.sql.unsafe(`
      CREATE EXTENSION amcheck;
      CREATE FUNCTION nw_cmp(int4, int4) RETURNS int4 IMMUTABLE LANGUAGE sql AS 'SELECT btint4cmp($1, $2)';
      CREATE OPERATOR CLASS nw_ops FOR TYPE int4 USING btree AS
        OPERATOR 1 <, OPERATOR 2 <=, OPERATOR 3 =, OPERATOR 4 >=, OPERATOR 5 >, FUNCTION 1 nw_cmp(int4, int4);
      CREATE INDEX job_runs_omgekeerd_idx ON job_runs (id nw_ops);
      CREATE OR REPLACE FUNCTION nw_cmp(int4, int4) RETURNS int4 IMMUTABLE LANGUAGE sql AS 'SELECT btint4cmp($2, $1)';`);

    // Called directly: the job route would write its own job_runs rows through the damaged index.
    const r = await runDbOnderhoud(pg.deps, NOW);
    expect(r.status).toBe(409);
    expect([...Value.Errors(dbOnderhoudJob.responses![409]!.schema, r.body)].map((e) => `${e.path}: ${e.message}`)).toEqual([]);
    if (r.body.integriteit.status !== "problemen") throw new Error(JSON.stringify(r.body.integriteit));
    expect(r.body.integriteit.meldingen[0]).toStartWith("job_runs_omgekeerd_idx: ");
    expect(r.body).toMatchObject({ ok: false, opgeschoond: null, geanalyseerd: [] });
    expect(((await pg.store.sql`SELECT count(*)::int AS n FROM job_runs`) as [{ n: number }])[0].n).toBe(20);
    expect(pg.alarms.raised).toEqual([
      {
        type: "db-integrity",
        message: "De integriteitscontrole van de database faalt (1 melding(en)): herstel uit de laatste backup en onderzoek de oorzaak.",
        context: { database: pg.url, meldingen: r.body.integriteit.meldingen },
      },
    ]);
  });
});
