// The e-mail channel's memory (mailAlarmChannel, src/alarms/mail-channel.ts): the hourly
// checks raise an alarm every run while a condition lasts, and the operator is to get one
// mail when it starts, a reminder a day, and one when it changes; the stderr line (and
// the error-tracking event) stays per raise. Found by a review: one failed backup gave 25
// mails in a day (backup-failure, then backup-missing at every backup-controle run).
import { afterEach, expect, test } from "bun:test";
import type { Alarm } from "../src/alarms/alarm.ts";
import { mailAlarmChannel } from "../src/alarms/mail-channel.ts";
import { createAlarmSink } from "../src/alarms/sink.ts";
import { runBackupControle } from "../src/jobs/backup-controle.ts";
import { runBackupStatus } from "../src/jobs/backup-status.ts";
import { runTakenControle } from "../src/jobs/taken-controle.ts";
import { MailNotSent, type MailMessage, type Mailer } from "../src/mail/mailer.ts";
import { makeEnv, type Env } from "./dialect.ts";

let env: Env | undefined;
afterEach(async () => {
  await env?.cleanup();
  env = undefined;
});

/** The real sink and mail channel with a recording mailer, on a clock the test sets before each call. */
function realAlarms(e: Env, fail: (m: MailMessage) => Error | null = () => null) {
  const sent: MailMessage[] = [];
  const lines: string[] = [];
  let now = new Date(0);
  const clock = () => now;
  const mailer: Mailer = {
    bezorging: "smtp",
    send: async (m) => {
      const e = fail(m);
      if (e) throw e;
      sent.push(m);
      return { messageId: String(sent.length) };
    },
    close: async () => {},
  };
  const alarms = createAlarmSink({ sentryDsn: null, clock, channels: [mailAlarmChannel({ mailer, recipient: "ops@example.test", tijdzone: "Europe/Amsterdam", clock, store: e.deps.store })], writeLine: (l) => lines.push(l) });
  const deps = { ...e.deps, alarms };
  const at = (d: Date) => ((now = d), d);
  return { sent, lines, deps, at, subjects: () => sent.map((m) => m.subject.replace(/:.*/, "")) };
}

const utc = (day: number, h: number, m = 0) => new Date(Date.UTC(2026, 6, day, h, m));
const good = { exitCode: 0, bestandsnaam: "a.gz", grootte: 1, foutmelding: "" };
const failed = { exitCode: 74, bestandsnaam: null, grootte: null, foutmelding: "disk full" };

test("a failed backup and 24 hourly backup-controle runs: one mail (backup-failure), 25 alarm lines; a second day without backup one reminder; a good backup then a new failure mails again", async () => {
  env = await makeEnv();
  const a = realAlarms(env);
  await runBackupStatus(a.deps, a.at(utc(22, 3)), good);
  await runBackupStatus(a.deps, a.at(utc(23, 3)), failed);
  for (let h = 3; h < 27; h++) expect((await runBackupControle(a.deps, a.at(utc(23, h, 15)))).status).toBe(409);
  expect(a.subjects()).toEqual(["ALARM Back-up mislukt"]);
  expect(a.lines.map((l) => JSON.parse(l).alarm)).toEqual(["backup-failure", ...Array(24).fill("backup-missing")]);

  // The second day without a new report: one reminder, a day after the mail.
  for (let h = 27; h < 51; h++) await runBackupControle(a.deps, a.at(utc(23, h, 15)));
  expect(a.subjects()).toEqual(["ALARM Back-up mislukt", "ALARM Back-up ontbreekt of is te oud"]);
  expect(a.sent[1]!.text).toContain("is mislukt met exitcode 74");

  // A good backup ends it; a new failure is a new condition: mailed at once, once.
  await runBackupStatus(a.deps, a.at(utc(25, 3)), good);
  expect((await runBackupControle(a.deps, a.at(utc(25, 3, 15)))).status).toBe(200);
  await runBackupStatus(a.deps, a.at(utc(26, 3)), failed);
  for (let h = 3; h < 6; h++) await runBackupControle(a.deps, a.at(utc(26, h, 15)));
  expect(a.subjects()).toEqual(["ALARM Back-up mislukt", "ALARM Back-up ontbreekt of is te oud", "ALARM Back-up mislukt"]);
});

test("a condition that changes is mailed at once: no report at all, then one too old", async () => {
  env = await makeEnv();
  const a = realAlarms(env);
  await runBackupControle(a.deps, a.at(utc(20, 3, 15)));
  await runBackupControle(a.deps, a.at(utc(20, 4, 15)));
  await runBackupStatus(a.deps, a.at(utc(20, 5)), good);
  for (let h = 5; h < 40; h++) await runBackupControle(a.deps, a.at(utc(20, h, 15)));
  // geen-backup at 03:15; 200 until 26 h after 05:00; te-oud from 07:15 the next day on.
  expect(a.sent.map((m) => m.text.match(/Er is nog nooit|uur oud/)?.[0])).toEqual(["Er is nog nooit", "uur oud"]);
});

test("a mail that surely failed is tried again at the next raise; one that perhaps arrived is not sent again before its reminder", async () => {
  env = await makeEnv();
  let mode: "refused" | "unknown" | "ok" = "refused";
  const a = realAlarms(env, () => (mode === "refused" ? new MailNotSent("geweigerd") : mode === "unknown" ? new Error("connection closed after DATA") : null));
  await runBackupStatus(a.deps, a.at(utc(22, 3)), good);
  await runBackupControle(a.deps, a.at(utc(24, 3, 15))); // te-oud: refused
  mode = "ok";
  await runBackupControle(a.deps, a.at(utc(24, 4, 15)));
  expect(a.sent).toHaveLength(1);
  expect(a.deps.alarms.undelivered).toEqual({ "e-mail": 1 });

  // A failure whose mail perhaps arrived (the connection dropped after the whole message went out).
  mode = "unknown";
  await runBackupStatus(a.deps, a.at(utc(24, 5)), failed);
  mode = "ok";
  for (let h = 5; h < 30; h++) await runBackupControle(a.deps, a.at(utc(24, h, 15)));
  // Not again the same day; the reminder a day after it.
  expect(a.sent).toHaveLength(2);
  expect(a.sent[1]!.text).toContain("is mislukt met exitcode 74");
  expect(a.deps.alarms.undelivered).toEqual({ "e-mail": 2 });
});

test("taken-controle's db-integrity for forged job runs: mailed once, not at every hourly run", async () => {
  env = await makeEnv();
  const a = realAlarms(env);
  await env.db.run("INSERT INTO job_runs (job, gestart, beeindigd, uitkomst, http_status) VALUES ('dagrapport', ?, ?, 'ok', 200)", utc(23, 5).toISOString(), utc(23, 5, 1).toISOString());
  for (let h = 6; h < 12; h++) await runTakenControle(a.deps, a.at(utc(23, h, 45)));
  const integrity = (m: MailMessage) => m.subject.startsWith("ALARM Database-integriteit");
  expect(a.sent.filter(integrity)).toHaveLength(1);
  expect(a.lines.filter((l) => JSON.parse(l).alarm === "db-integrity")).toHaveLength(6);
});

test("an alarm without a condition is mailed at every raise, as before", async () => {
  env = await makeEnv();
  const a = realAlarms(env);
  const alarm: Alarm = { type: "audit-chain-broken", message: "x" };
  a.at(utc(23, 1));
  await a.deps.alarms.raise(alarm);
  await a.deps.alarms.raise(alarm);
  expect(a.sent).toHaveLength(2);
});
