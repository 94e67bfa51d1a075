// dagrapport SIGKILLed after its message left: the .eml is renamed into the outbox, then
// the service dies at the fsync of the outbox folder (a real SIGKILL: the service runs
// under strace, which kills it at that fsync; test/preflight.ts names strace when it is
// missing). A second service on the same database: taken-controle says the report may
// have gone out, and the rerun answers 409 mogelijkAfgeleverd without writing a second
// .eml. SQLite and the outbox only: the mark is one service_meta row on either store,
// which test/dagrapport-verzending.test.ts checks on both.
import { afterAll, expect, setDefaultTimeout, test } from "bun:test";
import { Database } from "bun:sqlite";
import { mkdirSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { startService, testDatabase, type ServiceProcess } from "./fixtures/hardening.ts";
import { SECRET } from "./helpers.ts";

setDefaultTimeout(90_000);

const cleanups: (() => unknown)[] = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c();
});

const post = (svc: ServiceProcess, job: string) => fetch(`${svc.url}/api/cron/${job}`, { method: "POST", headers: { authorization: `Bearer ${SECRET}` } });

test("dagrapport killed after its message went into the outbox: taken-controle says it may have been sent, and the rerun answers 409 without a second copy", async () => {
  const { env, dir, path } = testDatabase(cleanups, new Date(Date.now() - 30 * 86400_000), () => {});
  const outbox = join(dir, "data", "outbox");
  mkdirSync(outbox, { recursive: true });
  const vars = { ...env, DAGRAPPORT_EMAIL: "ops@example.test" };
  const emls = () => readdirSync(outbox).filter((f) => f.endsWith(".eml"));

  const killed = await startService(vars, undefined, ["strace", "-f", "-qq", "-o", "/dev/null", "-P", outbox, "-e", "trace=fsync", "-e", "inject=fsync:signal=SIGKILL"]);
  await post(killed, "dagrapport").catch(() => {});
  await killed.exited;
  expect(emls()).toHaveLength(1);

  // The dead process's pid is gone: the second service takes its lease over at once.
  const svc = await startService(vars);
  cleanups.push(async () => {
    svc.proc.kill("SIGTERM");
    await svc.exited;
  });
  const check = await post(svc, "taken-controle");
  expect(check.status).toBe(409);
  expect(((await check.json()) as { onderbroken: string[] }).onderbroken).toContain("dagrapport");
  const alarm = svc.output().split("\n").find((l) => l.includes('"job-interrupted"'));
  expect(alarm).toContain("Het is mogelijk verstuurd: controleer de mailserver (het log) of de outbox");
  expect(alarm).not.toContain("roep de taak opnieuw aan");

  const rerun = await post(svc, "dagrapport");
  expect(rerun.status).toBe(409);
  const body = (await rerun.json()) as { verzonden: boolean; mogelijkAfgeleverd?: boolean; bezorging: string; error: string };
  expect(body).toMatchObject({ verzonden: false, mogelijkAfgeleverd: true, bezorging: "outbox" });
  expect(body.error).toContain("begon het te versturen en de uitkomst is nooit vastgelegd");
  expect(emls()).toHaveLength(1);

  // The operator checked: it never arrived. The DELETE the answer gives, and the next call sends it.
  const del = /DELETE FROM service_meta WHERE key = '[^']+'/.exec(body.error)![0];
  const db = new Database(path);
  db.run("PRAGMA busy_timeout = 5000");
  db.run(del);
  db.close();
  expect((await post(svc, "dagrapport")).status).toBe(200);
  expect(emls()).toHaveLength(2);
});
