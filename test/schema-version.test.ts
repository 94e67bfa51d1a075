// A database of a newer version than this binary (an older binary put back after an
// upgrade) is refused at the start on both stores, before anything is written: Drizzle's
// migrator only compares dates and let such a start write rows the newer version's rules
// then called forged (unsealed runs and backup reports).
import { afterEach, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { SQL } from "bun";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { embeddedMigrations } from "../db/migrations.gen.ts";
import { embeddedMigrations as embeddedPgMigrations } from "../db/migrations-pg.gen.ts";
import { openStore, SchemaTooNew } from "../src/db.ts";
import { LOCK_MIGRATE, LOCK_NAMESPACE, openPgStore } from "../src/pg/store.ts";
import { buildBinary } from "./binary.ts";
import { call, NOW, SECRET, tempDir, TEST_SEAL, TEST_SIGNING_KEY, TEST_VERIFIER_KEY } from "./helpers.ts";
import { addTenant, anchorRowCount, DIALECT, fillChain, makeEnv, sqliteOnly, testCluster } from "./dialect.ts";
import { runAuditCommand } from "../src/cli/audit.ts";

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A migration record of a version after this one: dated after every migration this binary has. */
const LATER = Math.max(...embeddedMigrations.journal.entries.map((e) => e.when), ...embeddedPgMigrations.journal.entries.map((e) => e.when)) + 1000;

/** A SQLite file of this version with one migration more recorded, as a newer version leaves it (its WAL checkpointed into the file). */
function newerSqliteFile(): { dir: string; path: string } {
  const { dir, cleanup } = tempDir();
  cleanups.push(cleanup);
  const path = join(dir, "nachtwacht.db");
  openStore(path, NOW, TEST_SEAL).close();
  const raw = new Database(path);
  raw.run("INSERT INTO __drizzle_migrations (hash, created_at) VALUES ('van-een-nieuwere-versie', ?)", [LATER]);
  raw.run("PRAGMA wal_checkpoint(TRUNCATE)");
  raw.close();
  return { dir, path };
}

test("a newer database is refused with the versions named, and nothing is written into it", async () => {
  if (DIALECT === "sqlite") {
    const { path } = newerSqliteFile();
    const before = readFileSync(path);
    const known = embeddedMigrations.journal.entries.length;
    expect(() => openStore(path, NOW, TEST_SEAL)).toThrow(
      new SchemaTooNew(`${path}: de database is van een nieuwere versie (${known + 1} migraties, deze versie kent er ${known}): gebruik die versie`),
    );
    expect(readFileSync(path).equals(before)).toBe(true);
    return;
  }
  const url = await (await testCluster()).createDatabase();
  const first = await openPgStore(url, { seal: TEST_SEAL, now: NOW });
  await first.sql`INSERT INTO drizzle.__drizzle_migrations (hash, created_at) VALUES ('van-een-nieuwere-versie', ${LATER})`;
  const [{ rows: before }] = await first.sql`SELECT count(*)::int AS rows FROM service_meta`;
  await first.sql`DELETE FROM service_meta`;
  await first.close();
  const known = embeddedPgMigrations.journal.entries.length;
  const refused = await openPgStore(url, { seal: TEST_SEAL, now: NOW }).then(
    () => null,
    (e: unknown) => e,
  );
  expect(refused).toEqual(new SchemaTooNew(`de database is van een nieuwere versie (${known + 1} migraties, deze versie kent er ${known}): gebruik die versie`));
  expect(before).toBeGreaterThan(0);
  const sql = new SQL(url, { max: 1 });
  try {
    // Nothing written: the install time was not marked again.
    expect((await sql`SELECT count(*)::int AS n FROM service_meta`)[0].n).toBe(0);
    // And the migration lock was let go: another session takes it at once.
    expect((await sql`SELECT pg_try_advisory_lock(${LOCK_NAMESPACE}, ${LOCK_MIGRATE}) AS ok`)[0].ok).toBe(true);
  } finally {
    await sql.close();
  }
});

// The binary's start on its default store; on PostgreSQL the refusal is the same migratePg as above.
sqliteOnly("the binary refuses to start on a newer SQLite database: exit non-zero, the reason in its output", async () => {
  const { path: bin } = await buildBinary();
  const { dir, path } = newerSqliteFile();
  const p = Bun.spawn([bin], {
    cwd: dir,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", PORT: "0", CRON_SECRET: SECRET, AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY, DATABASE_PATH: path, AUDIT_ANKER_BESTAND: join(dir, "a.jsonl") },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [code, out, err] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
  expect(code).not.toBe(0);
  expect(out + err).toContain("de database is van een nieuwere versie");
});

// The operator's commands on a newer database (found by a review: adopt and accept-restore
// signed into one and wrote their rows): exit 2 naming the versions, before anything is
// written; verify and export, which read this version's tables, refuse it the same way.
test("adopt, accept-restore, verify and export refuse a newer database (exit 2, the versions named), writing nothing", async () => {
  const env = await makeEnv();
  cleanups.push(() => env.cleanup());
  // A chain an earlier version shortened (entries 1–5 gone, unsigned): adopt --ja would sign and write it.
  const a = await addTenant(env.db, "Gemeente Delft");
  const b = await addTenant(env.db, "Stichting Leiden");
  await fillChain(env.store, a, 20);
  await fillChain(env.store, b, 10);
  await env.db.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= 5", a);
  expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(409); // b signed, a refused
  const where = env.dialect === "sqlite" ? { args: ["--db", env.config.databasePath], env: {} } : { args: [], env: { DATABASE_URL: (env.store as { url: string }).url } };
  const run = async (args: string[]) => {
    const out: string[] = [];
    const err: string[] = [];
    const code = await runAuditCommand([...args, ...where.args, "--bestand", env.config.auditAnkerBestand], { AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY, ...where.env }, (s) => out.push(s), (s) => err.push(s));
    return { code, out: out.join("\n"), err: err.join("\n") };
  };
  // This version may: adopt without --ja says it would.
  expect((await run(["adopt", "--tenant", String(a)])).code).toBe(0);

  await env.db.run(`INSERT INTO ${env.dialect === "sqlite" ? "" : "drizzle."}__drizzle_migrations (hash, created_at) VALUES ('van-een-nieuwere-versie', ?)`, LATER);
  const known = (env.dialect === "sqlite" ? embeddedMigrations : embeddedPgMigrations).journal.entries.length;
  const named = `de database is van een nieuwere versie (${known + 1} migraties, deze versie kent er ${known}): gebruik die versie`;
  const anchorFile = readFileSync(env.config.auditAnkerBestand, "utf8");
  const rows = await anchorRowCount(env.db);
  for (const args of [["adopt", "--tenant", String(a), "--ja"], ["accept-restore", "--ja"], ["verify", "--sleutel", TEST_VERIFIER_KEY], ["export", "--tenant", String(b), "--sleutel", TEST_VERIFIER_KEY]]) {
    const r = await run(args);
    expect({ args, code: r.code }).toEqual({ args, code: 2 });
    expect(r.err).toContain(named);
    expect(r.out).not.toContain("RESULTAAT");
  }
  expect(readFileSync(env.config.auditAnkerBestand, "utf8")).toBe(anchorFile);
  expect(await anchorRowCount(env.db)).toBe(rows);
});
