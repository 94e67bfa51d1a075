// Opening a PostgreSQL database (DATABASE_URL=postgres://…): Bun's built-in client
// under Drizzle's bun-sql driver, then the embedded PostgreSQL migrations.
//
// Why Bun's SQL and not postgres.js: it is built into the runtime the binary already
// carries (no package, nothing to bundle), it pools connections, and it speaks COPY
// FROM STDIN / TO STDOUT as streams, which `migrate-to` and the verification floor use.
import { SQL } from "bun";
import { existsSync } from "node:fs";
import { sql as sqlText } from "drizzle-orm";
import { drizzle, type BunSQLDatabase } from "drizzle-orm/bun-sql";
import { migrate as drizzleMigrate } from "drizzle-orm/bun-sql/migrator";
import { embeddedMigrations } from "../../db/migrations-pg.gen.ts";
import * as schema from "../../db/schema-pg.ts";
import { BUSY_TIMEOUT_MS, migrationsFolder, newerSchemaProblem, SchemaTooNew, UnprovedCopy } from "../db.ts";
import { certainDbTransaction } from "./commit.ts";
import { INSTALLED, keyChange, markPastSealed, markSealKey, pastRowsToSeal, resealRowsPg, SEAL_COLUMNS, sealLegacyRowsPg, type RowSeal, type SealColumns } from "../row-seal.ts";

export type PgDb = BunSQLDatabase<typeof schema>;

export interface PgStore {
  /** Which engine (Store in src/db.ts is the embedded SQLite kind). */
  kind: "pg";
  /** DATABASE_URL: verification workers open their own connections with it. */
  url: string;
  /** Drizzle over the pool, for ordinary queries. */
  db: PgDb;
  /** The pool itself, for transactions, cursors and COPY. */
  sql: SQL;
  /** Closes the pool; with `timeoutSeconds`, queries still running then are cut off instead of waited for. */
  close(timeoutSeconds?: number): Promise<void>;
}

/**
 * Advisory lock keys (pg_advisory_lock(int4, int4)): a first number of nachtwacht's own
 * (LOCK_NAMESPACE here, CHAIN_LOCK in src/pg/chain.ts), so its locks never collide with
 * another application's on the same server.
 */
export const LOCK_NAMESPACE = 0x6e77; // "nw"
export const LOCK_MIGRATE = 0;
/**
 * Held by every take of a job lease (src/pg/job-lease.ts) until its transaction ends:
 * one key for all jobs, because a take is a few statements long and SQLite serialises
 * all of them too; per job it would need a number derived from the job's name.
 */
export const LOCK_JOB_LEASE = 1;
/** Held while tenants' id sequence is moved past an id given by PUT /api/tenants/{id} (putTenantPg). */
export const LOCK_TENANT_IDS = 2;
/**
 * Shared by every batch of login attempts (storeLoginAttemptsPg) from before it takes its
 * ids until it commits; taken exclusively by beveiligingslog-analyse to read the highest
 * id (storedLoginIdsPg), only tried (pg_try_advisory_xact_lock): a waiting exclusive
 * request would hold up every new batch behind it. A sequence hands out ids in order but transactions commit in any
 * order: without it, a batch that took lower ids and committed after the read would lie
 * below the watermark, never judged.
 */
export const LOCK_LOGIN_IDS = 3;
/** Held while backup-status records a report's time in the witness file beside the anchor file, which both instances share (withBackupWitnessLockPg). */
export const LOCK_BACKUP_WITNESS = 4;

/**
 * How long a statement of the service waits for a lock another session holds (a row, a
 * table, an advisory lock: a hung appender of the host application, an operator's
 * VACUUM FULL) before it gives up with 55P03, which answers 503 with Retry-After
 * (src/http/errors.ts): SQLite's busy timeout, so neither store leaves a request
 * hanging behind someone else's lock.
 */
export const LOCK_TIMEOUT_MS = BUSY_TIMEOUT_MS;

/**
 * How long a nachtwacht session may sit in an open transaction without a statement before
 * the server ends it: an instance frozen mid-batch (SIGSTOP, a paused VM; its kernel
 * still answers TCP, so no keepalive notices) otherwise held its tenants' chain locks, and
 * every other instance's writes to them got 503, for as long as it stayed frozen. Far
 * above any pause of nachtwacht's own inside a transaction (hashing a chunk, an fsync of
 * the anchor file); the frozen batch is rolled back (its COMMIT's outcome is then looked
 * up as aborted, src/pg/commit.ts).
 */
export const IDLE_IN_TRANSACTION_MS = 60_000;

/**
 * The session every nachtwacht connection starts with (startup parameters, which a role's
 * or database's settings do not override). `search_path` is nachtwacht's schema alone: by
 * default it begins with "$user", so whoever could create a schema named after the role
 * would have nachtwacht read and write a table of that name there instead (a copy that
 * hides changes made to the real one). `lock_timeout`: no statement waits for someone
 * else's lock longer than a request would (also a verification's or a command's reads).
 * `idle_in_transaction_session_timeout`: IDLE_IN_TRANSACTION_MS.
 */
export const SESSION = {
  search_path: "public",
  lock_timeout: String(LOCK_TIMEOUT_MS),
  idle_in_transaction_session_timeout: String(IDLE_IN_TRANSACTION_MS),
} as const;

/** A connection pool of nachtwacht's to `url`, with its SESSION. */
export function pgPool(url: string, max: number): SQL {
  return new SQL(url, { max, connection: { ...SESSION } });
}

/** A transaction of `db` (Drizzle's) as passed to its callback. */
export type PgDbTx = Parameters<Parameters<PgDb["transaction"]>[0]>[0];

/** putMeta (src/db.ts) on PostgreSQL, on `db` or in a transaction's `tx`. */
export async function putMetaPg(db: PgDb | PgDbTx, key: string, value: string): Promise<void> {
  await db.insert(schema.serviceMeta).values({ key, value }).onConflictDoUpdate({ target: schema.serviceMeta.key, set: { value, zegel: null } });
}

/**
 * `work` in a transaction whose statements wait for another session's lock at most
 * `lockWaitMs` instead of the pool's LOCK_TIMEOUT_MS: as long as the caller waits (5 s
 * before an answer, a minute after it), as SQLite's writes wait for the write lock. 0
 * still waits 1 ms, since lock_timeout 0 is no limit. A COMMIT whose answer is lost is
 * looked up (certainDbTransaction): a run's end or a lease's release that was stored is
 * not reported as failed.
 */
export function withLockWait<T>(store: PgStore, lockWaitMs: number, work: (tx: PgDb) => Promise<T>): Promise<T> {
  return certainDbTransaction(store.sql, "", async (tx) => {
    await tx.execute(sqlText.raw(`SET LOCAL lock_timeout = ${Math.max(1, Math.ceil(lockWaitMs))}`));
    return work(tx);
  });
}

/** `seal`: the service's run seal, for the runs recorded before runs were sealed (migratePg). */
export async function openPgStore(url: string, o: { max?: number; seal?: RowSeal; now?: Date; pastMarker?: string; keyMarker?: string } = {}): Promise<PgStore> {
  const sql = pgPool(url, o.max ?? 10);
  try {
    await migratePg(sql, o.seal, o.now, o.pastMarker, o.keyMarker);
  } catch (e) {
    await sql.close();
    throw e;
  }
  return {
    kind: "pg",
    url,
    db: drizzle({ client: sql, schema }),
    sql,
    close: (timeoutSeconds?: number) => sql.close(timeoutSeconds === undefined ? undefined : { timeout: timeoutSeconds }),
  };
}

/**
 * Marks the first start of the service on this database (as openStore does on SQLite),
 * sealed: taken-controle does not call a job missed before its first expected time after
 * that. Done by migratePg at an instance's first start when given the seal (migrate-to
 * opens its target without one, and copies this row).
 */
export async function markInstalledPg(sql: SQL, seal: RowSeal, now: Date): Promise<void> {
  const value = now.toISOString();
  await sql`INSERT INTO service_meta (key, value, zegel) VALUES (${INSTALLED}, ${value}, ${seal.sealInstalled(value)}) ON CONFLICT (key) DO NOTHING`;
}

/** newerSchemaProblem of a PostgreSQL database (drizzle.__drizzle_migrations): for migratePg and the operator's commands. */
export async function newerPgSchemaProblem(sql: SQL): Promise<string | null> {
  const [{ exists }] = await sql`SELECT to_regclass('drizzle.__drizzle_migrations') IS NOT NULL AS exists`;
  const applied = exists ? Number((await sql`SELECT count(*) AS n FROM drizzle.__drizzle_migrations`)[0].n) : 0;
  return newerSchemaProblem(applied, embeddedMigrations.journal.entries.length);
}

/**
 * service_meta's rows of a move from SQLite (`nachtwacht migrate-to`, src/pg/migrate-to.ts):
 * MOVE_BEGUN_KEY is written in the copy's own transaction, PROVED_KEY only once the copy
 * is proved equal to the source and the source unchanged meanwhile.
 */
export const MOVE_BEGUN_KEY = "migrate-to-begonnen";
export const PROVED_KEY = "migrate-to-bewezen";

/**
 * Where a database stands as a move's copy: "geen" (not a copy: a fresh installation, or
 * one from before MOVE_BEGUN_KEY), "bewezen", or "onbewezen" — the copy committed but its
 * proof failed (`kopie-wijkt-af`), found the source written to meanwhile (`bron-gewijzigd`:
 * entries received after the snapshot are missing, and the service would give their seqs
 * out again with other hashes), or never ran (the command was stopped).
 */
export async function moveState(sql: SQL): Promise<"geen" | "bewezen" | "onbewezen"> {
  const [{ exists }] = await sql`SELECT to_regclass('service_meta') IS NOT NULL AS exists`;
  if (!exists) return "geen";
  const keys = new Set(((await sql`SELECT key FROM service_meta WHERE key IN (${MOVE_BEGUN_KEY}, ${PROVED_KEY})`) as { key: string }[]).map((r) => r.key));
  return keys.has(PROVED_KEY) ? "bewezen" : keys.has(MOVE_BEGUN_KEY) ? "onbewezen" : "geen";
}

/** What an unproved copy is and what to do with it: for the service's start (its one line, src/start-failure.ts) and the operator's commands. */
export const unprovedCopyMelding = (where: string) =>
  `${where} bevat een kopie van nachtwacht migrate-to die nooit is bewezen (het commando werd gestopt, het bewijs mislukte, of in het SQLite-bestand werd tijdens het kopiëren geschreven): ` +
  "entries van na de kopie kunnen ontbreken. Niet gebruiken: verwijder die database, maak haar leeg opnieuw aan en draai migrate-to opnieuw terwijl de service stilstaat";

/**
 * Applies the embedded migrations once, however many instances start at the same
 * moment: the first holds a session advisory lock while it migrates, the others wait
 * for it and then find nothing left to do. With `seal` (the service's start), a move's
 * unproved copy is refused (UnprovedCopy) before anything is written, and a proved one's
 * rows are not sealed as if this were their first start (their seals came along from the
 * SQLite installation; sealing the unsealed ones would seal what a database writer forged).
 */
export async function migratePg(sql: SQL, seal?: RowSeal, now: Date = new Date(), pastMarker?: string, keyMarker?: string): Promise<void> {
  const conn = await sql.reserve();
  try {
    // Waits as long as another instance migrates, and its DDL for whatever it has to (no lock timeout here).
    await conn`SET lock_timeout = 0`;
    await conn`SELECT pg_advisory_lock(${LOCK_NAMESPACE}, ${LOCK_MIGRATE})`;
    // Nothing written into a database of a newer version (an older binary put back).
    const newer = await newerPgSchemaProblem(conn as unknown as SQL);
    if (newer !== null) {
      await conn`SELECT pg_advisory_unlock(${LOCK_NAMESPACE}, ${LOCK_MIGRATE})`;
      await conn`RESET lock_timeout`;
      throw new SchemaTooNew(newer);
    }
    const move = seal ? await moveState(conn as unknown as SQL) : "geen";
    if (move === "onbewezen") {
      await conn`SELECT pg_advisory_unlock(${LOCK_NAMESPACE}, ${LOCK_MIGRATE})`;
      await conn`RESET lock_timeout`;
      throw new UnprovedCopy(unprovedCopyMelding("DATABASE_URL"));
    }
    const m = migrationsFolder(embeddedMigrations);
    try {
      const db = drizzle({ client: conn as unknown as SQL, schema });
      // Which seal columns these migrations add: then the rows already recorded are sealed (openStore on SQLite does the same).
      const hasColumn = async ([table, column]: readonly [string, string]) =>
        ((await conn`SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ${table} AND column_name = ${column}`) as unknown[]).length > 0;
      const had = {} as SealColumns;
      for (const [kind, column] of Object.entries(SEAL_COLUMNS)) had[kind as keyof SealColumns] = await hasColumn(column);
      await drizzleMigrate(db, { migrationsFolder: m.folder });
      // A proved copy at its first start here (no marker beside this anchor file): only
      // the kinds of rows these migrations seal anew, as without a marker.
      const firstStartOfCopy = move === "bewezen" && pastMarker !== undefined && !existsSync(pastMarker);
      const toSeal = seal ? pastRowsToSeal(firstStartOfCopy ? undefined : pastMarker, had) : null;
      if (seal && toSeal) {
        await sealLegacyRowsPg(db, seal, now, toSeal);
        // The install time, at this instance's first start only (as openStore on SQLite).
        await markInstalledPg(conn as unknown as SQL, seal, now);
      }
      if (seal) markPastSealed(pastMarker, now);
      // After a key change, the rows sealed with the key before, once (openStore on SQLite does the same).
      const change = seal ? keyChange(keyMarker, seal) : null;
      if (seal && change) markSealKey(keyMarker!, seal, change.former && (await resealRowsPg(db, seal, change.former)));
    } finally {
      m.remove();
      await conn`SELECT pg_advisory_unlock(${LOCK_NAMESPACE}, ${LOCK_MIGRATE})`;
      await conn`RESET lock_timeout`;
    }
  } finally {
    conn.release();
  }
}
