import { describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { closeSync, copyFileSync, openSync, readSync, statSync, writeSync } from "node:fs";
import { join } from "node:path";
import { runDbOnderhoud } from "../src/jobs/db-onderhoud.ts";
import { call, makeTestEnv, NOW, tempDir, type TestEnv } from "./helpers.ts";

function addLoginAttempts(sqlite: Database, n: number) {
  const ins = sqlite.query("INSERT INTO login_attempts (tijdstip, account, ip, gelukt, reden) VALUES (?, ?, ?, ?, ?)");
  sqlite.transaction(() => {
    for (let i = 0; i < n; i++) {
      ins.run(new Date(NOW.getTime() - i * 1000).toISOString(), `gebruiker${i % 5000}@voorbeeld.nl`, `10.${i % 200}.${i % 250}.${i % 7}`, i % 3 ? 1 : 0, "wachtwoord-onjuist");
    }
  })();
}

const onDisk = (path: string) => {
  const size = (p: string) => {
    try {
      return statSync(p).size;
    } catch {
      return 0;
    }
  };
  return size(path) + size(`${path}-wal`);
};

describe("db-onderhoud", () => {
  test("after deleting 50k login attempts the free pages are reclaimed and the files shrink (measured on disk)", async () => {
    const env = makeTestEnv();
    try {
      const { sqlite, path } = env.store;
      addLoginAttempts(sqlite, 50_000);
      sqlite.run("DELETE FROM login_attempts");
      const before = onDisk(path);

      // Called directly, so no job-run row lands in the WAL after the measurement.
      const res = await runDbOnderhoud(env.deps, NOW);
      expect(res.status).toBe(200);
      const b = res.body;
      expect(b).toMatchObject({ ok: true, integriteit: "ok", autoVacuum: "incremental", omgezet: false, vrijePaginasNa: 0 });
      expect(b.groottevoor).toBe(before);
      expect(b.vrijePaginasVoor).toBeGreaterThan(1000); // more than one vacuum step
      expect(b.vacuumStappen).toBe(Math.ceil(b.vrijePaginasVoor / 1000));
      expect(b.grootteNa).toBe(onDisk(path));
      expect(b.grootteNa).toBeLessThan(b.groottevoor / 4);
      expect(b.vrijgemaakt).toBe(b.groottevoor - b.grootteNa);
      expect(b.vrijgemaakt).toBeGreaterThan(b.vrijePaginasVoor * b.paginaGrootte * 0.9);
      // The WAL was folded back and truncated.
      expect(b.checkpoint!).toMatchObject({ modus: "TRUNCATE", busy: false });
      expect(statSync(`${path}-wal`).size).toBe(0);
      expect(env.alarms.raised).toHaveLength(0);
    } finally {
      env.cleanup();
    }
  });

  test("an existing database without auto-vacuum is converted once (VACUUM), and says so", async () => {
    const t = tempDir();
    const path = join(t.dir, "oud.db");
    // A database created before auto_vacuum was set: tables already exist when
    // openStore first sees it, so it stays at auto_vacuum NONE.
    const old = new Database(path, { create: true });
    old.run("CREATE TABLE ouder (x)");
    old.close();
    let env: TestEnv | undefined;
    try {
      env = makeTestEnv({ DATABASE_PATH: path });
      const { sqlite } = env.store;
      expect(sqlite.query("PRAGMA auto_vacuum").get()).toEqual({ auto_vacuum: 0 });
      addLoginAttempts(sqlite, 20_000);
      sqlite.run("DELETE FROM login_attempts");

      const first = await runDbOnderhoud(env.deps, NOW);
      expect(first.status).toBe(200);
      expect(first.body).toMatchObject({ omgezet: true, autoVacuum: "incremental", vrijePaginasNa: 0, vacuumStappen: 0 });
      expect(first.body.vrijePaginasVoor).toBeGreaterThan(0);
      expect(first.body.vrijgemaakt).toBeGreaterThan(0);
      expect(sqlite.query("PRAGMA auto_vacuum").get()).toEqual({ auto_vacuum: 2 });
      expect(sqlite.query("SELECT value FROM service_meta WHERE key = 'auto_vacuum_omgezet'").get()).toEqual({ value: NOW.toISOString() });

      const second = await runDbOnderhoud(env.deps, NOW);
      expect(second.body.omgezet).toBe(false);
      expect(second.body.autoVacuum).toBe("incremental");
    } finally {
      env?.cleanup();
      t.cleanup();
    }
  });

  test("a copy with a damaged index page fails quick_check → 409, db-integrity alarm, file left untouched", async () => {
    const source = makeTestEnv();
    const t = tempDir();
    let env: TestEnv | undefined;
    try {
      const { sqlite } = source.store;
      addLoginAttempts(sqlite, 3000);
      sqlite.run("PRAGMA wal_checkpoint(TRUNCATE)"); // everything in the main file
      const { rootpage } = sqlite.query("SELECT rootpage FROM sqlite_schema WHERE name = 'login_attempts_failed_idx'").get() as { rootpage: number };
      const { page_size } = sqlite.query("PRAGMA page_size").get() as { page_size: number };
      // The source itself is sound.
      expect((await runDbOnderhoud(source.deps, NOW)).body.integriteit).toBe("ok");

      const copy = join(t.dir, "kopie.db");
      copyFileSync(source.store.path, copy);
      // Overwrite the root page of an index with a fixed garbage pattern.
      const fd = openSync(copy, "r+");
      writeSync(fd, Buffer.alloc(page_size, 0xa5), 0, page_size, (rootpage - 1) * page_size);
      closeSync(fd);

      env = makeTestEnv({ DATABASE_PATH: copy });
      const res = await call(env.app, "/api/cron/db-onderhoud");
      expect(res.status).toBe(409);
      expect(res.json.ok).toBe(false);
      expect(res.json.integriteit).toContain(`Tree ${rootpage} page ${rootpage}: btreeInitPage() returns error code 11`);
      expect(res.json).toMatchObject({ checkpoint: null, vacuumStappen: 0, omgezet: false, vrijgemaakt: 0 });
      expect(env.alarms.raised).toHaveLength(1);
      expect(env.alarms.raised[0]!.type).toBe("db-integrity");
      // Nothing was written over the damaged page.
      const page = Buffer.alloc(page_size);
      const rfd = openSync(copy, "r");
      readSync(rfd, page, 0, page_size, (rootpage - 1) * page_size);
      closeSync(rfd);
      expect(page.equals(Buffer.alloc(page_size, 0xa5))).toBe(true);
    } finally {
      env?.cleanup();
      source.cleanup();
      t.cleanup();
    }
  });

  test("a reader holding an old snapshot: the checkpoint waits briefly, then falls back to PASSIVE", async () => {
    const env = makeTestEnv();
    const reader = new Database(env.store.path, { readonly: true });
    try {
      addLoginAttempts(env.store.sqlite, 100);
      reader.run("BEGIN");
      reader.query("SELECT count(*) FROM login_attempts").get();
      addLoginAttempts(env.store.sqlite, 100); // WAL frames the reader's snapshot predates
      const started = performance.now();
      const r = await runDbOnderhoud(env.deps, NOW);
      const ms = performance.now() - started;
      expect(r.status).toBe(200);
      expect(r.body.checkpoint!.modus).toBe("PASSIVE");
      expect(ms).toBeLessThan(2000); // bounded by the short checkpoint wait, not the 5 s busy timeout
    } finally {
      reader.run("ROLLBACK");
      reader.close();
      env.cleanup();
    }
  });
});
