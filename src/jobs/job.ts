// What a job file exports: the work as a plain function and what the route needs to
// mount and document it. src/http/job-route.ts mounts every job the same way.
import type { Deps } from "../deps.ts";
import type { Outcome } from "../job-runs.ts";
import type { JobName } from "../schedule.ts";

export interface JobResult<B extends object = object> {
  /** 200, 409 for a check that found something not in order, 502 for a failed send. */
  status: 200 | 409 | 502;
  body: B;
}

/** A run this process is executing, with its job_runs row. */
export interface RunningRun {
  job: JobName;
  runId: number;
}

/**
 * What the job wrapper (src/http/job-route.ts) knows about this process when it starts
 * a job, passed in like Deps: taken-controle must not call a run interrupted or missed
 * while this very process is still running it.
 */
export interface JobContext {
  /** Runs this process was executing when the job started, the calling job's own included. */
  running: readonly RunningRun[];
  /**
   * Runs this process completed whose end it could not write to job_runs (their row
   * still says 'bezig'): how they really ended. See recordEnd in src/http/job-route.ts.
   */
  unrecorded: readonly (RunningRun & { beeindigd: string; uitkomst: Exclude<Outcome, "bezig"> })[];
}

export interface JobDefinition<I = undefined> {
  name: JobName;
  /** One line for Swagger UI. */
  summary: string;
  description: string;
  /** Reads and validates the request body (after auth); jobs without input never read it. */
  input?: (request: Request) => Promise<I>;
  run(deps: Deps, now: Date, input: I, context: JobContext): Promise<JobResult<object>>;
  /** OpenAPI: JSON schemas of the bodies per status, and of the request body. */
  openapi?: {
    responses?: Record<number, { description: string; schema?: unknown }>;
    requestBody?: unknown;
  };
}

/** Keeps the input type of a job definition while storing it in a list. */
export function defineJob<I>(def: JobDefinition<I>): JobDefinition<any> {
  return def as JobDefinition<any>;
}
