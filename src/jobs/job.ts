// What a job file exports: the work as a plain function and what the route needs to
// mount and document it. src/http/job-route.ts mounts every job the same way.
import type { TSchema } from "elysia";
import type { Deps } from "../deps.ts";
import type { Outcome } from "../job-runs.ts";
import type { JobName } from "../schedule.ts";

export interface JobResult<B extends object = object> {
  /** 200, 409 for a check that found something not in order (or a send that perhaps arrived), 502 for a send that surely failed. */
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
  /**
   * Whether this process has begun to shut down (RunningJobs.isClosed), asked while the
   * job runs: a job of many separate steps (weekrapport's messages) starts no new one
   * after that. Absent: never (a job called directly, as tests do).
   */
  stopping?: () => boolean;
}

/** One of a job's own answers: what it means, and the TypeBox schema of its body. */
export interface JobResponse {
  description: string;
  schema: TSchema;
}

/** A job's request body: the one declaration it is validated against and documented by. */
export interface JobInput<S extends TSchema = TSchema> {
  /** TypeBox schema of the body; the job gets Static<typeof schema>. */
  schema: S;
  /** At most this many bytes are read; a larger body is refused (413). */
  maxBytes: number;
}

export interface JobDefinition<I = undefined> {
  name: JobName;
  /** One line for Swagger UI. */
  summary: string;
  description: string;
  /**
   * The request body of a job that takes one. The job wrapper reads it after auth (at
   * most maxBytes), parses it as JSON whatever the content type says and checks it
   * against the schema before the job runs. Jobs without input never read the body.
   */
  input?: JobInput<TSchema & { static: I }>;
  run(deps: Deps, now: Date, input: I, context: JobContext): Promise<JobResult<object>>;
  /**
   * false: calls of the job may run at the same time, here and in other processes on the
   * same database; the job wrapper (src/http/job-route.ts) neither refuses a second call
   * with 409 nor takes a lease, and still records each call as a run in job_runs. For a
   * job whose every call is a separate report that must be stored (backup-status: two
   * hosts back up at the same time), where refusing one loses it. Such a job must not
   * rely on running alone. Absent: true, one run at a time (the lease, src/job-lease.ts).
   */
  exclusive?: boolean;
  /**
   * The job's own answers, shown in the OpenAPI document: 200, 409 for a check that
   * found something not in order (or a send that perhaps arrived), 502 for a send that
   * surely failed. The job wrapper documents its
   * own answers beside them (src/http/job-route.ts).
   */
  responses?: { 200: JobResponse; 409?: JobResponse; 502?: JobResponse };
}

/** Whether calls of the job run one at a time (JobDefinition.exclusive; absent: they do). */
export const isExclusive = (def: Pick<JobDefinition<unknown>, "exclusive">): boolean => def.exclusive !== false;

/** Keeps the input type of a job definition while storing it in a list. */
export function defineJob<I>(def: JobDefinition<I>): JobDefinition<any> {
  return def as JobDefinition<any>;
}
