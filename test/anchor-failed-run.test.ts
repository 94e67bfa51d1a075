// A write transaction that fails after its append to the anchor file (a COMMIT on a full
// disk, a dropped PostgreSQL connection, a timeout on the insert) takes its lines back
// (appendingTransaction, src/audit/anchor-file.ts): otherwise two such runs in a row left
// two runs the database lacks, and verification called the database restored
// ("database-teruggezet"), a false tamper alarm that stopped audit-anker and audit-retentie.
// The fault is a trigger on audit_anchor_log that refuses the run's new rows, on both stores.
import { afterEach, expect, test } from "bun:test";
import { statSync } from "node:fs";
import { parseVerifierKey } from "../src/audit/note.ts";
import { verifyDatabase } from "../src/audit/offline.ts";
import { verifyInstallationPg } from "../src/pg/offline.ts";
import { call, DAY_MS, NOW, TEST_VERIFIER_KEY } from "./helpers.ts";
import { addTenant, fillChain, makeEnv, sqliteOnly, type Env } from "./dialect.ts";

let env: Env;
afterEach(() => env?.cleanup());

const VERIFIERS = [parseVerifierKey(TEST_VERIFIER_KEY)];
const fill = (e: Env, t: number, n: number, from = 0) => fillChain(e.store, t, n, { from, at: (i) => new Date(NOW.getTime() - 3600_000 + i * 1000) });
const anchorSize = (e: Env) => statSync(e.config.auditAnkerBestand).size;

/** Refuses every new audit_anchor_log row from byte `size` of the file on: as a full disk or a dropped connection fails the run after its append. */
async function failInsertsFrom(e: Env, size: number): Promise<void> {
  if (e.dialect === "pg") {
    await e.db.run(
      `CREATE OR REPLACE FUNCTION fail_insert() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF NEW.positie >= ${size} THEN RAISE EXCEPTION 'injected fault' USING ERRCODE = '08006'; END IF; RETURN NEW; END $$`,
    );
    await e.db.run("DROP TRIGGER IF EXISTS fail_insert ON audit_anchor_log");
    await e.db.run("CREATE TRIGGER fail_insert BEFORE INSERT ON audit_anchor_log FOR EACH ROW EXECUTE FUNCTION fail_insert()");
  } else {
    await e.db.run("DROP TRIGGER IF EXISTS fail_insert");
    await e.db.run(`CREATE TRIGGER fail_insert BEFORE INSERT ON audit_anchor_log WHEN NEW.positie >= ${size} BEGIN SELECT RAISE(ABORT, 'injected fault'); END`);
  }
}
const faultGone = (e: Env) => e.db.run("DROP TRIGGER fail_insert" + (e.dialect === "pg" ? " ON audit_anchor_log" : ""));

/** The offline check (`nachtwacht verify`) of the database against its anchor file. */
async function verifyOffline(e: Env) {
  const s = e.store;
  return s.kind === "sqlite" ? verifyDatabase(s.path, e.config.auditAnkerBestand, VERIFIERS) : verifyInstallationPg(s.url, e.config.auditAnkerBestand, VERIFIERS, { workers: 0 });
}

test("two audit-anker runs failing after the append, then the fault gone: no false 'database-teruggezet'", async () => {
  env = await makeEnv();
  const a = await addTenant(env.db, "A");
  await fill(env, a, 4);
  expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
  for (let night = 0; night < 2; night++) {
    await fill(env, a, 1, 4 + night);
    const size = anchorSize(env);
    await failInsertsFrom(env, size);
    const r = await call(env.app, "/api/cron/audit-anker");
    expect(r.status).toBeGreaterThanOrEqual(409);
    expect(JSON.stringify(env.alarms.raised.at(-1)?.context)).toContain("injected fault");
    // The run took its lines back: the file is as before its append.
    expect(anchorSize(env)).toBe(size);
  }
  await faultGone(env);
  const r = await call(env.app, "/api/cron/audit-anker");
  expect(r.status).toBe(200);
  expect(r.json.checkpoints.map((c: { tenantId: number; grootte: number }) => [c.tenantId, c.grootte])).toEqual([[a, 6]]);
  expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
  const verdict = await verifyOffline(env);
  expect(verdict.probleem).toBeUndefined();
  expect(verdict.tenants.map((t) => [t.tenantId, t.intact])).toEqual([[a, true]]);
});

test("takeBack leaves a failed run's lines when they committed or the file grew since (they are then a tail the next run copies in)", async () => {
  // takeBack's other branch, through the same rule: after the failure, but before the
  // take-back, another line reaches the file; the take-back then leaves the file alone.
  const { RunAppend, takeBack } = await import("../src/audit/anchor-file.ts");
  const { appendRun } = await import("../src/audit/anchoring.ts");
  env = await makeEnv();
  const path = env.config.auditAnkerBestand;
  const run = new RunAppend();
  const line = { soort: "installatie" as const, tenantId: null, note: "x", positie: 0, grootte: 0, bereik: null };
  appendRun(path, [line], run);
  const after = anchorSize(env);
  expect(run.appended).toEqual({ path, before: 0, after });
  expect(takeBack(run, after)).toBe(false); // the database knows the line: it committed
  appendRun(path, [{ ...line, note: "y" }]);
  expect(takeBack(run, 0)).toBe(false); // someone appended since
  expect(anchorSize(env)).toBeGreaterThan(after);
});

test("two audit-retentie runs failing after the append, then the fault gone: the records are written once, the chain verifies", async () => {
  env = await makeEnv({ AUDIT_RETENTIE_DAGEN: "30" });
  const a = await addTenant(env.db, "A");
  await fillChain(env.store, a, 6, { at: (i) => new Date(NOW.getTime() - (100 - i) * DAY_MS) });
  expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
  for (let night = 0; night < 2; night++) {
    const size = anchorSize(env);
    await failInsertsFrom(env, size);
    const r = await call(env.app, "/api/cron/audit-retentie");
    expect(r.status).toBeGreaterThanOrEqual(409);
    expect(anchorSize(env)).toBe(size);
    expect((await env.db.get<{ n: number }>("SELECT count(*) AS n FROM audit_entries WHERE tenant_id = ?", a))!.n).toBe(6);
  }
  await faultGone(env);
  const r = await call(env.app, "/api/cron/audit-retentie");
  expect(r.status).toBe(200);
  expect(r.json.verwijderd).toBe(6);
  expect((await env.db.get<{ n: number }>("SELECT count(*) AS n FROM audit_anchor_log WHERE soort = 'retentie'"))!.n).toBe(1);
  expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
  expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
  expect((await verifyOffline(env)).probleem).toBeUndefined();
});

sqliteOnly("audit-anker on a full database (SQLITE_FULL): the answer and the alarm name SQLITE_FULL, not a failed ROLLBACK; the file is as before", async () => {
  env = await makeEnv();
  if (env.store.kind !== "sqlite") throw new Error("sqlite only");
  const sqlite = env.store.sqlite;
  const a = await addTenant(env.db, "A");
  await fill(env, a, 4);
  expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
  // A run of 100 checkpoint rows (each keeps its tree's range) needs new pages; the job's own row does not.
  for (let i = 0; i < 100; i++) await fill(env, await addTenant(env.db, `T${i}`), 2);
  sqlite.run("PRAGMA wal_checkpoint(TRUNCATE)");
  const size = anchorSize(env);
  const { page_count } = sqlite.query("PRAGMA page_count").get() as { page_count: number };
  sqlite.run(`PRAGMA max_page_count = ${page_count}`);
  const r = await call(env.app, "/api/cron/audit-anker");
  sqlite.run("PRAGMA max_page_count = 1073741823");
  expect(r.status).toBeGreaterThanOrEqual(500);
  expect(JSON.stringify(r.json)).toContain("SQLITE_FULL");
  expect(JSON.stringify(r.json)).not.toContain("cannot rollback");
  expect(env.alarms.raised.map((x) => x.message).join(" ")).toContain("SQLITE_FULL");
  expect(anchorSize(env)).toBe(size);
  expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
  expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
});
