// A write transaction whose outcome the caller is told truthfully, also when the
// connection breaks at its COMMIT. Over a network the server can commit while its answer
// is lost; the error then says nothing of what was stored, and the write API answering
// it with "503, nothing stored" would have a client store a batch without keys twice.
// So the transaction's id is taken first (pg_current_xact_id), and when COMMIT fails the
// server is asked what became of it (pg_xact_status, on another connection of the pool):
// committed → the body's result, as if the answer had come; aborted → the error as it
// was (nothing stored); no answer within COMMIT_STATUS_WAIT_MS → CommitOutcomeUnknown.
// A transaction id means something only on the server that gave it: after a failover
// (a promoted standby, the URL's name pointing elsewhere) the server asked may have
// given the same id to a transaction of its own, and "committed" would then answer 200
// for rows that are not there. So the server's start time is taken with the id and
// asked with the status, and only an answer from the same server run counts (one that
// restarted counts as another: unknown rather than a guess). A crash recovery keeps the
// start time, and when the crash took the transaction's unflushed WAL with it, the
// recovered server gives its id out again. So each transaction also writes a row of its
// own to commit_markers (a random token): "committed" counts only with that row there;
// without it, the id committed for another transaction and this one is gone (aborted).
import type { SQL } from "bun";
import { drizzle } from "drizzle-orm/bun-sql";
import * as schema from "../../db/schema-pg.ts";
import { log } from "../logger.ts";
import type { PgDb } from "./store.ts";

/** How long the server is asked what became of a transaction whose COMMIT failed. */
const COMMIT_STATUS_WAIT_MS = 5_000;
const COMMIT_STATUS_STEP_MS = 50;

/** A transaction's id, the server run (SERVER_RUN) that gave it, and the token of its commit_markers row. */
export interface Xact {
  xid: string;
  server: string;
  token: string;
}

/**
 * Which run of which server answers: its start time, to the microsecond. A promoted
 * standby was started at a time of its own, and a server that restarted has a new one.
 */
const SERVER_RUN = "extract(epoch FROM pg_postmaster_start_time())::text";

/** The COMMIT failed and the server could not be asked whether it was carried out: the write may or may not be stored. */
export class CommitOutcomeUnknown extends Error {
  constructor(
    readonly commitError: unknown,
    /** What the caller can do about it, for whoever reads the message. */
    advice = "",
  ) {
    super(`Onbekend of de schrijfactie is opgeslagen: de verbinding met de database viel weg tijdens COMMIT en dezelfde databaseserver gaf daarna geen antwoord.${advice === "" ? "" : ` ${advice}`}`);
    this.name = "CommitOutcomeUnknown";
  }
}

/**
 * The first statement of a transaction whose outcome must be certain (parameter $1: a new
 * token): its marker row, up to two markers past any use deleted (ones other
 * transactions are deleting are skipped, so nobody waits), and its id and server run.
 */
const BEGIN_CERTAIN_SQL = `
  WITH marker AS (INSERT INTO commit_markers (token) VALUES ($1)),
  old AS (
    DELETE FROM commit_markers WHERE token IN (
      SELECT token FROM commit_markers WHERE at < now() - interval '10 minutes' ORDER BY at LIMIT 2 FOR UPDATE SKIP LOCKED))
  SELECT pg_current_xact_id()::text AS xid, ${SERVER_RUN} AS server`;

/** Starts a certain transaction in `tx` (certainTransaction does): its marker, id and server run. */
export async function beginCertain(tx: SQL): Promise<Xact> {
  const token = crypto.randomUUID();
  const [r] = (await tx.unsafe(BEGIN_CERTAIN_SQL, [token])) as { xid: string; server: string }[];
  return { ...r!, token };
}

/** The write API's advice with an unknown outcome (src/pg/ingest.ts). */
export const WRITE_API_ADVICE =
  "Herhaal een batch waarin elke entry een sleutel heeft gerust; een batch zonder sleutels (inlogpogingen) kan bij herhalen dubbel worden opgeslagen.";

/**
 * `body` in a transaction of `sql` with `options` (sql.begin's; "" for the server's
 * defaults), its outcome made certain as described above; `advice` goes into
 * CommitOutcomeUnknown's message.
 */
export async function certainTransaction<T>(sql: SQL, options: string, body: (tx: SQL) => Promise<T>, advice = ""): Promise<T> {
  let xact: Xact | null = null;
  let done: { result: T } | null = null;
  const inTransaction = async (tx: SQL) => {
    xact = await beginCertain(tx);
    done = { result: await body(tx) };
    return done.result;
  };
  try {
    return await (options === "" ? sql.begin(inTransaction) : sql.begin(options, inTransaction));
  } catch (e) {
    // An error from the body rolled back; only one at COMMIT leaves the outcome open.
    if (done === null || xact === null) throw e;
    const status = await commitStatus(sql, xact);
    if (status === "aborted") throw e;
    if (status === "committed") {
      log("warn", "PostgreSQL: the connection failed at COMMIT, but the server had committed; answered with the result", { error: String(e) });
      return (done as { result: T }).result;
    }
    throw new CommitOutcomeUnknown(e, advice);
  }
}

/**
 * What became of the transaction, once no longer in progress, asked of the server run that
 * gave its id: committed (its marker there too), aborted, or null when that run does not
 * answer within COMMIT_STATUS_WAIT_MS.
 */
export async function commitStatus(sql: SQL, xact: Xact): Promise<"committed" | "aborted" | null> {
  const deadline = performance.now() + COMMIT_STATUS_WAIT_MS;
  let unmarked = 0;
  for (;;) {
    const status = (await askSameRun<{ status: string | null }>(sql, "SELECT pg_xact_status($1::xid8) AS status", xact.xid, xact, deadline))?.status;
    if (status === "aborted") return status;
    if (status === "committed") {
      // Asked in a statement of its own, after the status: a snapshot taken in the same
      // statement could still see the transaction as running.
      const marked = (await askSameRun<{ marked: boolean }>(sql, "SELECT EXISTS (SELECT 1 FROM commit_markers WHERE token = $1) AS marked", xact.token, xact, deadline))?.marked;
      if (marked === true) return "committed";
      // Not (yet) visible: between marking a transaction committed and making it visible
      // the server takes a moment; asked again, and three times without it means the id
      // committed for another transaction.
      if (marked === false && ++unmarked >= 3) return "aborted";
    }
    // 'in progress': the server has not yet seen the COMMIT or the connection's end.
    if (performance.now() + COMMIT_STATUS_STEP_MS > deadline) return null;
    await Bun.sleep(COMMIT_STATUS_STEP_MS);
  }
}

/**
 * The row of `query` (one parameter, $1) as the server run that gave the transaction
 * answers it; null when another run answers (a failover says nothing of this
 * transaction), none can be reached (yet), or the deadline passes first.
 */
async function askSameRun<R>(sql: SQL, query: string, param: string, xact: Xact, deadline: number): Promise<R | null> {
  // A new connection can hang until the pool's connection timeout: no longer than the deadline.
  const asked = (sql.unsafe(`${query}, ${SERVER_RUN} AS server`, [param]) as Promise<(R & { server: string })[]>).then(
    (rows) => (rows[0]?.server === xact.server ? rows[0] : null),
    () => null,
  );
  return Promise.race([asked, Bun.sleep(Math.max(0, deadline - performance.now())).then(() => null)]);
}

/** certainTransaction with Drizzle over the transaction, for work written with its builder. */
export function certainDbTransaction<T>(sql: SQL, options: string, body: (tx: PgDb) => Promise<T>): Promise<T> {
  return certainTransaction(sql, options, (tx) => body(drizzle({ client: tx, schema })));
}
