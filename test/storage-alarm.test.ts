// Storage that takes no writes, with e-mail as the only alarm channel (DAGRAPPORT_EMAIL +
// SMTP_URL, the documented minimal setup). Found by a review on a real full tmpfs: every
// job writes its job_runs row first, so dagrapport, backup-controle and taken-controle all
// answered 503 and mailed nothing, and the one alarm raised, internal-error, is not mailed:
// the operator heard nothing. Now the alarm is storage-unwritable, mailed once an hour at
// most (in process memory: alarm_mails is on the full disk too).
import { afterEach, expect, spyOn, test } from "bun:test";
import { Database } from "bun:sqlite";
import { join } from "node:path";
import type { Alarm, AlarmSink } from "../src/alarms/alarm.ts";
import { alarmEmailProps, alarmSubject, mailAlarmChannel, STORAGE_MAIL_EVERY_MS } from "../src/alarms/mail-channel.ts";
import { createAlarmSink } from "../src/alarms/sink.ts";
import { createApp, type AppOptions } from "../src/app.ts";
import { defineJob } from "../src/jobs/job.ts";
import { storageUnwritableCode, unexpectedAlarmType, unexpectedStatus } from "../src/http/errors.ts";
import { createMailer } from "../src/mail/transport.ts";
import type { Mailer } from "../src/mail/mailer.ts";
import { call, fillUntilFree, mountTmpfs, NOW, tempDir } from "./helpers.ts";
import { addTenant, DIALECT, makeEnv, type Env } from "./dialect.ts";

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const RECIPIENT = "ops@example.test";

/**
 * `env`'s app with the alarms as the service wires them (src/server.ts wireDeps): the sink,
 * its e-mail channel with its memory on the same store, `mailer`. `raised` holds every
 * raise's promise, so a test waits for the channels without polling. `options`: the app's (its jobs).
 */
function wired(env: Env, mailer: Mailer = env.mailer, options: AppOptions = {}) {
  let now = NOW;
  const clock = () => now;
  const lines: string[] = [];
  const sink = createAlarmSink({ sentryDsn: null, clock, writeLine: (l) => lines.push(l), channels: [mailAlarmChannel({ mailer, recipient: RECIPIENT, tijdzone: "Europe/Amsterdam", clock, store: env.deps.store })] });
  const raised: { alarm: Alarm; done: Promise<void> }[] = [];
  const alarms: AlarmSink = { ...sink, raise: (alarm) => { const done = sink.raise(alarm); raised.push({ alarm, done }); return done; } };
  const app = createApp({ ...env.deps, mailer, alarms, clock }, options);
  return {
    app,
    sink,
    lines,
    raised,
    settle: () => Promise.all(raised.map((r) => r.done)),
    setNow: (d: Date) => void (now = d),
  };
}

/**
 * Makes the store refuse every write as a full disk does: on SQLite a real tmpfs filled
 * to the last byte (the database and the anchor file on it); on PostgreSQL, whose files are
 * the server's, a trigger on job_runs that fails with the server's own disk_full (53100).
 */
async function fullStorage(env: Env, dir: string | null): Promise<void> {
  if (env.store.kind === "sqlite") {
    env.store.sqlite.run("PRAGMA wal_checkpoint(TRUNCATE)");
    fillUntilFree(dir!, 0);
    return;
  }
  await env.db.run("CREATE FUNCTION vol() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = 'disk_full'; END $$");
  await env.db.run("CREATE TRIGGER vol BEFORE INSERT OR UPDATE ON job_runs FOR EACH ROW EXECUTE FUNCTION vol()");
}

async function fullEnv(extra: Record<string, string> = {}): Promise<{ env: Env; dir: string | null }> {
  // The tmpfs only where the store's files are the service's (SQLite).
  const fs = DIALECT === "sqlite" ? mountTmpfs("8m") : null;
  if (fs) cleanups.push(fs.cleanup);
  const files: Record<string, string> = fs ? { DATABASE_PATH: join(fs.dir, "n.db"), AUDIT_ANKER_BESTAND: join(fs.dir, "a.jsonl") } : {};
  const env = await makeEnv({ ...files, DAGRAPPORT_EMAIL: RECIPIENT, ...extra });
  cleanups.push(() => env.cleanup());
  await addTenant(env.db, "A");
  return { env, dir: fs?.dir ?? null };
}

test("storage full: the first failing job mails storage-unwritable in Dutch, the next within the hour does not, one an hour later does", async () => {
  const { env, dir } = await fullEnv();
  const w = wired(env);
  await fullStorage(env, dir);

  const r = await call(w.app, "/api/cron/dagrapport");
  expect(r.status).toBe(503);
  await w.settle();
  const code = env.store.kind === "sqlite" ? "SQLITE_FULL" : "53100";
  expect(w.raised.map((x) => [x.alarm.type, x.alarm.message])).toEqual([["storage-unwritable", `Database niet beschikbaar (${code})`]]);
  expect(env.mailer.sent.map((m) => [m.to, m.subject])).toEqual([[RECIPIENT, `ALARM Opslag niet schrijfbaar (schijf vol of alleen-lezen): Database niet beschikbaar (${code})`]]);
  expect(env.mailer.sent[0]!.text).toContain("df -h /var/lib/nachtwacht");

  const props = alarmEmailProps(w.raised[0]!.alarm, NOW, "Europe/Amsterdam")!;
  expect(props.titel).toBe("Opslag niet schrijfbaar (schijf vol of alleen-lezen)");
  expect(alarmSubject(props)).toStartWith("ALARM Opslag niet schrijfbaar");
  expect(props.watTeDoen[0]).toContain("start geen taak");

  // Within the hour: raised (its stderr line; the second in the same minute held back by the sink), not mailed again.
  w.setNow(new Date(NOW.getTime() + 30 * 60_000));
  expect((await call(w.app, "/api/cron/backup-controle")).status).toBe(503);
  expect((await call(w.app, "/api/cron/taken-controle")).status).toBe(503);
  await w.settle();
  expect(w.raised.map((x) => x.alarm.type)).toEqual(["storage-unwritable", "storage-unwritable", "storage-unwritable"]);
  expect(w.lines.filter((l) => l.includes('"alarm":"storage-unwritable"'))).toHaveLength(2);
  expect(env.mailer.sent).toHaveLength(1);

  // An hour after the mail, while it lasts: once more.
  w.setNow(new Date(NOW.getTime() + STORAGE_MAIL_EVERY_MS));
  expect((await call(w.app, "/api/cron/taken-controle")).status).toBe(503);
  await w.settle();
  expect(env.mailer.sent).toHaveLength(2);
}, 30_000);

test("the disk fills up while a job runs: its end cannot be written, the caller gets the job's 200, and storage-unwritable is mailed saying the job completed and must not be run again", async () => {
  const { env, dir } = await fullEnv();
  let work = 0;
  // Done its work, then the disk is full before the wrapper writes the run's end.
  const job = defineJob({
    name: "weekrapport",
    summary: "t",
    description: "t",
    run: async () => {
      work++;
      await fullStorage(env, dir);
      return { status: 200, body: { ok: true } };
    },
  });
  const w = wired(env, env.mailer, { jobs: [job] });
  const r = await call(w.app, "/api/cron/weekrapport");
  expect(r.status).toBe(200);
  expect(r.json).toEqual({ ok: true });
  expect(work).toBe(1);
  await w.settle();
  expect(w.raised.map((x) => x.alarm.type)).toEqual(["storage-unwritable"]);
  const alarm = w.raised[0]!.alarm;
  expect(alarm.message).toContain("De taak weekrapport is voltooid (HTTP 200)");
  expect(alarm.message).toContain("Voer de taak niet opnieuw uit");
  expect(String(alarm.context?.fout)).toContain(env.store.kind === "sqlite" ? "database or disk is full" : "No space left on device");
  // Mailed (internal-error is not), with the message whole in the text.
  expect(env.mailer.sent.map((m) => m.to)).toEqual([RECIPIENT]);
  expect(env.mailer.sent[0]!.subject).toStartWith("ALARM Opslag niet schrijfbaar (schijf vol of alleen-lezen): De taak weekrapport is voltooid");
  expect(env.mailer.sent[0]!.text).toContain("Voer de taak niet opnieuw uit");
}, 30_000);

test("storage full and the outbox on the same disk (no SMTP_URL): the mail that cannot be written is logged and counted, and tried again at the next raise", async () => {
  if (DIALECT !== "sqlite") return; // the outbox is beside the SQLite file
  const { env, dir } = await fullEnv();
  const outbox = createMailer({ smtpUrl: null, from: "nw@example.test", outboxDir: join(dir!, "outbox") });
  const w = wired(env, outbox);
  await fullStorage(env, dir);
  const logged: string[] = [];
  const spy = spyOn(process.stderr, "write").mockImplementation(((chunk: unknown) => (logged.push(String(chunk)), true)) as typeof process.stderr.write);
  try {
    expect((await call(w.app, "/api/cron/dagrapport")).status).toBe(503);
    await w.settle();
    w.setNow(new Date(NOW.getTime() + 60_000));
    expect((await call(w.app, "/api/cron/backup-controle")).status).toBe(503);
    await w.settle();
  } finally {
    spy.mockRestore();
  }
  const failed = logged.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.message === "alarm channel failed");
  // Both raises tried to mail (a mail surely not written does not hold the next back), both failed loudly.
  expect(failed.map((l) => [l.channel, l.alarm])).toEqual([["e-mail", "storage-unwritable"], ["e-mail", "storage-unwritable"]]);
  expect(String(failed[0]!.error)).toContain("ENOSPC");
  expect(w.sink.undelivered).toEqual({ "e-mail": 2 });
}, 30_000);

test("which codes say the storage takes no writes: full, read-only, I/O error, cannot open, PostgreSQL's disk_full and read-only, a full or read-only file system; not busy, locked or a lost connection", () => {
  const sqlite = (code: string) => Object.assign(new Error(code), { code });
  const pg = (errno: string) => Object.assign(new Error(errno), { name: "PostgresError", errno, code: "ERR_POSTGRES_SERVER_ERROR" });
  const fs = (code: string) => Object.assign(new Error(code), { code });
  for (const e of [sqlite("SQLITE_FULL"), sqlite("SQLITE_READONLY"), sqlite("SQLITE_IOERR_WRITE"), sqlite("SQLITE_CANTOPEN"), pg("53100"), pg("25006"), fs("ENOSPC"), fs("EROFS"), fs("EDQUOT")]) {
    expect(storageUnwritableCode(e)).toBeDefined();
  }
  expect(storageUnwritableCode(new Error("wrapped", { cause: sqlite("SQLITE_IOERR_FSYNC") }))).toBe("SQLITE_IOERR");
  for (const e of [sqlite("SQLITE_BUSY"), sqlite("SQLITE_LOCKED"), pg("53300"), pg("55P03"), pg("08006"), fs("EACCES"), new Error("x")]) {
    expect(storageUnwritableCode(e)).toBeUndefined();
  }
});

test("SQLite's own SQLITE_CANTOPEN (a database in a folder that is gone) is storage-unwritable, answered 503", () => {
  const { dir, cleanup } = tempDir();
  cleanups.push(cleanup);
  let e: unknown;
  try {
    new Database(join(dir, "weg", "nachtwacht.db")).close();
  } catch (error) {
    e = error;
  }
  expect((e as { code?: unknown }).code).toBe("SQLITE_CANTOPEN");
  expect(storageUnwritableCode(e)).toBe("SQLITE_CANTOPEN");
  expect(unexpectedAlarmType(e)).toBe("storage-unwritable");
  expect(unexpectedStatus(e)).toBe(503);
});

test("the hourly limit of storage-unwritable mails is kept per job: a job's own alarm (completed, do not run it again) is mailed within the hour of the write API's, once", async () => {
  const sent: string[] = [];
  const mailer: Mailer = { bezorging: "smtp", send: async (m) => (sent.push(m.text), { messageId: String(sent.length) }), close: async () => {} };
  let now = NOW;
  const channel = mailAlarmChannel({ mailer, recipient: RECIPIENT, tijdzone: "Europe/Amsterdam", clock: () => now });
  const requests: Alarm = { type: "storage-unwritable", message: "Database niet beschikbaar (SQLITE_FULL)" };
  const completed: Alarm = { type: "storage-unwritable", message: "De taak weekrapport is voltooid (HTTP 200), maar het einde van run 7 kon niet in job_runs worden vastgelegd.", context: { job: "weekrapport", runId: 7 } };
  await channel.raise(requests);
  now = new Date(NOW.getTime() + 10 * 60_000);
  await channel.raise(requests);
  await channel.raise(completed);
  await channel.raise({ ...completed, context: { job: "weekrapport", runId: 8 } });
  await channel.raise({ ...completed, message: completed.message.replace("weekrapport", "dagrapport"), context: { job: "dagrapport", runId: 9 } });
  expect(sent).toHaveLength(3);
  expect(sent[1]).toContain("De taak weekrapport is voltooid");
  expect(sent[2]).toContain("De taak dagrapport is voltooid");
});
