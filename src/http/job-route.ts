// The job wrapper: every job goes through here. It reads the job's input (auth was
// already decided in onRequest), refuses a second concurrent call of the same job with
// 409, and records every run in the job-run history: start, end, outcome, summary, error.
import type { Elysia } from "elysia";
import type { Deps } from "../deps.ts";
import { finishRun, JobInterrupted, startRun, type RunningJobs } from "../job-runs.ts";
import type { JobDefinition } from "../jobs/job.ts";
import { jobPath } from "../schedule.ts";
import { log } from "../logger.ts";
import { json } from "./errors.ts";

function outcomeOf(status: number): "ok" | "afwijking" | "fout" {
  if (status >= 200 && status < 300) return "ok";
  if (status === 409) return "afwijking";
  return "fout";
}

export function errorText(e: unknown): string {
  const msg = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
  return msg.length > 2000 ? msg.slice(0, 1999) + "…" : msg;
}

export async function runJobRequest(deps: Deps, running: RunningJobs, def: JobDefinition<any>, request: Request): Promise<Response> {
  const input = def.input ? await def.input(request) : undefined;
  if (running.isClosed) {
    return json(503, { error: "De service wordt gestopt; roep de taak over een minuut opnieuw aan." }, { "retry-after": "60" });
  }
  if (!running.tryStart(def.name)) {
    return json(409, { error: `De taak ${def.name} loopt al; een tweede aanroep wordt niet tegelijk uitgevoerd.` });
  }
  try {
    const started = deps.clock();
    const runId = startRun(deps.store.sqlite, def.name, started);
    running.setRun(def.name, runId);
    try {
      const result = await running.race(def.run(deps, started, input, { running: running.runs() }));
      finishRun(deps.store.sqlite, runId, deps.clock(), {
        uitkomst: outcomeOf(result.status),
        httpStatus: result.status,
        samenvatting: result.body,
      });
      return json(result.status, result.body);
    } catch (e) {
      if (e instanceof JobInterrupted) {
        // Shutdown stopped waiting: what the job committed stays, the rest is for a rerun.
        try {
          finishRun(deps.store.sqlite, runId, deps.clock(), { uitkomst: "fout", httpStatus: 503, fout: e.message });
        } catch (recordError) {
          log("error", "could not record an interrupted run", { job: def.name, runId, error: errorText(recordError) });
        }
        return json(503, { error: e.message }, { "retry-after": "60" });
      }
      try {
        finishRun(deps.store.sqlite, runId, deps.clock(), { uitkomst: "fout", httpStatus: 500, fout: errorText(e) });
      } catch (recordError) {
        log("error", "could not record the end of a failed run", { job: def.name, runId, error: errorText(recordError) });
      }
      throw e;
    }
  } finally {
    running.finish(def.name);
  }
}

export function mountJob(app: Elysia<any, any, any, any, any, any, any>, deps: Deps, running: RunningJobs, def: JobDefinition<any>): void {
  const responses: Record<string, unknown> = {
    401: { description: "Ontbrekend of ongeldig token." },
  };
  for (const [status, r] of Object.entries(def.openapi?.responses ?? {})) {
    responses[status] = r.schema
      ? { description: r.description, content: { "application/json": { schema: r.schema } } }
      : { description: r.description };
  }
  app.post(jobPath(def.name), ({ request }) => runJobRequest(deps, running, def, request), {
    // Elysia never reads the body: a job either has no input or reads it itself, so
    // nothing is parsed before (or instead of) the job's own bounded reading.
    parse: "none",
    detail: {
      tags: ["cron"],
      summary: def.summary,
      description: def.description,
      security: [{ bearerAuth: [] }],
      responses,
      ...(def.openapi?.requestBody
        ? {
            requestBody: {
              required: true,
              content: { "application/json": { schema: def.openapi.requestBody } },
            },
          }
        : {}),
    } as any,
  });
}
