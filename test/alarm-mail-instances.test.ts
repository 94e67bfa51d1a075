// The e-mail channel's memory shared by the instances on one database (alarm_mails,
// src/alarms/alarm-memory.ts). Found by a review with two real service processes: the
// memory was each process's, and the job lease hands the hourly checks from one instance
// to the other between runs, so a failed backup was mailed twice (backup-failure on one,
// backup-missing on the other) and a forged report that was settled by a run on one
// instance and came back on the other was not mailed until its daily reminder.
import { afterAll, afterEach, expect, spyOn, test } from "bun:test";
import { join } from "node:path";
import type { Alarm } from "../src/alarms/alarm.ts";
import { FORGOTTEN_AFTER_MS, REMINDER_MS } from "../src/alarms/alarm-memory.ts";
import { mailAlarmChannel } from "../src/alarms/mail-channel.ts";
import { createAlarmSink } from "../src/alarms/sink.ts";
import { openStore } from "../src/db.ts";
import { runBackupControle } from "../src/jobs/backup-controle.ts";
import { runBackupStatus } from "../src/jobs/backup-status.ts";
import type { MailMessage, Mailer } from "../src/mail/mailer.ts";
import { openPgStore } from "../src/pg/store.ts";
import { DIALECT, fileTestDb, makeEnv, testCluster, testDb, type Env, type TestDb } from "./dialect.ts";
import { startService, type ServiceProcess } from "./fixtures/hardening.ts";
import { SECRET, tempDir, TEST_SIGNING_KEY, until } from "./helpers.ts";
import { startSmtp, type TestSmtp } from "./smtp.ts";

let env: Env | undefined;
afterEach(async () => {
  await env?.cleanup();
  env = undefined;
});

const cleanups: (() => unknown)[] = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c();
});

/**
 * Two instances' alarm sinks on one database: each its own sink, mail channel and clock
 * (set by `at`), as two processes have; the mails of both in `sent`, by instance.
 */
function twoInstances(e: Env) {
  const sent: { by: string; m: MailMessage }[] = [];
  const lines: string[] = [];
  let now = new Date(0);
  const clock = () => now;
  const instance = (by: string) => {
    const mailer: Mailer = { bezorging: "smtp", send: async (m) => (sent.push({ by, m }), { messageId: String(sent.length) }), close: async () => {} };
    const alarms = createAlarmSink({ sentryDsn: null, clock, channels: [mailAlarmChannel({ mailer, recipient: "ops@example.test", tijdzone: "Europe/Amsterdam", clock, store: e.deps.store })], writeLine: (l) => lines.push(l) });
    return { ...e.deps, alarms };
  };
  return { a: instance("a"), b: instance("b"), sent, lines, at: (d: Date) => ((now = d), d) };
}

const utc = (day: number, h: number, m = 0) => new Date(Date.UTC(2026, 6, day, h, m));
const good = { exitCode: 0, bestandsnaam: "a.gz", grootte: 1, foutmelding: "" };
const failed = { exitCode: 74, bestandsnaam: null, grootte: null, foutmelding: "schijf vol" };
const gelukt = (e: { dialect: string }) => (e.dialect === "pg" ? true : 1);
const forgeReport = (db: TestDb, at: Date) =>
  db.run(
    "INSERT INTO backup_statuses (ontvangen, exit_code, gelukt, bestandsnaam, grootte, foutmelding, bron, zegel) VALUES (?, 0, ?, 'f.db.gz', 1, '', 'host-cron', 'vervalst')",
    at.toISOString(),
    gelukt(db),
  );

test("a failed backup reported to one instance is mailed once, also when the other runs backup-controle; its reminder a day later comes once", async () => {
  env = await makeEnv();
  const i = twoInstances(env);
  await runBackupStatus(i.a, i.at(utc(22, 3)), good);
  await runBackupStatus(i.a, i.at(utc(23, 3)), failed);
  expect((await runBackupControle(i.a, i.at(utc(23, 3, 15)))).status).toBe(409);
  expect((await runBackupControle(i.b, i.at(utc(23, 4, 15)))).status).toBe(409);
  expect(i.sent.map((s) => `${s.by} ${s.m.subject.replace(/:.*/, "")}`)).toEqual(["a ALARM Back-up mislukt"]);
  for (let h = 5; h < 27; h++) await runBackupControle(h % 2 ? i.a : i.b, i.at(utc(23, h, 15)));
  expect(i.sent).toHaveLength(1);
  expect((await env.db.all("SELECT about, state FROM alarm_mails")).map((r) => r.about)).toEqual(["backup"]);
  // The reminder, a day after the mail, on whichever instance runs then; then not again.
  await runBackupControle(i.b, i.at(utc(24, 3, 15)));
  await runBackupControle(i.a, i.at(utc(24, 4, 15)));
  expect(i.sent.map((s) => `${s.by} ${s.m.subject.replace(/:.*/, "")}`)).toEqual(["a ALARM Back-up mislukt", "b ALARM Back-up ontbreekt of is te oud"]);
});

test("a forged report settled by a run on one instance and forged again is mailed at once by the other", async () => {
  env = await makeEnv();
  const i = twoInstances(env);
  await runBackupStatus(i.a, i.at(utc(23, 3)), good);
  await forgeReport(env.db, utc(23, 4));
  expect((await runBackupControle(i.b, i.at(utc(23, 4, 15)))).body.vervalst).toBe(1);
  await env.db.run("DELETE FROM backup_statuses WHERE zegel = 'vervalst'");
  expect((await runBackupControle(i.a, i.at(utc(23, 5, 15)))).status).toBe(200);
  expect(await env.db.all("SELECT about FROM alarm_mails")).toEqual([]);
  await forgeReport(env.db, utc(23, 4));
  expect((await runBackupControle(i.b, i.at(utc(23, 6, 15)))).body.vervalst).toBe(1);
  expect(i.sent.map((s) => s.by)).toEqual(["b", "b"]);
});

test("two instances raising the same condition at once mail it once", async () => {
  env = await makeEnv();
  const i = twoInstances(env);
  const alarm: Alarm = { type: "backup-missing", message: "x", condition: { about: "backup", state: "te-oud 2026-07-22T03:00:00.000Z" } };
  i.at(utc(23, 5));
  // Both begun before either has read the memory: both find the condition new.
  await Promise.all([i.a.alarms.raise(alarm), i.b.alarms.raise(alarm)]);
  expect(i.sent).toHaveLength(1);
  expect(i.lines).toHaveLength(2);
});

test("a memory that cannot be read does not hold a mail back: mailed at every raise, and logged", async () => {
  env = await makeEnv();
  const i = twoInstances(env);
  await env.db.run("DROP TABLE alarm_mails");
  const alarm: Alarm = { type: "backup-missing", message: "x", condition: { about: "backup", state: "geen-backup -" } };
  i.at(utc(23, 5));
  const stderr = spyOn(process.stderr, "write");
  let logged: unknown[];
  try {
    await i.a.alarms.raise(alarm);
    await i.b.alarms.raise(alarm);
    logged = stderr.mock.calls.filter(([l]) => String(l).includes("alarm memory unavailable"));
  } finally {
    stderr.mockRestore();
  }
  expect(i.sent).toHaveLength(2);
  expect(logged).toHaveLength(2);
  // A check that settles the condition goes on without it too.
  expect((await runBackupStatus(i.a, i.at(utc(23, 6)), good)).status).toBe(200);
  expect((await runBackupControle(i.a, i.at(utc(23, 6, 15)))).status).toBe(200);
});

test("a mark older than FORGOTTEN_AFTER_MS is dropped when a condition is mailed; a younger one stays", async () => {
  env = await makeEnv();
  const i = twoInstances(env);
  const now = i.at(utc(23, 5));
  const old = new Date(now.getTime() - FORGOTTEN_AFTER_MS - 1).toISOString();
  const young = new Date(now.getTime() - REMINDER_MS).toISOString();
  await env.db.run("INSERT INTO alarm_mails (about, state, gemaild) VALUES ('oud', 's', ?), ('jong', 's', ?)", old, young);
  await i.a.alarms.raise({ type: "db-integrity", message: "x", condition: { about: "nieuw", state: "1" } });
  expect((await env.db.all<{ about: string }>("SELECT about FROM alarm_mails ORDER BY about")).map((r) => r.about)).toEqual(["jong", "nieuw"]);
});

// ---------------------------------------------------------------------------------
// The reviewer's finding with two real service processes on one database.

interface Shared {
  a: ServiceProcess;
  b: ServiceProcess;
  db: TestDb;
  smtp: TestSmtp;
}

/** Two service processes on one database (a SQLite file, or on the PostgreSQL run a database of the cluster), mailing to one SMTP server. */
async function twoProcesses(): Promise<Shared> {
  const smtp = await startSmtp();
  cleanups.push(() => smtp.stop());
  const { dir, cleanup } = tempDir("nachtwacht-2i-");
  cleanups.push(cleanup);
  const path = join(dir, "data", "nachtwacht.db");
  const base: Record<string, string> = {
    CRON_SECRET: SECRET,
    AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY,
    DATABASE_PATH: path,
    AUDIT_ANKER_BESTAND: join(dir, "ankers.jsonl"),
    SMTP_URL: smtp.url,
    DAGRAPPORT_EMAIL: "ops@example.test",
    HOME: dir,
  };
  let db: TestDb;
  if (DIALECT === "sqlite") {
    openStore(path).close();
    db = fileTestDb(path);
  } else {
    const url = await (await testCluster()).createDatabase();
    // Migrated here: the instances then start on the same schema at once.
    const store = await openPgStore(url, { max: 1 });
    cleanups.push(() => store.close());
    base.DATABASE_URL = url;
    db = testDb(store);
  }
  const start = async () => {
    const p = await startService(base);
    cleanups.push(async () => (p.proc.kill("SIGKILL"), await p.exited));
    return p;
  };
  return { a: await start(), b: await start(), db, smtp };
}

async function post(p: ServiceProcess, job: string, body?: object): Promise<{ status: number; json: any }> {
  const r = await fetch(`${p.url}/api/cron/${job}`, { method: "POST", headers: { authorization: `Bearer ${SECRET}` }, body: body ? JSON.stringify(body) : undefined });
  return { status: r.status, json: r.status === 204 ? null : await r.json() };
}

// A job answers after its alarms were raised and their mails sent (the sink awaits every
// channel, and the SMTP server records a message before it accepts it): a mail not there
// at the answer is not coming.

test("two processes: a failed backup is mailed once, whichever instance runs backup-controle", async () => {
  const s = await twoProcesses();
  expect((await post(s.a, "backup-status", { exitCode: 74, foutmelding: "schijf vol" })).status).toBe(200);
  expect(s.smtp.received).toHaveLength(1);
  expect((await post(s.a, "backup-controle")).json.reden).toBe("mislukt");
  expect((await post(s.b, "backup-controle")).json.reden).toBe("mislukt");
  expect(s.smtp.received.map((m) => m.subject.replace(/:.*/, ""))).toEqual(["ALARM Back-up mislukt"]);
}, 90_000);

test("two processes: forged reports settled on one instance and forged again are mailed at once by the other", async () => {
  const s = await twoProcesses();
  expect((await post(s.a, "backup-status", { exitCode: 0, bestandsnaam: "x.db.gz", grootte: 10 })).status).toBe(200);
  const [real] = await s.db.all<{ ontvangen: string }>("SELECT ontvangen FROM backup_statuses");
  // Dated after the real report, and by latestCountingStart(now): it counts, as forged.
  const forged = new Date(new Date(real!.ontvangen).getTime() + 1);
  await forgeReport(s.db, forged);
  expect((await post(s.b, "backup-controle")).json.vervalst).toBe(1);
  await until("the first mail", () => s.smtp.received.length === 1);
  await s.db.run("DELETE FROM backup_statuses WHERE zegel = 'vervalst'");
  expect((await post(s.a, "backup-controle")).status).toBe(200);
  await forgeReport(s.db, forged);
  expect((await post(s.b, "backup-controle")).json.vervalst).toBe(1);
  expect(s.smtp.received.map((m) => m.subject.replace(/:.*/, ""))).toEqual(["ALARM Database-integriteit aangetast", "ALARM Database-integriteit aangetast"]);
}, 90_000);
