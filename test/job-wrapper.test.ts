import { afterEach, describe, expect, test } from "bun:test";
import { lastRun } from "../src/job-runs.ts";
import { defineJob } from "../src/jobs/job.ts";
import { call, makeTestEnv, NOW, SECRET, type TestEnv } from "./helpers.ts";

let env: TestEnv;
afterEach(() => env?.cleanup());

function gate() {
  let open!: () => void;
  const p = new Promise<void>((r) => (open = r));
  return { p, open };
}

describe("the job wrapper", () => {
  test("records a successful run with start, end, outcome and summary", async () => {
    const job = defineJob({ name: "dagrapport", summary: "t", description: "t", run: async () => ({ status: 200, body: { ok: true, n: 3 } }) });
    env = makeTestEnv({}, { jobs: [job] });
    const r = await call(env.app, "/api/cron/dagrapport");
    expect(r.status).toBe(200);
    expect(r.json).toEqual({ ok: true, n: 3 });
    const run = lastRun(env.store.sqlite, "dagrapport")!;
    expect(run).toMatchObject({ job: "dagrapport", gestart: NOW.toISOString(), beeindigd: NOW.toISOString(), uitkomst: "ok", httpStatus: 200, fout: null });
    expect(JSON.parse(run.samenvatting!)).toEqual({ ok: true, n: 3 });
  });

  test("a 409 result is recorded as afwijking and answered with the full result", async () => {
    const job = defineJob({ name: "backup-controle", summary: "t", description: "t", run: async () => ({ status: 409, body: { ok: false, reden: "te-oud" } }) });
    env = makeTestEnv({}, { jobs: [job] });
    const r = await call(env.app, "/api/cron/backup-controle");
    expect(r.status).toBe(409);
    expect(r.json).toEqual({ ok: false, reden: "te-oud" });
    expect(lastRun(env.store.sqlite, "backup-controle")).toMatchObject({ uitkomst: "afwijking", httpStatus: 409 });
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
    env = makeTestEnv({}, { jobs: [job] });
    const r = await call(env.app, "/api/cron/weekrapport");
    expect(r.status).toBe(500);
    expect(Object.keys(r.json)).toEqual(["error"]);
    expect(r.text).not.toContain("at ");
    expect(r.text).not.toContain("kapot");
    const run = lastRun(env.store.sqlite, "weekrapport")!;
    expect(run.uitkomst).toBe("fout");
    expect(run.beeindigd).not.toBeNull();
    expect(run.fout).toContain("kapot bij stap 3");
    await Bun.sleep(0);
    expect(env.alarms.raised.map((a) => a.type)).toEqual(["internal-error"]);
  });

  test("a second call while the job still runs gets 409 {error} and does not run it", async () => {
    const g = gate();
    let runs = 0;
    const job = defineJob({
      name: "audit-verificatie",
      summary: "t",
      description: "t",
      run: async () => {
        runs++;
        await g.p;
        return { status: 200, body: { ok: true } };
      },
    });
    env = makeTestEnv({}, { jobs: [job] });
    const first = call(env.app, "/api/cron/audit-verificatie");
    await Bun.sleep(10);
    const second = await call(env.app, "/api/cron/audit-verificatie");
    expect(second.status).toBe(409);
    expect(typeof second.json.error).toBe("string");
    expect(runs).toBe(1);
    // the running run is visible in the history as not finished
    expect(lastRun(env.store.sqlite, "audit-verificatie")).toMatchObject({ uitkomst: "bezig", beeindigd: null });
    g.open();
    expect((await first).status).toBe(200);
    // afterwards it can run again
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
    expect(runs).toBe(2);
    const n = env.store.sqlite.query("SELECT count(*) AS n FROM job_runs WHERE job = 'audit-verificatie'").get() as { n: number };
    expect(n.n).toBe(2);
  });

  test("two different jobs may run at the same time", async () => {
    const g = gate();
    const slow = defineJob({ name: "weekrapport", summary: "t", description: "t", run: async () => (await g.p, { status: 200, body: { ok: true } }) });
    const fast = defineJob({ name: "dagrapport", summary: "t", description: "t", run: async () => ({ status: 200, body: { ok: true } }) });
    env = makeTestEnv({}, { jobs: [slow, fast] });
    const a = call(env.app, "/api/cron/weekrapport");
    await Bun.sleep(5);
    expect((await call(env.app, "/api/cron/dagrapport")).status).toBe(200);
    g.open();
    expect((await a).status).toBe(200);
  });

  test("an input error is answered before a run is recorded", async () => {
    const { HttpError } = await import("../src/http/errors.ts");
    const job = defineJob({
      name: "backup-status",
      summary: "t",
      description: "t",
      input: async () => {
        throw new HttpError(400, "exitCode ontbreekt");
      },
      run: async () => ({ status: 200, body: { ok: true } }),
    });
    env = makeTestEnv({}, { jobs: [job] });
    const r = await call(env.app, "/api/cron/backup-status", { body: "{}" });
    expect(r.status).toBe(400);
    expect(r.json).toEqual({ error: "exitCode ontbreekt" });
    expect(lastRun(env.store.sqlite, "backup-status")).toBeNull();
  });
});
