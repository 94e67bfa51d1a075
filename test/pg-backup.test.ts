// The PostgreSQL backup (src/pg/backup.ts, pg_dump) against a real server (test/pg.ts):
// it checks the backup folder's free space before pg_dump writes anything, by the SQLite
// backup's rule (checkBackupRoom), with the database's size (pg_database_size) as what
// the dump needs. As the SQLite backup's test (backup-nofollow.test.ts): a real tmpfs,
// filled until less is free than that.
import { afterEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdirSync, readdirSync, rmSync, statfsSync, statSync } from "node:fs";
import { join } from "node:path";
import { BackupError } from "../src/cli/backup.ts";
import { makeBackupPg } from "../src/pg/backup.ts";
import { openPgStore, type PgStore } from "../src/pg/store.ts";
import { fillUntilFree, mountTmpfs } from "./helpers.ts";
import { useTestCluster } from "./pg.ts";

setDefaultTimeout(120_000);

const cluster = useTestCluster();
const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0).reverse()) c();
});

async function rejection(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (e) {
    return e;
  }
  throw new Error("expected a rejection");
}

const freeIn = (dir: string) => {
  const s = statfsSync(dir);
  return s.bavail * s.bsize;
};

async function databaseSize(store: PgStore): Promise<number> {
  // Raw SQL: a function call.
  return Number(((await store.sql`SELECT pg_database_size(current_database()) AS n`) as { n: string | number }[])[0]!.n);
}

describe("free space in the backup folder (PostgreSQL)", () => {
  test("less free than the database's size: 74 before pg_dump, naming both figures, nothing written; with that much free the dump is made, and is smaller", async () => {
    const url = await cluster.createDatabase();
    const store = await openPgStore(url);
    cleanups.push(() => void store.close());
    await store.sql`INSERT INTO tenants (naam, actief, aangemaakt) SELECT 'Tenant ' || i, true, ${new Date().toISOString()} FROM generate_series(1, 500) AS i`;
    const size = await databaseSize(store);
    // System catalogs included, a fresh database is some MiB; its dump some KiB.
    expect(size).toBeGreaterThan(1024 * 1024);

    const disk = mountTmpfs(`${Math.ceil((3 * size) / (1 << 20))}m`);
    cleanups.push(disk.cleanup);
    const backups = join(disk.dir, "backups");
    mkdirSync(backups);
    const o = { url, dir: backups, anchors: join(disk.dir, "audit-ankers.jsonl"), keepDays: 30, now: new Date() };

    // Half the database free: room for pg_dump's archive many times over (so before the check a backup succeeded), not for the estimate.
    fillUntilFree(disk.dir, Math.floor(size / 2));
    const free = freeIn(disk.dir);
    expect(free).toBeLessThan(size);
    const e = await rejection(makeBackupPg(o));
    expect(e).toBeInstanceOf(BackupError);
    expect((e as BackupError).exitCode).toBe(74);
    const message = (e as Error).message;
    // The SQLite backup's words (checkBackupRoom), with this store's estimate.
    expect(message).toStartWith(`backup mislukt bij: controleren van de vrije ruimte in ${backups}: te weinig vrije ruimte: ${free} bytes vrij, `);
    const need = Number(/, (\d+) bytes nodig \(de (\d+) bytes van de database op de server \(pg_database_size\)/.exec(message)?.[1]);
    // The server's own figure, read before and after (autovacuum may add a map file in between).
    const after = await databaseSize(store);
    expect(need).toBeGreaterThanOrEqual(Math.min(size, after));
    expect(need).toBeLessThanOrEqual(Math.max(size, after));
    expect(message).toContain("Maak ruimte vrij of geef een map op een ander bestandssysteem (--map)");
    // Refused before pg_dump wrote its file: nothing in the folder, not even the temporary file.
    expect(readdirSync(backups)).toEqual([]);

    // The database's size free (and a margin for the anchor-less rest): the backup is made, and its dump is below the estimate.
    rmSync(join(disk.dir, "ballast"));
    fillUntilFree(disk.dir, size + (1 << 20));
    const done = await makeBackupPg({ ...o, now: new Date(o.now.getTime() + 1000) });
    expect(readdirSync(backups)).toEqual([done.name]);
    expect(statSync(done.path).size).toBeLessThan(size);
  });
});
