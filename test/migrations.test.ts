import { describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { renderMigrationsModule } from "../db/embed-migrations.ts";
import { embeddedMigrations } from "../db/migrations.gen.ts";
import { installedAt, openStore } from "../src/db.ts";
import { tempDir } from "./helpers.ts";

const folder = join(import.meta.dir, "..", "db", "migrations");

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
    expect(installedAt(store.sqlite)).toBeInstanceOf(Date);
    store.close();
    cleanup();
  });

  test("opening a migrated file again applies nothing twice and keeps the data and install time", () => {
    const { dir, cleanup } = tempDir();
    const path = join(dir, "again.db");
    const first = openStore(path, new Date("2026-01-01T00:00:00.000Z"));
    first.sqlite.query("INSERT INTO tenants (naam, actief, aangemaakt) VALUES ('A', 1, '2026-01-01T00:00:00.000Z')").run();
    first.close();
    const second = openStore(path, new Date("2026-06-01T00:00:00.000Z"));
    expect((second.sqlite.query("SELECT count(*) AS n FROM tenants").get() as { n: number }).n).toBe(1);
    expect((second.sqlite.query("SELECT count(*) AS n FROM __drizzle_migrations").get() as { n: number }).n).toBe(
      embeddedMigrations.journal.entries.length,
    );
    expect(installedAt(second.sqlite)!.toISOString()).toBe("2026-01-01T00:00:00.000Z");
    second.close();
    cleanup();
  });

  test("the indexes the jobs rely on exist", () => {
    const { dir, cleanup } = tempDir();
    const store = openStore(join(dir, "idx.db"));
    const idx = (store.sqlite.query("SELECT name FROM sqlite_schema WHERE type = 'index'").all() as { name: string }[]).map((r) => r.name);
    expect(idx).toEqual(
      expect.arrayContaining([
        "audit_entries_created_idx",
        "audit_entries_tenant_created_idx",
        "audit_entries_id_idx",
        "login_attempts_tijdstip_idx",
        "login_attempts_tenant_tijdstip_idx",
        "login_attempts_failed_idx",
        "backup_statuses_ontvangen_idx",
        "job_runs_job_gestart_idx",
      ]),
    );
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
