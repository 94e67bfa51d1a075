import { describe, expect, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import { SQL } from "bun";
import { Cron } from "croner";
import { drizzle } from "drizzle-orm/bun-sql";
import * as pgSchema from "../db/schema-pg.ts";
import { newLeaseHolder } from "../src/job-lease.ts";
import { defineJob, type JobContext } from "../src/jobs/job.ts";
import { runTakenControle, takenControleJob, TakenControleBody } from "../src/jobs/taken-controle.ts";
import { jobStatusesPg } from "../src/pg/status.ts";
import { jobStatuses, type JobStatus } from "../src/schedule-due.ts";
import { SCHEDULE, type JobName } from "../src/schedule.ts";
import { TEST_SEAL, call, NOW } from "./helpers.ts";
import { addSealedRun, makeEnv, type Env } from "./dialect.ts";

const MIN = 60_000;
const at = (iso: string) => new Date(iso);
/** Called directly: no run of this process is going on. */
const idle: JobContext = { running: [], unrecorded: [] };

const addRun = addSealedRun;

/** Every scheduled job ran at its last fire time at or before `now`, except `skip`. */
async function healthyRuns(env: Env, now: Date, skip: string[] = []) {
  for (const e of SCHEDULE) {
    if (e.cron === null || skip.includes(e.job)) continue;
    const last = new Cron(e.cron, { timezone: "UTC" }).previousRuns(1, new Date(now.getTime() + 1))[0]!;
    await addRun(env, e.job, new Date(last.getTime() + 2000));
  }
}

/** The id of the newest run of `job`. */
async function newestRunId(env: Env, job: string): Promise<number> {
  return (await env.db.get<{ id: number }>("SELECT id FROM job_runs WHERE job = ? ORDER BY id DESC LIMIT 1", job))!.id;
}

/** This host as a lease holder writes it (hostname, PID namespace). */
const HERE = newLeaseHolder();
/** A pid that existed on this host and is gone (the child was reaped). */
const DEAD_PID = Bun.spawnSync(["true"]).pid;

/**
 * A lease on `runId` as another process holds it (job_leases, src/job-lease.ts), valid
 * until `verloopt`: by default a live process on this host (the test's own pid, another
 * instance id), or one on another host.
 */
function addLease(env: Env, job: string, runId: number, verloopt: Date, o: { pid?: number; host?: string } = {}) {
  return env.db.run(
    "INSERT INTO job_leases (job, pid, instantie, host, pid_ns, run_id, verkregen, vernieuwd, verloopt, zegel) VALUES (?, ?, 'ander-proces-id', ?, ?, ?, ?, ?, ?, ?)",
    job,
    o.pid ?? process.pid,
    o.host ?? HERE.host,
    HERE.pidNs,
    runId,
    "2026-07-23T00:00:00.000Z",
    "2026-07-23T00:00:00.000Z",
    verloopt.toISOString(),
    TEST_SEAL.sealLease({ job, pid: o.pid ?? process.pid, instantie: "ander-proces-id", host: o.host ?? HERE.host, pidNs: HERE.pidNs, runId, verloopt: verloopt.toISOString() }),
  );
}

async function setInstalled(env: Env, d: Date) {
  await env.db.run("UPDATE service_meta SET value = ?, zegel = ? WHERE key = 'geinstalleerd'", d.toISOString(), TEST_SEAL.sealInstalled(d.toISOString()));
}

/**
 * jobStatuses on a connection that refuses every write: on SQLite the store's own with
 * PRAGMA query_only, on PostgreSQL a pool of its own whose sessions start with
 * default_transaction_read_only (shown to refuse a write first).
 */
async function readOnlyJobStatuses(env: Env, now: Date, graceMs: number, context: JobContext): Promise<JobStatus[]> {
  const store = env.store;
  if (store.kind === "sqlite") {
    store.sqlite.run("PRAGMA query_only = 1");
    try {
      expect(() => store.sqlite.run("DELETE FROM job_runs")).toThrow(/readonly/);
      return jobStatuses(store.db, TEST_SEAL, now, graceMs, context);
    } finally {
      store.sqlite.run("PRAGMA query_only = 0");
    }
  }
  const sql = new SQL(store.url, { max: 2, connection: { default_transaction_read_only: "on" } });
  try {
    await expect(sql`DELETE FROM job_runs`).rejects.toThrow(/read-only/);
    return await jobStatusesPg(drizzle({ client: sql, schema: pgSchema }), TEST_SEAL, now, graceMs, context);
  } finally {
    await sql.close();
  }
}

const statusOf = (body: { taken: { job: string; status: string }[] }, job: string) => body.taken.find((t) => t.job === job)?.status;

describe("taken-controle", () => {
  test("every scheduled job ran since its last fire time → 200, all ok, backup-status (no cron) not listed", async () => {
    const env = await makeEnv();
    try {
      await healthyRuns(env, NOW);
      const r = await runTakenControle(env.deps, NOW, idle);
      expect(r.status).toBe(200);
      expect(r.body.ok).toBe(true);
      expect(r.body.taken).toHaveLength(10);
      expect(r.body.taken.every((t) => t.status === "ok")).toBe(true);
      expect(r.body.taken.map((t) => t.job)).not.toContain("backup-status");
      const dag = r.body.taken.find((t) => t.job === "dagrapport")!;
      expect(dag.laatsteVerwacht).toBe("2026-07-23T06:00:00.000Z");
      expect(dag.laatsteRun).toEqual({ gestart: "2026-07-23T06:00:02.000Z", beeindigd: "2026-07-23T06:00:03.000Z", uitkomst: "ok" });
      expect(env.alarms.raised).toHaveLength(0);
    } finally {
      await env.cleanup();
    }
  });

  test("a daily job one minute past its grace → 409 gemist and a job-missed alarm", async () => {
    const env = await makeEnv();
    try {
      const now = at("2026-07-23T06:31:00.000Z"); // dagrapport fires 06:00, grace 30 min
      await healthyRuns(env, now, ["dagrapport"]);
      await addRun(env, "dagrapport", at("2026-07-22T06:00:01.000Z")); // yesterday's run
      const r = await runTakenControle(env.deps, now, idle);
      expect(r.status).toBe(409);
      expect(r.body.gemist).toEqual(["dagrapport"]);
      expect(r.body.falend).toEqual([]);
      const dag = r.body.taken.find((t) => t.job === "dagrapport")!;
      expect(dag).toMatchObject({ status: "gemist", laatsteVerwacht: "2026-07-23T06:00:00.000Z", gemistSinds: "2026-07-23T06:00:00.000Z" });
      expect(env.alarms.raised).toHaveLength(1);
      expect(env.alarms.raised[0]!.type).toBe("job-missed");
      expect(env.alarms.raised[0]!.message).toContain("dagrapport");
    } finally {
      await env.cleanup();
    }
  });

  test("the same job one minute before its grace ends → 200 with status wacht, no alarm", async () => {
    const env = await makeEnv();
    try {
      const now = at("2026-07-23T06:29:00.000Z");
      await healthyRuns(env, now, ["dagrapport"]);
      await addRun(env, "dagrapport", at("2026-07-22T06:00:01.000Z"));
      const r = await runTakenControle(env.deps, now, idle);
      expect(r.status).toBe(200);
      expect(statusOf(r.body, "dagrapport")).toBe("wacht");
      expect(env.alarms.raised).toHaveLength(0);
    } finally {
      await env.cleanup();
    }
  });

  test("TAKEN_MARGE_MINUTEN sets the grace: 10 minutes → missed at 06:11", async () => {
    const env = await makeEnv({ TAKEN_MARGE_MINUTEN: "10" });
    try {
      const now = at("2026-07-23T06:11:00.000Z");
      await healthyRuns(env, now, ["dagrapport"]);
      const r = await runTakenControle(env.deps, now, idle);
      expect(r.body.margeMinuten).toBe(10);
      expect(r.body.gemist).toEqual(["dagrapport"]);
    } finally {
      await env.cleanup();
    }
  });

  test("a job firing more often than the grace is still found missed once it stops being called", async () => {
    const env = await makeEnv();
    try {
      // beveiligingslog-analyse fires every 15 minutes; its last run was 11:00.
      await healthyRuns(env, NOW, ["beveiligingslog-analyse"]);
      await addRun(env, "beveiligingslog-analyse", at("2026-07-23T11:00:01.000Z"));
      const r = await runTakenControle(env.deps, NOW, idle);
      expect(r.status).toBe(409);
      expect(r.body.gemist).toEqual(["beveiligingslog-analyse"]);
      // 12:00 is the last fire time; 11:30 is the newest one whose 30 minutes of grace are over.
      expect(r.body.taken.find((t) => t.job === "beveiligingslog-analyse")).toMatchObject({
        laatsteVerwacht: "2026-07-23T12:00:00.000Z",
        gemistSinds: "2026-07-23T11:30:00.000Z",
      });
    } finally {
      await env.cleanup();
    }
  });

  test("a newly installed service with no runs at all does not alarm before the first expected time plus grace", async () => {
    const env = await makeEnv();
    try {
      await setInstalled(env, new Date(NOW.getTime() - 10 * MIN)); // installed 11:50
      const r = await runTakenControle(env.deps, NOW, idle);
      expect(r.status).toBe(200);
      expect(env.alarms.raised).toHaveLength(0);
      // Only beveiligingslog-analyse was due since 11:50 (at 12:00), and it is within grace.
      expect(statusOf(r.body, "beveiligingslog-analyse")).toBe("wacht");
      for (const t of r.body.taken.filter((t) => t.job !== "beveiligingslog-analyse")) expect(t.status).toBe("nog-niet-verwacht");

      // 31 minutes after its first expected time the job that never ran is missed.
      const later = await runTakenControle(env.deps, at("2026-07-23T12:31:00.000Z"), idle);
      expect(later.status).toBe(409);
      expect(later.body.gemist).toEqual(["beveiligingslog-analyse"]);
    } finally {
      await env.cleanup();
    }
  });

  test("a run whose process died before the job's first expected time is still onderbroken (not nog-niet-verwacht)", async () => {
    const env = await makeEnv();
    try {
      await setInstalled(env, new Date(NOW.getTime() - 10 * MIN)); // installed 11:50; dagrapport first expected tomorrow 06:00
      await addRun(env, "dagrapport", at("2026-07-23T11:55:00.000Z"), "bezig", null); // started by hand, process died
      const r = await runTakenControle(env.deps, NOW, idle);
      expect(r.status).toBe(409);
      expect(statusOf(r.body, "dagrapport")).toBe("onderbroken");
      expect(statusOf(r.body, "weekrapport")).toBe("nog-niet-verwacht");
      expect(env.alarms.raised.map((a) => a.type)).toEqual(["job-interrupted"]);
    } finally {
      await env.cleanup();
    }
  });

  test("a job whose last run failed → 409 faalt; a check that answered 409 (afwijking) is not failing", async () => {
    const env = await makeEnv();
    try {
      await healthyRuns(env, NOW, ["dagrapport", "backup-controle"]);
      await addRun(env, "dagrapport", at("2026-07-23T06:00:01.000Z"), "fout");
      await addRun(env, "backup-controle", at("2026-07-23T11:15:01.000Z"), "afwijking");
      const r = await runTakenControle(env.deps, NOW, idle);
      expect(r.status).toBe(409);
      expect(r.body.falend).toEqual(["dagrapport"]);
      expect(r.body.gemist).toEqual([]);
      expect(statusOf(r.body, "dagrapport")).toBe("faalt");
      expect(statusOf(r.body, "backup-controle")).toBe("ok");
      expect(env.alarms.raised.map((a) => a.type)).toEqual(["job-missed"]);
    } finally {
      await env.cleanup();
    }
  });

  test("a run left 'bezig' that no process keeps alive is onderbroken (job-interrupted); one whose lease another process renews is loopt", async () => {
    const env = await makeEnv();
    try {
      await healthyRuns(env, NOW, ["audit-verificatie", "beveiligingslog-analyse"]);
      await addRun(env, "audit-verificatie", at("2026-07-23T01:00:01.000Z"), "bezig", null); // process died mid-run
      await addRun(env, "beveiligingslog-analyse", at("2026-07-23T11:59:00.000Z"), "bezig", null); // running in another process
      await addLease(env, "beveiligingslog-analyse", await newestRunId(env, "beveiligingslog-analyse"), at("2026-07-23T12:01:00.000Z"));
      const r = await runTakenControle(env.deps, NOW, idle);
      expect(r.status).toBe(409);
      expect(r.body).toMatchObject({ gemist: [], falend: ["audit-verificatie"], onderbroken: ["audit-verificatie"], hangend: [] });
      expect(statusOf(r.body, "audit-verificatie")).toBe("onderbroken");
      expect(r.body.taken.find((t) => t.job === "beveiligingslog-analyse")).toMatchObject({
        status: "loopt",
        levend: "ander-proces",
        houder: { pid: process.pid, verloopt: "2026-07-23T12:01:00.000Z" },
        maxLooptijdMinuten: 5,
      });
      expect(env.alarms.raised.map((a) => a.type)).toEqual(["job-interrupted"]);
      expect(env.alarms.raised[0]!.message).toContain("De laatste run van audit-verificatie is nooit beëindigd");
      expect(env.alarms.raised[0]!.message).not.toContain("beveiligingslog-analyse");
      expect([...Value.Errors(TakenControleBody, r.body)]).toEqual([]);
    } finally {
      await env.cleanup();
    }
  });

  test("a lease does not keep a run alive once it has expired, nor when it belongs to another run", async () => {
    const env = await makeEnv();
    try {
      await healthyRuns(env, NOW, ["dagrapport", "audit-anker"]);
      await addRun(env, "dagrapport", at("2026-07-23T11:58:00.000Z"), "bezig", null);
      await addLease(env, "dagrapport", await newestRunId(env, "dagrapport"), NOW); // expires at 12:00:00.000: no longer valid at 12:00
      await addRun(env, "audit-anker", at("2026-07-23T01:30:00.000Z"), "ok");
      const ankerOk = await newestRunId(env, "audit-anker");
      await addRun(env, "audit-anker", at("2026-07-23T11:59:00.000Z"), "bezig", null);
      await addLease(env, "audit-anker", ankerOk, at("2026-07-23T12:05:00.000Z")); // a valid lease, but of the earlier run
      const r = await runTakenControle(env.deps, NOW, idle);
      expect(statusOf(r.body, "dagrapport")).toBe("onderbroken");
      expect(statusOf(r.body, "audit-anker")).toBe("onderbroken");
      expect(r.body.onderbroken).toEqual(["dagrapport", "audit-anker"]);

      // One millisecond earlier the dagrapport lease is still valid: the run is alive.
      const earlier = await runTakenControle(env.deps, new Date(NOW.getTime() - 1), idle);
      expect(statusOf(earlier.body, "dagrapport")).toBe("loopt");
    } finally {
      await env.cleanup();
    }
  });

  test("a run alive in another process past its maximum run time hangt (job-hung, with the holder's pid); after its lease expired it is onderbroken", async () => {
    const env = await makeEnv();
    try {
      await healthyRuns(env, NOW, ["audit-verificatie"]);
      await addRun(env, "audit-verificatie", at("2026-07-23T10:59:59.000Z"), "bezig", null);
      const runId = await newestRunId(env, "audit-verificatie");
      await addLease(env, "audit-verificatie", runId, at("2026-07-23T12:01:30.000Z"), { host: "elders.example" });

      // Maximum 60 minutes: at 11:59:59 the run is exactly that old and still loopt.
      const within = await runTakenControle(env.deps, at("2026-07-23T11:59:59.000Z"), idle);
      expect(within.status).toBe(200);
      expect(statusOf(within.body, "audit-verificatie")).toBe("loopt");

      const r = await runTakenControle(env.deps, NOW, idle);
      expect(r.status).toBe(409);
      expect(r.body).toMatchObject({ ok: false, gemist: [], falend: [], onderbroken: [], hangend: ["audit-verificatie"] });
      expect(r.body.taken.find((t) => t.job === "audit-verificatie")).toMatchObject({
        status: "hangt",
        levend: "ander-proces",
        houder: { pid: process.pid, verloopt: "2026-07-23T12:01:30.000Z" },
        maxLooptijdMinuten: 60,
        laatsteRun: { gestart: "2026-07-23T10:59:59.000Z", beeindigd: null, uitkomst: "bezig" },
      });
      expect(env.alarms.raised.map((a) => a.type)).toEqual(["job-hung"]);
      expect(env.alarms.raised[0]!.message).toContain(`audit-verificatie (gestart 2026-07-23T10:59:59.000Z, maximaal 60 min, proces pid ${process.pid})`);
      expect([...Value.Errors(TakenControleBody, r.body)]).toEqual([]);

      // The holder stopped renewing (it died): after the expiry the same row is onderbroken.
      const later = await runTakenControle(env.deps, at("2026-07-23T12:01:30.000Z"), idle);
      expect(statusOf(later.body, "audit-verificatie")).toBe("onderbroken");
      expect(later.body.hangend).toEqual([]);
      expect(env.alarms.raised.map((a) => a.type)).toEqual(["job-hung", "job-interrupted"]);
    } finally {
      await env.cleanup();
    }
  });

  test("a valid lease whose holder's pid is gone from this host keeps nothing alive (onderbroken at once); the same pid on another host counts until the expiry", async () => {
    const env = await makeEnv();
    try {
      await healthyRuns(env, NOW, ["dagrapport", "audit-anker"]);
      await addRun(env, "dagrapport", at("2026-07-23T11:58:00.000Z"), "bezig", null);
      await addLease(env, "dagrapport", await newestRunId(env, "dagrapport"), at("2026-07-23T12:01:00.000Z"), { pid: DEAD_PID });
      await addRun(env, "audit-anker", at("2026-07-23T11:58:00.000Z"), "bezig", null);
      await addLease(env, "audit-anker", await newestRunId(env, "audit-anker"), at("2026-07-23T12:01:00.000Z"), { pid: DEAD_PID, host: "elders.example" });
      const r = await runTakenControle(env.deps, NOW, idle);
      expect(statusOf(r.body, "dagrapport")).toBe("onderbroken");
      expect(r.body.taken.find((t) => t.job === "audit-anker")).toMatchObject({ status: "loopt", levend: "ander-proces", houder: { pid: DEAD_PID } });
      expect(r.body.onderbroken).toEqual(["dagrapport"]);
    } finally {
      await env.cleanup();
    }
  });

  test("hangt, onderbroken and gemist in one check: each in its own list, each its own alarm type naming only its jobs", async () => {
    const env = await makeEnv();
    try {
      await healthyRuns(env, NOW, ["dagrapport", "audit-verificatie", "beveiligingslog-retentie", "backup-controle"]);
      // gemist: dagrapport fired 06:00 and its last run is yesterday's.
      await addRun(env, "dagrapport", at("2026-07-22T06:00:01.000Z"));
      // onderbroken: beveiligingslog-retentie started 03:00 and its process died.
      await addRun(env, "beveiligingslog-retentie", at("2026-07-23T03:00:01.000Z"), "bezig", null);
      // hangt: audit-verificatie alive in another process since 01:00 (maximum 60 minutes).
      await addRun(env, "audit-verificatie", at("2026-07-23T01:00:01.000Z"), "bezig", null);
      await addLease(env, "audit-verificatie", await newestRunId(env, "audit-verificatie"), at("2026-07-23T12:01:00.000Z"));
      // faalt: backup-controle's last run failed (job-missed, as before).
      await addRun(env, "backup-controle", at("2026-07-23T11:15:01.000Z"), "fout");
      const r = await runTakenControle(env.deps, NOW, idle);
      expect(r.status).toBe(409);
      expect(r.body).toMatchObject({
        ok: false,
        gemist: ["dagrapport"],
        falend: ["beveiligingslog-retentie", "backup-controle"],
        onderbroken: ["beveiligingslog-retentie"],
        hangend: ["audit-verificatie"],
      });
      expect(statusOf(r.body, "dagrapport")).toBe("gemist");
      expect(statusOf(r.body, "beveiligingslog-retentie")).toBe("onderbroken");
      expect(statusOf(r.body, "audit-verificatie")).toBe("hangt");
      expect(statusOf(r.body, "backup-controle")).toBe("faalt");
      const [missed, interrupted, hung] = env.alarms.raised;
      expect(env.alarms.raised.map((a) => a.type)).toEqual(["job-missed", "job-interrupted", "job-hung"]);
      expect(missed!.message).toBe("Geplande taken lopen niet zoals verwacht (niet gestart: dagrapport; laatste run mislukt: backup-controle). Controleer de crontab en de service.");
      expect(interrupted!.message).toContain("beveiligingslog-retentie");
      expect(hung!.message).toContain("audit-verificatie");
      for (const a of [interrupted!, hung!]) expect(a.message).not.toContain("dagrapport");
      expect(interrupted!.message).not.toContain("audit-verificatie");
      expect(hung!.message).not.toContain("beveiligingslog-retentie");
      expect(interrupted!.context).toMatchObject({ onderbroken: ["beveiligingslog-retentie"] });
      expect(hung!.context).toMatchObject({ hangend: ["audit-verificatie"] });
      expect([...Value.Errors(TakenControleBody, r.body)]).toEqual([]);
    } finally {
      await env.cleanup();
    }
  });

  test("over HTTP: taken-controle's own run counts, so it never reports itself missed (it is running: loopt)", async () => {
    const env = await makeEnv();
    try {
      const now = at("2026-07-23T13:16:00.000Z"); // its own fire time 12:45 is 31 minutes ago
      await healthyRuns(env, now, ["taken-controle"]);
      env.setNow(now);
      const res = await call(env.app, "/api/cron/taken-controle");
      expect(res.status).toBe(200);
      expect(res.json.taken.find((t: { job: string }) => t.job === "taken-controle")).toMatchObject({
        status: "loopt",
        laatsteRun: { gestart: now.toISOString(), beeindigd: null, uitkomst: "bezig" },
      });
      const row = await env.db.get<{ uitkomst: string }>("SELECT uitkomst FROM job_runs WHERE job = 'taken-controle'");
      expect(row!.uitkomst).toBe("ok");
    } finally {
      await env.cleanup();
    }
  });
});

describe("taken-controle: runs this process is running right now", () => {
  /** A job that stays running until `finish()`; `started` resolves once the wrapper has recorded its run. */
  function heldJob(name: "beveiligingslog-retentie" | "beveiligingslog-analyse") {
    let finish!: () => void;
    let markStarted!: () => void;
    const release = new Promise<void>((r) => (finish = r));
    const started = new Promise<void>((r) => (markStarted = r));
    const job = defineJob({
      name,
      summary: "t",
      description: "t",
      run: async () => {
        markStarted();
        await release;
        return { status: 200, body: { ok: true } };
      },
    });
    return { job, started, finish };
  }

  test("a long retention run still going after the grace is 'loopt', not onderbroken: 200, no alarm", async () => {
    const retentie = heldJob("beveiligingslog-retentie");
    const env = await makeEnv({}, { jobs: [retentie.job, takenControleJob] });
    let running: ReturnType<typeof call> | undefined;
    try {
      const now = at("2026-07-23T03:45:00.000Z"); // beveiligingslog-retentie fired 03:00, grace 30 minutes
      await healthyRuns(env, now, ["beveiligingslog-retentie", "taken-controle"]);
      env.setNow(at("2026-07-23T03:00:01.000Z"));
      running = call(env.app, "/api/cron/beveiligingslog-retentie");
      await retentie.started;

      env.setNow(now);
      const res = await call(env.app, "/api/cron/taken-controle");
      expect(res.status).toBe(200);
      expect(res.json).toMatchObject({ ok: true, gemist: [], falend: [] });
      expect(res.json.taken.find((t: { job: string }) => t.job === "beveiligingslog-retentie")).toMatchObject({
        status: "loopt",
        laatsteRun: { gestart: "2026-07-23T03:00:01.000Z", beeindigd: null, uitkomst: "bezig" },
      });
      expect(env.alarms.raised).toHaveLength(0);

      retentie.finish();
      expect((await running).status).toBe(200);
    } finally {
      retentie.finish();
      await running?.catch(() => {});
      await env.cleanup();
    }
  });

  test("a job whose later calls were refused because its run is still going is 'loopt', not gemist; past its maximum run time it hangt", async () => {
    const analyse = heldJob("beveiligingslog-analyse");
    const env = await makeEnv({}, { jobs: [analyse.job, takenControleJob] });
    let running: ReturnType<typeof call> | undefined;
    try {
      // The other jobs ran on time up to 11:05:01 and up to 12:00: a run dated after the
      // clock (12:00's runs at 11:05) does not count (FUTURE_START_MARGIN_MS).
      await healthyRuns(env, at("2026-07-23T11:05:01.000Z"), ["beveiligingslog-analyse", "taken-controle"]);
      await healthyRuns(env, NOW, ["beveiligingslog-analyse", "taken-controle"]);
      env.setNow(at("2026-07-23T11:00:01.000Z"));
      running = call(env.app, "/api/cron/beveiligingslog-analyse");
      await analyse.started;
      // The 11:15, 11:30 and 11:45 calls found it running: 409, no run recorded.
      env.setNow(at("2026-07-23T11:05:01.000Z"));
      expect((await call(env.app, "/api/cron/beveiligingslog-analyse")).status).toBe(409);

      // 11:05:01: five minutes, its maximum run time, and still loopt.
      const within = await call(env.app, "/api/cron/taken-controle");
      expect(within.status).toBe(200);
      expect(within.json.taken.find((t: { job: string }) => t.job === "beveiligingslog-analyse")).toMatchObject({ status: "loopt", levend: "dit-proces" });

      env.setNow(NOW); // 12:00: the 11:30 fire time is past its grace without a run that started since
      const res = await call(env.app, "/api/cron/taken-controle");
      expect(res.status).toBe(409);
      expect(res.json).toMatchObject({ gemist: [], falend: [], onderbroken: [], hangend: ["beveiligingslog-analyse"] });
      expect(res.json.taken.find((t: { job: string }) => t.job === "beveiligingslog-analyse")).toMatchObject({
        status: "hangt",
        levend: "dit-proces",
        maxLooptijdMinuten: 5,
        laatsteRun: { gestart: "2026-07-23T11:00:01.000Z", beeindigd: null, uitkomst: "bezig" },
      });
      expect(env.alarms.raised.map((a) => a.type)).toEqual(["job-hung"]);
      expect(env.alarms.raised[0]!.message).toContain("beveiligingslog-analyse (gestart 2026-07-23T11:00:01.000Z, maximaal 5 min, in deze service)");

      analyse.finish();
      expect((await running).status).toBe(200);
    } finally {
      analyse.finish();
      await running?.catch(() => {});
      await env.cleanup();
    }
  });

  test("the same rows without that run in the process (it died): onderbroken and gemist, each with its own alarm", async () => {
    const env = await makeEnv();
    try {
      await healthyRuns(env, NOW, ["beveiligingslog-analyse", "beveiligingslog-retentie"]);
      await addRun(env, "beveiligingslog-retentie", at("2026-07-23T03:00:01.000Z"), "bezig", null);
      await addRun(env, "beveiligingslog-analyse", at("2026-07-23T11:00:01.000Z"), "bezig", null);
      const r = await runTakenControle(env.deps, NOW, idle);
      expect(r.status).toBe(409);
      expect(statusOf(r.body, "beveiligingslog-retentie")).toBe("onderbroken");
      expect(statusOf(r.body, "beveiligingslog-analyse")).toBe("gemist");
      expect(r.body).toMatchObject({ gemist: ["beveiligingslog-analyse"], onderbroken: ["beveiligingslog-retentie"], falend: ["beveiligingslog-retentie"], hangend: [] });
      expect(env.alarms.raised.map((a) => a.type)).toEqual(["job-missed", "job-interrupted"]);

      // Called directly with the process's running runs passed in: the same rows are alive.
      // Within their maximum run time (at 03:30 for the retention run, 60 minutes) 'loopt';
      // both past it at 12:00, so they hang.
      const ids = await env.db.all<{ job: JobName; runId: number }>(`SELECT job, id AS "runId" FROM job_runs WHERE uitkomst = 'bezig' ORDER BY id`);
      // The other jobs ran on time up to 03:30 as well: their runs up to 12:00 lie after it and do not count then.
      await healthyRuns(env, at("2026-07-23T03:30:00.000Z"), ["beveiligingslog-analyse", "beveiligingslog-retentie"]);
      const early = await runTakenControle(env.deps, at("2026-07-23T03:30:00.000Z"), { running: ids, unrecorded: [] });
      expect(statusOf(early.body, "beveiligingslog-retentie")).toBe("loopt");
      const live = await runTakenControle(env.deps, NOW, { running: ids, unrecorded: [] });
      expect(live.status).toBe(409);
      expect(statusOf(live.body, "beveiligingslog-retentie")).toBe("hangt");
      expect(statusOf(live.body, "beveiligingslog-analyse")).toBe("hangt");
      expect(live.body).toMatchObject({ gemist: [], onderbroken: [], falend: [], hangend: ["beveiligingslog-retentie", "beveiligingslog-analyse"] });
      expect(env.alarms.raised.map((a) => a.type)).toEqual(["job-missed", "job-interrupted", "job-hung"]);
    } finally {
      await env.cleanup();
    }
  });
});

describe("jobStatuses: the one rule behind taken-controle and /metrics", () => {
  test("reads only (works on a connection that refuses every write), raises nothing, and is exactly what taken-controle reports; backup-status has no status", async () => {
    const env = await makeEnv();
    try {
      await healthyRuns(env, NOW, ["dagrapport", "audit-verificatie", "beveiligingslog-retentie", "backup-controle"]);
      await addRun(env, "dagrapport", at("2026-07-22T06:00:01.000Z")); // gemist
      await addRun(env, "beveiligingslog-retentie", at("2026-07-23T03:00:01.000Z"), "bezig", null); // onderbroken
      await addRun(env, "audit-verificatie", at("2026-07-23T11:30:00.000Z"), "bezig", null); // loopt in another process
      await addLease(env, "audit-verificatie", await newestRunId(env, "audit-verificatie"), at("2026-07-23T12:01:00.000Z"));
      await addRun(env, "backup-controle", at("2026-07-23T11:15:01.000Z"), "fout"); // faalt

      const statuses = await readOnlyJobStatuses(env, NOW, env.config.takenMargeMinuten * MIN, idle);
      expect(env.alarms.raised).toEqual([]);
      expect(statuses.map((s) => s.job)).toEqual(SCHEDULE.map((e) => e.job));
      expect(statuses.find((s) => s.job === "backup-status")).toMatchObject({ cron: null, status: null, due: null });
      expect(statuses.find((s) => s.job === "audit-verificatie")).toMatchObject({ status: "loopt", levend: "ander-proces", houder: { pid: process.pid } });

      const r = await runTakenControle(env.deps, NOW, idle);
      const reported = Object.fromEntries(r.body.taken.map((t) => [t.job, t.status]));
      expect(Object.fromEntries(statuses.filter((s) => s.status !== null).map((s) => [s.job, s.status]))).toEqual(reported);
      expect(reported).toMatchObject({ dagrapport: "gemist", "beveiligingslog-retentie": "onderbroken", "backup-controle": "faalt" });
    } finally {
      await env.cleanup();
    }
  });
});
