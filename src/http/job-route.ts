// The job wrapper: every job goes through here. It reads the job's input (auth was
// already decided in onRequest; src/http/body.ts), refuses a second concurrent call of
// the same job with 409 — in this process (RunningJobs) and in any other process on
// the same database (the lease, src/job-lease.ts), unless the job is not exclusive
// (JobDefinition.exclusive: backup-status) — and records every run in the
// job-run history: start, end, outcome, summary, error. mountJob documents each route: the job's own answers and the
// wrapper's (routeResponses).
// A job that completed is answered with its own result even when recording its end
// fails (recordEnd). None of the wrapper's writes waits synchronously for another
// process's write lock (the lease in src/job-lease.ts, the run's end through
// writeRunEnd): while it is taken they wait with awaited pauses, at most BUSY_TIMEOUT_MS
// before the answer, and what is still not written then goes on after the answer
// (writeLater: one rule for a refused call's row, a run's end, a lease's release).
import { t, type Elysia, type TSchema } from "elysia";
import { BUSY_TIMEOUT_MS, writeTransaction } from "../db.ts";
import type { Deps } from "../deps.ts";
import { doneMessage, heldElsewhereMessage, leaseTiming, releaseLease, startLeasedRun, startRenewing, startUnleasedRun, type LeasedStart } from "../job-lease.ts";
import { DeadlineError, finishRun, startRun, writeKeptEnds, writeRunEnd, type RunEnd, type RunRef } from "../job-runs.ts";
import { rowSealOf } from "../row-seal.ts";
import { JobInterrupted, JobStoppedForShutdown, type KeptEnd, type PendingWrite, type RunningJobs } from "../running-jobs.ts";
import { isExclusive, type JobContext, type JobDefinition, type JobResult } from "../jobs/job.ts";
import { jobPath, scheduleOf, type JobName } from "../schedule.ts";
import { lastFireOf } from "../schedule-due.ts";
import { errorText, log } from "../logger.ts";
import { bodyReader } from "./body.ts";
import { connectionLost, ErrorBody, json, lockWaitGivenUp, unexpectedAlarmType, unexpectedStatus } from "./errors.ts";

function outcomeOf(status: number): "ok" | "afwijking" | "fout" {
  if (status >= 200 && status < 300) return "ok";
  if (status === 409) return "afwijking";
  return "fout";
}

/** What a job learns about this process when it starts (src/jobs/job.ts JobContext); /metrics reads the same. */
export function jobContext(running: RunningJobs): JobContext {
  return {
    running: running.runs(),
    unrecorded: running.keptEndsList().map((k) => ({ job: k.job, runId: k.runId, beeindigd: k.end.toISOString(), uitkomst: k.result.uitkomst })),
    stopping: () => running.isClosed,
  };
}

/** How long a write that could not be done before its call's answer goes on after it (writeLater). */
export const RECORD_LATER_DEADLINE_MS = 60_000;

/**
 * The one rule for a write of the job wrapper that met another process's write lock for
 * the whole wait before its call's answer (BUSY_TIMEOUT_MS; the host application, a
 * backup): the answer goes out, and the write goes on after it, waiting for the lock
 * without blocking (retryWhenBusy / writeTransaction, awaited back-off) for at most
 * RECORD_LATER_DEADLINE_MS. RunningJobs tracks it, so shutdown waits for it or logs it
 * as lost. Failing that, `failure` is logged as an error, never swallowed, and
 * `onFailure` (an alarm, given the error itself) follows. Used for a refused call's fout/503 row
 * (refusedOnBusyLock), a run's end (writeEnd) and a lease's release (releaseAfterEnd).
 * Resolves with whether it was written; never rejects.
 */
function writeLater(
  running: RunningJobs,
  pending: PendingWrite,
  failure: { message: string; context: Record<string, unknown> },
  write: (deadlineMs: number) => Promise<unknown>,
  onFailure?: (error: unknown) => Promise<void>,
): Promise<boolean> {
  // A lost connection (a server restart) is tried again on a new one, with growing pauses, within the deadline.
  const deadline = performance.now() + RECORD_LATER_DEADLINE_MS;
  const attempt = async (): Promise<unknown> => {
    for (let pause = 50; ; pause = Math.min(pause * 2, 2000)) {
      try {
        return await write(Math.max(0, deadline - performance.now()));
      } catch (e) {
        if (!connectionLost(e) || performance.now() + pause >= deadline) throw e;
        await Bun.sleep(pause);
      }
    }
  };
  const done = attempt().then(
    () => true,
    async (e) => {
      log("error", failure.message, { ...failure.context, error: errorText(e) });
      try {
        await onFailure?.(e);
      } catch (alarmError) {
        log("error", "alarm failed", { error: errorText(alarmError) });
      }
      return false;
    },
  );
  running.trackWrite(done, pending);
  return done;
}

/** A write going on after the answer (writeLater); wrapped, since a promise returned from an async function would be awaited with it. */
interface Later {
  /** Whether it was written in the end. */
  written: Promise<boolean>;
}

/**
 * Writes a run's end (job_runs) while the caller waits, for at most BUSY_TIMEOUT_MS of
 * another process's write lock, without blocking the event loop. When the lock stays
 * taken all that time, the end is kept in this process (taken-controle and /metrics
 * judge the run by it), a warning is logged, and it is written after the answer
 * (writeLater): `written` says when (null: written now). Any other error is
 * thrown, nothing kept.
 */
async function writeEnd(
  deps: Deps,
  running: RunningJobs,
  kept: KeptEnd,
  failure: string,
  onFailure?: (error: unknown) => Promise<void>,
): Promise<Later | null> {
  const { job, runId, end, result } = kept;
  let busy = true;
  let lost = false;
  try {
    await writeRunEnd(deps.store, rowSealOf(deps.config), kept, end, result);
    return null;
  } catch (e) {
    // Another process's write lock (SQLite), or on PostgreSQL no connection or no lock on
    // the run's row in time, or the connection lost (a server restart): not written yet,
    // so kept and written later; any other error is a failure of the end.
    const wait = lockWaitGivenUp(e);
    lost = connectionLost(e);
    if (!wait && !lost && !(e instanceof DeadlineError)) throw e;
    busy = wait?.code === "SQLITE_BUSY";
  }
  running.keepEnd(kept);
  const context = { job, runId, uitkomst: result.uitkomst, httpStatus: result.httpStatus };
  log(
    "warn",
    busy
      ? "the database write lock stayed taken by another process; the run's end is recorded once it is free, after the answer"
      : lost
        ? "the database connection was lost (a restart of the server?); the run's end is recorded after the answer"
        : "the run's end did not get through to the database in time; it is recorded after the answer",
    context,
  );
  const written = writeLater(
    running,
    { what: "end", job, runId },
    { message: failure, context: { ...context, recorded: "kept in memory, written at the next job call" } },
    async (ms) => {
      await writeRunEnd(deps.store, rowSealOf(deps.config), kept, end, result, ms);
      running.forgetEnd(runId);
      log("info", "the end of a run was recorded once the database write lock was free", context);
    },
    onFailure,
  );
  return { written };
}

/**
 * The alarm for a completed job whose end is not in job_runs: it must not be run again.
 * Its type is the one an unexpected `error` raises (unexpectedAlarmType): storage-unwritable,
 * mailed, when the storage takes no writes (a full, read-only or failing disk), else
 * internal-error.
 */
async function alarmEndNotRecorded(deps: Deps, job: JobName, runId: number, result: RunEnd, error: unknown, vastgelegd: string): Promise<void> {
  await deps.alarms.raise({
    type: unexpectedAlarmType(error),
    message:
      `De taak ${job} is voltooid (HTTP ${result.httpStatus}), maar het einde van run ${runId} kon niet in job_runs worden vastgelegd. ` +
      `Voer de taak niet opnieuw uit; controleer de database (schrijfbaar, schijfruimte, vergrendeling).`,
    context: { job, runId, httpStatus: result.httpStatus, uitkomst: result.uitkomst, fout: errorText(error), vastgelegd },
  });
}

const END_NOT_RECORDED = "a completed job's end could not be recorded in job_runs; its response was sent as it was";

/**
 * Writes the end of a run whose job COMPLETED. Its work is done (a report mailed, rows
 * deleted), so whatever happens here the caller gets the job's own response: a 5xx
 * would make cron or an operator run it again, and mail the report twice. A failure is
 * never swallowed: logged as error and raised as an alarm that says the job completed
 * and must not be run again (storage-unwritable, mailed, for a full, read-only or failing
 * disk; else internal-error: alarmEndNotRecorded).
 *
 * The row must not stay 'bezig' if that can be helped: taken-controle calls such a row
 * onderbroken once no lease keeps it alive and alarms, which asks for a rerun. So:
 *  0. another process holding the write lock for the whole wait is no failure of the
 *     end itself: the end is kept and written after the answer (writeEnd, writeLater);
 *     only when that fails too is it logged as an error and alarmed, and the kept end
 *     waits for the next job call as in 2. The Later returned says when it is written
 *     (null: written, or nothing more to wait for);
 *  1. when the UPDATE fails otherwise, it is tried once more without the summary (the
 *     one part of variable size), with `fout` saying that the summary is missing; the
 *     outcome and status are the job's own;
 *  2. if that fails too, that end is kept in this process (RunningJobs.keepEnd) and
 *     written at the start of the next job call, once the database takes writes again.
 *     Meanwhile taken-controle gets the kept ends (JobContext.unrecorded) and judges the
 *     run by them instead of by its 'bezig' row. Only a restart before then loses the kept
 *     end; the row then reads as onderbroken, and the alarm raised here already said the
 *     job completed, with its status.
 */
async function recordEnd(deps: Deps, running: RunningJobs, run: RunRef & { job: JobName }, end: Date, result: RunEnd): Promise<Later | null> {
  const { job, runId } = run;
  let firstError: unknown;
  try {
    return await writeEnd(deps, running, { ...run, end, result }, END_NOT_RECORDED, (error) =>
      alarmEndNotRecorded(deps, job, runId, result, error, "nog niet (in het geheugen bewaard)"),
    );
  } catch (e) {
    firstError = e;
  }
  const minimal: RunEnd = {
    uitkomst: result.uitkomst,
    httpStatus: result.httpStatus,
    fout: `De taak is voltooid (HTTP ${result.httpStatus}); de samenvatting kon niet worden vastgelegd: ${errorText(firstError)}`,
  };
  let kept = false;
  try {
    await writeRunEnd(deps.store, rowSealOf(deps.config), run, end, minimal);
  } catch {
    running.keepEnd({ ...run, end, result: minimal });
    kept = true;
  }
  log("error", END_NOT_RECORDED, {
    job,
    runId,
    httpStatus: result.httpStatus,
    error: errorText(firstError),
    recorded: kept ? "kept in memory, written at the next job call" : "without summary",
  });
  try {
    await alarmEndNotRecorded(deps, job, runId, result, firstError, kept ? "nog niet (in het geheugen bewaard)" : "zonder samenvatting");
  } catch (e) {
    log("error", "alarm failed", { error: errorText(e) });
  }
  return null;
}

/**
 * The run's lease was not this run's any more when it ended (another process took it over
 * after it expired without a renewal: this one hung or was frozen; or someone deleted
 * it): the job may have run twice at once. Raised without
 * waiting for the channels (the answer goes out meanwhile).
 */
function alarmOverlap(deps: Deps, job: JobName, runId: number, verloopt: Date): void {
  log("error", "a run's lease was no longer its own when it ended: another process may have run the job at the same time", { job, runId, verloopt: verloopt.toISOString() });
  void deps.alarms
    .raise({
      type: "job-overlap",
      message:
        `De lease van ${job} (run ${runId}) was aan het eind van de run niet meer van deze run: een ander proces heeft de taak overgenomen nadat ze verliep (${verloopt.toISOString()}), ` +
        `dus ${job} kan twee keer tegelijk gelopen hebben. Oorzaak: dit proces stond stil (bevroren, overbelast) langer dan de lease, of iemand heeft de lease verwijderd. ` +
        `Kijk of beide runs hun werk deden (job_runs) en draai ${job} zo nodig opnieuw.`,
      context: { job, runId, verloopt: verloopt.toISOString() },
    })
    .catch((e) => log("error", "alarm failed", { error: errorText(e) }));
}

/**
 * Deletes the run's lease (this holder's, this run's) once its end is written: while the
 * end waits for the write lock after the answer (`endLater`), the lease waits with it,
 * so that another process's taken-controle sees the run alive instead of a 'bezig' row
 * without a holder. Waits for the lock as the end does: at most BUSY_TIMEOUT_MS before
 * the answer, then after it (writeLater). A failure is logged as an error; the lease
 * then expires by itself and until then another process's call of the job is refused.
 */
async function releaseAfterEnd(deps: Deps, running: RunningJobs, job: JobName, runId: number, verloopt: Date, endLater: Later | null, notOurs: () => void): Promise<void> {
  const release = (ms: number) => releaseLease(deps.store, job, running.holder, runId, ms);
  const failure = { message: "could not release a job's lease; it expires by itself", context: { job, runId, verloopt: verloopt.toISOString() } };
  const pending: PendingWrite = { what: "lease", job, runId };
  if (endLater) {
    void writeLater(running, pending, failure, async (ms) => {
      const deadline = performance.now() + ms;
      await endLater.written;
      return release(Math.max(0, deadline - performance.now()));
    });
    return;
  }
  try {
    if (!(await release(BUSY_TIMEOUT_MS))) notOurs();
  } catch (e) {
    if (lockWaitGivenUp(e) || connectionLost(e)) void writeLater(running, pending, failure, release);
    else log("error", failure.message, { ...failure.context, error: errorText(e) });
  }
}

/**
 * The answer to a call whose lease could not be taken because another process held the
 * write lock for the whole wait (BUSY_TIMEOUT_MS; the host application, a backup): 503
 * with Retry-After, as every job answers an unavailable database, logged as a warning.
 * No alarm per call (the lock is expected to be taken now and then, as for the write
 * API): the run is recorded in job_runs as `fout` with 503 and this message, so
 * taken-controle reports the job `faalt` unless a later run succeeded. That row cannot
 * be written while the lock is taken: it is written after the answer (writeLater).
 */
function refusedOnBusyLock(deps: Deps, running: RunningJobs, job: JobName, started: Date, e: unknown, why: string): Response {
  // Only SQLite has a database-wide write lock (SQLITE_BUSY).
  if (deps.store.kind !== "sqlite") throw e;
  const message = `De database is bezet (${why}); de taak ${job} is niet gestart. Probeer het na Retry-After opnieuw.`;
  const refused = deps.clock();
  log("warn", "the database write lock stayed taken by another process; the job was not started and answered 503", { job, code: (e as { code?: unknown }).code });
  const { sqlite, db } = deps.store;
  void writeLater(
    running,
    { what: "run", job, runId: null },
    { message: "could not record a job call refused on a busy database in job_runs", context: { job, gestart: started.toISOString() } },
    (ms) => {
      const seal = rowSealOf(deps.config);
      const run = (runId: number): RunRef => ({ runId, job, gestart: started.toISOString() });
      return writeTransaction(sqlite, () => finishRun(db, seal, run(startRun(db, job, started, seal)), refused, { uitkomst: "fout", httpStatus: 503, fout: message }), ms);
    },
  );
  return json(503, { error: message }, { "retry-after": "60" });
}

/**
 * The header the crontab's calls carry (ops/nachtwacht-call.sh with NACHTWACHT_GEPLAND=1):
 * the call is for the job's latest scheduled time, which must be done once however many
 * instances' crontabs call it. Calls without it (by hand, Swagger UI) always run.
 */
export const SCHEDULED_HEADER = "x-nachtwacht-gepland";
/**
 * A scheduled call that was not needed (the job runs already, here or in another
 * instance, or a run did its scheduled time) is answered 204 with the reason in this
 * header: with two instances one of the two crontab calls always is, and it is no
 * failure (the call script logs the reason and exits 0). By hand the same is a 409.
 */
export const SKIPPED_HEADER = "x-nachtwacht-overgeslagen";

/**
 * 409 {error} for a call by hand, 204 with the reason in SKIPPED_HEADER for a scheduled
 * one. A header takes printable ASCII only (a host name of another instance could hold
 * more): anything else becomes "?".
 */
function notRun(scheduled: boolean, message: string): Response {
  return scheduled ? new Response(null, { status: 204, headers: { [SKIPPED_HEADER]: message.replace(/[^\x20-\x7e]/g, "?") } }) : json(409, { error: message });
}

async function runJobRequest(deps: Deps, running: RunningJobs, def: JobDefinition<any>, input: unknown, scheduled = false): Promise<Response> {
  if (running.isClosed) {
    return json(503, { error: "De service wordt gestopt; roep de taak over een minuut opnieuw aan." }, { "retry-after": "60" });
  }
  // A job that is not exclusive (backup-status) is neither refused here nor leased below.
  const exclusive = isExclusive(def);
  if (!running.tryStart(def.name, exclusive)) {
    return notRun(scheduled, `De taak ${def.name} loopt al; een tweede aanroep wordt niet tegelijk uitgevoerd.`);
  }
  // This call's job_runs row once written: finish() forgets it, not another call's of the same job.
  let ownRun: number | null = null;
  try {
    if (running.keptEndsList().length > 0) {
      // One try each, no waiting: this job's lease waits for the lock anyway.
      for (const k of await writeKeptEnds(deps.store, rowSealOf(deps.config), running, 0)) {
        log("info", "the end of an earlier run was recorded late", { job: k.job, runId: k.runId, uitkomst: k.result.uitkomst });
      }
    }
    const started = deps.clock();
    const firedAt = scheduled ? lastFireOf(def.name, started) : null;
    // The guard across processes: the lease and the run's row in one IMMEDIATE transaction.
    // A job that is not exclusive gets its row only (no lease to expire: `verloopt` is not read, no renewer).
    const timing = leaseTiming(def.name);
    let lease: LeasedStart;
    try {
      lease = exclusive
        ? await startLeasedRun(deps.store, rowSealOf(deps.config), def.name, running.holder, started, timing.ttlMs, BUSY_TIMEOUT_MS, firedAt)
        : { ok: true, runId: await startUnleasedRun(deps.store, rowSealOf(deps.config), def.name, started, BUSY_TIMEOUT_MS), verloopt: started, overgenomen: null };
    } catch (e) {
      // Another database error (read-only, disk full) is onError's 503 with an alarm.
      // On SQLite the write lock is taken now and then by the host application or a
      // backup: a warning. On PostgreSQL nachtwacht's own takes hold the lease's lock for
      // milliseconds: held for the whole lock_timeout (55P03) it is a hung instance or an
      // operator's table lock, and every job stays refused meanwhile: onError's, an alarm.
      const wait = lockWaitGivenUp(e);
      if (wait?.code !== "SQLITE_BUSY") throw e;
      return refusedOnBusyLock(deps, running, def.name, started, e, wait.why);
    }
    if (!lease.ok) return notRun(scheduled, lease.gedaan ? doneMessage(def.name, firedAt!, lease.gedaan) : heldElsewhereMessage(def.name, lease.houder));
    if (lease.overgenomen) {
      const o = lease.overgenomen;
      const context = { job: def.name, reden: o.reden, pid: o.pid, host: o.host, runId: o.runId, verkregen: o.verkregen, verloopt: o.verloopt };
      if (o.reden === "vervalst") {
        // A lease nachtwacht did not seal: written or changed by someone who can write the database (src/row-seal.ts).
        log("error", "took over a job lease without a valid seal: someone who can write the database wrote or changed it", context);
        await deps.alarms.raise({
          type: "db-integrity",
          message:
            `job_leases bevatte voor ${def.name} een lease zonder geldig zegel (pid ${o.pid} op ${o.host}, geldig tot ${o.verloopt}): iemand die de database kan wijzigen heeft die geschreven of veranderd, ` +
            `niet nachtwacht. Ze houdt niets tegen; de taak is uitgevoerd. Zoek uit wie schrijftoegang tot de database heeft, en controleer de audit-keten (audit-verificatie met de hand).`,
          context,
        });
      } else {
        log("warn", "took over the lease of another process: it expired (its holder died or hung), its holder's pid is gone, or it was renewed with the clock ahead (reden toekomst)", context);
      }
    }
    const runId = lease.runId;
    ownRun = runId;
    // The run's start as written (runStartValues): its end is sealed over it.
    const run = { job: def.name, runId, gestart: started.toISOString() };
    running.setRun(def.name, runId, run.gestart);
    const renewer = exclusive ? startRenewing(deps.store, rowSealOf(deps.config), deps.clock, def.name, running.holder, runId, timing, lease.verloopt) : null;
    // An interrupted job is left running until the process exits: its lease stays until it
    // expires. One that stopped itself for the shutdown (JobStoppedForShutdown) has ended.
    let keepLease = false;
    // The run's end when it is written after the answer (writeEnd); its lease waits for it.
    let endLater: Later | null = null;
    try {
      let result: JobResult<object>;
      try {
        result = await running.race(def.run(deps, started, input, jobContext(running)));
      } catch (e) {
        if (e instanceof JobInterrupted) {
          keepLease = !(e instanceof JobStoppedForShutdown);
          // Shutdown stopped waiting: what the job committed stays, the rest is for a rerun.
          const failure = "could not record an interrupted run";
          try {
            endLater = await writeEnd(deps, running, { ...run, end: deps.clock(), result: { uitkomst: "fout", httpStatus: 503, fout: e.message } }, failure);
          } catch (recordError) {
            log("error", failure, { job: def.name, runId, error: errorText(recordError) });
          }
          return json(503, { error: e.message }, { "retry-after": "60" });
        }
        const failure = "could not record the end of a failed run";
        try {
          // The status the caller gets from onError (src/app.ts), recorded as such.
          const end = { uitkomst: "fout" as const, httpStatus: unexpectedStatus(e), fout: errorText(e) };
          endLater = await writeEnd(deps, running, { ...run, end: deps.clock(), result: end }, failure);
        } catch (recordError) {
          log("error", failure, { job: def.name, runId, error: errorText(recordError) });
        }
        throw e;
      }
      // Only the job's own outcome decides the response from here on (see recordEnd).
      endLater = await recordEnd(deps, running, run, deps.clock(), {
        uitkomst: outcomeOf(result.status),
        httpStatus: result.status,
        samenvatting: result.body,
      });
      return json(result.status, result.body);
    } finally {
      // No renewal writes after this; a lease taken over meanwhile is not ours to release.
      if (renewer) {
        const renewal = await renewer.stop();
        const overlap = () => alarmOverlap(deps, def.name, runId, renewal.verloopt);
        if (renewal.lost) overlap();
        else if (!keepLease) await releaseAfterEnd(deps, running, def.name, runId, renewal.verloopt, endLater, overlap);
      }
    }
  } finally {
    running.finish(def.name, ownRun);
  }
}

/** One documented answer of a job's route; without a schema it has no body. */
export interface RouteResponse {
  description: string;
  schema?: TSchema;
}

/**
 * Every answer of a job's route, for the OpenAPI document: the job's own (its
 * `responses`) and the wrapper's beside them. A 409 is also the answer to a second call
 * while the job runs, so a job's own 409 body is documented as either (not for a job that
 * is not exclusive, which never refuses a call for that).
 */
export function routeResponses(def: JobDefinition<any>): Record<number, RouteResponse> {
  const own = def.responses;
  const out: Record<number, RouteResponse> = {};
  if (own) out[200] = own[200];
  if (def.input) {
    out[400] = { description: "Ongeldige body; de melding noemt het veld.", schema: ErrorBody };
    const max = def.input.maxBytes;
    out[413] = { description: `Body groter dan ${max % 1024 === 0 ? `${max / 1024} KiB` : `${max} bytes`}.`, schema: ErrorBody };
  }
  if (scheduleOf(def.name).cron !== null) {
    out[204] = {
      description: `Alleen voor een geplande aanroep (header \`X-Nachtwacht-Gepland: 1\`, zoals de crontab die doet): niet uitgevoerd, omdat de taak al loopt (hier of in een andere instantie) of voor de laatste geplande tijd al is uitgevoerd; de reden staat in de header \`X-Nachtwacht-Overgeslagen\`. Zonder de header is dat een 409.`,
    };
  }
  out[401] = { description: "Ontbrekend of ongeldig token.", schema: ErrorBody };
  out[403] = { description: "Een geldig token voor iets anders (APP_SECRET): de taken vragen CRON_SECRET.", schema: ErrorBody };
  // A job that is not exclusive runs every call, also beside another: no 409 "loopt al".
  if (!isExclusive(def)) {
    if (own?.[409]) out[409] = own[409];
  } else {
    out[409] = own?.[409]
      ? { description: `${own[409].description} Loopt de taak al (hier of in een ander proces): \`{error}\`.`, schema: t.Union([own[409].schema, ErrorBody]) }
      : { description: "De taak loopt al (in deze service of in een ander proces op dezelfde database).", schema: ErrorBody };
  }
  if (own?.[502]) out[502] = own[502];
  out[500] = { description: "Onverwachte fout; gemeld als alarm internal-error, zonder details in het antwoord.", schema: ErrorBody };
  out[503] = { description: "De service wordt gestopt of de database is tijdelijk niet beschikbaar; probeer het na Retry-After opnieuw.", schema: ErrorBody };
  return out;
}

export function mountJob(app: Elysia<any, any, any, any, any, any, any>, deps: Deps, running: RunningJobs, def: JobDefinition<any>): void {
  const responses: Record<string, unknown> = {};
  for (const [status, r] of Object.entries(routeResponses(def))) {
    responses[status] = r.schema ? { description: r.description, content: { "application/json": { schema: r.schema } } } : { description: r.description };
  }
  const readInput = def.input ? bodyReader(def.name, def.input) : undefined;
  app.post(
    jobPath(def.name),
    async ({ request, server, set }) => {
      // The body first, under the server's idle timeout: a client that sends it slowly is cut off.
      const input = readInput ? await readInput(request) : undefined;
      // Then the idle timeout (Elysia's default 30 s) would cut the connection of a job
      // that runs longer, and cron would see an empty reply while the job goes on. A job's
      // connection waits as long as the job runs: its maximum run time is watched by
      // taken-controle, and curl's --max-time in the crontab bounds the caller.
      server?.timeout(request, 0);
      // The timeout stays off on the socket after the answer: a keep-alive connection
      // would stay open, idle, for good. Closed with the answer instead, also an error's
      // (Elysia adds `set.headers` to the error handler's answer too); cron's curl makes
      // one call per connection anyway.
      set.headers.connection = "close";
      // Only a job with a schedule has scheduled calls (and the documented 204).
      const scheduled = request.headers.get(SCHEDULED_HEADER) === "1" && scheduleOf(def.name).cron !== null;
      return runJobRequest(deps, running, def, input, scheduled);
    },
    {
      // Elysia never reads the body: a job either has no input or its body is read by
      // bodyReader, so nothing is parsed before (or instead of) that bounded reading.
      parse: "none",
      detail: {
        tags: ["cron"],
        summary: def.summary,
        description: def.description,
        security: [{ bearerAuth: [] }],
        responses,
        ...(def.input ? { requestBody: { required: true, content: { "application/json": { schema: def.input.schema } } } } : {}),
      } as any,
    },
  );
}
