// How far this host's clock is from the PostgreSQL server's. Two instances decide job
// leases by their own clocks (a lease's expiry is written by its holder's clock and
// read by the other's, src/job-lease.ts): clocks more than a lease's renewal apart (30 s)
// let the instance ahead take a live lease and run a job twice. Each instance measured
// against the one server tells the operator before that happens: the daily report,
// /metrics and the start's log name an offset over CLOCK_SKEW_LIMIT_MS.
import type { SQL } from "bun";

/** The offset from the database server's clock above which the operator is told (NTP keeps clocks well within it). */
export const CLOCK_SKEW_LIMIT_MS = 10_000;

/**
 * How far the database server's clock is ahead of this host's, in milliseconds (negative:
 * behind): its clock_timestamp() against the middle of the round trip that read it. This
 * host's wall clock (Date.now()), not the service's clock of its deps, which tests set.
 */
export async function databaseClockOffsetMs(sql: SQL): Promise<number> {
  const t0 = Date.now();
  const [row] = (await sql`SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS ms`) as { ms: number }[];
  const t1 = Date.now();
  return Number(row!.ms) - (t0 + t1) / 2;
}
