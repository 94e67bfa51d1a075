// The PostgreSQL backup (src/pg/backup.ts, pg_dump) against a real server (test/pg.ts):
// it checks the backup folder's free space before pg_dump writes anything, by the SQLite
// backup's rule (checkBackupRoom), with the tables' data on the server (pg_table_size,
// DUMPED_DATA_SQL) as what the dump needs. As the SQLite backup's test (backup-nofollow.test.ts): a real tmpfs,
// filled until less is free than that.
import { afterEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdirSync, readdirSync, rmSync, statfsSync, statSync } from "node:fs";
import { join } from "node:path";
import { BackupError } from "../src/cli/backup.ts";
import { DUMPED_DATA_SQL, makeBackupPg } from "../src/pg/backup.ts";
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

async function dataSize(store: PgStore): Promise<number> {
  // Raw SQL: the backup's own catalog query.
  return Number(((await store.sql.unsafe(DUMPED_DATA_SQL)) as { coalesce: string | number }[])[0]!.coalesce);
}

async function databaseSize(store: PgStore): Promise<number> {
  // Raw SQL: a function call.
  return Number(((await store.sql`SELECT pg_database_size(current_database()) AS n`) as { n: string | number }[])[0]!.n);
}

describe("free space in the backup folder (PostgreSQL)", () => {
  test("less free than the tables' data: 74 before pg_dump, naming both figures, nothing written; with that much free the dump is made, and is smaller", async () => {
    const url = await cluster.createDatabase();
    const store = await openPgStore(url);
    cleanups.push(() => void store.close());
    await store.sql`INSERT INTO tenants (naam, actief, aangemaakt) SELECT 'Tenant ' || i, true, ${new Date().toISOString()} FROM generate_series(1, 500) AS i`;
    await store.sql`
      INSERT INTO login_attempts (tijdstip, account, ip, gelukt, tenant_id)
      SELECT ${new Date().toISOString()}, 'account-' || i, '10.0.' || (i % 250) || '.' || (i % 200), i % 3 = 0, 1 + i % 500 FROM generate_series(1, 30000) AS i`;
    const size = await dataSize(store);
    expect(size).toBeGreaterThan(1024 * 1024);

    const disk = mountTmpfs(`${Math.ceil((3 * size) / (1 << 20))}m`);
    cleanups.push(disk.cleanup);
    const backups = join(disk.dir, "backups");
    mkdirSync(backups);
    const o = { url, dir: backups, anchors: join(disk.dir, "audit-ankers.jsonl"), keepDays: 30, now: new Date() };

    // Half the tables' data free: room for pg_dump's compressed archive (so before the check a backup succeeded), not for the estimate.
    fillUntilFree(disk.dir, Math.floor(size / 2));
    const free = freeIn(disk.dir);
    expect(free).toBeLessThan(size);
    const e = await rejection(makeBackupPg(o));
    expect(e).toBeInstanceOf(BackupError);
    expect((e as BackupError).exitCode).toBe(74);
    const message = (e as Error).message;
    // The SQLite backup's words (checkBackupRoom), with this store's estimate.
    expect(message).toStartWith(`backup mislukt bij: controleren van de vrije ruimte in ${backups}: te weinig vrije ruimte: ${free} bytes vrij, `);
    const need = Number(/, (\d+) bytes nodig \(de (\d+) bytes aan tabelgegevens op de server \(pg_table_size, zonder indexen\)/.exec(message)?.[1]);
    // The server's own figure, read before and after (autovacuum may add a map file in between).
    const after = await dataSize(store);
    expect(need).toBeGreaterThanOrEqual(Math.min(size, after));
    expect(need).toBeLessThanOrEqual(Math.max(size, after));
    expect(message).toContain("Maak ruimte vrij of geef een map op een ander bestandssysteem (--map)");
    // Refused before pg_dump wrote its file: nothing in the folder, not even the temporary file.
    expect(readdirSync(backups)).toEqual([]);

    // The tables' data free (and a margin for the anchor-less rest): the backup is made, and its dump is below the estimate.
    rmSync(join(disk.dir, "ballast"));
    fillUntilFree(disk.dir, size + (1 << 20));
    const done = await makeBackupPg({ ...o, now: new Date(o.now.getTime() + 1000) });
    expect(readdirSync(backups)).toEqual([done.name]);
    expect(statSync(done.path).size).toBeLessThan(size);
  });

  test("a fresh database needs its tables' data, not the catalogs and indexes: a folder with less free than pg_database_size takes the backup", async () => {
    const url = await cluster.createDatabase();
    const store = await openPgStore(url);
    cleanups.push(() => void store.close());
    const whole = await databaseSize(store);
    const data = await dataSize(store);
    // Catalogs and indexes: some MiB on the server; the tables of a fresh installation: some KiB.
    expect(data).toBeLessThan(whole / 4);

    const disk = mountTmpfs(`${Math.ceil(whole / (1 << 20)) + 2}m`);
    cleanups.push(disk.cleanup);
    const backups = join(disk.dir, "backups");
    mkdirSync(backups);
    fillUntilFree(disk.dir, Math.floor(whole / 2));
    expect(freeIn(disk.dir)).toBeLessThan(whole);
    const done = await makeBackupPg({ url, dir: backups, anchors: join(disk.dir, "audit-ankers.jsonl"), keepDays: 30, now: new Date() });
    expect(readdirSync(backups)).toEqual([done.name]);
  });
});
