// Faults (issue 8, part 3). Each case shows what the caller gets, which alarm is
// raised, and that a call after recovery completes the work.
//
// Related cases elsewhere, not repeated here: test/weekrapport.test.ts (a recipient
// refused with 550; an outage between two runs and the rerun delivering exactly the
// failed ones) and test/alarms.test.ts (raise() itself returns after the bounded flush).
import { afterEach, describe, expect, test } from "bun:test";
import { SQL } from "bun";
import { chmodSync, closeSync, existsSync, ftruncateSync, mkdirSync, openSync, rmSync, statSync, writeSync } from "node:fs";
import { join } from "node:path";
import { createAlarmSink } from "../src/alarms/sink.ts";
import { createApp } from "../src/app.ts";
import { parseConfig } from "../src/config.ts";
import { openStore } from "../src/db.ts";
import type { Deps } from "../src/deps.ts";
import { bulkChainOn, BUN, deletedEntries, deletedEntriesOn, fakeSentry, flakySmtp, verifyAll, verifyAllPg, type FakeSentry } from "./fixtures/hardening.ts";
import { call, NOW, RecordingAlarms, RecordingMailer, SECRET, TEST_SEAL, TEST_SIGNING_KEY, tempDir, until } from "./helpers.ts";
import { makeMailEnv } from "./smtp.ts";
import { addAdmin, addTenant, DIALECT, makeEnv, sqliteOnly, testCluster, testDb, type Env, type TestDb } from "./dialect.ts";

const DAY = 24 * 3600 * 1000;
const cleanups: (() => unknown)[] = [];
// Every cleanup runs, also after one that failed (a mount must not outlive the test). The
// bound is generous: dropping a tablespace on PostgreSQL waits for a checkpoint.
afterEach(async () => {
  let failed: unknown = null;
  for (const f of cleanups.splice(0).reverse()) {
    try {
      await f();
    } catch (e) {
      failed ??= e;
    }
  }
  if (failed !== null) throw failed;
}, 60_000);
function track(env: Env): Env {
  cleanups.push(() => env.cleanup());
  return env;
}
const count = async (env: Env, table: string) => (await env.db.get<{ n: number }>(`SELECT count(*) AS n FROM ${table}`))!.n;

/** What the store answers a write with when it refuses it: the code in the 503 and its alarm. */
const READONLY = (env: Env) => (env.dialect === "sqlite" ? "SQLITE_READONLY" : "25006");

/**
 * The database refuses every write, or takes them again. SQLite: query_only (as root
 * chmod does not stop a writer, and query_only refuses writes the same way). PostgreSQL:
 * default_transaction_read_only for the whole server, as a standby refuses writes (25006);
 * the reload reaches every connection before its next statement, the pool's included.
 */
async function setReadOnly(env: Env, on: boolean): Promise<void> {
  if (env.store.kind === "sqlite") {
    env.store.sqlite.run(`PRAGMA query_only = ${on ? 1 : 0}`);
    return;
  }
  // ALTER SYSTEM is allowed in a read-only session: it changes no data.
  const admin = new SQL((await testCluster()).url, { max: 1 });
  try {
    await admin.unsafe(on ? "ALTER SYSTEM SET default_transaction_read_only = on" : "ALTER SYSTEM RESET default_transaction_read_only");
    await admin`SELECT pg_reload_conf()`;
  } finally {
    await admin.close();
  }
  const want = on ? "on" : "off";
  await until(`default_transaction_read_only ${want}`, async () => (await env.db.get("SHOW default_transaction_read_only"))!.default_transaction_read_only === want);
}

/** fixtures/hardening.ts verifyAll on either store, against the anchor file (verifyAllPg on PostgreSQL). */
async function chainsOf(env: Env): Promise<{ tenantId: number; intact: boolean; aantalEntries: number; ankerSeq: number; retentieSeq: number; eersteSeq: number | null }[]> {
  if (env.store.kind === "sqlite") return verifyAll(env.store.sqlite, env.config.auditAnkerBestand);
  return verifyAllPg(env.store, env.config.auditAnkerBestand);
}

describe("SMTP server going away in the middle of the weekly batch", () => {
  test("502 with the failures counted (the run a fout), mail-failure alarm; after the server is back the rerun sends exactly the rest, nobody gets two", async () => {
    const log: string[] = [];
    const first = await flakySmtp({ dieAfter: 6, log });
    // The real mailer (nodemailer pool), short timeouts so the test never waits 15 s.
    const env = track(await makeMailEnv({ SMTP_URL: first.url }));
    const recipients: string[] = [];
    for (let t = 0; t < 3; t++) {
      const id = await addTenant(env.db, `Tenant ${t}`);
      for (let a = 0; a < 5; a++) {
        await addAdmin(env.db, id, `admin${a}@t${t}.test`);
        recipients.push(`admin${a}@t${t}.test`);
      }
    }

    const during = await call(env.app, "/api/cron/weekrapport");
    expect(during.status).toBe(502);
    const { verstuurd, fouten } = during.json as { verstuurd: number; fouten: number };
    expect(verstuurd).toBe(6);
    expect(fouten).toBe(9);
    // Called on Thursday 2026-07-23 (the test clock): the week up to the Sunday before.
    expect(during.json).toMatchObject({ overgeslagen: 0, bezorging: "smtp", week: "2026-W29" });
    expect(env.alarms.raised.map((a) => a.type)).toEqual(["mail-failure"]);
    expect(env.alarms.raised[0]!.context).toMatchObject({ verstuurd: 6, fouten: 9 });
    expect(await count(env, "weekly_report_deliveries")).toBe(6);

    // The mail server comes back on the same address; the service keeps its pool.
    const back = await flakySmtp({ port: first.port, log });
    cleanups.push(() => back.stop());
    const rerun = await call(env.app, "/api/cron/weekrapport");
    expect(rerun.status).toBe(200);
    expect(rerun.json).toMatchObject({ verstuurd: 9, fouten: 0, overgeslagen: 6 });
    expect(env.alarms.raised).toHaveLength(1);
    // Across the outage and the rerun: every administrator exactly one report.
    expect([...log].sort()).toEqual([...recipients].sort());
    expect(await count(env, "weekly_report_deliveries")).toBe(15);
  }, 30_000);
});

describe("error tracking down or slow", () => {
  async function envWithSentry(sentry: { dsn: string }, flushMs?: number) {
    const env = track(await makeEnv({ SENTRY_DSN: sentry.dsn }));
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
    expect(await count(env, "backup_statuses")).toBe(1);
    expect(lines.map((l) => JSON.parse(l).alarm)).toEqual(["backup-failure"]);
    expect(sentry.types).toEqual([]);

    // Answering again. The first request still hangs in the client's queue, so this
    // flush too may wait its full bound; the event itself gets through.
    sentry.mode = "ok";
    const t1 = performance.now();
    expect((await call(env.app, "/api/cron/backup-status", { body: failedBackup })).status).toBe(200);
    expect(performance.now() - t1).toBeLessThan(3500);
    expect(sentry.types).toEqual(["backup-failure"]);
    expect(await count(env, "backup_statuses")).toBe(2);
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

  // SQLite's write lock and busy timeout (PostgreSQL locks rows: pg-ingest, pg-job-lease).
  sqliteOnly("held longer than the busy timeout (5 s): a clear 503 {error} after 5 s, not a hang, no alarm (a warning); nothing stored; the refused run recorded once the lock is free; then the call succeeds", async () => {
    const env = track(await makeEnv());
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
    expect(await count(env, "backup_statuses")).toBe(0);
    // The refused run is written as fout/503 once the lock is free (in the background).
    const deadline = performance.now() + 10_000;
    while ((await count(env, "job_runs")) === 0 && performance.now() < deadline) await Bun.sleep(10);
    expect(await env.db.all("SELECT job, uitkomst, http_status FROM job_runs")).toEqual([{ job: "backup-status", uitkomst: "fout", http_status: 503 }]);
    const again = await call(env.app, "/api/cron/backup-status", { body: '{"exitCode":0}' });
    expect(again.status).toBe(200);
    expect(await count(env, "backup_statuses")).toBe(1);
    expect(await count(env, "job_runs")).toBe(2);
  }, 30_000);

  sqliteOnly("held shorter than the busy timeout: the call waits for the lock and succeeds", async () => {
    const env = track(await makeEnv());
    const holder = holdLock(env.config.databasePath, 800);
    await holder.locked;
    const r = await call(env.app, "/api/cron/backup-status", { body: '{"exitCode":0}' });
    expect(r.status).toBe(200);
    expect(await count(env, "backup_statuses")).toBe(1);
    expect(env.alarms.raised).toEqual([]);
    await holder.exited;
  }, 30_000);
});

describe("the database read-only or the disk full", () => {
  test("read-only from the start: 503 {error} with SQLITE_READONLY (PostgreSQL: 25006), alarm storage-unwritable (mailed), nothing written; writable again → the job runs", async () => {
    const env = track(await makeEnv());
    cleanups.push(() => setReadOnly(env, false)); // also when an expectation fails
    await addTenant(env.db, "Alfa");
    await setReadOnly(env, true);
    const r = await call(env.app, "/api/cron/audit-verificatie");
    expect(r.status).toBe(503);
    expect(r.json.error).toContain(READONLY(env));
    expect(r.text).not.toContain("at ");
    await Bun.sleep(0);
    expect(env.alarms.raised.map((a) => [a.type, a.message])).toEqual([["storage-unwritable", `Database niet beschikbaar (${READONLY(env)})`]]);
    await setReadOnly(env, false);
    expect(await count(env, "job_runs")).toBe(0);
    const again = await call(env.app, "/api/cron/audit-verificatie");
    expect(again.status).toBe(200);
    expect(await count(env, "audit_verification_state")).toBe(1);
  });

  test("read-only in the middle of audit-retentie: the failing batch is rolled back, every chain still starts from its signed retention record; the rerun deletes the rest", async () => {
    const env = track(await makeEnv());
    cleanups.push(() => setReadOnly(env, false));
    const tenants = [await addTenant(env.db, "A"), await addTenant(env.db, "B"), await addTenant(env.db, "C")];
    const old = NOW.getTime() - 3000 * DAY;
    for (const t of tenants) {
      await bulkChainOn(env.store, t, 5000, old - 400 * DAY, old); // older than grens: several batches
      await bulkChainOn(env.store, t, 100, NOW.getTime() - 10 * DAY, NOW.getTime() - DAY);
    }
    let r: Awaited<ReturnType<typeof call>>;
    if (env.store.kind === "sqlite") {
      const { sqlite } = env.store;
      // The job pauses between batches (its records are signed and stored before the first):
      // once a batch has deleted something, the database goes read-only in that pause.
      const readOnly = setInterval(() => {
        if (deletedEntries(sqlite) === 0) return;
        sqlite.run("PRAGMA query_only = 1");
        clearInterval(readOnly);
      }, 0);
      r = await call(env.app, "/api/cron/audit-retentie");
      clearInterval(readOnly);
    } else {
      // PostgreSQL's batches follow each other without a pause (src/pg/audit-retention.ts):
      // one in the middle (the one that reaches seq 2000 of A; the first ends at 666, the
      // last at 5000) waits for a row held here, and the server goes read-only meanwhile.
      // That batch began before and commits; the next one begins read-only and fails.
      const held = Promise.withResolvers<void>();
      const release = Promise.withResolvers<void>();
      const holder = env.store.sql.begin(async (tx) => {
        await tx`SELECT 1 FROM audit_entries WHERE tenant_id = ${tenants[0]!} AND seq = 2000 FOR UPDATE`;
        held.resolve();
        await release.promise;
      });
      cleanups.push(() => (release.resolve(), holder));
      await held.promise;
      const answer = call(env.app, "/api/cron/audit-retentie");
      await until("a batch waiting for the held row", async () => (await env.db.get<{ n: number }>("SELECT count(*) AS n FROM pg_locks WHERE NOT granted"))!.n > 0);
      expect(await deletedEntriesOn(env.db)).toBeGreaterThan(0);
      await setReadOnly(env, true);
      release.resolve();
      await holder;
      r = await answer;
    }
    expect(r.status).toBe(503);
    expect(r.json.error).toContain(READONLY(env));
    await Bun.sleep(0);
    expect(env.alarms.raised.map((a) => a.message)).toEqual([`Database niet beschikbaar (${READONLY(env)})`]);

    await setReadOnly(env, false);
    const deleted = 15_300 - (await count(env, "audit_entries"));
    // the first batch committed, the one that met the read-only database did not
    expect(deleted).toBeGreaterThan(0);
    expect(deleted).toBeLessThan(15_000);
    expect(await deletedEntriesOn(env.db)).toBe(deleted); // deletion is a prefix of each chain
    for (const c of await chainsOf(env)) {
      expect(c.intact).toBe(true);
      // the record of the whole old prefix was signed first: every deleted entry is covered by it
      expect(c.retentieSeq).toBe(5000);
      expect(c.ankerSeq).toBe(5000);
      expect(c.eersteSeq! - 1).toBeLessThanOrEqual(c.retentieSeq);
    }
    // The run could not be closed on a read-only database: it stays visibly unfinished.
    const run = await env.db.get("SELECT uitkomst, beeindigd FROM job_runs WHERE job = 'audit-retentie'");
    expect(run).toEqual({ uitkomst: "bezig", beeindigd: null });
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);

    const again = await call(env.app, "/api/cron/audit-retentie");
    expect(again.status).toBe(200);
    expect(again.json.verwijderd).toBe(15_000 - deleted);
    for (const c of await chainsOf(env)) expect(c).toMatchObject({ intact: true, ankerSeq: 5000, retentieSeq: 5000, eersteSeq: 5001, aantalEntries: 100 });
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
  }, 30_000);

  test("disk full during audit-verificatie: 503 SQLITE_FULL (PostgreSQL: 53100), alarm, no verification state half-written; space freed → the rerun writes all of it", async () => {
    const full = DIALECT === "sqlite" ? await fullSqlite() : await fullPg();
    const { app, alarms, db, code } = full;
    console.log(`disk full simulated with ${full.how}`);

    const r = await call(app, "/api/cron/audit-verificatie");
    expect(r.status).toBe(503);
    expect(r.json.error).toContain(code);
    await Bun.sleep(0);
    expect(alarms.raised.map((a) => a.message)).toEqual([`Database niet beschikbaar (${code})`]);
    expect(await countIn(db, "audit_verification_state")).toBe(0);
    // The run's start was recorded; its end as fout when there was room for that.
    const run = (await db.get<{ uitkomst: string }>("SELECT uitkomst FROM job_runs WHERE job = 'audit-verificatie'"))!;
    expect(["fout", "bezig"]).toContain(run.uitkomst);

    await full.free();
    const again = await call(app, "/api/cron/audit-verificatie");
    expect(again.status).toBe(200);
    expect(again.json.gecontroleerd).toBe(1500);
    expect(await countIn(db, "audit_verification_state")).toBe(1500);
    await full.sound();
  }, 30_000);
});

const countIn = async (db: TestDb, table: string) => (await db.get<{ n: number }>(`SELECT count(*) AS n FROM ${table}`))!.n;

/** An installation of 1500 tenants whose store has room for a run's own row, not for 1500 verification results. */
interface FullDisk {
  app: { handle(r: Request): Promise<Response> };
  alarms: RecordingAlarms;
  db: TestDb;
  /** The store's code for it, in the 503 and the alarm. */
  code: string;
  how: string;
  /** Gives the space back. */
  free(): Promise<void>;
  /** The store is sound afterwards. */
  sound(): Promise<void>;
}

/** Mounts a tmpfs of `size` on `dir` (root; not when HARDENING_NO_MOUNT=1 asks for the fallback); true when it did. */
function mountTmpfs(dir: string, options: string): boolean {
  if (process.env.HARDENING_NO_MOUNT) return false;
  if (Bun.spawnSync(["mount", "-t", "tmpfs", "-o", options, "tmpfs", dir], { stderr: "pipe" }).exitCode !== 0) return false;
  cleanups.push(() => Bun.spawnSync(["umount", "-l", dir]));
  return true;
}

/** Fills the file system of `dir`, then gives back 24 KiB. */
function fillUp(dir: string): string {
  const ballast = join(dir, "ballast");
  const fd = openSync(ballast, "w");
  const chunk = Buffer.alloc(64 * 1024, 1);
  try {
    for (;;) writeSync(fd, chunk);
  } catch {}
  ftruncateSync(fd, statSync(ballast).size - 24 * 1024);
  closeSync(fd);
  return ballast;
}

async function fullSqlite(): Promise<FullDisk> {
  const { dir, cleanup } = tempDir();
  cleanups.push(cleanup);
  // A real full file system where we may mount one (root); else SQLite's own page limit.
  // (HARDENING_NO_MOUNT=1 takes the fallback on purpose.)
  const tmpfs = mountTmpfs(dir, "size=6m");
  const config = parseConfig({ CRON_SECRET: SECRET, AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY, DATABASE_PATH: join(dir, "db", "n.db"), AUDIT_ANKER_BESTAND: join(dir, "a.jsonl") });
  const store = openStore(config.databasePath, new Date(NOW.getTime() - 365 * DAY), TEST_SEAL);
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
    ballast = fillUp(dir);
  } else {
    const { page_count } = store.sqlite.query("PRAGMA page_count").get() as { page_count: number };
    store.sqlite.run(`PRAGMA max_page_count = ${page_count + 2}`);
  }
  return {
    app,
    alarms,
    db: testDb(store),
    code: "SQLITE_FULL",
    how: tmpfs ? "a full tmpfs" : "PRAGMA max_page_count",
    free: async () => {
      if (tmpfs) rmSync(ballast);
      else store.sqlite.run("PRAGMA max_page_count = 1073741823");
    },
    sound: async () => {
      expect((store.sqlite.query("PRAGMA integrity_check").get() as { integrity_check: string }).integrity_check).toBe("ok");
      expect(existsSync(config.databasePath)).toBe(true);
    },
  };
}

/**
 * PostgreSQL: audit_verification_state moved to a tablespace on a full tmpfs (root), so
 * writing its rows fails as a full server disk does (53100: could not extend file); the
 * run's own row lives in the default tablespace. Without a mount (HARDENING_NO_MOUNT=1 or
 * not root), a trigger answers those writes with the same SQLSTATE, as SQLite's fallback
 * is its page limit.
 */
async function fullPg(): Promise<FullDisk> {
  const env = track(await makeEnv());
  const { db } = env;
  await db.run("INSERT INTO tenants (naam, actief, aangemaakt) SELECT 'Tenant ' || i || ' ' || ?, ?, ? FROM generate_series(0, 1499) AS i", "x".repeat(40), true, NOW.toISOString());
  const { dir, cleanup } = tempDir();
  cleanups.push(cleanup);
  // The server runs as the owner of its data directory (postgres when the tests run as root).
  chmodSync(dir, 0o755);
  const where = join(dir, "ruimte");
  mkdirSync(where);
  const owner = statSync((await db.get<{ data_directory: string }>("SHOW data_directory"))!.data_directory).uid;
  const tmpfs = mountTmpfs(where, `size=2m,uid=${owner},mode=0700`);
  let free: () => Promise<void>;
  if (tmpfs) {
    const ts = `nw_vol_${process.pid}`; // a tablespace is the cluster's, not the database's
    await db.run(`CREATE TABLESPACE ${ts} LOCATION '${where}'`);
    cleanups.push(async () => {
      await db.run("ALTER TABLE audit_verification_state SET TABLESPACE pg_default");
      await db.run(`DROP TABLESPACE ${ts}`);
    });
    await db.run(`ALTER TABLE audit_verification_state SET TABLESPACE ${ts}`);
    const ballast = fillUp(where);
    free = async () => rmSync(ballast);
  } else {
    await db.run(
      "CREATE FUNCTION nw_schijf_vol() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN " +
        "RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = 'disk_full', HINT = 'Check free disk space.'; END $$",
    );
    await db.run("CREATE TRIGGER nw_schijf_vol BEFORE INSERT OR UPDATE ON audit_verification_state FOR EACH STATEMENT EXECUTE FUNCTION nw_schijf_vol()");
    free = () => db.run("DROP TRIGGER nw_schijf_vol ON audit_verification_state");
  }
  return {
    app: env.app,
    alarms: env.alarms,
    db,
    code: "53100",
    how: tmpfs ? "a tablespace on a full tmpfs" : "a trigger answering 53100",
    free,
    sound: async () => {
      // amcheck: the table's heap and its index are sound.
      await db.run("CREATE EXTENSION IF NOT EXISTS amcheck");
      expect(await db.all("SELECT * FROM verify_heapam('audit_verification_state')")).toEqual([]);
      await db.all("SELECT bt_index_check(indexrelid, true) FROM pg_index WHERE indrelid = 'audit_verification_state'::regclass");
    },
  };
}
