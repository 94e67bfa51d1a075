// GET /metrics: Prometheus text exposition. (Being written; mounted by src/app.ts.)
import { Elysia } from "elysia";
import type { Deps } from "../deps.ts";
import type { IngestCounters } from "../ingest/counters.ts";
import type { RunningJobs } from "../running-jobs.ts";

export interface MetricsSources {
  deps: Deps;
  running: RunningJobs;
  counters: IngestCounters;
}

export function metricsRoute(_sources: MetricsSources) {
  return new Elysia({ name: "metrics" });
}
