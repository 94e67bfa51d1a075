// The daily report's job status points come from taken-controle's rule (statusesOf):
// a run that nothing keeps alive is `onderbroken`, a live run past its maximum run time
// `hangt`, and both are a point of the status, never "Alles in orde". A run alive under
// another instance's lease within its maximum time is simply running: no point.
import { expect, test } from "bun:test";
import { Cron } from "croner";
import { newLeaseHolder } from "../src/job-lease.ts";
import type { JobContext } from "../src/jobs/job.ts";
import { runDagrapport } from "../src/jobs/dagrapport.ts";
import { runTakenControle } from "../src/jobs/taken-controle.ts";
import { SCHEDULE } from "../src/schedule.ts";
import { insertBackupRow, backupReportRow, TEST_SEAL } from "./helpers.ts";
import { addSealedRun, makeEnv, type Env } from "./dialect.ts";

const NOW = new Date("2026-07-23T06:00:01Z");
const idle: JobContext = { running: [], unrecorded: [] };

const addRun = addSealedRun;

const HERE = newLeaseHolder();

/** A live lease on the newest run of `job`, as another instance on this host holds it (the test's own pid: alive). */
async function addLease(env: Env, job: string, verloopt: Date): Promise<void> {
  const { id: runId } = (await env.db.get<{ id: number }>("SELECT id FROM job_runs WHERE job = ? ORDER BY id DESC LIMIT 1", job))!;
  const l = { job, pid: process.pid, instantie: "ander-proces-id", host: HERE.host, pidNs: HERE.pidNs, runId, verloopt: verloopt.toISOString() };
  await env.db.run(
    "INSERT INTO job_leases (job, pid, instantie, host, pid_ns, run_id, verkregen, vernieuwd, verloopt, zegel) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    l.job,
    l.pid,
    l.instantie,
    l.host,
    l.pidNs,
    l.runId,
    "2026-07-23T00:00:00.000Z",
    "2026-07-23T00:00:00.000Z",
    l.verloopt,
    TEST_SEAL.sealLease(l),
  );
}

/** Every scheduled job ran at its last fire time, except audit-verificatie (left to the test); a fresh backup. */
async function healthy(env: Env): Promise<void> {
  for (const e of SCHEDULE) {
    if (e.cron === null || e.job === "audit-verificatie") continue;
    const last = new Cron(e.cron, { timezone: "UTC" }).previousRuns(1, new Date(NOW.getTime() + 1))[0]!;
    await addRun(env, e.job, new Date(last.getTime() + 2000));
  }
  await insertBackupRow(env.db, backupReportRow({ ontvangen: new Date(NOW.getTime() - 3600_000), exitCode: 0 }));
}

async function report(env: Env, context: JobContext = idle) {
  return (await runDagrapport(env.deps, NOW, context)).body;
}

const row = (body: Awaited<ReturnType<typeof report>>, job: string) => body.taken.find((t) => t.job === job)!;

test("a run left 'bezig' that no process keeps alive (killed mid-run) is onderbroken in the daily report: a let-op point saying to call it again", async () => {
  const env = await makeEnv();
  try {
    await healthy(env);
    await addRun(env, "audit-verificatie", new Date("2026-07-23T01:00:02Z"), "bezig", null);
    const tc = await runTakenControle(env.deps, NOW, idle);
    expect(tc.body.onderbroken).toEqual(["audit-verificatie"]);

    const body = await report(env);
    expect(row(body, "audit-verificatie")).toMatchObject({ uitkomst: "bezig", status: "onderbroken", achterstallig: false });
    expect(body.status.niveau).toBe("let-op");
    expect(body.status.punten).toHaveLength(1);
    expect(body.status.punten[0]).toStartWith("De laatste run van audit-verificatie (23/07/2026 03:00) is nooit beëindigd en geen proces voert hem nog uit");
    expect(body.status.punten[0]).toContain("roep de taak opnieuw aan");
  } finally {
    await env.cleanup();
  }
});

test("a run alive past its maximum run time hangt in the daily report (actie), under another instance's lease and in this process alike", async () => {
  const env = await makeEnv();
  try {
    await healthy(env);
    // audit-verificatie may run 60 minutes; this one started five hours ago.
    await addRun(env, "audit-verificatie", new Date("2026-07-23T01:00:02Z"), "bezig", null);
    const runId = (await env.db.get<{ id: number }>("SELECT id FROM job_runs WHERE job = 'audit-verificatie'"))!.id;

    // This process runs it (the job wrapper's context), no lease read needed.
    const here = await report(env, { running: [{ job: "audit-verificatie", runId }], unrecorded: [] });
    expect(row(here, "audit-verificatie")).toMatchObject({ status: "hangt" });
    expect(here.status.niveau).toBe("actie");
    expect(here.status.punten).toEqual([expect.stringContaining("De run van audit-verificatie die 23/07/2026 03:00 startte, loopt langer dan de maximale looptijd van 60 minuten")]);

    // Another instance holds and renews its lease.
    await addLease(env, "audit-verificatie", new Date(NOW.getTime() + 60_000));
    const elsewhere = await report(env);
    expect(row(elsewhere, "audit-verificatie")).toMatchObject({ status: "hangt" });
    expect(elsewhere.status.niveau).toBe("actie");
    expect(elsewhere.status.punten).toEqual(here.status.punten);
  } finally {
    await env.cleanup();
  }
});

test("a run 'bezig' under another instance's live lease within its maximum run time is loopt: no point, alles in orde", async () => {
  const env = await makeEnv();
  try {
    await healthy(env);
    await addRun(env, "audit-verificatie", new Date("2026-07-23T05:30:00Z"), "bezig", null);
    await addLease(env, "audit-verificatie", new Date(NOW.getTime() + 60_000));
    const body = await report(env);
    expect(row(body, "audit-verificatie")).toMatchObject({ uitkomst: "bezig", status: "loopt", achterstallig: false });
    expect(body.status).toEqual({ niveau: "ok", kop: "Alles in orde", punten: [] });
  } finally {
    await env.cleanup();
  }
});
