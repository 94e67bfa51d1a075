import { describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { closeSync, copyFileSync, openSync, readSync, statSync, writeSync } from "node:fs";
import { join } from "node:path";
import { convertToIncrementalAutoVacuum, runDbOnderhoud } from "../src/jobs/db-onderhoud.ts";
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
      expect(b).toMatchObject({ ok: true, integriteit: "ok", autoVacuum: "incremental", omzetting: null, vrijePaginasNa: 0 });
      expect(b.grootteVoor).toBe(before);
      expect(b.vrijePaginasVoor).toBeGreaterThan(1000); // more than one vacuum step
      expect(b.vacuumStappen).toBe(Math.ceil(b.vrijePaginasVoor / 1000));
      expect(b.grootteNa).toBe(onDisk(path));
      expect(b.grootteNa).toBeLessThan(b.grootteVoor / 4);
      expect(b.vrijgemaakt).toBe(b.grootteVoor - b.grootteNa);
      expect(b.vrijgemaakt).toBeGreaterThan(b.vrijePaginasVoor * b.paginaGrootte * 0.9);
      // The WAL was folded back and truncated.
      expect(b.checkpoint!).toMatchObject({ modus: "TRUNCATE", busy: false });
      expect(statSync(`${path}-wal`).size).toBe(0);
      expect(env.alarms.raised).toHaveLength(0);
    } finally {
      env.cleanup();
    }
  });

  /** A database created before auto_vacuum was set: it stays at auto_vacuum NONE. */
  function oldDatabase(t: { dir: string }): TestEnv {
    const path = join(t.dir, "oud.db");
    // Tables already exist when openStore first sees it, so it keeps auto_vacuum NONE.
    const old = new Database(path, { create: true });
    old.run("CREATE TABLE ouder (x)");
    old.close();
    const env = makeTestEnv({ DATABASE_PATH: path });
    expect(env.store.sqlite.query("PRAGMA auto_vacuum").get()).toEqual({ auto_vacuum: 0 });
    addLoginAttempts(env.store.sqlite, 20_000);
    env.store.sqlite.run("DELETE FROM login_attempts");
    return env;
  }

  test("the weekly job never runs the full VACUUM: auto_vacuum NONE stays, the body says the conversion is pending and what it would free, the rest is done", async () => {
    const t = tempDir();
    let env: TestEnv | undefined;
    try {
      env = oldDatabase(t);
      const { sqlite } = env.store;
      const res = await call(env.app, "/api/cron/db-onderhoud");
      expect(res.status).toBe(200);
      const b = res.json;
      expect(b).toMatchObject({ ok: true, integriteit: "ok", autoVacuum: "none", vacuumStappen: 0 });
      // Nothing was rewritten: the free pages are still there (PRAGMA optimize may take one
      // or two for its statistics), the setting unchanged.
      expect(b.vrijePaginasVoor).toBeGreaterThan(100);
      expect(b.vrijePaginasNa).toBeGreaterThan(b.vrijePaginasVoor - 5);
      expect(sqlite.query("PRAGMA auto_vacuum").get()).toEqual({ auto_vacuum: 0 });
      expect(sqlite.query("SELECT value FROM service_meta WHERE key = 'auto_vacuum_omgezet'").get()).toBeNull();
      // Pending, with what it would give back at least.
      expect(b.omzetting).toMatchObject({ open: true, vrijePaginas: b.vrijePaginasVoor, vrijTeMaken: b.vrijePaginasVoor * b.paginaGrootte });
      expect(b.omzetting.toelichting).toContain("VACUUM");
      expect(b.omzetting.toelichting).toContain("niet");
      // The rest of the upkeep still happened.
      expect(b.checkpoint).toMatchObject({ modus: "TRUNCATE", busy: false });
      expect(env.alarms.raised).toHaveLength(0);
    } finally {
      await env?.cleanup();
      t.cleanup();
    }
  });

  test("convertToIncrementalAutoVacuum (the operator's command) converts it once; then the weekly job has nothing pending and vacuums in steps", async () => {
    const t = tempDir();
    let env: TestEnv | undefined;
    try {
      env = oldDatabase(t);
      const { sqlite } = env.store;
      const vrij = (sqlite.query("PRAGMA freelist_count").get() as { freelist_count: number }).freelist_count;
      expect(vrij).toBeGreaterThan(0);

      const r = convertToIncrementalAutoVacuum(env.store, NOW);
      expect(r).toMatchObject({ integriteit: "ok", voor: "none", autoVacuum: "incremental", omgezet: true });
      expect(r.vrijgemaakt).toBeGreaterThanOrEqual(vrij * r.paginaGrootte);
      expect(r.grootteNa).toBe(onDisk(env.store.path));
      expect(sqlite.query("PRAGMA auto_vacuum").get()).toEqual({ auto_vacuum: 2 });
      expect(sqlite.query("PRAGMA freelist_count").get()).toEqual({ freelist_count: 0 });
      expect(sqlite.query("SELECT value FROM service_meta WHERE key = 'auto_vacuum_omgezet'").get()).toEqual({ value: NOW.toISOString() });

      // A second call has nothing to do.
      expect(convertToIncrementalAutoVacuum(env.store, NOW)).toMatchObject({ voor: "incremental", autoVacuum: "incremental", omgezet: false, vrijgemaakt: 0 });

      addLoginAttempts(sqlite, 20_000);
      sqlite.run("DELETE FROM login_attempts");
      const weekly = await runDbOnderhoud(env.deps, NOW);
      expect(weekly.body).toMatchObject({ autoVacuum: "incremental", omzetting: null, vrijePaginasNa: 0 });
      expect(weekly.body.vacuumStappen).toBeGreaterThan(0);
    } finally {
      await env?.cleanup();
      t.cleanup();
    }
  });

  test("convertToIncrementalAutoVacuum refuses a database that fails quick_check: nothing rewritten", async () => {
    const t = tempDir();
    let env: TestEnv | undefined;
    try {
      const source = oldDatabase(t);
      const { sqlite: s, path } = source.store;
      const { rootpage } = s.query("SELECT rootpage FROM sqlite_schema WHERE name = 'login_attempts_failed_idx'").get() as { rootpage: number };
      const { page_size } = s.query("PRAGMA page_size").get() as { page_size: number };
      s.run("PRAGMA wal_checkpoint(TRUNCATE)"); // everything in the main file
      await source.cleanup();
      // Overwrite the root page of an index with a fixed garbage pattern, then open it afresh.
      const fd = openSync(path, "r+");
      writeSync(fd, Buffer.alloc(page_size, 0xa5), 0, page_size, (rootpage - 1) * page_size);
      closeSync(fd);
      env = makeTestEnv({ DATABASE_PATH: path });
      const { sqlite } = env.store;

      const r = convertToIncrementalAutoVacuum(env.store, NOW);
      expect(r.omgezet).toBe(false);
      expect(r.autoVacuum).toBe("none");
      expect(r.integriteit).not.toBe("ok");
      expect(sqlite.query("PRAGMA auto_vacuum").get()).toEqual({ auto_vacuum: 0 });
    } finally {
      await env?.cleanup();
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
      expect(res.json).toMatchObject({ checkpoint: null, vacuumStappen: 0, omzetting: null, vrijgemaakt: 0 });
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
