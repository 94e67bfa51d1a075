// beveiligingslog-retentie's deletion on PostgreSQL: login attempts older than `grens`,
// in batches of one short transaction each. PostgreSQL has no database-wide write lock:
// a DELETE locks only the rows it deletes, so the host application's inserts never wait
// for it and no gap between batches is needed. The batches are still short, because a
// long transaction holds back VACUUM and replication on a busy server: each is sized to
// take about TARGET_MS, adapting to the server.
//
// Safe beside a second instance running the same deletion (the job lease should prevent
// that, this does not rely on it): a row both DELETEs reach is deleted and counted by one
// of them; the other waits for its row lock and then finds it gone. A batch is one
// statement, so one already sent when the service is killed still commits on the server
// (test/hardening-crash waits for it); the next run starts after it.
import type { SQL } from "bun";
import type { RetentionOptions } from "../audit/retention.ts";

/** What a batch aims at, ms: as on SQLite, short enough that nothing waits long on it. */
const TARGET_MS = 100;
const MIN_ROWS = 500;
const MAX_ROWS = 200_000;

/** Deletes login attempts older than grens (ISO 8601 UTC with milliseconds); returns how many. */
export async function deleteOldLoginAttemptsPg(sql: SQL, grens: string, o: Pick<RetentionOptions, "batchSize" | "afterBatch" | "onBatch" | "clock"> = {}): Promise<number> {
  const now = o.clock ?? (() => performance.now());
  let size = o.batchSize ?? 5000;
  let verwijderd = 0;
  // Where the next batch starts on the tijdstip index: the last batch's highest value.
  // Starting each batch from the index's beginning would step over every entry the
  // earlier batches left dead (VACUUM comes later): quadratic at L.
  let from = "";
  for (;;) {
    const t0 = now();
    // The size-th oldest tijdstip from `from` on is this batch's edge; everything up to it
    // goes (a few more when several rows share the edge's value), all of it when fewer
    // are left. Text comparison in byte order: the column is COLLATE "C", as on SQLite.
    const [{ n, last }] = (await sql`
      WITH edge AS (
        SELECT tijdstip FROM login_attempts WHERE tijdstip >= ${from} AND tijdstip < ${grens}
        ORDER BY tijdstip OFFSET ${size - 1} LIMIT 1
      ), gone AS (
        DELETE FROM login_attempts
        WHERE tijdstip >= ${from} AND tijdstip < ${grens} AND tijdstip <= coalesce((SELECT tijdstip FROM edge), ${grens})
        RETURNING tijdstip
      )
      SELECT count(*)::int AS n, max(tijdstip) AS last FROM gone`) as [{ n: number; last: string | null }];
    const lockMs = now() - t0;
    verwijderd += n;
    if (n > 0) o.afterBatch?.(verwijderd);
    o.onBatch?.({ rows: n, chunks: 1, lockMs, commitMs: 0, checkpointMs: 0 });
    if (n === 0) break;
    from = last!;
    if (o.batchSize === undefined) {
      const factor = Math.min(1.5, Math.sqrt(TARGET_MS / Math.max(lockMs, 1)));
      size = Math.max(MIN_ROWS, Math.min(MAX_ROWS, Math.round(size * factor)));
    }
  }
  // A row older than grens that arrives while the walk runs, below where it has got to
  // (an application writing late timestamps), is left for the next run: going back for it
  // would step over every entry this run left dead in the index.
  return verwijderd;
}
