// Backup reports received while the host clock ran ahead (a bad NTP step, an RTC wrong at
// boot): genuine and sealed, and dated in the future once the clock is put right. They
// must not count as the newest backup (FUTURE_START_MARGIN_MS, as for job runs): else one
// hides every later report, failed or missing, until real time catches up with it.
// Found by a review (a year ahead: a year of backup-controle 200 and "OK" in the report).
import { afterEach, expect, test } from "bun:test";
import { runBackupControle } from "../src/jobs/backup-controle.ts";
import { runBackupStatus } from "../src/jobs/backup-status.ts";
import { runDagrapport } from "../src/jobs/dagrapport.ts";
import { newIngestCounters } from "../src/ingest/counters.ts";
import { collectMetrics, renderMetrics } from "../src/http/metrics.ts";
import { RunningJobs } from "../src/running-jobs.ts";
import { FUTURE_START_MARGIN_MS } from "../src/job-runs.ts";
import { NOW } from "./helpers.ts";
import { makeEnv, type Env } from "./dialect.ts";

const DAY = 24 * 3600_000;
const at = (ms: number) => new Date(NOW.getTime() + ms);
const good = { exitCode: 0, bestandsnaam: "b.db.gz", grootte: 10, foutmelding: "" };
const failed = { exitCode: 74, bestandsnaam: null, grootte: null, foutmelding: "No space left on device" };

let env: Env | undefined;
afterEach(async () => {
  await env?.cleanup();
  env = undefined;
});

const metricsAt = async (e: Env, now: Date) => renderMetrics(await collectMetrics({ deps: e.deps, running: new RunningJobs(), counters: newIngestCounters() }, now));

test("a report received with the clock a year ahead does not hide a later failure: backup-controle 409 mislukt naming it, /metrics and the daily report no success", async () => {
  env = await makeEnv();
  const ahead = at(365 * DAY);
  await runBackupStatus(env.deps, ahead, good);
  await runBackupStatus(env.deps, at(DAY), failed);
  env.alarms.raised.length = 0;
  const later = at(30 * DAY);

  const bc = await runBackupControle(env.deps, later);
  expect(bc.status).toBe(409);
  expect(bc.body).toMatchObject({ ok: false, reden: "mislukt", toekomst: ahead.toISOString(), laatsteBackup: { exitCode: 74, ontvangen: at(DAY).toISOString() } });
  expect(env.alarms.raised.map((a) => a.type)).toEqual(["backup-missing"]);
  expect(env.alarms.raised[0]!.message).toContain(`(ontvangen ${ahead.toISOString()}, geslaagd) staat in de toekomst geregistreerd`);
  expect(env.alarms.raised[0]!.context).toMatchObject({ reden: "mislukt", toekomst: ahead.toISOString() });

  const text = await metricsAt(env, later);
  expect(text).toMatch(/^nachtwacht_backup_overdue 1$/m);
  expect(text).toMatch(/^nachtwacht_backup_last_success 0$/m);
  const d = (await runDagrapport(env.deps, later)).body as any;
  expect(d.backup.resultaat).toBe("FOUT");
  expect(d.backupDetail).toMatchObject({ exitCode: 74, teOud: true });
});

test("a good recent backup beside one dated ahead → 409 toekomst with an alarm; only the one dated ahead → 409 toekomst, nothing counts as success", async () => {
  env = await makeEnv();
  await runBackupStatus(env.deps, at(365 * DAY), good);
  const only = await runBackupControle(env.deps, NOW);
  expect(only.status).toBe(409);
  expect(only.body).toMatchObject({ ok: false, reden: "toekomst", laatsteBackup: null, toekomst: at(365 * DAY).toISOString() });
  expect(await metricsAt(env, NOW)).toMatch(/^nachtwacht_backup_last_success 0$/m);

  await runBackupStatus(env.deps, at(-DAY / 24), good);
  env.alarms.raised.length = 0;
  const r = await runBackupControle(env.deps, NOW);
  expect(r.status).toBe(409);
  expect(r.body).toMatchObject({ ok: false, reden: "toekomst", laatsteBackup: { ontvangen: at(-DAY / 24).toISOString() }, leeftijdUren: 1 });
  expect(env.alarms.raised.map((a) => [a.type, a.context?.reden])).toEqual([["backup-missing", "toekomst"]]);
  expect(env.alarms.raised[0]!.message).toStartWith("De laatste backupmelding die telt");
});

test("within FUTURE_START_MARGIN_MS a report counts (another instance's clock a little ahead); a moment beyond it does not", async () => {
  env = await makeEnv();
  await runBackupStatus(env.deps, at(FUTURE_START_MARGIN_MS), good);
  expect((await runBackupControle(env.deps, NOW)).status).toBe(200);
  expect((await runBackupControle(env.deps, at(-1))).body).toMatchObject({ ok: false, reden: "toekomst", laatsteBackup: null });
});

test("the witness of a report received ahead is moved back by the next report: a later report deleted from the database is still noticed (ontbreekt)", async () => {
  env = await makeEnv();
  await runBackupStatus(env.deps, at(-2 * DAY), good);
  await runBackupStatus(env.deps, at(365 * DAY), good);
  // The witness dated ahead does not count as missing, as its row does not count.
  await env.db.run("DELETE FROM backup_statuses WHERE ontvangen > ?", NOW.toISOString());
  expect((await runBackupControle(env.deps, NOW)).body).toMatchObject({ ontbreekt: null, reden: "te-oud" });

  await runBackupStatus(env.deps, at(-DAY / 24), failed);
  await env.db.run("DELETE FROM backup_statuses WHERE exit_code <> 0");
  expect((await runBackupControle(env.deps, NOW)).body).toMatchObject({ ok: false, ontbreekt: at(-DAY / 24).toISOString() });
});

test("a failed backup received while the clock ran 3 h ahead, beside a good one 20 h ago: the alarm, the daily report and /metrics say it failed", async () => {
  env = await makeEnv();
  const H = 3600_000;
  await runBackupStatus(env.deps, at(-20 * H), good);
  await runBackupStatus(env.deps, at(3 * H), failed);
  env.alarms.raised.length = 0;

  const bc = await runBackupControle(env.deps, NOW);
  expect(bc.body).toMatchObject({ ok: false, reden: "toekomst", toekomst: at(3 * H).toISOString() });
  expect(env.alarms.raised[0]!.message).toContain(`(ontvangen ${at(3 * H).toISOString()}, mislukt met exitcode 74) staat in de toekomst geregistreerd`);
  expect(env.alarms.raised[0]!.context).toMatchObject({ toekomstGelukt: false, toekomstExitCode: 74, toekomstFoutmelding: "No space left on device" });

  const d = (await runDagrapport(env.deps, NOW)).body as any;
  expect(d.backup.resultaat).toBe("OK");
  expect(d.backupDetail.toekomst).toMatchObject({ ontvangen: at(3 * H).toISOString(), gelukt: false, exitCode: 74, foutmelding: "No space left on device" });
  expect(d.status.niveau).toBe("actie");
  expect(d.status.punten.some((p: string) => /toekomst geregistreerd \(ontvangen .*mislukt met exitcode 74: No space left on device\).*NTP/.test(p))).toBe(true);

  const text = await metricsAt(env, NOW);
  expect(text).toMatch(/^nachtwacht_backup_reports_ahead 1$/m);
  expect(text).toMatch(/^nachtwacht_backup_last_success 1$/m);

  // Once real time passes it, it counts: no longer ahead.
  const later = at(3 * H + FUTURE_START_MARGIN_MS + 1);
  expect(await metricsAt(env, later)).toMatch(/^nachtwacht_backup_reports_ahead 0$/m);
  expect(((await runDagrapport(env.deps, later)).body as any).backupDetail.toekomst).toBeNull();
});
