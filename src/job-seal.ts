// Sealed job runs. A database writer can insert or change any row (docs/audit-chain.md,
// threat model), job_runs included: one row saying audit-verificatie ran "ok" at a time
// after tonight's schedule would make the crontab's call a 204 ("already done") and
// taken-controle report the job as fine, night after night, while the chain it no longer
// checks is rewritten. So a run's start (its job and `gestart`) is signed with the anchor
// key (AUDIT_ANKER_SLEUTEL), which the writer cannot read, and only a sealed run counts:
// for a scheduled call's "already done" (src/job-lease.ts) and for a job's newest run as
// taken-controle, /metrics and the daily report judge it (src/schedule-due.ts). Rows
// without a valid seal newer than a job's newest sealed run are counted and reported
// (taken-controle: alarm `db-integrity`).
//
// The seal is the signature lines of a C2SP signed note (src/audit/note.ts) over the text
// below; it opens under any trusted key, so runs sealed before a key change still count.
// What a run's end says (outcome, status) is not sealed: a job raises its alarms while it
// runs, and those have left the machine by the time a writer could alter its row.
import { and, eq, isNull, lte } from "drizzle-orm";
import { jobRuns } from "../db/schema.ts";
import { jobRuns as jobRunsPg } from "../db/schema-pg.ts";
import type { Config } from "./config.ts";
import type { Db } from "./db.ts";
import type { PgDb } from "./pg/store.ts";
import { auditKeys } from "./audit/keys.ts";
import { openNote, signNote } from "./audit/note.ts";
import type { Keys } from "./audit/records.ts";

/** A run's start as the seal signs it. */
export interface RunStart {
  job: string;
  gestart: string;
}

export interface RunSeal {
  /** The seal of a run's start: signature lines ("— <key name> <base64>\n"). */
  seal(run: RunStart): string;
  /** Whether the row's seal opens under a trusted key for exactly its job and start. */
  sealed(row: RunStart & { zegel: string | null }): boolean;
}

const sealText = (r: RunStart) => `nachtwacht job-run\n${r.job}\n${r.gestart}\n`;

export function runSeal(keys: Keys): RunSeal {
  return {
    seal: (r) => {
      const text = sealText(r);
      return signNote(text, keys.signer).slice(text.length + 1);
    },
    sealed: (row) => row.zegel !== null && openNote(`${sealText(row)}\n${row.zegel}`, keys.verifiers).ok,
  };
}

const perConfig = new WeakMap<object, RunSeal>();

/** The service's seal, from its configuration's keys (parsed once per configuration). */
export function runSealOf(config: Pick<Config, "auditAnkerSleutel" | "auditVertrouwdeSleutels">): RunSeal {
  let s = perConfig.get(config);
  if (!s) perConfig.set(config, (s = runSeal(auditKeys(config))));
  return s;
}

/** How many of a job's newest rows are read to find its newest sealed run. */
export const NEWEST_ROWS = 20;

/** A job's newest sealed run among its newest rows (newest first), and how many rows without a valid seal came before it. */
export function newestSealed<R extends RunStart & { zegel: string | null }>(rows: readonly R[], seal: RunSeal): { run: R | null; vervalst: number } {
  let vervalst = 0;
  for (const r of rows) {
    if (seal.sealed(r)) return { run: r, vervalst };
    vervalst++;
  }
  return { run: null, vervalst };
}

/**
 * Seals the runs recorded before runs were sealed (zegel null), once: at the start that
 * adds the column (openStore, migratePg). Only runs started by `now`: a row dated later is
 * no run of the past and stays unsealed, so it never counts. Whatever a database writer
 * had put in job_runs by then is sealed with them: trust on first use, once.
 */
export function sealLegacyRuns(db: Db, seal: RunSeal, now: Date): number {
  const rows = db.select({ id: jobRuns.id, job: jobRuns.job, gestart: jobRuns.gestart }).from(jobRuns).where(and(isNull(jobRuns.zegel), lte(jobRuns.gestart, now.toISOString()))).all();
  db.transaction((tx) => {
    for (const r of rows) tx.update(jobRuns).set({ zegel: seal.seal(r) }).where(eq(jobRuns.id, r.id)).run();
  });
  return rows.length;
}

/** sealLegacyRuns on PostgreSQL, inside the migrating session's hold of the migration lock. */
export async function sealLegacyRunsPg(db: PgDb, seal: RunSeal, now: Date): Promise<number> {
  const t = jobRunsPg;
  const rows = await db.select({ id: t.id, job: t.job, gestart: t.gestart }).from(t).where(and(isNull(t.zegel), lte(t.gestart, now.toISOString())));
  await db.transaction(async (tx) => {
    for (const r of rows) await tx.update(t).set({ zegel: seal.seal(r) }).where(eq(t.id, r.id));
  });
  return rows.length;
}
