// Sealed rows (src/row-seal.ts): a database writer who forges or alters job_runs rows can
// neither make the crontab's call of a job a "skipped" 204 nor make taken-controle call
// the job fine; one who forges or alters backup_statuses rows cannot make backup-controle
// call the backups fine. On both stores (NACHTWACHT_TEST_DB=pg).
import { afterEach, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { existsSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { drizzle } from "drizzle-orm/bun-sqlite";
import { installedAt, migrate, openStore } from "../src/db.ts";
import { liveLeases, newLeaseHolder, startLeasedRun } from "../src/job-lease.ts";
import { writeRunEnd } from "../src/job-runs.ts";
import { scheduledJobRunsPg, verificationCountsPg, verificationSincePg } from "../src/pg/daily.ts";
import { scheduledJobRuns, verificationCounts, verificationSinceIn } from "../src/reports/daily.ts";
import { weekStatsOf } from "../src/reports/weekly.ts";
import { pastSealedMarker, rowSeal, rowSealOf, sealKeyMarker, sealLegacyRows, UntrustedSealKey, verificationWitnessFile, type BackupColumns } from "../src/row-seal.ts";
import { startFailureMessage } from "../src/start-failure.ts";
import { auditKeys } from "../src/audit/keys.ts";
import { generateKeyPair } from "../src/audit/note.ts";
import { insertBackupRow, call, eindzegel, NOW, tempDir, TEST_SEAL, TEST_SIGNING_KEY, TEST_VERIFIER_KEY, zegel } from "./helpers.ts";
import { addTenant, fillChain, makeEnv, restartService, type Env } from "./dialect.ts";
import type { Config } from "../src/config.ts";

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

  test("a run's end the writer changes (afwijking made ok) no longer counts: taken-controle reports it, and the crontab's second call for that time runs the job again", async () => {
    env = await makeEnv();
    env.setNow(at("2026-07-24T02:00:05.000Z"));
    // No backup was ever reported: backup-controle answers 409 (afwijking), a run that did its time.
    expect((await call(env.app, "/api/cron/backup-controle", scheduled)).status).toBe(409);
    expect((await call(env.app, "/api/cron/backup-controle", scheduled)).status).toBe(204);
    await env.db.run("UPDATE job_runs SET uitkomst = 'ok', http_status = 200 WHERE job = 'backup-controle'");
    env.setNow(at("2026-07-24T02:45:05.000Z"));
    const c = await call(env.app, "/api/cron/taken-controle");
    expect(c.json.vervalst).toContain("backup-controle");
    expect(c.json.taken.find((r: { job: string }) => r.job === "backup-controle").laatsteRun).toBeNull();
    expect(env.alarms.raised.map((a) => a.type)).toContain("db-integrity");
    // The altered row does not count as the run of 02:00: the next scheduled call runs it.
    expect((await call(env.app, "/api/cron/backup-controle", scheduled)).status).toBe(409);
  });

  test("a run's row carries the seals of its start and of its end as the job wrapper wrote them", async () => {
    env = await makeEnv();
    expect((await call(env.app, "/api/cron/backup-controle")).status).toBe(409);
    const row = await env.db.get<{ job: string; gestart: string; beeindigd: string | null; uitkomst: string; http_status: number | null; samenvatting: string | null; fout: string | null; zegel: string | null; eindzegel: string | null }>(
      "SELECT * FROM job_runs WHERE job = 'backup-controle'",
    );
    const r = { ...row!, httpStatus: row!.http_status };
    expect(r.uitkomst).toBe("afwijking");
    expect(r.samenvatting).toContain("geen-backup");
    expect(TEST_SEAL.sealed(r)).toBe(true);
    // Each column of the end is sealed: changed, the run no longer counts.
    for (const change of [{ uitkomst: "ok" }, { httpStatus: 200 }, { samenvatting: "{}" }, { fout: "x" }, { beeindigd: "2026-07-23T12:00:09.000Z" }, { eindzegel: null }]) {
      expect(TEST_SEAL.sealed({ ...r, ...change })).toBe(false);
    }
    // Set back to 'bezig' (no end) it counts as a run that never ended: taken-controle calls that onderbroken, not fine.
    expect(TEST_SEAL.sealed({ ...r, uitkomst: "bezig", beeindigd: null })).toBe(true);
    expect(TEST_SEAL.sealed({ ...r, uitkomst: "bezig" })).toBe(false);
  });

  test("the seal opens for exactly its job and start, under the current key only: not under a rotated-out one still trusted for the anchor file", () => {
    const s = TEST_SEAL.seal({ job: "weekrapport", gestart: NOW.toISOString() });
    expect(TEST_SEAL.startSealed({ job: "weekrapport", gestart: NOW.toISOString(), zegel: s })).toBe(true);
    expect(TEST_SEAL.startSealed({ job: "dagrapport", gestart: NOW.toISOString(), zegel: s })).toBe(false);
    expect(TEST_SEAL.startSealed({ job: "weekrapport", gestart: "2026-07-23T12:00:00.001Z", zegel: s })).toBe(false);
    expect(TEST_SEAL.startSealed({ job: "weekrapport", gestart: NOW.toISOString(), zegel: null })).toBe(false);
    expect(TEST_SEAL.startSealed({ job: "weekrapport", gestart: NOW.toISOString(), zegel: "rommel\n" })).toBe(false);
    // A start seal does not seal an end, nor an end seal a start.
    const end = { job: "weekrapport", gestart: NOW.toISOString(), beeindigd: NOW.toISOString(), uitkomst: "ok", httpStatus: 200, samenvatting: null, fout: null };
    expect(TEST_SEAL.sealed({ ...end, zegel: s, eindzegel: s })).toBe(false);
    expect(TEST_SEAL.sealed({ ...end, zegel: TEST_SEAL.sealEnd(end), eindzegel: TEST_SEAL.sealEnd(end) })).toBe(false);
    expect(TEST_SEAL.sealed({ ...end, zegel: s, eindzegel: TEST_SEAL.sealEnd(end) })).toBe(true);
    // After a key change the old key, still trusted (for the anchor file's records), opens no row: it may have leaked.
    // The rows it sealed before the change are re-sealed at the first start with the new key ("a key change" below).
    const old = generateKeyPair("nachtwacht.test/oud");
    const oldSeal = rowSeal(auditKeys({ auditAnkerSleutel: old.signerKey, auditVertrouwdeSleutels: [] }));
    const row = { ...end, zegel: oldSeal.seal(end), eindzegel: oldSeal.sealEnd(end) };
    expect(oldSeal.sealed(row)).toBe(true);
    const next = generateKeyPair("nachtwacht.test/nieuw");
    expect(rowSeal(auditKeys({ auditAnkerSleutel: next.signerKey, auditVertrouwdeSleutels: [old.verifierKey] })).sealed(row)).toBe(false);
    expect(rowSeal(auditKeys({ auditAnkerSleutel: next.signerKey, auditVertrouwdeSleutels: [] })).sealed(row)).toBe(false);
  });

  test("a backup report's seal opens for exactly its columns: none of them can be changed, nor can a seal be copied to another report", () => {
    const b: BackupColumns = { ontvangen: NOW.toISOString(), exitCode: 3, gelukt: false, bestandsnaam: "db.gz", grootte: null, foutmelding: "schijf\nvol", bron: "host-cron" };
    const z = TEST_SEAL.sealBackup(b);
    expect(TEST_SEAL.backupSealed({ ...b, zegel: z })).toBe(true);
    for (const change of [{ exitCode: 0 }, { gelukt: true }, { ontvangen: "2026-07-23T12:00:00.001Z" }, { bestandsnaam: null }, { grootte: 0 }, { foutmelding: "schijf vol" }, { bron: "x" }]) {
      expect(TEST_SEAL.backupSealed({ ...b, ...change, zegel: z })).toBe(false);
    }
    expect(TEST_SEAL.backupSealed({ ...b, zegel: TEST_SEAL.seal({ job: "backup-status", gestart: b.ontvangen }) })).toBe(false);
  });
});

/** A backup report stored as a database writer would store it: `zegel` as given (none, or one copied). */
async function plantBackup(b: Partial<BackupColumns> & { ontvangen: string }, zegel: string | null = null) {
  await insertBackupRow(env.db, { exitCode: 0, gelukt: true, bestandsnaam: "nachtwacht.db.gz", grootte: 183500800, foutmelding: "", bron: "host-cron", ...b }, zegel);
}

const report = (body: object) => ({ body: JSON.stringify(body), headers: { "content-type": "application/json" } });

describe("sealed backup reports", () => {
  test("a forged good backup does not silence backup-controle: without any real report it is geen-backup, and the forgery is reported (db-integrity)", async () => {
    env = await makeEnv();
    await plantBackup({ ontvangen: NOW.toISOString() });
    const r = await call(env.app, "/api/cron/backup-controle");
    expect(r.status).toBe(409);
    expect(r.json).toMatchObject({ ok: false, reden: "geen-backup", laatsteBackup: null, vervalst: 1 });
    expect(env.alarms.raised.map((a) => a.type).sort()).toEqual(["backup-missing", "db-integrity"]);
    expect(env.alarms.raised.find((a) => a.type === "db-integrity")!.message).toContain("zonder geldig zegel");
  });

  test("a real failed report stays the one judged under a forged newer good one, a copied seal, and the failed row changed to a success", async () => {
    env = await makeEnv();
    env.setNow(new Date(NOW.getTime() - 3_600_000));
    expect((await call(env.app, "/api/cron/backup-status", report({ exitCode: 0, bestandsnaam: "a.gz", grootte: 1, foutmelding: "" }))).status).toBe(200);
    env.setNow(NOW);
    expect((await call(env.app, "/api/cron/backup-status", report({ exitCode: 2, foutmelding: "schijf vol" }))).status).toBe(200);
    const failed = await env.db.get<{ id: number; zegel: string }>("SELECT id, zegel FROM backup_statuses WHERE exit_code = 2");
    // Forged: a good report a minute later, one with the failed report's seal copied onto it.
    env.setNow(new Date(NOW.getTime() + 120_000));
    await plantBackup({ ontvangen: new Date(NOW.getTime() + 60_000).toISOString() });
    await plantBackup({ ontvangen: new Date(NOW.getTime() + 90_000).toISOString() }, failed!.zegel);
    const r = await call(env.app, "/api/cron/backup-controle");
    expect(r.status).toBe(409);
    expect(r.json).toMatchObject({ reden: "mislukt", vervalst: 2, laatsteBackup: { ontvangen: NOW.toISOString(), exitCode: 2 } });
    // The real failed row changed to a success: its seal no longer holds, and the older good one is judged.
    await env.db.run("UPDATE backup_statuses SET exit_code = 0, gelukt = ? WHERE id = ?", true, failed!.id);
    // (And the file beside the anchor file says the newest report the service stored is gone: `ontbreekt`.)
    const again = await call(env.app, "/api/cron/backup-controle");
    expect(again.json).toMatchObject({ ok: false, reden: "ontbreekt", ontbreekt: NOW.toISOString(), vervalst: 3, laatsteBackup: { bestandsnaam: "a.gz" } });
    expect(env.alarms.raised.filter((a) => a.type === "db-integrity")).toHaveLength(3);
  });

  test("the newest report deleted (a failed one, so that the good one before reads as newest) is noticed: the file beside the anchor file says a newer one was received", async () => {
    env = await makeEnv();
    env.setNow(new Date(NOW.getTime() - 3_600_000));
    expect((await call(env.app, "/api/cron/backup-status", report({ exitCode: 0, bestandsnaam: "a.gz", grootte: 1 }))).status).toBe(200);
    env.setNow(NOW);
    expect((await call(env.app, "/api/cron/backup-status", report({ exitCode: 2, foutmelding: "schijf vol" }))).status).toBe(200);
    await env.db.run("DELETE FROM backup_statuses WHERE exit_code = 2");
    const r = await call(env.app, "/api/cron/backup-controle");
    expect(r.status).toBe(409);
    expect(r.json).toMatchObject({ ok: false, reden: "ontbreekt", ontbreekt: NOW.toISOString(), laatsteBackup: { bestandsnaam: "a.gz" }, vervalst: 0 });
    expect(env.alarms.raised.find((a) => a.type === "db-integrity")!.message).toContain("staat niet meer");
    // The next report clears it.
    env.setNow(new Date(NOW.getTime() + 60_000));
    expect((await call(env.app, "/api/cron/backup-status", report({ exitCode: 0, bestandsnaam: "b.gz", grootte: 1 }))).status).toBe(200);
    expect((await call(env.app, "/api/cron/backup-controle")).json).toMatchObject({ ok: true, ontbreekt: null });
  });

  test("a report received through backup-status is sealed and judged: 200 with vervalst 0", async () => {
    env = await makeEnv();
    expect((await call(env.app, "/api/cron/backup-status", report({ exitCode: 0, bestandsnaam: "a.gz", grootte: 10 }))).status).toBe(200);
    const row = await env.db.get<{ zegel: string | null }>("SELECT zegel FROM backup_statuses");
    expect(row!.zegel).toStartWith("\u2014 ");
    const r = await call(env.app, "/api/cron/backup-controle");
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ ok: true, vervalst: 0, laatsteBackup: { bestandsnaam: "a.gz" } });
    expect(env.alarms.raised).toEqual([]);
  });
});

/** The seal columns of the version after the one that sealed ends and backups (migration 0010: leases, install time, verification results). */
const LATER_SEALS = ["job_leases DROP COLUMN zegel", "service_meta DROP COLUMN zegel", "audit_verification_state DROP COLUMN zegel"];

/** The migrations after the seal columns' (0011_alarm_mails), undone with them: each undoes its own. */
const AFTER_SEALS = ["DROP TABLE alarm_mails"];

/** The database as an older version left it: its last `migrations` of the seal columns' undone (and those after them) and these columns dropped, installed at NOW − 1 day (unsealed). */
function asOlderVersion(path: string, migrations: number, drop: readonly string[]): Database {
  openStore(path, NOW).close();
  const raw = new Database(path);
  raw.run("INSERT INTO service_meta (key, value) VALUES ('geinstalleerd', '2026-07-22T12:00:00.000Z')");
  for (const c of AFTER_SEALS) raw.run(c);
  for (const c of drop) raw.run(`ALTER TABLE ${c}`);
  raw.run(`DELETE FROM __drizzle_migrations WHERE created_at IN (SELECT created_at FROM __drizzle_migrations ORDER BY created_at DESC LIMIT ${migrations + AFTER_SEALS.length})`);
  return raw;
}

describe("the rows recorded before they were sealed", () => {
  // On PostgreSQL: test/pg-chain.test.ts ("the migrations that add the seal columns …").
  test("the start that adds job_runs.zegel seals their starts and ends, except a row dated after that start; a later start seals nothing", () => {
    const { dir, cleanup } = tempDir();
    try {
      const path = join(dir, "oud.db");
      const raw = asOlderVersion(path, 3, [...LATER_SEALS, "job_runs DROP COLUMN eindzegel", "backup_statuses DROP COLUMN zegel", "job_runs DROP COLUMN zegel"]);
      raw.run("INSERT INTO job_runs (job, gestart, beeindigd, uitkomst, http_status) VALUES ('weekrapport', '2026-07-20T06:00:01.000Z', '2026-07-20T06:00:09.000Z', 'ok', 200)");
      raw.run("INSERT INTO job_runs (job, gestart, beeindigd, uitkomst, http_status) VALUES ('audit-verificatie', '9999-12-31T00:00:00.000Z', NULL, 'ok', 200)");
      raw.close();

      const store = openStore(path, NOW, TEST_SEAL);
      const rows = store.sqlite.query("SELECT job, gestart, beeindigd, uitkomst, http_status AS httpStatus, samenvatting, fout, zegel, eindzegel FROM job_runs ORDER BY id").all() as Parameters<typeof TEST_SEAL.sealed>[0][];
      expect(rows.map((r) => TEST_SEAL.sealed(r))).toEqual([true, false]);
      // The column exists now: a later start (or a row made unsealed later) gets no seal.
      store.sqlite.run("INSERT INTO job_runs (job, gestart, uitkomst) VALUES ('dagrapport', '2026-07-22T06:00:00.000Z', 'ok')");
      store.close();
      const again = openStore(path, NOW, TEST_SEAL);
      const planted = () => again.sqlite.query("SELECT zegel FROM job_runs WHERE job = 'dagrapport'").get() as { zegel: string | null };
      expect(planted().zegel).toBeNull();
      // What the first start would have done:
      sealLegacyRows(again.db, TEST_SEAL, NOW, { runStarts: false, runEnds: true, backups: true, installed: true, verification: true });
      expect(planted().zegel).not.toBeNull();
      again.close();
    } finally {
      cleanup();
    }
  });

  test("the start that adds job_runs.eindzegel and backup_statuses.zegel seals the ends of runs whose start seal holds, and the reports received by then", () => {
    const { dir, cleanup } = tempDir();
    try {
      const path = join(dir, "oud.db");
      const raw = asOlderVersion(path, 2, [...LATER_SEALS, "job_runs DROP COLUMN eindzegel", "backup_statuses DROP COLUMN zegel"]);
      const run = (job: string, gestart: string, beeindigd: string | null, uitkomst: string, seal: string | null) =>
        raw.run("INSERT INTO job_runs (job, gestart, beeindigd, uitkomst, http_status, zegel) VALUES (?, ?, ?, ?, ?, ?)", [job, gestart, beeindigd, uitkomst, beeindigd ? 200 : null, seal]);
      run("weekrapport", "2026-07-20T06:00:01.000Z", "2026-07-20T06:00:09.000Z", "ok", zegel("weekrapport", "2026-07-20T06:00:01.000Z"));
      run("dagrapport", "2026-07-21T06:00:01.000Z", "2026-07-21T06:00:09.000Z", "ok", null); // a writer's row of the old days: no start seal
      run("db-onderhoud", "2026-07-23T11:59:00.000Z", null, "bezig", zegel("db-onderhoud", "2026-07-23T11:59:00.000Z"));
      const backup = (ontvangen: string) =>
        raw.run("INSERT INTO backup_statuses (ontvangen, exit_code, gelukt, bestandsnaam, grootte, foutmelding, bron) VALUES (?, 0, 1, 'a.gz', 1, NULL, 'host-cron')", [ontvangen]);
      backup("2026-07-23T02:30:00.000Z");
      backup("9999-01-01T00:00:00.000Z");
      raw.close();

      const store = openStore(path, NOW, TEST_SEAL);
      const rows = store.sqlite.query("SELECT job, gestart, beeindigd, uitkomst, http_status AS httpStatus, samenvatting, fout, zegel, eindzegel FROM job_runs ORDER BY id").all() as Parameters<typeof TEST_SEAL.sealed>[0][];
      expect(rows.map((r) => [r.job, TEST_SEAL.sealed(r), r.eindzegel !== null])).toEqual([
        ["weekrapport", true, true],
        ["dagrapport", false, false],
        ["db-onderhoud", true, false],
      ]);
      const backups = store.sqlite.query("SELECT ontvangen, exit_code AS exitCode, gelukt, bestandsnaam, grootte, foutmelding, bron, zegel FROM backup_statuses ORDER BY id").all() as (Omit<BackupColumns, "gelukt"> & { zegel: string | null; gelukt: number })[];
      expect(backups.map((b) => TEST_SEAL.backupSealed({ ...b, gelukt: b.gelukt === 1 }))).toEqual([true, false]);
      store.close();
    } finally {
      cleanup();
    }
  });

  test("the start that adds the lease and install-time seals seals the install time recorded by then; a lease left from before holds nothing", () => {
    const { dir, cleanup } = tempDir();
    try {
      const path = join(dir, "oud.db");
      const raw = asOlderVersion(path, 1, LATER_SEALS);
      raw.run("INSERT INTO job_leases (job, pid, instantie, host, pid_ns, run_id, verkregen, vernieuwd, verloopt) VALUES ('audit-verificatie', 1, 'x', 'elders', NULL, 1, ?, ?, '9999-01-01T00:00:00.000Z')", [NOW.toISOString(), NOW.toISOString()]);
      raw.close();
      const store = openStore(path, NOW, TEST_SEAL);
      expect(installedAt(store.db, TEST_SEAL)!.toISOString()).toBe("2026-07-22T12:00:00.000Z");
      expect(liveLeases(store.db, NOW, TEST_SEAL).size).toBe(0);
      store.close();
    } finally {
      cleanup();
    }
  });
});

describe("sealed leases and install time", () => {
  test("a forged lease of 'a process on another host' valid for years makes no crontab call of audit-verificatie a 204: the lease is taken over, the job runs, and the forgery is reported", async () => {
    env = await makeEnv();
    const t = await addTenant(env.db, "Gemeente Delft");
    await fillChain(env.store, t, 5);
    await env.db.run(
      "INSERT INTO job_leases (job, pid, instantie, host, pid_ns, run_id, verkregen, vernieuwd, verloopt) VALUES ('audit-verificatie', 4242, 'x', 'andere-host', NULL, 0, ?, ?, '9999-12-31T00:00:00.000Z')",
      NOW.toISOString(),
      NOW.toISOString(),
    );
    env.setNow(at("2026-07-24T01:00:05.000Z"));
    const v = await call(env.app, "/api/cron/audit-verificatie", scheduled);
    expect(v.status).toBe(200);
    const alarm = env.alarms.raised.find((a) => a.type === "db-integrity");
    expect(alarm?.message).toContain("lease zonder geldig zegel");
    expect(alarm?.context).toMatchObject({ job: "audit-verificatie", reden: "vervalst", host: "andere-host" });
    // A real lease's seal copied onto a lease with a later expiry opens nothing either.
    const real = TEST_SEAL.sealLease({ job: "audit-verificatie", pid: 4242, instantie: "x", host: "andere-host", pidNs: null, runId: 0, verloopt: "2026-07-24T01:01:35.000Z" });
    await env.db.run(
      "INSERT INTO job_leases (job, pid, instantie, host, pid_ns, run_id, verkregen, vernieuwd, verloopt, zegel) VALUES ('audit-verificatie', 4242, 'x', 'andere-host', NULL, 0, ?, ?, '9999-12-31T00:00:00.000Z', ?)",
      NOW.toISOString(),
      NOW.toISOString(),
      real,
    );
    env.setNow(at("2026-07-25T01:00:05.000Z"));
    expect((await call(env.app, "/api/cron/audit-verificatie", scheduled)).status).toBe(200);
    // Sealed as written, it holds: a second call meanwhile is refused.
    const sealed = { job: "audit-verificatie", pid: 4242, instantie: "y", host: "andere-host", pidNs: null, runId: 0, verloopt: "2026-07-25T01:05:00.000Z" };
    await env.db.run(
      "INSERT INTO job_leases (job, pid, instantie, host, pid_ns, run_id, verkregen, vernieuwd, verloopt, zegel) VALUES ('audit-verificatie', 4242, 'y', 'andere-host', NULL, 0, ?, ?, ?, ?) ON CONFLICT (job) DO NOTHING",
      NOW.toISOString(),
      NOW.toISOString(),
      sealed.verloopt,
      TEST_SEAL.sealLease(sealed),
    );
    env.setNow(at("2026-07-25T01:01:00.000Z"));
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(409);
  });

  test("an install time moved ahead (or unsealed) counts as none: taken-controle calls a job that stopped running missed", async () => {
    env = await makeEnv();
    await env.db.run("INSERT INTO service_meta (key, value) VALUES ('geinstalleerd', '2099-01-01T00:00:00.000Z') ON CONFLICT (key) DO UPDATE SET value = excluded.value");
    env.setNow(at("2026-07-24T03:45:05.000Z"));
    const c = await call(env.app, "/api/cron/taken-controle");
    expect(c.status).toBe(409);
    expect(c.json.gemist).toContain("audit-verificatie");
    expect(env.alarms.raised.map((a) => a.type)).toContain("job-missed");
  });

  test("a run's end is sealed over the start this process wrote: a start another row's seal was copied into does not get the end sealed with it", async () => {
    env = await makeEnv();
    env.setNow(at("2026-07-24T01:00:05.000Z"));
    // A real run with a 409 (no tenant has a chain: audit-anker … any job with an afwijking will do).
    expect((await call(env.app, "/api/cron/backup-controle")).status).toBe(409);
    const r1 = await env.db.get<{ job: string; gestart: string; zegel: string }>("SELECT job, gestart, zegel FROM job_runs WHERE job = 'backup-controle'");
    // Another run, started; while it runs the writer copies R1's start (and seal) into its row.
    const holder = newLeaseHolder();
    const started = at("2026-07-24T01:15:00.000Z");
    const lease = await startLeasedRun(env.store, TEST_SEAL, "dagrapport", holder, started, 90_000);
    if (!lease.ok) throw new Error("not taken");
    await env.db.run("UPDATE job_runs SET job = ?, gestart = ?, zegel = ? WHERE id = ?", r1!.job, r1!.gestart, r1!.zegel, lease.runId);
    await writeRunEnd(env.store, TEST_SEAL, { runId: lease.runId, job: "dagrapport", gestart: started.toISOString() }, at("2026-07-24T01:15:01.000Z"), { uitkomst: "ok", httpStatus: 200 });
    env.setNow(at("2026-07-24T01:45:05.000Z"));
    const c = await call(env.app, "/api/cron/taken-controle");
    const laatste = c.json.taken.find((r: { job: string }) => r.job === "backup-controle").laatsteRun;
    expect(laatste).toMatchObject({ gestart: r1!.gestart, uitkomst: "afwijking" });
    expect(c.json.vervalst).toContain("backup-controle");
  });
});

describe("sealed verification results", () => {
  const METRICS_SECRET = "metrics-secret-0123456789abcdef0123456789abcdef";
  const counts = (now: Date) => (env.store.kind === "pg" ? verificationCountsPg(env.store.db, now, TEST_SEAL, env.config) : verificationCounts(env.store.db, now, TEST_SEAL, env.config));
  const stateRow = async (t: number) =>
    (await env.db.get<{ tenant_id: number; gecontroleerd: string; intact: number | boolean; aantal_entries: number; fout_seq: number | null; fout_entry_id: number | null; fout_reden: string | null; zegel: string | null }>(
      "SELECT * FROM audit_verification_state WHERE tenant_id = ?",
      t,
    ))!;

  test("an older sealed result put back over the newest run's (a replay) counts as no check: the reports do not call the broken chain intact", async () => {
    env = await makeEnv();
    const t = await addTenant(env.db, "Gemeente Delft");
    await fillChain(env.store, t, 10);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    env.setNow(at("2026-07-24T01:00:05.000Z"));
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
    const intact = await stateRow(t);
    await env.db.run("UPDATE audit_entries SET actor = 'iemand-anders' WHERE tenant_id = ? AND seq = 4", t);
    env.setNow(at("2026-07-25T01:00:05.000Z"));
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(409);
    // The writer puts last night's sealed "intact" back.
    await env.db.run(
      "UPDATE audit_verification_state SET gecontroleerd = ?, intact = ?, aantal_entries = ?, fout_seq = NULL, fout_entry_id = NULL, fout_reden = NULL, zegel = ? WHERE tenant_id = ?",
      intact.gecontroleerd,
      true,
      intact.aantal_entries,
      intact.zegel,
      t,
    );
    expect(await counts(at("2026-07-25T06:00:00.000Z"))).toMatchObject({ gecontroleerd: 0, nietGecontroleerd: 1, aantalGebroken: 0 });
    const since = env.store.kind === "pg" ? await verificationSincePg(env.store.db, TEST_SEAL, at("2026-07-25T06:00:00.000Z"), env.config) : verificationSinceIn(env.store.db, TEST_SEAL, at("2026-07-25T06:00:00.000Z"), env.config);
    expect(since).toBe("2026-07-25T01:00:05.000Z");
    const row = { tenantId: t, gecontroleerd: intact.gecontroleerd, intact: true, aantalEntries: intact.aantal_entries, foutSeq: null, foutEntryId: null, foutReden: null, zegel: intact.zegel };
    expect(weekStatsOf(t, [], row, new Map(), TEST_SEAL, at("2026-07-25T06:00:00.000Z"), since).keten.staat).toBe("nooit");
  });

  for (const how of ["deletes tonight's run", "floods 20 unsealed rows"] as const) {
    test(`a replayed sealed "intact" result counts as no check when the writer also ${how}: the run's start is witnessed beside the anchor file`, async () => {
      env = await makeEnv({ METRICS_SECRET });
      const t = await addTenant(env.db, "Gemeente Delft");
      await fillChain(env.store, t, 10);
      expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
      env.setNow(at("2026-07-24T01:00:05.000Z"));
      expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
      const intact = await stateRow(t);
      await env.db.run("UPDATE audit_entries SET actor = 'iemand-anders' WHERE tenant_id = ? AND seq = 4", t);
      env.setNow(at("2026-07-25T01:00:05.000Z"));
      expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(409);
      expect(readFileSync(verificationWitnessFile(env.config), "utf8")).toBe("2026-07-25T01:00:05.000Z\n");
      await env.db.run(
        "UPDATE audit_verification_state SET gecontroleerd = ?, intact = ?, aantal_entries = ?, fout_seq = NULL, fout_entry_id = NULL, fout_reden = NULL, zegel = ? WHERE tenant_id = ?",
        intact.gecontroleerd,
        true,
        intact.aantal_entries,
        intact.zegel,
        t,
      );
      if (how === "deletes tonight's run") await env.db.run("DELETE FROM job_runs WHERE job = 'audit-verificatie' AND gestart = '2026-07-25T01:00:05.000Z'");
      else {
        for (let i = 0; i < 20; i++) {
          await env.db.run(
            "INSERT INTO job_runs (job, gestart, beeindigd, uitkomst, http_status) VALUES ('audit-verificatie', ?, ?, 'ok', 200)",
            `2026-07-25T01:3${i % 10}:0${Math.floor(i / 10)}.000Z`,
            "2026-07-25T01:40:00.000Z",
          );
        }
      }
      const notChecked = { gecontroleerd: 0, nietGecontroleerd: 1, aantalGebroken: 0 };
      expect(await counts(at("2026-07-25T06:00:00.000Z"))).toMatchObject(notChecked);
      // /metrics, through the same rule.
      const m = await call(env.app, "/metrics", { method: "GET", token: METRICS_SECRET });
      expect(m.text).toMatch(/^nachtwacht_audit_tenants_checked 0$/m);
      expect(m.text).toMatch(/^nachtwacht_audit_tenants_broken 0$/m);
      // Without the witness file (an installation before it, or the file lost) the rows alone decide: the flood still leaves no run to count from.
      rmSync(verificationWitnessFile(env.config));
      const since = env.store.kind === "pg" ? await verificationSincePg(env.store.db, TEST_SEAL, at("2026-07-25T06:00:00.000Z"), env.config) : verificationSinceIn(env.store.db, TEST_SEAL, at("2026-07-25T06:00:00.000Z"), env.config);
      expect(since).toBe(how === "deletes tonight's run" ? "2026-07-24T01:00:05.000Z" : false);
      if (how === "floods 20 unsealed rows") expect(await counts(at("2026-07-25T06:00:00.000Z"))).toMatchObject(notChecked);
    });
  }

  test("a broken chain's result changed to intact counts as no check (daily report, /metrics, weekly report); one dated ahead too, and the next run overwrites it", async () => {
    env = await makeEnv();
    const t = await addTenant(env.db, "Gemeente Delft");
    await fillChain(env.store, t, 10);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    await env.db.run("UPDATE audit_entries SET actor = 'iemand-anders' WHERE tenant_id = ? AND seq = 4", t);
    env.setNow(at("2026-07-24T01:00:05.000Z"));
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(409);
    expect(await counts(at("2026-07-24T06:00:00.000Z"))).toMatchObject({ gecontroleerd: 1, aantalGebroken: 1 });

    // The writer says the chain is fine.
    await env.db.run("UPDATE audit_verification_state SET intact = ?, fout_seq = NULL, fout_entry_id = NULL, fout_reden = NULL WHERE tenant_id = ?", true, t);
    expect(await counts(at("2026-07-24T06:00:00.000Z"))).toMatchObject({ gecontroleerd: 0, nietGecontroleerd: 1, aantalGebroken: 0 });
    const r = await stateRow(t);
    const row = { tenantId: t, gecontroleerd: r.gecontroleerd, intact: Boolean(r.intact), aantalEntries: r.aantal_entries, foutSeq: r.fout_seq, foutEntryId: r.fout_entry_id, foutReden: r.fout_reden, zegel: r.zegel };
    expect(weekStatsOf(t, [], row, new Map(), TEST_SEAL, at("2026-07-24T06:00:00.000Z"), null).keten.staat).toBe("nooit");

    // Dated ahead, so that no run would overwrite it: overwritten by the next run all the same.
    await env.db.run("UPDATE audit_verification_state SET gecontroleerd = '9999-01-01T00:00:00.000Z' WHERE tenant_id = ?", t);
    env.setNow(at("2026-07-25T01:00:05.000Z"));
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(409);
    expect(await stateRow(t)).toMatchObject({ gecontroleerd: "2026-07-25T01:00:05.000Z", fout_seq: 4 });
    expect(await counts(at("2026-07-25T06:00:00.000Z"))).toMatchObject({ gecontroleerd: 1, aantalGebroken: 1 });
  });
});

describe("the rows of the past are sealed once per installation", () => {
  test("a first start that died after its migrations committed and before it sealed: the next start (no marker yet) seals the rows of the past, but never re-seals a sealed row a writer changed", () => {
    const { dir, cleanup } = tempDir();
    try {
      const path = join(dir, "nachtwacht.db");
      const marker = pastSealedMarker({ auditAnkerBestand: join(dir, "state", "audit-ankers.jsonl") });
      const raw = asOlderVersion(path, 3, [...LATER_SEALS, "job_runs DROP COLUMN eindzegel", "backup_statuses DROP COLUMN zegel", "job_runs DROP COLUMN zegel"]);
      raw.run("INSERT INTO job_runs (job, gestart, beeindigd, uitkomst, http_status) VALUES ('weekrapport', '2026-07-20T06:00:01.000Z', '2026-07-20T06:00:09.000Z', 'ok', 200)");
      raw.run("INSERT INTO backup_statuses (ontvangen, exit_code, gelukt, bestandsnaam, grootte, foutmelding, bron) VALUES ('2026-07-23T02:30:00.000Z', 0, 1, 'a.gz', 1, NULL, 'host-cron')");
      // The crash: this version's migrations applied and committed, the sealing never ran.
      migrate(drizzle(raw));
      raw.close();

      const store = openStore(path, NOW, TEST_SEAL, marker);
      const run = store.sqlite.query("SELECT job, gestart, beeindigd, uitkomst, http_status AS httpStatus, samenvatting, fout, zegel, eindzegel FROM job_runs").get() as Parameters<typeof TEST_SEAL.sealed>[0] & { eindzegel: string | null };
      expect(TEST_SEAL.sealed(run)).toBe(true);
      expect(run.eindzegel).not.toBeNull();
      const b = store.sqlite.query("SELECT ontvangen, exit_code AS exitCode, gelukt, bestandsnaam, grootte, foutmelding, bron, zegel FROM backup_statuses").get() as Omit<BackupColumns, "gelukt"> & { gelukt: number; zegel: string | null };
      expect(TEST_SEAL.backupSealed({ ...b, gelukt: b.gelukt === 1 })).toBe(true);
      expect(installedAt(store.db, TEST_SEAL)!.toISOString()).toBe("2026-07-22T12:00:00.000Z");
      expect(existsSync(marker)).toBe(true);
      // A writer then moves the sealed install time; with the marker removed (as after a
      // restore), the next start seals only unsealed rows: the changed one stays invalid.
      store.sqlite.run("UPDATE service_meta SET value = '2026-07-01T00:00:00.000Z' WHERE key = 'geinstalleerd'");
      store.close();
      rmSync(marker);
      const again = openStore(path, NOW, TEST_SEAL, marker);
      expect(installedAt(again.db, TEST_SEAL)).toBeNull();
      again.close();
    } finally {
      cleanup();
    }
  });

  test("zegels-sinds: written at the first start with its moment, owner-only whatever the umask, no temporary file left; an existing marker is never overwritten", () => {
    const { dir, cleanup } = tempDir();
    try {
      const path = join(dir, "nachtwacht.db");
      const marker = pastSealedMarker({ auditAnkerBestand: join(dir, "state", "audit-ankers.jsonl") });
      const before = process.umask(0);
      try {
        openStore(path, NOW, TEST_SEAL, marker).close();
      } finally {
        process.umask(before);
      }
      expect(readFileSync(marker, "utf8")).toBe(`${NOW.toISOString()}\n`);
      expect(statSync(marker).mode & 0o777).toBe(0o600);
      expect(readdirSync(dirname(marker))).toEqual(["zegels-sinds"]);
      // A later start (the marker there) leaves it as it is, as does one that finds one written by hand.
      openStore(path, at("2026-08-01T00:00:00.000Z"), TEST_SEAL, marker).close();
      expect(readFileSync(marker, "utf8")).toBe(`${NOW.toISOString()}\n`);
      expect(readdirSync(dirname(marker))).toEqual(["zegels-sinds"]);
    } finally {
      cleanup();
    }
  });

  test("the install time is marked at the installation's first start only: one a writer deleted stays gone (every fire time expected), not moved to the next start", () => {
    const { dir, cleanup } = tempDir();
    try {
      const path = join(dir, "nachtwacht.db");
      const marker = pastSealedMarker({ auditAnkerBestand: join(dir, "state", "audit-ankers.jsonl") });
      const first = openStore(path, NOW, TEST_SEAL, marker);
      expect(installedAt(first.db, TEST_SEAL)!.toISOString()).toBe(NOW.toISOString());
      first.sqlite.run("DELETE FROM service_meta WHERE key = 'geinstalleerd'");
      first.close();
      const later = openStore(path, at("2026-08-01T00:00:00.000Z"), TEST_SEAL, marker);
      expect(installedAt(later.db, TEST_SEAL)).toBeNull();
      later.close();
    } finally {
      cleanup();
    }
  });

  test("a seal column dropped with its migration record after the marker was written is added again, but seals nothing: a forged good backup stays unsealed", () => {
    const { dir, cleanup } = tempDir();
    try {
      const path = join(dir, "nachtwacht.db");
      const marker = pastSealedMarker({ auditAnkerBestand: join(dir, "state", "audit-ankers.jsonl") });
      openStore(path, NOW, TEST_SEAL, marker).close();
      expect(existsSync(marker)).toBe(true);
      expect(statSync(marker).mode & 0o777).toBe(0o600);
      // The writer: a forged good backup, then the column and its migration record dropped, hoping the next start seals it.
      const raw = new Database(path);
      raw.run("INSERT INTO backup_statuses (ontvangen, exit_code, gelukt, bestandsnaam, grootte, foutmelding, bron) VALUES ('2026-07-23T11:00:00.000Z', 0, 1, 'x.gz', 1, NULL, 'host-cron')");
      for (const c of AFTER_SEALS) raw.run(c);
      for (const c of [...LATER_SEALS, "job_runs DROP COLUMN eindzegel", "backup_statuses DROP COLUMN zegel"]) raw.run(`ALTER TABLE ${c}`);
      raw.run(`DELETE FROM __drizzle_migrations WHERE created_at IN (SELECT created_at FROM __drizzle_migrations ORDER BY created_at DESC LIMIT ${2 + AFTER_SEALS.length})`);
      raw.close();
      const store = openStore(path, NOW, TEST_SEAL, marker);
      const b = store.sqlite.query("SELECT ontvangen, exit_code AS exitCode, gelukt, bestandsnaam, grootte, foutmelding, bron, zegel FROM backup_statuses").get() as Omit<BackupColumns, "gelukt"> & { gelukt: number; zegel: string | null };
      expect(b.zegel).toBeNull();
      expect(TEST_SEAL.backupSealed({ ...b, gelukt: b.gelukt === 1 })).toBe(false);
      store.close();
      // Without the marker (an installation's first start of this version) the same is sealed: what the marker prevents.
      rmSync(marker);
      const raw2 = new Database(path);
      for (const c of AFTER_SEALS) raw2.run(c);
      for (const c of [...LATER_SEALS, "job_runs DROP COLUMN eindzegel", "backup_statuses DROP COLUMN zegel"]) raw2.run(`ALTER TABLE ${c}`);
      raw2.run(`DELETE FROM __drizzle_migrations WHERE created_at IN (SELECT created_at FROM __drizzle_migrations ORDER BY created_at DESC LIMIT ${2 + AFTER_SEALS.length})`);
      raw2.close();
      const first = openStore(path, NOW, TEST_SEAL, marker);
      expect((first.sqlite.query("SELECT zegel FROM backup_statuses").get() as { zegel: string | null }).zegel).not.toBeNull();
      first.close();
    } finally {
      cleanup();
    }
  });
});

describe("a key change (AUDIT_ANKER_SLEUTEL rotated, the old key kept in AUDIT_VERTROUWDE_SLEUTELS)", () => {
  const counts = (now: Date) => {
    const seal = rowSealOf(env.config);
    return env.store.kind === "pg" ? verificationCountsPg(env.store.db, now, seal, env.config) : verificationCounts(env.store.db, now, seal, env.config);
  };
  /** env's configuration with `signerKey` as the anchor key and `trusted` as the other trusted keys. */
  const rotated = (signerKey: string, trusted: string[]): Config => ({ ...env.config, auditAnkerSleutel: signerKey, auditVertrouwdeSleutels: trusted });
  /** A finished 'ok' run of audit-verificatie that started at `gestart`, sealed with the old (test) key, as the writer who holds it forges one. */
  const forgeRun = (gestart: string) => {
    const run = { job: "audit-verificatie", gestart, beeindigd: new Date(new Date(gestart).getTime() + 1000).toISOString(), uitkomst: "ok", httpStatus: 200 };
    return env.db.run(
      "INSERT INTO job_runs (job, gestart, beeindigd, uitkomst, http_status, zegel, eindzegel) VALUES (?, ?, ?, 'ok', 200, ?, ?)",
      run.job,
      run.gestart,
      run.beeindigd,
      zegel(run.job, gestart),
      eindzegel(run),
    );
  };

  test("a run sealed with the rotated-out (leaked) key skips nothing: tonight's audit-verificatie runs and finds the broken chain", async () => {
    const nieuw = generateKeyPair("nachtwacht.test/nieuw");
    env = await makeEnv({ AUDIT_ANKER_SLEUTEL: nieuw.signerKey, AUDIT_VERTROUWDE_SLEUTELS: TEST_VERIFIER_KEY });
    const t = await addTenant(env.db, "Gemeente Delft");
    await fillChain(env.store, t, 20);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    await env.db.run("UPDATE audit_entries SET actor = 'iemand-anders' WHERE tenant_id = ? AND seq = 12", t);
    await forgeRun("2026-07-24T01:00:01.000Z");
    env.setNow(at("2026-07-24T01:00:05.000Z"));
    const v = await call(env.app, "/api/cron/audit-verificatie", scheduled);
    expect(v.status).toBe(409);
    expect(v.json.resultaten.find((r: { tenantId: number }) => r.tenantId === t).fout.seq).toBe(12);
    expect(env.alarms.raised.map((a) => a.type)).toContain("audit-chain-broken");
  });

  test("the first start with the new key re-seals the history sealed with the old one: nothing reads as forged, a job done before the rotation stays done", async () => {
    env = await makeEnv();
    await restartService(env, env.config, NOW);
    expect(readFileSync(sealKeyMarker(env.config), "utf8")).toBe(`${TEST_VERIFIER_KEY}\n`);
    const t = await addTenant(env.db, "Gemeente Delft");
    await fillChain(env.store, t, 20);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    expect((await call(env.app, "/api/cron/backup-status", report({ exitCode: 0, bestandsnaam: "a.gz", grootte: 10 }))).status).toBe(200);
    env.setNow(at("2026-07-24T01:00:05.000Z"));
    expect((await call(env.app, "/api/cron/audit-verificatie", scheduled)).status).toBe(200);

    const nieuw = generateKeyPair("nachtwacht.test/nieuw");
    await restartService(env, rotated(nieuw.signerKey, [TEST_VERIFIER_KEY]), at("2026-07-24T01:10:00.000Z"));
    expect(readFileSync(sealKeyMarker(env.config), "utf8")).toBe(`${nieuw.verifierKey}\n`);
    env.setNow(at("2026-07-24T01:10:00.000Z"));
    // The run before the rotation still did tonight's audit-verificatie.
    expect((await call(env.app, "/api/cron/audit-verificatie", scheduled)).status).toBe(204);
    expect(await counts(at("2026-07-24T06:00:00.000Z"))).toMatchObject({ gecontroleerd: 1, aantalGebroken: 0 });
    expect((await call(env.app, "/api/cron/backup-controle")).json).toMatchObject({ ok: true, vervalst: 0, laatsteBackup: { bestandsnaam: "a.gz" } });
    env.setNow(at("2026-07-24T01:45:05.000Z"));
    const c = await call(env.app, "/api/cron/taken-controle", scheduled);
    expect(c.json.vervalst).toEqual([]);
    expect(c.json.taken.find((r: { job: string }) => r.job === "audit-verificatie").laatsteRun.gestart).toBe("2026-07-24T01:00:05.000Z");
    expect(env.alarms.raised.filter((a) => a.type === "db-integrity")).toEqual([]);
    // Every row now carries the new key's seal, not the old one's.
    const rows = await env.db.all<{ zegel: string }>("SELECT zegel FROM job_runs UNION ALL SELECT eindzegel FROM job_runs UNION ALL SELECT zegel FROM backup_statuses UNION ALL SELECT zegel FROM audit_verification_state UNION ALL SELECT zegel FROM service_meta WHERE key = 'geinstalleerd'");
    expect(rows.length).toBeGreaterThan(4);
    for (const r of rows) expect(r.zegel).toStartWith("\u2014 nachtwacht.test/nieuw ");
  });

  test("a run forged with the old key after the rotation's start is never re-sealed: not by a later restart, nor by the next key change", async () => {
    env = await makeEnv();
    await restartService(env, env.config, NOW);
    const t = await addTenant(env.db, "Gemeente Delft");
    await fillChain(env.store, t, 20);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    const nieuw = generateKeyPair("nachtwacht.test/nieuw");
    await restartService(env, rotated(nieuw.signerKey, [TEST_VERIFIER_KEY]), NOW);

    // The writer holding the old key forges tonight's run, and the service restarts (an update, a reboot).
    await env.db.run("UPDATE audit_entries SET actor = 'iemand-anders' WHERE tenant_id = ? AND seq = 12", t);
    await forgeRun("2026-07-24T01:00:01.000Z");
    await restartService(env, env.config, at("2026-07-24T01:00:02.000Z"));
    env.setNow(at("2026-07-24T01:00:05.000Z"));
    const v = await call(env.app, "/api/cron/audit-verificatie", scheduled);
    expect(v.status).toBe(409);
    expect(v.json.resultaten.find((r: { tenantId: number }) => r.tenantId === t).fout.seq).toBe(12);

    // The next key change re-seals the rows of the key before it (nieuw's), not the first key's forgery.
    await forgeRun("2026-07-25T01:00:01.000Z");
    const derde = generateKeyPair("nachtwacht.test/derde");
    await restartService(env, rotated(derde.signerKey, [TEST_VERIFIER_KEY, nieuw.verifierKey]), at("2026-07-25T01:00:02.000Z"));
    env.setNow(at("2026-07-25T01:00:05.000Z"));
    expect((await call(env.app, "/api/cron/audit-verificatie", scheduled)).status).toBe(409);
    // Last night's real run (sealed with nieuw) was re-sealed: it counts as the one before tonight's.
    const forged = await env.db.all<{ gestart: string; zegel: string }>("SELECT gestart, zegel FROM job_runs WHERE job = 'audit-verificatie' AND gestart LIKE '%:01.000Z' ORDER BY gestart");
    expect(forged.map((r) => r.zegel.split(" ")[1])).toEqual(["nachtwacht.test/sleutel", "nachtwacht.test/sleutel"]);
    const real = await env.db.get<{ zegel: string }>("SELECT zegel FROM job_runs WHERE job = 'audit-verificatie' AND gestart = '2026-07-24T01:00:05.000Z'");
    expect(real!.zegel).toStartWith("\u2014 nachtwacht.test/derde ");
  });

  test("a trusted old key written with an upper-case key ID is the same key: the rotation re-seals the history as with its canonical spelling", async () => {
    env = await makeEnv();
    await restartService(env, env.config, NOW);
    await forgeRun("2026-07-23T01:00:05.000Z");
    const [name, id, ...rest] = TEST_VERIFIER_KEY.split("+");
    const upper = [name, id!.toUpperCase(), ...rest].join("+");
    expect(upper).not.toBe(TEST_VERIFIER_KEY);
    const nieuw = generateKeyPair("nachtwacht.test/nieuw");
    await restartService(env, rotated(nieuw.signerKey, [upper]), NOW);
    expect(readFileSync(sealKeyMarker(env.config), "utf8")).toBe(`${nieuw.verifierKey}\n`);
    const row = await env.db.get<{ zegel: string; eindzegel: string }>("SELECT zegel, eindzegel FROM job_runs WHERE gestart = '2026-07-23T01:00:05.000Z'");
    expect(row!.zegel).toStartWith("\u2014 nachtwacht.test/nieuw ");
    expect(row!.eindzegel).toStartWith("\u2014 nachtwacht.test/nieuw ");
  });

  test("a start with the key before (a second instance not switched, an environment file put back) is refused: the marker keeps naming the new key, and the next start with it does not re-seal the old key's forgery", async () => {
    env = await makeEnv();
    await restartService(env, env.config, NOW);
    const old = env.config;
    const nieuw = generateKeyPair("nachtwacht.test/nieuw");
    const current = rotated(nieuw.signerKey, [TEST_VERIFIER_KEY]);
    await restartService(env, current, NOW);
    const marker = sealKeyMarker(env.config);
    expect(readFileSync(marker, "utf8")).toBe(`${nieuw.verifierKey}\n`);
    // The thief of the old key forges tonight's run after the rotation.
    await forgeRun("2026-07-24T01:00:01.000Z");

    const refused = await restartService(env, old, at("2026-07-24T01:00:02.000Z")).then(
      () => null,
      (e: unknown) => e,
    );
    expect(refused).toBeInstanceOf(UntrustedSealKey);
    const message = startFailureMessage(refused, old);
    expect(message).toBe((refused as Error).message);
    // Both keys named, and the one remedy that cannot re-seal the switched rows with the old key.
    expect(message).toStartWith(
      `${marker} zegt dat de rijen van deze installatie zijn verzegeld met ${nieuw.verifierKey}; deze start heeft AUDIT_ANKER_SLEUTEL ${TEST_VERIFIER_KEY}, en ${nieuw.verifierKey} staat niet in AUDIT_VERTROUWDE_SLEUTELS: geef deze instantie de AUDIT_ANKER_SLEUTEL die zegelsleutel noemt`,
    );
    expect(message).toContain('docs/operations.md, "A start refused over zegelsleutel"');
    expect(message).toContain("AUDIT_VERTROUWDE_SLEUTELS");
    expect(message).not.toContain("\n");
    expect(readFileSync(marker, "utf8")).toBe(`${nieuw.verifierKey}\n`);

    await restartService(env, current, at("2026-07-24T01:00:03.000Z"));
    const forged = await env.db.get<{ zegel: string }>("SELECT zegel FROM job_runs WHERE gestart = '2026-07-24T01:00:01.000Z'");
    expect(forged!.zegel).toStartWith("\u2014 nachtwacht.test/sleutel ");
    expect(rowSealOf(current).startSealed({ job: "audit-verificatie", gestart: "2026-07-24T01:00:01.000Z", zegel: forged!.zegel })).toBe(false);
  });

  test("the start with the key before that trusts the new one (an operator's choice) re-seals the new key's rows with its own, and names its key", async () => {
    env = await makeEnv();
    await restartService(env, env.config, NOW);
    const nieuw = generateKeyPair("nachtwacht.test/nieuw");
    await restartService(env, rotated(nieuw.signerKey, [TEST_VERIFIER_KEY]), NOW);
    await restartService(env, rotated(TEST_SIGNING_KEY, [nieuw.verifierKey]), NOW);
    expect(readFileSync(sealKeyMarker(env.config), "utf8")).toBe(`${TEST_VERIFIER_KEY}\n`);
    const row = await env.db.get<{ zegel: string }>("SELECT zegel FROM service_meta WHERE key = 'geinstalleerd'");
    expect(row!.zegel).toStartWith("\u2014 nachtwacht.test/sleutel ");
  });

  for (const [what, text] of [
    ["empty", ""],
    ["no key", "niet-een-sleutel\n"],
  ] as const) {
    test(`a marker holding ${what} refuses the start and is left as it is`, async () => {
      env = await makeEnv();
      await restartService(env, env.config, NOW);
      const marker = sealKeyMarker(env.config);
      writeFileSync(marker, text);
      const refused = await restartService(env, env.config, NOW).then(
        () => null,
        (e: unknown) => e,
      );
      expect(refused).toBeInstanceOf(UntrustedSealKey);
      expect((refused as Error).message).toStartWith(`${marker} hoort de publieke sleutel te noemen waarmee de rijen van deze installatie zijn verzegeld, maar is leeg of bevat geen geldige publieke sleutel`);
      expect(readFileSync(marker, "utf8")).toBe(text);
      // Written back by hand, the start goes on.
      writeFileSync(marker, `${TEST_VERIFIER_KEY}\n`);
      await restartService(env, env.config, NOW);
    });
  }
});

describe("a sealed text is the text the store keeps", () => {
  test("a run's summary cut inside a character, and a backup report with half a character, are sealed as stored: they count, on either store", async () => {
    env = await makeEnv();
    const holder = newLeaseHolder();
    const started = at("2026-07-23T12:00:00.000Z");
    const lease = await startLeasedRun(env.store, TEST_SEAL, "dagrapport", holder, started, 90_000);
    if (!lease.ok) throw new Error("not taken");
    // The summary's JSON is 4001 units with a character's first half at the cut (4000).
    const summary = "x".repeat(3997) + "\u{1F3DB}";
    await writeRunEnd(env.store, TEST_SEAL, { runId: lease.runId, job: "dagrapport", gestart: started.toISOString() }, at("2026-07-23T12:00:01.000Z"), { uitkomst: "ok", httpStatus: 200, samenvatting: summary, fout: "half \uD83D" });
    const r = (await env.db.get<{ job: string; gestart: string; beeindigd: string; uitkomst: string; http_status: number; samenvatting: string; fout: string; zegel: string; eindzegel: string }>(
      "SELECT * FROM job_runs WHERE id = ?",
      lease.runId,
    ))!;
    expect(r.samenvatting.endsWith("x…")).toBe(true);
    expect(r.fout).toBe("half \uFFFD");
    expect(TEST_SEAL.sealed({ ...r, httpStatus: r.http_status })).toBe(true);

    const report = { body: JSON.stringify({ exitCode: 2, foutmelding: "schijf \uD83D vol" }), headers: { "content-type": "application/json" } };
    expect((await call(env.app, "/api/cron/backup-status", report)).status).toBe(200);
    const c = await call(env.app, "/api/cron/backup-controle");
    expect(c.json).toMatchObject({ reden: "mislukt", vervalst: 0, laatsteBackup: { foutmelding: "schijf \uFFFD vol" } });
  });
});

/** A run as the job wrapper records it (sealed), or as a database writer would (`forged`: no seals). */
async function addRun(job: string, gestart: string, forged = false) {
  const r = { job, gestart, beeindigd: new Date(Date.parse(gestart) + 1000).toISOString(), uitkomst: "ok", httpStatus: 200 };
  await env.db.run(
    "INSERT INTO job_runs (job, gestart, beeindigd, uitkomst, http_status, zegel, eindzegel) VALUES (?, ?, ?, 'ok', 200, ?, ?)",
    r.job,
    r.gestart,
    r.beeindigd,
    forged ? null : zegel(job, gestart),
    forged ? null : eindzegel(r),
  );
}

describe("windows of rows read", () => {
  test("twenty forged rows between a fire time and the real run do not make the daily report call the job overdue (its newest sealed start decides)", async () => {
    env = await makeEnv();
    const now = at("2026-07-24T06:00:00.000Z");
    for (let i = 0; i < 25; i++) await addRun("audit-verificatie", new Date(Date.parse("2026-07-24T01:00:01.000Z") + i * 1000).toISOString(), true);
    await addRun("audit-verificatie", "2026-07-24T01:05:00.000Z");
    const jobs = env.store.kind === "pg" ? await scheduledJobRunsPg(env.store.db, now, env.config) : scheduledJobRuns(env.store.db, now, env.config);
    expect(jobs.find((j) => j.job === "audit-verificatie")!.status).toBe("ok");
  });

  test("a scheduled call reads at most 20 rows for the run that did its time: with more forged ones first, it runs the job again rather than check them all", async () => {
    env = await makeEnv();
    for (let i = 0; i < 20; i++) await addRun("backup-controle", new Date(Date.parse("2026-07-24T02:00:01.000Z") + i * 1000).toISOString(), true);
    await addRun("backup-controle", "2026-07-24T02:01:00.000Z");
    env.setNow(at("2026-07-24T02:10:00.000Z"));
    expect((await call(env.app, "/api/cron/backup-controle", scheduled)).status).toBe(409);
    // With the real run among the first twenty, the call is skipped.
    await env.db.run("DELETE FROM job_runs WHERE zegel IS NULL AND gestart > '2026-07-24T02:00:10.000Z'");
    expect((await call(env.app, "/api/cron/backup-controle", scheduled)).status).toBe(204);
  });
});

