// The e-mail channel's memory (mailAlarmChannel, src/alarms/mail-channel.ts) after a
// review: a clock put back must not silence a condition until real time catches up, and a
// condition that clears and comes back in the same state is mailed again.
import { afterEach, expect, test } from "bun:test";
import { mailAlarmChannel } from "../src/alarms/mail-channel.ts";
import { createAlarmSink } from "../src/alarms/sink.ts";
import { runTakenControle } from "../src/jobs/taken-controle.ts";
import { runBackupControle } from "../src/jobs/backup-controle.ts";
import { runBackupStatus } from "../src/jobs/backup-status.ts";
import type { MailMessage, Mailer } from "../src/mail/mailer.ts";
import { addSealedRun, makeEnv, type Env } from "./dialect.ts";

let env: Env | undefined;
afterEach(async () => {
  await env?.cleanup();
  env = undefined;
});

/** The real sink and mail channel with a recording mailer, on a clock the test sets before each call. */
function realAlarms(e: Env) {
  const sent: MailMessage[] = [];
  const lines: string[] = [];
  let now = new Date(0);
  const clock = () => now;
  const mailer: Mailer = { bezorging: "smtp", send: async (m) => (sent.push(m), { messageId: String(sent.length) }), close: async () => {} };
  const alarms = createAlarmSink({ sentryDsn: null, clock, channels: [mailAlarmChannel({ mailer, recipient: "ops@example.test", tijdzone: "Europe/Amsterdam", clock, store: e.deps.store })], writeLine: (l) => lines.push(l) });
  return { sent, lines, deps: { ...e.deps, alarms }, at: (d: Date) => ((now = d), d) };
}

const utc = (day: number, h: number, m = 0) => new Date(Date.UTC(2026, 6, day, h, m));
const integrity = (m: MailMessage) => m.subject.startsWith("ALARM Database-integriteit");
const forge = (e: Env, job: string, at: Date) =>
  e.db.run("INSERT INTO job_runs (job, gestart, beeindigd, uitkomst, http_status) VALUES (?, ?, ?, 'ok', 200)", job, at.toISOString(), new Date(at.getTime() + 1000).toISOString());

test("clock ahead for a moment: a later real 'te-oud' about the same backup is mailed, and reminded daily", async () => {
  env = await makeEnv();
  const a = realAlarms(env);
  await runBackupStatus(a.deps, a.at(utc(22, 3)), { exitCode: 0, bestandsnaam: "a.gz", grootte: 1, foutmelding: "" });
  const ahead = new Date(utc(22, 4, 15).getTime() + 365 * 86400_000);
  expect((await runBackupControle(a.deps, a.at(ahead))).body).toMatchObject({ reden: "te-oud" });
  expect(a.sent).toHaveLength(1);
  expect((await runBackupControle(a.deps, a.at(utc(22, 5, 15)))).status).toBe(200);
  for (let h = 28; h < 24 * 5; h++) await runBackupControle(a.deps, a.at(utc(22, h, 15)));
  expect(a.lines.filter((l) => JSON.parse(l).alarm === "backup-missing").length).toBeGreaterThan(90);
  // te-oud from the 23rd 03:15 on: mailed then and reminded on the 24th, 25th and 26th.
  expect(a.sent.length).toBe(5);
});

test("taken-controle: a second forgery of the same job, after the first cleared, is mailed", async () => {
  env = await makeEnv();
  const a = realAlarms(env);
  await forge(env, "dagrapport", utc(23, 5));
  expect((await runTakenControle(a.deps, a.at(utc(23, 5, 45)))).body.vervalst).toEqual(["dagrapport"]);
  await addSealedRun(env, "dagrapport", utc(23, 6));
  expect((await runTakenControle(a.deps, a.at(utc(23, 6, 45)))).body.vervalst).toEqual([]);
  await forge(env, "dagrapport", utc(23, 8));
  expect((await runTakenControle(a.deps, a.at(utc(23, 8, 45)))).body.vervalst).toEqual(["dagrapport"]);
  // The same forgery still there an hour later: no second mail for it.
  expect((await runTakenControle(a.deps, a.at(utc(23, 9, 45)))).body.vervalst).toEqual(["dagrapport"]);
  expect(a.lines.filter((l) => JSON.parse(l).alarm === "db-integrity")).toHaveLength(3);
  expect(a.sent.filter(integrity)).toHaveLength(2);
});

test("backup-controle: a forged report deleted and forged again is mailed", async () => {
  env = await makeEnv();
  const a = realAlarms(env);
  await runBackupStatus(a.deps, a.at(utc(23, 3)), { exitCode: 0, bestandsnaam: "a.gz", grootte: 1, foutmelding: "" });
  const f = () =>
    env!.db.run(
      "INSERT INTO backup_statuses (ontvangen, gelukt, exit_code, bestandsnaam, grootte, foutmelding, bron) VALUES (?, ?, 0, 'x.gz', 1, '', 'x')",
      utc(23, 4).toISOString(),
      env!.dialect === "pg" ? true : 1,
    );
  await f();
  expect((await runBackupControle(a.deps, a.at(utc(23, 4, 15)))).body.vervalst).toBe(1);
  await env.db.run("DELETE FROM backup_statuses WHERE zegel IS NULL");
  expect((await runBackupControle(a.deps, a.at(utc(23, 5, 15)))).status).toBe(200);
  await f();
  expect((await runBackupControle(a.deps, a.at(utc(23, 9, 15)))).body.vervalst).toBe(1);
  expect(a.sent.filter(integrity)).toHaveLength(2);
});
