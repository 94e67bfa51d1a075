// Faults (issue 8, part 3). Each case shows what the caller gets, which alarm is
// raised, and that a call after recovery completes the work.
//
// Related cases elsewhere, not repeated here: test/weekrapport.test.ts (a recipient
// refused with 550; an outage between two runs and the rerun delivering exactly the
// failed ones) and test/alarms.test.ts (raise() itself returns after the bounded flush).
import { afterEach, describe, expect, test } from "bun:test";
import { closeSync, existsSync, ftruncateSync, openSync, rmSync, statSync, writeSync } from "node:fs";
import { join } from "node:path";
import { createAlarmSink } from "../src/alarms/sink.ts";
import { createApp } from "../src/app.ts";
import { parseConfig } from "../src/config.ts";
import { openStore } from "../src/db.ts";
import type { Deps } from "../src/deps.ts";
import { createMailer } from "../src/mail/transport.ts";
import { bulkChain, BUN, deletedEntries, fakeSentry, flakySmtp, verifyAll, type FakeSentry } from "./fixtures/hardening.ts";
import { addAdmin, addTenant, call, makeTestEnv, NOW, RecordingAlarms, RecordingMailer, SECRET, TEST_SIGNING_KEY, tempDir, type TestEnv } from "./helpers.ts";

const DAY = 24 * 3600 * 1000;
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const f of cleanups.splice(0).reverse()) await f();
});
function track(env: TestEnv): TestEnv {
  cleanups.push(() => env.cleanup());
  return env;
}
const count = (env: { store: { sqlite: import("bun:sqlite").Database } }, table: string) =>
  (env.store.sqlite.query(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n;

describe("SMTP server going away in the middle of the weekly batch", () => {
  test("200 with the failures counted, mail-failure alarm; after the server is back the rerun sends exactly the rest, nobody gets two", async () => {
    const log: string[] = [];
    const first = await flakySmtp({ dieAfter: 6, log });
    const env = track(makeTestEnv({ SMTP_URL: first.url }));
    // The real mailer (nodemailer pool), short timeouts so the test never waits 15 s.
    env.deps.mailer = createMailer({ smtpUrl: first.url, from: env.config.mailFrom, outboxDir: join(env.dir, "outbox"), timeouts: { connection: 2000, greeting: 2000, socket: 5000 } });
    cleanups.push(() => env.deps.mailer.close());
    const recipients: string[] = [];
    for (let t = 0; t < 3; t++) {
      const id = addTenant(env.store, `Tenant ${t}`);
      for (let a = 0; a < 5; a++) {
        addAdmin(env.store, id, `admin${a}@t${t}.test`);
        recipients.push(`admin${a}@t${t}.test`);
      }
    }

    const during = await call(env.app, "/api/cron/weekrapport");
    expect(during.status).toBe(200);
    const { verstuurd, fouten } = during.json as { verstuurd: number; fouten: number };
    expect(verstuurd).toBe(6);
    expect(fouten).toBe(9);
    expect(during.json).toMatchObject({ overgeslagen: 0, bezorging: "smtp", week: "2026-W30" });
    expect(env.alarms.raised.map((a) => a.type)).toEqual(["mail-failure"]);
    expect(env.alarms.raised[0]!.context).toMatchObject({ verstuurd: 6, fouten: 9 });
    expect(count(env, "weekly_report_deliveries")).toBe(6);

    // The mail server comes back on the same address; the service keeps its pool.
    const back = await flakySmtp({ port: first.port, log });
    cleanups.push(() => back.stop());
    const rerun = await call(env.app, "/api/cron/weekrapport");
    expect(rerun.status).toBe(200);
    expect(rerun.json).toMatchObject({ verstuurd: 9, fouten: 0, overgeslagen: 6 });
    expect(env.alarms.raised).toHaveLength(1);
    // Across the outage and the rerun: every administrator exactly one report.
    expect([...log].sort()).toEqual([...recipients].sort());
    expect(count(env, "weekly_report_deliveries")).toBe(15);
  }, 30_000);
});

describe("error tracking down or slow", () => {
  async function envWithSentry(sentry: { dsn: string }, flushMs?: number) {
    const env = track(makeTestEnv({ SENTRY_DSN: sentry.dsn }));
    const lines: string[] = [];
    env.deps.alarms = createAlarmSink({ sentryDsn: sentry.dsn, clock: env.deps.clock, secrets: [SECRET], writeLine: (l) => lines.push(l), sentryFlushTimeoutMs: flushMs });
    return { env, lines };
  }
  const failedBackup = '{"exitCode":3,"foutmelding":"schijf vol"}';
  let sentry: FakeSentry | undefined;
  afterEach(() => {
    sentry?.stop();
    sentry = undefined;
  });

  test("an endpoint that never answers: the job answers after the bounded flush (2 s), the stored result and the log line are there; once it answers again events arrive", async () => {
    sentry = fakeSentry("never");
    const { env, lines } = await envWithSentry(sentry); // production default: 2000 ms
    const t0 = performance.now();
    const r = await call(env.app, "/api/cron/backup-status", { body: failedBackup });
    const ms = performance.now() - t0;
    expect(r.status).toBe(200);
    expect(r.json).toEqual({ ok: true, gelukt: false });
    expect(ms).toBeLessThan(3500); // bounded: the 2 s flush, not a hang
    expect(count(env, "backup_statuses")).toBe(1);
    expect(lines.map((l) => JSON.parse(l).alarm)).toEqual(["backup-failure"]);
    expect(sentry.types).toEqual([]);

    // Answering again. The first request still hangs in the client's queue, so this
    // flush too may wait its full bound; the event itself gets through.
    sentry.mode = "ok";
    const t1 = performance.now();
    expect((await call(env.app, "/api/cron/backup-status", { body: failedBackup })).status).toBe(200);
    expect(performance.now() - t1).toBeLessThan(3500);
    expect(sentry.types).toEqual(["backup-failure"]);
    expect(count(env, "backup_statuses")).toBe(2);
  }, 20_000);

  test("nothing listening on the endpoint's port: the job answers at once; a sink started there later gets the next event", async () => {
    const probe = fakeSentry("ok");
    const { dsn, port } = probe;
    probe.stop();
    const { env, lines } = await envWithSentry({ dsn });
    const t0 = performance.now();
    const r = await call(env.app, "/api/cron/backup-status", { body: failedBackup });
    expect(r.status).toBe(200);
    expect(performance.now() - t0).toBeLessThan(2500);
    expect(lines).toHaveLength(1);

    sentry = fakeSentry("ok", { port });
    expect((await call(env.app, "/api/cron/backup-status", { body: failedBackup })).status).toBe(200);
    expect(sentry.types).toEqual(["backup-failure"]);
  }, 20_000);

  test("a slow endpoint (answers after 3.5 s): the job is not held past the flush bound, and the event still arrives", async () => {
    sentry = fakeSentry("slow", { slowMs: 3500 });
    const { env } = await envWithSentry(sentry, 1000);
    const t0 = performance.now();
    expect((await call(env.app, "/api/cron/backup-status", { body: failedBackup })).status).toBe(200);
    expect(performance.now() - t0).toBeLessThan(2500);
    for (let i = 0; i < 60 && sentry.types.length === 0; i++) await Bun.sleep(100);
    expect(sentry.types).toEqual(["backup-failure"]);
  }, 20_000);
});

describe("database locked by another process's long write transaction", () => {
  function holdLock(dbPath: string, ms: number) {
    const proc = Bun.spawn([BUN, join(import.meta.dir, "fixtures/hold-write-lock.ts"), dbPath, String(ms)], { stdout: "pipe", stderr: "inherit" });
    const reader = (proc.stdout as ReadableStream<Uint8Array>).getReader();
    const locked = (async () => {
      let text = "";
      while (!text.includes("locked")) {
        const { value, done } = await reader.read();
        if (done) throw new Error("lock holder exited early");
        text += new TextDecoder().decode(value);
      }
    })();
    cleanups.push(() => {
      proc.kill("SIGKILL");
      return proc.exited;
    });
    return { locked, exited: proc.exited };
  }

  test("held longer than the busy timeout (5 s): a clear 503 {error} after 5 s, not a hang, no alarm (a warning); nothing stored; the refused run recorded once the lock is free; then the call succeeds", async () => {
    const env = track(makeTestEnv());
    const holder = holdLock(env.config.databasePath, 6500);
    await holder.locked;
    const t0 = performance.now();
    const r = await call(env.app, "/api/cron/backup-status", { body: '{"exitCode":0}' });
    const ms = performance.now() - t0;
    expect(r.status).toBe(503);
    expect(Object.keys(r.json)).toEqual(["error"]);
    expect(r.json.error).toContain("SQLITE_BUSY");
    expect(r.json.error).toContain("backup-status");
    expect(r.headers.get("retry-after")).toBe("60");
    expect(ms).toBeLessThan(6300); // the busy timeout, not the holder's 6.5 s
    await Bun.sleep(0);
    // Another process holding the lock is a fact of life on a shared file, not a fault of nachtwacht's.
    expect(env.alarms.raised).toEqual([]);

    await holder.exited;
    expect(count(env, "backup_statuses")).toBe(0);
    // The refused run is written as fout/503 once the lock is free (in the background).
    const deadline = performance.now() + 10_000;
    while (count(env, "job_runs") === 0 && performance.now() < deadline) await Bun.sleep(10);
    expect(env.store.sqlite.query("SELECT job, uitkomst, http_status FROM job_runs").all()).toEqual([{ job: "backup-status", uitkomst: "fout", http_status: 503 }]);
    const again = await call(env.app, "/api/cron/backup-status", { body: '{"exitCode":0}' });
    expect(again.status).toBe(200);
    expect(count(env, "backup_statuses")).toBe(1);
    expect(count(env, "job_runs")).toBe(2);
  }, 30_000);

  test("held shorter than the busy timeout: the call waits for the lock and succeeds", async () => {
    const env = track(makeTestEnv());
    const holder = holdLock(env.config.databasePath, 800);
    await holder.locked;
    const r = await call(env.app, "/api/cron/backup-status", { body: '{"exitCode":0}' });
    expect(r.status).toBe(200);
    expect(count(env, "backup_statuses")).toBe(1);
    expect(env.alarms.raised).toEqual([]);
    await holder.exited;
  }, 30_000);
});

describe("the database read-only or the disk full", () => {
  test("read-only from the start: 503 {error} with SQLITE_READONLY, alarm, nothing written; writable again → the job runs", async () => {
    const env = track(makeTestEnv());
    addTenant(env.store, "Alfa");
    // As root chmod does not stop a writer: query_only refuses every write the same way.
    env.store.sqlite.run("PRAGMA query_only = 1");
    const r = await call(env.app, "/api/cron/audit-verificatie");
    expect(r.status).toBe(503);
    expect(r.json.error).toContain("SQLITE_READONLY");
    expect(r.text).not.toContain("at ");
    await Bun.sleep(0);
    expect(env.alarms.raised.map((a) => a.message)).toEqual(["Database niet beschikbaar (SQLITE_READONLY)"]);
    env.store.sqlite.run("PRAGMA query_only = 0");
    expect(count(env, "job_runs")).toBe(0);
    const again = await call(env.app, "/api/cron/audit-verificatie");
    expect(again.status).toBe(200);
    expect(count(env, "audit_verification_state")).toBe(1);
  });

  test("read-only in the middle of audit-retentie: the failing batch is rolled back, every chain still starts from its signed retention record; the rerun deletes the rest", async () => {
    const env = track(makeTestEnv());
    const tenants = [addTenant(env.store, "A"), addTenant(env.store, "B"), addTenant(env.store, "C")];
    const old = NOW.getTime() - 3000 * DAY;
    for (const t of tenants) {
      bulkChain(env.store.sqlite, t, 5000, old - 400 * DAY, old); // older than grens: several batches
      bulkChain(env.store.sqlite, t, 100, NOW.getTime() - 10 * DAY, NOW.getTime() - DAY);
    }
    // The job pauses between batches (its records are signed and stored before the first):
    // once a batch has deleted something, the database goes read-only in that pause.
    const readOnly = setInterval(() => {
      if (deletedEntries(env.store.sqlite) === 0) return;
      env.store.sqlite.run("PRAGMA query_only = 1");
      clearInterval(readOnly);
    }, 0);
    const r = await call(env.app, "/api/cron/audit-retentie");
    clearInterval(readOnly);
    expect(r.status).toBe(503);
    expect(r.json.error).toContain("SQLITE_READONLY");
    await Bun.sleep(0);
    expect(env.alarms.raised.map((a) => a.message)).toEqual(["Database niet beschikbaar (SQLITE_READONLY)"]);

    env.store.sqlite.run("PRAGMA query_only = 0");
    const deleted = 15_300 - count(env, "audit_entries");
    // the first batch committed, the one that met the read-only database did not
    expect(deleted).toBeGreaterThan(0);
    expect(deleted).toBeLessThan(15_000);
    expect(deletedEntries(env.store.sqlite)).toBe(deleted); // deletion is a prefix of each chain
    for (const c of verifyAll(env.store.sqlite, env.config.auditAnkerBestand)) {
      expect(c.intact).toBe(true);
      // the record of the whole old prefix was signed first: every deleted entry is covered by it
      expect(c.retentieSeq).toBe(5000);
      expect(c.ankerSeq).toBe(5000);
      expect(c.eersteSeq! - 1).toBeLessThanOrEqual(c.retentieSeq);
    }
    // The run could not be closed on a read-only database: it stays visibly unfinished.
    const run = env.store.sqlite.query("SELECT uitkomst, beeindigd FROM job_runs WHERE job = 'audit-retentie'").get();
    expect(run).toEqual({ uitkomst: "bezig", beeindigd: null });
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);

    const again = await call(env.app, "/api/cron/audit-retentie");
    expect(again.status).toBe(200);
    expect(again.json.verwijderd).toBe(15_000 - deleted);
    for (const c of verifyAll(env.store.sqlite, env.config.auditAnkerBestand)) expect(c).toMatchObject({ intact: true, ankerSeq: 5000, retentieSeq: 5000, eersteSeq: 5001, aantalEntries: 100 });
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
  }, 30_000);

  test("disk full during audit-verificatie: 503 SQLITE_FULL, alarm, no verification state half-written; space freed → the rerun writes all of it", async () => {
    const { dir, cleanup } = tempDir();
    cleanups.push(cleanup);
    // A real full file system where we may mount one (root); else SQLite's own page limit.
    // (HARDENING_NO_MOUNT=1 takes the fallback on purpose.)
    const tmpfs = !process.env.HARDENING_NO_MOUNT && Bun.spawnSync(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", dir], { stderr: "pipe" }).exitCode === 0;
    if (tmpfs) cleanups.push(() => Bun.spawnSync(["umount", "-l", dir]));
    const config = parseConfig({ CRON_SECRET: SECRET, AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY, DATABASE_PATH: join(dir, "db", "n.db"), AUDIT_ANKER_BESTAND: join(dir, "a.jsonl") });
    const store = openStore(config.databasePath, new Date(NOW.getTime() - 365 * DAY));
    cleanups.push(() => store.close());
    const alarms = new RecordingAlarms();
    const deps: Deps = { store, mailer: new RecordingMailer(), alarms, clock: () => NOW, config };
    const app = createApp(deps);
    store.sqlite.transaction(() => {
      for (let i = 0; i < 1500; i++) store.sqlite.query("INSERT INTO tenants (naam, actief, aangemaakt) VALUES (?, 1, ?)").run(`Tenant ${i} ${"x".repeat(40)}`, NOW.toISOString());
    })();
    store.sqlite.run("PRAGMA wal_checkpoint(TRUNCATE)");

    let ballast = "";
    if (tmpfs) {
      // Fill the file system, then give back 24 KiB: room for the run's own row, not for
      // 1500 verification results.
      ballast = join(dir, "ballast");
      const fd = openSync(ballast, "w");
      const chunk = Buffer.alloc(64 * 1024, 1);
      try {
        for (;;) writeSync(fd, chunk);
      } catch {}
      ftruncateSync(fd, statSync(ballast).size - 24 * 1024);
      closeSync(fd);
    } else {
      const { page_count } = store.sqlite.query("PRAGMA page_count").get() as { page_count: number };
      store.sqlite.run(`PRAGMA max_page_count = ${page_count + 2}`);
    }
    console.log(`disk full simulated with ${tmpfs ? "a full tmpfs" : "PRAGMA max_page_count"}`);

    const r = await call(app, "/api/cron/audit-verificatie");
    expect(r.status).toBe(503);
    expect(r.json.error).toContain("SQLITE_FULL");
    await Bun.sleep(0);
    expect(alarms.raised.map((a) => a.message)).toEqual(["Database niet beschikbaar (SQLITE_FULL)"]);
    expect(count({ store }, "audit_verification_state")).toBe(0);
    // The run's start was recorded; its end as fout when there was room for that.
    const run = store.sqlite.query("SELECT uitkomst FROM job_runs WHERE job = 'audit-verificatie'").get() as { uitkomst: string };
    expect(["fout", "bezig"]).toContain(run.uitkomst);

    if (tmpfs) rmSync(ballast);
    else store.sqlite.run("PRAGMA max_page_count = 1073741823");
    const again = await call(app, "/api/cron/audit-verificatie");
    expect(again.status).toBe(200);
    expect(again.json.gecontroleerd).toBe(1500);
    expect(count({ store }, "audit_verification_state")).toBe(1500);
    expect((store.sqlite.query("PRAGMA integrity_check").get() as { integrity_check: string }).integrity_check).toBe("ok");
    expect(existsSync(config.databasePath)).toBe(true);
  }, 30_000);
});
