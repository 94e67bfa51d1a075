import { afterEach, describe, expect, spyOn, test } from "bun:test";
import { closeSync, openSync, writeSync } from "node:fs";
import { SQL } from "bun";
import { Cron } from "croner";
import { t } from "elysia";
import type { AnyStore } from "../src/deps.ts";
import { lastRun as lastRunOf, type JobRunRow } from "../src/job-runs.ts";
import { newLeaseHolder, startLeasedRun } from "../src/job-lease.ts";
import { RunningJobs } from "../src/running-jobs.ts";
import { createApp } from "../src/app.ts";
import { backupControleJob } from "../src/jobs/backup-controle.ts";
import { dagrapportJob } from "../src/jobs/dagrapport.ts";
import { defineJob } from "../src/jobs/job.ts";
import { takenControleJob } from "../src/jobs/taken-controle.ts";
import { SCHEDULE } from "../src/schedule.ts";
import { call, NOW, SECRET, TEST_SEAL, eindzegel, until, zegel } from "./helpers.ts";
import { makeEnv, pgOnly, type Env } from "./dialect.ts";
import { holdRunEnd } from "./ingest-fixtures.ts";

let env: Env;
afterEach(() => env?.cleanup());

/** The job's newest sealed run: lastRun (src/job-runs.ts) on SQLite; the newest row by plain SQL on PostgreSQL (lastRunPg reads fewer columns). */
async function lastRun(e: Env, job: string): Promise<JobRunRow | null> {
  // Read as at the end of time: every start counts, whatever the test's clock says.
  if (e.store.kind === "sqlite") return lastRunOf(e.store.db, job, TEST_SEAL, new Date("9999-01-01T00:00:00.000Z")).run;
  return e.db.get<JobRunRow>(
    'SELECT id, job, gestart, beeindigd, uitkomst, http_status AS "httpStatus", samenvatting, fout FROM job_runs WHERE job = ? ORDER BY gestart DESC, id DESC LIMIT 1',
    job,
  );
}

function gate() {
  let open!: () => void;
  const p = new Promise<void>((r) => (open = r));
  return { p, open };
}

describe("the job wrapper", () => {
  test("records a successful run with start, end, outcome and summary", async () => {
    const job = defineJob({ name: "dagrapport", summary: "t", description: "t", run: async () => ({ status: 200, body: { ok: true, n: 3 } }) });
    env = await makeEnv({}, { jobs: [job] });
    const r = await call(env.app, "/api/cron/dagrapport");
    expect(r.status).toBe(200);
    expect(r.json).toEqual({ ok: true, n: 3 });
    const run = (await lastRun(env, "dagrapport"))!;
    expect(run).toMatchObject({ job: "dagrapport", gestart: NOW.toISOString(), beeindigd: NOW.toISOString(), uitkomst: "ok", httpStatus: 200, fout: null });
    expect(JSON.parse(run.samenvatting!)).toEqual({ ok: true, n: 3 });
  });

  test("a 409 result is recorded as afwijking and answered with the full result", async () => {
    const job = defineJob({ name: "backup-controle", summary: "t", description: "t", run: async () => ({ status: 409, body: { ok: false, reden: "te-oud" } }) });
    env = await makeEnv({}, { jobs: [job] });
    const r = await call(env.app, "/api/cron/backup-controle");
    expect(r.status).toBe(409);
    expect(r.json).toEqual({ ok: false, reden: "te-oud" });
    expect(await lastRun(env, "backup-controle")).toMatchObject({ uitkomst: "afwijking", httpStatus: 409 });
  });

  test("a thrown error is a 500 {error} without stack trace, recorded as fout and reported", async () => {
    const job = defineJob({
      name: "weekrapport",
      summary: "t",
      description: "t",
      run: async () => {
        throw new Error(`kapot bij stap 3 (${SECRET.length})`);
      },
    });
    env = await makeEnv({}, { jobs: [job] });
    const r = await call(env.app, "/api/cron/weekrapport");
    expect(r.status).toBe(500);
    expect(Object.keys(r.json)).toEqual(["error"]);
    expect(r.text).not.toContain("at ");
    expect(r.text).not.toContain("kapot");
    const run = (await lastRun(env, "weekrapport"))!;
    expect(run.uitkomst).toBe("fout");
    expect(run.beeindigd).not.toBeNull();
    expect(run.fout).toContain("kapot bij stap 3");
    await Bun.sleep(0);
    expect(env.alarms.raised.map((a) => a.type)).toEqual(["internal-error"]);
  });

  test("a job failing on an unavailable database is answered 503 and recorded as 503, not 500", async () => {
    const job = defineJob({
      name: "backup-controle",
      summary: "t",
      description: "t",
      run: async (deps) => {
        if (deps.store.kind === "sqlite") throw Object.assign(new Error("database is locked"), { code: "SQLITE_BUSY" });
        // PostgreSQL's own "not now", from the server: a write refused as read-only (25006, as a standby answers).
        await deps.store.sql.begin(async (tx) => {
          await tx`SET TRANSACTION READ ONLY`;
          await tx`INSERT INTO service_meta (key, value) VALUES ('test', 'x')`;
        });
        throw new Error("the read-only write went through");
      },
    });
    env = await makeEnv({}, { jobs: [job] });
    const r = await call(env.app, "/api/cron/backup-controle");
    expect(r.status).toBe(503);
    expect(r.headers.get("retry-after")).toBe("60");
    expect(await lastRun(env, "backup-controle")).toMatchObject({ uitkomst: "fout", httpStatus: 503 });
  });


  test("a job failing on a full disk (a real ENOSPC: a write to /dev/full) is answered 503 naming it, recorded as 503, alarmed as such", async () => {
    const job = defineJob({
      name: "audit-anker",
      summary: "t",
      description: "t",
      run: async () => {
        const fd = openSync("/dev/full", "w");
        try {
          writeSync(fd, "anker\n");
        } finally {
          closeSync(fd);
        }
        throw new Error("the write to /dev/full went through");
      },
    });
    env = await makeEnv({}, { jobs: [job] });
    const r = await call(env.app, "/api/cron/audit-anker");
    expect(r.status).toBe(503);
    expect(r.headers.get("retry-after")).toBe("60");
    expect(r.json).toEqual({ error: "Er kon niet naar de schijf worden geschreven (ENOSPC: vol of alleen-lezen); maak ruimte en probeer het opnieuw." });
    const run = (await lastRun(env, "audit-anker"))!;
    expect(run).toMatchObject({ uitkomst: "fout", httpStatus: 503 });
    expect(run.fout).toContain("ENOSPC");
    await Bun.sleep(0);
    expect(env.alarms.raised.map((a) => [a.type, a.message])).toEqual([["storage-unwritable", "Schijf vol of alleen-lezen (ENOSPC)"]]);
  });
  test("over real HTTP, a job running past the server's idle timeout still gets its answer (the connection is not cut)", async () => {
    let started!: () => void;
    const running = new Promise<void>((r) => (started = r));
    const job = defineJob({
      name: "audit-verificatie",
      summary: "t",
      description: "t",
      run: async () => {
        started();
        // Time must pass beyond the idle timeout (1 s here; Bun checks it every few seconds) for the test to mean anything: without the fix this connection is reset.
        await Bun.sleep(5000);
        return { status: 200, body: { klaar: true } };
      },
    });
    env = await makeEnv({}, { jobs: [job] });
    const server = env.app.listen({ port: 0, hostname: "127.0.0.1", idleTimeout: 1 });
    try {
      const answer = fetch(`http://127.0.0.1:${server.server!.port}/api/cron/audit-verificatie`, { method: "POST", headers: { authorization: `Bearer ${SECRET}` } });
      await running;
      const r = await answer;
      expect(r.status).toBe(200);
      expect(await r.json()).toEqual({ klaar: true });
    } finally {
      await server.stop();
    }
  }, 15_000);

  test("over real HTTP, a job's body sent too slowly is still cut off by the idle timeout; the job does not run", async () => {
    let runs = 0;
    const job = defineJob({
      name: "backup-status",
      summary: "t",
      description: "t",
      input: { schema: t.Object({}, { additionalProperties: true }), maxBytes: 64 * 1024 },
      run: async () => {
        runs++;
        return { status: 200, body: { ok: true } };
      },
    });
    env = await makeEnv({}, { jobs: [job] });
    const server = env.app.listen({ port: 0, hostname: "127.0.0.1", idleTimeout: 1 });
    try {
      const closed = Promise.withResolvers<void>();
      const sock = await Bun.connect({ hostname: "127.0.0.1", port: server.server!.port!, socket: { data() {}, close: () => closed.resolve(), error: () => closed.resolve() } });
      // The headers and 2 of the 100 bytes announced, then nothing: before the fix the
      // route switched the timeout off first and the connection stayed open for good.
      sock.write(`POST /api/cron/backup-status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${SECRET}\r\nContent-Length: 100\r\n\r\n{"`);
      const cut = await Promise.race([closed.promise.then(() => true), Bun.sleep(12_000).then(() => false)]);
      sock.end();
      expect(cut).toBe(true);
      expect(runs).toBe(0);
    } finally {
      await server.stop(true);
    }
  }, 20_000);

  test("over real HTTP, a job's keep-alive connection is closed by the server with its answer, an error's too (it had no idle timeout left)", async () => {
    const job = defineJob({ name: "backup-status", summary: "t", description: "t", run: async () => ({ status: 200, body: { ok: true } }) });
    // A job that fails unexpectedly: its 500 comes from the app's error handler.
    const failing = defineJob({
      name: "dagrapport",
      summary: "t",
      description: "t",
      run: async () => {
        throw new Error("kapot");
      },
    });
    env = await makeEnv({}, { jobs: [job, failing] });
    const server = env.app.listen({ port: 0, hostname: "127.0.0.1" });
    try {
      for (const [path, status, body] of [
        ["/api/cron/backup-status", "HTTP/1.1 200 OK", '{"ok":true}'],
        ["/api/cron/dagrapport", "HTTP/1.1 500 Internal Server Error", '{"error":"Interne fout; de fout is gemeld."}'],
      ] as const) {
        let answer = "";
        const closed = Promise.withResolvers<boolean>();
        const sock = await Bun.connect({
          hostname: "127.0.0.1",
          port: server.server!.port!,
          socket: { data: (_s, d) => void (answer += d.toString()), close: () => closed.resolve(true), error: () => closed.resolve(true) },
        });
        // HTTP/1.1 without `Connection: close`: keep-alive, as a client with a connection pool sends it.
        sock.write(`POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${SECRET}\r\nContent-Length: 0\r\n\r\n`);
        // The deadline only bounds a failing run: before the fix the connection stayed open for good.
        const cut = await Promise.race([closed.promise, Bun.sleep(8_000).then(() => false)]);
        sock.end();
        expect({ path, cut, status: answer.split("\r\n")[0], connection: /\r\nconnection: close\r\n/i.test(answer), body: answer.endsWith(body) }).toEqual({
          path,
          cut: true,
          status,
          connection: true,
          body: true,
        });
      }
    } finally {
      await server.stop(true);
    }
  }, 30_000);

  test("a run whose lease another process took over meanwhile (it expired: this process stood still, or the clocks differ) raises job-overlap at its end; the other's lease is left alone", async () => {
    const g = gate();
    const started = gate();
    const job = defineJob({
      name: "audit-verificatie",
      summary: "t",
      description: "t",
      run: async () => {
        started.open();
        await g.p;
        return { status: 200, body: { ok: true } };
      },
    });
    env = await makeEnv({}, { jobs: [job] });
    const call1 = call(env.app, "/api/cron/audit-verificatie");
    await started.p;
    // Another instance, its clock past this lease's expiry, takes the lease over.
    const other = newLeaseHolder();
    const later = new Date(NOW.getTime() + 10 * 60_000);
    const taken = await startLeasedRun(env.store, TEST_SEAL, "audit-verificatie", { ...other, host: "elders.example" }, later, 90_000);
    expect(taken.ok && taken.overgenomen?.reden).toBe("verlopen");
    g.open();
    expect((await call1).status).toBe(200);
    await until("the alarm", () => env.alarms.raised.some((a) => a.type === "job-overlap"));
    const alarm = env.alarms.raised.find((a) => a.type === "job-overlap")!;
    expect(alarm.message).toStartWith("De lease van audit-verificatie (run 1) was aan het eind van de run niet meer van deze run");
    // The other instance's lease stays.
    expect(await env.db.get<{ host: string }>("SELECT host FROM job_leases WHERE job = 'audit-verificatie'")).toEqual({ host: "elders.example" });
  });

  pgOnly("PostgreSQL drops every connection as the job ends (a server restart): the run's end and the lease's release are written after the answer, not given up (the row stayed 'bezig', the lease blocked the job for 90 s)", async () => {
    env = await makeEnv();
    if (env.store.kind !== "pg") throw new Error("PostgreSQL only");
    const admin = new SQL(env.store.url, { max: 1 });
    try {
      for (const fails of [false, true]) {
        const job = defineJob({
          name: fails ? "weekrapport" : "dagrapport",
          summary: "t",
          description: "t",
          run: async () => {
            // Every connection of the service's pool ends at once, as at a restart.
            await admin`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`;
            if (fails) throw new Error("kapot");
            return { status: 200, body: { ok: true } };
          },
        });
        const app = createApp(env.deps, { jobs: [job] });
        const r = await call(app, `/api/cron/${job.name}`);
        expect(r.status).toBe(fails ? 500 : 200);
        const row = await until("the end written", async () => {
          const [x] = await admin`SELECT uitkomst, http_status FROM job_runs WHERE job = ${job.name} AND uitkomst <> 'bezig'`;
          return x;
        });
        expect([row.uitkomst, Number(row.http_status)]).toEqual(fails ? ["fout", 500] : ["ok", 200]);
        await until("the lease released", async () => ((await admin`SELECT 1 FROM job_leases WHERE job = ${job.name}`).length === 0 ? true : undefined));
      }
    } finally {
      await admin.close();
    }
  });

  test("a second call while the job still runs gets 409 {error} and does not run it", async () => {
    const g = gate();
    const started = gate();
    let runs = 0;
    const job = defineJob({
      name: "audit-verificatie",
      summary: "t",
      description: "t",
      run: async () => {
        runs++;
        started.open();
        await g.p;
        return { status: 200, body: { ok: true } };
      },
    });
    env = await makeEnv({}, { jobs: [job] });
    const first = call(env.app, "/api/cron/audit-verificatie");
    await started.p;
    const second = await call(env.app, "/api/cron/audit-verificatie");
    expect(second.status).toBe(409);
    expect(typeof second.json.error).toBe("string");
    expect(runs).toBe(1);
    // the running run is visible in the history as not finished
    expect(await lastRun(env, "audit-verificatie")).toMatchObject({ uitkomst: "bezig", beeindigd: null });
    g.open();
    expect((await first).status).toBe(200);
    // afterwards it can run again
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
    expect(runs).toBe(2);
    const n = (await env.db.get<{ n: number }>("SELECT count(*) AS n FROM job_runs WHERE job = 'audit-verificatie'"))!;
    expect(n.n).toBe(2);
  });

  test("two different jobs may run at the same time", async () => {
    const g = gate();
    const started = gate();
    const slow = defineJob({ name: "weekrapport", summary: "t", description: "t", run: async () => (started.open(), await g.p, { status: 200, body: { ok: true } }) });
    const fast = defineJob({ name: "dagrapport", summary: "t", description: "t", run: async () => ({ status: 200, body: { ok: true } }) });
    env = await makeEnv({}, { jobs: [slow, fast] });
    const a = call(env.app, "/api/cron/weekrapport");
    await started.p;
    expect((await call(env.app, "/api/cron/dagrapport")).status).toBe(200);
    g.open();
    expect((await a).status).toBe(200);
  });

  test("an input error is answered before a run is recorded: 400 naming the field, 413 over the job's cap", async () => {
    let runs = 0;
    const job = defineJob({
      name: "backup-status",
      summary: "t",
      description: "t",
      input: { schema: t.Object({ tenant: t.Object({ id: t.String() }) }), maxBytes: 100 },
      run: async () => (runs++, { status: 200, body: { ok: true } }),
    });
    env = await makeEnv({}, { jobs: [job] });
    const r = await call(env.app, "/api/cron/backup-status", { body: '{"tenant":{"id":7}}' });
    expect(r.status).toBe(400);
    expect(r.json).toEqual({ error: "Veld tenant.id moet een tekst (string) zijn." });
    const missing = await call(env.app, "/api/cron/backup-status", { body: "{}" });
    expect(missing.json).toEqual({ error: "Veld tenant ontbreekt (verplicht: een JSON-object met ten minste id)." });
    const big = await call(env.app, "/api/cron/backup-status", { body: JSON.stringify({ tenant: { id: "x".repeat(100) } }) });
    expect(big.status).toBe(413);
    expect(big.json).toEqual({ error: "Body te groot: backup-status accepteert hoogstens 100 bytes." });
    expect(await lastRun(env, "backup-status")).toBeNull();
    expect(runs).toBe(0);
    expect((await call(env.app, "/api/cron/backup-status", { body: '{"tenant":{"id":"7"}}' })).status).toBe(200);
    expect(runs).toBe(1);
  });
});

describe("the job wrapper: a completed job whose end cannot be recorded", () => {
  const RECIPIENT = "beheer@example.nl";
  const at = (iso: string) => new Date(iso);
  const runRow = async (job: string) =>
    (await env.db.get<{ id: number; uitkomst: string; beeindigd: string | null; httpStatus: number | null; samenvatting: string | null; fout: string | null }>(
      'SELECT id, uitkomst, beeindigd, http_status AS "httpStatus", samenvatting, fout FROM job_runs WHERE job = ? ORDER BY id DESC LIMIT 1',
      job,
    ))!;

  /** Every other scheduled job ran at its last fire time, so only dagrapport is judged. */
  async function othersRan(now: Date) {
    for (const e of SCHEDULE) {
      if (e.cron === null || e.job === "dagrapport") continue;
      const last = new Cron(e.cron, { timezone: "UTC" }).previousRuns(1, new Date(now.getTime() + 1))[0]!;
      const r = { job: e.job, gestart: new Date(last.getTime() + 1000).toISOString(), beeindigd: new Date(last.getTime() + 2000).toISOString(), uitkomst: "ok", httpStatus: 200 };
      await env.db.run(
        "INSERT INTO job_runs (job, gestart, beeindigd, uitkomst, http_status, zegel, eindzegel) VALUES (?, ?, ?, 'ok', 200, ?, ?)",
        r.job,
        r.gestart,
        r.beeindigd,
        zegel(r.job, r.gestart),
        eindzegel(r),
      );
    }
  }

  /** A trigger that refuses to write a run's end (every UPDATE of job_runs to another outcome than 'bezig'), or its removal. */
  async function refuseRunEnds(on: boolean) {
    if (env.store.kind === "sqlite") {
      env.store.sqlite.run(
        on
          ? "CREATE TRIGGER boekhouding_kapot BEFORE UPDATE ON job_runs WHEN NEW.uitkomst <> 'bezig' BEGIN SELECT RAISE(ABORT, 'boekhouding kapot (test)'); END"
          : "DROP TRIGGER boekhouding_kapot",
      );
    } else if (on) {
      await env.store.sql.unsafe(
        `CREATE FUNCTION boekhouding_kapot() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'boekhouding kapot (test)'; END $$;
         CREATE TRIGGER boekhouding_kapot BEFORE UPDATE ON job_runs FOR EACH ROW WHEN (NEW.uitkomst <> 'bezig') EXECUTE FUNCTION boekhouding_kapot();`,
      );
    } else await env.store.sql`DROP TRIGGER boekhouding_kapot ON job_runs`;
  }

  /**
   * The database read-only (on) or writable again (off). SQLite: PRAGMA query_only on the
   * service's connection. PostgreSQL cannot make the pool's open sessions read-only from
   * outside, so every write of the job wrapper (job_runs, job_leases) is refused with the
   * server's own read-only error (SQLSTATE 25006 and its message, as a standby answers).
   */
  async function readOnly(store: AnyStore, on: boolean) {
    if (store.kind === "sqlite") {
      store.sqlite.run(`PRAGMA query_only = ${on ? 1 : 0}`);
      return;
    }
    if (on) {
      await store.sql.unsafe(
        `CREATE FUNCTION alleen_lezen() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
           RAISE EXCEPTION 'cannot execute % in a read-only transaction', TG_OP USING ERRCODE = 'read_only_sql_transaction';
         END $$;
         CREATE TRIGGER alleen_lezen BEFORE INSERT OR UPDATE OR DELETE ON job_runs FOR EACH STATEMENT EXECUTE FUNCTION alleen_lezen();
         CREATE TRIGGER alleen_lezen BEFORE INSERT OR UPDATE OR DELETE ON job_leases FOR EACH STATEMENT EXECUTE FUNCTION alleen_lezen();`,
      );
    } else await store.sql.unsafe("DROP TRIGGER alleen_lezen ON job_runs; DROP TRIGGER alleen_lezen ON job_leases");
  }

  /** Runs `f` with the error log lines (stderr) captured instead of written. */
  async function capturingStderr<T>(f: () => Promise<T>): Promise<{ value: T; lines: string[] }> {
    const lines: string[] = [];
    const spy = spyOn(process.stderr, "write").mockImplementation(((chunk: unknown) => {
      lines.push(String(chunk));
      return true;
    }) as typeof process.stderr.write);
    try {
      return { value: await f(), lines };
    } finally {
      spy.mockRestore();
    }
  }

  test("the finishing UPDATE of job_runs fails after dagrapport mailed: the caller gets the job's 200, the mail went once, logged and alarmed, and nothing invites a rerun", async () => {
    env = await makeEnv({ DAGRAPPORT_EMAIL: RECIPIENT }, { jobs: [dagrapportJob, takenControleJob, backupControleJob] });
    await othersRan(at("2026-07-23T06:45:00.000Z"));
    await refuseRunEnds(true);

    env.setNow(at("2026-07-23T06:00:01.000Z"));
    const { value: r, lines } = await capturingStderr(() => call(env.app, "/api/cron/dagrapport"));
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ ok: true, verzonden: true, ontvanger: RECIPIENT });
    expect(env.mailer.sent.map((m) => m.to)).toEqual([RECIPIENT]);

    // Reported, not swallowed: an error line in the log and an alarm that says the job is done.
    const logged = lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.level === "error");
    expect(logged).toHaveLength(1);
    expect(logged[0]).toMatchObject({ job: "dagrapport", httpStatus: 200 });
    expect(String(logged[0]!.error)).toContain("boekhouding kapot (test)");
    expect(env.alarms.raised).toHaveLength(1);
    expect(env.alarms.raised[0]!.type).toBe("internal-error");
    expect(env.alarms.raised[0]!.message).toContain("dagrapport");
    expect(env.alarms.raised[0]!.message).toContain("niet opnieuw");
    expect(await runRow("dagrapport")).toMatchObject({ uitkomst: "bezig", beeindigd: null }); // the database refused every write

    // 45 minutes on, the database still refusing: taken-controle does not call the run
    // onderbroken (which would ask for a rerun); it reads the end this process kept.
    env.setNow(at("2026-07-23T06:45:00.000Z"));
    const tc = await capturingStderr(() => call(env.app, "/api/cron/taken-controle"));
    expect(tc.value.status).toBe(200);
    expect(tc.value.json.falend).toEqual([]);
    expect(tc.value.json.taken.find((t: { job: string }) => t.job === "dagrapport")).toMatchObject({
      status: "ok",
      laatsteRun: { gestart: "2026-07-23T06:00:01.000Z", beeindigd: "2026-07-23T06:00:01.000Z", uitkomst: "ok" },
    });
    expect(env.alarms.raised.map((a) => a.type)).toEqual(["internal-error", "internal-error"]); // taken-controle's own end could not be written either

    // The database takes writes again: the next job call writes the kept ends first.
    await refuseRunEnds(false);
    env.setNow(at("2026-07-23T07:15:00.000Z"));
    expect((await call(env.app, "/api/cron/backup-controle")).status).toBeOneOf([200, 409]);
    expect(await runRow("dagrapport")).toMatchObject({ uitkomst: "ok", httpStatus: 200, beeindigd: "2026-07-23T06:00:01.000Z" });
    expect(await runRow("taken-controle")).toMatchObject({ uitkomst: "ok", httpStatus: 200, beeindigd: "2026-07-23T06:45:00.000Z" });
    expect(env.mailer.sent).toHaveLength(1);
  });

  test("the database turns read-only right after the job (SQLITE_READONLY, on PostgreSQL 25006, on the finishing UPDATE): the job's 200, not 503 that makes cron call it again", async () => {
    const thenReadOnly = defineJob({
      ...dagrapportJob,
      run: async (deps, now, input, context) => {
        const result = await dagrapportJob.run(deps, now, input, context);
        await readOnly(deps.store, true);
        return result;
      },
    });
    env = await makeEnv({ DAGRAPPORT_EMAIL: RECIPIENT }, { jobs: [thenReadOnly, backupControleJob] });
    const { value: r } = await capturingStderr(() => call(env.app, "/api/cron/dagrapport"));
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ ok: true, verzonden: true });
    expect(env.mailer.sent).toHaveLength(1);
    // The storage takes no writes: storage-unwritable (mailed).
    expect(env.alarms.raised.map((a) => a.type)).toEqual(["storage-unwritable"]);
    // Each store's own words for a write refused as read-only.
    expect(String(env.alarms.raised[0]!.context?.fout)).toContain(env.dialect === "sqlite" ? "readonly database" : "in a read-only transaction");

    await readOnly(env.store, false);
    await call(env.app, "/api/cron/backup-controle");
    const row = await runRow("dagrapport");
    expect(row).toMatchObject({ uitkomst: "ok", httpStatus: 200, beeindigd: NOW.toISOString() });
    expect(env.mailer.sent).toHaveLength(1);
  });
});

describe("the job wrapper: a run that ends while another process holds the write lock (on PostgreSQL: the run's row) past the wait (5 s)", () => {
  test("a job that throws: its 500 is answered while the lock is held, the end is kept meanwhile, then written (fout/500) and the lease released once the lock is free; no error logged for the wait", async () => {
    const started = gate();
    const fail = gate();
    const job = defineJob({
      name: "weekrapport",
      summary: "t",
      description: "t",
      run: async () => {
        started.open();
        await fail.p;
        throw new Error("kapot na het werk (test)");
      },
    });
    const running = new RunningJobs();
    env = await makeEnv({}, { jobs: [job], running });
    const lines: string[] = [];
    const spy = spyOn(process.stderr, "write").mockImplementation(((chunk: unknown) => {
      lines.push(String(chunk));
      return true;
    }) as typeof process.stderr.write);
    // Plain reads: on PostgreSQL a reader never waits for a row lock.
    const row = async () => (await env.db.get<Record<string, unknown>>("SELECT uitkomst, http_status AS \"httpStatus\", beeindigd, fout FROM job_runs WHERE job = 'weekrapport'"))!;
    const lease = () => env.db.get("SELECT run_id FROM job_leases WHERE job = 'weekrapport'");
    let lock: { release(): Promise<void> } | null = null;
    try {
      const answer = call(env.app, "/api/cron/weekrapport");
      await started.p;
      lock = await holdRunEnd({ path: env.config.databasePath, url: env.store.kind === "pg" ? env.store.url : null }, "weekrapport");
      fail.open();
      const r = await answer;
      expect(r.status).toBe(500);
      expect(Object.keys(r.json)).toEqual(["error"]);
      // Answered while the lock is still held: nothing written yet, the end kept in this process.
      expect(await row()).toMatchObject({ uitkomst: "bezig", beeindigd: null });
      expect(await lease()).toEqual({ run_id: 1 });
      expect(running.keptEndsList()).toMatchObject([{ job: "weekrapport", runId: 1, result: { uitkomst: "fout", httpStatus: 500 } }]);
      await lock.release();
      lock = null;
      const deadline = performance.now() + 15_000;
      while (((await row()).uitkomst === "bezig" || (await lease()) !== null) && performance.now() < deadline) await Bun.sleep(5);
      expect(await row()).toMatchObject({ uitkomst: "fout", httpStatus: 500, beeindigd: NOW.toISOString() });
      expect(String((await row()).fout)).toContain("kapot na het werk (test)");
      expect(await lease()).toBeNull();
      expect(running.keptEndsList()).toEqual([]);
      expect(running.pendingWrites()).toEqual([]);
      const logged = lines.map((l) => JSON.parse(l) as { level: string; message: string });
      expect(logged.filter((l) => l.level === "error").map((l) => l.message)).toEqual([]);
      // Each store's warning (src/http/job-route.ts writeEnd): SQLITE_BUSY past the wait, or the end's deadline passed on PostgreSQL.
      expect(logged.map((l) => l.message)).toContain(
        env.dialect === "sqlite"
          ? "the database write lock stayed taken by another process; the run's end is recorded once it is free, after the answer"
          : "the run's end did not get through to the database in time; it is recorded after the answer",
      );
    } finally {
      spy.mockRestore();
      await lock?.release();
    }
  }, 30_000);
});

describe("a scheduled call (X-Nachtwacht-Gepland: 1) runs once per scheduled time", () => {
  // beveiligingslog-analyse: every quarter hour; NOW is 12:00, so the latest scheduled time is 12:00.
  const outcomes: (200 | 409 | 500)[] = [];
  const job = defineJob({
    name: "beveiligingslog-analyse",
    summary: "t",
    description: "t",
    run: async () => {
      const status = outcomes.shift() ?? 200;
      if (status === 500) throw new Error("mislukt");
      return { status, body: { ok: status === 200 } };
    },
  });
  const scheduled = { headers: { "x-nachtwacht-gepland": "1" } };
  const runs = async () => (await env.db.get<{ n: number }>("SELECT count(*) AS n FROM job_runs WHERE job = 'beveiligingslog-analyse'"))!;

  test("a second scheduled call for the same time is not run: 204 with the reason (naming the run that did it) in X-Nachtwacht-Overgeslagen, nothing written; by hand the same would run", async () => {
    env = await makeEnv({}, { jobs: [job] });
    expect((await call(env.app, "/api/cron/beveiligingslog-analyse", scheduled)).status).toBe(200);
    const first = (await lastRun(env, "beveiligingslog-analyse"))!;
    env.setNow(new Date(NOW.getTime() + 14 * 60_000));
    const again = await call(env.app, "/api/cron/beveiligingslog-analyse", scheduled);
    expect(again.status).toBe(204);
    expect(again.text).toBe("");
    const reason = again.headers.get("x-nachtwacht-overgeslagen")!;
    expect(reason).toContain("2026-07-23T12:00:00.000Z");
    expect(reason).toContain(`run ${first.id}`);
    expect((await runs()).n).toBe(1);
    // By hand (no header) it runs.
    expect((await call(env.app, "/api/cron/beveiligingslog-analyse")).status).toBe(200);
    expect((await runs()).n).toBe(2);
    // The next scheduled time (12:15) runs again.
    env.setNow(new Date(NOW.getTime() + 15 * 60_000));
    expect((await call(env.app, "/api/cron/beveiligingslog-analyse", scheduled)).status).toBe(200);
    expect((await runs()).n).toBe(3);
  });

  test("a run that found something (409, afwijking) did the time too; one that failed (fout) or was interrupted ('bezig', no lease) does not", async () => {
    env = await makeEnv({}, { jobs: [job] });
    outcomes.push(409);
    expect((await call(env.app, "/api/cron/beveiligingslog-analyse", scheduled)).status).toBe(409);
    expect((await lastRun(env, "beveiligingslog-analyse"))!.uitkomst).toBe("afwijking");
    expect((await call(env.app, "/api/cron/beveiligingslog-analyse", scheduled)).headers.get("x-nachtwacht-overgeslagen")).toContain("al uitgevoerd");

    env.setNow(new Date(NOW.getTime() + 15 * 60_000));
    outcomes.push(500);
    expect((await call(env.app, "/api/cron/beveiligingslog-analyse", scheduled)).status).toBe(500);
    expect((await call(env.app, "/api/cron/beveiligingslog-analyse", scheduled)).status).toBe(200);

    env.setNow(new Date(NOW.getTime() + 30 * 60_000));
    // A run of another process that was killed: its row still says 'bezig', its lease is gone.
    const killed = new Date(NOW.getTime() + 30 * 60_000).toISOString();
    await env.db.run("INSERT INTO job_runs (job, gestart, uitkomst, zegel) VALUES ('beveiligingslog-analyse', ?, 'bezig', ?)", killed, zegel("beveiligingslog-analyse", killed));
    expect((await call(env.app, "/api/cron/beveiligingslog-analyse", scheduled)).status).toBe(200);
  });
});
