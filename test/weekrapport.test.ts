import { Database } from "bun:sqlite";
import { readdirSync, readlinkSync } from "node:fs";
import { afterEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { fillPlaceholders } from "drizzle-orm";
import { SMTPServer } from "smtp-server";
import { forOperator } from "../src/alarms/alarm.ts";
import { canonicalJson } from "../src/audit/chain.ts";
import type { Deps } from "../src/deps.ts";
import { errorText } from "../src/logger.ts";
import { runWeekrapport } from "../src/jobs/weekrapport.ts";
import type { Mailer, MailMessage } from "../src/mail/mailer.ts";
import { createMailer } from "../src/mail/transport.ts";
import { lateAuditQueryPg, lateLoginsQueryPg, weekLoginQueriesPg, weeklyQueriesPg, weekStatsQueriesPg } from "../src/pg/weekly.ts";
import { lateAuditStatement, lateLoginStatements, lateMarkOf, MAX_ACTIES, openReportConnection, parseLateMark, stagedWeek, stageWeek, TOP_IPS, WEEK_MS, weekLogins, weeklyQueries, weekLoginStatements, weekStatsStatements, type TenantWeekLogins } from "../src/reports/weekly.ts";
import { RunningJobs } from "../src/running-jobs.ts";
import { stateZegel, call, TEST_SEAL, until } from "./helpers.ts";
import { APP_SECRET } from "./ingest-fixtures.ts";
import { addAdmin, addLoginAttempt, addTenant, appendInputs, fillChain, makeEnv, type Env } from "./dialect.ts";
import { makeMailEnv, startSmtp, type TestSmtp } from "./smtp.ts";

// bunfig.toml's 30 s is not applied by this Bun (its default is 5 s): on the PostgreSQL run
// the first test also starts the run's shared cluster, which takes seconds on a busy host.
setDefaultTimeout(30_000);

// NOW = Sunday 2026-07-26T18:00Z, weekrapport's fire time (0 18 * * 0) in ISO week 2026-W30;
// the report covers 19/07 18:00Z .. NOW. The installations' clock is set to it (setup).
const NOW = new Date("2026-07-26T18:00:00.000Z");
const DAY = 24 * 3600 * 1000;
const ago = (ms: number) => new Date(NOW.getTime() - ms);

const toClean: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const f of toClean.splice(0).reverse()) await f();
});

async function setup(refuse: string[] = []) {
  const smtp = await startSmtp({ refuse });
  const env = await makeMailEnv({ SMTP_URL: smtp.url, APP_SECRET });
  toClean.push(() => smtp.stop(), () => env.cleanup());
  env.setNow(NOW);
  return { smtp, env };
}

/** An audit entry appended as the write API does, on either store. */
function audit(env: Env, e: { tenantId: number; actor: string; action: string; subject: string; createdAt: Date }) {
  return appendInputs(env.store, [{ ...e, createdAt: e.createdAt.toISOString(), details: canonicalJson({}) }]);
}

/** Last night's sealed verification result of tenant `t`: broken at seq 57 (hash-afwijkend). */
function brokenAt57(env: Env, t: number) {
  return env.db.run(
    "INSERT INTO audit_verification_state (tenant_id, gecontroleerd, intact, aantal_entries, fout_seq, fout_entry_id, fout_reden, zegel) VALUES (?, ?, ?, 120, 57, 57, 'hash-afwijkend', ?)",
    t,
    "2026-07-23T01:00:00.000Z",
    false,
    stateZegel({ tenantId: t, gecontroleerd: "2026-07-23T01:00:00.000Z", intact: false, aantalEntries: 120, foutSeq: 57, foutEntryId: 57, foutReden: "hash-afwijkend" }),
  );
}

function recipientsOf(smtp: TestSmtp): string[] {
  return smtp.received.flatMap((m) => m.to).sort();
}

describe("weekrapport: who receives it", () => {
  test("one message per active administrator of every active tenant, none to inactive tenants or administrators", async () => {
    const { smtp, env } = await setup();
    const a = await addTenant(env.db, "Alfa BV");
    const b = await addTenant(env.db, "Beta BV");
    const c = await addTenant(env.db, "Gamma BV (opgeheven)", false);
    await addAdmin(env.db, a, "anna@alfa.test");
    await addAdmin(env.db, a, "oud@alfa.test", false);
    await addAdmin(env.db, a, "gedeeld@example.test");
    await addAdmin(env.db, b, "gedeeld@example.test");
    await addAdmin(env.db, c, "carl@gamma.test");

    const res = await call(env.app, "/api/cron/weekrapport");
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ verstuurd: 3, fouten: 0, overgeslagen: 0, bezorging: "smtp", week: "2026-W30" });
    expect(recipientsOf(smtp)).toEqual(["anna@alfa.test", "gedeeld@example.test", "gedeeld@example.test"]);
    // The administrator of two tenants gets each tenant's own report.
    const gedeeld = smtp.received.filter((m) => m.to[0] === "gedeeld@example.test").map((m) => m.subject).sort();
    expect(gedeeld).toEqual(["Weekrapport week 30: aandacht nodig — Alfa BV", "Weekrapport week 30: aandacht nodig — Beta BV"]);
    expect(smtp.received.every((m) => m.from === "nachtwacht@example.test")).toBe(true);
    expect(env.alarms.raised).toEqual([]);
  });

  test("at most WEEKRAPPORT_MAX_BERICHTEN messages a week: the first ones in tenant and administrator order, the same at a rerun; the rest counted in begrensd and alarmed", async () => {
    const smtp = await startSmtp({});
    const env = await makeMailEnv({ SMTP_URL: smtp.url, WEEKRAPPORT_MAX_BERICHTEN: "3" });
    toClean.push(() => smtp.stop(), () => env.cleanup());
    env.setNow(NOW);
    const a = await addTenant(env.db, "Alfa BV");
    const b = await addTenant(env.db, "Beta BV");
    for (const who of ["a1", "a2"]) await addAdmin(env.db, a, `${who}@alfa.test`);
    await addAdmin(env.db, a, "oud@alfa.test", false);
    for (const who of ["b1", "b2", "b3"]) await addAdmin(env.db, b, `${who}@beta.test`);

    const first = await call(env.app, "/api/cron/weekrapport");
    // Nothing a rerun could mend, but not in order: afwijking.
    expect(first.status).toBe(409);
    expect(first.json).toEqual({ verstuurd: 3, fouten: 0, overgeslagen: 0, begrensd: 2, bezorging: "smtp", week: "2026-W30" });
    expect(recipientsOf(smtp)).toEqual(["a1@alfa.test", "a2@alfa.test", "b1@beta.test"]);
    expect(env.alarms.raised.map((x) => [x.type, x.message])).toEqual([
      [
        "mail-failure",
        "Weekrapport 2026-W30: 2 van de 5 ontvangers krijgen het weekrapport niet: meer dan WEEKRAPPORT_MAX_BERICHTEN (3) berichten per week. " +
          "Controleer de beheerders die de applicatie heeft opgegeven (PUT /api/tenants/{id}/beheerders); verhoog de grens alleen als zoveel ontvangers kloppen.",
      ],
    ]);
    // A rerun in the week sends nothing more: the same three, already sent.
    const again = await call(env.app, "/api/cron/weekrapport");
    expect(again.status).toBe(409);
    expect(again.json).toEqual({ verstuurd: 0, fouten: 0, overgeslagen: 3, begrensd: 2, bezorging: "smtp", week: "2026-W30" });
    expect(smtp.received).toHaveLength(3);
  });

  test("no active administrators: nothing sent, nothing failed", async () => {
    const { smtp, env } = await setup();
    await addTenant(env.db, "Leeg BV");
    const r = await runWeekrapport(env.deps, NOW);
    expect(r).toEqual({ status: 200, body: { verstuurd: 0, fouten: 0, overgeslagen: 0, bezorging: "smtp", week: "2026-W30" } });
    expect(smtp.received).toEqual([]);
  });
});

describe("weekrapport: content", () => {
  test("the tenant's last seven days: subject, key numbers in both the HTML and the text part", async () => {
    const { smtp, env } = await setup();
    const t = await addTenant(env.db, "Alfa BV");
    const other = await addTenant(env.db, "Ander BV");
    await addAdmin(env.db, t, "anna@alfa.test");
    const s = env.db;
    // Older than seven days: not counted. Then 4 views and 3 edits inside the week.
    await audit(env, { tenantId: t, actor: "x", action: "dossier.verwijderd", subject: "d0", createdAt: ago(7 * DAY + 1) });
    for (let i = 0; i < 4; i++) await audit(env, { tenantId: t, actor: "x", action: "dossier.bekeken", subject: `d${i}`, createdAt: ago(7 * DAY - i * 1000) });
    for (let i = 0; i < 3; i++) await audit(env, { tenantId: t, actor: "x", action: "dossier.gewijzigd", subject: `d${i}`, createdAt: ago(DAY + i) });
    // Another tenant's activity stays out of this report.
    await audit(env, { tenantId: other, actor: "y", action: "dossier.bekeken", subject: "z", createdAt: ago(DAY) });
    for (let i = 0; i < 5; i++) await addLoginAttempt(s, { account: "anna", ip: "10.0.0.1", gelukt: true, tenantId: t, tijdstip: ago(2 * DAY + i) });
    await addLoginAttempt(s, { account: "anna", ip: "203.0.113.9", gelukt: false, tenantId: t, tijdstip: ago(DAY) });
    await addLoginAttempt(s, { account: "anna", ip: "203.0.113.9", gelukt: false, tenantId: t, tijdstip: ago(DAY - 1) });
    await addLoginAttempt(s, { account: "bob", ip: "198.51.100.7", gelukt: false, tenantId: t, tijdstip: ago(3 * DAY) });
    await addLoginAttempt(s, { account: "bob", ip: "198.51.100.8", gelukt: false, tenantId: t, tijdstip: ago(8 * DAY) });
    await addLoginAttempt(s, { account: "eve", ip: "198.51.100.9", gelukt: false, tenantId: other, tijdstip: ago(DAY) });
    await s.run(
      "INSERT INTO audit_verification_state (tenant_id, gecontroleerd, intact, aantal_entries, zegel) VALUES (?, ?, ?, 8, ?)",
      t,
      "2026-07-26T01:00:05.000Z",
      true,
      stateZegel({ tenantId: t, gecontroleerd: "2026-07-26T01:00:05.000Z", intact: true, aantalEntries: 8 }),
    );

    const r = await runWeekrapport(env.deps, NOW);
    expect(r.body).toMatchObject({ verstuurd: 1, fouten: 0 });
    expect(smtp.received).toHaveLength(1);
    const m = smtp.received[0]!;
    expect(m.subject).toBe("Weekrapport week 30: alles in orde — Alfa BV");

    // Text part: the key figures and the tables.
    expect(m.text).toContain("Audit-gebeurtenissen: 7");
    expect(m.text).toContain("Geslaagde inlogpogingen: 5");
    expect(m.text).toContain("Mislukte inlogpogingen: 3");
    expect(m.text).toMatch(/dossier\.bekeken\s+4\s+57%/);
    expect(m.text).toMatch(/dossier\.gewijzigd\s+3\s+43%/);
    expect(m.text).not.toContain("dossier.verwijderd");
    expect(m.text).toMatch(/IP-adressen met mislukte pogingen\s+2/);
    expect(m.text).toMatch(/203\.0\.113\.9\s+2/);
    expect(m.text).toMatch(/Uitkomst\s+Intact/);
    expect(m.text).toMatch(/Laatst gecontroleerd\s+26\/07\/2026 03:00/);
    // The period in the report time zone (UTC+2 in July).
    expect(m.text).toContain("van 19/07/2026 20:00 tot 26/07/2026 20:00");

    // HTML part: the same numbers in their cells.
    expect(m.html).toContain("Alles in orde");
    expect(m.html).toMatch(/>dossier\.bekeken<\/td><td[^>]*>4<\/td>/);
    expect(m.html).toMatch(/>dossier\.gewijzigd<\/td><td[^>]*>3<\/td>/);
    expect(m.html).toMatch(/>7<\/p>\s*<p[^>]*>audit-gebeurtenissen</);
    expect(m.html).toMatch(/>5<\/p>\s*<p[^>]*>geslaagde inlogpogingen</);
    expect(m.html).toMatch(/>3<\/p>\s*<p[^>]*>mislukte inlogpogingen</);
    expect(m.html).toContain("203.0.113.9");
    expect(m.html).toContain("19/07/2026 20:00");
  });

  test("thousands of distinct actions: the 24 most frequent one by one, the rest as one row; the total counts them all", async () => {
    const { smtp, env } = await setup();
    const t = await addTenant(env.db, "Alfa BV");
    await addAdmin(env.db, t, "anna@alfa.test");
    // 2,000 actions the application made up, once each; one action 50 times.
    await appendInputs(env.store, [
      ...Array.from({ length: 50 }, (_, i) => ({ tenantId: t, actor: "x", action: "dossier.bekeken", subject: `d${i}`, details: canonicalJson({}), createdAt: ago(DAY + i).toISOString() })),
      ...Array.from({ length: 2000 }, (_, i) => ({ tenantId: t, actor: "x", action: `actie.${String(i).padStart(4, "0")}`, subject: "s", details: canonicalJson({}), createdAt: ago(DAY + 100 + i).toISOString() })),
    ]);
    const r = await runWeekrapport(env.deps, NOW);
    expect(r.body).toMatchObject({ verstuurd: 1, fouten: 0 });
    const m = smtp.received[0]!;
    expect(m.text).toContain("Audit-gebeurtenissen: 2.050");
    expect(m.text).toMatch(/dossier\.bekeken\s+50\s+2,4%/);
    expect(m.text).toContain("actie.0022");
    expect(m.text).not.toContain("actie.0023");
    expect(m.text).toMatch(/\(1977 andere acties\)\s+1\.977\s+96%/);
    expect(m.html.length).toBeLessThan(100_000);
  });

  test("a broken chain is the headline, with the sequence number and the reason", async () => {
    const { smtp, env } = await setup();
    const t = await addTenant(env.db, "Alfa BV");
    await addAdmin(env.db, t, "anna@alfa.test");
    await brokenAt57(env, t);
    await runWeekrapport(env.deps, NOW);
    const m = smtp.received[0]!;
    expect(m.subject).toBe("Weekrapport week 30: actie nodig — Alfa BV");
    expect(m.text).toContain("Actie nodig: de auditketen is gebroken");
    expect(m.text).toContain("De auditketen is gebroken bij volgnummer 57");
    expect(m.text).toMatch(/Eerste fout bij volgnummer\s+57/);
    expect(m.html).toContain("de hash klopt niet meer");
  });

  test("a tenant name with layout characters (U+202E, a bell) is shown without them in the body as in the subject", async () => {
    const { smtp, env } = await setup();
    const t = await addTenant(env.db, "Alfa\u202E VB afla\u0007");
    await addAdmin(env.db, t, "anna@alfa.test");
    expect((await call(env.app, "/api/cron/weekrapport")).status).toBe(200);
    const [m] = smtp.received;
    expect(m!.subject).toStartWith("Weekrapport week 30: aandacht nodig — Alfa VB afla");
    for (const part of [m!.text, m!.html]) {
      expect(part).toContain("Alfa VB afla");
      expect(part).not.toMatch(/[\u202E\u0007]/);
    }
  });

  test("a tampered chain's subject starts with its status, whatever the tenant's name says or however it is padded", async () => {
    const { smtp, env } = await setup();
    // The host application names the tenant: a fake status, then 60 NBSPs to push the real one out of view.
    const t = await addTenant(env.db, "Alfa BV, week 30: alles in orde" + "\u00a0".repeat(60) + "(Alfa BV Holding)");
    await addAdmin(env.db, t, "anna@alfa.test");
    await brokenAt57(env, t);
    await runWeekrapport(env.deps, NOW);
    const m = smtp.received[0]!;
    expect(m.subject).toStartWith("Weekrapport week 30: actie nodig — ");
    // The run of white space is one space: the name is shown whole, not as a screen of blanks.
    expect(m.subject).toBe("Weekrapport week 30: actie nodig — Alfa BV, week 30: alles in orde (Alfa BV Holding)");
  });

  test("an action with a line separator and a bidi override is one line in its cell, its words a space apart", async () => {
    const { smtp, env } = await setup();
    const t = await addTenant(env.db, "Alfa BV");
    await addAdmin(env.db, t, "anna@alfa.test");
    await audit(env, { tenantId: t, actor: "x", action: "export.gemaakt\u2028\u2028ALLES IN ORDE\u202e\u2029\u0085\u000bklaar", subject: "d", createdAt: ago(DAY) });
    await runWeekrapport(env.deps, NOW);
    const m = smtp.received[0]!;
    for (const part of [m.text, m.html]) {
      expect(part).toContain("export.gemaakt ALLES IN ORDE klaar");
      expect(part).not.toMatch(/[\u2028\u2029\u0085\u000b\u202e]/);
    }
  });

  test("a chain never verified says so", async () => {
    const { smtp, env } = await setup();
    await addAdmin(env.db, await addTenant(env.db, "Alfa BV"), "anna@alfa.test");
    await runWeekrapport(env.deps, NOW);
    expect(smtp.received[0]!.text).toContain("De auditketen is nog nooit gecontroleerd.");
    expect(smtp.received[0]!.text).toContain("Auditketen: Onbekend");
  });
});

describe("weekrapport: failures and reruns", () => {
  test("a recipient refused by the server counts in fouten while the others arrive, and raises mail-failure", async () => {
    const { smtp, env } = await setup(["weg@alfa.test"]);
    const t = await addTenant(env.db, "Alfa BV");
    await addAdmin(env.db, t, "anna@alfa.test");
    await addAdmin(env.db, t, "weg@alfa.test");
    await addAdmin(env.db, t, "piet@alfa.test");

    const r = await runWeekrapport(env.deps, NOW);
    expect(r).toEqual({ status: 502, body: { verstuurd: 2, fouten: 1, overgeslagen: 0, bezorging: "smtp", week: "2026-W30" } });
    expect(recipientsOf(smtp)).toEqual(["anna@alfa.test", "piet@alfa.test"]);
    expect(env.alarms.raised).toHaveLength(1);
    const alarm = env.alarms.raised[0]!;
    expect(alarm.type).toBe("mail-failure");
    expect(alarm.context).toMatchObject({ week: "2026-W30", verstuurd: 2, fouten: 1 });
    const mislukt = (forOperator(alarm).context as { mislukt: { adres: string; fout: string }[] }).mislukt;
    expect(mislukt.map((f) => f.adres)).toEqual(["weg@alfa.test"]);
    expect(mislukt[0]!.fout).toContain("550");
  });

  test("a run with fouten is a fout (502), so the scheduled call for the same fire time runs again and sends only those; then that time is done", async () => {
    const { smtp, env } = await setup(["weg@alfa.test"]);
    const t = await addTenant(env.db, "Alfa BV");
    await addAdmin(env.db, t, "anna@alfa.test");
    await addAdmin(env.db, t, "weg@alfa.test");
    const scheduled = { headers: { "x-nachtwacht-gepland": "1" } };

    const first = await call(env.app, "/api/cron/weekrapport", scheduled);
    expect(first.status).toBe(502);
    expect(first.json).toEqual({ verstuurd: 1, fouten: 1, overgeslagen: 0, bezorging: "smtp", week: "2026-W30" });
    expect(recipientsOf(smtp)).toEqual(["anna@alfa.test"]);
    // The daily report (no recipient configured here: only its answer) shows the failed run, in its table and as a point.
    env.setNow(new Date(NOW.getTime() + 60_000)); // a minute later: still the fire time of Sunday 18:00
    const daily = await call(env.app, "/api/cron/dagrapport");
    expect(daily.json.taken.find((j: { job: string }) => j.job === "weekrapport")).toMatchObject({ uitkomst: "fout" });
    expect(daily.json.status.punten).toContainEqual(expect.stringMatching(/^De laatste run van weekrapport \(.*\) is mislukt\.$/));

    // The crontab's next call for the same Sunday 18:00 (a second instance, a retry): not refused as done.
    smtp.refuse.clear();
    const second = await call(env.app, "/api/cron/weekrapport", scheduled);
    expect(second.status).toBe(200);
    expect(second.json).toEqual({ verstuurd: 1, fouten: 0, overgeslagen: 1, bezorging: "smtp", week: "2026-W30" });
    expect(recipientsOf(smtp)).toEqual(["anna@alfa.test", "weg@alfa.test"]);

    const third = await call(env.app, "/api/cron/weekrapport", scheduled);
    expect(third.status).toBe(204);
    expect(third.headers.get("x-nachtwacht-overgeslagen")).toBeTruthy();
    expect(recipientsOf(smtp)).toEqual(["anna@alfa.test", "weg@alfa.test"]);
    expect(await env.db.all("SELECT uitkomst, http_status FROM job_runs WHERE job = 'weekrapport' ORDER BY id")).toEqual([
      { uitkomst: "fout", http_status: 502 },
      { uitkomst: "ok", http_status: 200 },
    ]);
  });

  test("a rerun in the same ISO week sends only the failed ones; a new week sends all again", async () => {
    const { smtp, env } = await setup(["weg@alfa.test"]);
    const t = await addTenant(env.db, "Alfa BV");
    await addAdmin(env.db, t, "anna@alfa.test");
    await addAdmin(env.db, t, "weg@alfa.test");
    await addAdmin(env.db, await addTenant(env.db, "Beta BV"), "bert@beta.test");
    expect((await runWeekrapport(env.deps, NOW)).body).toMatchObject({ verstuurd: 2, fouten: 1, overgeslagen: 0 });

    smtp.refuse.clear();
    smtp.received.length = 0;
    const later = new Date(NOW.getTime() + 2 * DAY); // Tuesday: still the week of Sunday's fire time, 2026-W30
    expect((await runWeekrapport(env.deps, later)).body).toEqual({ verstuurd: 1, fouten: 0, overgeslagen: 2, bezorging: "smtp", week: "2026-W30" });
    expect(recipientsOf(smtp)).toEqual(["weg@alfa.test"]);

    smtp.received.length = 0;
    expect((await runWeekrapport(env.deps, later)).body).toMatchObject({ verstuurd: 0, fouten: 0, overgeslagen: 3 });
    expect(smtp.received).toEqual([]);

    const nextWeek = new Date(NOW.getTime() + 7 * DAY);
    expect((await runWeekrapport(env.deps, nextWeek)).body).toMatchObject({ verstuurd: 3, overgeslagen: 0, week: "2026-W31" });
    const rows = await env.db.all("SELECT iso_week, count(*) AS n FROM weekly_report_deliveries GROUP BY iso_week ORDER BY iso_week");
    expect(rows).toEqual([
      { iso_week: "2026-W30", n: 3 },
      { iso_week: "2026-W31", n: 3 },
    ]);
  });

  test("delivery records older than 13 weeks are pruned on the next run; the last 13 weeks stay", async () => {
    const { env } = await setup();
    const t = await addTenant(env.db, "Alfa BV");
    const admin = await addAdmin(env.db, t, "anna@alfa.test");
    const ins = (week: string) =>
      env.db.run("INSERT INTO weekly_report_deliveries (administrator_id, tenant_id, iso_week, verstuurd) VALUES (?, ?, ?, '2026-01-01T00:00:00.000Z')", admin, t, week);
    // NOW is in 2026-W30: W18 is the oldest of the 13 weeks kept (W18..W30)
    for (const week of ["2025-W52", "2026-W01", "2026-W17", "2026-W18", "2026-W29"]) await ins(week);
    expect((await runWeekrapport(env.deps, NOW)).body).toMatchObject({ verstuurd: 1 });
    const weeks = (await env.db.all<{ iso_week: string }>("SELECT iso_week FROM weekly_report_deliveries ORDER BY iso_week")).map((r) => r.iso_week);
    expect(weeks).toEqual(["2026-W18", "2026-W29", "2026-W30"]);
  });

  test("after an SMTP outage the rerun delivers exactly the failed messages", async () => {
    const { smtp, env } = await setup();
    const t = await addTenant(env.db, "Alfa BV");
    for (const a of ["a@alfa.test", "b@alfa.test", "c@alfa.test"]) await addAdmin(env.db, t, a);
    // Delivered before the outage.
    expect((await runWeekrapport(env.deps, NOW)).body).toMatchObject({ verstuurd: 3 });
    await addAdmin(env.db, t, "d@alfa.test");
    await addAdmin(env.db, await addTenant(env.db, "Beta BV"), "e@beta.test");

    await smtp.stop();
    await env.deps.mailer.close();
    const down = createMailer({ smtpUrl: smtp.url, from: env.config.mailFrom, outboxDir: env.outboxDir, timeouts: { connection: 2000 } });
    const during = await runWeekrapport({ ...env.deps, mailer: down }, NOW);
    await down.close();
    expect(during).toEqual({ status: 502, body: { verstuurd: 0, fouten: 2, overgeslagen: 3, bezorging: "smtp", week: "2026-W30" } });
    expect(env.alarms.raised.map((a) => a.type)).toEqual(["mail-failure"]);

    const back = await startSmtp();
    toClean.push(() => back.stop());
    const up = createMailer({ smtpUrl: back.url, from: env.config.mailFrom, outboxDir: env.outboxDir });
    toClean.push(() => up.close());
    const after = await runWeekrapport({ ...env.deps, mailer: up }, NOW);
    expect(after.body).toMatchObject({ verstuurd: 2, fouten: 0, overgeslagen: 3 });
    expect(recipientsOf(back)).toEqual(["d@alfa.test", "e@beta.test"]);
  });

  test("many administrators go through the pool with a bounded number in flight", async () => {
    const { smtp, env } = await setup();
    for (let t = 0; t < 10; t++) {
      const id = await addTenant(env.db, `Tenant ${t}`);
      for (let a = 0; a < 6; a++) await addAdmin(env.db, id, `admin${a}@t${t}.test`);
    }
    let inFlight = 0;
    let maxInFlight = 0;
    const real = env.deps.mailer;
    const counting = {
      bezorging: real.bezorging,
      close: () => real.close(),
      async send(m: Parameters<typeof real.send>[0]) {
        maxInFlight = Math.max(maxInFlight, ++inFlight);
        try {
          return await real.send(m);
        } finally {
          inFlight--;
        }
      },
    };
    const r = await runWeekrapport({ ...env.deps, mailer: counting }, NOW);
    expect(r.body).toMatchObject({ verstuurd: 60, fouten: 0 });
    expect(smtp.received).toHaveLength(60);
    expect(maxInFlight).toBeGreaterThan(1);
    expect(maxInFlight).toBeLessThanOrEqual(5);
  });
});

describe("weekrapport: an administrator removed while the run goes on", () => {
  test("one the application removed (deleted: no delivery record named it) before its turn is skipped, not an error", async () => {
    const { smtp, env } = await setup();
    const t = await addTenant(env.db, "Alfa BV");
    for (let a = 1; a <= 6; a++) await addAdmin(env.db, t, `admin${a}@alfa.test`);
    // The first five sends wait at a gate: the run then waits for a slot before admin6's turn.
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    let arrived = 0;
    const real = env.deps.mailer;
    const gated = {
      bezorging: real.bezorging,
      close: () => real.close(),
      async send(m: Parameters<typeof real.send>[0]) {
        arrived++;
        await gate;
        return real.send(m);
      },
    };
    const run = runWeekrapport({ ...env.deps, mailer: gated }, NOW);
    await until("five sends under way", () => arrived === 5);
    // Meanwhile the application's new list leaves admin6 out: deleted, as nothing refers to it yet.
    const put = await call(env.app, `/api/tenants/${t}/beheerders`, {
      method: "PUT",
      token: APP_SECRET,
      body: JSON.stringify({ beheerders: [1, 2, 3, 4, 5].map((a) => ({ naam: `A${a}`, email: `admin${a}@alfa.test`, actief: true })) }),
    });
    expect(put.status).toBe(200);
    expect(await env.db.get("SELECT count(*) AS n FROM administrators WHERE email = 'admin6@alfa.test'")).toEqual({ n: 0 });
    open();
    const r = await run;
    expect(r.body).toMatchObject({ verstuurd: 5, fouten: 0, overgeslagen: 1 });
    expect(smtp.received.map((m) => m.to[0]).sort()).toEqual([1, 2, 3, 4, 5].map((a) => `admin${a}@alfa.test`));
    expect(env.alarms.raised).toEqual([]);
  });
});

describe("weekrapport: the statistics use indexes", () => {
  test("EXPLAIN QUERY PLAN of each statement searches an index, never scans a table: per tenant by (tenant_id, time), logins of every tenant by time", async () => {
    const env = await makeEnv();
    toClean.push(() => env.cleanup());
    const week = { van: "2026-07-16T12:00:00.000Z", tot: "2026-07-23T12:00:00.000Z" };
    if (env.store.kind === "sqlite") {
      const { store } = env;
      const planOf = (statement: { getQuery(): { sql: string; params: unknown[] } }, values: Record<string, string | number>) => {
        const { sql, params } = statement.getQuery();
        const rows = store.sqlite.query(`EXPLAIN QUERY PLAN ${sql}`).all(...(fillPlaceholders(params, values) as (string | number)[])) as { detail: string }[];
        return rows.map((r) => r.detail).join(" | ");
      };
      // weekLogins' statements run on its own connection, whose TEMP schema has the staging tables.
      const report = openReportConnection(store.db);
      toClean.push(async () => report.close());
      const reportPlanOf = (statement: { getQuery(): { sql: string; params: unknown[] } }, values: Record<string, string | number>) => {
        const { sql, params } = statement.getQuery();
        const rows = report.sqlite.query(`EXPLAIN QUERY PLAN ${sql}`).all(...(fillPlaceholders(params, values) as (string | number)[])) as { detail: string }[];
        return rows.map((r) => r.detail).join(" | ");
      };
      const plans = [
        ...Object.entries(weekStatsStatements(store.db)).map(([name, st]) => [name, planOf(st, { tenantId: 1, ...week })] as const),
        ...Object.entries(weekLoginStatements(report.db)).map(
          ([name, st]) => [name, reportPlanOf(st, { tenantId: 1, ...week, t: week.van, id: 0, ip: "", account: "", n: 5, last: 4 })] as const,
        ),
      ];
      for (const [name, plan] of plans) {
        expect({ name, plan }).not.toMatchObject({ plan: expect.stringMatching(/SCAN (audit_entries|login_attempts)/) });
      }
      const byName = Object.fromEntries(plans);
      expect(byName.auditPerActie).toContain("SEARCH audit_entries USING INDEX audit_entries_tenant_created_idx (tenant_id=? AND created_at>? AND created_at<?)");
      expect(byName.boundary).toContain("SEARCH login_attempts USING COVERING INDEX login_attempts_tijdstip_idx (tijdstip>? AND tijdstip<?)");
      expect(byName.counts).toContain("SEARCH login_attempts USING INDEX login_attempts_tijdstip_idx (tijdstip>? AND tijdstip<?)");
      expect(byName.failures).toContain("SEARCH login_attempts USING INDEX login_attempts_failed_idx (tijdstip>? AND tijdstip<?)");
      expect(byName.nextInstant).toContain("SEARCH login_attempts USING COVERING INDEX login_attempts_tijdstip_idx (tijdstip>? AND tijdstip<?)");
      // An instant's pages seek their key in index order (the id is the indexes' rowid) and are never sorted.
      expect(byName.instantCountsEnd).toContain("SEARCH login_attempts USING COVERING INDEX login_attempts_tijdstip_idx (tijdstip=? AND rowid>?)");
      expect(byName.instantCounts).toContain("SEARCH login_attempts USING INDEX login_attempts_tijdstip_idx (tijdstip=? AND rowid>?)");
      for (const [name, index] of [["instantFailuresEnd", "COVERING INDEX"], ["instantFailures", "INDEX"]] as const) {
        expect(byName[name]).toContain("MERGE (UNION ALL)");
        expect(byName[name]).toContain(`SEARCH login_attempts USING ${index} login_attempts_failed_idx (tijdstip=? AND ip=? AND account=? AND rowid>?)`);
        expect(byName[name]).toContain(`SEARCH login_attempts USING ${index} login_attempts_failed_idx (tijdstip=? AND (ip,account)>(?,?))`);
      }
      for (const name of ["boundary", "nextInstant", "instantCountsEnd", "instantCounts", "instantFailuresEnd", "instantFailures"]) {
        expect({ name, plan: byName[name] }).not.toMatchObject({ plan: expect.stringMatching(/FOR (RIGHT PART OF )?ORDER BY/) });
      }
      // A tenant's top five by the rank index, in its order: no sort of the tenant's pairs.
      expect(byName.top).toContain("SEARCH week_failed_pairs USING COVERING INDEX week_failed_pairs_rank (tenant_id=?)");
      expect(byName.top).not.toContain("TEMP B-TREE");
      expect(byName.keten).toMatch(/^SEARCH audit_verification_state USING/);
      // The late section: by the range of stored numbers (what a week stored), never by time (back to the first row).
      const late = { tenantId: 1, na: 10, tot: 20, van: week.van };
      expect(planOf(lateAuditStatement(store.db), late)).toContain("SEARCH audit_entries USING PRIMARY KEY (tenant_id=? AND seq>? AND seq<?)");
      const { next, ...pages } = lateLoginStatements(report.db);
      for (const [name, st] of Object.entries(pages).filter(([name]) => name !== "staged")) {
        expect({ name, plan: reportPlanOf(st, late) }).toMatchObject({ plan: expect.stringContaining("SEARCH login_attempts USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)") });
      }
      // The next page's first id: one step in the rowid order.
      expect(reportPlanOf(next, late)).toContain("SEARCH login_attempts USING INTEGER PRIMARY KEY (rowid>?)");
    } else {
      const { db } = env.store;
      const van = new Date(week.van);
      const tot = new Date(week.tot);
      const statements = { ...weekStatsQueriesPg(db, 1, van, tot), ...weekLoginQueriesPg(db, van, tot) };
      const conn = await env.store.sql.reserve();
      try {
        // On empty tables a sequential scan is cheapest: discouraged, the planner shows the index it can use.
        await conn`SET enable_seqscan = off`;
        // An index scan of the table, or a bitmap scan built from the index.
        const usesIndex = (index: string, table: string) => new RegExp(`Index (Only )?Scan using ${index} on ${table}|Bitmap Index Scan on ${index}\\b`);
        const plans: Record<string, string> = {};
        for (const [name, statement] of Object.entries(statements)) {
          const { sql, params } = statement.toSQL();
          plans[name] = ((await conn.unsafe(`EXPLAIN ${sql}`, params as unknown[])) as { "QUERY PLAN": string }[]).map((r) => r["QUERY PLAN"]).join("\n");
        }
        for (const [name, plan] of Object.entries(plans)) {
          expect({ name, plan }).not.toMatchObject({ plan: expect.stringMatching(/Seq Scan on (audit_entries|login_attempts|audit_verification_state)/) });
        }
        expect(plans.auditPerActie).toMatch(usesIndex("audit_entries_tenant_created_idx", "audit_entries"));
        expect(plans.auditPerActie).toContain(`Index Cond: ((tenant_id = 1) AND (created_at >= '${week.van}'::text) AND (created_at < '${week.tot}'::text))`);
        expect(plans.perTenant).toMatch(usesIndex("login_attempts_tijdstip_idx", "login_attempts"));
        expect(plans.perTenant).toContain(`Index Cond: ((tijdstip >= '${week.van}'::text) AND (tijdstip < '${week.tot}'::text))`);
        expect(plans.mislukt).toMatch(usesIndex("login_attempts_failed_idx", "login_attempts"));
        expect(plans.mislukt).toContain(`Index Cond: ((tijdstip >= '${week.van}'::text) AND (tijdstip < '${week.tot}'::text))`);
        expect(plans.keten).toMatch(usesIndex("audit_verification_state_pkey", "audit_verification_state"));
        // The late section: by the range of stored numbers, never by time. With rows and their
        // statistics: on empty tables the planner has no reason to prefer one index to another.
        const t = await addTenant(env.db, "Plan BV");
        expect(t).toBe(1);
        await fillChain(env.store, t, 2000, { at: (i) => new Date(van.getTime() - (2000 - i) * 60_000) });
        await conn`INSERT INTO login_attempts (tijdstip, account, ip, gelukt, tenant_id)
          SELECT to_char(timestamp '2026-07-01' + i * interval '1 minute', 'YYYY-MM-DD"T"HH24:MI:SS.000"Z"'), 'a', '10.0.0.' || (i % 200), i % 2 = 0, 1 FROM generate_series(1, 2000) AS i`;
        await conn`ANALYZE audit_entries`;
        await conn`ANALYZE login_attempts`;
        const late = { lateAudit: lateAuditQueryPg(db, 1, { na: 10, tot: 20 }, van), lateLogins: lateLoginsQueryPg(db, { na: 10, tot: 20 }, van) };
        for (const [name, statement] of Object.entries(late)) {
          const { sql, params } = statement.toSQL();
          plans[name] = ((await conn.unsafe(`EXPLAIN ${sql}`, params as unknown[])) as { "QUERY PLAN": string }[]).map((r) => r["QUERY PLAN"]).join("\n");
        }
        expect(plans.lateAudit).toMatch(usesIndex("audit_entries_tenant_id_seq_pk", "audit_entries"));
        expect(plans.lateAudit).toContain("Index Cond: ((tenant_id = 1) AND (seq > 10) AND (seq <= 20))");
        expect(plans.lateLogins).toMatch(usesIndex("login_attempts_pkey", "login_attempts"));
        expect(plans.lateLogins).toContain("Index Cond: ((id > 10) AND (id <= 20))");
      } finally {
        conn.release();
      }
    }
  });
});

describe("weekLogins: every tenant's week in one pass", () => {
  test("counts per tenant inside [van, tot) only (across its day slices), the top five failing IPs by count then address, no tenant's attempts in another's figures", async () => {
    const env = await makeEnv();
    toClean.push(() => env.cleanup());
    // The store's own queries, as weekrapport takes them (SQLite reads the week a page of attempts at a time).
    const q = env.store.kind === "pg" ? weeklyQueriesPg(env.store, TEST_SEAL, env.config) : weeklyQueries(env.store.db, TEST_SEAL, env.config);
    const a = await addTenant(env.db, "A");
    const b = await addTenant(env.db, "B");
    const c = await addTenant(env.db, "C");
    const van = new Date(NOW.getTime() - WEEK_MS);
    const at = (msAgo: number) => new Date(NOW.getTime() - msAgo);
    const login = (tenantId: number | null, ip: string, gelukt: boolean, when = at(3600_000)) => addLoginAttempt(env.db, { tenantId, account: "x", ip, gelukt, tijdstip: when });
    // Tenant a: 3 successes, failures from seven IPs (counts 4,3,3,2,2,1,1), one before the week, one at tot.
    for (let i = 0; i < 3; i++) await login(a, "10.0.0.1", true);
    const failures: [string, number][] = [["10.0.0.9", 4], ["10.0.0.3", 3], ["10.0.0.2", 3], ["10.0.0.5", 2], ["10.0.0.4", 2], ["10.0.0.7", 1], ["10.0.0.6", 1]];
    for (const [ip, n] of failures) for (let i = 0; i < n; i++) await login(a, ip, false);
    await login(a, "10.0.0.8", false, new Date(van.getTime() - 1));
    await login(a, "10.0.0.8", false, NOW);
    await login(a, "10.0.0.1", true, van);
    // Tenant b: one failure; attempts without a tenant belong to nobody's report.
    await login(b, "192.0.2.1", false);
    await login(null, "10.0.0.9", false);
    const logins = await q.weekLogins(van, NOW);
    expect(logins.get(a)).toEqual({
      totaal: 20,
      gelukt: 4,
      mislukt: 16,
      mislukteIps: 7,
      topMislukteIps: [
        { ip: "10.0.0.9", aantal: 4 },
        { ip: "10.0.0.2", aantal: 3 },
        { ip: "10.0.0.3", aantal: 3 },
        { ip: "10.0.0.4", aantal: 2 },
        { ip: "10.0.0.5", aantal: 2 },
      ],
    });
    expect(logins.get(b)).toEqual({ totaal: 1, gelukt: 0, mislukt: 1, mislukteIps: 1, topMislukteIps: [{ ip: "192.0.2.1", aantal: 1 }] });
    expect(logins.has(c)).toBe(false);
    expect((await q.tenantWeekStats(c, van, NOW, logins, NOW)).inlog).toEqual({ totaal: 0, gelukt: 0, mislukt: 0, mislukteIps: 0, topMislukteIps: [] });
  });
});

describe("weekLogins: a bounded number of attempts per statement, whatever their instants", () => {
  test("pages of 1 to 7 attempts give the week-wide figures: bursts at one instant from one ip and account across page boundaries, the window's first and last instant and just outside; no staging statement takes more than a page", async () => {
    const env = await makeEnv();
    toClean.push(() => env.cleanup());
    const a = await addTenant(env.db, "A");
    const b = await addTenant(env.db, "B");
    const van = new Date(NOW.getTime() - WEEK_MS);
    const ms = (d: Date, delta: number) => new Date(d.getTime() + delta);
    const burst = ms(van, 3 * DAY);
    type Attempt = { tenantId: number | null; ip: string; account: string; gelukt: boolean; tijdstip: Date };
    const attempts: Attempt[] = [];
    const add = (count: number, a: Omit<Attempt, "tijdstip">, tijdstip: Date) => {
      for (let i = 0; i < count; i++) attempts.push({ ...a, tijdstip });
    };
    // The burst: one instant, the same ip and account many times over, other accounts and
    // addresses between (in the index: the same ip, account "x" and "y"), another tenant's
    // and nobody's, successes; then the instant 1 ms later.
    add(23, { tenantId: a, ip: "10.0.0.1", account: "x", gelukt: false }, burst);
    add(9, { tenantId: a, ip: "10.0.0.1", account: "y", gelukt: false }, burst);
    add(11, { tenantId: b, ip: "10.0.0.1", account: "x", gelukt: false }, burst);
    add(4, { tenantId: null, ip: "10.0.0.3", account: "x", gelukt: false }, burst);
    add(6, { tenantId: a, ip: "10.0.0.1", account: "x", gelukt: true }, burst);
    for (let i = 1; i <= 13; i++) add(1, { tenantId: a, ip: `2001:db8::${i}`, account: "x", gelukt: false }, burst);
    add(2, { tenantId: a, ip: "10.0.0.2", account: "x", gelukt: false }, ms(burst, 1));
    // The window's edges, each an instant with more attempts than a small page: its first
    // and last instant count, the instant before and tot itself do not.
    add(8, { tenantId: a, ip: "10.0.0.4", account: "x", gelukt: false }, van);
    add(3, { tenantId: b, ip: "10.0.0.4", account: "x", gelukt: true }, van);
    add(8, { tenantId: a, ip: "10.0.0.5", account: "x", gelukt: false }, ms(NOW, -1));
    add(9, { tenantId: a, ip: "10.0.0.6", account: "x", gelukt: false }, ms(van, -1));
    add(9, { tenantId: a, ip: "10.0.0.6", account: "x", gelukt: false }, NOW);
    // Attempts spread over the week, of addresses the burst has too.
    for (let h = 1; h < 150; h += 7) add(1, { tenantId: a, ip: h % 2 ? "10.0.0.3" : "2001:db8::5", account: "z", gelukt: h % 3 === 0 }, ms(van, h * 3600_000));
    // Interleaved, so the ids of one ip and account are not consecutive.
    const order = attempts.map((_, i) => i).sort((x, y) => ((x * 7919) % attempts.length) - ((y * 7919) % attempts.length));
    for (const i of order) await addLoginAttempt(env.db, attempts[i]!);

    // The figures as the report defines them, straight from the attempts.
    const expected = new Map<number, TenantWeekLogins>();
    const inWeek = attempts.filter((x) => x.tenantId !== null && x.tijdstip >= van && x.tijdstip < NOW);
    for (const tenantId of new Set(inWeek.map((x) => x.tenantId!))) {
      const own = inWeek.filter((x) => x.tenantId === tenantId);
      const perIp = new Map<string, number>();
      for (const x of own) if (!x.gelukt) perIp.set(x.ip, (perIp.get(x.ip) ?? 0) + 1);
      const gelukt = own.filter((x) => x.gelukt).length;
      expected.set(tenantId, {
        totaal: own.length,
        gelukt,
        mislukt: own.length - gelukt,
        mislukteIps: perIp.size,
        topMislukteIps: [...perIp]
          .sort(([ipX, x], [ipY, y]) => y - x || (ipX < ipY ? -1 : 1))
          .slice(0, TOP_IPS)
          .map(([ip, aantal]) => ({ ip, aantal })),
      });
    }
    // The burst's ip over its two accounts leads; 13 of the burst's addresses fail once, ::5 more often.
    expect(expected.get(a)?.topMislukteIps[0]).toEqual({ ip: "10.0.0.1", aantal: 32 });
    expect(expected.get(a)?.mislukteIps).toBe(18);

    // The week-wide answer: PostgreSQL's one statement, SQLite's in one step.
    const q = env.store.kind === "pg" ? weeklyQueriesPg(env.store, TEST_SEAL, env.config) : weeklyQueries(env.store.db, TEST_SEAL, env.config);
    expect(await q.weekLogins(van, NOW)).toEqual(expected);
    if (env.store.kind !== "sqlite") return; // PostgreSQL's statements wait on the server, not the event loop.
    const { db } = env.store;
    expect(await weekLogins(db, van, NOW, 1_000_000)).toEqual(expected);

    // Every staging statement, from every connection, with what it added to the staged
    // attempts: the counts' totaal and the failures' aantal.
    let page = 0;
    const staged: { statement: string; attempts: number }[] = [];
    const prepare = Database.prototype.prepare;
    Database.prototype.prepare = function (this: Database, ...args: Parameters<Database["prepare"]>) {
      const statement = prepare.apply(this, args);
      const table = /^insert into "(week_counts|week_failed_pairs)"/.exec(statement.toString())?.[1];
      if (table === undefined) return statement;
      const sum = table === "week_counts" ? "totaal" : "aantal";
      const total = prepare.call(this, `SELECT coalesce(sum(${sum}), 0) AS n FROM ${table}`);
      // Finalized with the test's end: an open statement keeps its closed connection (and TEMP file) open.
      toClean.push(async () => total.finalize());
      const run = statement.run;
      (statement as { run: unknown }).run = (...a: unknown[]) => {
        const before = (total.get() as { n: number }).n;
        const result = run.apply(statement, a as never);
        staged.push({ statement: statement.toString(), attempts: (total.get() as { n: number }).n - before });
        return result;
      };
      return statement;
    } as Database["prepare"];
    try {
      for (page of [1, 2, 3, 5, 7]) {
        staged.length = 0;
        // A fresh connection prepares the statements anew, so they are the wrapped ones.
        expect({ page, logins: await weekLogins(db, van, NOW, page) }).toEqual({ page, logins: expected });
        expect(staged.length).toBeGreaterThan(0);
        for (const s of staged) expect({ page, ...s, fits: s.attempts <= page }).toEqual({ page, ...s, fits: true });
      }
    } finally {
      Database.prototype.prepare = prepare;
    }
  });
});

describe("weekLogins on SQLite: its own connection is closed when it is done", () => {
  test("its TEMP file of staged pairs does not outlive the run (bun leaves a connection with unfinalized statements open, with that file)", async () => {
    const env = await makeEnv();
    toClean.push(() => env.cleanup());
    if (env.store.kind !== "sqlite") return; // PostgreSQL opens no second connection.
    const q = weeklyQueries(env.store.db, TEST_SEAL, env.config);
    const a = await addTenant(env.db, "A");
    // More pairs than SQLite's 2 MB cache of the TEMP schema holds: the staging spills to its file.
    const insert = env.store.sqlite.prepare("INSERT INTO login_attempts (tijdstip, account, ip, gelukt, reden, tenant_id) VALUES (?, 'x', ?, 0, NULL, ?)");
    const at = new Date(NOW.getTime() - 3600_000).toISOString();
    env.store.sqlite.transaction(() => {
      for (let k = 0; k < 80_000; k++) insert.run(at, `2001:db8::${k.toString(16)}`, a);
    })();
    insert.finalize();
    const deleted = () =>
      readdirSync("/proc/self/fd")
        .map((fd) => {
          try {
            return readlinkSync(`/proc/self/fd/${fd}`);
          } catch {
            return "";
          }
        })
        .filter((link) => link.endsWith("(deleted)"));
    const before = deleted();
    for (let run = 0; run < 2; run++) expect((await q.weekLogins(new Date(NOW.getTime() - WEEK_MS), NOW)).get(a)!.mislukteIps).toBe(80_000);
    // Other tests' files may close meanwhile: no new one is left.
    expect(deleted().filter((link) => !before.includes(link))).toEqual([]);
  });
});

describe("weekrapport: only what the report shows leaves the database", () => {
  test("500,000 distinct failed IPs of one tenant and 300,000 distinct actions: TOP_IPS rows per tenant and MAX_ACTIES action rows reach JavaScript; the week's distinct IPs, top five (ties by address) and the rest row stay exact", async () => {
    const env = await makeEnv();
    toClean.push(() => env.cleanup());
    const q = env.store.kind === "pg" ? weeklyQueriesPg(env.store, TEST_SEAL, env.config) : weeklyQueries(env.store.db, TEST_SEAL, env.config);
    const a = await addTenant(env.db, "A");
    const b = await addTenant(env.db, "B");
    const van = new Date(NOW.getTime() - WEEK_MS);
    const day = (n: number) => new Date(NOW.getTime() - n * DAY - 3600_000).toISOString();
    // An attacker rotating addresses of one IPv6 /64: one failure each from 2001:db8::1 .. ::500000, over three days.
    const N = 500_000;
    await env.db.run(
      `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${N})
       INSERT INTO login_attempts (tijdstip, account, ip, gelukt, tenant_id)
       SELECT CASE i % 3 WHEN 0 THEN CAST(? AS text) WHEN 1 THEN CAST(? AS text) ELSE CAST(? AS text) END, 'x', '2001:db8::' || i, false, CAST(? AS integer) FROM n`,
      day(1),
      day(2),
      day(3),
      a,
    );
    // More failures of some of those addresses on a fourth day: counted per address over the
    // week (::7 4 times; ::30 and ::4 3 times, ::10, ::100 and ::9 twice: ties by address, byte order).
    const more: [string, number][] = [["2001:db8::7", 3], ["2001:db8::4", 2], ["2001:db8::30", 2], ["2001:db8::9", 1], ["2001:db8::100", 1], ["2001:db8::10", 1]];
    for (const [ip, n] of more) for (let i = 0; i < n; i++) await addLoginAttempt(env.db, { tenantId: a, account: "x", ip, gelukt: false, tijdstip: day(5) });
    // Not in a's figures: before the week, another tenant's, nobody's.
    await addLoginAttempt(env.db, { tenantId: a, account: "x", ip: "2001:db8:ffff::1", gelukt: false, tijdstip: new Date(van.getTime() - 1) });
    for (let i = 0; i < 2; i++) await addLoginAttempt(env.db, { tenantId: b, account: "x", ip: "2001:db8::7", gelukt: false, tijdstip: day(4) });
    await addLoginAttempt(env.db, { tenantId: b, account: "x", ip: "2001:db8::7", gelukt: true, tijdstip: day(4) });
    await addLoginAttempt(env.db, { tenantId: null, account: "x", ip: "2001:db8::8", gelukt: false, tijdstip: day(4) });

    // 300,000 actions the application made up, once each; three more frequent ones (a tie among them).
    const M = 300_000;
    await env.db.run(
      `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${M})
       INSERT INTO audit_entries (tenant_id, seq, id, created_at, actor, action, subject, details, prev_hash, hash)
       SELECT CAST(? AS integer), i, i, CAST(? AS text), 'x', 'actie.' || i, 's', '{}', '', '' FROM n`,
      a,
      day(2),
    );
    const frequent: [string, number][] = [["dossier.bekeken", 4], ["b.gelijk", 3], ["a.gelijk", 3]];
    let seq = M;
    for (const [action, n] of frequent) {
      for (let i = 0; i < n; i++) {
        seq++;
        await env.db.run(
          "INSERT INTO audit_entries (tenant_id, seq, id, created_at, actor, action, subject, details, prev_hash, hash) VALUES (?, ?, ?, ?, 'x', ?, 's', '{}', '', '')",
          a,
          seq,
          seq,
          day(2),
          action,
        );
      }
    }

    // What reaches JavaScript: the statements' rows.
    const week = { van: van.toISOString(), tot: NOW.toISOString() };
    const [failureRows, actionRowsRead] =
      env.store.kind === "pg"
        ? await (async (db) => [await weekLoginQueriesPg(db, van, NOW).mislukt, await weekStatsQueriesPg(db, a, van, NOW).auditPerActie])(env.store.db)
        : await (async (db) => {
            const report = openReportConnection(db);
            try {
              await stageWeek(report, van, NOW);
              return [stagedWeek(report).failures, weekStatsStatements(db).auditPerActie.all({ tenantId: a, ...week })];
            } finally {
              report.close();
            }
          })(env.store.db);
    expect(failureRows.filter((r) => r.tenantId === a)).toHaveLength(TOP_IPS);
    expect(failureRows.filter((r) => r.tenantId === b)).toHaveLength(1);
    expect(failureRows).toHaveLength(TOP_IPS + 1);
    expect(actionRowsRead).toHaveLength(MAX_ACTIES);

    const logins = await q.weekLogins(van, NOW);
    expect(logins.get(a)).toEqual({
      totaal: N + 10,
      gelukt: 0,
      mislukt: N + 10,
      // The week's distinct addresses, not the sum of its days' (that would be N + 6).
      mislukteIps: N,
      topMislukteIps: [
        { ip: "2001:db8::7", aantal: 4 },
        { ip: "2001:db8::30", aantal: 3 },
        { ip: "2001:db8::4", aantal: 3 },
        { ip: "2001:db8::10", aantal: 2 },
        { ip: "2001:db8::100", aantal: 2 },
      ],
    });
    expect(logins.get(b)).toEqual({ totaal: 3, gelukt: 1, mislukt: 2, mislukteIps: 1, topMislukteIps: [{ ip: "2001:db8::7", aantal: 2 }] });

    const { audit } = await q.tenantWeekStats(a, van, NOW, logins, NOW);
    const onceEach = Array.from({ length: M }, (_, i) => `actie.${i + 1}`).sort().slice(0, MAX_ACTIES - 1 - frequent.length);
    expect(audit).toEqual({
      totaal: M + 10,
      perActie: [
        { actie: "dossier.bekeken", aantal: 4 },
        { actie: "a.gelijk", aantal: 3 },
        { actie: "b.gelijk", aantal: 3 },
        ...onceEach.map((actie) => ({ actie, aantal: 1 })),
        { actie: `(${M + 3 - (MAX_ACTIES - 1)} andere acties)`, aantal: M + 10 - 10 - onceEach.length },
      ],
    });
  });
});

/**
 * An SMTP server that takes the whole message of the recipients in `holdFor` (it is
 * delivered: counted in `received` when its data ends) but never answers the final ".",
 * as a server does whose "250" is late or lost; the others it answers at once.
 */
async function slowAckSmtp(holdFor: ReadonlySet<string>) {
  const received: string[] = [];
  const server = new SMTPServer({
    authOptional: true,
    disableReverseLookup: true,
    hideSTARTTLS: true,
    closeTimeout: 200,
    logger: false,
    onData(stream, session, callback) {
      stream.on("data", () => {});
      stream.on("end", () => {
        const to = session.envelope.rcptTo.map((r) => r.address);
        received.push(...to);
        if (!to.some((a) => holdFor.has(a))) callback();
      });
    },
  });
  // The client gives up on a held message and drops its connection: expected here.
  server.on("error", () => {});
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  const port = (server.server.address() as { port: number }).port;
  const stop = () => new Promise<void>((r) => server.close(() => r()));
  toClean.push(stop);
  return { url: `smtp://127.0.0.1:${port}`, received };
}

/** The real mailer on `url`, with the timeouts a test can wait for; closed after the test. */
function mailerFor(env: Env & { outboxDir: string }, url: string, timeouts = { connection: 2000, greeting: 2000, socket: 500 }): Mailer {
  const mailer = createMailer({ smtpUrl: url, from: env.config.mailFrom, outboxDir: env.outboxDir, timeouts });
  toClean.push(() => mailer.close());
  return mailer;
}

/** `mailer` with `before` run as each send starts (with its number, from 1). */
function wrapped(mailer: Mailer, before: (n: number) => void | Promise<void>): Mailer & { started: number; settled: number } {
  const w = {
    bezorging: mailer.bezorging,
    started: 0,
    settled: 0,
    close: () => mailer.close(),
    async send(m: MailMessage) {
      try {
        await before(++w.started);
        return await mailer.send(m);
      } finally {
        w.settled++;
      }
    },
  };
  return w;
}

describe("weekrapport: a send whose outcome is not known is not repeated", () => {
  test("the server took the whole message but its answer to the final '.' never came (socket timeout): onzeker, not fout; the rerun does not send it again", async () => {
    const { env } = await setup();
    const smtp = await slowAckSmtp(new Set(["traag@alfa.test"]));
    const mailer = mailerFor(env, smtp.url);
    const t = await addTenant(env.db, "Alfa BV");
    await addAdmin(env.db, t, "traag@alfa.test");
    await addAdmin(env.db, t, "snel@alfa.test");
    const deps: Deps = { ...env.deps, mailer };

    const first = await runWeekrapport(deps, NOW);
    expect(first).toEqual({ status: 409, body: { verstuurd: 1, fouten: 0, overgeslagen: 0, onzeker: 1, bezorging: "smtp", week: "2026-W30" } });
    expect([...smtp.received].sort()).toEqual(["snel@alfa.test", "traag@alfa.test"]);
    expect(env.alarms.raised).toHaveLength(1);
    const alarm = env.alarms.raised[0]!;
    expect(alarm).toMatchObject({ type: "mail-failure", context: { week: "2026-W30", aantal: 1 }, personal: { context: { onzeker: [{ adres: "traag@alfa.test", tenantId: t, week: "2026-W30" }] } } });
    expect((forOperator(alarm).context as { onzeker: { fout: string }[] }).onzeker[0]!.fout).toContain("Timeout");
    expect(alarm.message).toContain("DELETE FROM weekly_report_deliveries WHERE iso_week = '2026-W30' AND verstuurd = 'verzenden'");
    expect(await env.db.all("SELECT verstuurd FROM weekly_report_deliveries WHERE administrator_id = (SELECT id FROM administrators WHERE email = ?)", "traag@alfa.test")).toEqual([
      { verstuurd: "verzenden" },
    ]);

    // An hour later, the same week: nothing is sent again, the uncertain one is named again.
    const rerun = await runWeekrapport(deps, new Date(NOW.getTime() + 3600_000));
    expect(rerun).toEqual({ status: 409, body: { verstuurd: 0, fouten: 0, overgeslagen: 2, onzeker: 1, bezorging: "smtp", week: "2026-W30" } });
    expect([...smtp.received].sort()).toEqual(["snel@alfa.test", "traag@alfa.test"]);
  });

  test("a server that never sends its greeting: the message certainly did not leave, so it is a fout and the rerun sends it", async () => {
    const { smtp, env } = await setup();
    const silent = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
    toClean.push(async () => void silent.stop(true));
    await addAdmin(env.db, await addTenant(env.db, "Alfa BV"), "anna@alfa.test");

    const mute = mailerFor(env, `smtp://127.0.0.1:${silent.port}`, { connection: 2000, greeting: 300, socket: 500 });
    const during = await runWeekrapport({ ...env.deps, mailer: mute }, NOW);
    expect(during.body).toEqual({ verstuurd: 0, fouten: 1, overgeslagen: 0, bezorging: "smtp", week: "2026-W30" });
    expect((forOperator(env.alarms.raised[0]!).context as { mislukt: { fout: string }[] }).mislukt[0]!.fout).toContain("Greeting never received");

    expect((await runWeekrapport(env.deps, NOW)).body).toMatchObject({ verstuurd: 1, fouten: 0, overgeslagen: 0 });
    expect(recipientsOf(smtp)).toEqual(["anna@alfa.test"]);
  });

  for (const [stage, at] of [
    ["RCPT TO", /^RCPT /i],
    ["DATA (before its 354)", /^DATA/i],
  ] as const) {
    test(`a server that drops the connection at ${stage}: the message never left, so it is a fout and the rerun sends it`, async () => {
      const { smtp, env } = await setup();
      // Answers EHLO and MAIL FROM as a server does, then closes the connection at `stage`.
      const dropping = Bun.listen({
        hostname: "127.0.0.1",
        port: 0,
        socket: {
          open: (c) => void c.write("220 test ESMTP\r\n"),
          data(c, d) {
            for (const line of d.toString().split("\r\n").filter(Boolean)) {
              // A moment later, as a busy server would: the client has built the message by then.
              if (at.test(line)) return void setTimeout(() => c.end(), 100);
              c.write(/^EHLO/i.test(line) ? "250-test\r\n250 8BITMIME\r\n" : "250 ok\r\n");
            }
          },
        },
      });
      toClean.push(async () => void dropping.stop(true));
      await addAdmin(env.db, await addTenant(env.db, "Alfa BV"), "anna@alfa.test");

      const during = await runWeekrapport({ ...env.deps, mailer: mailerFor(env, `smtp://127.0.0.1:${dropping.port}`) }, NOW);
      expect(during.body).toEqual({ verstuurd: 0, fouten: 1, overgeslagen: 0, bezorging: "smtp", week: "2026-W30" });
      expect(await env.db.all("SELECT verstuurd FROM weekly_report_deliveries")).toEqual([]);
      expect((await runWeekrapport(env.deps, NOW)).body).toMatchObject({ verstuurd: 1, fouten: 0, overgeslagen: 0 });
      expect(recipientsOf(smtp)).toEqual(["anna@alfa.test"]);
    });
  }
});

describe("weekrapport: a database write failing in the middle of the run", () => {
  test("the run ends only after its messages under way, none of them rejects unhandled, and the message sent but not recorded is onzeker, named in the alarm", async () => {
    const { smtp, env } = await setup();
    const t = await addTenant(env.db, "Alfa BV");
    await addAdmin(env.db, t, "anna@alfa.test");
    const piet = await addAdmin(env.db, t, "piet@alfa.test");
    // The database refuses two writes ("disk full"): the reservation of piet's message, and
    // recording any message as accepted. So anna's message is under way when the run fails.
    if (env.dialect === "sqlite") {
      await env.db.run(`CREATE TRIGGER vol_reserveren BEFORE INSERT ON weekly_report_deliveries WHEN NEW.administrator_id = ${piet} BEGIN SELECT RAISE(ABORT, 'schijf vol'); END`);
      await env.db.run("CREATE TRIGGER vol_vastleggen BEFORE UPDATE ON weekly_report_deliveries BEGIN SELECT RAISE(ABORT, 'schijf vol'); END");
    } else {
      await env.db.run("CREATE FUNCTION schijf_vol() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'schijf vol'; END $$");
      await env.db.run(`CREATE TRIGGER vol_reserveren BEFORE INSERT ON weekly_report_deliveries FOR EACH ROW WHEN (NEW.administrator_id = ${piet}) EXECUTE FUNCTION schijf_vol()`);
      await env.db.run("CREATE TRIGGER vol_vastleggen BEFORE UPDATE ON weekly_report_deliveries FOR EACH ROW EXECUTE FUNCTION schijf_vol()");
    }
    const mailer = wrapped(env.deps.mailer, () => {});
    const unhandled: unknown[] = [];
    const onUnhandled = (e: unknown) => void unhandled.push(e);
    process.on("unhandledRejection", onUnhandled);
    toClean.push(async () => void process.off("unhandledRejection", onUnhandled));

    const outcome = await runWeekrapport({ ...env.deps, mailer }, NOW).then(
      (r) => ({ r, e: null }),
      (e: unknown) => ({ r: null, e }),
    );
    // The reservation of the second message failed: the run fails, but only once the first message is done.
    expect(outcome.r).toBeNull();
    expect(errorText(outcome.e)).toContain("schijf vol");
    expect({ started: mailer.started, settled: mailer.settled }).toEqual({ started: 1, settled: 1 });
    expect(recipientsOf(smtp)).toEqual(["anna@alfa.test"]);
    expect(env.alarms.raised).toHaveLength(1);
    expect(env.alarms.raised[0]).toMatchObject({ type: "mail-failure", context: { week: "2026-W30", aantal: 1 }, personal: { context: { onzeker: [{ adres: "anna@alfa.test", week: "2026-W30" }] } } });
    expect((forOperator(env.alarms.raised[0]!).context as { onzeker: { fout: string }[] }).onzeker[0]!.fout).toContain("niet vastgelegd");
    expect(unhandled).toEqual([]);
  });
});

describe("weekrapport: the week is that of the scheduled time", () => {
  test("a catch-up call on Monday for the missed Sunday sends that week's report; the next Sunday sends the next week's", async () => {
    const { smtp, env } = await setup();
    await addAdmin(env.db, await addTenant(env.db, "Alfa BV"), "anna@alfa.test");

    const monday = await runWeekrapport(env.deps, new Date("2026-07-27T08:00:00.000Z"));
    expect(monday.body).toEqual({ verstuurd: 1, fouten: 0, overgeslagen: 0, bezorging: "smtp", week: "2026-W30" });
    // The seven days up to Sunday 18:00 UTC (20:00 in the report's time zone), not up to the call.
    expect(smtp.received[0]!.text).toContain("van 19/07/2026 20:00 tot 26/07/2026 20:00");
    expect(smtp.received[0]!.subject).toMatch(/^Weekrapport week 30: .* — Alfa BV$/);

    const sunday = await runWeekrapport(env.deps, new Date("2026-08-02T18:00:00.000Z"));
    expect(sunday.body).toEqual({ verstuurd: 1, fouten: 0, overgeslagen: 0, bezorging: "smtp", week: "2026-W31" });
    expect(smtp.received[1]!.text).toContain("van 26/07/2026 20:00 tot 02/08/2026 20:00");
  });

  test("a catch-up call on Monday shows the chain as the night's audit-verificatie found it, after the Sunday the report ends on", async () => {
    const { smtp, env } = await setup();
    const t = await addTenant(env.db, "Alfa BV");
    await addAdmin(env.db, t, "anna@alfa.test");
    // Checked at Monday 01:00, after the report's Sunday 18:00 end, before the call.
    const checked = "2026-07-27T01:00:05.000Z";
    await env.db.run(
      "INSERT INTO audit_verification_state (tenant_id, gecontroleerd, intact, aantal_entries, zegel) VALUES (?, ?, ?, 8, ?)",
      t,
      checked,
      true,
      stateZegel({ tenantId: t, gecontroleerd: checked, intact: true, aantalEntries: 8 }),
    );
    const monday = await runWeekrapport(env.deps, new Date("2026-07-27T08:00:00.000Z"));
    expect(monday.body).toMatchObject({ verstuurd: 1, week: "2026-W30" });
    expect(smtp.received[0]!.text).toMatch(/Uitkomst\s+Intact/);
    expect(smtp.received[0]!.text).not.toContain("nog nooit gecontroleerd");
  });

  test("sends left uncertain by a run of an earlier week are reported by later weeks' runs, until the alarm's advice resolves them", async () => {
    const { env } = await setup();
    const t = await addTenant(env.db, "Alfa BV");
    const anna = await addAdmin(env.db, t, "anna@alfa.test");
    // A run of week 29 killed after its reservation: nobody ran weekrapport again that week.
    await env.db.run("INSERT INTO weekly_report_deliveries (administrator_id, tenant_id, iso_week, verstuurd) VALUES (?, ?, '2026-W29', 'verzenden')", anna, t);

    const r = await runWeekrapport(env.deps, NOW);
    expect(r.body).toEqual({ verstuurd: 1, fouten: 0, overgeslagen: 0, onzeker: 1, bezorging: "smtp", week: "2026-W30" });
    expect(env.alarms.raised).toHaveLength(1);
    const alarm = env.alarms.raised[0]!;
    expect(forOperator(alarm).context).toMatchObject({ week: "2026-W30", aantal: 1, onzeker: [{ adres: "anna@alfa.test", tenantId: t, week: "2026-W29" }] });
    const advice = /DELETE FROM weekly_report_deliveries WHERE iso_week IN \([^)]*\) AND verstuurd = 'verzenden'/.exec(alarm.message);
    expect(advice?.[0]).toBe("DELETE FROM weekly_report_deliveries WHERE iso_week IN ('2026-W29') AND verstuurd = 'verzenden'");

    await env.db.run(advice![0]);
    expect((await runWeekrapport(env.deps, NOW)).body).toEqual({ verstuurd: 0, fouten: 0, overgeslagen: 1, bezorging: "smtp", week: "2026-W30" });
    expect(env.alarms.raised).toHaveLength(1);
  });
});

describe("weekrapport: shutdown", () => {
  test("once shutdown began no new message starts; the one under way is finished and recorded, the call is answered 503, and the rerun sends the rest", async () => {
    const smtp = await startSmtp();
    const running = new RunningJobs();
    const env = await makeMailEnv({ SMTP_URL: smtp.url }, (e) => makeEnv(e, { running }));
    toClean.push(() => smtp.stop(), () => env.cleanup());
    env.setNow(NOW);
    const t = await addTenant(env.db, "Alfa BV");
    for (const a of ["a@alfa.test", "b@alfa.test", "c@alfa.test"]) await addAdmin(env.db, t, a);
    const real = env.deps.mailer;
    // SIGTERM as the first message starts (src/server.ts shutdown: running.close()).
    env.deps.mailer = wrapped(real, (n) => {
      if (n === 1) running.close();
    });

    const res = await call(env.app, "/api/cron/weekrapport");
    expect(res.status).toBe(503);
    expect(res.json.error).toContain("weekrapport 2026-W30 begon geen nieuwe berichten meer");
    expect(recipientsOf(smtp)).toEqual(["a@alfa.test"]);
    const rows = await env.db.all<{ email: string; verstuurd: string }>(
      "SELECT a.email, d.verstuurd FROM weekly_report_deliveries d JOIN administrators a ON a.id = d.administrator_id",
    );
    expect(rows).toEqual([{ email: "a@alfa.test", verstuurd: NOW.toISOString() }]);
    expect(await env.db.all("SELECT uitkomst, http_status FROM job_runs WHERE job = 'weekrapport'")).toEqual([{ uitkomst: "fout", http_status: 503 }]);
    // It ended (nothing of it runs on): its lease is released, so the other instance may run it at once.
    expect(await env.db.all("SELECT job FROM job_leases WHERE job = 'weekrapport'")).toEqual([]);

    // After the restart.
    env.deps.mailer = real;
    expect((await runWeekrapport(env.deps, NOW)).body).toEqual({ verstuurd: 2, fouten: 0, overgeslagen: 1, bezorging: "smtp", week: "2026-W30" });
    expect(recipientsOf(smtp)).toEqual(["a@alfa.test", "b@alfa.test", "c@alfa.test"]);
  });
});

describe("weekrapport: what arrived late", () => {
  /** The section "Laat binnengekomen" of a message's text part, or null when it has none. */
  function lateSection(m: { text: string }): string | null {
    // The text part writes headings in capitals.
    const at = m.text.indexOf("LAAT BINNENGEKOMEN");
    if (at < 0) return null;
    return m.text.slice(at, m.text.indexOf("U ontvangt dit bericht", at)).replace(/\s+/g, " ");
  }
  const W28 = ago(14 * DAY);
  const W29 = ago(7 * DAY);
  const W31 = new Date(NOW.getTime() + 7 * DAY);

  test("entries and failed logins dated before the week but stored after the previous report are in the next report's late section, once; a rerun of the week shows the same; nothing late, no section", async () => {
    const { smtp, env } = await setup();
    const a = await addTenant(env.db, "Alfa BV");
    const b = await addTenant(env.db, "Beta BV");
    await addAdmin(env.db, a, "anna@alfa.test");
    await addAdmin(env.db, a, "bert@alfa.test");
    await addAdmin(env.db, b, "bea@beta.test");
    const mailOf = (to: string, from: number) => smtp.received.slice(from).find((m) => m.to[0] === to)!;

    // An entry of long ago, stored before the first report: which rows came late before any mark cannot be told.
    await audit(env, { tenantId: a, actor: "x", action: "oud.gestuurd", subject: "s", createdAt: new Date("2026-06-01T10:00:00Z") });
    expect((await runWeekrapport(env.deps, W28)).status).toBe(200);
    expect(smtp.received.map(lateSection)).toEqual([null, null, null]);

    // Stored after W28's report, dated before W29's week (which starts 12/07 18:00 UTC).
    for (let i = 0; i < 2; i++) await audit(env, { tenantId: a, actor: "x", action: "dossier.bekeken", subject: `d${i}`, createdAt: new Date("2026-07-01T10:00:00Z") });
    for (const ip of ["203.0.113.1", "203.0.113.1", "203.0.113.2"]) await addLoginAttempt(env.db, { account: "anna", ip, gelukt: false, tenantId: a, tijdstip: "2026-07-01T11:00:00.000Z" });
    await addLoginAttempt(env.db, { account: "anna", ip: "10.0.0.1", gelukt: true, tenantId: a, tijdstip: "2026-07-01T11:00:00.000Z" });
    // Within W29's own week: in its own section, not late.
    await audit(env, { tenantId: a, actor: "x", action: "in.de.week", subject: "s", createdAt: new Date("2026-07-15T10:00:00Z") });

    let from = smtp.received.length;
    expect((await runWeekrapport(env.deps, W29)).status).toBe(200);
    const w29 = lateSection(mailOf("anna@alfa.test", from));
    expect(w29).toContain("dossier.bekeken 2");
    expect(w29).toMatch(/Audit-gebeurtenissen 2 Mislukte inlogpogingen 3 IP-adressen met mislukte pogingen 2/);
    expect(w29).not.toContain("oud.gestuurd");
    expect(w29).not.toContain("in.de.week");
    expect(lateSection(mailOf("bea@beta.test", from))).toBeNull();

    // Stored after W29's report, dated in W29's week: too late for it, before W30's.
    await audit(env, { tenantId: a, actor: "x", action: "export.gemaakt", subject: "s", createdAt: new Date("2026-07-16T10:00:00Z") });
    await addLoginAttempt(env.db, { account: "bert", ip: "198.51.100.7", gelukt: false, tenantId: a, tijdstip: "2026-07-16T11:00:00.000Z" });

    // W30's first run: bert's message is refused (a rerun sends it).
    smtp.refuse.add("bert@alfa.test");
    from = smtp.received.length;
    expect((await runWeekrapport(env.deps, NOW)).status).toBe(502);
    const w30 = lateSection(mailOf("anna@alfa.test", from));
    expect(w30).toContain("export.gemaakt 1");
    expect(w30).toMatch(/Audit-gebeurtenissen 1 Mislukte inlogpogingen 1 IP-adressen met mislukte pogingen 1/);
    // What W29 showed is not shown again.
    expect(w30).not.toContain("dossier.bekeken");

    // Stored after W30's first run: the rerun of W30 shows the same figures, the next week this one.
    await audit(env, { tenantId: a, actor: "x", action: "na.eerste.run", subject: "s", createdAt: new Date("2026-07-17T10:00:00Z") });
    smtp.refuse.clear();
    from = smtp.received.length;
    expect((await runWeekrapport(env.deps, NOW)).status).toBe(200);
    expect(smtp.received.slice(from).map((m) => m.to[0])).toEqual(["bert@alfa.test"]);
    expect(lateSection(smtp.received[from]!)).toBe(w30);

    from = smtp.received.length;
    expect((await runWeekrapport(env.deps, W31)).status).toBe(200);
    const w31 = lateSection(mailOf("anna@alfa.test", from));
    expect(w31).toContain("na.eerste.run 1");
    expect(w31).toMatch(/Audit-gebeurtenissen 1 Mislukte inlogpogingen 0 /);
    expect(w31).not.toContain("export.gemaakt");
    expect(lateSection(mailOf("bea@beta.test", from))).toBeNull();
  });

  test("a stored mark that is no mark (a date that does not exist) is replaced; one with a huge login range is read by the rows there are; one of a later week (the clock was ahead) is replaced, nothing late that week", async () => {
    const { env } = await setup();
    const a = await addTenant(env.db, "Alfa BV");
    await addAdmin(env.db, a, "anna@alfa.test");
    const q = env.store.kind === "pg" ? weeklyQueriesPg(env.store, TEST_SEAL, env.config) : weeklyQueries(env.store.db, TEST_SEAL, env.config);
    expect(parseLateMark(JSON.stringify({ week: "2026-W29", eind: "2026-13-45T99:99:99.999Z", laatVoor: null, inlog: null, audit: {} }))).toBeNull();
    expect(parseLateMark(JSON.stringify({ week: "2026-W29", eind: "2026-07-20T00:00:00.000Z", laatVoor: "2026-02-30T00:00:00.000Z", inlog: null, audit: {} }))).toBeNull();
    // A range of 9e15 ids over three rows: the three are counted, at once.
    for (const ip of ["203.0.113.1", "203.0.113.2", "203.0.113.2"]) await addLoginAttempt(env.db, { account: "anna", ip, gelukt: false, tenantId: a, tijdstip: "2026-07-01T11:00:00.000Z" });
    expect(await q.lateLogins({ na: 0, tot: 9e15 }, new Date("2026-07-10T00:00:00.000Z"))).toEqual(new Map([[a, { mislukt: 3, ips: 2 }]]));
    // Written while the clock read 2027: replaced at the next run, nothing called late, and the ranges go on from it.
    await q.writeLateMark(JSON.stringify({ week: "2027-W10", eind: "2027-03-08T00:00:00.000Z", laatVoor: "2027-03-01T00:00:00.000Z", inlog: { na: 0, tot: 1 }, audit: { [a]: { na: 0, tot: 0 } } }));
    const mark = await lateMarkOf(q, "2026-W30", new Date("2026-07-27T00:00:00.000Z"));
    expect(mark).toMatchObject({ week: "2026-W30", laatVoor: null, inlog: { na: 1, tot: 3 } });
    expect(parseLateMark(await q.readLateMark())).toEqual(mark);
  });

  test("a week whose report one address refused, and a week without a run: their ordinary rows are not called late in the next report, only rows stored after a run and dated before its week's end", async () => {
    const { smtp, env } = await setup();
    const a = await addTenant(env.db, "Alfa BV");
    await addAdmin(env.db, a, "anna@alfa.test");
    await addAdmin(env.db, a, "bert@alfa.test");
    const mailOf = (to: string, from: number) => smtp.received.slice(from).find((m) => m.to[0] === to)!;
    expect((await runWeekrapport(env.deps, W28)).status).toBe(200);

    // Dated in W29 and stored before its report: W29's own rows. bert refuses every week.
    for (let i = 0; i < 5; i++) await audit(env, { tenantId: a, actor: "x", action: "gewoon.in.w29", subject: `s${i}`, createdAt: new Date("2026-07-15T10:00:00Z") });
    smtp.refuse.add("bert@alfa.test");
    let from = smtp.received.length;
    expect((await runWeekrapport(env.deps, W29)).status).toBe(502);
    expect(lateSection(mailOf("anna@alfa.test", from))).toBeNull();
    expect(mailOf("anna@alfa.test", from).text).toContain("gewoon.in.w29");

    // Dated in W30 and stored before its report; and one late row of W29.
    await audit(env, { tenantId: a, actor: "x", action: "gewoon.in.w30", subject: "s", createdAt: new Date("2026-07-22T10:00:00Z") });
    await audit(env, { tenantId: a, actor: "x", action: "laat.uit.w29", subject: "s", createdAt: new Date("2026-07-16T10:00:00Z") });
    from = smtp.received.length;
    expect((await runWeekrapport(env.deps, NOW)).status).toBe(502);
    const w30 = lateSection(mailOf("anna@alfa.test", from));
    // Only the late one: W29's own rows went out in W29's report, whatever bert's server said.
    expect(w30).toContain("laat.uit.w29 1");
    expect(w30).not.toContain("gewoon.in.w29");
    expect(w30).not.toContain("gewoon.in.w30");

    // No run in W31 (the service was down); a row dated in W31 stored meanwhile, and one of W30 that came late.
    await audit(env, { tenantId: a, actor: "x", action: "in.gemiste.week", subject: "s", createdAt: new Date("2026-07-29T10:00:00Z") });
    await audit(env, { tenantId: a, actor: "x", action: "laat.uit.w30", subject: "s", createdAt: new Date("2026-07-23T10:00:00Z") });
    from = smtp.received.length;
    expect((await runWeekrapport(env.deps, new Date(NOW.getTime() + 14 * DAY))).status).toBe(502);
    const w32 = lateSection(mailOf("anna@alfa.test", from));
    expect(w32).toContain("laat.uit.w30 1");
    // A week without a report is not made up for by the late section.
    expect(w32).not.toContain("in.gemiste.week");
    expect(w32).not.toContain("gewoon.in.w30");
  });
});
