// dagrapport's send mark: which run last began to hand its report to the transport
// (service_meta 'dagrapport-verzenden', the run's id). Written, committed, right before
// the send; nothing is written after it: the run's own end in job_runs (written by the
// job wrapper) says how the send went. So a run killed while its report went out leaves
// a mark whose run never ended, and the next run for the same scheduled time learns
// that the report may have arrived instead of sending a second copy (src/jobs/dagrapport.ts).
// One mark is enough: the job's lease lets one run at a time take it.
import { and, eq } from "drizzle-orm";
import { jobRuns, serviceMeta } from "../../db/schema.ts";
import { jobRuns as jobRunsPg, serviceMeta as serviceMetaPg } from "../../db/schema-pg.ts";
import { putMeta, writeTransaction, type Db, type Store } from "../db.ts";
import type { AnyStore } from "../deps.ts";
import { putMetaPg, type PgDb } from "../pg/store.ts";

/** The service_meta key of the mark. */
export const SEND_MARK_KEY = "dagrapport-verzenden";

/** The run an earlier mark names, as job_runs has it now; null when the row is gone (pruned). */
export interface MarkedRun {
  runId: number;
  gestart: string;
  /** 'bezig': the run never ended (killed, or frozen past its lease). */
  uitkomst: string;
  /** The seal of its start: only a sealed run (not one a database writer inserted) holds a report back. */
  zegel: string | null;
}

/**
 * What this run does with the mark, given the earlier run it names (null: no mark, or a
 * mark whose run is gone): `send` replaces it by this run's own before the send; otherwise
 * it is removed, so the call after this one sends.
 */
export type MarkDecision = (earlier: MarkedRun | null) => { send: boolean };

const markedRunId = (value: string | undefined) => (value !== undefined && /^[1-9][0-9]{0,15}$/.test(value) ? Number(value) : null);

function takeSqlite(db: Db, runId: number, decide: MarkDecision): MarkedRun | null {
  const mark = db.select({ value: serviceMeta.value }).from(serviceMeta).where(eq(serviceMeta.key, SEND_MARK_KEY)).get();
  const id = markedRunId(mark?.value);
  const earlier =
    id === null
      ? null
      : (db
          .select({ runId: jobRuns.id, gestart: jobRuns.gestart, uitkomst: jobRuns.uitkomst, zegel: jobRuns.zegel })
          .from(jobRuns)
          .where(and(eq(jobRuns.id, id), eq(jobRuns.job, "dagrapport")))
          .get() ?? null);
  if (decide(earlier).send) {
    putMeta(db, SEND_MARK_KEY, String(runId));
  } else {
    db.delete(serviceMeta).where(eq(serviceMeta.key, SEND_MARK_KEY)).run();
  }
  return earlier;
}

async function takePg(db: PgDb, runId: number, decide: MarkDecision): Promise<MarkedRun | null> {
  return db.transaction(async (tx) => {
    const [mark] = await tx.select({ value: serviceMetaPg.value }).from(serviceMetaPg).where(eq(serviceMetaPg.key, SEND_MARK_KEY)).for("update");
    const id = markedRunId(mark?.value);
    const [earlier] =
      id === null
        ? []
        : await tx
            .select({ runId: jobRunsPg.id, gestart: jobRunsPg.gestart, uitkomst: jobRunsPg.uitkomst, zegel: jobRunsPg.zegel })
            .from(jobRunsPg)
            .where(and(eq(jobRunsPg.id, id), eq(jobRunsPg.job, "dagrapport")));
    if (decide(earlier ?? null).send) {
      await putMetaPg(tx, SEND_MARK_KEY, String(runId));
    } else {
      await tx.delete(serviceMetaPg).where(eq(serviceMetaPg.key, SEND_MARK_KEY));
    }
    return earlier ?? null;
  });
}

/**
 * Reads the mark and, in the same transaction, replaces it by `runId` or removes it, as
 * `decide` says. On SQLite it waits for another process's write lock without blocking the
 * event loop (writeTransaction), at most BUSY_TIMEOUT_MS; then the SQLITE_BUSY is thrown
 * and nothing is sent. Returns the earlier run the mark named.
 */
export function takeSendMark(store: AnyStore, runId: number, decide: MarkDecision): Promise<MarkedRun | null> {
  if (store.kind === "pg") return takePg(store.db, runId, decide);
  const s: Store = store;
  return writeTransaction(s.sqlite, () => takeSqlite(s.db, runId, decide));
}
