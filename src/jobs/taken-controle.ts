// taken-controle: the jobs watching themselves. For every scheduled job
// the schedule table (src/schedule.ts) says when it should last have fired; the
// job-run history says whether it did, and how its latest run ended.
import { t, type Static } from "elysia";
import { installedAt } from "../db.ts";
import type { Deps } from "../deps.ts";
import { lastRun } from "../job-runs.ts";
import { dueState } from "../schedule-due.ts";
import { SCHEDULE } from "../schedule.ts";
import { defineJob, type JobContext, type JobResult } from "./job.ts";
import { dateTime, integer, nullable, enumOf } from "./schema.ts";

export const TaakStatus = enumOf(["ok", "loopt", "gemist", "faalt", "onderbroken", "wacht", "nog-niet-verwacht"]);
export type TaakStatus = Static<typeof TaakStatus>;

export const TaakRegel = t.Object({
  job: t.String(),
  cron: t.String({ description: "Cron-expressie (UTC)." }),
  laatsteVerwacht: nullable(dateTime(), {
    description: "Het laatste starttijdstip volgens het schema, op of vóór nu (UTC); null als het schema nog nooit afging.",
  }),
  gemistSinds: t.Optional(dateTime({ description: "Alleen bij `gemist`: het starttijdstip sinds wanneer geen run startte." })),
  laatsteRun: nullable(
    t.Object({
      gestart: dateTime(),
      beeindigd: nullable(dateTime()),
      uitkomst: enumOf(["bezig", "ok", "afwijking", "fout"]),
    }),
    { description: "De nieuwste run; null als de taak nooit liep." },
  ),
  status: TaakStatus,
});
export type TaakRegel = Static<typeof TaakRegel>;

export const TakenControleBody = t.Object({
  ok: t.Boolean(),
  margeMinuten: integer({ description: "TAKEN_MARGE_MINUTEN." }),
  taken: t.Array(TaakRegel),
  gemist: t.Array(t.String(), { description: "Taken die niet startten." }),
  falend: t.Array(t.String(), { description: "Taken waarvan de laatste run mislukte of onderbroken is." }),
});
export type TakenControleBody = Static<typeof TakenControleBody>;

/**
 * `context.running`: the runs this process is executing right now (the job wrapper
 * passes them). Such a job is alive, whatever its row looks like: a run older than the
 * grace is a long run, not an interrupted one, and the calls the guard refused with 409
 * while it ran left no row, which is no missed fire time either. It is reported as
 * `loopt`, without alarm; its outcome is judged by the next check after it ended.
 * Called directly (a test, a tool beside the service) nothing of this process runs.
 */
export async function runTakenControle(
  deps: Deps,
  now: Date,
  context: JobContext = { running: [], unrecorded: [] },
): Promise<JobResult<TakenControleBody>> {
  const { db } = deps.store;
  const margeMinuten = deps.config.takenMargeMinuten;
  const graceMs = margeMinuten * 60_000;
  // Without the install time (someone removed it) nothing is exempt: the watchdog
  // should rather alarm once too often than stay silent.
  const installed = installedAt(db);
  // Runs that completed in this process but whose end could not be written yet: judged
  // by how they really ended, not as a 'bezig' row (src/http/job-route.ts recordEnd).
  const keptEnds = new Map(context.unrecorded.map((u) => [u.runId, u]));

  const taken: TaakRegel[] = [];
  const gemist: string[] = [];
  const falend: string[] = [];
  const runningHere = new Set(context.running.map((r) => r.job));
  for (const entry of SCHEDULE) {
    if (entry.cron === null) continue;
    const { expected, notYetExpected, due, missed: dueMissed, ranSinceExpected } = dueState(db, entry.job, entry.cron, now, graceMs, installed);
    const row = lastRun(db, entry.job);
    const kept = row ? keptEnds.get(row.id) : undefined;
    const run: TaakRegel["laatsteRun"] = row
      ? { gestart: row.gestart, beeindigd: kept ? kept.beeindigd : row.beeindigd, uitkomst: kept ? kept.uitkomst : row.uitkomst }
      : null;

    // Only the latest run is judged: a failure followed by a run still in progress
    // waits for that run's outcome. A run with no end after longer than the grace
    // was interrupted (the process died or was restarted); its work was not done.
    // A job this process is running right now is neither interrupted nor missed.
    const loopt = runningHere.has(entry.job);
    const failed = !loopt && run?.uitkomst === "fout";
    const interrupted =
      !loopt &&
      run !== null &&
      run.uitkomst === "bezig" &&
      run.beeindigd === null &&
      now.getTime() - new Date(run.gestart).getTime() > graceMs;
    const missed = !loopt && dueMissed;

    let status: TaakStatus;
    if (loopt) status = "loopt";
    else if (notYetExpected) status = "nog-niet-verwacht";
    else if (missed) status = "gemist";
    else if (failed) status = "faalt";
    else if (interrupted) status = "onderbroken";
    else if (!ranSinceExpected) status = "wacht";
    else status = "ok";

    if (missed) gemist.push(entry.job);
    if (failed || interrupted) falend.push(entry.job);
    taken.push({
      job: entry.job,
      cron: entry.cron,
      laatsteVerwacht: expected ? expected.toISOString() : null,
      ...(missed ? { gemistSinds: due!.toISOString() } : {}),
      laatsteRun: run,
      status,
    });
  }

  const ok = gemist.length === 0 && falend.length === 0;
  const body: TakenControleBody = { ok, margeMinuten, taken, gemist, falend };
  if (ok) return { status: 200, body };

  const parts: string[] = [];
  if (gemist.length) parts.push(`niet gestart: ${gemist.join(", ")}`);
  if (falend.length) parts.push(`laatste run mislukt of onderbroken: ${falend.join(", ")}`);
  await deps.alarms.raise({
    type: "job-missed",
    message: `Geplande taken lopen niet zoals verwacht (${parts.join("; ")}). Controleer de crontab en de service.`,
    context: {
      gemist,
      falend,
      margeMinuten,
      taken: taken.filter((t) => t.status === "gemist" || t.status === "faalt" || t.status === "onderbroken"),
    },
  });
  return { status: 409, body };
}

export const takenControleJob = defineJob({
  name: "taken-controle",
  summary: "Controleert of elke geplande taak op tijd liep en niet faalde",
  description:
    "Voor elke taak in het schema: het laatste verwachte starttijdstip (cron, UTC) tegen de run-geschiedenis, met TAKEN_MARGE_MINUTEN marge. " +
    "`gemist`: geen run gestart sinds een starttijdstip waarvan de marge verstreken is. `faalt`: de laatste run eindigde in een fout. " +
    "`onderbroken`: de laatste run is langer dan de marge geleden gestart en nooit beëindigd, en deze service voert hem niet meer uit. " +
    "`loopt`: deze service voert de taak op dit moment uit (ook een lange run, ook taken-controle zelf); geen alarm, ook niet als " +
    "aanroepen in de tussentijd met 409 geweigerd zijn. `wacht`: verwacht, nog binnen de marge. " +
    "`nog-niet-verwacht`: het eerste verwachte tijdstip na installatie ligt nog in de toekomst. 409 met de lijst en een alarm (`type` = `job-missed`) " +
    "wanneer een taak gemist is of faalt.",
  run: (deps, now, _input, context) => runTakenControle(deps, now, context),
  responses: {
    200: { description: "Alle geplande taken liepen op tijd.", schema: TakenControleBody },
    409: { description: "Een taak is gemist, faalt of is onderbroken; alarm verstuurd.", schema: TakenControleBody },
  },
});
