// How long beveiligingslog-analyse has postponed its late part (`laat.uitgesteld`, on
// PostgreSQL while a batch of login attempts holds LOCK_LOGIN_IDS): service_meta
// 'beveiligingslog-uitgesteld', `<runs> <ISO start of the first of them>`, absent once a
// run judged the late part again. A stuck writer session holding the lock, or an unbroken
// stream of batches, postpones it run after run, and late brute-force attempts are then
// never judged: /metrics (nachtwacht_login_analysis_postponed_runs), its alert and the
// daily report tell the operator.
//
// Kept in service_meta rather than derived from the job's sealed run summaries: a summary
// is cut at 4000 characters (src/job-runs.ts), so a postponed run during an attack (up to
// 200 offenders in its answer) would not be recognised, and "since when" would mean
// reading back an unbounded number of runs. Like the watermark beside it (SEEN_KEY) it is
// not sealed: a database writer could reset it, but they can as well delete the attempts.
// It survives a restart, and with two instances the job's lease lets one run at a time
// read and write it.
import { eq } from "drizzle-orm";
import { serviceMeta } from "../../db/schema.ts";
import { serviceMeta as serviceMetaPg } from "../../db/schema-pg.ts";
import { putMeta, writeTransaction, type Db } from "../db.ts";
import type { AnyStore } from "../deps.ts";
import { putMetaPg, type PgDb } from "../pg/store.ts";

export const POSTPONED_KEY = "beveiligingslog-uitgesteld";

/** The daily report names a postponement that lasts longer than this (four quarter-hourly runs, as the alert). */
export const POSTPONED_NOTICE_MS = 3600_000;

/** Runs in a row that postponed the late part, and when the first of them ran. */
export interface Postponement {
  runs: number;
  sinds: string;
}

const VALUE = /^([1-9][0-9]{0,8}) ([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z)$/;

/** The stored value, read strictly: anything else (a writer's edit) counts as none, and the next postponed run starts again at 1. */
export function parsePostponement(value: string | undefined): Postponement | null {
  const m = value === undefined ? null : VALUE.exec(value);
  if (!m || Number.isNaN(Date.parse(m[2]!))) return null;
  return { runs: Number(m[1]), sinds: m[2]! };
}

const formatPostponement = (p: Postponement) => `${p.runs} ${p.sinds}`;

/** The postponement after a run at `now`: one more postponed run (from `now` when none was), or none once the late part was judged. */
export function nextPostponement(before: Postponement | null, postponed: boolean, now: Date): Postponement | null {
  if (!postponed) return null;
  return { runs: (before?.runs ?? 0) + 1, sinds: before?.sinds ?? now.toISOString() };
}

/** Whether the daily report names it: postponed for longer than POSTPONED_NOTICE_MS at `now`. */
export const postponedTooLong = (p: Postponement | null, now: Date): boolean => p !== null && now.getTime() - Date.parse(p.sinds) > POSTPONED_NOTICE_MS;

function readSqlite(db: Db): Postponement | null {
  return parsePostponement(db.select({ value: serviceMeta.value }).from(serviceMeta).where(eq(serviceMeta.key, POSTPONED_KEY)).get()?.value);
}

async function readPg(db: PgDb): Promise<Postponement | null> {
  const [row] = await db.select({ value: serviceMetaPg.value }).from(serviceMetaPg).where(eq(serviceMetaPg.key, POSTPONED_KEY));
  return parsePostponement(row?.value);
}

/** The postponement as stored, on either store (on SQLite none is ever written, unless the database came from PostgreSQL). */
export async function readPostponement(store: AnyStore): Promise<Postponement | null> {
  return store.kind === "pg" ? readPg(store.db) : readSqlite(store.db);
}

/**
 * Records a run's outcome for the late part: counted when postponed, removed when judged.
 * A run that judged it with nothing recorded writes nothing (most runs: on SQLite a write
 * waits for the lock). Not called for a run whose late part failed: that run neither
 * postponed nor judged it, and fails visibly itself (taken-controle).
 */
export async function recordPostponement(store: AnyStore, postponed: boolean, now: Date): Promise<void> {
  if (store.kind === "pg") {
    const db = store.db;
    const before = await readPg(db);
    const next = nextPostponement(before, postponed, now);
    if (next === null) {
      if (before !== null) await db.delete(serviceMetaPg).where(eq(serviceMetaPg.key, POSTPONED_KEY));
      return;
    }
    await putMetaPg(db, POSTPONED_KEY, formatPostponement(next));
    return;
  }
  const db = store.db;
  // Checked before taking the write lock: nearly every run has nothing to remove.
  if (!postponed && db.select({ key: serviceMeta.key }).from(serviceMeta).where(eq(serviceMeta.key, POSTPONED_KEY)).get() === undefined) return;
  await writeTransaction(store.sqlite, () => {
    const next = nextPostponement(readSqlite(db), postponed, now);
    if (next === null) {
      db.delete(serviceMeta).where(eq(serviceMeta.key, POSTPONED_KEY)).run();
      return;
    }
    putMeta(db, POSTPONED_KEY, formatPostponement(next));
  });
}
