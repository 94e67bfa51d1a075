// Sealed job runs (src/job-seal.ts): a database writer who forges or alters job_runs rows
// can neither make the crontab's call of a job a "skipped" 204 nor make taken-controle
// call the job fine. On both stores (NACHTWACHT_TEST_DB=pg).
import { afterEach, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { join } from "node:path";
import { openStore } from "../src/db.ts";
import { runSeal, sealLegacyRuns } from "../src/job-seal.ts";
import { auditKeys } from "../src/audit/keys.ts";
import { generateKeyPair } from "../src/audit/note.ts";
import { call, NOW, tempDir, TEST_SEAL, zegel } from "./helpers.ts";
import { addTenant, fillChain, makeEnv, type Env } from "./dialect.ts";

let env: Env;
afterEach(() => env?.cleanup());

const scheduled = { headers: { "x-nachtwacht-gepland": "1" } };
const at = (iso: string) => new Date(iso);

describe("sealed job runs", () => {
  test("a forged 'ok' run dated after tonight's schedule skips nothing: the crontab's call runs audit-verificatie and finds the tampering; taken-controle reports the forgery", async () => {
    env = await makeEnv();
    const t = await addTenant(env.db, "Gemeente Delft");
    await fillChain(env.store, t, 20);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);

    // The writer changes a signed entry and plants runs that say the audit jobs are done, far ahead.
    await env.db.run("UPDATE audit_entries SET actor = 'iemand-anders' WHERE tenant_id = ? AND seq = 12", t);
    for (const job of ["audit-verificatie", "audit-anker", "taken-controle"]) {
      await env.db.run("INSERT INTO job_runs (job, gestart, beeindigd, uitkomst, http_status) VALUES (?, '9999-12-31T00:00:00.000Z', '9999-12-31T00:00:01.000Z', 'ok', 200)", job);
    }
    // And a forged seal: a real seal of another run copied onto it.
    await env.db.run(
      "INSERT INTO job_runs (job, gestart, beeindigd, uitkomst, http_status, zegel) VALUES ('audit-verificatie', '9999-12-30T00:00:00.000Z', '9999-12-30T00:00:01.000Z', 'ok', 200, ?)",
      zegel("audit-verificatie", "2026-07-24T01:00:00.000Z"),
    );

    env.setNow(at("2026-07-24T01:00:05.000Z"));
    const v = await call(env.app, "/api/cron/audit-verificatie", scheduled);
    expect(v.status).toBe(409);
    expect(v.json.resultaten.find((r: { tenantId: number }) => r.tenantId === t).fout.seq).toBe(12);
    expect(env.alarms.raised.map((a) => a.type)).toContain("audit-chain-broken");

    env.setNow(at("2026-07-24T01:45:05.000Z"));
    const c = await call(env.app, "/api/cron/taken-controle", scheduled);
    expect(c.status).toBe(409);
    expect(c.json.vervalst).toEqual(expect.arrayContaining(["audit-verificatie", "audit-anker"]));
    // The newest run taken-controle judges is the real one of tonight, not the forged one.
    expect(c.json.taken.find((r: { job: string }) => r.job === "audit-verificatie").laatsteRun.gestart).toBe("2026-07-24T01:00:05.000Z");
    const integrity = env.alarms.raised.find((a) => a.type === "db-integrity");
    expect(integrity?.message).toContain("zonder geldig zegel");

    // A second scheduled call for the same time is skipped: by the real, sealed run.
    const again = await call(env.app, "/api/cron/audit-verificatie", scheduled);
    expect(again.status).toBe(204);
  });

  test("a real run whose start the writer moves forward no longer counts, and is reported", async () => {
    env = await makeEnv();
    env.setNow(at("2026-07-24T02:00:05.000Z"));
    expect((await call(env.app, "/api/cron/backup-controle", scheduled)).status).not.toBe(204);
    const run = await env.db.get<{ id: number; gestart: string }>("SELECT id, gestart FROM job_runs WHERE job = 'backup-controle'");
    // Moved to after tomorrow's fire time, so that tomorrow's call would be skipped.
    await env.db.run("UPDATE job_runs SET gestart = '2026-07-25T02:00:01.000Z' WHERE id = ?", run!.id);
    env.setNow(at("2026-07-24T02:45:05.000Z"));
    const c = await call(env.app, "/api/cron/taken-controle");
    expect(c.json.vervalst).toContain("backup-controle");
    env.setNow(at("2026-07-25T02:00:05.000Z"));
    const tomorrow = await call(env.app, "/api/cron/backup-controle", scheduled);
    expect(tomorrow.status).not.toBe(204);
    const rows = await env.db.all<{ gestart: string }>("SELECT gestart FROM job_runs WHERE job = 'backup-controle' ORDER BY id");
    expect(rows.map((r) => r.gestart)).toEqual(["2026-07-25T02:00:01.000Z", "2026-07-25T02:00:05.000Z"]);
  });

  test("the seal opens for exactly its job and start, under any trusted key; a key no longer trusted seals nothing", () => {
    const s = TEST_SEAL.seal({ job: "weekrapport", gestart: NOW.toISOString() });
    expect(TEST_SEAL.sealed({ job: "weekrapport", gestart: NOW.toISOString(), zegel: s })).toBe(true);
    expect(TEST_SEAL.sealed({ job: "dagrapport", gestart: NOW.toISOString(), zegel: s })).toBe(false);
    expect(TEST_SEAL.sealed({ job: "weekrapport", gestart: "2026-07-23T12:00:00.001Z", zegel: s })).toBe(false);
    expect(TEST_SEAL.sealed({ job: "weekrapport", gestart: NOW.toISOString(), zegel: null })).toBe(false);
    expect(TEST_SEAL.sealed({ job: "weekrapport", gestart: NOW.toISOString(), zegel: "rommel\n" })).toBe(false);
    // After a key change: the old key among the trusted ones still opens the old runs.
    const old = generateKeyPair("nachtwacht.test/oud");
    const sealedBefore = runSeal(auditKeys({ auditAnkerSleutel: old.signerKey, auditVertrouwdeSleutels: [] })).seal({ job: "weekrapport", gestart: NOW.toISOString() });
    const next = generateKeyPair("nachtwacht.test/nieuw");
    const row = { job: "weekrapport", gestart: NOW.toISOString(), zegel: sealedBefore };
    expect(runSeal(auditKeys({ auditAnkerSleutel: next.signerKey, auditVertrouwdeSleutels: [old.verifierKey] })).sealed(row)).toBe(true);
    expect(runSeal(auditKeys({ auditAnkerSleutel: next.signerKey, auditVertrouwdeSleutels: [] })).sealed(row)).toBe(false);
  });
});

describe("the runs recorded before runs were sealed", () => {
  // On PostgreSQL: test/pg-chain.test.ts ("the migration that adds job_runs.zegel …").
  test("the start that adds the column seals them, except a row dated after that start; a later start seals nothing", () => {
    const { dir, cleanup } = tempDir();
    try {
      const path = join(dir, "oud.db");
      // The database as the version before left it: its migrations, a run history, no zegel column.
      openStore(path, NOW).close();
      const raw = new Database(path);
      raw.run("ALTER TABLE job_runs DROP COLUMN zegel");
      raw.run("DELETE FROM __drizzle_migrations WHERE created_at = (SELECT max(created_at) FROM __drizzle_migrations)");
      raw.run("INSERT INTO job_runs (job, gestart, beeindigd, uitkomst, http_status) VALUES ('weekrapport', '2026-07-20T06:00:01.000Z', '2026-07-20T06:00:09.000Z', 'ok', 200)");
      raw.run("INSERT INTO job_runs (job, gestart, beeindigd, uitkomst, http_status) VALUES ('audit-verificatie', '9999-12-31T00:00:00.000Z', NULL, 'ok', 200)");
      raw.close();

      const store = openStore(path, NOW, TEST_SEAL);
      const rows = store.sqlite.query("SELECT job, gestart, zegel FROM job_runs ORDER BY id").all() as { job: string; gestart: string; zegel: string | null }[];
      expect(rows.map((r) => TEST_SEAL.sealed(r))).toEqual([true, false]);
      // The column exists now: a later start (or a row made unsealed later) gets no seal.
      store.sqlite.run("INSERT INTO job_runs (job, gestart, uitkomst) VALUES ('dagrapport', '2026-07-22T06:00:00.000Z', 'ok')");
      store.close();
      const again = openStore(path, NOW, TEST_SEAL);
      expect((again.sqlite.query("SELECT zegel FROM job_runs WHERE job = 'dagrapport'").get() as { zegel: string | null }).zegel).toBeNull();
      expect(sealLegacyRuns(again.db, TEST_SEAL, NOW)).toBe(1); // what the first start would have done
      again.close();
    } finally {
      cleanup();
    }
  });

});
