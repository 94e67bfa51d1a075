import { describe, expect, test } from "bun:test";
import { runBackupControle } from "../src/jobs/backup-controle.ts";
import { call, insertBackupRow, NOW } from "./helpers.ts";
import { makeEnv, type Env } from "./dialect.ts";

const HOUR = 3600_000;

/** A report as backup-status stores it: sealed (src/row-seal.ts). */
function addBackup(env: Env, hoursAgo: number, exitCode = 0, extra: { foutmelding?: string } = {}) {
  return insertBackupRow(env.db, {
    ontvangen: new Date(NOW.getTime() - hoursAgo * HOUR).toISOString(),
    exitCode,
    gelukt: exitCode === 0,
    bestandsnaam: "db.tar.gz",
    grootte: 1234,
    foutmelding: extra.foutmelding ?? "",
    bron: "host-cron",
  });
}

describe("backup-controle", () => {
  test("no backup ever reported → 409 geen-backup and a backup-missing alarm", async () => {
    const env = await makeEnv();
    try {
      const res = await call(env.app, "/api/cron/backup-controle");
      expect(res.status).toBe(409);
      expect(res.json).toEqual({ ok: false, reden: "geen-backup", laatsteBackup: null, leeftijdUren: null, maxUren: 26, ontbreekt: null, vervalst: 0, toekomst: null });
      expect(env.alarms.raised).toHaveLength(1);
      expect(env.alarms.raised[0]!.type).toBe("backup-missing");
      expect(env.alarms.raised[0]!.context?.reden).toBe("geen-backup");
    } finally {
      await env.cleanup();
    }
  });

  test("newest backup failed → 409 mislukt, even when an older one succeeded", async () => {
    const env = await makeEnv();
    try {
      await addBackup(env, 5, 0);
      await addBackup(env, 2, 3, { foutmelding: "schijf vol" });
      const res = await call(env.app, "/api/cron/backup-controle");
      expect(res.status).toBe(409);
      expect(res.json.reden).toBe("mislukt");
      expect(res.json.laatsteBackup).toMatchObject({ exitCode: 3, gelukt: false, foutmelding: "schijf vol", bron: "host-cron" });
      expect(res.json.leeftijdUren).toBe(2);
      expect(env.alarms.raised.map((a) => a.type)).toEqual(["backup-missing"]);
      expect(env.alarms.raised[0]!.message).toContain("exitcode 3");
    } finally {
      await env.cleanup();
    }
  });

  test("an empty foutmelding is shown as null (no message), as the daily report's backupDetail shows it", async () => {
    const env = await makeEnv();
    try {
      await addBackup(env, 1, 0, { foutmelding: "" });
      const res = await call(env.app, "/api/cron/backup-controle");
      expect(res.status).toBe(200);
      expect(res.json.laatsteBackup.foutmelding).toBeNull();
    } finally {
      await env.cleanup();
    }
  });

  test("newest successful backup older than BACKUP_MAX_UREN → 409 te-oud with its age in hours", async () => {
    const env = await makeEnv();
    try {
      await addBackup(env, 26.04); // 26 h 2.4 min: just past the default 26 h
      const res = await call(env.app, "/api/cron/backup-controle");
      expect(res.status).toBe(409);
      expect(res.json).toMatchObject({ ok: false, reden: "te-oud", leeftijdUren: 26, maxUren: 26 });
      expect(res.json.laatsteBackup.gelukt).toBe(true);
      expect(env.alarms.raised).toHaveLength(1);
    } finally {
      await env.cleanup();
    }
  });

  test("fresh successful backup → 200 and no alarm; BACKUP_MAX_UREN is honoured", async () => {
    const env = await makeEnv({ BACKUP_MAX_UREN: "30" });
    try {
      await addBackup(env, 27.25);
      const res = await call(env.app, "/api/cron/backup-controle");
      expect(res.status).toBe(200);
      expect(res.json).toMatchObject({ ok: true, leeftijdUren: 27.3, maxUren: 30 });
      expect(res.json.reden).toBeUndefined();
      expect(env.alarms.raised).toHaveLength(0);
    } finally {
      await env.cleanup();
    }
  });

  test("exactly BACKUP_MAX_UREN old already counts as too old", async () => {
    const env = await makeEnv();
    try {
      await addBackup(env, 26);
      const r = await runBackupControle(env.deps, NOW);
      expect(r.status).toBe(409);
      expect(r.body).toMatchObject({ ok: false, reden: "te-oud" });
      await addBackup(env, 25.99);
      expect((await runBackupControle(env.deps, NOW)).status).toBe(200);
    } finally {
      await env.cleanup();
    }
  });
});
