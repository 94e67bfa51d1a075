// Runs recorded while the host clock ran ahead (an RTC wrong at boot before NTP synced, a
// VM restored with a skewed clock, a typo in `date -s`): genuine, sealed, and dated in the
// future once the clock is put right. They must not count as done, as the last run or as
// started since (FUTURE_START_MARGIN_MS, src/job-runs.ts): else every scheduled call is
// answered 204 and taken-controle calls the job ok until real time catches up with them.
// Found by a review (a year ahead: a year without verification, retention or reports).
import { afterEach, expect, test } from "bun:test";
import { runDagrapport } from "../src/jobs/dagrapport.ts";
import { runTakenControle } from "../src/jobs/taken-controle.ts";
import { call } from "./helpers.ts";
import { addTenant, fillChain, makeEnv, type Env } from "./dialect.ts";

let env: Env | undefined;
afterEach(async () => {
  await env?.cleanup();
  env = undefined;
});

const scheduled = { headers: { "x-nachtwacht-gepland": "1" } };
const at = (iso: string) => new Date(iso);
/** The night the clock was a year ahead, and the next night after NTP put it right. */
const AHEAD = "2027-07-24T01:00:02.000Z";
const NEXT_NIGHT = "2026-07-25T01:00:02.000Z";

/** A tenant with a chain, and audit-verificatie's scheduled call run (200) with the clock a year ahead. */
async function verifiedAhead(): Promise<Env> {
  const e = await makeEnv();
  const t = await addTenant(e.db, "Gemeente Delft");
  await fillChain(e.store, t, 5);
  e.setNow(at(AHEAD));
  expect((await call(e.app, "/api/cron/audit-verificatie", scheduled)).status).toBe(200);
  return e;
}

test("after the clock is put back, the scheduled call runs the job instead of answering 204 for the run dated a year ahead", async () => {
  env = await verifiedAhead();
  env.setNow(at(NEXT_NIGHT));
  const res = await call(env.app, "/api/cron/audit-verificatie", scheduled);
  expect(res.status).toBe(200);
  expect(await env.db.all("SELECT gestart, uitkomst FROM job_runs WHERE job = 'audit-verificatie' ORDER BY id")).toEqual([
    { gestart: AHEAD, uitkomst: "ok" },
    { gestart: NEXT_NIGHT, uitkomst: "ok" },
  ]);
  // taken-controle's own call, a year ahead, does not make tonight's a no-op either.
  env.setNow(at(AHEAD.replace("01:00", "01:45")));
  await call(env.app, "/api/cron/taken-controle", scheduled);
  env.setNow(at(NEXT_NIGHT.replace("01:00", "01:45")));
  expect((await call(env.app, "/api/cron/taken-controle", scheduled)).status).not.toBe(204);

  // Within the margin a run does count: a second instance whose clock is a second behind
  // this one's finds tonight's run done.
  env.setNow(at("2026-07-25T01:00:01.000Z"));
  const second = await call(env.app, "/api/cron/audit-verificatie", scheduled);
  expect(second.status).toBe(204);
  expect(second.headers.get("x-nachtwacht-overgeslagen")).toBeTruthy();
});

test("taken-controle after the clock is put back: the job is gemist, 409, and the alarm names the run recorded in the future", async () => {
  env = await verifiedAhead();
  const now = at("2026-07-26T03:00:00.000Z"); // two nights later, no verification since
  const r = await runTakenControle(env.deps, now);
  expect(r.status).toBe(409);
  const regel = r.body.taken.find((x) => x.job === "audit-verificatie")!;
  expect(regel).toMatchObject({ status: "gemist", gemistSinds: "2026-07-26T01:00:00.000Z", laatsteRun: null, toekomstigeStart: AHEAD });
  expect(r.body.gemist).toContain("audit-verificatie");
  const missed = env.alarms.raised.find((a) => a.type === "job-missed")!;
  expect(missed.message).toContain(`audit-verificatie (gestart ${AHEAD}) staat in de toekomst geregistreerd`);
  expect(missed.message).toContain("de klok van de server liep voor");

  // The daily report does not call it ok either: overdue, no last run before now.
  const report = await runDagrapport(env.deps, now);
  expect(report.body.taken.find((x) => x.job === "audit-verificatie")).toMatchObject({ uitkomst: "nooit", achterstallig: true });
  expect(report.body.status.punten.join("\n")).toContain("audit-verificatie is niet gestart sinds");
});

test("verification results written after the clock is put back count: the run dated a year ahead is not the newest verification", async () => {
  env = await verifiedAhead();
  env.setNow(at(NEXT_NIGHT));
  // By hand, so that this test needs only the bound on the newest verification run, not doneSince's.
  expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
  const report = await runDagrapport(env.deps, at("2026-07-25T06:00:00.000Z"));
  expect(report.body.verificatie).toMatchObject({ gecontroleerd: 1, nietGecontroleerd: 0, aantalGebroken: 0 });
});
