import { afterEach, describe, expect, test } from "bun:test";
import { runBeveiligingslogRetentie } from "../src/jobs/beveiligingslog-retentie.ts";
import { WriteApiActivity, APP_WRITING_MS } from "../src/ingest/activity.ts";
import { createApp } from "../src/app.ts";
import { startCheckpointer } from "../src/checkpointer.ts";
import type { Store } from "../src/db.ts";
import type { Deps } from "../src/deps.ts";
import { serviceDeps } from "../src/server.ts";
import { call, NOW, workDrivenClock } from "./helpers.ts";
import { APP_SECRET } from "./ingest-fixtures.ts";
import { addLoginAttempt, addTenant, makeEnv, sqliteOnly, type Env } from "./dialect.ts";

let env: Env;
afterEach(() => env?.cleanup());

const DAY = 24 * 3600 * 1000;
const iso = (ms: number) => new Date(ms).toISOString();
/** NOW − 90 × 24 h */
const GRENS = "2026-04-24T12:00:00.000Z";

function attempt(e: Env, tijdstip: string, gelukt = false) {
  return addLoginAttempt(e.db, { account: "anna@example.nl", ip: "203.0.113.7", gelukt, tijdstip, reden: gelukt ? null : "wachtwoord-onjuist" });
}
async function remaining(e: Env): Promise<string[]> {
  return (await e.db.all<{ tijdstip: string }>("SELECT tijdstip FROM login_attempts ORDER BY tijdstip")).map((r) => r.tijdstip);
}

/** 60,000 login attempts older than grens (SQLite), and a clock driven by deleting them (workDrivenClock). */
async function oldAttemptsAndWorkClock(e: Env): Promise<() => number> {
  if (e.store.kind !== "sqlite") throw new Error("SQLite only");
  const { sqlite } = e.store;
  const old = Date.parse("2026-01-01T00:00:00Z");
  const insert = sqlite.query("INSERT INTO login_attempts (tijdstip, account, ip, gelukt) VALUES (?, 'a@example.nl', '203.0.113.7', 0)");
  sqlite.transaction(() => {
    for (let i = 0; i < 60_000; i++) insert.run(iso(old + i));
  })();
  const count = sqlite.query("SELECT count(*) AS n FROM login_attempts WHERE tijdstip < ?");
  return workDrivenClock(sqlite, () => 60_000 - (count.get(GRENS) as { n: number }).n);
}

describe("beveiligingslog-retentie", () => {
  test("grens is now − 90 × 24 h; attempts strictly older are deleted, one exactly at grens is kept", async () => {
    env = await makeEnv();
    const t = await addTenant(env.db);
    await attempt(env, "2025-01-01T00:00:00.000Z", true);
    await attempt(env, iso(Date.parse(GRENS) - 1));
    await attempt(env, GRENS);
    await attempt(env, iso(NOW.getTime() - DAY));
    await addLoginAttempt(env.db, { account: "b", ip: "192.0.2.1", gelukt: true, tijdstip: "2026-01-01T00:00:00.000Z", tenantId: t });
    const r = await call(env.app, "/api/cron/beveiligingslog-retentie");
    expect(r.status).toBe(200);
    expect(r.json).toEqual({ ok: true, verwijderd: 3, retentieDagen: 90, grens: GRENS });
    expect(await remaining(env)).toEqual([GRENS, iso(NOW.getTime() - DAY)]);
  });

  test("BEVEILIGINGSLOG_RETENTIE_DAGEN is honoured", async () => {
    env = await makeEnv({ BEVEILIGINGSLOG_RETENTIE_DAGEN: "10" });
    await attempt(env, "2026-07-13T11:59:59.999Z");
    await attempt(env, "2026-07-13T12:00:00.000Z");
    const r = await call(env.app, "/api/cron/beveiligingslog-retentie");
    expect(r.json).toEqual({ ok: true, verwijderd: 1, retentieDagen: 10, grens: "2026-07-13T12:00:00.000Z" });
    expect(await remaining(env)).toEqual(["2026-07-13T12:00:00.000Z"]);
  });

  test("nothing old: 0 deleted, nothing touched", async () => {
    env = await makeEnv();
    await attempt(env, iso(NOW.getTime() - 3 * DAY));
    const r = await call(env.app, "/api/cron/beveiligingslog-retentie");
    expect(r.json).toEqual({ ok: true, verwijderd: 0, retentieDagen: 90, grens: GRENS });
    expect(await remaining(env)).toHaveLength(1);
  });

  test("deletes in bounded batches, pausing between them, and counts every row", async () => {
    env = await makeEnv();
    for (let i = 0; i < 25; i++) await attempt(env, iso(Date.parse("2026-01-01T00:00:00Z") + i * 60_000));
    await attempt(env, iso(NOW.getTime() - DAY));
    const batches: number[] = [];
    let pauses = 0;
    const r = await runBeveiligingslogRetentie(env.deps, NOW, {
      batchSize: 10,
      afterBatch: (n) => batches.push(n),
      pause: async () => {
        pauses++;
      },
    });
    expect(r.body.verwijderd).toBe(25);
    expect(batches).toEqual([10, 20, 25]);
    // SQLite pauses between batches so the host's writer gets the write lock; PostgreSQL
    // locks only the deleted rows, so its batches follow each other at once.
    expect(pauses).toBe(env.dialect === "sqlite" ? 2 : 0);
    expect(await remaining(env)).toHaveLength(1);
  });

  sqliteOnly("a batch takes chunks until the next, with the COMMIT, would end past its target lock time (100 ms)", async () => {
    env = await makeEnv();
    const clock = await oldAttemptsAndWorkClock(env);
    await attempt(env, iso(NOW.getTime() - DAY));
    const batches: { rows: number; chunks: number; lockMs: number }[] = [];
    const r = await runBeveiligingslogRetentie(env.deps, NOW, { clock, pause: async () => {}, onBatch: (b) => batches.push(b) });
    expect(r.body.verwijderd).toBe(60_000);
    expect(await remaining(env)).toHaveLength(1);
    expect(batches.reduce((n, b) => n + b.rows, 0)).toBe(60_000);
    expect(batches.length).toBeGreaterThan(2);
    // Several chunks per batch, and none past the target, COMMIT included.
    expect(Math.max(...batches.map((b) => b.chunks))).toBeGreaterThan(2);
    for (const b of batches) expect(b.lockMs).toBeLessThanOrEqual(100);
    // Batches fill their budget: all but the last reach at least half of it.
    for (const b of batches.slice(0, -1)) expect(b.lockMs).toBeGreaterThan(50);
  });

  sqliteOnly("while the application writes through the write API, batches aim at 30 ms in 3 chunks: its writes wait on the event loop for a whole batch", async () => {
    env = await makeEnv();
    const clock = await oldAttemptsAndWorkClock(env);
    let appNow = 0;
    const writeApi = new WriteApiActivity(() => appNow);
    writeApi.seen();
    const batches: { rows: number; chunks: number; lockMs: number }[] = [];
    const r = await runBeveiligingslogRetentie({ ...env.deps, writeApi }, NOW, { clock, pause: async () => {}, onBatch: (b) => batches.push(b) });
    expect(r.body.verwijderd).toBe(60_000);
    expect(batches.length).toBeGreaterThan(5);
    for (const b of batches) {
      expect(b.lockMs).toBeLessThanOrEqual(30);
      expect(b.chunks).toBeLessThanOrEqual(3);
    }
    for (const b of batches.slice(0, -1)) expect(b.lockMs).toBeGreaterThan(15);

    // A minute after the last call the application no longer counts as writing.
    appNow += APP_WRITING_MS + 1;
    expect(writeApi.recent()).toBe(false);
  });

  test("a write-API call (past the gate) marks the application as writing; a refused token, the cron secret on the write API (403) and a job call do not", async () => {
    env = await makeEnv({ APP_SECRET });
    let appNow = 1_000;
    const writeApi = new WriteApiActivity(() => appNow);
    const app = createApp({ ...env.deps, writeApi });
    expect(writeApi.recent()).toBe(false);
    const body = JSON.stringify({ pogingen: [{ account: "a@example.nl", ip: "192.0.2.1", gelukt: false }] });
    expect((await call(app, "/api/inlogpogingen", { token: "wrong-" + "x".repeat(40), body })).status).toBe(401);
    expect((await call(app, "/api/inlogpogingen", { body })).status).toBe(403); // the cron secret
    expect((await call(app, "/api/cron/beveiligingslog-retentie")).status).toBe(200);
    expect(writeApi.recent()).toBe(false);
    expect((await call(app, "/api/inlogpogingen", { token: APP_SECRET, body })).status).toBe(200);
    expect(writeApi.recent()).toBe(true);
    appNow += APP_WRITING_MS;
    expect(writeApi.recent()).toBe(true);
    appNow += 1;
    expect(writeApi.recent()).toBe(false);
  });

  sqliteOnly("wired as the service wires it (serviceDeps, what startServer runs with): a write-API call shortens the job's next batches; without one they stay as they were", async () => {
    env = await makeEnv({ APP_SECRET });
    if (env.store.kind !== "sqlite") throw new Error("SQLite only");
    const checkpointer = startCheckpointer(env.store.sqlite, env.store.path);
    const deps = env.deps as Deps<Store>;
    try {
      const body = JSON.stringify({ pogingen: [{ account: "a@example.nl", ip: "192.0.2.1", gelukt: true }] });
      const shape = (batches: { chunks: number; lockMs: number }[]) => ({ maxChunks: Math.max(...batches.map((b) => b.chunks)), maxLockMs: Math.max(...batches.map((b) => b.lockMs)) });

      const writing = serviceDeps(deps, checkpointer);
      expect((await call(createApp(writing), "/api/inlogpogingen", { token: APP_SECRET, body })).status).toBe(200);
      let clock = await oldAttemptsAndWorkClock(env);
      const short: { chunks: number; lockMs: number }[] = [];
      expect((await runBeveiligingslogRetentie(writing, NOW, { clock, pause: async () => {}, onBatch: (b) => short.push(b) })).body.verwijderd).toBe(60_000);
      expect(shape(short).maxChunks).toBeLessThanOrEqual(3);
      expect(shape(short).maxLockMs).toBeLessThanOrEqual(30);

      const quiet = serviceDeps(deps, checkpointer);
      clock = await oldAttemptsAndWorkClock(env);
      const usual: { chunks: number; lockMs: number }[] = [];
      expect((await runBeveiligingslogRetentie(quiet, NOW, { clock, pause: async () => {}, onBatch: (b) => usual.push(b) })).body.verwijderd).toBe(60_000);
      expect(shape(usual).maxChunks).toBeGreaterThan(3);
      expect(shape(usual).maxLockMs).toBeGreaterThan(30);
    } finally {
      await checkpointer.stop();
    }
  });

  test("the run is recorded in the job-run history", async () => {
    env = await makeEnv();
    await attempt(env, "2025-01-01T00:00:00.000Z");
    await call(env.app, "/api/cron/beveiligingslog-retentie");
    const run = (await env.db.get<Record<string, unknown>>("SELECT job, uitkomst, http_status, samenvatting FROM job_runs"))!;
    expect(run).toMatchObject({ job: "beveiligingslog-retentie", uitkomst: "ok", http_status: 200 });
    expect(String(run.samenvatting)).toContain('"verwijderd":1');
  });
});
