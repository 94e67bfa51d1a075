// Shared test helpers: a fresh database file per test, a recording mailer and alarm
// sink, a fixed clock, and a tiny request helper.
import { copyFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Alarm, AlarmSink } from "../src/alarms/alarm.ts";
import { createApp, type AppOptions } from "../src/app.ts";
import { parseConfig, type Config } from "../src/config.ts";
import { openStore, type Store } from "../src/db.ts";
import type { Deps } from "../src/deps.ts";
import type { Mailer, MailMessage } from "../src/mail/mailer.ts";

export const SECRET = "test-secret-0123456789abcdef0123456789abcdef";
/** A fixed Ed25519 key pair in note format, for tests only (made with `nachtwacht key`). */
export const TEST_SIGNING_KEY = "PRIVATE+KEY+nachtwacht.test/sleutel+04706f76+AfO1+waq/kEMf5iWcnHxmDmxSp7UaHorpI2ScjdvRrRr";
export const TEST_VERIFIER_KEY = "nachtwacht.test/sleutel+04706f76+Aaz207b2QEx/XF+SdROXncBC9wVo9P46bYDZjcEehm4L";
export const NOW = new Date("2026-07-23T12:00:00.000Z");

export function tempDir(prefix = "nachtwacht-test-"): { dir: string; cleanup(): void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

export class RecordingMailer implements Mailer {
  readonly bezorging = "smtp" as const;
  readonly sent: MailMessage[] = [];
  /** Recipients for which send() rejects, as a refusing server would. */
  readonly refuse = new Set<string>();
  async send(m: MailMessage) {
    if (this.refuse.has(m.to)) throw new Error(`550 recipient refused: ${m.to}`);
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
  deps: Deps;
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
  const config = parseConfig({
    CRON_SECRET: SECRET,
    AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY,
    DATABASE_PATH: join(dir, "data", "test.db"),
    AUDIT_ANKER_BESTAND: join(dir, "ankers.jsonl"),
    ...env,
  });
  let now = NOW;
  const store = openStore(config.databasePath, new Date(NOW.getTime() - 365 * 24 * 3600 * 1000));
  const mailer = makeMailer(config);
  const alarms = new RecordingAlarms();
  const deps: Deps = { store, mailer, alarms, clock: () => now, config };
  const app = createApp(deps, options);
  return {
    deps,
    store,
    mailer,
    alarms,
    config,
    dir,
    app,
    setNow(d) {
      now = d;
    },
    async cleanup() {
      store.close();
      await mailer.close();
      cleanup();
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
  const fresh = openStore(env.config.databasePath);
  (env.deps as { store: Store }).store = fresh;
  (env as { store: Store }).store = fresh;
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
