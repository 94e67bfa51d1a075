import { afterEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { simpleParser } from "mailparser";
import { forOperator } from "../src/alarms/alarm.ts";
import { canonicalJson } from "../src/audit/chain.ts";
import { openNote, parseVerifierKey } from "../src/audit/note.ts";
import { openInstallationCheckpoint } from "../src/audit/records.ts";
import { runBackupControle } from "../src/jobs/backup-controle.ts";
import { runDagrapport } from "../src/jobs/dagrapport.ts";
import { runAuditCommand } from "../src/cli/audit.ts";
import { formatSize } from "../src/format.ts";
import type { AnyStore } from "../src/deps.ts";
import { operatorRecordsPg } from "../src/pg/daily.ts";
import { dailyStatus, formatDuur, median, OPERATOR_RECORDS_SQL, type DailyReport } from "../src/reports/daily.ts";
import { redenUitleg } from "../src/reports/shared.ts";
import { backupReportRow, insertBackupRow, stateZegel, call, NOW, TEST_SEAL, TEST_SIGNING_KEY, TEST_VERIFIER_KEY, eindzegel, zegel } from "./helpers.ts";
import { addLoginAttempt, addTenant, appendInputs, makeEnv, type TestDb } from "./dialect.ts";
import { closedPort, makeMailEnv, startSmtp } from "./smtp.ts";
import { ctlSmtp } from "./smtp-ctl.ts";

// bunfig.toml's 30 s is not applied by this Bun (its default is 5 s): on the PostgreSQL run
// the first test also starts the run's shared cluster, which takes seconds on a busy host.
setDefaultTimeout(30_000);

const HOUR = 3600 * 1000;
const SUMMER = new Date("2026-07-23T12:00:00.000Z");
const WINTER = new Date("2026-01-05T07:03:00.000Z");

const toClean: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const f of toClean.splice(0).reverse()) await f();
});

/** test/smtp.ts makeMailEnv (the run's store, the real transport), cleaned up after the test. */
async function mailEnv(env: Record<string, string> = {}) {
  const e = await makeMailEnv(env);
  toClean.push(() => e.cleanup());
  return e;
}

async function setup(env: Record<string, string> = {}) {
  const smtp = await startSmtp();
  toClean.push(() => smtp.stop());
  const e = await mailEnv({ SMTP_URL: smtp.url, ...env });
  return { smtp, env: e };
}

type Env = Awaited<ReturnType<typeof mailEnv>>;
const DAY = 24 * 3600 * 1000;

/** A report as backup-status stores it: sealed (src/row-seal.ts). */
function addBackup(env: Env, b: { ontvangen: Date; exitCode: number; grootte?: number | null; bestandsnaam?: string; foutmelding?: string }) {
  return insertBackupRow(env.db, backupReportRow(b));
}

function addRun(env: Env, job: string, gestart: Date, uitkomst = "ok") {
  const r = { job, gestart: gestart.toISOString(), beeindigd: new Date(gestart.getTime() + 1000).toISOString(), uitkomst, httpStatus: 200 };
  return env.db.run(
    "INSERT INTO job_runs (job, gestart, beeindigd, uitkomst, http_status, zegel, eindzegel) VALUES (?, ?, ?, ?, 200, ?, ?)",
    r.job,
    r.gestart,
    r.beeindigd,
    r.uitkomst,
    zegel(job, r.gestart),
    eindzegel(r),
  );
}

/** An audit entry appended as the write API does (appendAuditEntry's input), on either store. */
function addAudit(env: { store: AnyStore }, e: { tenantId: number; actor: string; action: string; subject: string; details: Record<string, unknown>; createdAt: Date }) {
  return appendInputs(env.store, [{ ...e, details: canonicalJson(e.details), createdAt: e.createdAt.toISOString() }]);
}

describe("dagrapport: recipient", () => {
  test("DAGRAPPORT_EMAIL receives it, before SUPPORT_EMAIL", async () => {
    const { smtp, env } = await setup({ DAGRAPPORT_EMAIL: "ops@example.test", SUPPORT_EMAIL: "support@example.test" });
    const res = await call(env.app, "/api/cron/dagrapport");
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ ok: true, verzonden: true, ontvanger: "ops@example.test", bezorging: "smtp" });
    expect(smtp.received.map((m) => m.to)).toEqual([["ops@example.test"]]);
    expect(smtp.received[0]!.subject).toMatch(/^Dagrapport 23\/07\/2026: actie nodig \(\d+ punten\)$/);
  });

  test("SUPPORT_EMAIL receives it when DAGRAPPORT_EMAIL is not set", async () => {
    const { smtp, env } = await setup({ SUPPORT_EMAIL: "support@example.test" });
    const r = await runDagrapport(env.deps, NOW);
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ ok: true, verzonden: true, ontvanger: "support@example.test" });
    expect(smtp.received.map((m) => m.to)).toEqual([["support@example.test"]]);
  });

  test("no recipient: nothing is sent, verzonden false, and the whole report is in the JSON", async () => {
    const { smtp, env } = await setup();
    await addBackup(env, { ontvangen: new Date(NOW.getTime() - 2 * HOUR), exitCode: 0, grootte: 1536, bestandsnaam: "db.zst" });
    const res = await call(env.app, "/api/cron/dagrapport");
    expect(res.status).toBe(200);
    expect(smtp.received).toEqual([]);
    expect(res.json.ok).toBe(true);
    expect(res.json.verzonden).toBe(false);
    expect("ontvanger" in res.json).toBe(false);
    expect(res.json.bezorging).toBe("smtp");
    expect(res.json.backup).toEqual({ resultaat: "OK", gelukt: true, datum: "23/07/2026 12:00", grootte: "1.5 KB", bron: "host-cron" });
    for (const key of ["gemaakt", "tijdzone", "status", "backupDetail", "inlogpogingen", "verificatie", "taken", "database"]) {
      expect(res.json).toHaveProperty(key);
    }
    expect(res.json.taken.map((t: { job: string }) => t.job)).toEqual([
      "weekrapport",
      "audit-retentie",
      "beveiligingslog-retentie",
      "audit-verificatie",
      "dagrapport",
      "audit-anker",
      "backup-controle",
      "taken-controle",
      "beveiligingslog-analyse",
      "db-onderhoud",
    ]);
  });
});

describe("dagrapport: backup section", () => {
  test("a successful backup in summer time: OK, local date, 1024-based size, bron", async () => {
    const { env } = await setup();
    await addBackup(env, { ontvangen: new Date(SUMMER.getTime() - 3 * HOUR), exitCode: 0, grootte: 999 });
    await addBackup(env, { ontvangen: SUMMER, exitCode: 0, grootte: Math.round(23.4 * 1024 * 1024), bestandsnaam: "nachtwacht.db.zst" });
    const r = await runDagrapport(env.deps, new Date(SUMMER.getTime() + 60_000));
    expect(r.body.backup).toEqual({ resultaat: "OK", gelukt: true, datum: "23/07/2026 14:00", grootte: "23.4 MB", bron: "host-cron" });
    expect(r.body.backupDetail).toMatchObject({ bestandsnaam: "nachtwacht.db.zst", exitCode: 0, teOud: false });
  });

  test("a failed backup in winter time: FOUT with its size, date and the error message", async () => {
    const { smtp, env } = await setup({ DAGRAPPORT_EMAIL: "ops@example.test" });
    await addBackup(env, { ontvangen: WINTER, exitCode: 3, grootte: 1023, foutmelding: "schijf vol" });
    const r = await runDagrapport(env.deps, new Date(WINTER.getTime() + 60_000));
    expect(r.body.backup).toEqual({ resultaat: "FOUT", gelukt: false, datum: "05/01/2026 08:03", grootte: "1023 B", bron: "host-cron" });
    expect(r.body.status.niveau).toBe("actie");
    expect(r.body.status.punten).toContain("De laatste back-up (05/01/2026 08:03) is mislukt: schijf vol.");
    const m = smtp.received[0]!;
    expect(m.text).toMatch(/Resultaat\s+FOUT/);
    expect(m.text).toMatch(/Datum\s+05\/01\/2026 08:03/);
    expect(m.text).toMatch(/Foutmelding\s+schijf vol/);
    expect(m.html).toContain("05/01/2026 08:03");
    expect(m.html).toContain("schijf vol");
  });

  test("a foutmelding and bestandsnaam with line separators and a bidi override are one line in the mail, their words a space apart; the JSON keeps them", async () => {
    const { smtp, env } = await setup({ DAGRAPPORT_EMAIL: "ops@example.test" });
    // The host's words: drawn on lines of their own, they would read as a section saying all is well.
    const foutmelding = "rsync failed\u2028\u2028STATUS: ALLES IN ORDE\u2029\u0085\u000bgeen actie nodig";
    await addBackup(env, { ontvangen: WINTER, exitCode: 3, grootte: 1023, bestandsnaam: "db\u202e.zst\u2028KLAAR", foutmelding });
    const r = await runDagrapport(env.deps, new Date(WINTER.getTime() + 60_000));
    expect(r.body.backupDetail).toMatchObject({ foutmelding, bestandsnaam: "db\u202e.zst\u2028KLAAR" });
    // The status points are the mail's text, in the JSON too.
    expect(r.body.status.punten).toContain("De laatste back-up (05/01/2026 08:03) is mislukt: rsync failed STATUS: ALLES IN ORDE geen actie nodig.");
    const m = smtp.received[0]!;
    for (const part of [m.text, m.html]) {
      expect(part).toContain("rsync failed STATUS: ALLES IN ORDE geen actie nodig");
      expect(part).toContain("db.zst KLAAR");
      expect(part).not.toMatch(/[\u2028\u2029\u0085\u000b\u202e]/);
    }
    expect(m.text).toMatch(/Foutmelding\s+rsync failed STATUS: ALLES IN ORDE geen actie nodig/);
  });

  test("no backup ever reported: FOUT, gelukt false, and '-' for datum, grootte and bron", async () => {
    const { env } = await setup();
    const r = await runDagrapport(env.deps, NOW);
    expect(r.body.backup).toEqual({ resultaat: "FOUT", gelukt: false, datum: "-", grootte: "-", bron: "-" });
    expect(r.body.status.punten).toContain("Er is nog nooit een back-up gemeld.");
  });

  test("a successful backup older than BACKUP_MAX_UREN is OK but needs action", async () => {
    const { env } = await setup({ BACKUP_MAX_UREN: "26" });
    await addBackup(env, { ontvangen: new Date(NOW.getTime() - 30 * HOUR), exitCode: 0, grootte: 2048 });
    const r = await runDagrapport(env.deps, NOW);
    expect(r.body.backup.resultaat).toBe("OK");
    expect(r.body.backupDetail).toMatchObject({ teOud: true, ouderdomUren: 30, maxUren: 26 });
    expect(r.body.status.niveau).toBe("actie");
  });

  test("a backup exactly BACKUP_MAX_UREN old is too old in the report as in backup-controle (one rule)", async () => {
    const { env } = await setup({ BACKUP_MAX_UREN: "26" });
    await addBackup(env, { ontvangen: new Date(NOW.getTime() - 26 * HOUR), exitCode: 0, grootte: 2048 });
    const r = await runDagrapport(env.deps, NOW);
    expect(r.body.backupDetail).toMatchObject({ teOud: true, ouderdomUren: 26 });
    expect((await runBackupControle(env.deps, NOW)).status).toBe(409);
    await addBackup(env, { ontvangen: new Date(NOW.getTime() - 26 * HOUR + 1), exitCode: 0, grootte: 2048 });
    expect((await runDagrapport(env.deps, NOW)).body.backupDetail.teOud).toBe(false);
    expect((await runBackupControle(env.deps, NOW)).status).toBe(200);
  });
});

describe("dagrapport: further sections", () => {
  test("login attempts of the last 24 hours: totals, distinct failing IPs, top failing IPs", async () => {
    const { env } = await setup();
    const s = env.db;
    const at = (h: number) => new Date(NOW.getTime() - h * HOUR);
    for (let i = 0; i < 4; i++) await addLoginAttempt(s, { account: "a", ip: "10.0.0.1", gelukt: true, tijdstip: at(i + 1) });
    for (let i = 0; i < 3; i++) await addLoginAttempt(s, { account: "b", ip: "203.0.113.9", gelukt: false, tijdstip: at(i + 1) });
    await addLoginAttempt(s, { account: "c", ip: "198.51.100.7", gelukt: false, tijdstip: at(23) });
    await addLoginAttempt(s, { account: "c", ip: "198.51.100.8", gelukt: false, tijdstip: at(25) }); // outside the 24 h
    const r = await runDagrapport(env.deps, NOW);
    expect(r.body.inlogpogingen).toEqual({
      van: "22/07/2026 14:00",
      tot: "23/07/2026 14:00",
      totaal: 8,
      gelukt: 4,
      mislukt: 4,
      mislukteIps: 2,
      topMislukteIps: [
        { ip: "203.0.113.9", aantal: 3 },
        { ip: "198.51.100.7", aantal: 1 },
      ],
    });
  });

  test("the latest verification: when, how many tenants, which chains are broken", async () => {
    const { smtp, env } = await setup({ DAGRAPPORT_EMAIL: "ops@example.test" });
    const a = await addTenant(env.db, "Alfa BV");
    const b = await addTenant(env.db, "Beta BV");
    await addTenant(env.db, "Nieuw BV");
    const q = (tenantId: number, gecontroleerd: string, intact: boolean, aantalEntries: number, foutSeq: number | null, foutEntryId: number | null, foutReden: string | null) =>
      env.db.run(
        "INSERT INTO audit_verification_state (tenant_id, gecontroleerd, intact, aantal_entries, fout_seq, fout_entry_id, fout_reden, zegel) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        tenantId,
        gecontroleerd,
        intact,
        aantalEntries,
        foutSeq,
        foutEntryId,
        foutReden,
        stateZegel({ tenantId, gecontroleerd, intact, aantalEntries, foutSeq, foutEntryId, foutReden }),
      );
    await q(a, "2026-07-23T01:00:03.000Z", true, 10, null, null, null);
    await q(b, "2026-07-23T01:00:04.000Z", false, 10, 7, 77, "volgnummer-gat");
    const r = await runDagrapport(env.deps, NOW);
    expect(r.body.verificatie).toEqual({
      tijdstip: "23/07/2026 03:00",
      gecontroleerd: 2,
      nietGecontroleerd: 1,
      aantalGebroken: 1,
      gebroken: [
        {
          tenantId: b,
          tenant: "Beta BV",
          seq: 7,
          reden: "volgnummer-gat",
          uitleg: "er ontbreken entries midden in de keten (gat in de volgnummers)",
          gecontroleerd: "23/07/2026 03:00",
        },
      ],
    });
    expect(smtp.received[0]!.text).toContain("Beta BV (#2)");
    expect(smtp.received[0]!.text).toContain("De auditketen van 1 tenant is gebroken (Beta BV).");

    // A database writer marks Beta intact, dated ahead so that no later check would replace
    // it: the report does not take it for a check; Beta counts as not checked.
    await env.db.run("UPDATE audit_verification_state SET gecontroleerd = '2099-01-01T00:00:00.000Z', intact = ?, fout_seq = NULL, fout_reden = NULL WHERE tenant_id = ?", true, b);
    const forged = await runDagrapport(env.deps, NOW);
    expect(forged.body.verificatie).toMatchObject({ tijdstip: "23/07/2026 03:00", gecontroleerd: 1, nietGecontroleerd: 2, aantalGebroken: 0 });
  });

  test("each scheduled job's last run, and overdue once its fire time plus TAKEN_MARGE_MINUTEN passed without a run", async () => {
    const { env } = await setup({ TAKEN_MARGE_MINUTEN: "30" });
    // NOW is 12:00Z. audit-verificatie (01:00) ran; backup-controle (:15) last ran at 10:15;
    // beveiligingslog-analyse (*/15) is due 11:30 and ran 11:30 but failed; taken-controle
    // (:45) is due 11:45 but still inside its 30 minutes of grace.
    await addRun(env, "audit-verificatie", new Date("2026-07-23T01:00:02.000Z"));
    await addRun(env, "backup-controle", new Date("2026-07-23T10:15:01.000Z"));
    await addRun(env, "beveiligingslog-analyse", new Date("2026-07-23T11:30:00.000Z"), "fout");
    await addRun(env, "taken-controle", new Date("2026-07-23T10:45:00.000Z"));
    const r = await runDagrapport(env.deps, NOW);
    const byJob = Object.fromEntries(r.body.taken.map((t) => [t.job, t]));
    expect(byJob["audit-verificatie"]).toEqual({
      job: "audit-verificatie",
      cron: "0 1 * * *",
      uitkomst: "ok",
      laatsteStart: "23/07/2026 03:00",
      laatsteEinde: "23/07/2026 03:00",
      laatsteDuurMs: 1000,
      laatsteDuur: "1.0 s",
      gebruikelijkeDuurMs: 1000,
      gebruikelijkeDuur: "1.0 s",
      gebruikelijkOver: 1,
      laatstVerwacht: "23/07/2026 03:00",
      volgende: "24/07/2026 03:00",
      achterstallig: false,
      status: "ok",
    });
    expect(byJob["backup-controle"]).toMatchObject({ laatstVerwacht: "23/07/2026 13:15", achterstallig: true });
    expect(byJob["beveiligingslog-analyse"]).toMatchObject({ uitkomst: "fout", achterstallig: false });
    expect(byJob["taken-controle"]).toMatchObject({ laatstVerwacht: "23/07/2026 12:45", achterstallig: false });
    expect(byJob["dagrapport"]).toMatchObject({ uitkomst: "nooit", laatsteStart: "-", achterstallig: true });
    expect(r.body.status.punten).toContain("backup-controle is niet gestart sinds 23/07/2026 13:15.");
    expect(r.body.status.punten).toContain("De laatste run van beveiligingslog-analyse (23/07/2026 13:30) is mislukt.");
  });

  test("each job's last duration and its usual one: the median of its last 10 successful runs", async () => {
    const { smtp, env } = await setup({ DAGRAPPORT_EMAIL: "ops@example.test" });
    const run = (job: string, gestart: string, ms: number | null, uitkomst = "ok") => {
      const beeindigd = ms === null ? null : new Date(Date.parse(gestart) + ms).toISOString();
      return env.db.run(
        "INSERT INTO job_runs (job, gestart, beeindigd, uitkomst, http_status, zegel, eindzegel) VALUES (?, ?, ?, ?, 200, ?, ?)",
        job,
        gestart,
        beeindigd,
        uitkomst,
        zegel(job, gestart),
        eindzegel({ job, gestart, beeindigd, uitkomst, httpStatus: 200 }),
      );
    };
    // audit-verificatie: twelve successful nights; the two oldest (very slow) fall outside the last ten.
    const nights = [600_000, 500_000, 12_000, 14_000, 13_000, 15_000, 11_000, 16_000, 13_500, 12_500, 14_500, 13_800];
    for (const [i, ms] of nights.entries()) await run("audit-verificatie", new Date(Date.parse("2026-07-11T01:00:00.000Z") + i * 86_400_000).toISOString(), ms);
    // …then a failed and an answered-409 run: shown as the last run, never part of the median.
    await run("audit-verificatie", "2026-07-23T01:00:00.000Z", 95_000, "fout");
    // dagrapport: four successful runs (an even count: the mean of the middle two), the newest still going.
    for (const [i, ms] of [200, 180, 260, 190].entries()) await run("dagrapport", `2026-07-${String(18 + i).padStart(2, "0")}T06:00:00.000Z`, ms);
    await run("dagrapport", "2026-07-22T06:00:00.000Z", 3_725_000, "afwijking");
    await run("taken-controle", "2026-07-23T11:45:00.000Z", null, "bezig");
    const r = await runDagrapport(env.deps, NOW);
    const byJob = Object.fromEntries(r.body.taken.map((t) => [t.job, t]));
    // last ten: 12000 14000 13000 15000 11000 16000 13500 12500 14500 13800 → sorted middle 13500 and 13800
    expect(byJob["audit-verificatie"]).toMatchObject({
      uitkomst: "fout",
      laatsteDuurMs: 95_000,
      laatsteDuur: "1 min 35 s",
      gebruikelijkeDuurMs: 13_650,
      gebruikelijkeDuur: "13.7 s",
      gebruikelijkOver: 10,
    });
    expect(byJob["dagrapport"]).toMatchObject({ uitkomst: "afwijking", laatsteDuurMs: 3_725_000, laatsteDuur: "1 h 02 min", gebruikelijkeDuurMs: 195, gebruikelijkeDuur: "195 ms", gebruikelijkOver: 4 });
    expect(byJob["taken-controle"]).toMatchObject({ uitkomst: "bezig", laatsteDuurMs: null, laatsteDuur: "-", gebruikelijkeDuurMs: null, gebruikelijkeDuur: "-", gebruikelijkOver: 0 });
    expect(byJob["weekrapport"]).toMatchObject({ uitkomst: "nooit", laatsteDuurMs: null, gebruikelijkeDuurMs: null, gebruikelijkOver: 0 });
    // The e-mail shows both, the usual one in brackets.
    const m = smtp.received[0]!;
    expect(m.html).toContain("Duur (meestal)");
    expect(m.text).toContain("DUUR (MEESTAL)"); // the text part writes table headers in capitals
    for (const part of [m.text, m.html]) {
      expect(part).toContain("1 min 35 s (13.7 s)");
      expect(part).toContain("1 h 02 min (195 ms)");
    }
  });

  test("a job is not overdue for fire times before the service was installed", async () => {
    const { env } = await setup();
    const installed = new Date(NOW.getTime() - 5 * 60_000).toISOString();
    await env.db.run("UPDATE service_meta SET value = ?, zegel = ? WHERE key = 'geinstalleerd'", installed, TEST_SEAL.sealInstalled(installed));
    const r = await runDagrapport(env.deps, NOW);
    expect(r.body.taken.filter((t) => t.achterstallig)).toEqual([]);
  });

  test("on PostgreSQL the server's clock against this host's (here one machine: well within a second, no point); more than 10 s either way is a point of the status", async () => {
    const { env } = await setup();
    const r = await runDagrapport(env.deps, NOW);
    if (env.store.kind === "sqlite") expect(r.body.database.klokAfwijkingSeconden).toBeNull();
    else expect(Math.abs(r.body.database.klokAfwijkingSeconden!)).toBeLessThan(1);
    expect(r.body.status.punten.filter((p) => p.includes("klok"))).toEqual([]);
    const { status, gemaakt, tijdzone, ...body } = r.body as DailyReport & { ok: unknown };
    const withSkew = (s: number | null) => dailyStatus({ ...body, database: { ...body.database, klokAfwijkingSeconden: s } }).punten.filter((p) => p.includes("klok"));
    expect(withSkew(null)).toEqual([]);
    expect(withSkew(10)).toEqual([]);
    expect(withSkew(-10)).toEqual([]);
    expect(withSkew(45.2)).toEqual([
      "De klok van deze host wijkt 45.2 s af van die van de databaseserver (die loopt voor). De tijden die deze host vastlegt (runs, auditregels) wijken even veel af, en taken-controle beoordeelt er de runs van de andere instantie mee: zet NTP aan (timedatectl), op elke host.",
    ]);
    expect(withSkew(-10.1)).toEqual([
      "De klok van deze host wijkt 10.1 s af van die van de databaseserver (die loopt achter). De tijden die deze host vastlegt (runs, auditregels) wijken even veel af, en taken-controle beoordeelt er de runs van de andere instantie mee: zet NTP aan (timedatectl), op elke host.",
    ]);
  });

  test("tenants against TENANTS_MAX: no point below 90 %, let-op from 90 %, actie at the maximum and past it (an installation upgraded past a lowered default), with the count, the maximum and what to do; the mail shows it", async () => {
    const { smtp, env } = await setup({ DAGRAPPORT_EMAIL: "ops@example.test", TENANTS_MAX: "10" });
    const tenantsPoints = async () => {
      const r = await runDagrapport(env.deps, NOW);
      return { tenants: r.body.tenants, punten: r.body.status.punten.filter((p) => p.includes("TENANTS_MAX")) };
    };
    for (let i = 1; i <= 8; i++) await addTenant(env.db, `T${i}`);
    expect(await tenantsPoints()).toEqual({ tenants: { aantal: 8, max: 10, niveau: "ok" }, punten: [] });
    await addTenant(env.db, "T9");
    const raise =
      'Verhoog TENANTS_MAX in het env-bestand van nachtwacht (/etc/nachtwacht/nachtwacht.env) en herstart de service; reken met wat elke tenant elke nacht blijvend kost (een regel in het ankerbestand, docs/operations.md "What grows with the years").';
    expect(await tenantsPoints()).toEqual({
      tenants: { aantal: 9, max: 10, niveau: "let-op" },
      punten: [`Er zijn 9 tenants, 90 % van TENANTS_MAX (10): vanaf 10 worden nieuwe tenants geweigerd (422). ${raise}`],
    });
    await addTenant(env.db, "T10");
    const full = (n: number) =>
      `Er zijn ${n} tenants en TENANTS_MAX is 10: nieuwe tenants worden geweigerd (PUT /api/tenants/{id} antwoordt 422, en hun auditregels en inlogpogingen worden niet opgeslagen). Bestaande tenants werken gewoon. ${raise}`;
    expect(await tenantsPoints()).toEqual({ tenants: { aantal: 10, max: 10, niveau: "actie" }, punten: [full(10)] });
    for (let i = 11; i <= 12; i++) await addTenant(env.db, `T${i}`);
    const r = await runDagrapport(env.deps, NOW);
    expect(r.body.tenants).toEqual({ aantal: 12, max: 10, niveau: "actie" });
    expect(r.body.status.niveau).toBe("actie");
    expect(r.body.status.punten).toContain(full(12));
    const m = smtp.received.at(-1)!;
    expect(m.text).toContain("Er zijn 12 tenants en TENANTS_MAX is 10");
    expect(m.text).toMatch(/Tenants\s+12 \(TENANTS_MAX 10\)/);
    expect(m.html).toContain("12 (TENANTS_MAX 10)");
  });

  test("database size is page_count × page_size plus the write-ahead log (on PostgreSQL: pg_database_size, walBytes 0)", async () => {
    const { env } = await setup();
    if (env.store.kind === "sqlite") {
      const r = await runDagrapport(env.deps, NOW);
      const { page_count } = env.store.sqlite.query("PRAGMA page_count").get() as { page_count: number };
      const { page_size } = env.store.sqlite.query("PRAGMA page_size").get() as { page_size: number };
      const wal = statSync(`${env.config.databasePath}-wal`).size;
      expect(r.body.database.walBytes).toBe(wal);
      expect(r.body.database.bytes).toBe(page_count * page_size + wal);
      expect(r.body.database.grootte).toMatch(/^\d+\.\d (KB|MB)$/);
    } else {
      // By design (src/pg/daily.ts): this database's files, and no WAL: PostgreSQL's is the
      // whole server's. Bracketed, since autovacuum may meanwhile add a map fork or cut
      // empty pages off a table's end (CI saw the size fall by 150 KB during the job).
      const size = async () => (await env.db.get<{ n: number }>("SELECT pg_database_size(current_database())::float8 AS n"))!.n;
      const before = await size();
      const r = await runDagrapport(env.deps, NOW);
      const after = await size();
      expect(r.body.database.walBytes).toBe(0);
      expect(r.body.database.bytes).toBeGreaterThanOrEqual(Math.min(before, after));
      expect(r.body.database.bytes).toBeLessThanOrEqual(Math.max(before, after));
      expect(r.body.database.grootte).toBe(formatSize(r.body.database.bytes));
      expect(r.body.database.grootte).toMatch(/^\d+\.\d (KB|MB)$/);
    }
  });
});

describe("dagrapport: durations", () => {
  test("formatDuur and median", () => {
    expect([null, 0, 999, 1000, 12_449, 59_949, 59_950, 185_000, 3_599_499, 3_599_500, 7_620_000].map(formatDuur)).toEqual([
      "-", "0 ms", "999 ms", "1.0 s", "12.4 s", "59.9 s", "1 min 00 s", "3 min 05 s", "59 min 59 s", "1 h 00 min", "2 h 07 min",
    ]);
    expect(median([])).toBeNull();
    expect(median([5])).toBe(5);
    expect(median([9, 1, 5])).toBe(5);
    expect(median([1, 2, 4, 9])).toBe(3);
    expect(median([1, 2])).toBe(2); // 1.5 rounded
  });
});

describe("dagrapport: a failed send", () => {
  test("SMTP server down: 502 with ok and verzonden false, the report, the error, and a mail-failure alarm", async () => {
    const { smtp, env } = await setup({ DAGRAPPORT_EMAIL: "ops@example.test" });
    await addBackup(env, { ontvangen: SUMMER, exitCode: 0, grootte: 512 });
    await smtp.stop();
    const res = await call(env.app, "/api/cron/dagrapport");
    expect(res.status).toBe(502);
    expect(res.json).toMatchObject({
      ok: false,
      verzonden: false,
      ontvanger: "ops@example.test",
      bezorging: "smtp",
      backup: { resultaat: "OK", gelukt: true, datum: "23/07/2026 14:00", grootte: "512 B", bron: "host-cron" },
    });
    expect(res.json.error).toStartWith("Het dagrapport kon niet worden verstuurd naar ops@example.test");
    expect(res.json.taken).toHaveLength(10);
    expect(env.alarms.raised.map((a) => a.type)).toEqual(["mail-failure"]);
    // The job-run history records the failed send.
    const run = await env.db.all('SELECT uitkomst, http_status AS "httpStatus" FROM job_runs WHERE job = \'dagrapport\'');
    expect(run).toEqual([{ uitkomst: "fout", httpStatus: 502 }]);
  });

  const scheduled = { headers: { "x-nachtwacht-gepland": "1" } };
  /** An installation mailing the daily report through test/smtp-ctl.ts, its clock at 06:00 UTC, the report's fire time. */
  async function ctlSetup(mode: "drop" | "refuse") {
    const smtp = await ctlSmtp(mode);
    toClean.push(() => smtp.stop());
    const env = await mailEnv({ SMTP_URL: smtp.url, DAGRAPPORT_EMAIL: "ops@example.test" });
    env.setNow(new Date("2026-07-23T06:00:00.000Z"));
    return { smtp, env };
  }

  test("the server received the whole message, then the connection dropped without an answer: 409 (perhaps delivered), and the next scheduled call for that time does not send it again", async () => {
    const { smtp, env } = await ctlSetup("drop");
    const res = await call(env.app, "/api/cron/dagrapport", scheduled);
    expect(res.status).toBe(409);
    expect(res.json).toMatchObject({ ok: false, verzonden: false, mogelijkAfgeleverd: true, ontvanger: "ops@example.test", bezorging: "smtp" });
    expect(res.json.error).toStartWith("Het dagrapport aan ops@example.test is mogelijk wel afgeleverd");
    expect(res.json.taken).toHaveLength(10);
    expect(env.alarms.raised.map((a) => [a.type, a.message.split(":")[0]])).toEqual([["mail-failure", "Het dagrapport is mogelijk wel afgeleverd; niet opnieuw verstuurd"]]);
    // The address on the operator's channels only (Alarm.personal).
    expect(env.alarms.raised[0]!.message).not.toContain("ops@example.test");
    expect(forOperator(env.alarms.raised[0]!).message).toEndWith("Ontvanger: ops@example.test.");
    expect(env.alarms.raised[0]!.message).not.toContain("kon niet worden verstuurd");

    smtp.mode = "accept";
    const again = await call(env.app, "/api/cron/dagrapport", scheduled);
    expect(again.status).toBe(204);
    expect(smtp.full.map((m) => [m.to, m.answer])).toEqual([["ops@example.test", "drop"]]);
    const runs = await env.db.all('SELECT uitkomst, http_status AS "httpStatus" FROM job_runs WHERE job = \'dagrapport\'');
    expect(runs).toEqual([{ uitkomst: "afwijking", httpStatus: 409 }]);
  });

  test("the server refused the whole message (451): 502, not sent, and the next scheduled call for that time sends it", async () => {
    const { smtp, env } = await ctlSetup("refuse");
    const res = await call(env.app, "/api/cron/dagrapport", scheduled);
    expect(res.status).toBe(502);
    expect(res.json).toMatchObject({ ok: false, verzonden: false, ontvanger: "ops@example.test" });
    expect(res.json.mogelijkAfgeleverd).toBeUndefined();
    expect(res.json.error).toContain("451");
    expect(env.alarms.raised.map((a) => a.message)).toEqual(["Het dagrapport kon niet worden verstuurd."]);
    expect(env.alarms.raised.map((a) => forOperator(a).message)).toEqual(["Het dagrapport kon niet worden verstuurd. Ontvanger: ops@example.test."]);

    smtp.mode = "accept";
    const again = await call(env.app, "/api/cron/dagrapport", scheduled);
    expect(again.status).toBe(200);
    expect(again.json).toMatchObject({ ok: true, verzonden: true });
    expect(smtp.full.map((m) => [m.to, m.answer])).toEqual([
      ["ops@example.test", "refuse"],
      ["ops@example.test", "accept"],
    ]);
  });

  test("SMTP_URL pointing at a closed port: 502", async () => {
    const port = await closedPort();
    const env = await mailEnv({ SMTP_URL: `smtp://127.0.0.1:${port}`, SUPPORT_EMAIL: "support@example.test" });
    const r = await runDagrapport(env.deps, NOW);
    expect(r.status).toBe(502);
    expect(r.body).toMatchObject({ ok: false, verzonden: false, error: expect.stringContaining("ECONNREFUSED") });
  });
});

describe("dagrapport: a run that stopped while its report went out", () => {
  // What a run killed mid-send leaves (test/job-lease.test.ts kills a real process there):
  // its job_runs row 'bezig' with a sealed start, and the send mark naming it.
  async function killedMidSend(env: Env, gestart: Date): Promise<number> {
    const at = gestart.toISOString();
    await env.db.run("INSERT INTO job_runs (job, gestart, uitkomst, zegel) VALUES ('dagrapport', ?, 'bezig', ?)", at, zegel("dagrapport", at));
    const [run] = await env.db.all<{ id: number }>("SELECT id FROM job_runs WHERE job = 'dagrapport' AND gestart = ?", at);
    await env.db.run("INSERT INTO service_meta (key, value) VALUES ('dagrapport-verzenden', ?)", String(run!.id));
    return run!.id;
  }
  const markOf = async (env: Env) => (await env.db.all<{ value: string }>("SELECT value FROM service_meta WHERE key = 'dagrapport-verzenden'"))[0]?.value ?? null;
  const FIRED = new Date("2026-07-23T06:00:00.000Z");

  test("the rerun for the same scheduled time does not send a second copy: 409 perhaps delivered with an alarm; the call after it sends", async () => {
    const { smtp, env } = await setup({ DAGRAPPORT_EMAIL: "ops@example.test" });
    const killed = await killedMidSend(env, new Date(FIRED.getTime() + 20_000));
    env.setNow(new Date(FIRED.getTime() + 30 * 60_000));

    const rerun = await call(env.app, "/api/cron/dagrapport");
    expect(rerun.status).toBe(409);
    expect(rerun.json).toMatchObject({ ok: false, verzonden: false, mogelijkAfgeleverd: true, ontvanger: "ops@example.test" });
    expect(rerun.json.error).toContain(`run ${killed}, gestart 2026-07-23T06:00:20.000Z`);
    expect(rerun.json.taken).toHaveLength(10);
    expect(smtp.received).toEqual([]);
    expect(env.alarms.raised.map((a) => a.type)).toEqual(["mail-failure"]);
    expect(env.alarms.raised[0]!.message).toContain("mogelijk afgeleverd");
    expect(await markOf(env)).toBeNull();

    // The operator checked the mail server's log and calls it again: now it goes.
    const again = await call(env.app, "/api/cron/dagrapport");
    expect(again.status).toBe(200);
    expect(smtp.received.map((m) => m.to)).toEqual([["ops@example.test"]]);
    const runs = await env.db.all<{ id: number; uitkomst: string }>("SELECT id, uitkomst FROM job_runs WHERE job = 'dagrapport' ORDER BY id");
    expect(runs.map((r) => r.uitkomst)).toEqual(["bezig", "afwijking", "ok"]);
    expect(await markOf(env)).toBe(String(runs[2]!.id));
  });

  test("a mark a database writer made does not hold the report back: an unsealed 'bezig' row, or a sealed one dated ahead", async () => {
    const { smtp, env } = await setup({ DAGRAPPORT_EMAIL: "ops@example.test" });
    env.setNow(new Date(FIRED.getTime() + 60_000));
    const forge = async (gestart: string, seal: string | null) => {
      await env.db.run("INSERT INTO job_runs (job, gestart, uitkomst, zegel) VALUES ('dagrapport', ?, 'bezig', ?)", gestart, seal);
      const [run] = await env.db.all<{ id: number }>("SELECT id FROM job_runs WHERE job = 'dagrapport' AND gestart = ?", gestart);
      await env.db.run("INSERT INTO service_meta (key, value) VALUES ('dagrapport-verzenden', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value", String(run!.id));
    };
    await forge("2026-07-23T06:00:10.000Z", null);
    expect((await call(env.app, "/api/cron/dagrapport", { headers: { "x-nachtwacht-gepland": "1" } })).status).toBe(200);
    await forge("9999-01-01T00:00:00.000Z", zegel("dagrapport", "9999-01-01T00:00:00.000Z"));
    expect((await call(env.app, "/api/cron/dagrapport")).status).toBe(200);
    expect(smtp.received).toHaveLength(2);
    expect(env.alarms.raised.filter((a) => a.type === "mail-failure")).toEqual([]);
  });

  test("a run of an earlier scheduled time that stopped mid-send does not hold back this one's report", async () => {
    const { smtp, env } = await setup({ DAGRAPPORT_EMAIL: "ops@example.test" });
    await killedMidSend(env, new Date(FIRED.getTime() - DAY + 20_000));
    env.setNow(new Date(FIRED.getTime() + 60_000));
    const res = await call(env.app, "/api/cron/dagrapport", { headers: { "x-nachtwacht-gepland": "1" } });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ ok: true, verzonden: true });
    expect(smtp.received).toHaveLength(1);
    expect(env.alarms.raised.filter((a) => a.type === "mail-failure")).toEqual([]);
  });

  test("a mark whose run ended is no reason to hold back: every call by hand sends, and the mark names the newest run", async () => {
    const { smtp, env } = await setup({ DAGRAPPORT_EMAIL: "ops@example.test" });
    env.setNow(new Date(FIRED.getTime() + 60_000));
    for (let i = 0; i < 2; i++) expect((await call(env.app, "/api/cron/dagrapport")).status).toBe(200);
    expect(smtp.received).toHaveLength(2);
    const runs = await env.db.all<{ id: number }>("SELECT id FROM job_runs WHERE job = 'dagrapport' ORDER BY id");
    expect(runs).toHaveLength(2);
    expect(await markOf(env)).toBe(String(runs[1]!.id));
  });
});

describe("dagrapport: the e-mail", () => {
  test("HTML and text show the same facts as the JSON", async () => {
    const { smtp, env } = await setup({ DAGRAPPORT_EMAIL: "ops@example.test" });
    await addBackup(env, { ontvangen: SUMMER, exitCode: 0, grootte: 1536, bestandsnaam: "nachtwacht-2026-07-23.db.zst" });
    await addLoginAttempt(env.db, { account: "x", ip: "203.0.113.9", gelukt: false, tijdstip: new Date(SUMMER.getTime() - HOUR) });
    const r = await runDagrapport(env.deps, new Date(SUMMER.getTime() + HOUR));
    const m = smtp.received[0]!;
    expect(m.subject).toStartWith("Dagrapport 23/07/2026: ");
    for (const part of [m.text, m.html]) {
      expect(part).toContain("23/07/2026 14:00");
      expect(part).toContain("1.5 KB");
      expect(part).toContain("nachtwacht-2026-07-23.db.zst");
      expect(part).toContain("203.0.113.9");
      expect(part).toContain(r.body.database.grootte);
    }
    expect(m.text).toMatch(/Resultaat\s+OK/);
    expect(m.text).toContain("Mislukte logins (24 uur): 1");
  });
});

describe("dagrapport: installation checkpoint and verifier key", () => {
  const verifiers = [parseVerifierKey(TEST_VERIFIER_KEY)];
  /** The base64 seed of the signing key: no part of any report may contain it. */
  const privateSeed = TEST_SIGNING_KEY.split("+").slice(4).join("+");

  async function addEntries(env: Env, tenantId: number, n: number) {
    for (let i = 0; i < n; i++) {
      await addAudit(env, { tenantId, actor: "anna@example.nl", action: "dossier.gewijzigd", subject: `dossier/${i}`, details: { i }, createdAt: new Date(NOW.getTime() - 3600_000) });
    }
  }

  /** A chain of 40 entries of an earlier version that deleted 1–25 and left only an unsigned anchor; its tenant id. */
  async function legacyChain(env: { store: AnyStore; db: TestDb }, naam: string): Promise<number> {
    const a = await addTenant(env.db, naam);
    for (let i = 0; i < 40; i++) await addAudit(env, { tenantId: a, actor: `u${i}`, action: "x", subject: "s", details: { i }, createdAt: new Date(NOW.getTime() - (900 - i) * DAY) });
    const h25 = (await env.db.get<{ hash: string }>("SELECT hash FROM audit_entries WHERE tenant_id = ? AND seq = 25", a))!.hash;
    await env.db.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= 25", a);
    await env.db.run("INSERT INTO audit_retention_anchors (tenant_id, seq, hash, bijgewerkt) VALUES (?, 25, ?, '2025-01-01T02:00:00.000Z')", a, h25);
    return a;
  }

  /** `nachtwacht adopt --ja` of tenant `a`, on the installation's store (`--db` on SQLite, DATABASE_URL on PostgreSQL). */
  async function adopt(env: Env, a: number): Promise<void> {
    const where = env.store.kind === "sqlite" ? { args: ["--db", env.config.databasePath], env: {} } : { args: [], env: { DATABASE_URL: env.store.url } };
    const code = await runAuditCommand(["adopt", "--tenant", String(a), ...where.args, "--bestand", env.config.auditAnkerBestand, "--ja"], { AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY, ...where.env }, () => {}, () => {});
    expect(code).toBe(0);
  }

  /** The installation checkpoints in the anchor file, oldest first. */
  function fileInstallationNotes(env: Env): string[] {
    return readFileSync(env.config.auditAnkerBestand, "utf8")
      .split("\n")
      .filter((l) => l !== "")
      .map((l) => JSON.parse(l) as { soort: string; note: string })
      .filter((l) => l.soort === "installatie")
      .map((l) => l.note);
  }

  /**
   * The note block of a text part, as an operator would cut it out: from the origin line
   * (`<key name>/installatie`) through the last signature line ("— …").
   */
  function noteFromText(text: string): string {
    const lines = text.split(/\r?\n/);
    const start = lines.findIndex((l) => /^\S+\/installatie$/.test(l));
    expect(start).toBeGreaterThanOrEqual(0);
    let end = lines.indexOf("", start) + 1; // the blank line between text and signatures
    expect(end).toBeGreaterThan(start);
    while (lines[end]?.startsWith("\u2014 ")) end++;
    return lines.slice(start, end).join("\n") + "\n";
  }

  /** The contents of every <pre> in the HTML part. */
  function preBlocks(html: string): string[] {
    const unescape = (s: string) => s.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&quot;/g, '"').replace(/&#x27;|&#39;/g, "'").replace(/&amp;/g, "&");
    return [...html.matchAll(/<pre[^>]*>([\s\S]*?)<\/pre>/g)].map((m) => unescape(m[1]!));
  }

  test("a chain the operator adopted is named every day: the signed adoption's warning in the response and the e-mail; a forged one is not", async () => {
    const { smtp, env } = await setup({ DAGRAPPORT_EMAIL: "ops@example.test" });
    const a = await legacyChain(env, "Oud BV");
    await adopt(env, a);

    const r = await runDagrapport(env.deps, NOW);
    expect(r.body.anker.waarschuwingen).toHaveLength(1);
    expect(r.body.anker.waarschuwingen[0]).toContain(`tenant ${a} is op`);
    expect(r.body.anker.waarschuwingen[0]).toContain("geadopteerd vanaf seq 26");
    const text = smtp.received[0]!.text.replace(/\s+/g, " ");
    expect(text).toContain("Door de beheerder ondertekende uitzonderingen");
    expect(text).toContain("geadopteerd vanaf seq 26");

    // A row a database writer signed with a key of its own names nothing.
    const forged = (await env.db.get<{ positie: number; note: string }>("SELECT positie, note FROM audit_anchor_log WHERE soort = 'adoptie'"))!;
    await env.db.run("UPDATE audit_anchor_log SET note = ? WHERE positie = ?", forged.note.replace(/\n\u2014 .*\n$/, "\n\u2014 iemand AAAAAAAA\n"), forged.positie);
    expect((await runDagrapport(env.deps, new Date(NOW.getTime() + DAY))).body.anker.waarschuwingen).toEqual([]);
  });

  test("the operator's records are read through their partial index, not by scanning the whole anchor log", async () => {
    const env = await makeEnv();
    toClean.push(() => env.cleanup());
    if (env.store.kind === "sqlite") {
      const plan = (env.store.sqlite.query(`EXPLAIN QUERY PLAN ${OPERATOR_RECORDS_SQL}`).all() as { detail: string }[]).map((r) => r.detail).join(" | ");
      expect(plan).toContain("USING INDEX audit_anchor_log_operator_idx");
    } else {
      const { sql: text, params } = operatorRecordsPg(env.store.db).toSQL();
      expect(params).toEqual([]);
      // On an empty table a sequential scan is cheapest: discouraged, the plan shows whether the partial index's predicate is provable from the query.
      const plan = await env.store.sql.begin(async (tx) => {
        await tx`SET LOCAL enable_seqscan = off`;
        return ((await tx.unsafe(`EXPLAIN ${text}`)) as { "QUERY PLAN": string }[]).map((r) => r["QUERY PLAN"]).join("\n");
      });
      expect(plan).toMatch(/Index (Only )?Scan using audit_anchor_log_operator_idx on audit_anchor_log|Bitmap Index Scan on audit_anchor_log_operator_idx\b/);
      expect(plan).not.toContain("Seq Scan on audit_anchor_log");
    }
  });

  test("before audit-anker signed anything: a clear line instead of a block, and the public key", async () => {
    const { smtp, env } = await setup({ DAGRAPPORT_EMAIL: "ops@example.test" });
    const r = await runDagrapport(env.deps, NOW);
    expect(r.body.anker).toEqual({ installatieCheckpoint: null, checkpointProbleem: null, verificatieSleutel: TEST_VERIFIER_KEY, waarschuwingen: [] });
    const m = smtp.received[0]!;
    expect(m.text).toContain("Er is nog geen installatie-checkpoint: audit-anker heeft nog niets ondertekend.");
    expect(m.text).not.toContain("nachtwacht verify --checkpoint");
    expect(m.text.split("\n")).toContain(TEST_VERIFIER_KEY);
    expect(preBlocks(m.html)).toEqual([TEST_VERIFIER_KEY]);
    for (const part of [m.text, m.html, JSON.stringify(r.body)]) expect(part).not.toContain(privateSeed);
  });

  test("the newest installation checkpoint, verbatim in the JSON, the HTML and the text part, opens under the verifier key", async () => {
    const { smtp, env } = await setup({ DAGRAPPORT_EMAIL: "ops@example.test" });
    const a = await addTenant(env.db, "Gemeente Delft");
    const b = await addTenant(env.db, "Stichting Leiden");
    await addEntries(env, a, 5);
    await addEntries(env, b, 3);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    await addEntries(env, a, 2);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    const notes = fileInstallationNotes(env);
    expect(notes).toHaveLength(2);
    const newest = notes[1]!;

    const res = await call(env.app, "/api/cron/dagrapport");
    expect(res.status).toBe(200);
    expect(res.json.anker).toEqual({ installatieCheckpoint: newest, checkpointProbleem: null, verificatieSleutel: TEST_VERIFIER_KEY, waarschuwingen: [] });

    // smtp.received is the message as mailparser read it off the wire.
    const m = smtp.received[0]!;
    const fromText = noteFromText(m.text);
    expect(fromText).toBe(newest);
    const opened = openNote(fromText, verifiers);
    expect(opened.ok).toBe(true);
    const cp = openInstallationCheckpoint(fromText, verifiers);
    expect(cp.ok && cp.checkpoint.size).toBe(3); // two checkpoints of the first run, one of the second
    expect(m.text).toContain(
      "Bewaar deze e-mail buiten deze server: nachtwacht verify --checkpoint <bestand>, met het blok hieronder als bestand, controleert of de database en het ankerbestand deze ondertekende toestand nog bevatten.",
    );
    expect(m.text.split("\n")).toContain(TEST_VERIFIER_KEY);

    expect(preBlocks(m.html)).toEqual([newest, TEST_VERIFIER_KEY]);
    expect(m.html).toContain("nachtwacht verify --checkpoint &lt;bestand&gt;");
    for (const part of [m.text, m.html, res.text]) expect(part).not.toContain(privateSeed);
  });

  test("a database writer cannot choose the mailed checkpoint: the anchor file's newest installation line is mailed, a row that differs from it is an actie point", async () => {
    const { smtp, env } = await setup({ DAGRAPPORT_EMAIL: "ops@example.test" });
    const t = await addTenant(env.db, "Gemeente Delft");
    await addEntries(env, t, 5);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    await addEntries(env, t, 5);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    const [n1, newest] = fileInstallationNotes(env) as [string, string];
    const last = (await env.db.get<{ positie: number }>("SELECT positie FROM audit_anchor_log WHERE soort = 'installatie' ORDER BY positie DESC LIMIT 1"))!;

    // The newest row swapped for an older genuine note (a stale witness), then for garbage.
    for (const [i, forged] of [n1, "rommel"].entries()) {
      await env.db.run("UPDATE audit_anchor_log SET note = ? WHERE positie = ?", forged, last.positie);
      const r = await call(env.app, "/api/cron/dagrapport");
      expect(r.status).toBe(200);
      expect(r.json.anker.installatieCheckpoint).toBe(newest);
      expect(r.json.anker.checkpointProbleem).toBe(
        `Het nieuwste installatie-checkpoint in de database (audit_anchor_log, positie ${last.positie}) staat niet zo in het ankerbestand: de kopie in de database is gewijzigd of vervalst. ` +
          "Het installatie-checkpoint in deze e-mail komt uit het ankerbestand. Zoek de oorzaak met nachtwacht verify (docs/operations.md).",
      );
      expect(r.json.status.niveau).toBe("actie");
      expect(r.json.status.punten).toContain(r.json.anker.checkpointProbleem);
      const m = smtp.received[i]!;
      expect(noteFromText(m.text)).toBe(newest);
      expect(m.text.replace(/\s+/g, " ")).toContain("staat niet zo in het ankerbestand");
      expect(preBlocks(m.html)).toEqual([newest, TEST_VERIFIER_KEY]);
    }

    // The newest row deleted: the one before it is in the file, the file's newest is still mailed.
    await env.db.run("DELETE FROM audit_anchor_log WHERE positie = ?", last.positie);
    const r = await call(env.app, "/api/cron/dagrapport");
    expect(r.json.anker).toMatchObject({ installatieCheckpoint: newest, checkpointProbleem: null });
  });

  test("the anchor file's newest installation line does not open under a trusted key: no checkpoint mailed, an actie point says why", async () => {
    const { smtp, env } = await setup({ DAGRAPPORT_EMAIL: "ops@example.test" });
    await addEntries(env, await addTenant(env.db, "Gemeente Delft"), 3);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    // Root rewrites the last line and its row alike: one character of the root changed, same length.
    const path = env.config.auditAnkerBestand;
    const lines = readFileSync(path, "utf8").split("\n");
    const line = JSON.parse(lines.at(-2)!) as { soort: string; note: string };
    expect(line.soort).toBe("installatie");
    const [origin, size, root, ...rest] = line.note.split("\n");
    const forged = [origin, size, (root![0] === "A" ? "B" : "A") + root!.slice(1), ...rest].join("\n");
    lines[lines.length - 2] = JSON.stringify({ ...line, note: forged });
    writeFileSync(path, lines.join("\n"));
    await env.db.run("UPDATE audit_anchor_log SET note = ? WHERE soort = 'installatie'", forged);

    const r = await call(env.app, "/api/cron/dagrapport");
    expect(r.status).toBe(200);
    expect(r.json.anker.installatieCheckpoint).toBeNull();
    expect(r.json.anker.checkpointProbleem).toMatch(
      /^Het nieuwste installatie-checkpoint in het ankerbestand \(positie \d+\) opent niet onder een vertrouwde sleutel \(.+\)\. Deze e-mail bevat daarom geen installatie-checkpoint\. /,
    );
    expect(r.json.status.niveau).toBe("actie");
    expect(r.json.status.punten).toContain(r.json.anker.checkpointProbleem);
    const m = smtp.received[0]!;
    expect(m.text.replace(/\s+/g, " ")).toContain("opent niet onder een vertrouwde sleutel");
    expect(m.text).not.toContain("Er is nog geen installatie-checkpoint");
    expect(m.text).not.toContain(forged);
    expect(preBlocks(m.html)).toEqual([TEST_VERIFIER_KEY]);
  });

  test("the raw message (outbox .eml, unix newlines) is valid MIME: 7-bit, lines within 998 octets, and the note survives parsing", async () => {
    const env = await mailEnv({ DAGRAPPORT_EMAIL: "ops@example.test" });
    await addEntries(env, await addTenant(env.db, "Gemeente Delft"), 4);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    expect((await call(env.app, "/api/cron/dagrapport")).status).toBe(200);
    const [file] = readdirSync(env.outboxDir).filter((f) => f.endsWith(".eml"));
    const raw = readFileSync(join(env.outboxDir, file!));
    expect(raw.every((byte) => byte < 0x80)).toBe(true);
    expect(Math.max(...raw.toString("latin1").split(/\r?\n/).map((l) => l.length))).toBeLessThanOrEqual(998);
    const parsed = await simpleParser(raw);
    const note = noteFromText(parsed.text ?? "");
    expect(note).toBe(fileInstallationNotes(env).at(-1)!);
    expect(openNote(note, verifiers).ok).toBe(true);
    expect(preBlocks(typeof parsed.html === "string" ? parsed.html : "")[0]).toBe(note);
  });

  test("every reason the verifier reports is explained in the report, none by its bare code", async () => {
    const { env } = await setup();
    const codes = [
      "hash-afwijkend", "koppeling-verbroken", "volgnummer-gat", "anker-afwijkend", "kop-ontbreekt",
      "checkpoint-afwijkend", "retentie-ontbreekt", "retentie-ongeldig", "checkpoint-ontbreekt", "checkpoint-niet-in-bestand",
    ];
    for (const code of codes) {
      const tenantId = await addTenant(env.db, `Tenant ${code}`);
      const row = { tenantId, gecontroleerd: "2026-07-23T01:00:00.000Z", intact: false, aantalEntries: 10, foutSeq: 3, foutReden: code };
      await env.db.run(
        "INSERT INTO audit_verification_state (tenant_id, gecontroleerd, intact, aantal_entries, fout_seq, fout_entry_id, fout_reden, zegel) VALUES (?, ?, ?, 10, 3, NULL, ?, ?)",
        tenantId,
        row.gecontroleerd,
        false,
        code,
        stateZegel(row),
      );
    }
    const r = await runDagrapport(env.deps, NOW);
    const uitleg = r.body.verificatie.gebroken.map((g) => [g.reden, g.uitleg]);
    expect(uitleg.map(([code]) => code)).toEqual(codes);
    for (const [code, text] of uitleg) {
      expect(text).not.toBe(code!);
      expect(text).not.toContain(code!);
    }
    expect(Object.fromEntries(uitleg)).toMatchObject({
      "kop-ontbreekt": expect.stringContaining("nieuwste ondertekende checkpoint"),
      "checkpoint-afwijkend": expect.stringContaining("Merkle-root"),
      "retentie-ontbreekt": expect.stringContaining("zonder ondertekend retentierecord"),
      "checkpoint-niet-in-bestand": expect.stringContaining("niet in het ankerbestand"),
    });
    for (const code of ["bestand-ontbreekt", "bestand-ingekort", "bestand-gewijzigd", "database-teruggezet"]) {
      expect(redenUitleg(code)).not.toBe(code);
      expect(redenUitleg(code)).toMatch(/ankerbestand|database/);
    }
    expect(redenUitleg("iets-nieuws")).toBe("iets-nieuws");
    expect(redenUitleg("toString")).toBe("toString");
  });
});
