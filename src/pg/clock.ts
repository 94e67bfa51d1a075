// The database server's clock, which two instances share. Each host's own clock may be
// off (no NTP, a VM resumed from a snapshot); job leases therefore run on the server's
// clock (src/pg/job-lease.ts): a lease's expiry is written and read by the one clock,
// so an instance whose clock runs ahead cannot take a live lease, and one behind does
// not hold it too long. The runs' own times (job_runs) stay each host's, as its crontab
// fires by it; so each instance still measures its clock against the server's and tells
// the operator an offset over CLOCK_SKEW_LIMIT_MS: the daily report, /metrics and the
// start's log.
import type { SQL } from "bun";
import { sql as sqlText } from "drizzle-orm";
import type { PgDb, PgDbTx } from "./store.ts";

/** The offset from the database server's clock above which the operator is told (NTP keeps clocks well within it). */
export const CLOCK_SKEW_LIMIT_MS = 10_000;

const SERVER_MS = "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS ms";

/**
 * How far the server's clock is ahead of this host's, in milliseconds (negative: behind):
 * its clock_timestamp() against the middle of the round trip that read it. This host's
 * wall clock (Date.now()), not the service's clock of its deps, which tests set.
 */
async function offsetMs(readServerMs: () => Promise<unknown>): Promise<number> {
  const t0 = Date.now();
  const ms = Number(await readServerMs());
  const t1 = Date.now();
  return ms - (t0 + t1) / 2;
}

/** An offset in milliseconds as the operator is shown it: seconds to one decimal. */
export const offsetSeconds = (ms: number) => Math.round(ms / 100) / 10;

/** offsetMs on a connection of its own (the daily report, /metrics, the start). */
export function databaseClockOffsetMs(sql: SQL): Promise<number> {
  return offsetMs(async () => ((await sql.unsafe(SERVER_MS)) as { ms: number }[])[0]!.ms);
}

/**
 * `now` (the service's clock) moved onto the server's clock, read in `db` (inside a
 * transaction: on its connection), to the whole second: a round trip's noise would
 * otherwise move every lease time by a millisecond or so, and a second is nothing
 * against a lease's 30-s renewal. In service `now` is this host's wall clock, so this is
 * the server's time; a test's clock keeps its own time, corrected by the host's offset.
 */
export async function onServerClock(db: PgDb | PgDbTx, now: Date): Promise<Date> {
  const offset = await offsetMs(async () => ((await db.execute(sqlText.raw(SERVER_MS))) as unknown as { ms: number }[])[0]!.ms);
  return new Date(now.getTime() + Math.round(offset / 1000) * 1000);
}
