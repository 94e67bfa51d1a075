// Opening the embedded SQLite database: pragmas, then the embedded migrations.
import { Database } from "bun:sqlite";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { eq, sql, type SQL } from "drizzle-orm";
import { drizzle, type BunSQLiteDatabase } from "drizzle-orm/bun-sqlite";
import { migrate as drizzleMigrate } from "drizzle-orm/bun-sqlite/migrator";
import type { AnySQLiteColumn } from "drizzle-orm/sqlite-core";
import { embeddedMigrations } from "../db/migrations.gen.ts";
import * as schema from "../db/schema.ts";
import { INSTALLED, keyChange, markPastSealed, markSealKey, pastRowsToSeal, resealRows, SEAL_COLUMNS, sealLegacyRows, type RowSeal, type SealColumns } from "./row-seal.ts";
import { serviceMeta } from "../db/schema.ts";

export type Db = BunSQLiteDatabase<typeof schema>;

export interface Store {
  /** Which engine: the embedded SQLite file (PgStore in src/pg/store.ts is the other kind). */
  kind: "sqlite";
  /** Drizzle over the connection, for ordinary queries. */
  db: Db;
  /** The raw connection, for streaming (`iterate`) and hand-tuned statements. */
  sqlite: Database;
  path: string;
  close(): void;
}

/**
 * Statements prepared once per connection (drizzle's `.prepare()` with placeholders),
 * for queries run per tenant or per message: building and preparing a query on every
 * call took three times as long as running it (weekly statistics, bench S). They run on
 * the Store's one connection, inside whatever transaction is open on it.
 */
export function preparedPerConnection<T>(prepare: (db: Db) => T): (db: Db) => T {
  const cache = new WeakMap<Db, T>();
  return (db) => {
    let prepared = cache.get(db);
    if (prepared === undefined) {
      prepared = prepare(db);
      cache.set(db, prepared);
    }
    return prepared;
  };
}

/**
 * Sets a service_meta value that carries no seal (a watermark, a mark of the job that
 * owns the key), in the caller's transaction: an earlier seal of the row does not stay
 * beside a value it was not made for. putMetaPg on PostgreSQL.
 */
export function putMeta(db: Db, key: string, value: string): void {
  db.insert(serviceMeta).values({ key, value }).onConflictDoUpdate({ target: serviceMeta.key, set: { value, zegel: null } }).run();
}

/** `excluded.<column>` in an upsert's SET: the value the insert that conflicted would have written. */
export function excluded(column: AnySQLiteColumn): SQL {
  return sql`excluded.${sql.identifier(column.name)}`;
}

/** How long a statement waits for another process's write lock before SQLITE_BUSY. */
export const BUSY_TIMEOUT_MS = 5000;

export function applyPragmas(sqlite: Database): void {
  // Raw SQL: Drizzle has no builder for pragmas.
  sqlite.run(`PRAGMA busy_timeout = ${BUSY_TIMEOUT_MS}`);
  sqlite.run("PRAGMA journal_mode = WAL");
  // FULL: every COMMIT reaches the disk before it returns, so what the write API answered
  // 200 for survives a power loss too (NORMAL could lose the last commits, and an
  // application that dropped those batches from its outbox would later find other
  // entries under their receipts' seq). It costs an fsync per COMMIT: 0.15–0.3 ms here
  // (docs/performance.md, round 11).
  sqlite.run("PRAGMA synchronous = FULL");
  sqlite.run("PRAGMA foreign_keys = ON");
}

/** Embedded migrations: drizzle's journal and each migration's SQL by tag (db/*.gen.ts). */
export interface EmbeddedMigrations {
  journal: { entries: { tag: string }[] };
  sql: Record<string, string>;
}

/**
 * Drizzle's public migrators read a folder, and the compiled binary has none: this
 * writes the embedded copy to a private temporary directory (mkdtemp: mode 0700) for
 * the caller to migrate from and remove. The files are the same as in db/migrations
 * (db/migrations-pg), hence the same hashes and rows as migrating from there.
 */
export function migrationsFolder(embedded: EmbeddedMigrations): { folder: string; remove(): void } {
  const folder = mkdtempSync(join(tmpdir(), "nachtwacht-migrations-"));
  const remove = () => rmSync(folder, { recursive: true, force: true });
  try {
    mkdirSync(join(folder, "meta"));
    writeFileSync(join(folder, "meta", "_journal.json"), JSON.stringify(embedded.journal));
    for (const { tag } of embedded.journal.entries) {
      const text = embedded.sql[tag];
      if (text === undefined) throw new Error(`migration ${tag} is not embedded`);
      writeFileSync(join(folder, `${tag}.sql`), text);
    }
  } catch (e) {
    remove();
    throw e;
  }
  return { folder, remove };
}

/**
 * Why a SQLite file is not at this version's migrations (db/migrations), or null when it
 * is: for the commands that must not migrate it themselves (migrate-to, db-convert). The
 * service's own start migrates, and seals the rows of the past with the key
 * (sealLegacyRows), which a command does not hold.
 */
export function schemaVersionProblem(sqlite: Database): string | null {
  const applied = appliedMigrations(sqlite);
  const known = embeddedMigrations.journal.entries.length;
  if (applied < known) {
    return `de database is van een eerdere versie (${applied} van ${known} migraties toegepast): start de service eenmaal met deze versie, die haar bijwerkt, stop hem en probeer het opnieuw`;
  }
  return newerSchemaProblem(applied, known);
}

/** newerSchemaProblem of a SQLite file: for whatever opens one (openStore, the operator's commands). */
export function newerSqliteSchemaProblem(sqlite: Database): string | null {
  return newerSchemaProblem(appliedMigrations(sqlite), embeddedMigrations.journal.entries.length);
}

/** How many migrations the SQLite file has applied (0 for a new file). */
function appliedMigrations(sqlite: Database): number {
  // Raw SQL: drizzle's own bookkeeping table, outside the schema.
  const hasTable = sqlite.query("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = '__drizzle_migrations'").get() !== null;
  return hasTable ? (sqlite.query("SELECT count(*) AS n FROM __drizzle_migrations").get() as { n: number }).n : 0;
}

/**
 * A database of a newer version than this one (more migrations applied than it knows),
 * on either store: refused by the service's start and the commands, which would
 * otherwise write rows that version's rules do not expect (an older binary put back
 * after an upgrade). Drizzle's migrator only compares dates and would let it through.
 */
export function newerSchemaProblem(applied: number, known: number): string | null {
  return applied > known ? `de database is van een nieuwere versie (${applied} migraties, deze versie kent er ${known}): gebruik die versie` : null;
}

/** Thrown when a database is of a newer version than this binary (newerSchemaProblem). */
export class SchemaTooNew extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SchemaTooNew";
  }
}

/** A PostgreSQL database holding a move's copy that was never proved (moveState, src/pg/store.ts): neither the service nor an operator's command uses it. */
export class UnprovedCopy extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UnprovedCopy";
  }
}

/** Applies the embedded SQLite migrations with drizzle's public migrator (__drizzle_migrations). */
export function migrate(db: Db): void {
  const m = migrationsFolder(embeddedMigrations);
  try {
    drizzleMigrate(db, { migrationsFolder: m.folder });
  } finally {
    m.remove();
  }
}

/**
 * The first start of the service on this database, as it sealed it (src/row-seal.ts);
 * null when the row is gone or its seal does not hold: then no fire time is "before the
 * install", and every missed one is called missed.
 */
export function installedAt(db: Db, seal: RowSeal): Date | null {
  const row = db.select({ value: serviceMeta.value, zegel: serviceMeta.zegel }).from(serviceMeta).where(eq(serviceMeta.key, INSTALLED)).get();
  return row && seal.installedSealed(row) ? new Date(row.value) : null;
}

/**
 * Opens (creating and migrating) the database. `seal`: the service's row seal; when this
 * open's migrations add a seal column (the first start of the version that seals those
 * rows), the rows already recorded are sealed with it (sealLegacyRows), so they count as
 * the runs and reports they are; but never again once `pastMarker` exists
 * (pastRowsToSeal). When `keyMarker` (sealKeyMarker) names another key than `seal`'s, the
 * rows sealed with that key are re-sealed with this one, once (keyChange); when it names a
 * key `seal` does not trust, the open is refused (UntrustedSealKey), the marker unchanged.
 */
export function openStore(
  path: string,
  now: Date = new Date(),
  seal?: RowSeal,
  /** The service's pastSealedMarker: the rows of the past are sealed only while it does not exist. */
  pastMarker?: string,
  /** The service's sealKeyMarker: the key its rows are sealed with. */
  keyMarker?: string,
): Store {
  if (path !== ":memory:") mkdirSync(dirname(path), { recursive: true });
  const sqlite = new Database(path, { create: true, strict: true });
  // Before the first read: another connection closing (its checkpoint) or writing at
  // this moment would otherwise make that read fail at once with SQLITE_BUSY.
  sqlite.run(`PRAGMA busy_timeout = ${BUSY_TIMEOUT_MS}`);
  // auto_vacuum only takes effect on an empty database (or after VACUUM): set it
  // before the first table exists so db-onderhoud can reclaim pages incrementally.
  // Raw SQL: sqlite_schema is SQLite's own table, outside the Drizzle schema.
  const tables = sqlite.query("SELECT count(*) AS n FROM sqlite_schema").get() as { n: number };
  if (tables.n === 0) sqlite.run("PRAGMA auto_vacuum = INCREMENTAL");
  applyPragmas(sqlite);
  const db = drizzle(sqlite, { schema });
  // Raw SQL: SQLite's own table-valued pragma, before the migrations.
  const hasColumn = ([table, column]: readonly [string, string]) => sqlite.query("SELECT 1 FROM pragma_table_info(?) WHERE name = ?").get(table, column) !== null;
  const newer = newerSqliteSchemaProblem(sqlite);
  if (newer !== null) {
    sqlite.close();
    throw new SchemaTooNew(`${path}: ${newer}`);
  }
  const had = {} as SealColumns;
  for (const [kind, column] of Object.entries(SEAL_COLUMNS)) had[kind as keyof SealColumns] = hasColumn(column);
  migrate(db);
  const toSeal = seal ? pastRowsToSeal(pastMarker, had) : null;
  if (seal && toSeal) {
    sealLegacyRows(db, seal, now, toSeal);
    // taken-controle does not call a job missed before its first expected time after
    // the service was installed: the service's first start on this database is that
    // moment, sealed. Marked at that start only (a tool opening the file without the key
    // marks nothing): once the marker exists, an install time a writer deleted stays
    // gone (every fire time is then expected) instead of starting again at this start.
    const value = now.toISOString();
    db.insert(serviceMeta).values({ key: INSTALLED, value, zegel: seal.sealInstalled(value) }).onConflictDoNothing().run();
  }
  if (seal) markPastSealed(pastMarker, now);
  let change: ReturnType<typeof keyChange> = null;
  try {
    change = seal ? keyChange(keyMarker, seal) : null;
  } catch (e) {
    // A refused start (UntrustedSealKey) leaves no open handle behind.
    sqlite.close();
    throw e;
  }
  if (seal && change) markSealKey(keyMarker!, seal, change.former && resealRows(db, seal, change.former));
  return {
    kind: "sqlite",
    db,
    sqlite,
    path,
    close() {
      sqlite.close();
    },
  };
}

// Writing without a synchronous wait for the write lock. bun:sqlite is synchronous, so
// SQLite's busy handler (busy_timeout) would sleep on the event loop while another
// process (the host application, `nachtwacht backup`) holds the lock: every request,
// /health included, would stall with it. retryWhenBusy tries the lock without waiting
// and, when it is taken, tries again after an awaited pause, until a deadline. Used by
// the write API and the retention batches.

export function isBusy(e: unknown): boolean {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === "string" && code.startsWith("SQLITE_BUSY");
}

/**
 * Runs `write` (synchronous; it opens and ends its own transaction) with SQLite's busy
 * wait switched off, so a taken write lock fails at once with SQLITE_BUSY instead of
 * sleeping on the event loop; then tries again after an awaited pause of 1, 2, 4 … 32 ms
 * (with jitter), for at most `deadlineMs`. `write` must only touch the database and
 * leave it unchanged when it throws (a transaction that rolls back): it may run again.
 * Any other error is passed on; after the deadline, the last SQLITE_BUSY.
 */
export async function retryWhenBusy<T>(sqlite: Database, write: () => T, deadlineMs = BUSY_TIMEOUT_MS): Promise<T> {
  const deadline = performance.now() + deadlineMs;
  for (let attempt = 0; ; attempt++) {
    // Synchronous from here to the restore: nothing else on this connection runs in between.
    sqlite.run("PRAGMA busy_timeout = 0");
    try {
      return write();
    } catch (e) {
      if (!isBusy(e) || performance.now() >= deadline) throw e;
    } finally {
      sqlite.run(`PRAGMA busy_timeout = ${BUSY_TIMEOUT_MS}`);
    }
    const pause = Math.min(32, 2 ** attempt);
    await Bun.sleep(pause / 2 + Math.random() * (pause / 2));
  }
}

/**
 * Runs `work` in one IMMEDIATE transaction, waiting for the write lock without blocking
 * the event loop (retryWhenBusy). A Refusal or any other error thrown by `work` rolls the
 * whole transaction back and is passed on.
 */
export function writeTransaction<T>(sqlite: Database, work: () => T, deadlineMs = BUSY_TIMEOUT_MS): Promise<T> {
  return retryWhenBusy(sqlite, () => sqlite.transaction(work).immediate(), deadlineMs);
}
