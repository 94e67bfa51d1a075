// `nachtwacht db-convert`: the one-time auto-vacuum conversion, as an explicit operator
// command that says what it will do and acts only with --ja.
import { Database } from "bun:sqlite";
import { afterEach, expect, test } from "bun:test";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { openStore } from "../src/db.ts";
import { BUN, ROOT } from "./binary.ts";
import { tempDir } from "./helpers.ts";

const dirs: { cleanup(): void }[] = [];
afterEach(() => dirs.splice(0).forEach((d) => d.cleanup()));

async function run(args: string[], env: Record<string, string>) {
  const p = Bun.spawn([BUN, join(ROOT, "src/index.ts"), ...args], { env: { PATH: process.env.PATH ?? "/usr/bin:/bin", ...env }, stdout: "pipe", stderr: "pipe" });
  const [code, out, err] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
  return { code, out: out + err };
}

const autoVacuum = (path: string) => {
  const db = new Database(path, { readonly: true });
  try {
    return (db.query("PRAGMA auto_vacuum").get() as { auto_vacuum: number }).auto_vacuum;
  } finally {
    db.close();
  }
};

test("warns and does nothing without --ja; converts with it; then has nothing to do", async () => {
  const d = tempDir();
  dirs.push(d);
  const path = join(d.dir, "oud.db");
  // A database from before incremental auto-vacuum: a table exists before openStore sets it.
  const old = new Database(path, { create: true });
  old.run("CREATE TABLE ouder (x)");
  old.close();
  openStore(path).close();
  expect(autoVacuum(path)).toBe(0);

  const dry = await run(["db-convert"], { DATABASE_PATH: path });
  expect(dry.code).toBe(2);
  expect(dry.out).toContain("LET OP");
  expect(autoVacuum(path)).toBe(0);

  const done = await run(["db-convert", "--ja"], { DATABASE_PATH: path });
  expect(done.code).toBe(0);
  expect(done.out).toContain("omgezet: auto_vacuum is nu incremental");
  expect(autoVacuum(path)).toBe(2);

  const again = await run(["db-convert", "--ja", "--db", path], {});
  expect(again.code).toBe(0);
  expect(again.out).toContain("niet nodig");
  // Already converted: without --ja it says so (0), not that it would rewrite the file.
  const dryAgain = await run(["db-convert", "--db", path], {});
  expect(dryAgain).toMatchObject({ code: 0 });
  expect(dryAgain.out).toContain("niet nodig: auto_vacuum is al incremental");
  expect(dryAgain.out).not.toContain("LET OP");
  expect((await run(["db-convert", "--db", join(d.dir, "geen.db"), "--ja"], {})).code).toBe(2);
});

test("a database of an earlier version is refused, not migrated: the service's start does that, and seals the rows of the past with the key this command does not hold", async () => {
  const d = tempDir();
  dirs.push(d);
  const path = join(d.dir, "eerder.db");
  openStore(path).close();
  // The last two migrations undone (0011 alarm_mails, 0010 seal columns): as a version before the seals left it.
  const raw = new Database(path);
  raw.run("DROP TABLE alarm_mails");
  for (const c of ["job_leases", "service_meta", "audit_verification_state"]) raw.run(`ALTER TABLE ${c} DROP COLUMN zegel`);
  raw.run("DELETE FROM __drizzle_migrations WHERE created_at IN (SELECT created_at FROM __drizzle_migrations ORDER BY created_at DESC LIMIT 2)");
  raw.close();
  const r = await run(["db-convert", "--ja", "--db", path], {});
  expect(r.code).toBe(2);
  expect(r.out).toContain("de database is van een eerdere versie");
  expect(r.out).toContain("niets omgezet");
  const after = new Database(path, { readonly: true });
  try {
    expect(after.query("SELECT 1 FROM pragma_table_info('service_meta') WHERE name = 'zegel'").get()).toBeNull();
  } finally {
    after.close();
  }
});

test("a conversion that cannot run (another connection holds the write lock) is exit 2 with the reason, not 1 (damaged); the file is unchanged", async () => {
  const d = tempDir();
  dirs.push(d);
  const path = join(d.dir, "bezet.db");
  const old = new Database(path, { create: true });
  old.run("CREATE TABLE ouder (x)");
  old.close();
  openStore(path).close();
  // The service (or a backup, a shell) in the middle of a write: its lock outlasts db-convert's busy timeout.
  const holder = new Database(path);
  try {
    holder.run("BEGIN IMMEDIATE");
    const r = await run(["db-convert", "--ja", "--db", path], {});
    expect(r.code).toBe(2);
    expect(r.out).toContain("NIET omgezet");
    expect(r.out).toContain("database is locked");
    expect(r.out).toContain("stop eerst de service");
    expect(r.out).not.toContain("beschadigd");
  } finally {
    holder.run("ROLLBACK");
    holder.close();
  }
  expect(autoVacuum(path)).toBe(0);
}, 30_000);

// Found by a review: a directory or a text file given as --db ended in a stack trace and
// exit 1 ("damage found"), and a 0-byte file was called a database of an earlier version.
test("not a database is exit 2 in one line, not exit 1 (damage): a folder, a text file, an empty file", async () => {
  const d = tempDir();
  dirs.push(d);
  const map = join(d.dir, "map");
  mkdirSync(map);
  const tekst = join(d.dir, "notities.txt");
  writeFileSync(tekst, "dit is geen database, maar wel een tekst van meer dan honderd bytes lang: ".repeat(3));
  const leeg = join(d.dir, "leeg.db");
  writeFileSync(leeg, "");
  for (const [path, says] of [
    [map, "is geen bestand maar een map"],
    [tekst, "is geen SQLite-database"],
    [leeg, "is leeg (0 bytes)"],
  ]) {
    const r = await run(["db-convert", "--db", path!, "--ja"], {});
    expect([path, r.code]).toEqual([path, 2]);
    expect(r.out).toContain(`${path} ${says}`);
    expect(r.out.trim().split("\n")).toHaveLength(1);
    expect(r.out).not.toContain("eerdere versie");
  }
  expect(readFileSync(leeg, "utf8")).toBe("");
});
