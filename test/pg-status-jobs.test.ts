// backup-status, backup-controle, beveiligingslog-analyse, taken-controle and /metrics on
// PostgreSQL (src/pg/status.ts) against a real server (test/pg.ts): each scenario is
// seeded the same on SQLite and on PostgreSQL, and both must answer with the same
// status, the same body and the same alarms. The scenarios are those of
// test/backup-controle.test.ts, test/beveiligingslog-analyse.test.ts,
// test/taken-controle.test.ts and test/metrics.test.ts.
import { afterAll, afterEach, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { Cron } from "croner";
import { newLeaseHolder } from "../src/job-lease.ts";
import { newestBackup } from "../src/jobs/backup-controle.ts";
import type { JobContext } from "../src/jobs/job.ts";
import { jobStatusesPg, newestBackupPg } from "../src/pg/status.ts";
import { jobStatuses } from "../src/schedule-due.ts";
import { SCHEDULE } from "../src/schedule.ts";
import { makePgTestEnv, makeTestEnv, NOW, type PgTestEnv, type TestEnv } from "./helpers.ts";
import { startCluster, type TestCluster } from "./pg.ts";

setDefaultTimeout(120_000);

const MIN = 60_000;
const H = 3600_000;
const at = (iso: string) => new Date(iso);
const ago = (ms: number) => new Date(NOW.getTime() - ms);
/** Called directly: no run of this process is going on. */
const idle: JobContext = { running: [], unrecorded: [] };

let cluster: TestCluster;
beforeAll(async () => {
  cluster = await startCluster();
});
afterAll(async () => {
  await cluster?.stop();
});

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

async function pair(config: Record<string, string> = {}): Promise<Pair> {
  const lite = makeTestEnv(config);
  const pg = await makePgTestEnv(cluster, config);
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
  const row = await insert(env, "job_runs", {
    job,
    gestart: gestart.toISOString(),
    beeindigd: durationMs === null ? null : new Date(gestart.getTime() + durationMs).toISOString(),
    uitkomst,
    http_status: uitkomst === "bezig" ? null : uitkomst === "fout" ? 500 : uitkomst === "afwijking" ? 409 : 200,
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
  });
}

async function addBackup(env: Env, ontvangen: Date, exitCode = 0, foutmelding = "") {
  await insert(env, "backup_statuses", {
    ontvangen: ontvangen.toISOString(),
    exit_code: exitCode,
    gelukt: exitCode === 0,
    bestandsnaam: "db.tar.gz",
    grootte: 1234,
    foutmelding,
    bron: "host-cron",
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
    const onSqlite = jobStatuses(lite.store.db, NOW, grace, idle);
    const onPg = await jobStatusesPg(pg.store.db, NOW, grace, idle);
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
    const liveLite = jobStatuses(lite.store.db, NOW, grace, context);
    const livePg = await jobStatusesPg(pg.store.db, NOW, grace, context);
    expect(livePg).toEqual(liveLite);
    expect(livePg.find((s) => s.job === "beveiligingslog-retentie")).toMatchObject({ status: "hangt", levend: "dit-proces" });
    expect(livePg.find((s) => s.job === "dagrapport")!.run).toMatchObject({ beeindigd: "2026-07-22T06:00:09.000Z", uitkomst: "fout" });
  });

  test("newestBackupPg: the newest by arrival (then id), as newestBackup; null without any", async () => {
    const { lite, pg, both } = await pair();
    expect(await newestBackupPg(pg.store.db)).toBeNull();
    for (const env of both) {
      await addBackup(env, ago(5 * H), 0);
      await addBackup(env, ago(2 * H), 3, "schijf vol");
      await addBackup(env, ago(3 * H), 0); // arrived later, received earlier: not the newest
    }
    const newest = await newestBackupPg(pg.store.db);
    expect(newest).toEqual(newestBackup(lite.store.db));
    expect(newest).toEqual({
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
