// The outbox (no SMTP_URL) when the fsync of its folder fails after an .eml file was
// renamed into it: the message is in the outbox, so it must count as perhaps delivered,
// never as not sent (which would write it a second time). The fault is real: the service
// runs under strace, which makes every fsync of the outbox folder, and only that, fail
// with EIO (test/preflight.ts names strace when it is missing). Real service processes on
// SQLite; the outbox and the classification are the same on PostgreSQL (only the store
// of the weekly reservations differs, which test/pg-weekrapport.test.ts compares).
import { afterAll, expect, setDefaultTimeout, test } from "bun:test";
import { mkdirSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { startService, testDatabase, type ServiceProcess } from "./fixtures/hardening.ts";
import { SECRET } from "./helpers.ts";
import { APP_SECRET } from "./ingest-fixtures.ts";

setDefaultTimeout(90_000);

const cleanups: (() => unknown)[] = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c();
});

/** Stops a service: SIGTERM to the service itself (under strace: strace's child; strace ends with it). */
async function stop(svc: ServiceProcess, traced: boolean): Promise<void> {
  const pid = traced ? Number(readFileSync(`/proc/${svc.pid}/task/${svc.pid}/children`, "utf8").trim().split(" ")[0]) : svc.pid;
  process.kill(pid, "SIGTERM");
  await svc.exited;
}

const cron = (svc: ServiceProcess, job: string, scheduled: boolean) =>
  fetch(`${svc.url}/api/cron/${job}`, { method: "POST", headers: { authorization: `Bearer ${SECRET}`, ...(scheduled ? { "x-nachtwacht-gepland": "1" } : {}) } });

test("the outbox folder's fsync failing after the rename: weekrapport onzeker (409) and dagrapport 409, and neither writes its message again", async () => {
  const { env, dir } = testDatabase(cleanups, new Date(Date.now() - 30 * 86400_000), () => {});
  const outbox = join(dir, "data", "outbox");
  mkdirSync(outbox, { recursive: true });
  const vars = { ...env, APP_SECRET, MAIL_FROM: "nw@example.test", DAGRAPPORT_EMAIL: "ops@example.test" };
  const emls = () => readdirSync(outbox).filter((f) => f.endsWith(".eml"));

  const faulty = await startService(vars, undefined, ["strace", "-f", "-qq", "-o", "/dev/null", "-P", outbox, "-e", "trace=fsync", "-e", "inject=fsync:error=EIO"]);
  let stopped = false;
  cleanups.push(() => (stopped ? undefined : stop(faulty, true)));
  const app = (method: string, path: string, body: unknown) =>
    fetch(`${faulty.url}${path}`, { method, headers: { authorization: `Bearer ${APP_SECRET}`, "content-type": "application/json" }, body: JSON.stringify(body) });
  expect((await app("PUT", "/api/tenants/1", { naam: "Alfa BV", actief: true })).status).toBeLessThan(300);
  expect((await app("PUT", "/api/tenants/1/beheerders", { beheerders: [{ naam: "Anna", email: "anna@alfa.test", actief: true }] })).status).toBeLessThan(300);

  const weekly = await cron(faulty, "weekrapport", true);
  expect([weekly.status, await weekly.json()]).toEqual([409, expect.objectContaining({ verstuurd: 0, fouten: 0, onzeker: 1, bezorging: "outbox" })]);
  expect(emls()).toHaveLength(1);
  const daily = await cron(faulty, "dagrapport", true);
  expect(daily.status).toBe(409);
  const body = (await daily.json()) as { verzonden: boolean; mogelijkAfgeleverd?: boolean; error: string };
  expect(body).toMatchObject({ verzonden: false, mogelijkAfgeleverd: true, bezorging: "outbox" });
  expect(body.error).toContain("staat in de outbox, maar de map kon niet worden gesynchroniseerd (fsync)");
  expect(emls()).toHaveLength(2);
  expect(faulty.output()).toContain("mogelijk wel afgeleverd; niet opnieuw verstuurd");
  stopped = true;
  await stop(faulty, true);

  // The same database in a service without the fault: what is in the outbox is not written again.
  const svc = await startService(vars);
  cleanups.push(() => stop(svc, false));
  const rerun = await cron(svc, "weekrapport", false);
  expect([rerun.status, await rerun.json()]).toEqual([409, expect.objectContaining({ verstuurd: 0, fouten: 0, overgeslagen: 1, onzeker: 1 })]);
  expect((await cron(svc, "dagrapport", true)).status).toBe(204);
  expect(emls()).toHaveLength(2);
  const recipients = emls().map((f) => /^To: (.*)$/m.exec(readFileSync(join(outbox, f), "utf8"))?.[1]).sort();
  expect(recipients).toEqual(["anna@alfa.test", "ops@example.test"]);
});
