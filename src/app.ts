// createApp(deps): the HTTP face of the service. The gate, the job wrapper and the
// error mapping live here once; the jobs themselves are plain functions in src/jobs/.
import { accessSync, constants } from "node:fs";
import { Elysia, t } from "elysia";
import type { Deps } from "./deps.ts";
import { RunningJobs } from "./running-jobs.ts";
import { ALL_JOBS } from "./jobs/index.ts";
import type { JobDefinition } from "./jobs/job.ts";
import { authGate } from "./http/auth.ts";
import { fileSystemUnavailableCode, HttpError, json, nothingStoredHeaders, unavailableCode, unexpectedAlarmType, validationMessage } from "./http/errors.ts";
import { mountJob } from "./http/job-route.ts";
import { docs, DOCS_PATHS } from "./http/docs.ts";
import { mountIngest } from "./http/ingest-routes.ts";
import { METRICS_PATH, metricsRoute } from "./http/metrics.ts";
import { enumOf } from "./jobs/schema.ts";
import { databaseDiskFull } from "./disk-space.ts";
import { Refusal } from "./ingest/refusal.ts";
import { countRejected, newIngestCounters, type IngestCounters } from "./ingest/counters.ts";
import { errorText, log } from "./logger.ts";
import { CommitOutcomeUnknown } from "./pg/commit.ts";

export interface AppOptions {
  /** The jobs to mount; all eleven by default. Tests may pass their own. */
  jobs?: JobDefinition<any>[];
  running?: RunningJobs;
  /** The write API's counters (read by /metrics); new ones by default. */
  counters?: IngestCounters;
}

const HEALTH_PATH = "/health";

const HealthOk = t.Object({
  status: t.Literal("ok"),
  database: t.Literal("bereikbaar"),
  lopendeTaken: t.Array(t.String(), { description: "De taken die nu in dit proces lopen." }),
});
/** Whether this process may write the SQLite file (access(2): EROFS on a read-only file system, EACCES by its mode). */
function mayWrite(path: string): boolean {
  if (path === ":memory:") return true;
  try {
    accessSync(path, constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

const HealthDown = t.Object({
  status: t.Literal("fout"),
  database: enumOf(["onbereikbaar", "alleen-lezen", "schijf-vol"], {
    description:
      "onbereikbaar: de query mislukte. alleen-lezen: de database neemt geen schrijfacties aan (PostgreSQL: een standby na een failover, default_transaction_read_only; SQLite: het bestand is niet schrijfbaar voor de service: het bestandssysteem alleen-lezen opnieuw aangekoppeld na schijffouten, of rechten die de volgende start het openen beletten). " +
      "schijf-vol (SQLite): op de schijf van de database is minder dan 1 MiB vrij voor de service; schrijfacties mislukken (SQLITE_FULL).",
  }),
});

/**
 * The paths anyone may call: health, the API documentation, and /metrics (which has a
 * gate of its own: loopback, or METRICS_SECRET). Every other path needs a token
 * (src/http/auth.ts), an unknown one included.
 */
export const OPEN_PATHS: ReadonlySet<string> = new Set([HEALTH_PATH, ...DOCS_PATHS, METRICS_PATH]);

/**
 * Largest request body the server reads at all: Bun refuses a larger declared one itself,
 * before the gate, with an empty 413. Twice the largest a route takes (POST /api/audit,
 * 1 MiB), so a body a little over a route's limit meets the gate and then that route's
 * own 413 {error} (each route reads at most its own limit, after the gate: readCappedBody).
 */
export const MAX_REQUEST_BODY = 2 * 1024 * 1024;

export function createApp(deps: Deps, options: AppOptions = {}) {
  const running = options.running ?? new RunningJobs();
  const counters = options.counters ?? newIngestCounters();
  // `standardHostname: false`: Elysia's router then reads the path from the first "/"
  // after "http://", as the gate does (pathOf). Its default reads from index 11 on, taking
  // every host to be at least 4 characters: with `Host: x`, `/ab/api/cron/backup-status`
  // was the write API's to the gate and backup-status to the router (test/auth.test.ts).
  // The service speaks plain HTTP (TLS ends at a proxy in front), so the url is http://.
  const app = new Elysia({ serve: { maxRequestBodySize: MAX_REQUEST_BODY }, handler: { standardHostname: false } })
    .onRequest(
      authGate({ cron: deps.config.cronSecret, app: deps.config.appSecret, appVorig: deps.config.appSecretVorig }, OPEN_PATHS, (scope, status) => {
        if (scope === "app") countRejected(counters, status);
      }),
    )
    .onError(({ code, error }) => {
      if (error instanceof HttpError) return json(error.status, { error: error.message }, { ...error.headers, ...nothingStoredHeaders(error) });
      if (error instanceof Refusal) return json(error.status, { error: error.message });
      if (code === "NOT_FOUND") return json(404, { error: "Onbekend pad." });
      if (code === "PARSE") return json(400, { error: "Ongeldige body: geen geldige JSON." });
      // A body that does not match its schema (src/http/body.ts): the field, by name.
      if (code === "VALIDATION") return json(400, { error: validationMessage(error) });
      const reason = unavailableCode(error);
      const unavailable = reason !== undefined;
      const disk = fileSystemUnavailableCode(error);
      const unknownOutcome = error instanceof CommitOutcomeUnknown;
      // Unexpected: reported with its message, answered without a stack trace. A full,
      // read-only or failing disk is storage-unwritable, mailed: every job fails so at its
      // first write (its job_runs row), so no report or check can tell the operator.
      void deps.alarms
        .raise({
          type: unknownOutcome ? "internal-error" : unexpectedAlarmType(error),
          message: unavailable
            ? `Database niet beschikbaar (${reason})`
            : disk !== undefined
              ? `Schijf vol of alleen-lezen (${disk})`
              : unknownOutcome
                ? error.message
                : "Onverwachte fout in de service",
          context: { error: errorText(unknownOutcome ? error.commitError : error), code: String(code) },
        })
        .catch((e) => log("error", "alarm failed", { error: errorText(e) }));
      // Not the 503 of "nothing stored": a client would repeat a batch that may be stored.
      if (unknownOutcome) return json(500, { error: error.message });
      if (unavailable) {
        return json(503, { error: `De database is tijdelijk niet beschikbaar (${reason}); probeer het later opnieuw.` }, { "retry-after": "60", ...nothingStoredHeaders(error) });
      }
      if (disk !== undefined) {
        return json(503, { error: `Er kon niet naar de schijf worden geschreven (${disk}: vol of alleen-lezen); maak ruimte en probeer het opnieuw.` }, { "retry-after": "60" });
      }
      return json(500, { error: "Interne fout; de fout is gemeld." });
    })
    .get(
      HEALTH_PATH,
      async () => {
        try {
          const { store } = deps;
          if (store.kind === "pg") {
            // Reachable is not enough: a standby (after a failover) or a read-only database answers every read and refuses every write.
            const [{ readOnly }] = await store.sql`SELECT pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on' AS "readOnly"`;
            if (readOnly) return json(503, { status: "fout", database: "alleen-lezen" });
          } else {
            store.sqlite.query("SELECT 1").get();
            // Reachable is not enough here either: a file system remounted read-only (after
            // disk errors, `errors=remount-ro`) answers every read and refuses every write. A
            // file whose mode no longer lets the service write is reported too: the open
            // connection still writes, but the next start cannot open it.
            if (!mayWrite(store.path)) return json(503, { status: "fout", database: "alleen-lezen" });
            // Nor is a full disk: every write fails with SQLITE_FULL while reads go on.
            if (databaseDiskFull(store.path)) return json(503, { status: "fout", database: "schijf-vol" });
          }
          return json(200, { status: "ok", database: "bereikbaar", lopendeTaken: running.names() });
        } catch {
          return json(503, { status: "fout", database: "onbereikbaar" });
        }
      },
      {
        detail: {
          summary: "Of de service en de database bereikbaar zijn (zonder token).",
          responses: {
            200: { description: "Service en database bereikbaar.", content: { "application/json": { schema: HealthOk } } },
            503: { description: "De database is niet bereikbaar, neemt geen schrijfacties aan, of (SQLite) haar schijf is vol.", content: { "application/json": { schema: HealthDown } } },
          },
        } as any,
      },
    )
    .use(docs())
    .use(metricsRoute({ deps, running, counters }));
  for (const job of options.jobs ?? ALL_JOBS) mountJob(app, deps, running, job);
  mountIngest(app, deps, counters);
  return app;
}
