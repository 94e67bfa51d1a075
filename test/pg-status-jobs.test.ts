// backup-status, backup-controle, beveiligingslog-analyse, taken-controle and /metrics on
// PostgreSQL (src/pg/status.ts) against a real server (test/pg.ts): each scenario is
// seeded the same on SQLite and on PostgreSQL, and both must answer with the same
// status, the same body and the same alarms. The scenarios are those of
// test/backup-controle.test.ts, test/beveiligingslog-analyse.test.ts,
// test/taken-controle.test.ts and test/metrics.test.ts.
import { afterEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { Cron } from "croner";
import { newLeaseHolder } from "../src/job-lease.ts";
import { newestBackup, runBackupControle } from "../src/jobs/backup-controle.ts";
import { runBeveiligingslogAnalyse } from "../src/jobs/beveiligingslog-analyse.ts";
import type { JobContext } from "../src/jobs/job.ts";
import { runTakenControle } from "../src/jobs/taken-controle.ts";
import { jobStatusesPg, newestBackupPg, offenderQueryPg } from "../src/pg/status.ts";
import { releaseLeasePg, startLeasedRunPg } from "../src/pg/job-lease.ts";
import { finishRunPg } from "../src/pg/job-runs.ts";
import { openPgStore } from "../src/pg/store.ts";
import { jobStatuses } from "../src/schedule-due.ts";
import { SCHEDULE } from "../src/schedule.ts";
import { stateZegel, TEST_SEAL, call, makePgTestEnv, makeTestEnv, NOW, backupZegel, eindzegel, zegel, type PgTestEnv, type TestEnv } from "./helpers.ts";
import { useTestCluster } from "./pg.ts";

setDefaultTimeout(120_000);

const MIN = 60_000;
const H = 3600_000;
const at = (iso: string) => new Date(iso);
const ago = (ms: number) => new Date(NOW.getTime() - ms);
/** Called directly: no run of this process is going on. */
const idle: JobContext = { running: [], unrecorded: [] };

const cluster = useTestCluster();

type Env = TestEnv | PgTestEnv;
type Value = string | number | boolean | null;

/** One SQLite and one PostgreSQL environment with the same configuration. */
interface Pair {
  lite: TestEnv;
  pg: PgTestEnv;
  /** Both, SQLite first. */
  both: [TestEnv, PgTestEnv];
}

const pairs: Pair[] = [];
afterEach(async () => {
  for (const p of pairs.splice(0)) {
    await p.lite.cleanup();
    await p.pg.cleanup();
  }
});

/** `icuLocale`: the PostgreSQL database gets that linguistic collation instead of the cluster's C.UTF-8. */
async function pair(config: Record<string, string> = {}, o: { icuLocale?: string } = {}): Promise<Pair> {
  const lite = makeTestEnv(config);
  const pg = await makePgTestEnv({ createDatabase: () => cluster.createDatabase(undefined, o.icuLocale ? { icuLocale: o.icuLocale } : {}) }, config);
  const p: Pair = { lite, pg, both: [lite, pg] };
  pairs.push(p);
  return p;
}

/**
 * One statement with `?` placeholders on either store; returns its rows. Booleans go
 * to SQLite as 1 and 0, as its schema stores them.
 */
async function exec(env: Env, text: string, params: Value[] = []): Promise<Record<string, unknown>[]> {
  if (env.store.kind === "sqlite") {
    return env.store.sqlite.query(text).all(...params.map((v) => (typeof v === "boolean" ? (v ? 1 : 0) : v))) as Record<string, unknown>[];
  }
  let n = 0;
  return (await env.store.sql.unsafe(
    text.replace(/\?/g, () => `$${++n}`),
    params,
  )) as Record<string, unknown>[];
}

/** Inserts a row and returns it (RETURNING *). */
async function insert(env: Env, table: string, row: Record<string, Value>): Promise<Record<string, unknown>> {
  const cols = Object.keys(row);
  const [out] = await exec(env, `INSERT INTO ${table} (${cols.join(", ")}) VALUES (${cols.map(() => "?").join(", ")}) RETURNING *`, Object.values(row));
  return out!;
}

// ---------------------------------------------------------------------------------
// Seeds shared by the scenarios.

/** A job_runs row as the job wrapper leaves it; returns its id. */
async function addRun(env: Env, job: string, gestart: Date, uitkomst = "ok", durationMs: number | null = 1000): Promise<number> {
  const r = {
    job,
    gestart: gestart.toISOString(),
    beeindigd: durationMs === null ? null : new Date(gestart.getTime() + durationMs).toISOString(),
    uitkomst,
    httpStatus: uitkomst === "bezig" ? null : uitkomst === "fout" ? 500 : uitkomst === "afwijking" ? 409 : 200,
  };
  const row = await insert(env, "job_runs", {
    job: r.job,
    gestart: r.gestart,
    beeindigd: r.beeindigd,
    uitkomst: r.uitkomst,
    http_status: r.httpStatus,
    zegel: zegel(job, r.gestart),
    eindzegel: eindzegel(r),
  });
  return Number(row.id);
}

/** Every scheduled job ran at its last fire time at or before `now`, except `skip`. */
async function healthyRuns(env: Env, now: Date, skip: string[] = []) {
  for (const e of SCHEDULE) {
    if (e.cron === null || skip.includes(e.job)) continue;
    const last = new Cron(e.cron, { timezone: "UTC" }).previousRuns(1, new Date(now.getTime() + 1))[0]!;
    await addRun(env, e.job, new Date(last.getTime() + 2000));
  }
}

/** This host as a lease holder writes it (hostname, PID namespace). */
const HERE = newLeaseHolder();

/** A lease on `runId` as another live process holds it (this test's pid, another instance id), valid until `verloopt`. */
async function addLease(env: Env, job: string, runId: number, verloopt: Date, o: { host?: string } = {}) {
  await insert(env, "job_leases", {
    job,
    pid: process.pid,
    instantie: "ander-proces-id",
    host: o.host ?? HERE.host,
    pid_ns: HERE.pidNs,
    run_id: runId,
    verkregen: "2026-07-23T00:00:00.000Z",
    vernieuwd: "2026-07-23T00:00:00.000Z",
    verloopt: verloopt.toISOString(),
    zegel: TEST_SEAL.sealLease({ job, pid: process.pid, instantie: "ander-proces-id", host: o.host ?? HERE.host, pidNs: HERE.pidNs, runId, verloopt: verloopt.toISOString() }),
  });
}

/** A report as backup-status stores it: sealed (src/row-seal.ts). */
async function addBackup(env: Env, ontvangen: Date, exitCode = 0, foutmelding = "") {
  const b = { ontvangen: ontvangen.toISOString(), exitCode, gelukt: exitCode === 0, bestandsnaam: "db.tar.gz", grootte: 1234, foutmelding, bron: "host-cron" };
  await insert(env, "backup_statuses", {
    ontvangen: b.ontvangen,
    exit_code: b.exitCode,
    gelukt: b.gelukt,
    bestandsnaam: b.bestandsnaam,
    grootte: b.grootte,
    foutmelding: b.foutmelding,
    bron: b.bron,
    zegel: backupZegel(b),
  });
}

/**
 * One of each status at NOW: gemist (dagrapport), onderbroken (beveiligingslog-retentie),
 * hangt (audit-verificatie, alive under another process's lease past its 60 minutes),
 * loopt (beveiligingslog-analyse, under a lease within its 5 minutes), faalt
 * (backup-controle), ok (the others).
 */
async function mixedHistory(env: Env) {
  await healthyRuns(env, NOW, ["dagrapport", "audit-verificatie", "beveiligingslog-retentie", "backup-controle", "beveiligingslog-analyse"]);
  await addRun(env, "dagrapport", at("2026-07-22T06:00:01.000Z"));
  await addRun(env, "beveiligingslog-retentie", at("2026-07-23T03:00:01.000Z"), "bezig", null);
  await addLease(env, "audit-verificatie", await addRun(env, "audit-verificatie", at("2026-07-23T01:00:01.000Z"), "bezig", null), at("2026-07-23T12:01:00.000Z"));
  await addLease(env, "beveiligingslog-analyse", await addRun(env, "beveiligingslog-analyse", at("2026-07-23T11:59:00.000Z"), "bezig", null), at("2026-07-23T12:01:00.000Z"), {
    host: "elders.example",
  });
  await addRun(env, "backup-controle", at("2026-07-23T11:15:01.000Z"), "fout");
}

describe("the reads of src/pg/status.ts give what SQLite's give", () => {
  test("jobStatusesPg: the same statuses, runs, leases and fire times as jobStatuses for one history", async () => {
    const { lite, pg, both } = await pair();
    for (const env of both) await mixedHistory(env);
    const grace = lite.config.takenMargeMinuten * MIN;
    const onSqlite = jobStatuses(lite.store.db, TEST_SEAL, NOW, grace, idle);
    const onPg = await jobStatusesPg(pg.store.db, TEST_SEAL, NOW, grace, idle);
    expect(onPg).toEqual(onSqlite);
    const byJob = Object.fromEntries(onPg.map((s) => [s.job, s.status]));
    expect(byJob).toMatchObject({
      dagrapport: "gemist",
      "beveiligingslog-retentie": "onderbroken",
      "audit-verificatie": "hangt",
      "beveiligingslog-analyse": "loopt",
      "backup-controle": "faalt",
      weekrapport: "ok",
      "backup-status": null,
    });
    expect(onPg.find((s) => s.job === "audit-verificatie")).toMatchObject({ levend: "ander-proces", houder: { pid: process.pid, instantie: "ander-proces-id" } });

    // What the job wrapper knows of this process counts the same: a run it executes is
    // alive, an end it kept is the run's end.
    const retentieId = onPg.find((s) => s.job === "beveiligingslog-retentie")!.run!.id;
    const dagId = onPg.find((s) => s.job === "dagrapport")!.run!.id;
    const context: JobContext = {
      running: [{ job: "beveiligingslog-retentie", runId: retentieId }],
      unrecorded: [{ job: "dagrapport", runId: dagId, beeindigd: "2026-07-22T06:00:09.000Z", uitkomst: "fout" }],
    };
    const liveLite = jobStatuses(lite.store.db, TEST_SEAL, NOW, grace, context);
    const livePg = await jobStatusesPg(pg.store.db, TEST_SEAL, NOW, grace, context);
    expect(livePg).toEqual(liveLite);
    expect(livePg.find((s) => s.job === "beveiligingslog-retentie")).toMatchObject({ status: "hangt", levend: "dit-proces" });
    expect(livePg.find((s) => s.job === "dagrapport")!.run).toMatchObject({ beeindigd: "2026-07-22T06:00:09.000Z", uitkomst: "fout" });
  });

  test("jobStatusesPg reads the leases and the runs in one snapshot: a job started by another instance meanwhile is never read as interrupted (300 races)", async () => {
    const { pg } = await pair();
    const other = await openPgStore(pg.url);
    try {
      const seen: Record<string, number> = {};
      for (let i = 0; i < 300; i++) {
        const now = new Date();
        const holder = { ...newLeaseHolder(), host: "elders.example" };
        // Some round trips first, a different number each time, so the take commits at every point of the reads.
        const jitter = i % 7;
        const [statuses, take] = await Promise.all([
          (async () => {
            for (let k = 0; k < jitter; k++) await pg.store.sql`SELECT 1`;
            return jobStatusesPg(pg.store.db, TEST_SEAL, now, 15 * MIN, idle);
          })(),
          startLeasedRunPg(other, TEST_SEAL, "beveiligingslog-analyse", holder, now, 90_000),
        ]);
        expect(take.ok).toBe(true);
        const status = statuses.find((s) => s.job === "beveiligingslog-analyse")!.status ?? "geen";
        seen[status] = (seen[status] ?? 0) + 1;
        if (take.ok) {
          await finishRunPg(other, TEST_SEAL, { runId: take.runId, job: "beveiligingslog-analyse", gestart: now.toISOString() }, new Date(), { uitkomst: "ok", httpStatus: 200 });
          await releaseLeasePg(other, "beveiligingslog-analyse", holder, take.runId);
        }
      }
      expect(seen.onderbroken).toBeUndefined();
      // Both orders occurred: the take seen (a live run) and not yet seen (the previous, ended run).
      expect(Object.keys(seen).length).toBeGreaterThan(1);
    } finally {
      await other.close();
    }
  });

  test("newestBackupPg: the newest sealed by arrival (then id), as newestBackup; none without any", async () => {
    const { lite, pg, both } = await pair();
    expect(await newestBackupPg(pg.store.db, TEST_SEAL, NOW)).toEqual({ backup: null, vervalst: 0, future: null });
    for (const env of both) {
      await addBackup(env, ago(5 * H), 0);
      await addBackup(env, ago(2 * H), 3, "schijf vol");
      await addBackup(env, ago(3 * H), 0); // arrived later, received earlier: not the newest
    }
    const newest = await newestBackupPg(pg.store.db, TEST_SEAL, NOW);
    expect(newest).toEqual(newestBackup(lite.store.db, TEST_SEAL, NOW));
    expect(newest.backup).toEqual({
      ontvangen: ago(2 * H).toISOString(),
      exitCode: 3,
      gelukt: false,
      bestandsnaam: "db.tar.gz",
      grootte: 1234,
      foutmelding: "schijf vol",
      bron: "host-cron",
    });
  });
});

/** The answers of `steps` on each store, in order, with the alarms each raised. */
async function onBoth<T>(p: Pair, steps: (env: Env) => Promise<T>): Promise<{ lite: T; pg: T }> {
  const lite = await steps(p.lite);
  const pg = await steps(p.pg);
  expect(p.pg.alarms.raised).toEqual(p.lite.alarms.raised);
  return { lite, pg };
}

/** What a call answered: its status and JSON body (as `call` parses it). */
const answer = (r: Awaited<ReturnType<typeof call>>) => ({ status: r.status, json: r.json });

describe("backup-status and backup-controle on PostgreSQL", () => {
  test("a report stored through backup-status is what backup-controle finds: fresh 200, too old 409 te-oud, then a failed report 409 mislukt; the same answers and alarms as on SQLite", async () => {
    const p = await pair();
    const report = (body: object) => ({ body: JSON.stringify(body), headers: { "content-type": "application/json" } });
    const long = "x".repeat(9000);
    const { lite, pg } = await onBoth(p, async (env) => {
      const out = [];
      env.setNow(ago(3 * H));
      out.push(answer(await call(env.app, "/api/cron/backup-status", report({ exitCode: 0, bestandsnaam: "nachtwacht-2026-07-23.db.gz", grootte: 183500800, foutmelding: "" }))));
      env.setNow(NOW);
      out.push(answer(await call(env.app, "/api/cron/backup-controle")));
      env.setNow(new Date(NOW.getTime() + 23 * H)); // the report is 26 hours old
      out.push(answer(await call(env.app, "/api/cron/backup-controle")));
      env.setNow(new Date(NOW.getTime() + 23 * H + MIN));
      out.push(answer(await call(env.app, "/api/cron/backup-status", report({ exitCode: 3, grootte: null, foutmelding: long }))));
      out.push(answer(await call(env.app, "/api/cron/backup-controle")));
      const stored = (env.store.kind === "pg" ? await newestBackupPg(env.store.db, TEST_SEAL, env.deps.clock()) : newestBackup(env.store.db, TEST_SEAL, env.deps.clock())).backup;
      return { out, stored };
    });
    expect(pg).toEqual(lite);
    expect(pg.out.map((a) => a.status)).toEqual([200, 200, 409, 200, 409]);
    expect(pg.out[0]!.json).toEqual({ ok: true, gelukt: true });
    expect(pg.out[1]!.json).toEqual({
      ok: true,
      laatsteBackup: {
        ontvangen: ago(3 * H).toISOString(),
        exitCode: 0,
        gelukt: true,
        bestandsnaam: "nachtwacht-2026-07-23.db.gz",
        grootte: 183500800,
        foutmelding: null,
        bron: "host-cron",
      },
      leeftijdUren: 3,
      maxUren: 26,
      ontbreekt: null,
      vervalst: 0,
      toekomst: null,
    });
    expect(pg.out[2]!.json).toMatchObject({ ok: false, reden: "te-oud", leeftijdUren: 26 });
    expect(pg.out[3]!.json).toEqual({ ok: true, gelukt: false });
    expect(pg.out[4]!.json).toMatchObject({ ok: false, reden: "mislukt", laatsteBackup: { exitCode: 3, gelukt: false, grootte: null, bestandsnaam: null } });
    // The error text is cut to 8192 characters, not refused.
    expect(pg.stored!.foutmelding).toBe("x".repeat(8191) + "…");
    expect(p.pg.alarms.raised.map((a) => a.type)).toEqual(["backup-missing", "backup-failure", "backup-missing"]);
  });

  test("a NUL character in a failed backup's stderr (which PostgreSQL's text cannot hold) is stored as U+FFFD on both stores, and the failure alarm is raised", async () => {
    const p = await pair();
    const { lite, pg } = await onBoth(p, async (env) => {
      const r = await call(env.app, "/api/cron/backup-status", {
        body: JSON.stringify({ exitCode: 2, grootte: null, bestandsnaam: "a\u0000b.gz", foutmelding: "gzip: fout\u0000einde" }),
        headers: { "content-type": "application/json" },
      });
      const stored = (env.store.kind === "pg" ? await newestBackupPg(env.store.db, TEST_SEAL, env.deps.clock()) : newestBackup(env.store.db, TEST_SEAL, env.deps.clock())).backup;
      return { status: r.status, stored };
    });
    expect(pg).toEqual(lite);
    expect(pg.status).toBe(200);
    expect(pg.stored).toMatchObject({ bestandsnaam: "a\uFFFDb.gz", foutmelding: "gzip: fout\uFFFDeinde" });
    expect(p.pg.alarms.raised.map((a) => a.type)).toEqual(["backup-failure"]);
  });

  test("no backup ever → 409 geen-backup; exactly BACKUP_MAX_UREN old is already too old, a moment younger is not (backupOverdue on both)", async () => {
    const p = await pair({ BACKUP_MAX_UREN: "30" });
    const { lite, pg } = await onBoth(p, async (env) => {
      const none = await runBackupControle(env.deps, NOW);
      await addBackup(env, ago(30 * H));
      const exactly = await runBackupControle(env.deps, NOW);
      const younger = await runBackupControle(env.deps, new Date(NOW.getTime() - 1));
      return [none, exactly, younger];
    });
    expect(pg).toEqual(lite);
    expect(pg.map((r) => [r.status, "reden" in r.body ? r.body.reden : null])).toEqual([
      [409, "geen-backup"],
      [409, "te-oud"],
      [200, null],
    ]);
    expect(pg[0]!.body).toEqual({ ok: false, reden: "geen-backup", laatsteBackup: null, leeftijdUren: null, maxUren: 30, ontbreekt: null, vervalst: 0, toekomst: null });
  });
});

/** `n` failed attempts (or successful ones), one a minute going back from `startMinAgo`. */
async function failures(env: Env, n: number, o: { ip: (i: number) => string; account: (i: number) => string; startMinAgo?: number; gelukt?: boolean }) {
  for (let i = 0; i < n; i++) {
    await insert(env, "login_attempts", {
      tijdstip: ago(((o.startMinAgo ?? 0) + i) * MIN).toISOString(),
      account: o.account(i),
      ip: o.ip(i),
      gelukt: o.gelukt ?? false,
    });
  }
}

describe("beveiligingslog-analyse on PostgreSQL", () => {
  test("the same offenders at the same thresholds: 20 failures from one IP and 10 on one account are flagged, 19 are not; successes, older failures and the window's edges count alike", async () => {
    const p = await pair();
    const { lite, pg } = await onBoth(p, async (env) => {
      await failures(env, 20, { ip: () => "203.0.113.7", account: (i) => `user${i}@x.nl` });
      await failures(env, 19, { ip: () => "203.0.113.8", account: (i) => `other${i}@x.nl`, startMinAgo: 1 });
      await failures(env, 10, { ip: (i) => `192.0.2.${i}`, account: () => "anna@x.nl", startMinAgo: 5 });
      await failures(env, 30, { ip: () => "198.51.100.1", account: () => "bob@x.nl", gelukt: true });
      await failures(env, 30, { ip: () => "198.51.100.1", account: () => "bob@x.nl", startMinAgo: 61 });
      // at exactly now − 60 min: inside; a millisecond before: outside
      await insert(env, "login_attempts", { tijdstip: ago(60 * MIN).toISOString(), account: "edge@x.nl", ip: "203.0.113.8", gelukt: false });
      await insert(env, "login_attempts", { tijdstip: new Date(NOW.getTime() - 60 * MIN - 1).toISOString(), account: "edge@x.nl", ip: "198.51.100.1", gelukt: false });
      return answer(await call(env.app, "/api/cron/beveiligingslog-analyse"));
    });
    expect(pg).toEqual(lite);
    expect(pg.status).toBe(409);
    expect(pg.json).toEqual({
      ok: false,
      venster: { van: "2026-07-23T11:00:00.000Z", tot: "2026-07-23T12:00:00.000Z" },
      drempels: { ip: 20, account: 10 },
      verdacht: [
        { soort: "ip", waarde: "203.0.113.7", aantal: 20, eerste: "2026-07-23T11:41:00.000Z", laatste: "2026-07-23T12:00:00.000Z" },
        { soort: "ip", waarde: "203.0.113.8", aantal: 20, eerste: "2026-07-23T11:00:00.000Z", laatste: "2026-07-23T11:59:00.000Z" },
        { soort: "account", waarde: "anna@x.nl", aantal: 10, eerste: "2026-07-23T11:46:00.000Z", laatste: "2026-07-23T11:55:00.000Z" },
      ],
      aantalVerdacht: { ip: 2, account: 1 },
      // The older failures were stored after the last run (there was none): late, judged in their own hour, alike.
      laat: {
        pogingen: 31,
        verdacht: [
          {
            soort: "ip",
            waarde: "198.51.100.1",
            aantal: 31,
            eerste: "2026-07-23T10:30:00.000Z",
            laatste: "2026-07-23T10:59:59.999Z",
            venster: { van: "2026-07-23T10:00:00.000Z", tot: "2026-07-23T11:00:00.000Z" },
            teLaat: 60,
          },
          {
            soort: "account",
            waarde: "bob@x.nl",
            aantal: 30,
            eerste: "2026-07-23T10:30:00.000Z",
            laatste: "2026-07-23T10:59:00.000Z",
            venster: { van: "2026-07-23T10:00:00.000Z", tot: "2026-07-23T11:00:00.000Z" },
            teLaat: 61,
          },
        ],
        aantalVerdacht: { ip: 1, account: 1 },
        meer: false,
        uitgesteld: false,
      },
    });
    expect(p.pg.alarms.raised.map((a) => a.type)).toEqual(["login-bruteforce"]);
  });

  test("on a database with a linguistic collation ties are still listed in byte order, as on SQLite; past 100 offenders the list stops and the count goes on", async () => {
    const p = await pair({ INLOG_DREMPEL_IP: "1", INLOG_DREMPEL_ACCOUNT: "2" }, { icuLocale: "nl-NL" });
    const { lite, pg } = await onBoth(p, async (env) => {
      const accounts = ["Bob@x.nl", "anna@x.nl", "Émile@x.nl", "zoë@x.nl", "Zeger@x.nl"];
      for (let i = 0; i < 105; i++) {
        await insert(env, "login_attempts", { tijdstip: ago((i % 50) * MIN).toISOString(), account: accounts[i % 5]!, ip: `10.0.${i % 3}.${i}`, gelukt: false });
      }
      return runBeveiligingslogAnalyse(env.deps, NOW);
    });
    expect(pg).toEqual(lite);
    expect(pg.body.aantalVerdacht).toEqual({ ip: 105, account: 5 });
    const ips = pg.body.verdacht.filter((v) => v.soort === "ip");
    expect(ips).toHaveLength(100);
    expect(ips.slice(0, 3).map((v) => v.waarde)).toEqual(["10.0.0.0", "10.0.0.102", "10.0.0.12"]);
    // 21 attempts each, so in byte order: capitals before lower case, É (UTF-8 C3 89) after every ASCII letter.
    expect(pg.body.verdacht.filter((v) => v.soort === "account").map((v) => v.waarde)).toEqual(["Bob@x.nl", "Zeger@x.nl", "anna@x.nl", "zoë@x.nl", "Émile@x.nl"]);
  });

  test("the PostgreSQL query can answer from the partial index of failed attempts alone (its literal predicate)", async () => {
    const p = await pair();
    const conn = await p.pg.store.sql.reserve();
    try {
      // A near-empty table is read sequentially whatever the index: ask what the planner can do without that.
      await conn`SET enable_seqscan = off`;
      for (const column of ["ip", "account"] as const) {
        const q = offenderQueryPg(p.pg.store.db, column, "a", "b", 1).toSQL();
        const plan = ((await conn.unsafe(`EXPLAIN ${q.sql}`, q.params as unknown[])) as { "QUERY PLAN": string }[]).map((r) => r["QUERY PLAN"]).join("\n");
        expect(plan).toContain("Index Only Scan using login_attempts_failed_idx");
      }
    } finally {
      conn.release();
    }
  });
});

function setInstalled(env: Env, d: Date) {
  return exec(env, "UPDATE service_meta SET value = ?, zegel = ? WHERE key = 'geinstalleerd'", [d.toISOString(), TEST_SEAL.sealInstalled(d.toISOString())]);
}

describe("taken-controle on PostgreSQL", () => {
  test("over HTTP, one history: gemist, onderbroken, hangt and loopt under another process's lease, faalt, ok, and its own run loopt here; the same body and alarms as on SQLite", async () => {
    const p = await pair();
    const { lite, pg } = await onBoth(p, async (env) => {
      await mixedHistory(env);
      return answer(await call(env.app, "/api/cron/taken-controle"));
    });
    expect(pg).toEqual(lite);
    expect(pg.status).toBe(409);
    expect(pg.json).toMatchObject({
      ok: false,
      gemist: ["dagrapport"],
      falend: ["beveiligingslog-retentie", "backup-controle"],
      onderbroken: ["beveiligingslog-retentie"],
      hangend: ["audit-verificatie"],
    });
    const regel = (job: string) => pg.json.taken.find((t: { job: string }) => t.job === job);
    expect(regel("beveiligingslog-analyse")).toMatchObject({ status: "loopt", levend: "ander-proces", houder: { pid: process.pid, verloopt: "2026-07-23T12:01:00.000Z" } });
    expect(regel("taken-controle")).toMatchObject({ status: "loopt", levend: "dit-proces", laatsteRun: { gestart: NOW.toISOString(), beeindigd: null, uitkomst: "bezig" } });
    expect(regel("weekrapport")).toMatchObject({ status: "ok" });
    expect(p.pg.alarms.raised.map((a) => a.type)).toEqual(["job-missed", "job-interrupted", "job-hung"]);
    // The wrapper wrote taken-controle's own end on PostgreSQL too.
    expect(await exec(p.pg, "SELECT uitkomst, http_status FROM job_runs WHERE job = 'taken-controle' AND gestart = ?", [NOW.toISOString()])).toEqual([
      { uitkomst: "afwijking", http_status: 409 },
    ]);
  });

  test("a newly installed service: nothing expected before the first fire time plus grace, then gemist; the same on both stores", async () => {
    const p = await pair();
    const { lite, pg } = await onBoth(p, async (env) => {
      await setInstalled(env, ago(10 * MIN)); // 11:50
      return [await runTakenControle(env.deps, NOW, idle), await runTakenControle(env.deps, at("2026-07-23T12:31:00.000Z"), idle)];
    });
    expect(pg).toEqual(lite);
    const [first, later] = pg;
    expect(first!.status).toBe(200);
    expect(first!.body.taken.filter((t) => t.status !== "nog-niet-verwacht").map((t) => [t.job, t.status])).toEqual([["beveiligingslog-analyse", "wacht"]]);
    expect(later!.status).toBe(409);
    expect(later!.body.gemist).toEqual(["beveiligingslog-analyse"]);
  });
});

const METRICS_SECRET = "metrics-secret-0123456789abcdef0123456789abcdef";

describe("/metrics on PostgreSQL", () => {
  test("the same exposition text as on SQLite for the same runs, lease, verifications and backup", async () => {
    const p = await pair({ METRICS_SECRET });
    const { lite, pg } = await onBoth(p, async (env) => {
      await mixedHistory(env);
      await addBackup(env, ago(27 * H)); // overdue
      // The run that wrote the results below (they count only from a named run's start on:
      // verificationSince); tonight's is still under way in mixedHistory.
      await addRun(env, "audit-verificatie", at("2026-07-22T01:00:02.000Z"));
      for (const [naam, intact] of [
        ["A", true],
        ["B", false],
        ["C", true],
      ] as const) {
        const tenant = await insert(env, "tenants", { naam, actief: true, aangemaakt: ago(100 * H).toISOString() });
        const state = { tenantId: Number(tenant.id), gecontroleerd: ago((naam.charCodeAt(0) - 60) * H).toISOString(), intact, aantalEntries: 5, foutSeq: intact ? null : 3, foutReden: intact ? null : "hash-afwijkend" };
        await insert(env, "audit_verification_state", {
          tenant_id: state.tenantId,
          gecontroleerd: state.gecontroleerd,
          intact,
          aantal_entries: 5,
          fout_seq: state.foutSeq,
          fout_reden: state.foutReden,
          zegel: stateZegel(state),
        });
      }
      const r = await call(env.app, "/metrics", { method: "GET", token: METRICS_SECRET });
      // The disks' samples are this host's, read at the scrape (and on PostgreSQL without
      // the database's): test/disk-space.test.ts checks them. The server's clock offset is
      // PostgreSQL's alone (test/metrics.test.ts).
      const text = r.text.replace(/^nachtwacht_filesystem_(avail|size)_bytes\{.*\n/gm, "").replace(/^(# (HELP|TYPE) )?nachtwacht_database_clock_offset_seconds .*\n/gm, "");
      return { status: r.status, text };
    });
    expect(pg.status).toBe(200);
    expect(pg).toEqual(lite);
    const text = pg.text;
    // Every family that comes from the database is there (database_up 1 renders them all).
    const families = text
      .split("\n")
      .filter((l) => l.startsWith("# TYPE "))
      .map((l) => l.split(" ")[2]);
    for (const f of [
      "job_last_start_timestamp_seconds",
      "job_last_end_timestamp_seconds",
      "job_last_duration_seconds",
      "job_last_outcome",
      "job_scheduled",
      "job_overdue",
      "audit_tenants_checked",
      "audit_tenants_broken",
      "audit_last_verification_timestamp_seconds",
      "backup_last_success",
      "backup_last_timestamp_seconds",
      "backup_last_age_seconds",
      "backup_overdue",
    ]) {
      expect(families).toContain(`nachtwacht_${f}`);
    }
    for (const line of [
      "nachtwacht_database_up 1",
      'nachtwacht_job_overdue{job="dagrapport"} 1',
      'nachtwacht_job_overdue{job="audit-verificatie"} 0',
      'nachtwacht_job_last_outcome{job="backup-controle",outcome="fout"} 1',
      "nachtwacht_audit_tenants_checked 3",
      "nachtwacht_audit_tenants_broken 1",
      `nachtwacht_audit_last_verification_timestamp_seconds ${ago(5 * H).getTime() / 1000}`,
      "nachtwacht_backup_last_success 1",
      "nachtwacht_backup_overdue 1",
    ]) {
      expect(text.split("\n")).toContain(line);
    }
  });

  test("a PostgreSQL that cannot be read: 200 with nachtwacht_database_up 0 and the in-process part", async () => {
    const p = await pair({ METRICS_SECRET });
    await p.pg.store.close();
    const r = await call(p.pg.app, "/metrics", { method: "GET", token: METRICS_SECRET });
    expect(r.status).toBe(200);
    expect(r.text.split("\n")).toContain("nachtwacht_database_up 0");
    expect(r.text).toContain('nachtwacht_job_running{job="dagrapport"} 0');
    expect(r.text).not.toContain("nachtwacht_job_overdue");
  });
});
