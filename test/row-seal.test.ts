// Sealed rows (src/row-seal.ts): a database writer who forges or alters job_runs rows can
// neither make the crontab's call of a job a "skipped" 204 nor make taken-controle call
// the job fine; one who forges or alters backup_statuses rows cannot make backup-controle
// call the backups fine. On both stores (NACHTWACHT_TEST_DB=pg).
import { afterEach, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { join } from "node:path";
import { openStore } from "../src/db.ts";
import { rowSeal, sealLegacyRows, type BackupColumns } from "../src/row-seal.ts";
import { auditKeys } from "../src/audit/keys.ts";
import { generateKeyPair } from "../src/audit/note.ts";
import { backupZegel, call, eindzegel, NOW, tempDir, TEST_SEAL, zegel } from "./helpers.ts";
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

  test("the seal opens for exactly its job and start, under any trusted key; a key no longer trusted seals nothing", () => {
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
    // After a key change: the old key among the trusted ones still opens the old runs.
    const old = generateKeyPair("nachtwacht.test/oud");
    const oldSeal = rowSeal(auditKeys({ auditAnkerSleutel: old.signerKey, auditVertrouwdeSleutels: [] }));
    const row = { ...end, zegel: oldSeal.seal(end), eindzegel: oldSeal.sealEnd(end) };
    const next = generateKeyPair("nachtwacht.test/nieuw");
    expect(rowSeal(auditKeys({ auditAnkerSleutel: next.signerKey, auditVertrouwdeSleutels: [old.verifierKey] })).sealed(row)).toBe(true);
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
  const row: BackupColumns = { exitCode: 0, gelukt: true, bestandsnaam: "nachtwacht.db.gz", grootte: 183500800, foutmelding: "", bron: "host-cron", ...b };
  await env.db.run(
    "INSERT INTO backup_statuses (ontvangen, exit_code, gelukt, bestandsnaam, grootte, foutmelding, bron, zegel) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
    row.ontvangen,
    row.exitCode,
    row.gelukt,
    row.bestandsnaam,
    row.grootte,
    row.foutmelding,
    row.bron,
    zegel,
  );
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
    const again = await call(env.app, "/api/cron/backup-controle");
    expect(again.json).toMatchObject({ ok: false, reden: "vervalst", vervalst: 3, laatsteBackup: { bestandsnaam: "a.gz" } });
    expect(env.alarms.raised.filter((a) => a.type === "db-integrity")).toHaveLength(2);
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

/** The database as an older version left it: its last `migrations` undone and these columns dropped. */
function asOlderVersion(path: string, migrations: number, drop: readonly string[]): Database {
  openStore(path, NOW).close();
  const raw = new Database(path);
  for (const c of drop) raw.run(`ALTER TABLE ${c}`);
  raw.run(`DELETE FROM __drizzle_migrations WHERE created_at IN (SELECT created_at FROM __drizzle_migrations ORDER BY created_at DESC LIMIT ${migrations})`);
  return raw;
}

describe("the rows recorded before they were sealed", () => {
  // On PostgreSQL: test/pg-chain.test.ts ("the migrations that add the seal columns …").
  test("the start that adds job_runs.zegel seals their starts and ends, except a row dated after that start; a later start seals nothing", () => {
    const { dir, cleanup } = tempDir();
    try {
      const path = join(dir, "oud.db");
      const raw = asOlderVersion(path, 2, ["job_runs DROP COLUMN zegel", "job_runs DROP COLUMN eindzegel", "backup_statuses DROP COLUMN zegel"]);
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
      sealLegacyRows(again.db, TEST_SEAL, NOW, { runStarts: false, runEnds: true, backups: true });
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
      const raw = asOlderVersion(path, 1, ["job_runs DROP COLUMN eindzegel", "backup_statuses DROP COLUMN zegel"]);
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
});
