// audit-verificatie's own queries on PostgreSQL (the job and its rules are
// src/jobs/audit-verificatie.ts; the verification itself is src/pg/offline.ts): the
// tenants it names, the bound on the number of entries that sizes its worker threads,
// and each tenant's latest result, kept for the reports in the same rows as on SQLite.
import { max, sql } from "drizzle-orm";
import { auditEntries, auditVerificationState, tenants } from "../../db/schema-pg.ts";
import { stateNotAfter } from "../row-seal.ts";
import type { PgDb } from "./store.ts";

/** Rows per INSERT: seven parameters each, far below PostgreSQL's 65535 per statement. */
const ROWS_PER_STATEMENT = 1000;

/** Every tenant, by id. */
export function tenantNamesPg(db: PgDb): Promise<{ id: number; naam: string }[]> {
  return db.select({ id: tenants.id, naam: tenants.naam }).from(tenants).orderBy(tenants.id);
}

/** The highest audit entry id, 0 without entries: an upper bound on their number (see verificationWorkers). */
export async function maxAuditEntryIdPg(db: PgDb): Promise<number> {
  const [row] = await db.select({ entries: max(auditEntries.id) }).from(auditEntries);
  return Number(row?.entries ?? 0);
}

/** Keeps each tenant's latest result, all of the run's rows in one transaction (as SQLite's). */
export async function saveVerificationStatePg(db: PgDb, rows: readonly (typeof auditVerificationState.$inferInsert)[], writtenAt: Date): Promise<void> {
  if (rows.length === 0) return;
  const s = auditVerificationState;
  await db.transaction(async (tx) => {
    for (let i = 0; i < rows.length; i += ROWS_PER_STATEMENT) {
      await tx
        .insert(s)
        .values(rows.slice(i, i + ROWS_PER_STATEMENT))
        .onConflictDoUpdate({
          target: s.tenantId,
          // every column but the key, from the row this run wrote
          set: {
            gecontroleerd: sql`excluded.gecontroleerd`,
            intact: sql`excluded.intact`,
            aantalEntries: sql`excluded.aantal_entries`,
            foutSeq: sql`excluded.fout_seq`,
            foutEntryId: sql`excluded.fout_entry_id`,
            foutReden: sql`excluded.fout_reden`,
            zegel: sql`excluded.zegel`,
          },
          // The newest check stays, and a row dated ahead is overwritten, as on SQLite (saveStateStatement in src/jobs/audit-verificatie.ts).
          setWhere: sql`excluded.gecontroleerd >= ${s.gecontroleerd} OR ${s.gecontroleerd} > ${stateNotAfter(writtenAt)}`,
        });
    }
  });
}
