// Wiring the real dependencies and starting the HTTP server; used by the entry point
// and the demo. Nothing here is imported by the app or the jobs.
import { mailAlarmChannel } from "./alarms/mail-channel.ts";
import { createAlarmSink } from "./alarms/sink.ts";
import { createApp, type AppOptions } from "./app.ts";
import { auditKeys } from "./audit/keys.ts";
import { redactedConfig, secretValues, type Config } from "./config.ts";
import { BUSY_TIMEOUT_MS, openStore, type Store } from "./db.ts";
import { outboxDirOf } from "./disk-space.ts";
import type { AnyStore, Deps } from "./deps.ts";
import { startCheckpointer, type Checkpointer } from "./checkpointer.ts";
import { WriteApiActivity } from "./ingest/activity.ts";
import { pastSealedMarker, rowSealOf, sealKeyMarker } from "./row-seal.ts";
import { openPgStore, type PgStore } from "./pg/store.ts";
import { CLOCK_SKEW_LIMIT_MS, databaseClockOffsetMs, offsetSeconds } from "./pg/clock.ts";
import { redactUrl } from "./pg/url.ts";
import { writeKeptEnds, writeRunEnd } from "./job-runs.ts";
import { errorText, log } from "./logger.ts";
import { countTenants, tenantsLevel } from "./ingest/tenants.ts";
import { countTenantsPg } from "./pg/daily.ts";
import { createMailer } from "./mail/transport.ts";
import { RunningJobs } from "./running-jobs.ts";
import { listenFailure } from "./start-failure.ts";

/**
 * Folds the WAL back into the database file and closes it. The host application may
 * hold the database open, so the checkpoint waits at most a second and is logged
 * when it could not finish (SQLite completes it later; nothing is lost either way).
 */
export function closeDatabase(store: Store): void {
  try {
    // Raw SQL: Drizzle has no builder for pragmas.
    store.sqlite.run("PRAGMA busy_timeout = 1000");
    const r = store.sqlite.query("PRAGMA wal_checkpoint(TRUNCATE)").get() as { busy: number; log: number; checkpointed: number };
    if (r.busy !== 0) log("warn", "WAL checkpoint at shutdown was blocked by another connection", { ...r });
  } catch (e) {
    log("warn", "WAL checkpoint at shutdown failed", { error: e instanceof Error ? e.message : String(e) });
  }
  store.close();
}

/** The service's dependencies on `store`: the SQLite file of DATABASE_PATH unless another is given (PostgreSQL, tests). */
export function wireDeps<S extends AnyStore = Store>(config: Config, store: S = openStore(config.databasePath, new Date(), rowSealOf(config), pastSealedMarker(config), sealKeyMarker(config)) as S): Deps<S> {
  const mailer = createMailer({ smtpUrl: config.smtpUrl, from: config.mailFrom, outboxDir: outboxDirOf(config) });
  const clock = () => new Date();
  const secrets = secretValues(config);
  // Serious alarms (broken chain, backup, database integrity) are also mailed to the
  // daily-report recipient when there is one.
  const channels = config.dagrapportEmail
    ? [mailAlarmChannel({ mailer, recipient: config.dagrapportEmail, tijdzone: config.rapportTijdzone, clock, store })]
    : [];
  const alarms = createAlarmSink({ sentryDsn: config.sentryDsn, clock, secrets, channels });
  return { store, mailer, alarms, clock, config };
}

/**
 * Logs one warning when the store already holds TENANTS_MAX tenants or more (tenantsLevel
 * "actie"): every new tenant is refused then (422, and its audit entries and login
 * attempts after it), which an installation upgraded past a lowered default would
 * otherwise learn only from its application's errors. Resolves to whether it warned.
 */
export async function warnIfTenantsFull(store: AnyStore, max: number): Promise<boolean> {
  const aantal = store.kind === "pg" ? await countTenantsPg(store.db) : countTenants(store.db);
  if (tenantsLevel(aantal, max) !== "actie") return false;
  log("warn", "TENANTS_MAX is reached: the write API refuses every new tenant (422), and then its audit entries and login attempts; existing tenants are still updated. Raise TENANTS_MAX in the env file and restart, knowing what each tenant costs (docs/operations.md, \"What grows with the years\")", {
    tenants: aantal,
    tenantsMax: max,
  });
  return true;
}

/**
 * How long SIGTERM waits for running jobs. Within the unit's TimeoutStopSec (60 s) with
 * room to spare; a job still running then is recorded as interrupted and the process
 * exits. Every job commits in small transactions, so any moment between two of them
 * is a safe point: the next run picks up where this one stopped.
 */
export const SHUTDOWN_GRACE_MS = 25_000;

export interface ServerOptions {
  shutdownGraceMs?: number;
  /** The jobs to mount; all eleven by default (test fixtures pass their own). */
  jobs?: AppOptions["jobs"];
}

/**
 * The page cache of the service's connection, in KiB (SQLite's default: 2 MiB). A write
 * API batch over many tenants touches a leaf page per tenant in each of the audit
 * table's b-trees; with the default cache most of them are read again from the file
 * for every batch. 64 MiB holds those pages at 1,000 tenants: 1.8× the appends per
 * second in one process (docs/performance.md, round 9). Filled only as pages are read,
 * so an idle service does not grow by it.
 */
export const SERVICE_CACHE_KIB = 64 * 1024;

/** Starts the service on the SQLite file of DATABASE_PATH. */
export function startServer(config: Config, options: ServerOptions = {}) {
  const wired = wireDeps(config);
  wired.store.sqlite.run(`PRAGMA cache_size = -${SERVICE_CACHE_KIB}`);
  const checkpointer = startCheckpointer(wired.store.sqlite, wired.store.path);
  return serveWith(serviceDeps(wired, checkpointer), checkpointer, options);
}

/**
 * The deps the service runs with on SQLite: the checkpoint thread's trigger and state, and one
 * tracker for the write API's routes and the retention jobs' batches (src/ingest/activity.ts).
 */
export function serviceDeps(wired: Deps<Store>, checkpointer: Pick<Checkpointer, "now" | "fallenBack">): Deps<Store> {
  return { ...wired, checkpointNow: () => checkpointer.now(), walCheckpointerFallback: () => checkpointer.fallenBack(), writeApi: new WriteApiActivity() };
}

/**
 * Starts the service on PostgreSQL (`url`): migrated (once, however many instances start
 * together), its first start marked, no WAL checkpointer (PostgreSQL has its own).
 */
export async function startPgServer(config: Config, url: string, options: ServerOptions = {}) {
  const store = await openPgStore(url, { seal: rowSealOf(config), pastMarker: pastSealedMarker(config), keyMarker: sealKeyMarker(config) });
  const offsetMs = await databaseClockOffsetMs(store.sql);
  const klokAfwijkingSeconden = offsetSeconds(offsetMs);
  log("info", "database: PostgreSQL", { database: redactUrl(url), klokAfwijkingSeconden });
  if (Math.abs(offsetMs) > CLOCK_SKEW_LIMIT_MS) {
    log("error", "this host's clock differs from the database server's by more than 10 s: the job leases follow the server's clock, but the times this instance records (job runs, audit entries) are off by as much, and taken-controle judges the other instance's runs by this clock (turn on NTP on every host)", {
      klokAfwijkingSeconden,
    });
  }
  return serveWith(wireDeps<PgStore>(config, store), null, options);
}

function serveWith<S extends AnyStore>(deps: Deps<S>, checkpointer: Checkpointer | null, options: ServerOptions) {
  const { config } = deps;
  const running = new RunningJobs();
  const graceMs = options.shutdownGraceMs ?? SHUTDOWN_GRACE_MS;
  // Not Elysia's default reusePort: a second process on the same HOST:PORT (one started by
  // hand beside the unit) would take a share of the calls and writes without a word.
  let app: ReturnType<typeof createApp>;
  try {
    app = createApp(deps, { running, jobs: options.jobs }).listen({ port: config.port, hostname: config.host, reusePort: false });
  } catch (e) {
    throw listenFailure(e, config.host, config.port);
  }
  const url = `http://${config.host}:${app.server?.port}`;
  // The public verifier key, for auditors and `nachtwacht verify` (the signing key stays redacted).
  log("info", "nachtwacht listening", { url, config: redactedConfig(config), verificatieSleutel: auditKeys(config).signer.verifierKey });
  if (deps.mailer.bezorging === "outbox") {
    log("warn", "SMTP_URL is not set: e-mail is NOT delivered, it is written as .eml files to the outbox folder", {
      outbox: outboxDirOf(config),
    });
  }
  if (!config.sentryDsn) log("warn", "SENTRY_DSN is not set: alarms go to the log on stderr only");
  void warnIfTenantsFull(deps.store, config.tenantsMax).catch((e) => log("warn", "could not count the tenants at start", { error: errorText(e) }));

  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log("info", "shutting down", { signal, running: running.names(), graceMs });
    // Stop accepting connections and starting jobs; let running jobs finish, for at most graceMs.
    running.close();
    const drained = app.server?.stop(false) ?? Promise.resolve();
    const finished = await Promise.race([running.whenIdle().then(() => true), Bun.sleep(graceMs).then(() => false)]);
    let exitCode = 0;
    if (finished) {
      // The last answers are still being written: give them a moment.
      await Promise.race([drained, Bun.sleep(2000)]);
    } else {
      // Each waiting caller gets 503 {error} and the run is recorded as 'fout'. The
      // jobs commit in small transactions, so whatever they committed stays; the
      // database is closed between two of those, and a rerun does the rest.
      const message = `Onderbroken: de service werd gestopt (${signal}) en wachtte ${Math.round(graceMs / 1000)} s; de taak was toen niet klaar. Wat af was, is bewaard; een nieuwe aanroep maakt het werk af.`;
      const left = running.names();
      running.interrupt(message);
      log("error", "jobs still running at shutdown were interrupted", { signal, jobs: left, graceMs });
      await Promise.race([drained, Bun.sleep(1000)]);
      // A run whose wrapper has not recorded it yet (it may still wait for another
      // process's write lock, without blocking): recorded here the same way, waiting for
      // the lock for at most BUSY_TIMEOUT_MS in all.
      const deadline = performance.now() + BUSY_TIMEOUT_MS;
      for (const run of running.runs()) {
        const { job, runId } = run;
        try {
          await writeRunEnd(deps.store, rowSealOf(deps.config), run, deps.clock(), { uitkomst: "fout", httpStatus: 503, fout: message }, Math.max(0, deadline - performance.now()));
        } catch (e) {
          log("error", "could not record an interrupted run", { job, runId, error: e instanceof Error ? e.message : String(e) });
        }
      }
      exitCode = 1;
    }
    // The job wrapper's writes still going on after their answers because another process
    // held the write lock (job-route.ts writeLater: a refused call's row, a run's end, a
    // lease's release): waited for, without blocking, for at most BUSY_TIMEOUT_MS in all
    // together with the last try of the kept ends below.
    const writesDeadline = performance.now() + BUSY_TIMEOUT_MS;
    const given = (await running.settleWrites(BUSY_TIMEOUT_MS)).filter((w) => w.what !== "end");
    if (given.length > 0) log("error", "writes of the job wrapper still waiting for the database write lock were given up at shutdown", { writes: given });
    // Ends of runs that could not be written when they finished (job-route.ts recordEnd,
    // writeEnd): one last try, or their rows would read as interrupted after the restart.
    await writeKeptEnds(deps.store, rowSealOf(deps.config), running, Math.max(0, writesDeadline - performance.now()));
    const unwritten = running.keptEndsList();
    if (unwritten.length > 0) {
      log("error", "the end of a run could not be recorded before shutdown", { runs: unwritten.map((k) => ({ job: k.job, runId: k.runId, uitkomst: k.result.uitkomst, httpStatus: k.result.httpStatus })) });
    }
    // Repeated alarms held back within their minute: their count goes out before the process does.
    deps.alarms.flushHeld?.();
    void deps.mailer.close().catch(() => {});
    await checkpointer?.stop();
    const { store } = deps;
    // Interrupted jobs may still have queries under way: the client stops waiting for them
    // after 2 s, within systemd's stop timeout (the server may still finish them).
    if (store.kind === "pg") await store.close(2).catch((e) => log("warn", "closing the PostgreSQL connections failed", { error: e instanceof Error ? e.message : String(e) }));
    else closeDatabase(store);
    log("info", "stopped", { signal, exitCode });
    process.exit(exitCode);
  };
  process.on("SIGTERM", () => void shutdown("SIGTERM"));
  process.on("SIGINT", () => void shutdown("SIGINT"));
  return { app, deps, url, running };
}
