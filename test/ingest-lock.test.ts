// The write API waits for another process's write lock without blocking the event loop
// (writeTransaction in src/db.ts): while the host application holds the lock, /health and other
// requests are answered, and the batch is stored once the lock is free.
import { afterEach, expect, test } from "bun:test";
import { writeTransaction } from "../src/db.ts";
import { addTenant, call, makeTestEnv, type TestEnv } from "./helpers.ts";
import { APP_SECRET, holdWriteLock } from "./ingest-fixtures.ts";
import { newIngestCounters } from "../src/ingest/counters.ts";
import { NOTHING_STORED_HEADER, NOTHING_STORED_VALUE } from "../src/client.ts";

let env: TestEnv;
afterEach(() => env?.cleanup());


test("while another process holds the write lock, /health answers and the batch waits, then is stored once", async () => {
  env = makeTestEnv({ APP_SECRET });
  const tenantId = addTenant(env.store);
  const lock = await holdWriteLock(env.config.databasePath);
  let settled = false;
  const pending = call(env.app, "/api/audit", { token: APP_SECRET, body: JSON.stringify({ entries: [{ tenantId, actor: "a", action: "b", subject: "c", sleutel: "k" }] }) }).then((r) => {
    settled = true;
    return r;
  });
  // The event loop is free: other requests are answered while the batch waits for the lock.
  for (let i = 0; i < 3; i++) {
    const health = await call(env.app, "/health", { method: "GET", token: null });
    expect(health.status).toBe(200);
  }
  expect(settled).toBe(false);
  await lock.release();
  const r = await pending;
  expect(r.status).toBe(200);
  expect(r.json.ontvangstbewijzen[0].seq).toBe(1);
  expect((env.store.sqlite.query("SELECT count(*) AS n FROM audit_entries").get() as { n: number }).n).toBe(1);
});

test("past its deadline the write gives up with SQLITE_BUSY and stores nothing; busy_timeout is restored", async () => {
  env = makeTestEnv();
  const tenantId = addTenant(env.store);
  const lock = await holdWriteLock(env.config.databasePath);
  let tries = 0;
  const work = () => {
    tries++;
    env.store.sqlite.query("INSERT INTO login_attempts (tijdstip, account, ip, gelukt, tenant_id) VALUES ('2026-01-01T00:00:00.000Z', 'a', '192.0.2.1', 0, ?)").run(tenantId);
  };
  const error = await writeTransaction(env.store.sqlite, work, 50).then(
    () => null,
    (e) => e,
  );
  expect(error?.code).toStartWith("SQLITE_BUSY");
  // BEGIN IMMEDIATE failed each time: the work itself never ran.
  expect(tries).toBe(0);
  expect(env.store.sqlite.query("PRAGMA busy_timeout").get()).toEqual({ timeout: 5000 });
  await lock.release();
  await writeTransaction(env.store.sqlite, work, 50);
  expect((env.store.sqlite.query("SELECT count(*) AS n FROM login_attempts").get() as { n: number }).n).toBe(1);
});

test("a lock held longer than the wait: 503 with Retry-After 5 and {error}, nothing stored, no alarm; the log says how the wait went; the retry stores it", async () => {
  const counters = newIngestCounters();
  env = makeTestEnv({ APP_SECRET }, { counters });
  const tenantId = addTenant(env.store);
  const body = (sleutel: string) => JSON.stringify({ entries: [{ tenantId, actor: "a", action: "b", subject: "c", sleutel }] });
  const lock = await holdWriteLock(env.config.databasePath);
  const lines: string[] = [];
  const stderrWrite = process.stderr.write;
  process.stderr.write = ((chunk: string) => (lines.push(String(chunk)), true)) as typeof process.stderr.write;
  let r;
  try {
    // Two at once: nothing measured yet, so each is a group of its own; the second waits
    // in the service's own queue while the first waits out its 5 s, and its wait is then over.
    r = await Promise.all([call(env.app, "/api/audit", { token: APP_SECRET, body: body("k") }), call(env.app, "/api/audit", { token: APP_SECRET, body: body("l") })]);
  } finally {
    process.stderr.write = stderrWrite;
    await lock.release();
  }
  for (const x of r) {
    expect(x.status).toBe(503);
    expect(x.headers.get("retry-after")).toBe("5");
    expect(x.headers.get(NOTHING_STORED_HEADER)).toBe(NOTHING_STORED_VALUE);
    expect(x.json.error).toContain("SQLITE_BUSY");
  }
  const logged = lines.map((l) => JSON.parse(l) as { message: string; queuedMs: number; lockWaitMs: number });
  expect(logged.map((l) => l.message)).toEqual([
    "write API: the write lock stayed taken by another connection for most of the wait (lockWaitMs; before it queuedMs in this process's own write queue); answered 503",
    "write API: the wait ran out mostly in this process's own write queue, behind other write-API requests (queuedMs); the write lock, tried for the rest (lockWaitMs), was taken by another connection; answered 503",
  ]);
  expect(env.alarms.raised).toEqual([]);
  expect(counters.inFlight).toBe(0);
  expect((env.store.sqlite.query("SELECT count(*) AS n FROM audit_entries").get() as { n: number }).n).toBe(0);
  const retry = await call(env.app, "/api/audit", { token: APP_SECRET, body: body("k") });
  expect(retry.status).toBe(200);
  expect(retry.json.opgeslagen).toBe(1);
}, 20_000);
