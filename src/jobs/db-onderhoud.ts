// db-onderhoud: database upkeep after the retention jobs deleted many rows. On SQLite
// (this file): integrity check, the pruning of nachtwacht's own history tables (job_runs
// and backup_statuses, which otherwise grow for ever; the rule is src/maintenance/pruning.ts),
// optimizer statistics, free pages given back to the file system, and the WAL folded
// back and truncated. On PostgreSQL what fits of that (src/pg/maintenance.ts maintainPg:
// amcheck, the same pruning, ANALYZE), with its own body: the 200 and 409 are documented
// as either of the two. On both, a failed integrity check is 409 with the same alarm.
//
// Writers (the host application, other jobs) must never wait long: every step is
// either a read (quick_check runs on a WAL snapshot and blocks nobody) or a short
// write transaction — the incremental vacuum works in steps with a pause between
// them, and the checkpoint waits at most 250 ms for the lock; the one exception is an
// analysis by PRAGMA optimize, rare (src/maintenance/whole-file.ts). And the event loop
// must stay free: the steps that read or rewrite much of the file run on a worker thread
// with a connection of their own (whole-file.ts), the pruning here in short batches.
//
// The weekly job never runs a full VACUUM. An old database without auto-vacuum needs
// one, once, to become incremental: on a large file that blocks every writer for
// minutes. The job only reports that conversion as pending (`omzetting`, with what it
// would give back); convertToIncrementalAutoVacuum below does it, called by an operator
// command in a maintenance window.
//
// Raw SQL in this file: every step is a PRAGMA (or the VACUUM), which Drizzle has no
// builder for; the ordinary writes (the pruning, service_meta) go through Drizzle.
import type { Database } from "bun:sqlite";
import { inArray } from "drizzle-orm";
import { t, type Static } from "elysia";
import { statSync } from "node:fs";
import { backupStatuses, jobRuns, serviceMeta } from "../../db/schema.ts";
import type { AlarmSink } from "../alarms/alarm.ts";
import { BUSY_TIMEOUT_MS, excluded, type Db, type Store } from "../db.ts";
import type { Deps } from "../deps.ts";
import { log } from "../logger.ts";
import {
  checkpointOnWorker,
  checkpointTruncate,
  optimize,
  optimizeOnWorker,
  pragmaNumber,
  quickCheck,
  quickCheckOnWorker,
  STEP_PAUSE_MS,
  vacuumInSteps,
  vacuumOnWorker,
} from "../maintenance/whole-file.ts";
import {
  BACKUP_STATUSES_BEWAAR_DAGEN,
  JOB_RUNS_BEWAAR_DAGEN,
  KEEP_OK_RUNS,
  keptBackupOf,
  keptRunsOf,
  opschoning,
  Opschoning,
  PRUNE_BATCH,
  pruneRule,
  type PruneOptions,
} from "../maintenance/pruning.ts";
import { rowSealOf, sealedBackupColumns, sealedRunColumns, type RowSeal } from "../row-seal.ts";
import { maintainPg, PgMaintenanceReport } from "../pg/maintenance.ts";
import type { PgStore } from "../pg/store.ts";
import { redactUrl } from "../pg/url.ts";
import { defineJob, type JobResult } from "./job.ts";
import { integer, nullable, enumOf } from "./schema.ts";



export const AutoVacuum = enumOf(["none", "full", "incremental"]);
export type AutoVacuum = Static<typeof AutoVacuum>;
const AUTO_VACUUM: Record<number, AutoVacuum> = { 0: "none", 1: "full", 2: "incremental" };

export const Checkpoint = t.Object({
  modus: enumOf(["TRUNCATE", "PASSIVE"], { description: "PASSIVE wanneer TRUNCATE niet kon omdat de database bezet was." }),
  busy: t.Boolean({ description: "true als de checkpoint niet af kon door een lezer of schrijver." }),
  logPaginas: integer({ description: "Frames in de WAL." }),
  gecheckpoint: integer({ description: "Daarvan naar de database gekopieerd." }),
});
export type Checkpoint = Static<typeof Checkpoint>;

/** The one-time conversion to incremental auto-vacuum that a database without auto-vacuum still needs. */
export const OmzettingOpen = t.Object(
  {
    open: t.Literal(true),
    vrijePaginas: integer({ minimum: 0, description: "Vrije pagina's nu; de omzetting geeft ze terug (deze taak kan dat zonder haar niet)." }),
    vrijTeMaken: integer({ minimum: 0, description: "Bytes die de omzetting minstens teruggeeft: vrijePaginas × paginaGrootte." }),
    toelichting: t.String(),
  },
  {
    description:
      "Alleen bij `autoVacuum` = `none`: de eenmalige omzetting naar incrementeel auto-vacuum staat open. Deze taak voert haar nooit uit " +
      "(volledige VACUUM, blokkeert schrijvers); dat doet `nachtwacht db-convert --ja`, met de service gestopt.",
  },
);
export type OmzettingOpen = Static<typeof OmzettingOpen>;

const Integriteit = t.Union([t.Literal("ok"), t.Array(t.String())], {
  description: "`ok`, of de meldingen van PRAGMA quick_check (hoogstens 100).",
});

export const DbOnderhoudBody = t.Object({
  ok: t.Boolean(),
  integriteit: Integriteit,
  opgeschoond: nullable(Opschoning, { description: "null als de integriteitscontrole faalde: in een beschadigd bestand wordt niets verwijderd." }),
  autoVacuum: AutoVacuum,
  omzetting: nullable(OmzettingOpen),
  grootteVoor: integer({ minimum: 0, description: "Bytes: databasebestand plus -wal, vóór het onderhoud." }),
  grootteNa: integer({ minimum: 0, description: "Bytes: databasebestand plus -wal, na het onderhoud." }),
  vrijgemaakt: integer({ description: "grootteVoor − grootteNa, in bytes." }),
  vrijePaginasVoor: integer({ minimum: 0 }),
  vrijePaginasNa: integer({ minimum: 0 }),
  paginaGrootte: integer({ minimum: 1 }),
  vacuumStappen: integer({ minimum: 0, description: "Stappen van het incrementele vacuum (elk een korte schrijftransactie)." }),
  checkpoint: nullable(Checkpoint, { description: "null als de integriteitscontrole faalde: in een beschadigd bestand wordt niets geschreven." }),
});
export type DbOnderhoudBody = Static<typeof DbOnderhoudBody>;

/** The job's answer (200 and 409): SQLite's body, or PostgreSQL's report (the one with `overgeslagen`). */
export const DbOnderhoudAntwoord = t.Union([DbOnderhoudBody, PgMaintenanceReport], {
  description:
    "Op SQLite het eerste object (quick_check, vacuum, WAL-checkpoint), op PostgreSQL het tweede (amcheck, ANALYZE, groottes; " +
    "`overgeslagen` noemt wat daar niet van toepassing is).",
});
export type DbOnderhoudAntwoord = Static<typeof DbOnderhoudAntwoord>;

function fileSize(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0; // no -wal file (or an in-memory database)
  }
}

export function databaseBytes(path: string): number {
  return fileSize(path) + fileSize(`${path}-wal`);
}

function autoVacuumOf(sqlite: Database): AutoVacuum {
  return AUTO_VACUUM[pragmaNumber(sqlite, "auto_vacuum")] ?? "none";
}

function pendingConversion(autoVacuum: AutoVacuum, vrijePaginas: number, paginaGrootte: number): OmzettingOpen | null {
  if (autoVacuum !== "none") return null;
  return {
    open: true,
    vrijePaginas,
    vrijTeMaken: vrijePaginas * paginaGrootte,
    toelichting:
      "De database heeft geen auto-vacuum: vrije pagina's gaan niet terug naar het bestandssysteem. Deze wekelijkse taak doet de " +
      "eenmalige omzetting naar incrementeel auto-vacuum niet, want die vraagt een volledige VACUUM die alle schrijvers blokkeert " +
      "zolang hij duurt (minuten bij een groot bestand). Voer de omzetting uit in een onderhoudsvenster, met de service gestopt: nachtwacht db-convert --ja.",
  };
}

/**
 * Deletes up to `batch` rows chosen by `ids` (a query of at most `batch` ids) per write
 * transaction until none are left, pausing between transactions; returns how many.
 */
async function deleteInBatches(
  sqlite: Database,
  pickIds: (limit: number) => number[],
  remove: (ids: number[]) => void,
  batch: number,
  onBatch?: (rows: number) => void,
): Promise<number> {
  let total = 0;
  for (;;) {
    const n = sqlite.transaction(() => {
      const ids = pickIds(batch);
      if (ids.length > 0) remove(ids);
      return ids.length;
    }).immediate();
    onBatch?.(n);
    total += n;
    if (n < batch) return total;
    await Bun.sleep(STEP_PAUSE_MS);
  }
}

/** The job_runs rows kept whatever their age (keptRunsOf): per job the newest sealed run and the newest KEEP_OK_RUNS sealed successful ones. */
async function keptJobRuns(db: Db, seal: RowSeal): Promise<number[]> {
  const keep: number[] = [];
  const jobs = db.selectDistinct({ job: jobRuns.job }).from(jobRuns).all();
  for (const { job } of jobs) {
    // Each page an index range on (job, gestart).
    const page = async (offset: number, limit: number) =>
      db
        .select({ id: jobRuns.id, ...sealedRunColumns(jobRuns) })
        .from(jobRuns)
        .where(pruneRule.ofJob(jobRuns, job))
        .orderBy(...pruneRule.runsNewestFirst(jobRuns))
        .limit(limit)
        .offset(offset)
        .all();
    keep.push(...(await keptRunsOf(page, seal)));
  }
  return keep;
}

export async function pruneOwnTables(store: Store, seal: RowSeal, now: Date, o: PruneOptions = {}): Promise<Opschoning> {
  const batch = o.batch ?? PRUNE_BATCH;
  const { db, sqlite } = store;
  const grenzen = pruneRule.grenzen(now);
  const keep = await keptJobRuns(db, seal);
  const runs = await deleteInBatches(
    sqlite,
    (limit) =>
      db
        .select({ id: jobRuns.id })
        .from(jobRuns)
        .where(pruneRule.prunableRun(jobRuns, grenzen.jobRuns, keep))
        .limit(limit)
        .all()
        .map((r) => r.id),
    (ids) => db.delete(jobRuns).where(inArray(jobRuns.id, ids)).run(),
    batch,
    (n) => o.onBatch?.("job_runs", n),
  );

  const newest = await keptBackupOf(
    async (offset, limit) =>
      db
        .select({ id: backupStatuses.id, ...sealedBackupColumns(backupStatuses) })
        .from(backupStatuses)
        .orderBy(...pruneRule.backupsNewestFirst(backupStatuses))
        .limit(limit)
        .offset(offset)
        .all(),
    seal,
  );
  const backups = await deleteInBatches(
    sqlite,
    (limit) =>
      db
        .select({ id: backupStatuses.id })
        .from(backupStatuses)
        .where(pruneRule.prunableBackup(backupStatuses, grenzen.backupStatuses, newest))
        .orderBy(backupStatuses.ontvangen)
        .limit(limit)
        .all()
        .map((r) => r.id),
    (ids) => db.delete(backupStatuses).where(inArray(backupStatuses.id, ids)).run(),
    batch,
    (n) => o.onBatch?.("backup_statuses", n),
  );
  return opschoning(grenzen, runs, backups);
}

/** The alarm when the integrity check fails, on either store: nothing else was touched. */
async function raiseIntegrityAlarm(alarms: AlarmSink, meldingen: string[], database: string): Promise<void> {
  await alarms.raise({
    type: "db-integrity",
    message: `De integriteitscontrole van de database faalt (${meldingen.length} melding(en)): herstel uit de laatste backup en onderzoek de oorzaak.`,
    context: { database, meldingen: meldingen.slice(0, 10) },
  });
}

/** db-onderhoud on the deps' store: SQLite's body there, maintainPg's report on PostgreSQL. */
export function runDbOnderhoud(deps: Deps<Store>, now: Date): Promise<JobResult<DbOnderhoudBody>>;
export function runDbOnderhoud(deps: Deps<PgStore>, now: Date): Promise<JobResult<PgMaintenanceReport>>;
export function runDbOnderhoud(deps: Deps, now: Date): Promise<JobResult<DbOnderhoudAntwoord>>;
export async function runDbOnderhoud(deps: Deps, now: Date): Promise<JobResult<DbOnderhoudAntwoord>> {
  const { store } = deps;
  const seal = rowSealOf(deps.config);
  if (store.kind === "sqlite") return maintainSqlite(store, seal, deps.alarms, now);
  const report = await maintainPg(store, seal, now);
  if (report.integriteit.status !== "problemen") return { status: 200, body: report };
  // The URL without its password: the alarm goes out by mail and webhook.
  await raiseIntegrityAlarm(deps.alarms, report.integriteit.meldingen, redactUrl(store.url));
  return { status: 409, body: report };
}

async function maintainSqlite(store: Store, seal: RowSeal, alarms: AlarmSink, now: Date): Promise<JobResult<DbOnderhoudBody>> {
  const { sqlite, path } = store;
  const grootteVoor = databaseBytes(path);
  const paginaGrootte = pragmaNumber(sqlite, "page_size");
  const vrijePaginasVoor = pragmaNumber(sqlite, "freelist_count");
  const autoVacuum = autoVacuumOf(sqlite);
  const omzetting = pendingConversion(autoVacuum, vrijePaginasVoor, paginaGrootte);

  // On a worker thread: it reads the whole file (src/maintenance/whole-file.ts).
  const onWorker = path !== ":memory:";
  const integriteit = onWorker ? await quickCheckOnWorker(path) : quickCheck(sqlite);
  if (integriteit !== "ok") {
    // Moving pages around in a damaged file can make it worse: report and stop.
    const body: DbOnderhoudBody = {
      ok: false,
      integriteit,
      opgeschoond: null,
      autoVacuum,
      omzetting,
      grootteVoor,
      grootteNa: grootteVoor,
      vrijgemaakt: 0,
      vrijePaginasVoor,
      vrijePaginasNa: vrijePaginasVoor,
      paginaGrootte,
      vacuumStappen: 0,
      checkpoint: null,
    };
    await raiseIntegrityAlarm(alarms, integriteit, path);
    return { status: 409, body };
  }

  // The own history tables, before the vacuum so that the pages they free are given back too.
  const opgeschoond = await pruneOwnTables(store, seal, now);

  // The planner's statistics where they are stale; on a worker thread too (whole-file.ts).
  if (onWorker) await optimizeOnWorker(path);
  else optimize(sqlite);

  let vacuumStappen = 0;
  if (omzetting) {
    // auto_vacuum can only change through a full VACUUM: never here (see the top of the file).
    log("warn", "db-onderhoud: auto_vacuum is NONE; the one-time conversion (full VACUUM) is pending and left to the operator", {
      database: path,
      vrijePaginas: omzetting.vrijePaginas,
      vrijTeMaken: omzetting.vrijTeMaken,
    });
  } else if (autoVacuum === "incremental") {
    // Each step is its own short write transaction. The pruning may have freed pages.
    vacuumStappen = onWorker ? await vacuumOnWorker(path) : await vacuumInSteps(sqlite);
  }
  // With auto_vacuum FULL, SQLite already gave free pages back at every commit.

  // In WAL mode the shrunken file only reaches the disk when the WAL is checkpointed.
  const cp: Checkpoint = onWorker ? await checkpointOnWorker(path) : checkpointTruncate(sqlite, BUSY_TIMEOUT_MS);
  const grootteNa = databaseBytes(path);
  const body: DbOnderhoudBody = {
    ok: true,
    integriteit,
    opgeschoond,
    autoVacuum,
    omzetting,
    grootteVoor,
    grootteNa,
    vrijgemaakt: grootteVoor - grootteNa,
    vrijePaginasVoor,
    vrijePaginasNa: pragmaNumber(sqlite, "freelist_count"),
    paginaGrootte,
    vacuumStappen,
    checkpoint: cp,
  };
  return { status: 200, body };
}

export interface OmzettingResultaat {
  integriteit: "ok" | string[];
  /** auto_vacuum before the call, and after it. */
  voor: AutoVacuum;
  autoVacuum: AutoVacuum;
  /** True when this call converted the database (ran the VACUUM). */
  omgezet: boolean;
  paginaGrootte: number;
  vrijePaginasVoor: number;
  /** Database file plus its -wal file, in bytes, before and after. */
  grootteVoor: number;
  grootteNa: number;
  vrijgemaakt: number;
  checkpoint: Checkpoint | null;
}

/**
 * The one-time conversion of a database without auto-vacuum (auto_vacuum NONE) to
 * incremental auto-vacuum, for an operator command; the weekly job never calls it.
 * `PRAGMA auto_vacuum` can only leave NONE through a full VACUUM: the whole file is
 * rewritten (through the WAL, so about the database's size again in free disk space)
 * and every writer, the host application included, waits or fails with SQLITE_BUSY
 * for as long as it takes — minutes on a large file. Run it in a maintenance window.
 *
 * Does nothing on a database that is already incremental or FULL (FULL gives pages
 * back at every commit) and refuses one that fails quick_check: rewriting a damaged
 * file can make it worse. Records the moment in service_meta ('auto_vacuum_omgezet').
 * Synchronous: nothing else of this process runs in between.
 */
export function convertToIncrementalAutoVacuum(store: Store, now: Date): OmzettingResultaat {
  const { sqlite, path } = store;
  const grootteVoor = databaseBytes(path);
  const paginaGrootte = pragmaNumber(sqlite, "page_size");
  const vrijePaginasVoor = pragmaNumber(sqlite, "freelist_count");
  const voor = autoVacuumOf(sqlite);
  const unchanged = (integriteit: OmzettingResultaat["integriteit"]): OmzettingResultaat => ({
    integriteit,
    voor,
    autoVacuum: voor,
    omgezet: false,
    paginaGrootte,
    vrijePaginasVoor,
    grootteVoor,
    grootteNa: grootteVoor,
    vrijgemaakt: 0,
    checkpoint: null,
  });
  const integriteit = quickCheck(sqlite);
  if (integriteit !== "ok") return unchanged(integriteit);
  if (voor !== "none") return unchanged(integriteit);

  log("warn", "auto_vacuum conversion: full VACUUM of the database, writers wait until it is done", { database: path, grootteVoor });
  sqlite.run("PRAGMA auto_vacuum = INCREMENTAL");
  sqlite.run("VACUUM");
  const autoVacuum = autoVacuumOf(sqlite);
  const omgezet = autoVacuum === "incremental";
  if (omgezet) {
    store.db
      .insert(serviceMeta)
      .values({ key: "auto_vacuum_omgezet", value: now.toISOString() })
      .onConflictDoUpdate({ target: serviceMeta.key, set: { value: excluded(serviceMeta.value) } })
      .run();
  }
  // The VACUUM went through the WAL: the file only shrinks once that is checkpointed.
  const cp = checkpointTruncate(sqlite, BUSY_TIMEOUT_MS);
  const grootteNa = databaseBytes(path);
  log("info", "auto_vacuum conversion done", { database: path, autoVacuum, grootteVoor, grootteNa });
  return {
    integriteit,
    voor,
    autoVacuum,
    omgezet,
    paginaGrootte,
    vrijePaginasVoor,
    grootteVoor,
    grootteNa,
    vrijgemaakt: grootteVoor - grootteNa,
    checkpoint: cp,
  };
}

export const dbOnderhoudJob = defineJob({
  name: "db-onderhoud",
  summary: "Database-onderhoud: integriteitscontrole, eigen geschiedenis opschonen, statistieken; op SQLite ook vacuum en WAL-checkpoint",
  description:
    `Op SQLite: PRAGMA quick_check; de eigen geschiedenis opschonen (job_runs ouder dan ${JOB_RUNS_BEWAAR_DAGEN} dagen en backup_statuses ouder dan ` +
    `${BACKUP_STATUSES_BEWAAR_DAGEN} dagen, met behoud van wat de controles en rapporten lezen: per taak de nieuwste run en de ${KEEP_OK_RUNS} ` +
    "nieuwste geslaagde, en de nieuwste back-upstatus; `opgeschoond`); PRAGMA optimize, incrementeel vacuum in kleine stappen (schrijvers wachten hooguit kort) en een WAL-checkpoint " +
    "(TRUNCATE, of PASSIVE wanneer de database bezet is). Een bestaande database zonder auto-vacuum wordt níet omgezet: die omzetting " +
    "vraagt een volledige VACUUM die schrijvers blokkeert; het antwoord meldt haar in `omzetting` (met wat ze zou vrijmaken) en de rest " +
    "van het onderhoud gaat door. Antwoord met grootte vóór en na en de vrijgemaakte bytes. " +
    "Op PostgreSQL: de B-tree-indexen van nachtwachts tabellen gecontroleerd met amcheck (bt_index_check) als die extensie is " +
    "geïnstalleerd en de service haar mag uitvoeren (anders `integriteit.status` = `overgeslagen`, met hoe een beheerder haar inschakelt); dezelfde opschoning; " +
    "ANALYZE per tabel; de databasegrootte vóór en na en per tabel. Geen VACUUM FULL, WAL-checkpoint of incrementeel vacuum: " +
    "`overgeslagen` zegt waarom. " +
    "409 en een alarm (`type` = `db-integrity`) wanneer de integriteitscontrole faalt; dan wordt niets verder aangeraakt.",
  run: (deps, now) => runDbOnderhoud(deps, now),
  responses: {
    200: { description: "Onderhoud uitgevoerd; de database is in orde.", schema: DbOnderhoudAntwoord },
    409: { description: "De integriteitscontrole faalt; alarm verstuurd.", schema: DbOnderhoudAntwoord },
  },
});
