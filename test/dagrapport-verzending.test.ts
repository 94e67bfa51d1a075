// dagrapport's mark that a send began (src/reports/daily-sending.ts), on both stores: a run
// that died while its report was going out leaves the mark; a later call for the same
// fire time (the rerun the job-interrupted alarm used to ask for) answers 409
// mogelijkAfgeleverd and sends nothing, taken-controle says the report may have gone
// out, and the operator's DELETE from the alarm lets the next call send it. The same with
// a real SIGKILL of a service process: test/dagrapport-kill.test.ts (SQLite, the outbox).
import { afterEach, expect, test } from "bun:test";
import { runDagrapport } from "../src/jobs/dagrapport.ts";
import { runTakenControle } from "../src/jobs/taken-controle.ts";
import type { MailMessage } from "../src/mail/mailer.ts";
import { until } from "./helpers.ts";
import { addSealedRun, makeEnv, type Env } from "./dialect.ts";

let env: Env | undefined;
afterEach(async () => {
  await env?.cleanup();
  env = undefined;
});

const FIRED = new Date("2026-07-23T06:00:00.000Z");
/** The killed run: started two seconds after the fire time. */
const KILLED_START = new Date("2026-07-23T06:00:02.000Z");
const KEY = `dagrapport-verzending:${FIRED.toISOString()}`;

/** A run that dies while its message is going out: its send never returns, as a SIGKILLed process's never does. */
async function runKilledWhileSending(e: Env): Promise<void> {
  const send = e.mailer.send.bind(e.mailer);
  let sending = false;
  e.mailer.send = () => {
    sending = true;
    return new Promise<never>(() => {});
  };
  void runDagrapport(e.deps, KILLED_START);
  await until("the killed run's send began", () => sending);
  e.mailer.send = send;
  // The job_runs row the dead process left: started, never ended.
  await addSealedRun(e, "dagrapport", KILLED_START, "bezig", null);
}

test("a dagrapport run that died while sending: a later call for that fire time answers 409 mogelijkAfgeleverd and sends nothing; after the operator's DELETE it sends", async () => {
  env = await makeEnv({ DAGRAPPORT_EMAIL: "ops@example.test" });
  await runKilledWhileSending(env);
  expect(await env.db.all("SELECT key, value FROM service_meta WHERE key LIKE 'dagrapport-verzending:%'")).toEqual([{ key: KEY, value: KILLED_START.toISOString() }]);

  const rerun = await runDagrapport(env.deps, new Date("2026-07-23T09:00:00.000Z"));
  expect(rerun.status).toBe(409);
  expect(rerun.body).toMatchObject({ ok: false, verzonden: false, mogelijkAfgeleverd: true, ontvanger: "ops@example.test" });
  const error = (rerun.body as { error: string }).error;
  expect(error).toStartWith("Het dagrapport aan ops@example.test is mogelijk wel afgeleverd");
  expect(error).toContain(`een eerdere run (gestart ${KILLED_START.toISOString()}) begon het te versturen`);
  expect(error).toContain(`DELETE FROM service_meta WHERE key = '${KEY}'`);
  expect(env.mailer.sent).toEqual([]);
  expect(env.alarms.raised.map((a) => a.type)).toEqual(["mail-failure"]);
  expect(env.alarms.raised[0]!.message).toContain("Controleer de mailserver (het log) of de outbox");

  // Again: still not sent; the mark stays until the operator removes it.
  expect((await runDagrapport(env.deps, new Date("2026-07-23T10:00:00.000Z"))).status).toBe(409);
  expect(env.mailer.sent).toEqual([]);

  await env.db.run(`DELETE FROM service_meta WHERE key = '${KEY}'`);
  const sent = await runDagrapport(env.deps, new Date("2026-07-23T11:00:00.000Z"));
  expect(sent.status).toBe(200);
  expect(env.mailer.sent.map((m: MailMessage) => m.to)).toEqual(["ops@example.test"]);
  // A send whose outcome is known leaves no mark: a later call by hand sends a fresh report.
  expect(await env.db.all("SELECT key FROM service_meta WHERE key LIKE 'dagrapport-verzending:%'")).toEqual([]);
  expect((await runDagrapport(env.deps, new Date("2026-07-23T11:30:00.000Z"))).status).toBe(200);
  expect(env.mailer.sent).toHaveLength(2);
});

test("a mark of an earlier fire time does not hold the next day's report back", async () => {
  env = await makeEnv({ DAGRAPPORT_EMAIL: "ops@example.test" });
  await runKilledWhileSending(env);
  const next = await runDagrapport(env.deps, new Date("2026-07-24T06:00:01.000Z"));
  expect(next.status).toBe(200);
  expect(env.mailer.sent).toHaveLength(1);
  // The day before's mark went with it: its day has passed.
  expect(await env.db.all("SELECT key FROM service_meta WHERE key LIKE 'dagrapport-verzending:%'")).toEqual([]);
});

test("taken-controle: an interrupted dagrapport run that began sending is 'mogelijk verstuurd, controleer de mailserver/outbox', not 'roep de taak opnieuw aan'", async () => {
  env = await makeEnv({ DAGRAPPORT_EMAIL: "ops@example.test" });
  await runKilledWhileSending(env);
  // Another job interrupted in the same check keeps its ask for a rerun.
  await addSealedRun(env, "audit-anker", new Date("2026-07-23T02:00:02.000Z"), "bezig", null);
  await runTakenControle(env.deps, new Date("2026-07-23T07:00:00.000Z"), { running: [], unrecorded: [] });
  const interrupted = env.alarms.raised.filter((a) => a.type === "job-interrupted");
  expect(interrupted).toHaveLength(1);
  const message = interrupted[0]!.message;
  expect(message).toContain("De laatste run van audit-anker is nooit beëindigd");
  expect(message).toContain(`De laatste run van dagrapport (gestart ${KILLED_START.toISOString()}) is nooit beëindigd`);
  expect(message).toContain("Het is mogelijk verstuurd: controleer de mailserver (het log) of de outbox");
  expect(message).toContain(`DELETE FROM service_meta WHERE key = '${KEY}'`);
  expect(message).not.toContain("van audit-anker, dagrapport");
  expect(message).not.toContain("De laatste run van dagrapport is nooit beëindigd");
});

test("taken-controle: an interrupted dagrapport run that never began sending still asks for a rerun", async () => {
  env = await makeEnv({ DAGRAPPORT_EMAIL: "ops@example.test" });
  await addSealedRun(env, "dagrapport", KILLED_START, "bezig", null);
  await runTakenControle(env.deps, new Date("2026-07-23T07:00:00.000Z"), { running: [], unrecorded: [] });
  const interrupted = env.alarms.raised.filter((a) => a.type === "job-interrupted");
  expect(interrupted.map((a) => a.message)).toEqual([
    "De laatste run van dagrapport is nooit beëindigd en geen proces voert hem nog uit: het proces is gestopt of gecrasht terwijl de taak liep, en het werk is niet af. " +
      "Zoek in het log van de service waarom het stopte en roep de taak opnieuw aan.",
  ]);
});
