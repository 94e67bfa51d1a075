// taken-controle: the jobs watching themselves. For every scheduled job
// the schedule table (src/schedule.ts) says when it should last have fired and how long
// a run may take; the job-run history says whether it did, and how its latest run ended;
// the in-process guard and the leases (src/job-lease.ts) say whether a run is alive.
// The rule itself is statusesOf (src/schedule-due.ts), which /metrics applies too; the
// reads behind it are jobStatuses on SQLite and jobStatusesPg (src/pg/status.ts).
import { t, type Static } from "elysia";
import type { AlarmCondition } from "../alarms/alarm.ts";
import type { Deps } from "../deps.ts";
import { FUTURE_START_MARGIN_MS } from "../job-runs.ts";
import { jobStatusesPg } from "../pg/status.ts";
import { rowSealOf } from "../row-seal.ts";
import { JOB_STATUSES, jobStatuses } from "../schedule-due.ts";
import { defineJob, type JobContext, type JobResult } from "./job.ts";
import { dateTime, integer, nullable, enumOf } from "./schema.ts";

/** FUTURE_START_MARGIN_MS in minutes, for the texts. */
const MARGIN_MIN = FUTURE_START_MARGIN_MS / 60_000;

export const TaakStatus = enumOf(JOB_STATUSES);
export type TaakStatus = Static<typeof TaakStatus>;

export const TaakRegel = t.Object({
  job: t.String(),
  cron: t.String({ description: "Cron-expressie (UTC)." }),
  maxLooptijdMinuten: integer({ minimum: 1, description: "De maximale looptijd uit het schema: een run die langer leeft, hangt." }),
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
    { description: "De nieuwste run die telt; null als de taak nooit liep. Een run met een start in de toekomst telt niet (zie `toekomstigeStart`)." },
  ),
  toekomstigeStart: t.Optional(
    dateTime({
      description:
        `Alleen als er een is: de start van de nieuwste run die meer dan ${MARGIN_MIN} minuten na nu geregistreerd staat. De klok van de server liep voor toen die run startte; ` +
        "zo'n run telt niet als gedaan, dus een taak die sindsdien niet echt liep, is `gemist`.",
    }),
  ),
  levend: t.Optional(
    enumOf(["dit-proces", "ander-proces"], {
      description:
        "Alleen bij `loopt` en `hangt`: waaraan de service ziet dat de run leeft: deze service voert hem uit, of een ander proces houdt zijn lease (job_leases) geldig.",
    }),
  ),
  houder: t.Optional(
    t.Object(
      { pid: integer(), verloopt: dateTime({ description: "Tot wanneer de lease geldt als het proces hem niet meer vernieuwt." }) },
      { description: "Alleen bij `levend` = `ander-proces`: het proces dat de lease houdt." },
    ),
  ),
  status: TaakStatus,
});
export type TaakRegel = Static<typeof TaakRegel>;

export const TakenControleBody = t.Object({
  ok: t.Boolean(),
  margeMinuten: integer({ description: "TAKEN_MARGE_MINUTEN." }),
  taken: t.Array(TaakRegel),
  gemist: t.Array(t.String(), { description: "Taken die niet startten (`gemist`)." }),
  falend: t.Array(t.String(), { description: "Taken waarvan de laatste run mislukte (`faalt`) of onderbroken is (`onderbroken`)." }),
  onderbroken: t.Array(t.String(), { description: "Taken waarvan de laatste run nooit eindigde en door geen proces meer wordt uitgevoerd (`onderbroken`; ook in `falend`)." }),
  hangend: t.Array(t.String(), { description: "Taken waarvan een levende run langer loopt dan zijn maximale looptijd (`hangt`)." }),
  vervalst: t.Array(t.String(), {
    description:
      "Taken met rijen in job_runs, nieuwer dan hun laatste echte run, zonder geldig zegel: niet door nachtwacht geschreven maar door iemand die de database kan wijzigen (alarm `db-integrity`). Zulke rijen tellen niet als run.",
  }),
});
export type TakenControleBody = Static<typeof TakenControleBody>;

/** The condition (Alarm.condition) of taken-controle's db-integrity alarm. */
const VERVALST = "taken-controle:vervalst";

/** The alarms of one check, one per kind of problem, in this order. */
function alarmsFor(body: TakenControleBody, byStatus: (s: TaakStatus) => TaakRegel[]) {
  const out: { type: "job-missed" | "job-interrupted" | "job-hung" | "db-integrity"; message: string; context: Record<string, unknown>; condition?: AlarmCondition }[] = [];
  if (body.vervalst.length) {
    out.push({
      type: "db-integrity",
      message:
        `job_runs bevat runs van ${body.vervalst.join(", ")} zonder geldig zegel: iemand die de database kan wijzigen heeft ze geschreven of veranderd, ` +
        `niet nachtwacht. Ze tellen niet als run. Zoek uit wie schrijftoegang tot de database heeft, en controleer de audit-keten (audit-verificatie met de hand).`,
      context: { vervalst: body.vervalst },
      // Raised every hour while the rows are there; mailed when the list changes, then once a day.
      condition: { about: VERVALST, state: body.vervalst.join(" ") },
    });
  }
  const faalt = byStatus("faalt").map((r) => r.job);
  if (body.gemist.length || faalt.length) {
    const parts: string[] = [];
    if (body.gemist.length) parts.push(`niet gestart: ${body.gemist.join(", ")}`);
    if (faalt.length) parts.push(`laatste run mislukt: ${faalt.join(", ")}`);
    const future = byStatus("gemist").filter((r) => r.toekomstigeStart);
    const clock = future.length
      ? ` De laatste run van ${future.map((r) => `${r.job} (gestart ${r.toekomstigeStart})`).join(", ")} staat in de toekomst geregistreerd: ` +
        `de klok van de server liep voor toen die run startte. Zo'n run telt niet als uitgevoerd. Controleer de tijdsynchronisatie (NTP) van de server.`
      : "";
    out.push({
      type: "job-missed",
      message: `Geplande taken lopen niet zoals verwacht (${parts.join("; ")}). Controleer de crontab en de service.${clock}`,
      context: { gemist: body.gemist, faalt, margeMinuten: body.margeMinuten, taken: [...byStatus("gemist"), ...byStatus("faalt")] },
    });
  }
  if (body.onderbroken.length) {
    out.push({
      type: "job-interrupted",
      message:
        `De laatste run van ${body.onderbroken.join(", ")} is nooit beëindigd en geen proces voert hem nog uit: het proces is gestopt of gecrasht ` +
        `terwijl de taak liep, en het werk is niet af. Zoek in het log van de service waarom het stopte en roep de taak opnieuw aan.`,
      context: { onderbroken: body.onderbroken, taken: byStatus("onderbroken") },
    });
  }
  if (body.hangend.length) {
    const regels = byStatus("hangt");
    const wie = regels.map((r) => `${r.job} (gestart ${r.laatsteRun?.gestart}, maximaal ${r.maxLooptijdMinuten} min, ${r.levend === "ander-proces" ? `proces pid ${r.houder?.pid}` : "in deze service"})`);
    out.push({
      type: "job-hung",
      message:
        `Een run loopt langer dan de maximale looptijd van de taak en hangt waarschijnlijk: ${wie.join("; ")}. Zolang hij loopt, worden nieuwe aanroepen ` +
        `met 409 geweigerd. Kijk in het log wat de taak doet (database vergrendeld, mailserver die niet antwoordt); herstart de service als hij niet verder komt.`,
      context: { hangend: body.hangend, taken: regels },
    });
  }
  return out;
}

/**
 * Every scheduled job's status by the one rule in jobStatuses (src/schedule-due.ts, which
 * /metrics applies too): `loopt` and `hangt` (alive in this process or under another
 * process's lease; alarm `job-hung` past its maximum run time), `onderbroken` (nothing
 * keeps its unfinished run alive; alarm `job-interrupted`), `gemist` and `faalt` (alarm
 * `job-missed`). `context` is what the job wrapper passes: the runs of this process and
 * the ends it could not write yet. Called directly (a test, a tool beside the service)
 * nothing of this process runs.
 */
export async function runTakenControle(
  deps: Deps,
  now: Date,
  context: JobContext = { running: [], unrecorded: [] },
): Promise<JobResult<TakenControleBody>> {
  const margeMinuten = deps.config.takenMargeMinuten;
  const graceMs = margeMinuten * 60_000;
  const { store } = deps;
  const seal = rowSealOf(deps.config);
  const statuses = store.kind === "pg" ? await jobStatusesPg(store.db, seal, now, graceMs, context) : jobStatuses(store.db, seal, now, graceMs, context);
  const taken: TaakRegel[] = [];
  for (const s of statuses) {
    if (s.cron === null || s.status === null || s.due === null) continue;
    taken.push({
      job: s.job,
      cron: s.cron,
      maxLooptijdMinuten: s.maxRuntimeMinutes,
      laatsteVerwacht: s.due.expected ? s.due.expected.toISOString() : null,
      ...(s.status === "gemist" ? { gemistSinds: s.due.due!.toISOString() } : {}),
      laatsteRun: s.run ? { gestart: s.run.gestart, beeindigd: s.run.beeindigd, uitkomst: s.run.uitkomst } : null,
      ...(s.futureStart ? { toekomstigeStart: s.futureStart } : {}),
      ...(s.levend ? { levend: s.levend } : {}),
      ...(s.houder ? { houder: { pid: s.houder.pid, verloopt: s.houder.verloopt } } : {}),
      status: s.status,
    });
  }

  const byStatus = (s: TaakStatus) => taken.filter((r) => r.status === s);
  const jobs = (s: TaakStatus) => byStatus(s).map((r) => r.job);
  const gemist = jobs("gemist");
  const onderbroken = jobs("onderbroken");
  const hangend = jobs("hangt");
  const falend = taken.filter((r) => r.status === "faalt" || r.status === "onderbroken").map((r) => r.job);
  const vervalst = statuses.filter((s) => s.vervalst > 0).map((s) => s.job);
  const ok = gemist.length === 0 && falend.length === 0 && hangend.length === 0 && vervalst.length === 0;
  const body: TakenControleBody = { ok, margeMinuten, taken, gemist, falend, onderbroken, hangend, vervalst };
  // No forged rows left: settled, so that the mail channel mails new ones at once, of the same jobs too.
  if (vervalst.length === 0) await deps.alarms.settled?.(VERVALST);
  if (ok) return { status: 200, body };
  for (const alarm of alarmsFor(body, byStatus)) await deps.alarms.raise(alarm);
  return { status: 409, body };
}

export const takenControleJob = defineJob({
  name: "taken-controle",
  summary: "Controleert of elke geplande taak op tijd liep en niet faalde",
  description:
    "Voor elke taak in het schema: het laatste verwachte starttijdstip (cron, UTC) tegen de run-geschiedenis, met TAKEN_MARGE_MINUTEN marge, " +
    "en de maximale looptijd uit het schema. " +
    "`loopt`: de run leeft, want deze service voert hem uit of een ander proces houdt zijn lease geldig (ook een lange run, ook taken-controle " +
    "zelf); geen alarm, ook niet als aanroepen in de tussentijd met 409 geweigerd zijn. " +
    "`hangt`: de run leeft, maar langer dan de maximale looptijd (alarm `job-hung`). " +
    "`onderbroken`: de laatste run is nooit beëindigd en geen proces voert hem nog uit: het proces stierf (alarm `job-interrupted`). " +
    "`gemist`: geen run gestart sinds een starttijdstip waarvan de marge verstreken is; een run die meer dan " + MARGIN_MIN + " minuten na nu geregistreerd staat " +
    "(de klok van de server liep voor) telt niet, en staat in `toekomstigeStart` en in het alarm. `faalt`: de laatste run eindigde in een fout " +
    "(beide alarm `job-missed`). `wacht`: verwacht, nog binnen de marge. " +
    "`nog-niet-verwacht`: het eerste verwachte tijdstip na installatie ligt nog in de toekomst. 409 met de lijst en per soort één alarm " +
    "wanneer een taak gemist is, faalt, onderbroken is of hangt. Alleen runs met een geldig zegel (ondertekend met de ankersleutel) tellen; " +
    "nieuwere rijen zonder geldig zegel staan in `vervalst` (409, alarm `db-integrity`).",
  run: (deps, now, _input, context) => runTakenControle(deps, now, context),
  responses: {
    200: { description: "Alle geplande taken liepen op tijd.", schema: TakenControleBody },
    409: { description: "Een taak is gemist, faalt, is onderbroken of hangt, of job_runs bevat vervalste runs; alarm verstuurd.", schema: TakenControleBody },
  },
});
