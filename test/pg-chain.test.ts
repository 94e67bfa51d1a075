// The PostgreSQL dialect's foundations against a real server (test/pg.ts): the schema
// mirrors SQLite's, its migrations are embedded and apply once however many instances
// start together, and appenders in separate processes never fork a tenant's chain.
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { getTableConfig as sqliteTable, type SQLiteTable } from "drizzle-orm/sqlite-core";
import { getTableConfig as pgTable, type PgTable } from "drizzle-orm/pg-core";
import { is } from "drizzle-orm";
import { SQLiteTable as SQLiteTableClass } from "drizzle-orm/sqlite-core";
import { PgTable as PgTableClass } from "drizzle-orm/pg-core";
import { renderMigrationsModule } from "../db/embed-migrations.ts";
import { embeddedMigrations as embeddedPgMigrations } from "../db/migrations-pg.gen.ts";
import * as sqliteSchema from "../db/schema.ts";
import * as pgSchema from "../db/schema-pg.ts";
import { GENESIS_HASH, linkEntries } from "../src/audit/chain.ts";
import { appendEntriesPg, copyRows, copyUnescape, verifyTenantChainPg } from "../src/pg/chain.ts";
import { openPgStore } from "../src/pg/store.ts";
import { installedAtPg } from "../src/pg/status.ts";
import { pastSealedMarker } from "../src/row-seal.ts";
import { SQL } from "bun";
import { drizzle } from "drizzle-orm/bun-sql";
import { migrate as drizzleMigrate } from "drizzle-orm/bun-sql/migrator";
import { migrationsFolder } from "../src/db.ts";
import { driverError } from "../src/http/errors.ts";
import { prepareAuditBatch } from "../src/ingest/audit.ts";
import { storeAuditBatchPg } from "../src/pg/ingest.ts";
import { BUN, ROOT } from "./binary.ts";
import { useTestCluster } from "./pg.ts";
import { call, makePgTestEnv, NOW, tempDir, TEST_SEAL } from "./helpers.ts";
import { APP_SECRET, auditEntry } from "./ingest-fixtures.ts";

setDefaultTimeout(120_000);

const cluster = useTestCluster();

const shape = (name: string, columns: { name: string; notNull: boolean }[], indexes: string[]) => ({
  name,
  columns: columns.map((c) => `${c.name}${c.notNull ? " not null" : ""}`).sort(),
  indexes: indexes.sort(),
});

/** Tables that only PostgreSQL has. */
const PG_ONLY = ["commit_markers"];

describe("PostgreSQL schema", () => {
  test("nachtwacht's connections read its own schema only: a copy of audit_entries in a schema named after the role ($user, first in the default search_path) hides no change", async () => {
    const env = await makePgTestEnv({ createDatabase: () => cluster.createDatabase() }, { APP_SECRET });
    try {
      const sql = env.store.sql;
      await sql`INSERT INTO tenants (id, naam, actief, aangemaakt) VALUES (1, 'T', true, '2026-01-01T00:00:00.000Z')`;
      const send = (from: number) => call(env.app, "/api/audit", { token: APP_SECRET, body: JSON.stringify({ entries: [0, 1, 2].map((i) => auditEntry(1, from + i)) }) });
      expect((await send(0)).status).toBe(200);
      expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
      // Another session (the default search_path): a copy where "$user" resolves, then the signed row changed.
      const other = new SQL(env.url, { max: 1 });
      try {
        const [{ u }] = await other`SELECT current_user AS u`;
        await other.unsafe(`CREATE SCHEMA "${u}"; CREATE TABLE "${u}".audit_entries (LIKE public.audit_entries INCLUDING ALL); INSERT INTO "${u}".audit_entries SELECT * FROM public.audit_entries`);
        expect((await other`SELECT count(*)::int AS n FROM audit_entries`)[0].n).toBe(3); // the copy, for a default session
        await other`UPDATE public.audit_entries SET actor = 'iemand-anders' WHERE tenant_id = 1 AND seq = 2`;
      } finally {
        await other.close();
      }
      expect((await send(3)).status).toBe(200);
      expect((await sql`SELECT count(*)::int AS n FROM public.audit_entries`)[0].n).toBe(6); // appended to the real table
      const v = await call(env.app, "/api/cron/audit-verificatie");
      expect(v.status).toBe(409);
      expect(v.json.resultaten[0].fout).toMatchObject({ seq: 2, reden: "hash-afwijkend" });
    } finally {
      await env.cleanup();
    }
  });

  test("the migrations that add the seal columns seal the runs, reports and install time of the past (as openStore on SQLite); a row dated later stays unsealed, an end only with its start", async () => {
    const url = await cluster.createDatabase();
    try {
      const old = await openPgStore(url);
      // The database as the version before runs were sealed left it: its last four migrations undone (0008 alarm_mails, then the seals').
      await old.sql`DROP TABLE alarm_mails`;
      await old.sql`ALTER TABLE job_runs DROP COLUMN zegel`;
      await old.sql`ALTER TABLE job_runs DROP COLUMN eindzegel`;
      await old.sql`ALTER TABLE backup_statuses DROP COLUMN zegel`;
      await old.sql`ALTER TABLE job_leases DROP COLUMN zegel`;
      await old.sql`ALTER TABLE service_meta DROP COLUMN zegel`;
      await old.sql`ALTER TABLE audit_verification_state DROP COLUMN zegel`;
      await old.sql`DELETE FROM drizzle.__drizzle_migrations WHERE created_at IN (SELECT created_at FROM drizzle.__drizzle_migrations ORDER BY created_at DESC LIMIT 4)`;
      await old.sql`INSERT INTO service_meta (key, value) VALUES ('geinstalleerd', '2026-07-22T12:00:00.000Z')`;
      await old.sql`INSERT INTO job_runs (job, gestart, beeindigd, uitkomst, http_status) VALUES ('weekrapport', '2026-07-20T06:00:01.000Z', '2026-07-20T06:00:09.000Z', 'ok', 200)`;
      await old.sql`INSERT INTO job_runs (job, gestart, uitkomst) VALUES ('audit-verificatie', '9999-12-31T00:00:00.000Z', 'ok')`;
      await old.sql`INSERT INTO backup_statuses (ontvangen, exit_code, gelukt, bestandsnaam, grootte, foutmelding, bron) VALUES ('2026-07-23T02:30:00.000Z', 0, true, 'a.gz', 183500800, NULL, 'host-cron')`;
      await old.sql`INSERT INTO backup_statuses (ontvangen, exit_code, gelukt, bestandsnaam, grootte, foutmelding, bron) VALUES ('9999-01-01T00:00:00.000Z', 0, true, 'b.gz', 1, NULL, 'host-cron')`;
      await old.close();
      const store = await openPgStore(url, { seal: TEST_SEAL, now: NOW });
      try {
        const rows = await store.db.query.jobRuns.findMany({ orderBy: (t, { asc }) => [asc(t.id)] });
        expect(rows.map((r) => [r.job, TEST_SEAL.sealed(r), r.eindzegel !== null])).toEqual([
          ["weekrapport", true, true],
          ["audit-verificatie", false, false],
        ]);
        const backups = await store.db.query.backupStatuses.findMany({ orderBy: (t, { asc }) => [asc(t.id)] });
        expect(backups.map((b) => [b.bestandsnaam, TEST_SEAL.backupSealed(b)])).toEqual([
          ["a.gz", true],
          ["b.gz", false],
        ]);
        expect((await installedAtPg(store.db, TEST_SEAL))!.toISOString()).toBe("2026-07-22T12:00:00.000Z");
      } finally {
        await store.close();
      }
    } finally {
      await cluster.dropDatabase(new URL(url).pathname.slice(1));
    }
  });
  test("once the marker of sealed rows exists, seal columns dropped with their migration records and added again seal nothing (a forged good backup stays unsealed)", async () => {
    const url = await cluster.createDatabase();
    const { dir, cleanup } = tempDir();
    try {
      const marker = pastSealedMarker({ auditAnkerBestand: join(dir, "audit-ankers.jsonl") });
      await (await openPgStore(url, { seal: TEST_SEAL, now: NOW, pastMarker: marker })).close();
      expect(existsSync(marker)).toBe(true);
      const old = await openPgStore(url);
      await old.sql`INSERT INTO backup_statuses (ontvangen, exit_code, gelukt, bestandsnaam, grootte, foutmelding, bron) VALUES ('2026-07-23T11:00:00.000Z', 0, true, 'x.gz', 1, NULL, 'host-cron')`;
      await old.sql`DROP TABLE alarm_mails`;
      for (const c of ["job_leases", "service_meta", "audit_verification_state", "backup_statuses"]) await old.sql.unsafe(`ALTER TABLE ${c} DROP COLUMN zegel`);
      await old.sql`ALTER TABLE job_runs DROP COLUMN eindzegel`;
      await old.sql`DELETE FROM drizzle.__drizzle_migrations WHERE created_at IN (SELECT created_at FROM drizzle.__drizzle_migrations ORDER BY created_at DESC LIMIT 3)`;
      await old.close();
      const store = await openPgStore(url, { seal: TEST_SEAL, now: NOW, pastMarker: marker });
      try {
        const [b] = await store.db.query.backupStatuses.findMany();
        expect(b!.zegel).toBeNull();
        expect(TEST_SEAL.backupSealed(b!)).toBe(false);
        // The install time, marked at the first start, was unsealed with its column; it is not marked again either.
        expect(await installedAtPg(store.db, TEST_SEAL)).toBeNull();
        await store.sql`DELETE FROM service_meta WHERE key = 'geinstalleerd'`;
        await (await openPgStore(url, { seal: TEST_SEAL, now: new Date(NOW.getTime() + 86_400_000), pastMarker: marker })).close();
        expect(await installedAtPg(store.db, TEST_SEAL)).toBeNull();
      } finally {
        await store.close();
      }
    } finally {
      cleanup();
      await cluster.dropDatabase(new URL(url).pathname.slice(1));
    }
  });

  test("has the same tables, columns, nullability and index names as the SQLite schema", () => {
    const lite = Object.values(sqliteSchema)
      .filter((t) => is(t, SQLiteTableClass))
      .map((t) => {
        const c = sqliteTable(t as SQLiteTable);
        return shape(c.name, c.columns, c.indexes.map((i) => i.config.name));
      })
      .sort((a, b) => a.name.localeCompare(b.name));
    const tables = Object.values(pgSchema).filter((t) => is(t, PgTableClass));
    // PostgreSQL's own: the markers of transactions whose COMMIT answer may be lost (src/pg/commit.ts).
    expect(tables.map((t) => pgTable(t as PgTable).name).filter((n) => PG_ONLY.includes(n))).toEqual(PG_ONLY);
    const pg = tables
      .filter((t) => !PG_ONLY.includes(pgTable(t as PgTable).name))
      .map((t) => {
        const c = pgTable(t as PgTable);
        return shape(c.name, c.columns, c.indexes.map((i) => i.config.name!));
      })
      .sort((a, b) => a.name.localeCompare(b.name));
    expect(pg.length).toBe(14);
    expect(pg).toEqual(lite);
  });

  test("the embedded PostgreSQL migrations equal the folder", async () => {
    const generated = await Bun.file(join(ROOT, "db", "migrations-pg.gen.ts")).text();
    expect(generated).toBe(renderMigrationsModule(join(ROOT, "db", "migrations-pg"), "migrations-pg"));
  });

  test("three instances starting at once apply each migration once; time columns sort bytewise", async () => {
    const url = await cluster.createDatabase();
    const stores = await Promise.all([openPgStore(url), openPgStore(url), openPgStore(url)]);
    try {
      const sql = stores[0]!.sql;
      const rows = await sql`SELECT hash FROM drizzle.__drizzle_migrations`;
      expect(rows.length).toBe(embeddedPgMigrations.journal.entries.length);
      expect(rows.length).toBe(9);
      const [{ n }] = await sql`SELECT count(*)::int AS n FROM information_schema.tables WHERE table_schema = 'public'`;
      expect(n).toBe(14 + PG_ONLY.length);
      const [{ collation }] = await sql`SELECT collation_name AS collation FROM information_schema.columns WHERE table_name = 'audit_entries' AND column_name = 'created_at'`;
      expect(collation).toBe("C");
      // The audit tables' tenants are checked per statement by migration 0002's triggers, not per row by a foreign key (db/schema-pg.ts).
      const fks = (await sql`SELECT conrelid::regclass::text AS t FROM pg_constraint WHERE contype = 'f' AND confrelid = 'tenants'::regclass ORDER BY 1`) as { t: string }[];
      expect(fks.map((r) => r.t)).toEqual(["administrators", "audit_head_anchors", "audit_retention_anchors", "audit_verification_state", "login_attempts", "weekly_report_deliveries"]);
    } finally {
      for (const s of stores) await s.close();
    }
  });
});

describe("migration 0003 on PostgreSQL", () => {
  test("the keys audit_sleutels held move into their entries' rows, the tenant guard no longer names that table, and a retry gets the same receipts", async () => {
    const url = await cluster.createDatabase();
    // The database as the code before 0003 left it: migrations 0000–0002 only.
    const before = embeddedPgMigrations.journal.entries.findIndex((e) => e.tag === "0003_keys_in_entries");
    const m = migrationsFolder({ journal: { entries: embeddedPgMigrations.journal.entries.slice(0, before) }, sql: embeddedPgMigrations.sql });
    const old = new SQL(url);
    try {
      await drizzleMigrate(drizzle({ client: old }), { migrationsFolder: m.folder });
      await old`INSERT INTO tenants (id, naam, actief, aangemaakt) VALUES (1, 'A', true, '2026-01-01T00:00:00.000Z')`;
      const batch = {
        entries: [
          { tenantId: 1, actor: "a", action: "x", subject: "s0", sleutel: "k0" },
          { tenantId: 1, actor: "a", action: "x", subject: "s1" },
          { tenantId: 1, actor: "a", action: "x", subject: "s2", sleutel: "k2" },
        ],
      };
      let id = 1;
      const appended = linkEntries(prepareAuditBatch(batch, new Date("2026-01-02T00:00:00.000Z")), () => ({ seq: 0, hash: GENESIS_HASH }), () => id++);
      for (const e of appended) {
        await old`INSERT INTO audit_entries (tenant_id, seq, id, created_at, actor, action, subject, details, prev_hash, hash) VALUES (${e.tenantId}, ${e.seq}, ${e.id}, ${e.createdAt}, ${e.actor}, ${e.action}, ${e.subject}, ${e.details}, ${e.prevHash}, ${e.hash})`;
        if (e.key) await old`INSERT INTO audit_sleutels (tenant_id, sleutel, inhoud, seq, id, hash) VALUES (${e.tenantId}, ${e.key.sleutel}, ${e.key.inhoud}, ${e.seq}, ${e.id}, ${e.hash})`;
      }
      await old.close();
      const store = await openPgStore(url);
      try {
        const sql = store.sql;
        expect(await sql`SELECT to_regclass('public.audit_sleutels') AS t`).toEqual([{ t: null }]);
        expect(await sql`SELECT seq::int, sleutel, inhoud FROM audit_entries ORDER BY seq`).toEqual(appended.map((e) => ({ seq: e.seq, sleutel: e.key?.sleutel ?? null, inhoud: e.key?.inhoud ?? null })));
        // The moved-rows check, off for the migration's UPDATE, is on again.
        expect(await sql`SELECT tgenabled FROM pg_trigger WHERE tgname = 'audit_entries_moved_have_tenant'`).toEqual([{ tgenabled: "O" }]);
        const retry = await storeAuditBatchPg(store, prepareAuditBatch({ entries: [batch.entries[2]!, batch.entries[0]!] }, new Date()));
        const receipt = (e: (typeof appended)[number]) => ({ tenantId: 1, seq: e.seq, id: e.id, hash: e.hash });
        expect(retry).toEqual({ opgeslagen: 0, alBekend: 2, ontvangstbewijzen: [receipt(appended[2]!), receipt(appended[0]!)] });
        // The tenant guard, rewritten without audit_sleutels, still refuses; a tenant without entries still goes.
        const code = (q: Promise<unknown>) => q.then(() => null, (x: unknown) => driverError(x)?.errno);
        expect(await code(sql`DELETE FROM tenants WHERE id = 1`)).toBe("23503");
        await sql`INSERT INTO tenants (id, naam, actief, aangemaakt) VALUES (2, 'B', true, '2026-01-01T00:00:00.000Z')`;
        expect(await code(sql`DELETE FROM tenants WHERE id = 2`)).toBeNull();
      } finally {
        await store.close();
      }
    } finally {
      m.remove();
    }
  });
});

describe("COPY's text format, as the verifier reads it", () => {
  test("every escape PostgreSQL writes comes back as the stored text", async () => {
    const url = await cluster.createDatabase();
    const store = await openPgStore(url);
    try {
      const odd = ["tab\there", "new\nline", "cr\r", "back\\slash", "\b\f\v", "é😀", "\\N", ""];
      await store.sql`CREATE TEMP TABLE odd (i int, v text)`;
      for (const [i, v] of odd.entries()) await store.sql`INSERT INTO odd VALUES (${i}, ${v})`;
      const back: string[] = [];
      for await (const rows of copyRows(store.sql, "SELECT v FROM odd ORDER BY i")) for (const [v] of rows) back.push(copyUnescape(v!));
      expect(back).toEqual(odd);
    } finally {
      await store.close();
    }
  });
});

describe("appending on PostgreSQL", () => {
  test("two processes appending to the same tenants at once never fork a chain", async () => {
    const url = await cluster.createDatabase();
    const store = await openPgStore(url);
    const sql = store.sql;
    try {
      const tenants: number[] = [];
      for (const naam of ["A", "B", "C"]) {
        const [{ id }] = await sql`INSERT INTO tenants (naam, aangemaakt) VALUES (${naam}, '2026-07-23T12:00:00.000Z') RETURNING id`;
        tenants.push(id);
      }
      const [a, b, c] = tenants as [number, number, number];
      // Both write A and B in every batch (tenant locks taken in the same order), one of them also C.
      const spawn = (list: number[], label: string) =>
        Bun.spawn([BUN, join(ROOT, "test/fixtures/pg-appender.ts"), url, list.join(","), "40", "25", label], { stdout: "pipe", stderr: "pipe" });
      const procs = [spawn([a, b], "p1"), spawn([b, a, c], "p2")];
      const codes = await Promise.all(procs.map(async (p) => [await p.exited, await new Response(p.stderr).text()]));
      expect(codes).toEqual([
        [0, ""],
        [0, ""],
      ]);
      const expected = new Map<number, number>();
      // p1: 40 batches × 25 entries over [a, b]; p2: 40 × 25 over [b, a, c].
      for (const list of [
        [a, b],
        [b, a, c],
      ]) {
        for (let i = 0; i < 25; i++) expected.set(list[i % list.length]!, (expected.get(list[i % list.length]!) ?? 0) + 40);
      }
      for (const t of tenants) {
        const rows = await sql`SELECT seq, prev_hash, hash, actor FROM audit_entries WHERE tenant_id = ${t} ORDER BY seq`;
        expect(rows.length).toBe(expected.get(t));
        // Contiguous from 1, each linking to the one before: one chain, no fork.
        rows.forEach((r: { seq: string; prev_hash: string }, i: number) => {
          expect(Number(r.seq)).toBe(i + 1);
          expect(r.prev_hash).toBe(i === 0 ? GENESIS_HASH : rows[i - 1].hash);
        });
        expect(await verifyTenantChainPg(sql, t, { checkpoint: null, verifiers: [] })).toEqual({ intact: true, aantalEntries: expected.get(t)! });
      }
      // Both processes really interleaved on the shared tenants.
      const writers = await sql`SELECT DISTINCT actor FROM audit_entries WHERE tenant_id = ${a}`;
      expect(writers.map((w: { actor: string }) => w.actor).sort()).toEqual(["p1", "p2"]);
      const [{ dup }] = await sql`SELECT count(*) - count(DISTINCT id) AS dup FROM audit_entries`;
      expect(Number(dup)).toBe(0);
    } finally {
      await store.close();
    }
  });

  test("a chain's head: its newest entry; after retention deleted every entry, the retention anchor; else genesis", async () => {
    const url = await cluster.createDatabase();
    const store = await openPgStore(url);
    try {
      const sql = store.sql;
      const ids: number[] = [];
      for (const naam of ["leeg", "verwijderd", "lopend"]) ids.push((await sql`INSERT INTO tenants (naam, aangemaakt) VALUES (${naam}, '2026-07-23T12:00:00.000Z') RETURNING id`)[0].id);
      const [fresh, deleted, running] = ids as [number, number, number];
      const anchorHash = "ab".repeat(32);
      await sql`INSERT INTO audit_retention_anchors (tenant_id, seq, hash, bijgewerkt) VALUES (${deleted}, 70, ${anchorHash}, '2026-07-01T00:00:00.000Z')`;
      const entry = (tenantId: number) => ({ tenantId, createdAt: "2026-07-23T12:00:00.000Z", actor: "a", action: "b", subject: "c", details: "{}" });
      const first = await sql.begin((tx) => appendEntriesPg(tx, [entry(running), entry(running)]));
      const out = await sql.begin((tx) => appendEntriesPg(tx, [entry(running), entry(fresh), entry(deleted)]));
      expect(out.map((e) => [e.tenantId, e.seq, e.prevHash])).toEqual([
        [running, 3, first[1]!.hash],
        [fresh, 1, GENESIS_HASH],
        [deleted, 71, anchorHash],
      ]);
    } finally {
      await store.close();
    }
  });

  test("the primary key refuses a second entry at a taken seq (a fork), whatever the caller", async () => {
    const url = await cluster.createDatabase();
    const store = await openPgStore(url);
    try {
      const [{ id }] = await store.sql`INSERT INTO tenants (naam, aangemaakt) VALUES ('A', '2026-07-23T12:00:00.000Z') RETURNING id`;
      const row = { tenant_id: id, seq: 1, created_at: "2026-07-23T12:00:00.000Z", actor: "a", action: "b", subject: "c", details: "{}", prev_hash: GENESIS_HASH, hash: "0".repeat(64) };
      await store.sql`INSERT INTO audit_entries ${store.sql(row)}`;
      expect(store.sql`INSERT INTO audit_entries ${store.sql({ ...row, actor: "fork" })}`).rejects.toThrow(/duplicate key/);
    } finally {
      await store.close();
    }
  });
});

