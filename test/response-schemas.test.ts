// One source of truth: every job declares its bodies once, as TypeBox schemas
// (`responses` in src/jobs/*.ts); the OpenAPI document shows them. Here every job runs
// for real, through the app, into each answer it declares (200, 409, 502), and each
// body must match its schema exactly: no TypeBox error (Value.Errors, in the message)
// and no field the schema does not name. Then /docs/json must show those schemas.
import { Database } from "bun:sqlite";
import { afterEach, describe, expect, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import { Cron } from "croner";
import type { TSchema } from "elysia";
import { closeSync, copyFileSync, openSync, readFileSync, writeFileSync, writeSync } from "node:fs";
import { join } from "node:path";
import { canonicalJson, recordLoginAttempt, type ChainInput } from "../src/audit/chain.ts";
import { isoWeek } from "../src/format.ts";
import { reportEnd } from "../src/jobs/weekrapport.ts";
import { routeResponses } from "../src/http/job-route.ts";
import { ALL_JOBS } from "../src/jobs/index.ts";
import type { JobDefinition } from "../src/jobs/job.ts";
import { runTakenControle } from "../src/jobs/taken-controle.ts";
import { SENDING } from "../src/reports/weekly.ts";
import { SCHEDULE, type JobName } from "../src/schedule.ts";
import { call, makeTestEnv, NOW, tempDir, eindzegel, zegel, type TestEnv } from "./helpers.ts";
import { addAdmin, addLoginAttempt, addTenant, appendInputs, makeEnv, pgOnly, sqliteOnly, type Env } from "./dialect.ts";
import { makeMailEnv } from "./smtp.ts";
import { ctlSmtp } from "./smtp-ctl.ts";

const DAY = 24 * 3600_000;
const jobs = new Map<string, JobDefinition<any>>(ALL_JOBS.map((j) => [j.name, j]));

/** Fields the body has that its schema does not name (a TypeBox object lets them pass). */
function undeclared(schema: any, value: unknown, path: string): string[] {
  if (Array.isArray(schema.anyOf)) {
    const branch = schema.anyOf.find((s: TSchema) => Value.Check(s, value));
    return branch ? undeclared(branch, value, path) : [];
  }
  if (schema.type === "array" && Array.isArray(value)) return value.flatMap((v, i) => undeclared(schema.items, v, `${path}/${i}`));
  if (schema.type === "object" && value !== null && typeof value === "object") {
    return Object.entries(value).flatMap(([k, v]) =>
      schema.properties?.[k] ? undeclared(schema.properties[k], v, `${path}/${k}`) : [`${path}/${k}: not in the schema`],
    );
  }
  return [];
}

/** What is wrong with `body` against `schema`: TypeBox's errors, then undeclared fields. */
function mismatches(schema: TSchema, body: unknown): string[] {
  const errors = [...Value.Errors(schema, body)].map((e) => `${e.path || "/"}: ${e.message} (found ${JSON.stringify(e.value)?.slice(0, 80)})`);
  return [...errors, ...undeclared(schema, body, "")];
}

/** The statuses each job answered in this file, to check at the end that none was left out. */
const seen = new Map<string, Set<number>>();

/** The answer has the expected status and matches the schema its job declares for it. */
function expectDeclared(job: JobName, status: 200 | 409 | 502, r: { status: number; json: unknown; text: string }) {
  expect(r.status, `${job}: ${r.text.slice(0, 300)}`).toBe(status);
  const declared = jobs.get(job)!.responses?.[status];
  expect(declared, `${job} declares no ${status}`).toBeDefined();
  expect(mismatches(declared!.schema, r.json), `${job} ${status} body does not match its schema`).toEqual([]);
  if (!seen.has(job)) seen.set(job, new Set());
  seen.get(job)!.add(status);
}

const cleanups: (() => unknown)[] = [];
// After each test: on PostgreSQL every installation holds a pool of connections.
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c(); // last made, first removed
});
async function env(vars: Record<string, string> = {}): Promise<Env> {
  const e = await makeEnv(vars);
  cleanups.push(() => e.cleanup());
  return e;
}

/** A SQLite installation on a given database file (DATABASE_PATH), for the test of SQLite's own file. */
function sqliteEnv(vars: Record<string, string>): TestEnv {
  const e = makeTestEnv(vars);
  cleanups.push(() => e.cleanup());
  return e;
}

async function entries(e: Env, tenantId: number, n: number, from: Date, stepMs = 1000) {
  const inputs: ChainInput[] = [];
  for (let i = 0; i < n; i++) {
    inputs.push({
      tenantId,
      actor: "anna@example.nl",
      action: "dossier.bekeken",
      subject: `dossier/${i}`,
      details: canonicalJson({ i }),
      createdAt: new Date(from.getTime() + i * stepMs).toISOString(),
    });
  }
  await appendInputs(e.store, inputs);
}

/** Two tenants with audit history (part of it past the retention), admins and login attempts. */
async function installation(vars: Record<string, string> = {}): Promise<Env> {
  const e = await env(vars);
  for (const naam of ["Alfa", "Beta"]) {
    const t = await addTenant(e.db, naam);
    await addAdmin(e.db, t, `beheer@${naam.toLowerCase()}.test`);
    await entries(e, t, 6, new Date(NOW.getTime() - 3000 * DAY), DAY); // older than any retention
    await entries(e, t, 5, new Date(NOW.getTime() - 3 * 3600_000));
  }
  for (let i = 0; i < 8; i++) {
    await addLoginAttempt(e.db, { account: "anna", ip: "10.0.0.1", gelukt: i % 2 === 0, tijdstip: new Date(NOW.getTime() - i * 3600_000) });
  }
  return e;
}

/** A line of the anchor file changed by hand: audit-anker, -retentie and -verificatie refuse it. */
function alterAnchorFile(e: Env) {
  const text = readFileSync(e.config.auditAnkerBestand, "utf8");
  const altered = text.replace(/\\n(\d+)\\n/, (_m, n: string) => `\\n${Number(n) + 1}\\n`);
  expect(altered).not.toBe(text);
  writeFileSync(e.config.auditAnkerBestand, altered);
}

const post = (e: Env | TestEnv, job: JobName, body?: unknown) => call(e.app, `/api/cron/${job}`, body === undefined ? {} : { body: JSON.stringify(body) });

describe("every job's real answers match the schemas it declares", () => {
  test("backup-status and backup-controle: no backup (409), a failed one (409), a good one (200 twice), an old one (409)", async () => {
    const e = await env();
    const none = await post(e, "backup-controle");
    expectDeclared("backup-controle", 409, none);
    expect(none.json).toMatchObject({ reden: "geen-backup", laatsteBackup: null, leeftijdUren: null });

    expectDeclared("backup-status", 200, await post(e, "backup-status", { exitCode: 3 }));
    const failed = await post(e, "backup-controle");
    expectDeclared("backup-controle", 409, failed);
    expect(failed.json).toMatchObject({ reden: "mislukt", laatsteBackup: { exitCode: 3, bestandsnaam: null, grootte: null, foutmelding: null } });

    const report = { exitCode: 0, bestandsnaam: "nachtwacht-2026-07-23.db.gz", grootte: 183500800, foutmelding: "" };
    expectDeclared("backup-status", 200, await post(e, "backup-status", report));
    expectDeclared("backup-controle", 200, await post(e, "backup-controle"));

    e.setNow(new Date(NOW.getTime() + 30 * 3600_000));
    const old = await post(e, "backup-controle");
    expectDeclared("backup-controle", 409, old);
    expect(old.json).toMatchObject({ reden: "te-oud", leeftijdUren: 30 });
  });

  test("the audit jobs on a sound installation: audit-anker, audit-verificatie, audit-retentie 200", async () => {
    const e = await installation();
    const anker = await post(e, "audit-anker");
    expectDeclared("audit-anker", 200, anker);
    expect(anker.json.aantal).toBe(2);
    const unchanged = await post(e, "audit-anker");
    expectDeclared("audit-anker", 200, unchanged); // nothing new: installatie null
    expect(unchanged.json.installatie).toBeNull();
    expectDeclared("audit-verificatie", 200, await post(e, "audit-verificatie"));
    const retentie = await post(e, "audit-retentie");
    expectDeclared("audit-retentie", 200, retentie);
    expect(retentie.json.verwijderd).toBeGreaterThan(0);
    expectDeclared("audit-verificatie", 200, await post(e, "audit-verificatie"));
  });

  test("audit-verificatie 409: an entry changed with SQL, and a changed anchor file", async () => {
    const e = await installation();
    expectDeclared("audit-anker", 200, await post(e, "audit-anker"));
    await e.db.run("UPDATE audit_entries SET actor = 'mallory' WHERE seq = 8 AND tenant_id = (SELECT min(id) FROM tenants)");
    const changed = await post(e, "audit-verificatie");
    expectDeclared("audit-verificatie", 409, changed);
    expect(changed.json.resultaten[0].fout).toMatchObject({ seq: 8, reden: "hash-afwijkend" });

    const f = await installation();
    expectDeclared("audit-anker", 200, await post(f, "audit-anker"));
    alterAnchorFile(f);
    const file = await post(f, "audit-verificatie");
    expectDeclared("audit-verificatie", 409, file);
    expect(file.json.ankerbestand).toMatchObject({ intact: false, reden: "bestand-gewijzigd" });
  });

  test("audit-anker 409: new entries with a broken link, and a changed anchor file (reden, fout)", async () => {
    const e = await installation();
    expectDeclared("audit-anker", 200, await post(e, "audit-anker"));
    const a = (await e.db.get<{ id: number }>("SELECT id FROM tenants ORDER BY id"))!.id;
    await entries(e, a, 3, new Date(NOW.getTime() - 3600_000));
    await e.db.run("UPDATE audit_entries SET prev_hash = ? WHERE tenant_id = ? AND seq = 13", "0".repeat(64), a);
    const broken = await post(e, "audit-anker");
    expectDeclared("audit-anker", 409, broken);
    expect(broken.json.geweigerd).toEqual([{ tenantId: a, seq: 13, reden: expect.any(String) }]);

    const f = await installation();
    expectDeclared("audit-anker", 200, await post(f, "audit-anker"));
    alterAnchorFile(f);
    const file = await post(f, "audit-anker");
    expectDeclared("audit-anker", 409, file);
    expect(file.json).toMatchObject({ reden: "bestand-gewijzigd", fout: expect.any(String) });
  });

  test("audit-retentie 409: the anchor file does not match the database", async () => {
    const e = await installation();
    expectDeclared("audit-anker", 200, await post(e, "audit-anker"));
    alterAnchorFile(e);
    const r = await post(e, "audit-retentie");
    expectDeclared("audit-retentie", 409, r);
    expect(r.json).toMatchObject({ ok: false, verwijderd: 0, reden: "bestand-gewijzigd" });
  });

  test("beveiligingslog-analyse 200, then 409 with many failed logins; beveiligingslog-retentie 200", async () => {
    const e = await installation();
    expectDeclared("beveiligingslog-analyse", 200, await post(e, "beveiligingslog-analyse"));
    for (let i = 0; i < 25; i++) {
      await addLoginAttempt(e.db, { account: `gebruiker${i % 12}`, ip: "203.0.113.9", gelukt: false, tijdstip: new Date(NOW.getTime() - i * 60_000) });
      await addLoginAttempt(e.db, { account: "anna", ip: `198.51.100.${i}`, gelukt: false, tijdstip: new Date(NOW.getTime() - i * 60_000) });
    }
    const r = await post(e, "beveiligingslog-analyse");
    expectDeclared("beveiligingslog-analyse", 409, r);
    expect(r.json.aantalVerdacht).toEqual({ ip: 1, account: 1 });
    await addLoginAttempt(e.db, { account: "oud", ip: "10.9.9.9", gelukt: false, tijdstip: new Date(NOW.getTime() - 900 * DAY) });
    const retentie = await post(e, "beveiligingslog-retentie");
    expectDeclared("beveiligingslog-retentie", 200, retentie);
    expect(retentie.json.verwijderd).toBeGreaterThan(0);
  });

  test("beveiligingslog-retentie 409: the host clock was stepped forward since the start, nothing deleted", async () => {
    const e = await installation();
    await addLoginAttempt(e.db, { account: "oud", ip: "10.9.9.9", gelukt: false, tijdstip: new Date(NOW.getTime() - 900 * DAY) });
    e.deps.clockStep = () => 365 * DAY;
    const r = await post(e, "beveiligingslog-retentie");
    expectDeclared("beveiligingslog-retentie", 409, r);
    expect(r.json).toMatchObject({ ok: false, verwijderd: 0, reden: "klok-verzet" });
  });

  test("weekrapport 200 when everything went out, 502 with a refused message, 409 with a report whose earlier send never finished (onzeker)", async () => {
    const clean = await installation();
    expectDeclared("weekrapport", 200, await post(clean, "weekrapport"));
    const refused = await installation();
    refused.mailer.refuse.add("beheer@beta.test");
    const failed = await post(refused, "weekrapport");
    expectDeclared("weekrapport", 502, failed);
    expect(failed.json).toMatchObject({ verstuurd: 1, fouten: 1 });
    const e = await installation();
    const { id: admin, tenant_id: tenant } = (await e.db.get<{ id: number; tenant_id: number }>("SELECT id, tenant_id FROM administrators ORDER BY id"))!;
    await e.db.run("INSERT INTO weekly_report_deliveries (administrator_id, tenant_id, iso_week, verstuurd) VALUES (?, ?, ?, ?)", admin, tenant, isoWeek(reportEnd(NOW)), SENDING);
    const r = await post(e, "weekrapport");
    expectDeclared("weekrapport", 409, r);
    expect(r.json).toMatchObject({ verstuurd: 1, onzeker: 1 });
    expectDeclared("weekrapport", 409, await post(e, "weekrapport"));
  });

  test("dagrapport 200 without a recipient, 200 sent, 502 when the send fails, 409 when it perhaps arrived", async () => {
    const quiet = await installation();
    expectDeclared("dagrapport", 200, await post(quiet, "dagrapport")); // the report before anything ran
    const e = await installation({ DAGRAPPORT_EMAIL: "ops@example.test" });
    expectDeclared("backup-status", 200, await post(e, "backup-status", { exitCode: 1, foutmelding: "schijf vol" }));
    expectDeclared("audit-anker", 200, await post(e, "audit-anker"));
    await e.db.run("UPDATE audit_entries SET actor = 'mallory' WHERE seq = 8");
    expectDeclared("audit-verificatie", 409, await post(e, "audit-verificatie"));
    const sent = await post(e, "dagrapport");
    expectDeclared("dagrapport", 200, sent);
    expect(sent.json).toMatchObject({ verzonden: true, ontvanger: "ops@example.test" });
    expect(sent.json.verificatie.gebroken).toHaveLength(2);
    expect(sent.json.anker.installatieCheckpoint).toEndWith("\n");
    e.mailer.refuse.add("ops@example.test");
    const failed = await post(e, "dagrapport");
    expectDeclared("dagrapport", 502, failed);
    expect(failed.json).toMatchObject({ ok: false, verzonden: false, error: expect.stringContaining("550") });
    // A real SMTP server that takes the whole message, then drops the connection without an answer.
    const smtp = await ctlSmtp("drop");
    cleanups.push(() => smtp.stop());
    const dropping = await makeMailEnv({ SMTP_URL: smtp.url, DAGRAPPORT_EMAIL: "ops@example.test" });
    cleanups.push(() => dropping.cleanup());
    const perhaps = await post(dropping, "dagrapport");
    expectDeclared("dagrapport", 409, perhaps);
    expect(perhaps.json).toMatchObject({ ok: false, verzonden: false, mogelijkAfgeleverd: true });
  });

  test("taken-controle 200 when every job ran, 409 with a missed job", async () => {
    const e = await env();
    const insert = (job: string, gestart: string, beeindigd: string) =>
      e.db.run(
        "INSERT INTO job_runs (job, gestart, beeindigd, uitkomst, http_status, zegel, eindzegel) VALUES (?, ?, ?, 'ok', 200, ?, ?)",
        job,
        gestart,
        beeindigd,
        zegel(job, gestart),
        eindzegel({ job, gestart, beeindigd, uitkomst: "ok", httpStatus: 200 }),
      );
    for (const s of SCHEDULE) {
      if (s.cron === null) continue;
      const last = new Cron(s.cron, { timezone: "UTC" }).previousRuns(1, new Date(NOW.getTime() + 1))[0]!;
      if (s.job !== "weekrapport") await insert(s.job, new Date(last.getTime() + 1000).toISOString(), new Date(last.getTime() + 2000).toISOString());
    }
    const missed = await post(e, "taken-controle");
    expectDeclared("taken-controle", 409, missed);
    expect(missed.json.gemist).toEqual(["weekrapport"]);
    expect(missed.json.taken.find((t: { job: string }) => t.job === "weekrapport")).toMatchObject({ status: "gemist", laatsteRun: null });
    expectDeclared("weekrapport", 200, await post(e, "weekrapport"));
    const ok = await post(e, "taken-controle");
    expectDeclared("taken-controle", 200, ok);
    expect(ok.json.taken.find((t: { job: string }) => t.job === "taken-controle")).toMatchObject({ status: "loopt" });
  });

  test("taken-controle: a schedule that never fired yet has laatsteVerwacht null (it was \"\", not a date-time)", async () => {
    const e = await env();
    const r = await runTakenControle(e.deps, new Date(-1e15));
    expect(r.body.taken.every((t) => t.laatsteVerwacht === null && t.status === "nog-niet-verwacht")).toBe(true);
    expect(mismatches(jobs.get("taken-controle")!.responses![200].schema, JSON.parse(JSON.stringify(r.body)))).toEqual([]);
  });

  // SQLite's own file: auto_vacuum, and a page of the file overwritten (the PostgreSQL run's counterpart is below).
  sqliteOnly("db-onderhoud 200 (incremental, and an old database without auto-vacuum: omzetting), 409 on a damaged file", async () => {
    const e = await installation();
    if (e.store.kind !== "sqlite") throw new Error("SQLite only");
    const r = await post(e, "db-onderhoud");
    expectDeclared("db-onderhoud", 200, r);
    expect(r.json).toMatchObject({ autoVacuum: "incremental", omzetting: null, grootteVoor: expect.any(Number) });
    expect(r.json).not.toHaveProperty("groottevoor");

    // A database file made before auto_vacuum was set keeps auto_vacuum NONE.
    const t = tempDir();
    cleanups.push(() => t.cleanup());
    const oldPath = join(t.dir, "oud.db");
    const old = new Database(oldPath, { create: true });
    old.run("CREATE TABLE ouder (x)");
    old.close();
    const none = sqliteEnv({ DATABASE_PATH: oldPath });
    const pending = await post(none, "db-onderhoud");
    expectDeclared("db-onderhoud", 200, pending);
    expect(pending.json.omzetting).toMatchObject({ open: true });

    // A copy with the root page of an index overwritten fails quick_check.
    const { sqlite } = e.store;
    for (let i = 0; i < 3000; i++) recordLoginAttempt(sqlite, { account: `a${i}`, ip: `10.1.${i % 250}.${i % 7}`, gelukt: i % 3 === 0, tijdstip: new Date(NOW.getTime() - i * 1000) });
    sqlite.run("PRAGMA wal_checkpoint(TRUNCATE)");
    const { rootpage } = sqlite.query("SELECT rootpage FROM sqlite_schema WHERE name = 'login_attempts_failed_idx'").get() as { rootpage: number };
    const { page_size } = sqlite.query("PRAGMA page_size").get() as { page_size: number };
    const copy = join(t.dir, "kopie.db");
    copyFileSync(e.store.path, copy);
    const fd = openSync(copy, "r+");
    writeSync(fd, Buffer.alloc(page_size, 0xa5), 0, page_size, (rootpage - 1) * page_size);
    closeSync(fd);
    const damaged = sqliteEnv({ DATABASE_PATH: copy });
    const bad = await post(damaged, "db-onderhoud");
    expectDeclared("db-onderhoud", 409, bad);
    expect(bad.json).toMatchObject({ ok: false, checkpoint: null });
  });

  pgOnly("db-onderhoud on PostgreSQL: 200 without amcheck (skipped) and with it (ok), 409 on an index whose order no longer holds", async () => {
    const e = await installation();
    const skipped = await post(e, "db-onderhoud");
    expectDeclared("db-onderhoud", 200, skipped);
    expect(skipped.json).toMatchObject({ ok: true, integriteit: { status: "overgeslagen" }, geanalyseerd: expect.any(Array) });

    // The test cluster's user is a superuser: amcheck, then a B-tree built with one
    // comparison and read with its reverse (as test/pg-maintenance.test.ts does).
    await e.db.run("CREATE EXTENSION amcheck");
    const ok = await post(e, "db-onderhoud");
    expectDeclared("db-onderhoud", 200, ok);
    expect(ok.json).toMatchObject({ ok: true, integriteit: { status: "ok" } });
    for (let i = 0; i < 50; i++) await e.db.run("INSERT INTO job_runs (job, gestart, beeindigd, uitkomst, http_status) VALUES ('dagrapport', ?, ?, 'ok', 200)", NOW.toISOString(), NOW.toISOString());
    await e.db.run("CREATE FUNCTION nw_cmp(int4, int4) RETURNS int4 IMMUTABLE LANGUAGE sql AS 'SELECT btint4cmp($1, $2)'");
    await e.db.run(
      "CREATE OPERATOR CLASS nw_ops FOR TYPE int4 USING btree AS OPERATOR 1 <, OPERATOR 2 <=, OPERATOR 3 =, OPERATOR 4 >=, OPERATOR 5 >, FUNCTION 1 nw_cmp(int4, int4)",
    );
    await e.db.run("CREATE INDEX job_runs_omgekeerd_idx ON job_runs (id nw_ops)");
    await e.db.run("CREATE OR REPLACE FUNCTION nw_cmp(int4, int4) RETURNS int4 IMMUTABLE LANGUAGE sql AS 'SELECT btint4cmp($2, $1)'");
    const bad = await post(e, "db-onderhoud");
    expectDeclared("db-onderhoud", 409, bad);
    expect(bad.json).toMatchObject({ ok: false, integriteit: { status: "problemen" }, opgeschoond: null, geanalyseerd: [] });
    expect(e.alarms.raised.map((a) => a.type)).toContain("db-integrity");
  });

  test("each job's declared answers were all produced above", () => {
    for (const def of ALL_JOBS) {
      const declared = Object.keys(def.responses ?? {}).map(Number);
      expect(declared, `${def.name} declares no 200`).toContain(200);
      expect([...(seen.get(def.name) ?? [])].sort(), def.name).toEqual(declared.sort());
    }
  });
});

describe("/docs/json shows the declared schemas", () => {
  test("per job path: every answer's schema and the request body are the declarations themselves", async () => {
    const e = await env();
    const doc = (await call(e.app, "/docs/json", { method: "GET", token: null })).json;
    const plain = (s: TSchema) => JSON.parse(JSON.stringify(s));
    for (const def of ALL_JOBS) {
      const op = doc.paths[`/api/cron/${def.name}`].post;
      const expected = routeResponses(def);
      expect(Object.keys(op.responses).sort(), def.name).toEqual(Object.keys(expected).sort());
      for (const [status, r] of Object.entries(expected)) {
        const served = op.responses[status];
        expect(served.description, `${def.name} ${status}`).toBe(r.description);
        // Without a schema (204 to a scheduled call that was not needed): no body at all.
        if (r.schema === undefined) expect(served.content, `${def.name} ${status}`).toBeUndefined();
        else expect(served.content["application/json"].schema, `${def.name} ${status}`).toEqual(plain(r.schema));
      }
      // The job's own answers: the very schema it declares (409 as one of two: or the wrapper's {error}).
      for (const [status, own] of Object.entries(def.responses ?? {})) {
        const served = op.responses[status].content["application/json"].schema;
        const shown = status === "409" ? served.anyOf[0] : served;
        expect(shown, `${def.name} ${status}`).toEqual(plain(own.schema));
        expect(shown.required, `${def.name} ${status}`).toEqual((own.schema as { required?: string[] }).required);
      }
      if (def.input) {
        expect(op.requestBody.content["application/json"].schema).toEqual(plain(def.input.schema));
        // The example Swagger UI fills in is a valid body.
        const example = (def.input.schema as { example?: unknown }).example;
        expect(example === undefined ? ["no example"] : mismatches(def.input.schema, example)).toEqual([]);
      } else expect(op.requestBody).toBeUndefined();
    }
  });
});
