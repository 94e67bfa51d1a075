import { describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { drizzle } from "drizzle-orm/bun-sqlite";
import { readMigrationFiles } from "drizzle-orm/migrator";
import { renderMigrationsModule } from "../db/embed-migrations.ts";
import { embeddedMigrations } from "../db/migrations.gen.ts";
import { embeddedMigrations as embeddedPgMigrations } from "../db/migrations-pg.gen.ts";
import * as schema from "../db/schema.ts";
import { applyPragmas, installedAt, openStore } from "../src/db.ts";
import { GENESIS_HASH, linkEntries } from "../src/audit/chain.ts";
import { prepareAuditBatch, storeAuditBatch } from "../src/ingest/audit.ts";
import { tempDir, TEST_SEAL } from "./helpers.ts";

const folder = join(import.meta.dir, "..", "db", "migrations");

/**
 * A database as the code before drizzle's public migrator left it: that code fed the
 * embedded files to drizzle's internal dialect migrator itself (hashing them the way
 * the folder migrator does). Only the first `upTo` migrations when given.
 */
function migrateAsBefore(path: string, installed: Date, upTo = embeddedMigrations.journal.entries.length): void {
  const sqlite = new Database(path, { create: true, strict: true });
  sqlite.run("PRAGMA auto_vacuum = INCREMENTAL");
  applyPragmas(sqlite);
  const db = drizzle(sqlite, { schema });
  const metas = embeddedMigrations.journal.entries.slice(0, upTo).map((e) => {
    const text = embeddedMigrations.sql[e.tag]!;
    return { sql: text.split("--> statement-breakpoint"), bps: e.breakpoints, folderMillis: e.when, hash: createHash("sha256").update(text).digest("hex") };
  });
  const internal = db as unknown as { dialect: { migrate(m: unknown, session: unknown, config: unknown): void }; session: unknown };
  internal.dialect.migrate(metas, internal.session, {});
  sqlite.query("INSERT OR IGNORE INTO service_meta (key, value) VALUES ('geinstalleerd', ?)").run(installed.toISOString());
  sqlite.query("INSERT INTO tenants (naam, actief, aangemaakt) VALUES ('A', 1, '2026-01-01T00:00:00.000Z')").run();
  sqlite.close();
}

/** __drizzle_migrations as stored (its `id` is not a rowid alias, so rowid orders it). */
function appliedRows(sqlite: Database) {
  return sqlite.query("SELECT rowid, id, hash, created_at FROM __drizzle_migrations ORDER BY rowid").all() as {
    rowid: number;
    id: number | null;
    hash: string;
    created_at: number;
  }[];
}

function schemaSql(sqlite: Database) {
  return sqlite.query("SELECT type, name, sql FROM sqlite_schema ORDER BY name").all();
}

describe("migrations", () => {
  test("the embedded set equals the migrations folder (run `bun run db:generate` after drizzle-kit generate)", () => {
    const generated = readFileSync(join(import.meta.dir, "..", "db", "migrations.gen.ts"), "utf8");
    expect(generated).toBe(renderMigrationsModule(folder));
    const journal = JSON.parse(readFileSync(join(folder, "meta", "_journal.json"), "utf8"));
    expect(embeddedMigrations.journal).toEqual(journal);
    for (const e of journal.entries) {
      expect(embeddedMigrations.sql[e.tag]).toBe(readFileSync(join(folder, `${e.tag}.sql`), "utf8"));
    }
  });

  test("each store's migrations are dated in the order they are applied: drizzle skips one dated before the newest applied, on every existing installation", () => {
    for (const set of [embeddedMigrations, embeddedPgMigrations]) {
      const entries = set.journal.entries;
      expect(entries.map((e) => e.idx)).toEqual(entries.map((_, i) => i));
      for (let i = 1; i < entries.length; i++) expect(entries[i]!.when).toBeGreaterThan(entries[i - 1]!.when);
    }
  });

  test("a new file is created, migrated, in WAL mode with incremental auto-vacuum", () => {
    const { dir, cleanup } = tempDir();
    const path = join(dir, "sub", "dir", "new.db");
    const store = openStore(path);
    const tables = (store.sqlite.query("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name").all() as { name: string }[]).map((t) => t.name);
    expect(tables).toEqual(
      expect.arrayContaining([
        "tenants",
        "administrators",
        "audit_entries",
        "audit_retention_anchors",
        "audit_head_anchors",
        "login_attempts",
        "backup_statuses",
        "job_runs",
        "weekly_report_deliveries",
        "service_meta",
        "audit_verification_state",
        "__drizzle_migrations",
      ]),
    );
    const pragma = (p: string) => Object.values(store.sqlite.query(`PRAGMA ${p}`).get() as object)[0];
    expect(pragma("journal_mode")).toBe("wal");
    expect(pragma("foreign_keys")).toBe(1);
    expect(pragma("busy_timeout")).toBe(5000);
    expect(pragma("auto_vacuum")).toBe(2);
    const applied = store.sqlite.query("SELECT count(*) AS n FROM __drizzle_migrations").get() as { n: number };
    expect(applied.n).toBe(embeddedMigrations.journal.entries.length);
    // audit entries are clustered by (tenant, seq)
    const ddl = store.sqlite.query("SELECT sql FROM sqlite_schema WHERE name = 'audit_entries'").get() as { sql: string };
    expect(ddl.sql).toContain("WITHOUT ROWID");
    // Marked only by the service (a store opened with its seal), sealed.
    expect(installedAt(store.db, TEST_SEAL)).toBeNull();
    const marked = openStore(":memory:", new Date("2026-01-01T00:00:00.000Z"), TEST_SEAL);
    expect(installedAt(marked.db, TEST_SEAL)!.toISOString()).toBe("2026-01-01T00:00:00.000Z");
    marked.close();
    store.close();
    cleanup();
  });

  test("opening a migrated file again applies nothing twice and keeps the data and install time", () => {
    const { dir, cleanup } = tempDir();
    const path = join(dir, "again.db");
    const first = openStore(path, new Date("2026-01-01T00:00:00.000Z"), TEST_SEAL);
    first.sqlite.query("INSERT INTO tenants (naam, actief, aangemaakt) VALUES ('A', 1, '2026-01-01T00:00:00.000Z')").run();
    first.close();
    const second = openStore(path, new Date("2026-06-01T00:00:00.000Z"), TEST_SEAL);
    expect((second.sqlite.query("SELECT count(*) AS n FROM tenants").get() as { n: number }).n).toBe(1);
    expect((second.sqlite.query("SELECT count(*) AS n FROM __drizzle_migrations").get() as { n: number }).n).toBe(
      embeddedMigrations.journal.entries.length,
    );
    expect(installedAt(second.db, TEST_SEAL)!.toISOString()).toBe("2026-01-01T00:00:00.000Z");
    second.close();
    cleanup();
  });

  test("the rows recorded are those of drizzle's folder migrator on db/migrations (hash and time per migration)", () => {
    const { dir, cleanup } = tempDir();
    const store = openStore(join(dir, "rows.db"));
    const expected = readMigrationFiles({ migrationsFolder: folder }).map((m) => ({ hash: m.hash, created_at: m.folderMillis }));
    expect(expected).toHaveLength(embeddedMigrations.journal.entries.length);
    expect(appliedRows(store.sqlite).map(({ hash, created_at }) => ({ hash, created_at }))).toEqual(expected);
    store.close();
    cleanup();
  });

  test("a database migrated by the previous code opens with nothing re-applied: same rows, same schema, data and install time kept", () => {
    const { dir, cleanup } = tempDir();
    const path = join(dir, "before.db");
    migrateAsBefore(path, new Date("2026-01-01T00:00:00.000Z"));
    const old = new Database(path);
    const rowsBefore = appliedRows(old);
    const schemaBefore = schemaSql(old);
    old.close();
    expect(rowsBefore).toHaveLength(embeddedMigrations.journal.entries.length);

    const store = openStore(path, new Date("2026-06-01T00:00:00.000Z"));
    expect(appliedRows(store.sqlite)).toEqual(rowsBefore);
    expect(schemaSql(store.sqlite)).toEqual(schemaBefore);
    expect((store.sqlite.query("SELECT count(*) AS n FROM tenants").get() as { n: number }).n).toBe(1);
    expect((store.sqlite.query("SELECT value FROM service_meta WHERE key = 'geinstalleerd'").get() as { value: string }).value).toBe("2026-01-01T00:00:00.000Z");
    store.close();
    cleanup();
  });

  test("a database the previous code migrated part of the way gets only the later migrations, recorded alike", () => {
    const { dir, cleanup } = tempDir();
    const path = join(dir, "partial.db");
    const n = embeddedMigrations.journal.entries.length;
    migrateAsBefore(path, new Date("2026-01-01T00:00:00.000Z"), n - 1);
    const old = new Database(path);
    const rowsBefore = appliedRows(old);
    old.close();
    expect(rowsBefore).toHaveLength(n - 1);

    const store = openStore(path);
    const rows = appliedRows(store.sqlite);
    expect(rows.slice(0, n - 1)).toEqual(rowsBefore);
    const last = readMigrationFiles({ migrationsFolder: folder })[n - 1]!;
    expect(rows.slice(n - 1).map(({ hash, created_at }) => ({ hash, created_at }))).toEqual([{ hash: last.hash, created_at: last.folderMillis }]);
    expect(store.sqlite.query("SELECT name FROM sqlite_schema WHERE name = 'audit_anchor_log'").get()).not.toBeNull();
    expect((store.sqlite.query("SELECT count(*) AS n FROM tenants").get() as { n: number }).n).toBe(1);
    store.close();
    cleanup();
  });

  test("0007: the keys audit_sleutels held move into their entries' rows; a retry then gets the same receipts, other content is refused, and the lookup uses the sleutel index", () => {
    const { dir, cleanup } = tempDir();
    const path = join(dir, "keys.db");
    const before = embeddedMigrations.journal.entries.findIndex((e) => e.tag === "0007_keys_in_entries");
    migrateAsBefore(path, new Date("2026-01-01T00:00:00.000Z"), before);
    // Three entries of tenant 1 as the write API stored them before 0007: two with a sleutel.
    const batch = {
      entries: [
        { tenantId: 1, actor: "a", action: "x", subject: "s0", sleutel: "k0" },
        { tenantId: 1, actor: "a", action: "x", subject: "s1" },
        { tenantId: 1, actor: "a", action: "x", subject: "s2", details: { n: 2 }, sleutel: "k2" },
      ],
    };
    const prepared = prepareAuditBatch(batch, new Date("2026-01-02T00:00:00.000Z"));
    let id = 1;
    const appended = linkEntries(prepared, () => ({ seq: 0, hash: GENESIS_HASH }), () => id++);
    const old = new Database(path, { strict: true });
    for (const e of appended) {
      old.query("INSERT INTO audit_entries (tenant_id, seq, id, created_at, actor, action, subject, details, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)").run(e.tenantId, e.seq, e.id, e.createdAt, e.actor, e.action, e.subject, e.details, e.prevHash, e.hash);
      if (e.key) old.query("INSERT INTO audit_sleutels (tenant_id, sleutel, inhoud, seq, id, hash) VALUES (?, ?, ?, ?, ?, ?)").run(e.tenantId, e.key.sleutel, e.key.inhoud, e.seq, e.id, e.hash);
    }
    // A key whose receipt does not match the entry at its seq (another id): not attached to that entry.
    old.query("INSERT INTO audit_sleutels (tenant_id, sleutel, inhoud, seq, id, hash) VALUES (1, 'vreemd', 'x', 2, 99, ?)").run(appended[1]!.hash);
    old.close();

    const store = openStore(path);
    expect(store.sqlite.query("SELECT name FROM sqlite_schema WHERE name = 'audit_sleutels'").get()).toBeNull();
    expect(store.sqlite.query("SELECT seq, sleutel, inhoud FROM audit_entries ORDER BY seq").all()).toEqual(
      appended.map((e) => ({ seq: e.seq, sleutel: e.key?.sleutel ?? null, inhoud: e.key?.inhoud ?? null })),
    );
    const receipt = (e: (typeof appended)[number]) => ({ tenantId: 1, seq: e.seq, id: e.id, hash: e.hash });
    const retry = { entries: [batch.entries[2]!, batch.entries[0]!] };
    const again = store.sqlite.transaction(() => storeAuditBatch(store.sqlite, prepareAuditBatch(retry, new Date("2026-01-03T00:00:00.000Z")))).immediate();
    expect(again).toEqual({ opgeslagen: 0, alBekend: 2, ontvangstbewijzen: [receipt(appended[2]!), receipt(appended[0]!)] });
    const other = { entries: [{ ...batch.entries[0]!, subject: "anders" }] };
    expect(() => store.sqlite.transaction(() => storeAuditBatch(store.sqlite, prepareAuditBatch(other, new Date()))).immediate()).toThrow('Sleutel "k0" (entries[0])');
    const plan = store.sqlite.query("EXPLAIN QUERY PLAN SELECT inhoud, seq, id, hash FROM audit_entries WHERE tenant_id = ? AND sleutel = ?").all(1, "k0") as { detail: string }[];
    expect(plan.map((r) => r.detail).join("\n")).toContain("USING INDEX audit_entries_sleutel_idx");
    store.close();
    cleanup();
  });

  test("the temporary migrations folder is removed once the migrations ran", () => {
    const { dir, cleanup } = tempDir();
    const tmp = tempDir("nachtwacht-tmpdir-");
    const saved = process.env.TMPDIR;
    process.env.TMPDIR = tmp.dir;
    try {
      openStore(join(dir, "tmp.db")).close();
      expect(readdirSync(tmp.dir)).toEqual([]);
    } finally {
      if (saved === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = saved;
      tmp.cleanup();
      cleanup();
    }
  });

  test("the indexes the jobs rely on exist, and the two no query used are gone", () => {
    const { dir, cleanup } = tempDir();
    const store = openStore(join(dir, "idx.db"));
    const idx = (store.sqlite.query("SELECT name FROM sqlite_schema WHERE type = 'index'").all() as { name: string }[]).map((r) => r.name);
    expect(idx).toEqual(
      expect.arrayContaining([
        "audit_entries_tenant_created_idx",
        "audit_entries_id_idx",
        "login_attempts_tijdstip_idx",
        "login_attempts_failed_idx",
        "backup_statuses_ontvangen_idx",
        "job_runs_job_gestart_idx",
      ]),
    );
    // Each put a scattered page into every retention batch and every insert (docs/performance.md).
    expect(idx).not.toContain("audit_entries_created_idx");
    expect(idx).not.toContain("login_attempts_tenant_tijdstip_idx");
    // (tenant, seq) is unique: the primary key refuses a fork of a chain
    store.sqlite.query("INSERT INTO tenants (naam, actief, aangemaakt) VALUES ('A', 1, 'x')").run();
    const ins = store.sqlite.query(
      "INSERT INTO audit_entries (tenant_id, seq, id, created_at, actor, action, subject, details, prev_hash, hash) VALUES (1, 1, ?, 'x', 'a', 'b', 'c', '{}', 'p', 'h')",
    );
    ins.run(1);
    expect(() => ins.run(2)).toThrow(/UNIQUE|PRIMARY/);
    store.close();
    cleanup();
  });

  test("a database written by another process is readable with the same pragmas", () => {
    const { dir, cleanup } = tempDir();
    const path = join(dir, "shared.db");
    openStore(path).close();
    const other = new Database(path);
    expect((other.query("PRAGMA journal_mode").get() as any).journal_mode).toBe("wal");
    other.close();
    cleanup();
  });
});
