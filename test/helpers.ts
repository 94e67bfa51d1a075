// Shared test helpers: a fresh database file per test, a recording mailer and alarm
// sink, a fixed clock, a tiny request helper, and for the audit tests: filling a chain,
// RFC 6962 written out, and the anchor file's lines.
import type { Database } from "bun:sqlite";
import { createHash } from "node:crypto";
import { closeSync, copyFileSync, mkdtempSync, openSync, readFileSync, rmSync, statfsSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Alarm, AlarmSink } from "../src/alarms/alarm.ts";
import { appendAuditEntry } from "../src/audit/chain.ts";
import { createApp, type AppOptions } from "../src/app.ts";
import { parseConfig, type Config } from "../src/config.ts";
import { openStore, type Store } from "../src/db.ts";
import { auditKeys } from "../src/audit/keys.ts";
import { rowSeal, rowSealOf, type BackupColumns } from "../src/row-seal.ts";
import type { AnyStore, Deps } from "../src/deps.ts";
import type { Mailer, MailMessage } from "../src/mail/mailer.ts";
import { markInstalledPg, openPgStore, type PgStore } from "../src/pg/store.ts";

export const SECRET = "test-secret-0123456789abcdef0123456789abcdef";
/** A fixed Ed25519 key pair in note format, for tests only (made with `nachtwacht key`). */
export const TEST_SIGNING_KEY = "PRIVATE+KEY+nachtwacht.test/sleutel+04706f76+AfO1+waq/kEMf5iWcnHxmDmxSp7UaHorpI2ScjdvRrRr";
export const TEST_VERIFIER_KEY = "nachtwacht.test/sleutel+04706f76+Aaz207b2QEx/XF+SdROXncBC9wVo9P46bYDZjcEehm4L";
export const NOW = new Date("2026-07-23T12:00:00.000Z");
/** The run seal of a service configured with TEST_SIGNING_KEY (src/row-seal.ts). */
export const TEST_SEAL = rowSeal(auditKeys({ auditAnkerSleutel: TEST_SIGNING_KEY, auditVertrouwdeSleutels: [] }));
/** job_runs.zegel of a run of `job` started at `gestart`, as the service seals it: for history written by a test. */
export const zegel = (job: string, gestart: string) => TEST_SEAL.seal({ job, gestart });
/** job_runs.eindzegel of a run that ended as given, as the service seals it; null for one still 'bezig'. */
export function eindzegel(r: { job: string; gestart: string; beeindigd: string | null; uitkomst: string; httpStatus?: number | null; samenvatting?: string | null; fout?: string | null }): string | null {
  if (r.uitkomst === "bezig") return null;
  return TEST_SEAL.sealEnd({ ...r, httpStatus: r.httpStatus ?? null, samenvatting: r.samenvatting ?? null, fout: r.fout ?? null });
}
/** audit_verification_state.zegel of a tenant's result, as audit-verificatie seals it. */
export function stateZegel(r: { tenantId: number; gecontroleerd: string; intact: boolean; aantalEntries: number; foutSeq?: number | null; foutEntryId?: number | null; foutReden?: string | null }): string {
  return TEST_SEAL.sealVerification({ ...r, foutSeq: r.foutSeq ?? null, foutEntryId: r.foutEntryId ?? null, foutReden: r.foutReden ?? null });
}
/** backup_statuses.zegel of a report as stored, as backup-status seals it. */
export const backupZegel = (r: BackupColumns) => TEST_SEAL.sealBackup(r);
/** A host backup's report as backup-status stores it (without its seal); an absent foutmelding is "". */
export function backupReportRow(b: { ontvangen: Date; exitCode: number; grootte?: number | null; bestandsnaam?: string; foutmelding?: string }): BackupColumns {
  return {
    ontvangen: b.ontvangen.toISOString(),
    exitCode: b.exitCode,
    gelukt: b.exitCode === 0,
    bestandsnaam: b.bestandsnaam ?? null,
    grootte: b.grootte ?? null,
    foutmelding: b.foutmelding ?? "",
    bron: "host-cron",
  };
}
/**
 * Stores a backup report in backup_statuses through `db.run` (either store), as
 * backup-status does (sealed) unless `zegel` says otherwise (none, or a copied one: a
 * database writer's row).
 */
export function insertBackupRow(db: { run(query: string, ...params: unknown[]): Promise<void> }, row: BackupColumns, zegel: string | null = backupZegel(row)): Promise<void> {
  return db.run(
    "INSERT INTO backup_statuses (ontvangen, exit_code, gelukt, bestandsnaam, grootte, foutmelding, bron, zegel) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
    row.ontvangen,
    row.exitCode,
    row.gelukt,
    row.bestandsnaam,
    row.grootte,
    row.foutmelding,
    row.bron,
    zegel,
  );
}

/** Polls `check` until it returns a value other than undefined/false; throws after `ms`. Never a fixed sleep as synchronisation. */
export async function until<T>(what: string, check: () => T | undefined | false | Promise<T | undefined | false>, ms = 30_000): Promise<T> {
  const deadline = performance.now() + ms;
  for (;;) {
    const v = await check();
    if (v !== undefined && v !== false) return v;
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(5);
  }
}

/**
 * Every SQL text `sqlite` is given (query, prepare, run, exec) while `during` runs: which
 * statements a call sends on that connection, and so which it leaves to another.
 */
export async function statementsDuring<T>(sqlite: Database, during: () => Promise<T>): Promise<{ seen: string[]; result: T }> {
  const seen: string[] = [];
  const record = <F extends (q: string, ...rest: never[]) => unknown>(f: F) => ((q: string, ...rest: never[]) => (seen.push(q), f(q, ...rest))) as F;
  const original = { query: sqlite.query, prepare: sqlite.prepare, run: sqlite.run, exec: sqlite.exec };
  Object.assign(sqlite, { query: record(sqlite.query.bind(sqlite)), prepare: record(sqlite.prepare.bind(sqlite)), run: record(sqlite.run.bind(sqlite)), exec: record(sqlite.exec.bind(sqlite)) });
  try {
    return { seen, result: await during() };
  } finally {
    Object.assign(sqlite, original);
  }
}

export function tempDir(prefix = "nachtwacht-test-"): { dir: string; cleanup(): void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/**
 * A fresh tmpfs of `size` (mount's size=, e.g. "4m") at a new folder: a real file system of a
 * known size, to fill. Needs root, as .ci/run runs the tests. `cleanup` unmounts it and removes the folder.
 */
export function mountTmpfs(size: string): { dir: string; cleanup(): void } {
  const { dir, cleanup } = tempDir();
  const r = Bun.spawnSync(["mount", "-t", "tmpfs", "-o", `size=${size}`, "tmpfs", dir], { stderr: "pipe" });
  if (r.exitCode !== 0) {
    cleanup();
    throw new Error(`this test needs root to mount a tmpfs (as .ci/run runs it): ${r.stderr.toString().trim()}`);
  }
  return {
    dir,
    cleanup: () => {
      Bun.spawnSync(["umount", "-l", dir]);
      cleanup();
    },
  };
}

/** Fills `dir`'s file system with a ballast file `name` until `freeBytes` are left for an unprivileged writer (statfs f_bavail). */
export function fillUntilFree(dir: string, freeBytes: number, name = "ballast"): void {
  const s = statfsSync(dir);
  let left = s.bavail * s.bsize - freeBytes;
  const fd = openSync(join(dir, name), "w");
  const chunk = Buffer.alloc(64 * 1024, 1);
  try {
    while (left > 0) left -= writeSync(fd, chunk, 0, Math.min(chunk.length, left));
  } finally {
    closeSync(fd);
  }
}

export class RecordingMailer implements Mailer {
  readonly bezorging = "smtp" as const;
  readonly sent: MailMessage[] = [];
  /** Recipients for which send() rejects, as a refusing server would: with its reply code (surelyNotDelivered). */
  readonly refuse = new Set<string>();
  async send(m: MailMessage) {
    if (this.refuse.has(m.to)) throw Object.assign(new Error(`550 recipient refused: ${m.to}`), { responseCode: 550 });
    this.sent.push(m);
    return { messageId: `<${this.sent.length}@test>` };
  }
  async close() {}
}

export class RecordingAlarms implements AlarmSink {
  readonly raised: Alarm[] = [];
  async raise(a: Alarm) {
    this.raised.push(a);
  }
}

export interface TestEnv<M extends Mailer = RecordingMailer> {
  deps: Deps<Store>;
  store: Store;
  mailer: M;
  alarms: RecordingAlarms;
  config: Config;
  dir: string;
  app: ReturnType<typeof createApp>;
  /** Sets the clock the jobs see. */
  setNow(d: Date): void;
  /** Closes the database (at once) and the mailer, and removes the directory. */
  cleanup(): Promise<void>;
}

/**
 * A fresh app on its own database file (`dir/data/test.db`, installed a year before
 * NOW, clock at NOW); `env` overrides configuration variables, `makeMailer` builds the
 * mailer from the parsed config.
 */
export function buildTestEnv<M extends Mailer>(env: Record<string, string>, options: AppOptions, makeMailer: (config: Config) => M): TestEnv<M> {
  const { dir, cleanup } = tempDir();
  const config = testConfig(dir, env);
  const store = openStore(config.databasePath, INSTALLED, rowSealOf(config));
  return assemble(store, config, makeMailer(config), options, dir, async () => {
    store.close();
    cleanup();
  });
}

/** When the test installations were installed: a year before NOW. */
const INSTALLED = new Date(NOW.getTime() - 365 * 24 * 3600 * 1000);

/** The configuration of a test environment in `dir`; `env` overrides it. */
function testConfig(dir: string, env: Record<string, string>): Config {
  return parseConfig({
    CRON_SECRET: SECRET,
    AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY,
    DATABASE_PATH: join(dir, "data", "test.db"),
    AUDIT_ANKER_BESTAND: join(dir, "ankers.jsonl"),
    // The free space of the machine the tests run on is no part of what they check;
    // test/disk-space.test.ts measures a disk of its own.
    SCHIJF_MIN_VRIJ_PROCENT: "0",
    ...env,
  });
}

/** The app and its dependencies on `store`, the clock at NOW; `close` releases the store and the directory. */
function assemble<S extends AnyStore, M extends Mailer>(store: S, config: Config, mailer: M, options: AppOptions, dir: string, close: () => Promise<void>) {
  let now = NOW;
  const alarms = new RecordingAlarms();
  const deps: Deps<S> = { store, mailer, alarms, clock: () => now, config };
  const app = createApp(deps, options);
  return {
    deps,
    store,
    mailer,
    alarms,
    config,
    dir,
    app,
    setNow(d: Date) {
      now = d;
    },
    async cleanup() {
      await mailer.close();
      await close();
    },
  };
}

/**
 * Puts an earlier copy of the database back as a restore from a backup does (a new file,
 * a new inode, no -wal or -shm) and gives the app a Store opened on it.
 */
export function restoreDatabase(env: TestEnv<any>, copy: string): void {
  env.store.close();
  for (const f of ["-wal", "-shm", ""]) rmSync(env.config.databasePath + f, { force: true });
  copyFileSync(copy, env.config.databasePath);
  const fresh = openStore(env.config.databasePath, new Date(), rowSealOf(env.config));
  (env.deps as { store: Store }).store = fresh;
  (env as { store: Store }).store = fresh;
}

/** TestEnv's PostgreSQL counterpart: the same app and jobs, on a fresh database of a test cluster (test/pg.ts). */
export interface PgTestEnv extends Omit<TestEnv, "deps" | "store"> {
  deps: Deps<PgStore>;
  store: PgStore;
  url: string;
}

/**
 * A fresh app on a new database of `cluster` (test/pg.ts startCluster), with a recording
 * mailer, the clock at NOW and the configuration as makeTestEnv's; `env` overrides
 * configuration variables. The anchor file lives in a temporary directory.
 */
export async function makePgTestEnv(cluster: { createDatabase(): Promise<string> }, env: Record<string, string> = {}, options: AppOptions = {}): Promise<PgTestEnv> {
  const { dir, cleanup } = tempDir();
  const config = testConfig(dir, env);
  const url = await cluster.createDatabase();
  const store = await openPgStore(url);
  await markInstalledPg(store.sql, TEST_SEAL, INSTALLED);
  const assembled = assemble(store, config, new RecordingMailer(), options, dir, async () => {
    await store.close();
    cleanup();
  });
  return { ...assembled, url };
}

/** A fresh app with a recording mailer; `env` overrides configuration variables. */
export function makeTestEnv(env: Record<string, string> = {}, options: AppOptions = {}): TestEnv {
  return buildTestEnv(env, options, () => new RecordingMailer());
}

export interface PostOptions {
  token?: string | null;
  body?: string;
  headers?: Record<string, string>;
  method?: string;
}

/** Calls the app in-process, as curl from the crontab would. */
export async function call(app: { handle(r: Request): Promise<Response> }, path: string, o: PostOptions = {}) {
  const headers: Record<string, string> = { ...(o.headers ?? {}) };
  const token = o.token === undefined ? SECRET : o.token;
  if (token !== null) headers.authorization = `Bearer ${token}`;
  const res = await app.handle(new Request(`http://localhost${path}`, { method: o.method ?? "POST", headers, body: o.body }));
  const text = await res.text();
  let json: any = undefined;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: res.status, headers: res.headers, text, json };
}

/** Inserts a tenant and returns its id. */
export function addTenant(store: Store, naam = "Tenant", actief = true): number {
  const row = store.sqlite
    .query("INSERT INTO tenants (naam, actief, aangemaakt) VALUES (?, ?, ?) RETURNING id")
    .get(naam, actief ? 1 : 0, NOW.toISOString()) as { id: number };
  return row.id;
}

export function addAdmin(store: Store, tenantId: number, email: string, actief = true): number {
  const row = store.sqlite
    .query("INSERT INTO administrators (tenant_id, naam, email, actief) VALUES (?, ?, ?, ?) RETURNING id")
    .get(tenantId, email.split("@")[0]!, email, actief ? 1 : 0) as { id: number };
  return row.id;
}

// ---------------------------------------------------------------------------------
// Audit chains and the anchor file

export const DAY_MS = 24 * 3600 * 1000;

export interface FillOptions {
  /** The number of the first entry (i); 0 by default. */
  from?: number;
  /** Put into the subject (`dossier/<label>/<i>`), so that two fills with the same numbers make other entries. */
  label?: string;
  /** When entry i was made; by default (1000 − i) days before NOW, so a higher i is younger. */
  at?: (i: number) => Date;
}

/**
 * Appends `n` entries to a tenant's chain, i = from … from + n − 1: actor
 * user<i>@example.nl, action dossier.gewijzigd, subject dossier/<i> (or
 * dossier/<label>/<i>), details {i}, created at `at(i)`.
 */
export function fillChain(store: Store, tenantId: number, n: number, o: FillOptions = {}): void {
  const { from = 0, label, at = (i: number) => new Date(NOW.getTime() - (1000 - i) * DAY_MS) } = o;
  for (let i = from; i < from + n; i++) {
    appendAuditEntry(store.sqlite, {
      tenantId,
      actor: `user${i}@example.nl`,
      action: "dossier.gewijzigd",
      subject: label === undefined ? `dossier/${i}` : `dossier/${label}/${i}`,
      details: { i },
      createdAt: at(i),
    });
  }
}

const sha256 = (...parts: Uint8Array[]) => {
  const h = createHash("sha256");
  for (const p of parts) h.update(p);
  return new Uint8Array(h.digest());
};

/** RFC 6962's Merkle tree hash of `leaves` (the leaf data), written out here, independent of src/audit/merkle.ts. */
export function mth(leaves: Uint8Array[]): Uint8Array {
  if (leaves.length === 0) return sha256();
  if (leaves.length === 1) return sha256(new Uint8Array([0]), leaves[0]!);
  let k = 1;
  while (k * 2 < leaves.length) k *= 2;
  return sha256(new Uint8Array([1]), mth(leaves.slice(0, k)), mth(leaves.slice(k)));
}

/** The RFC 6962 root (base64) of a tree whose leaves are these entry hashes (hex). */
export function rootOfEntryHashes(hashes: readonly string[]): string {
  return Buffer.from(mth(hashes.map((h) => new Uint8Array(Buffer.from(h, "hex"))))).toString("base64");
}

/** The RFC 6962 root (base64) over a tenant's entries with seq > `after`, as the database holds them now. */
export function chainRoot(store: Store, tenantId: number, after = 0): string {
  const rows = store.sqlite.query("SELECT hash FROM audit_entries WHERE tenant_id = ? AND seq > ? ORDER BY seq").values(tenantId, after) as [string][];
  return rootOfEntryHashes(rows.map(([h]) => h));
}

/** The anchor file's lines, parsed. */
export function anchorFileLines(path: string): { soort: string; tenantId?: number; note: string }[] {
  return readFileSync(path, "utf8")
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => JSON.parse(l) as { soort: string; tenantId?: number; note: string });
}

/** The number of rows in audit_anchor_log. */
export function anchorRowCount(store: Store): number {
  return (store.sqlite.query("SELECT count(*) AS n FROM audit_anchor_log").get() as { n: number }).n;
}

/**
 * A clock for retention's pacing driven by the work done, so a chunk's duration follows
 * its size as on a real machine: 5 µs per row deleted (as seen inside the batch's
 * transaction) and 1 µs per row for its COMMIT, which shows once the clock is read after
 * it. `deleted` counts the rows gone so far on `sqlite`.
 */
export function workDrivenClock(sqlite: { inTransaction: boolean }, deleted: () => number): () => number {
  let committed = 0;
  return () => {
    const now = deleted();
    if (!sqlite.inTransaction) committed = now;
    return now * 0.005 + committed * 0.001;
  };
}
