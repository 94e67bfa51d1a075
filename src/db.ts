// Opening the embedded SQLite database: pragmas, then the embedded migrations.
import { Database } from "bun:sqlite";
import { createHash } from "node:crypto";
import { mkdirSync } from "node:fs";
import { dirname } from "node:path";
import { drizzle, type BunSQLiteDatabase } from "drizzle-orm/bun-sqlite";
import { embeddedMigrations } from "../db/migrations.gen.ts";
import * as schema from "../db/schema.ts";

export type Db = BunSQLiteDatabase<typeof schema>;

export interface Store {
  /** Drizzle over the connection, for ordinary queries. */
  db: Db;
  /** The raw connection, for streaming (`iterate`) and hand-tuned statements. */
  sqlite: Database;
  path: string;
  close(): void;
}

/** How long a statement waits for another process's write lock before SQLITE_BUSY. */
export const BUSY_TIMEOUT_MS = 5000;

export function applyPragmas(sqlite: Database): void {
  sqlite.run(`PRAGMA busy_timeout = ${BUSY_TIMEOUT_MS}`);
  sqlite.run("PRAGMA journal_mode = WAL");
  // NORMAL in WAL mode is durable against a process crash and consistent after a
  // power loss (it may lose the last commits, never corrupt).
  sqlite.run("PRAGMA synchronous = NORMAL");
  sqlite.run("PRAGMA foreign_keys = ON");
}

/** The embedded migrations in drizzle's format (same hashes as its folder migrator). */
export function embeddedMigrationMetas() {
  return embeddedMigrations.journal.entries.map((entry) => {
    const text = embeddedMigrations.sql[entry.tag];
    if (text === undefined) throw new Error(`migration ${entry.tag} is not embedded`);
    return {
      sql: text.split("--> statement-breakpoint"),
      bps: entry.breakpoints,
      folderMillis: entry.when,
      hash: createHash("sha256").update(text).digest("hex"),
    };
  });
}

export function migrate(db: Db): void {
  // drizzle's own migrator reads a folder; this feeds the same dialect migrator the
  // embedded copy, recording applied migrations in __drizzle_migrations as usual.
  const internal = db as unknown as {
    dialect: { migrate(m: unknown, session: unknown, config: unknown): void };
    session: unknown;
  };
  internal.dialect.migrate(embeddedMigrationMetas(), internal.session, {});
}

export function installedAt(sqlite: Database): Date | null {
  const row = sqlite.query("SELECT value FROM service_meta WHERE key = 'geinstalleerd'").get() as { value: string } | null;
  return row ? new Date(row.value) : null;
}

export function openStore(path: string, now: Date = new Date()): Store {
  if (path !== ":memory:") mkdirSync(dirname(path), { recursive: true });
  const sqlite = new Database(path, { create: true, strict: true });
  // auto_vacuum only takes effect on an empty database (or after VACUUM): set it
  // before the first table exists so db-onderhoud can reclaim pages incrementally.
  const tables = sqlite.query("SELECT count(*) AS n FROM sqlite_schema").get() as { n: number };
  if (tables.n === 0) sqlite.run("PRAGMA auto_vacuum = INCREMENTAL");
  applyPragmas(sqlite);
  const db = drizzle(sqlite, { schema });
  migrate(db);
  // taken-controle does not call a job missed before its first expected time after
  // the service was installed: the first start on this database is that moment.
  sqlite.query("INSERT OR IGNORE INTO service_meta (key, value) VALUES ('geinstalleerd', ?)").run(now.toISOString());
  return {
    db,
    sqlite,
    path,
    close() {
      sqlite.close();
    },
  };
}
