// db-onderhoud (contract §4): SQLite upkeep after the retention jobs deleted many
// rows. Integrity check, optimizer statistics, free pages given back to the file
// system, and the WAL folded back and truncated.
//
// Writers (the host application, other jobs) must never wait long: every step is
// either a read (quick_check runs on a WAL snapshot and blocks nobody) or a short
// write transaction — the incremental vacuum works in steps with a pause between
// them, and the checkpoint waits at most CHECKPOINT_WAIT_MS for the lock. The one
// exception is the one-time conversion of an old database to incremental
// auto-vacuum, which needs a full VACUUM; the response says when that happened.
import type { Database } from "bun:sqlite";
import { statSync } from "node:fs";
import { BUSY_TIMEOUT_MS } from "../db.ts";
import type { Deps } from "../deps.ts";
import { log } from "../logger.ts";
import { defineJob, type JobResult } from "./job.ts";

/** Pages freed per incremental-vacuum transaction (4 MiB at the default page size). */
export const VACUUM_STEP_PAGES = 1000;
/** Pause between steps, so a waiting writer gets the lock in between. */
const STEP_PAUSE_MS = 5;
/** How long the TRUNCATE checkpoint may wait for readers and writers before falling back. */
const CHECKPOINT_WAIT_MS = 250;
/** quick_check reports at most this many problems; more add nothing an operator needs. */
const MAX_PROBLEMS = 100;

export type AutoVacuum = "none" | "full" | "incremental";
const AUTO_VACUUM: Record<number, AutoVacuum> = { 0: "none", 1: "full", 2: "incremental" };

export interface Checkpoint {
  modus: "TRUNCATE" | "PASSIVE";
  /** True when the checkpoint could not finish because of a reader or writer. */
  busy: boolean;
  /** Frames in the WAL, and how many of them were copied into the database. */
  logPaginas: number;
  gecheckpoint: number;
}

export interface DbOnderhoudBody {
  ok: boolean;
  integriteit: "ok" | string[];
  autoVacuum: AutoVacuum;
  /** True when this run converted the database to incremental auto-vacuum (full VACUUM). */
  omgezet: boolean;
  /** Database file plus its -wal file, in bytes. */
  groottevoor: number;
  grootteNa: number;
  vrijgemaakt: number;
  vrijePaginasVoor: number;
  vrijePaginasNa: number;
  paginaGrootte: number;
  vacuumStappen: number;
  /** null when the integrity check failed: nothing is written to a damaged file. */
  checkpoint: Checkpoint | null;
}

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

function pragmaNumber(sqlite: Database, name: string): number {
  const row = sqlite.query(`PRAGMA ${name}`).values()[0];
  return Number(row?.[0] ?? 0);
}

export function quickCheck(sqlite: Database): "ok" | string[] {
  try {
    const rows = sqlite.query(`PRAGMA quick_check(${MAX_PROBLEMS})`).values() as [string][];
    if (rows.length === 1 && rows[0]![0] === "ok") return "ok";
    // SQLite may put several findings in one row, one per line.
    return rows
      .flatMap((r) => String(r[0]).split("\n"))
      .filter((l) => l.trim() !== "")
      .slice(0, MAX_PROBLEMS)
      .map((l) => l.slice(0, 500));
  } catch (e) {
    // A damaged header or schema page makes the check itself fail: that is a finding too.
    return [`quick_check kon niet worden uitgevoerd: ${e instanceof Error ? e.message : String(e)}`];
  }
}

function checkpoint(sqlite: Database): Checkpoint {
  // TRUNCATE also empties the -wal file, but it waits for readers and writers;
  // a short busy timeout bounds how long it may hold up a writer. When busy, a
  // PASSIVE checkpoint copies what it can without waiting for anyone.
  sqlite.run(`PRAGMA busy_timeout = ${CHECKPOINT_WAIT_MS}`);
  let r: { busy: number; log: number; checkpointed: number };
  let modus: Checkpoint["modus"] = "TRUNCATE";
  try {
    r = sqlite.query("PRAGMA wal_checkpoint(TRUNCATE)").get() as typeof r;
  } finally {
    sqlite.run(`PRAGMA busy_timeout = ${BUSY_TIMEOUT_MS}`);
  }
  if (r.busy !== 0) {
    modus = "PASSIVE";
    r = sqlite.query("PRAGMA wal_checkpoint(PASSIVE)").get() as typeof r;
  }
  return { modus, busy: r.busy !== 0, logPaginas: r.log, gecheckpoint: r.checkpointed };
}

export async function runDbOnderhoud(deps: Deps, now: Date): Promise<JobResult<DbOnderhoudBody>> {
  const { sqlite, path } = deps.store;
  const groottevoor = databaseBytes(path);
  const paginaGrootte = pragmaNumber(sqlite, "page_size");
  const vrijePaginasVoor = pragmaNumber(sqlite, "freelist_count");
  let autoVacuum = AUTO_VACUUM[pragmaNumber(sqlite, "auto_vacuum")] ?? "none";

  const integriteit = quickCheck(sqlite);
  if (integriteit !== "ok") {
    // Moving pages around in a damaged file can make it worse: report and stop.
    const body: DbOnderhoudBody = {
      ok: false,
      integriteit,
      autoVacuum,
      omgezet: false,
      groottevoor,
      grootteNa: groottevoor,
      vrijgemaakt: 0,
      vrijePaginasVoor,
      vrijePaginasNa: vrijePaginasVoor,
      paginaGrootte,
      vacuumStappen: 0,
      checkpoint: null,
    };
    await deps.alarms.raise({
      type: "db-integrity",
      message: `De integriteitscontrole van de database faalt (${integriteit.length} melding(en)): herstel uit de laatste backup en onderzoek de oorzaak.`,
      context: { database: path, meldingen: integriteit.slice(0, 10) },
    });
    return { status: 409, body };
  }

  // Refreshes the planner's statistics where they are stale; bounded by SQLite itself.
  sqlite.run("PRAGMA optimize");

  let omgezet = false;
  let vacuumStappen = 0;
  if (autoVacuum === "none") {
    // auto_vacuum can only change through a full VACUUM, which rewrites the whole file
    // and blocks writers for its duration. Done once, here, where maintenance is
    // expected; from then on the steps below reclaim space without blocking.
    log("warn", "db-onderhoud: database wordt eenmalig omgezet naar auto_vacuum INCREMENTAL (VACUUM)", { database: path });
    sqlite.run("PRAGMA auto_vacuum = INCREMENTAL");
    sqlite.run("VACUUM");
    autoVacuum = AUTO_VACUUM[pragmaNumber(sqlite, "auto_vacuum")] ?? "none";
    omgezet = autoVacuum === "incremental";
    sqlite
      .query("INSERT OR REPLACE INTO service_meta (key, value) VALUES ('auto_vacuum_omgezet', ?)")
      .run(now.toISOString());
  } else if (autoVacuum === "incremental") {
    // Each PRAGMA is its own short write transaction.
    let free = vrijePaginasVoor;
    while (free > 0) {
      sqlite.run(`PRAGMA incremental_vacuum(${VACUUM_STEP_PAGES})`);
      vacuumStappen++;
      const left = pragmaNumber(sqlite, "freelist_count");
      if (left >= free) break; // no progress: never loop forever
      free = left;
      if (free > 0) await Bun.sleep(STEP_PAUSE_MS);
    }
  }
  // With auto_vacuum FULL, SQLite already gave free pages back at every commit.

  // In WAL mode the shrunken file only reaches the disk when the WAL is checkpointed.
  const cp = checkpoint(sqlite);
  const grootteNa = databaseBytes(path);
  const body: DbOnderhoudBody = {
    ok: true,
    integriteit,
    autoVacuum,
    omgezet,
    groottevoor,
    grootteNa,
    vrijgemaakt: groottevoor - grootteNa,
    vrijePaginasVoor,
    vrijePaginasNa: pragmaNumber(sqlite, "freelist_count"),
    paginaGrootte,
    vacuumStappen,
    checkpoint: cp,
  };
  return { status: 200, body };
}

const bodySchema = {
  type: "object",
  required: ["ok", "integriteit", "autoVacuum", "omgezet", "groottevoor", "grootteNa", "vrijgemaakt", "vrijePaginasVoor", "vrijePaginasNa", "checkpoint"],
  properties: {
    ok: { type: "boolean" },
    integriteit: {
      description: "`ok`, of de meldingen van PRAGMA quick_check (hoogstens 100).",
      oneOf: [{ type: "string", enum: ["ok"] }, { type: "array", items: { type: "string" } }],
    },
    autoVacuum: { type: "string", enum: ["none", "full", "incremental"] },
    omgezet: { type: "boolean", description: "Deze run zette de database eenmalig om naar incrementeel auto-vacuum (volledige VACUUM)." },
    groottevoor: { type: "integer", description: "Bytes: databasebestand plus -wal, vóór het onderhoud." },
    grootteNa: { type: "integer" },
    vrijgemaakt: { type: "integer", description: "groottevoor − grootteNa, in bytes." },
    vrijePaginasVoor: { type: "integer" },
    vrijePaginasNa: { type: "integer" },
    paginaGrootte: { type: "integer" },
    vacuumStappen: { type: "integer" },
    checkpoint: {
      type: ["object", "null"],
      properties: {
        modus: { type: "string", enum: ["TRUNCATE", "PASSIVE"] },
        busy: { type: "boolean" },
        logPaginas: { type: "integer" },
        gecheckpoint: { type: "integer" },
      },
    },
  },
};

export const dbOnderhoudJob = defineJob({
  name: "db-onderhoud",
  summary: "SQLite-onderhoud: integriteitscontrole, optimize, WAL-checkpoint, vrije pagina's teruggeven",
  description:
    "PRAGMA quick_check, PRAGMA optimize, incrementeel vacuum in kleine stappen (schrijvers wachten hooguit kort) en een WAL-checkpoint " +
    "(TRUNCATE, of PASSIVE wanneer de database bezet is). Een bestaande database zonder auto-vacuum wordt eenmalig omgezet " +
    "(volledige VACUUM, blokkeert schrijvers zolang die duurt; `omgezet: true`). Antwoord met grootte vóór en na en de vrijgemaakte bytes. " +
    "409 en een alarm (`type` = `db-integrity`) wanneer de integriteitscontrole faalt; dan wordt niets verder aangeraakt.",
  run: (deps, now) => runDbOnderhoud(deps, now),
  openapi: {
    responses: {
      200: { description: "Onderhoud uitgevoerd; de database is in orde.", schema: bodySchema },
      409: { description: "De integriteitscontrole faalt; alarm verstuurd.", schema: bodySchema },
    },
  },
});
