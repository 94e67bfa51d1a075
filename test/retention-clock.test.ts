// The retention jobs delete by the host clock. With that clock ahead (an RTC wrong at
// boot, a VM restored with a skewed clock, a typo in `date -s`) records inside their
// retention period look old: found by a review, a year ahead deleted the whole 90-day
// security log and 400 days ahead audit entries 6 years old, inside the 7-year legal
// period, each answered 200. Before deleting, both now ask retentionClockRefusal
// (src/jobs/retention-clock.ts): a wall clock stepped forward more than 10 minutes since
// the process started (deps.clockStep; the real one compares against the monotonic
// clock), or on PostgreSQL the host more than 10 s ahead of the database server
// (deps.databaseClockOffset), and they delete nothing: 409 and the clock-ahead alarm.
import { afterEach, expect, setDefaultTimeout, test } from "bun:test";
import { runAuditRetentie } from "../src/jobs/audit-retentie.ts";
import { runBeveiligingslogRetentie } from "../src/jobs/beveiligingslog-retentie.ts";
import { call, NOW } from "./helpers.ts";
import { addLoginAttempt, addTenant, fillChain, makeEnv, pgOnly, type Env } from "./dialect.ts";

// On the PostgreSQL run the first test may start the cluster (test/dialect.ts).
setDefaultTimeout(30_000);
let env: Env;
afterEach(() => env?.cleanup());

const DAY = 86_400_000;
const MINUTE = 60_000;
const at = (ms: number) => new Date(NOW.getTime() + ms);

/** 90 login attempts, one a day back from NOW. */
async function securityLog(e: Env): Promise<void> {
  for (let d = 0; d < 90; d++) await addLoginAttempt(e.db, { account: "a@example.nl", ip: "203.0.113.7", gelukt: false, tijdstip: at(-d * DAY).toISOString(), reden: null });
}
const loginAttempts = async (e: Env) => (await e.db.get<{ n: number }>("SELECT count(*) AS n FROM login_attempts"))!.n;

/** A tenant with 10 signed audit entries about 6 years old (inside the 7-year period). */
async function sixYearOldChain(e: Env): Promise<void> {
  const t = await addTenant(e.db, "Een");
  await fillChain(e.store, t, 10, { at: (i) => at(-6 * 365 * DAY + i * 1000) });
  expect((await call(e.app, "/api/cron/audit-anker")).status).toBe(200);
}
const auditEntries = async (e: Env) => (await e.db.get<{ n: number }>("SELECT count(*) AS n FROM audit_entries"))!.n;

test("beveiligingslog-retentie with the clock stepped a year ahead deletes nothing: 409 klok-verzet and the clock-ahead alarm", async () => {
  env = await makeEnv();
  await securityLog(env);
  env.deps.clockStep = () => 365 * DAY;
  const r = await runBeveiligingslogRetentie(env.deps, at(365 * DAY));
  expect(await loginAttempts(env)).toBe(90);
  expect(r.status).toBe(409);
  expect(r.body).toMatchObject({ ok: false, verwijderd: 0, retentieDagen: 90, reden: "klok-verzet" });
  expect((r.body as { fout: string }).fout).toContain("365 dagen vooruitgezet");
  expect((r.body as { fout: string }).fout).toContain("timedatectl");
  expect(env.alarms.raised.map((a) => a.type)).toEqual(["clock-ahead"]);
  expect(env.alarms.raised[0]!.message).toStartWith("beveiligingslog-retentie heeft niets verwijderd: ");
});

test("audit-retentie with the clock stepped 400 days ahead keeps entries 6 years old: 409 klok-verzet, over HTTP as documented", async () => {
  env = await makeEnv();
  await sixYearOldChain(env);
  env.deps.clockStep = () => 400 * DAY;
  env.setNow(at(400 * DAY));
  const r = await call(env.app, "/api/cron/audit-retentie");
  expect(await auditEntries(env)).toBe(10);
  expect(r.status).toBe(409);
  expect(r.json).toMatchObject({ ok: false, verwijderd: 0, retentieDagen: 2555, reden: "klok-verzet" });
  expect(env.alarms.raised.map((a) => a.type)).toEqual(["clock-ahead"]);
});

test("the security log's 409 over HTTP as documented; a step of 11 minutes is refused too", async () => {
  env = await makeEnv();
  await securityLog(env);
  env.deps.clockStep = () => 11 * MINUTE;
  const r = await call(env.app, "/api/cron/beveiligingslog-retentie");
  expect(r.status).toBe(409);
  expect(r.json).toMatchObject({ ok: false, verwijderd: 0, reden: "klok-verzet" });
  expect(r.json.fout).toContain("11 minuten vooruitgezet");
  expect(await loginAttempts(env)).toBe(90);
});

test("without a step, or a small one, or one back, both jobs delete as before", async () => {
  env = await makeEnv();
  await securityLog(env);
  await sixYearOldChain(env);
  // At NOW nothing is past its period (the oldest attempt is 89 days old): 200, whatever the step.
  for (const step of [9 * MINUTE, -365 * DAY, 0]) {
    env.deps.clockStep = () => step;
    expect((await call(env.app, "/api/cron/beveiligingslog-retentie")).json).toMatchObject({ ok: true, verwijderd: 0 });
  }
  // Five days on, with no step: grens is NOW − 85 days, the attempts 86 to 89 days old go.
  env.setNow(at(5 * DAY));
  const r = await call(env.app, "/api/cron/beveiligingslog-retentie");
  expect(r.status).toBe(200);
  expect(r.json).toMatchObject({ ok: true, verwijderd: 4 });
  expect(await loginAttempts(env)).toBe(86);
  // Two years on, with no step: the audit entries, 6 years old at NOW, are past the 7-year period.
  env.setNow(at(2 * 365 * DAY));
  const a = await call(env.app, "/api/cron/audit-retentie");
  expect(a.status).toBe(200);
  expect(a.json).toMatchObject({ ok: true, verwijderd: 10 });
  expect(env.alarms.raised.map((x) => x.type)).toEqual([]);
});

test("the real clockStep (none injected): nothing stepped in this process, beveiligingslog-retentie deletes", async () => {
  env = await makeEnv();
  await securityLog(env);
  env.setNow(at(100 * DAY));
  const r = await call(env.app, "/api/cron/beveiligingslog-retentie");
  expect(r.status).toBe(200);
  expect(await loginAttempts(env)).toBe(0);
});

pgOnly("PostgreSQL: the host more than 10 s ahead of the database server's clock deletes nothing (409 klok-voor-op-database); 10 s or less, or behind, deletes", async () => {
  env = await makeEnv();
  await securityLog(env);
  await sixYearOldChain(env);
  env.deps.clockStep = () => 0;
  env.deps.databaseClockOffset = async () => -400 * DAY;
  env.setNow(at(400 * DAY));
  for (const job of ["beveiligingslog-retentie", "audit-retentie"]) {
    const r = await call(env.app, `/api/cron/${job}`);
    expect(r.status).toBe(409);
    expect(r.json).toMatchObject({ ok: false, verwijderd: 0, reden: "klok-voor-op-database" });
    expect(r.json.fout).toContain("voor op die van de databaseserver");
  }
  expect(await loginAttempts(env)).toBe(90);
  expect(await auditEntries(env)).toBe(10);
  expect(env.alarms.raised.map((a) => a.type)).toEqual(["clock-ahead", "clock-ahead"]);
  env.deps.databaseClockOffset = async () => -10_000;
  env.setNow(at(5 * DAY));
  expect((await call(env.app, "/api/cron/beveiligingslog-retentie")).json).toMatchObject({ ok: true, verwijderd: 4 });
  env.deps.databaseClockOffset = async () => 3600_000;
  env.setNow(at(2 * 365 * DAY));
  expect((await call(env.app, "/api/cron/audit-retentie")).json).toMatchObject({ ok: true, verwijderd: 10 });
});
