// The suite on both stores. `npm test` runs every test file on the embedded SQLite
// default, then again with NACHTWACHT_TEST_DB=pg the files that build their
// installation here (test/pg-pass.ts finds them by their import of this file): the
// same tests, on a fresh database of one throw-away PostgreSQL cluster per run
// (started on first use; test/setup.ts stops it after the last file).
//
// What a test needs to be dialect-neutral:
// - makeEnv() instead of makeTestEnv(): the same app, jobs, mailer, alarms and clock;
// - env.db for arranging and asserting with plain SQL: `?` placeholders on both,
//   booleans passed as true/false, and PostgreSQL's answers read as SQLite's (booleans
//   as 1/0, 64-bit integers and numerics as numbers), so one expectation holds on both;
// - addTenant / addAdmin / fillChain / chainRoot / anchorRowCount from here.
// Also here: a service process's database read beside it (serviceReader, openServiceDb,
// fileTestDb), and a copy of the database put back as a restore does (copyDatabase,
// restoreCopy), or a backup file as docs/operations.md restores it (restoreBackup).
import { Database } from "bun:sqlite";
import { test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { appendEntries, canonicalJson, type ChainInput, type NewLoginAttempt } from "../src/audit/chain.ts";
import { createApp, type AppOptions } from "../src/app.ts";
import type { AnyStore, Deps } from "../src/deps.ts";
import type { Config } from "../src/config.ts";
import { BUSY_TIMEOUT_MS, openStore } from "../src/db.ts";
import { pastSealedMarker, rowSealOf, sealKeyMarker } from "../src/row-seal.ts";
import { appendEntriesPg } from "../src/pg/chain.ts";
import { libpqEnv } from "../src/pg/backup.ts";
import { openPgStore, type PgStore } from "../src/pg/store.ts";
import { DAY_MS, eindzegel, makePgTestEnv, makeTestEnv, NOW, restoreDatabase, rootOfEntryHashes, type FillOptions, type PgTestEnv, type TestEnv, zegel } from "./helpers.ts";
import { CLUSTERS_ENV, startCluster, type TestCluster } from "./pg.ts";

export type Dialect = "sqlite" | "pg";
export const DIALECT: Dialect = process.env.NACHTWACHT_TEST_DB === "pg" ? "pg" : "sqlite";

/** Plain SQL on either store, for a test's arrangements and assertions. */
export interface TestDb {
  dialect: Dialect;
  all<T = any>(query: string, ...params: unknown[]): Promise<T[]>;
  /** The first row, or null. */
  get<T = any>(query: string, ...params: unknown[]): Promise<T | null>;
  run(query: string, ...params: unknown[]): Promise<void>;
}

/**
 * `?` placeholders as $1, $2, … for PostgreSQL: outside quoted text. A `?` in a comment
 * or a dollar-quoted body would be taken for one, so such a query is refused instead.
 */
export function numberedPlaceholders(query: string): string {
  if (/--|\/\*|\$[A-Za-z_]*\$/.test(query) && query.includes("?")) {
    throw new Error(`numberedPlaceholders: a query with a comment or a dollar-quoted body takes $n placeholders, not ?: ${query}`);
  }
  let n = 0;
  let quote: string | null = null;
  let out = "";
  for (const ch of query) {
    if (quote) {
      if (ch === quote) quote = null;
    } else if (ch === "'" || ch === '"') quote = ch;
    else if (ch === "?") {
      out += `$${++n}`;
      continue;
    }
    out += ch;
  }
  return out;
}

/** PostgreSQL type oids read as SQLite would answer them. */
const BOOL = 16;
const NUMERIC_OIDS = new Set([20, 1700]); // int8, numeric

function sqliteShaped(rows: any[] & { columns?: { name: string; type: number }[] }): any[] {
  const cols = rows.columns ?? [];
  const bools = cols.filter((c) => c.type === BOOL).map((c) => c.name);
  const nums = cols.filter((c) => NUMERIC_OIDS.has(c.type)).map((c) => c.name);
  if (bools.length === 0 && nums.length === 0) return [...rows];
  return rows.map((r) => {
    const o = { ...r };
    for (const b of bools) if (o[b] !== null) o[b] = o[b] ? 1 : 0;
    for (const k of nums) if (o[k] !== null) o[k] = Number(o[k]);
    return o;
  });
}

export function testDb(store: AnyStore): TestDb {
  if (store.kind === "sqlite") return sqliteTestDb(store.sqlite);
  const all = async (q: string, ...p: unknown[]) => sqliteShaped(await store.sql.unsafe(numberedPlaceholders(q), p as any[]));
  return {
    dialect: "pg",
    all,
    get: async (q, ...p) => (await all(q, ...p))[0] ?? null,
    run: async (q, ...p) => void (await store.sql.unsafe(numberedPlaceholders(q), p as any[])),
  };
}

/** testDb on a SQLite connection of the test's own. */
export function sqliteTestDb(sqlite: Database): TestDb {
  return {
    dialect: "sqlite",
    all: async (q, ...p) => sqlite.query(q).all(...(p as any[])) as any[],
    get: async (q, ...p) => (sqlite.query(q).get(...(p as any[])) as any) ?? null,
    run: async (q, ...p) => void sqlite.query(q).run(...(p as any[])),
  };
}

// ---------------------------------------------------------------------------------
// The database of a service running as its own process, read by the test beside it.

/**
 * `f` on a connection to the SQLite file at `path` of its own, closed after (after the
 * promise `f` returns, if any): read-only, or (`write`) a plain one.
 */
export function onFile<T>(path: string, f: (s: Database) => T, o: { write?: boolean } = {}): T {
  const s = o.write ? new Database(path) : new Database(path, { readonly: true });
  let r: T;
  try {
    r = f(s);
  } catch (e) {
    s.close();
    throw e;
  }
  if (r instanceof Promise) return r.finally(() => s.close()) as T;
  s.close();
  return r;
}

/**
 * testDb on a SQLite file another process owns: a connection per question (onFile),
 * read-only for reads; writes through a plain one, or refused when `readonly`.
 */
export function fileTestDb(path: string, o: { readonly?: boolean } = {}): TestDb {
  return {
    dialect: "sqlite",
    all: async (q, ...p) => onFile(path, (s) => s.query(q).all(...(p as any[])) as any[]),
    get: async (q, ...p) => onFile(path, (s) => (s.query(q).get(...(p as any[])) as any) ?? null),
    run: o.readonly
      ? async () => {
          throw new Error("read-only");
        }
      : async (q, ...p) => onFile(path, (s) => void s.query(q).run(...(p as any[])), { write: true }),
  };
}

/**
 * The reads of a running service's database: on SQLite its file at `path`, opened
 * read-only for each question (fileTestDb); on PostgreSQL (`url`) a pool of ours on it,
 * `pg`. Opened once the service has started (opening a PostgreSQL store migrates it).
 */
export async function serviceReader(o: { path: string; url: string | null }): Promise<{ db: TestDb; pg: PgStore | null; close(): Promise<void> }> {
  if (o.url === null) return { db: fileTestDb(o.path, { readonly: true }), pg: null, close: async () => {} };
  const store = await openPgStore(o.url, { max: 2 });
  return { db: testDb(store), pg: store, close: () => store.close() };
}

/**
 * A running service's database opened beside it, as another process, until close(): the
 * SQLite file at `path` (read-only, or waiting up to 5 s for the service's write lock as
 * its own connection does), or a pool on the PostgreSQL database at `url`.
 */
export async function openServiceDb(o: { path: string; url: string | null; readonly?: boolean }): Promise<{ db: TestDb; store: { kind: "sqlite"; sqlite: Database } | PgStore; close(): Promise<void> }> {
  if (o.url !== null) {
    const store = await openPgStore(o.url, { max: 2 });
    return { db: testDb(store), store, close: () => store.close() };
  }
  const sqlite = new Database(o.path, o.readonly ? { readonly: true } : {});
  if (!o.readonly) sqlite.run(`PRAGMA busy_timeout = ${BUSY_TIMEOUT_MS}`); // as the service's own connection has
  return { db: sqliteTestDb(sqlite), store: { kind: "sqlite", sqlite }, close: async () => sqlite.close() };
}

/**
 * A test of one store's own mechanics (SQLite's file, WAL, write lock, busy handler and
 * checkpointer; PostgreSQL's amcheck, pg_dump, read-only server): defined on that
 * store's run only, not skipped on the other. The other store's counterpart, where one
 * exists, is a test beside it or in a pg-* file (docs/postgresql.md, "Tests").
 */
export const sqliteOnly: typeof test = (DIALECT === "sqlite" ? test : () => {}) as typeof test;
export const pgOnly: typeof test = (DIALECT === "pg" ? test : () => {}) as typeof test;

/** A test installation on the run's store, with `db` for plain SQL. */
export type Env = (TestEnv | PgTestEnv) & { db: TestDb; dialect: Dialect };

// ---------------------------------------------------------------------------------
// The PostgreSQL run's cluster and its migrated template: one per process. Under
// test/pg-pass.ts (`bun test --parallel`), a process runs several files and Bun calls the
// preload's afterAll after each of them, with no hook after its last: so the process
// writes its cluster's directory into CLUSTERS_ENV's folder and test/pg-pass.ts stops
// them all once `bun test` has ended. Run alone (`NACHTWACHT_TEST_DB=pg bun test …`),
// test/setup.ts stops it after the last file.

let cluster: Promise<{ cluster: TestCluster; template: string }> | null = null;

function sharedCluster(): Promise<{ cluster: TestCluster; template: string }> {
  cluster ??= (async () => {
    const c = await startCluster();
    const registry = process.env[CLUSTERS_ENV];
    if (registry) writeFileSync(join(registry, String(process.pid)), c.dir);
    // Migrated once; every test database is a copy of it (CREATE DATABASE … TEMPLATE).
    const template = "nachtwacht_template";
    const store = await openPgStore(await c.createDatabase(template), { max: 1 });
    await store.close();
    return { cluster: c, template };
  })();
  return cluster;
}

/** Stops the run's cluster when one was started (test/setup.ts, after the last file), unless test/pg-pass.ts stops it. */
export async function stopSharedCluster(): Promise<void> {
  if (!cluster || process.env[CLUSTERS_ENV]) return;
  const { cluster: c } = await cluster;
  cluster = null;
  await c.stop();
}

/** The run's cluster, for tests that start processes against it (pg run only). */
export async function testCluster(): Promise<TestCluster> {
  return (await sharedCluster()).cluster;
}

/**
 * A fresh installation on the run's store: makeTestEnv's on SQLite, makePgTestEnv's on
 * a new database of the run's cluster; `env` overrides configuration variables.
 */
export async function makeEnv(env: Record<string, string> = {}, options: AppOptions = {}): Promise<Env> {
  if (DIALECT === "sqlite") {
    const e = makeTestEnv(env, options);
    return Object.assign(e, { db: testDb(e.store), dialect: "sqlite" as const });
  }
  const { cluster: c, template } = await sharedCluster();
  const e = await makePgTestEnv({ createDatabase: () => c.createDatabase(undefined, { template }) }, env, options);
  // Dropped with the installation: the run makes hundreds, and the cluster's directory stays small.
  // A file's afterEach may clean up the previous test's installation again: once is enough.
  const cleanup = e.cleanup;
  const name = new URL(e.url).pathname.slice(1);
  let dropped = false;
  e.cleanup = async () => {
    try {
      await cleanup();
    } finally {
      if (!dropped) {
        dropped = true;
        await c.dropDatabase(name);
      }
    }
  };
  return Object.assign(e, { db: testDb(e.store), dialect: "pg" as const });
}

// ---------------------------------------------------------------------------------
// Arranging, on either store.

/** Inserts a tenant and returns its id. */
export async function addTenant(db: TestDb, naam = "Tenant", actief = true): Promise<number> {
  const row = await db.get<{ id: number }>("INSERT INTO tenants (naam, actief, aangemaakt) VALUES (?, ?, ?) RETURNING id", naam, actief, NOW.toISOString());
  return row!.id;
}

export async function addAdmin(db: TestDb, tenantId: number, email: string, actief = true): Promise<number> {
  const row = await db.get<{ id: number }>(
    "INSERT INTO administrators (tenant_id, naam, email, actief) VALUES (?, ?, ?, ?) RETURNING id",
    tenantId,
    email.split("@")[0]!,
    email,
    actief,
  );
  return row!.id;
}

/** Records one login attempt (recordLoginAttempt on either store); returns its id. */
export async function addLoginAttempt(db: TestDb, a: NewLoginAttempt): Promise<number> {
  const tijdstip = a.tijdstip === undefined ? new Date().toISOString() : typeof a.tijdstip === "string" ? a.tijdstip : a.tijdstip.toISOString();
  const row = await db.get<{ id: number }>(
    "INSERT INTO login_attempts (tijdstip, account, ip, gelukt, reden, tenant_id) VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
    tijdstip,
    a.account,
    a.ip,
    a.gelukt,
    a.reden ?? null,
    a.tenantId ?? null,
  );
  return row!.id;
}

/** Appends chain inputs as the write API does, on either store (one transaction). */
export async function appendInputs(store: AnyStore, inputs: readonly ChainInput[]): Promise<void> {
  if (store.kind === "sqlite") store.sqlite.transaction(() => appendEntries(store.sqlite, inputs)).immediate();
  else await store.sql.begin((tx) => appendEntriesPg(tx, inputs));
}

/** helpers.ts fillChain on either store: the same entries, the same hashes. */
export async function fillChain(store: AnyStore, tenantId: number, n: number, o: FillOptions = {}): Promise<void> {
  const { from = 0, label, at = (i: number) => new Date(NOW.getTime() - (1000 - i) * DAY_MS) } = o;
  const inputs: ChainInput[] = [];
  for (let i = from; i < from + n; i++) {
    inputs.push({
      tenantId,
      actor: `user${i}@example.nl`,
      action: "dossier.gewijzigd",
      subject: label === undefined ? `dossier/${i}` : `dossier/${label}/${i}`,
      details: canonicalJson({ i }),
      createdAt: at(i).toISOString(),
    });
  }
  await appendInputs(store, inputs);
}

/** helpers.ts chainRoot on either store. */
export async function chainRoot(db: TestDb, tenantId: number, after = 0): Promise<string> {
  const rows = await db.all<{ hash: string }>("SELECT hash FROM audit_entries WHERE tenant_id = ? AND seq > ? ORDER BY seq", tenantId, after);
  return rootOfEntryHashes(rows.map((r) => r.hash));
}

/** The number of rows in audit_anchor_log. */
export async function anchorRowCount(db: TestDb): Promise<number> {
  return (await db.get<{ n: number }>("SELECT count(*) AS n FROM audit_anchor_log"))!.n;
}

// ---------------------------------------------------------------------------------
// A copy of an installation's database, put back later as a restore from a backup does.

/** Runs `f` first when `e` is cleaned up (once, however often its cleanup is called). */
function beforeCleanup(e: Env, f: () => unknown): void {
  const cleanup = e.cleanup;
  let done = false;
  e.cleanup = async () => {
    try {
      if (!done) {
        done = true;
        await f();
      }
    } finally {
      await cleanup();
    }
  };
}

/** Puts `store` under the app (deps.store), env.store and env.db, as restoreDatabase does on SQLite; env's cleanup closes it. */
function useStore(e: Env, store: AnyStore): void {
  (e.deps as { store: AnyStore }).store = store;
  (e as { store: AnyStore }).store = store;
  if (store.kind === "pg") (e as { url?: string }).url = store.url;
  e.db = testDb(store);
  beforeCleanup(e, () => store.close());
}

/** The name of the database a PostgreSQL URL names. */
const databaseName = (url: string) => new URL(url).pathname.slice(1);

/**
 * A copy of the database as it is now, as a backup takes it, to put back with
 * restoreCopy: on SQLite a file in env's directory (VACUUM INTO), its path; on PostgreSQL
 * a database made with this one as its template, its URL. A template may have no
 * connections meanwhile, so the app's pool is closed and reopened. The copy itself is
 * never opened (restoreCopy makes a database from it, so it can be put back more than
 * once); it is dropped with env.
 */
export async function copyDatabase(e: Env, name = "oud.db"): Promise<string> {
  if (e.store.kind === "sqlite") {
    const copy = join(e.dir, name);
    e.store.sqlite.query("VACUUM INTO ?").run(copy);
    return copy;
  }
  const url = e.store.url;
  await e.store.close();
  const c = await testCluster();
  const copy = await c.createDatabase(undefined, { template: databaseName(url) });
  beforeCleanup(e, () => c.dropDatabase(databaseName(copy)));
  useStore(e, await openPgStore(url));
  return copy;
}

/**
 * Puts a copy (copyDatabase) back as a restore from a backup does, and gives the app a
 * store on it. SQLite: over the installation's file (restoreDatabase: a new file, no -wal
 * or -shm). PostgreSQL: a new database made from the copy, which the app (and env.url)
 * then names; `inPlace`: under the installation's own name instead (the database dropped
 * and made again), so that a URL taken before still names it.
 */
export async function restoreCopy(e: Env, copy: string, o: { inPlace?: boolean } = {}): Promise<void> {
  if (e.store.kind === "sqlite") {
    restoreDatabase(e as TestEnv, copy);
    e.db = testDb(e.store);
    const store = e.store;
    beforeCleanup(e, () => store.close());
    return;
  }
  const c = await testCluster();
  await e.store.close();
  let url: string;
  if (o.inPlace) {
    url = e.store.url;
    await c.dropDatabase(databaseName(url));
    await c.createDatabase(databaseName(url), { template: databaseName(copy) });
  } else {
    url = await c.createDatabase(undefined, { template: databaseName(copy) });
    beforeCleanup(e, () => c.dropDatabase(databaseName(url)));
  }
  useStore(e, await openPgStore(url));
}

/**
 * Restores a backup file of `nachtwacht backup` the way docs/operations.md says, and
 * starts the app again on it (a new createApp: the write API's writer belongs to the
 * store it was made with). SQLite: the .db.gz unpacked (gunzip checks its checksum) over
 * the installation's file, its -wal and -shm gone. PostgreSQL: pg_restore --no-owner
 * --exit-on-error into a new, empty database, which the app (and env.url) then names.
 */
export async function restoreBackup(e: Env, file: string): Promise<void> {
  if (e.store.kind === "sqlite") {
    const dir = mkdtempSync(join(tmpdir(), "nachtwacht-restore-"));
    try {
      const unpacked = join(dir, "nachtwacht.db");
      writeFileSync(unpacked, Bun.gunzipSync(await Bun.file(file).bytes()));
      restoreDatabase(e as TestEnv, unpacked);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    e.db = testDb(e.store);
    const store = e.store;
    beforeCleanup(e, () => store.close());
    (e as { app: unknown }).app = createApp(e.deps as Deps);
    return;
  }
  const c = await testCluster();
  await e.store.close();
  const url = await c.createDatabase();
  beforeCleanup(e, () => c.dropDatabase(databaseName(url)));
  const r = Bun.spawnSync(["pg_restore", "--no-owner", "--exit-on-error", `--dbname=${libpqEnv(url).PGDATABASE}`, file], { env: { PATH: "/usr/bin:/bin", ...libpqEnv(url) }, stdout: "pipe", stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`pg_restore exit ${r.exitCode}: ${r.stderr.toString()}`);
  useStore(e, await openPgStore(url));
  (e as { app: unknown }).app = createApp(e.deps as Deps);
}

/**
 * Stops the service and starts it again with `config` (a key change: another
 * AUDIT_ANKER_SLEUTEL), on the same database and anchor folder, as its start opens the
 * store (src/server.ts): the seal of `config`, the markers beside its anchor file, `now`.
 */
export async function restartService(e: Env, config: Config, now: Date): Promise<void> {
  await e.store.close();
  const o = { seal: rowSealOf(config), now, pastMarker: pastSealedMarker(config), keyMarker: sealKeyMarker(config) };
  useStore(e, e.store.kind === "sqlite" ? openStore(e.store.path, now, o.seal, o.pastMarker, o.keyMarker) : await openPgStore(e.store.url, o));
  (e.deps as { config: Config }).config = config;
  (e as { config: Config }).config = config;
  (e as { app: unknown }).app = createApp(e.deps as Deps);
}

/**
 * A job run as the job wrapper records it, sealed with the test key (start and end): `durationMs`
 * null leaves it unfinished. Its HTTP status follows the outcome.
 */
export function addSealedRun(env: Env, job: string, gestart: Date, uitkomst = "ok", durationMs: number | null = 1000) {
  const r = {
    job,
    gestart: gestart.toISOString(),
    beeindigd: durationMs === null ? null : new Date(gestart.getTime() + durationMs).toISOString(),
    uitkomst,
    httpStatus: uitkomst === "bezig" ? null : uitkomst === "fout" ? 500 : uitkomst === "afwijking" ? 409 : 200,
  };
  return env.db.run(
    "INSERT INTO job_runs (job, gestart, beeindigd, uitkomst, http_status, zegel, eindzegel) VALUES (?, ?, ?, ?, ?, ?, ?)",
    r.job,
    r.gestart,
    r.beeindigd,
    r.uitkomst,
    r.httpStatus,
    zegel(job, r.gestart),
    eindzegel(r),
  );
}
