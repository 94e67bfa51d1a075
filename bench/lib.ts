// Shared by the benchmark runner and its cases: the sizes, the fixed instant the data
// is built at (the jobs get the same `now`, so retention deletes ~½ and ~⅓), the cached
// database paths, and per-process peak memory.
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { AlarmSink } from "../src/alarms/alarm.ts";
import type { DemoSizes } from "../src/cli/demo-data.ts";
import { parseConfig, type Config } from "../src/config.ts";
import type { Store } from "../src/db.ts";
import type { Deps } from "../src/deps.ts";
import type { Mailer } from "../src/mail/mailer.ts";

export const ROOT = resolve(import.meta.dir, "..");
export const DATA_DIR = join(ROOT, ".bench-data");
/** The data's build time and every job's `now`. */
export const NOW = new Date("2026-07-23T12:00:00.000Z");
export const BUN = process.execPath;

export type SizeName = "XS" | "S" | "M" | "L";

/** L is the target size; M = L/5 and XS = S/5 are the "one fifth" for the memory-flatness figure. */
export const SIZES: Record<SizeName, DemoSizes> = {
  XS: { tenants: 20, admins: 200, audit: 60_000, logins: 60_000, backups: 30 },
  S: { tenants: 100, admins: 1_000, audit: 300_000, logins: 300_000, backups: 30 },
  M: { tenants: 200, admins: 2_000, audit: 1_000_000, logins: 1_000_000, backups: 30 },
  L: { tenants: 1_000, admins: 10_000, audit: 5_000_000, logins: 5_000_000, backups: 30 },
};

/** The size one fifth of `size`, whose verification peak RSS the memory-flatness figure compares with. */
export const FIFTH: Record<SizeName, SizeName | null> = { XS: null, S: "XS", M: null, L: "M" };

/** A burst of failed logins in the last hour, so beveiligingslog-analyse has offenders to find. */
export const BURST = { ips: 5, perIp: 40, accounts: 3, perAccount: 15 };

/**
 * The cache key includes a hash of the code that builds the data, so a change to the
 * demo data (or to the burst) never reuses a stale database.
 */
export function dbPath(size: SizeName, seed: number): string {
  const h = createHash("sha256");
  // bench/cases/anker.ts: its checkpoints are rows of the database as well as lines of its anchor file.
  for (const f of ["src/cli/demo-data.ts", "bench/build.ts", "bench/lib.ts", "db/migrations.gen.ts", "bench/cases/anker.ts"]) h.update(readFileSync(join(ROOT, f)));
  return join(DATA_DIR, `${size}-seed${seed}-${h.digest("hex").slice(0, 8)}.db`);
}

/** Peak resident set of this process (all its threads) so far, in MB: VmHWM. */
export function peakRssMb(): number {
  const m = /^VmHWM:\s+(\d+) kB$/m.exec(readFileSync("/proc/self/status", "utf8"));
  return m ? +(Number(m[1]) / 1024).toFixed(1) : NaN;
}

export function arg(name: string, fallback?: string): string {
  const i = process.argv.indexOf(`--${name}`);
  const v = i >= 0 ? process.argv[i + 1] : undefined;
  if (v === undefined) {
    if (fallback !== undefined) return fallback;
    throw new Error(`missing --${name}`);
  }
  return v;
}

/** A case prints exactly one JSON line on stdout: its result. */
export function report(result: Record<string, unknown>): void {
  console.log(JSON.stringify({ ...result, peakRssMb: peakRssMb() }));
}

export const noopMailer: Mailer = {
  bezorging: "smtp",
  async send() {
    return { messageId: "<bench@localhost>" };
  },
  async close() {},
};

export const noopAlarms: AlarmSink & { raised: number } = {
  raised: 0,
  async raise() {
    this.raised++;
  },
};

/** The benchmark's signing key (a test key, public in this repository). */
export const BENCH_SIGNING_KEY = "PRIVATE+KEY+nachtwacht.bench/sleutel+11e47d05+AVJDQQth8S4y1FZ3eBCH/AUC6VHBJChhheYMCk+ShHue";

/** Each benchmark database has its anchor file beside it. */
export const anchorFileOf = (databasePath: string) => `${databasePath}.ankers.jsonl`;

export function benchConfig(databasePath: string, env: Record<string, string> = {}): Config {
  return parseConfig({
    CRON_SECRET: "bench-" + "0".repeat(58),
    AUDIT_ANKER_SLEUTEL: BENCH_SIGNING_KEY,
    DATABASE_PATH: databasePath,
    AUDIT_ANKER_BESTAND: anchorFileOf(databasePath),
    ...env,
  });
}

export function benchDeps(store: Store, env: Record<string, string> = {}, mailer: Mailer = noopMailer): Deps<Store> {
  return { store, mailer, alarms: noopAlarms, clock: () => NOW, config: benchConfig(store.path, env) };
}

export const ms = (t0: number) => +(performance.now() - t0).toFixed(1);

/**
 * A verification floor over worker threads, as the job's pool works: `threads` workers
 * of the file `worker`, each given `init` once, then contiguous ranges of tenants from one
 * shared queue (several per worker, so one slowed by the shared machine does not hold up
 * the end). Each worker answers a range `{ from, to }` with its entries and mismatches.
 */
export async function floorOnWorkers(worker: URL, init: unknown, tenants: readonly number[], threads: number): Promise<{ n: number; mismatches: number }> {
  const per = Math.max(1, Math.ceil(tenants.length / (threads * 8)));
  const queue: [number, number][] = [];
  for (let i = 0; i < tenants.length; i += per) queue.push([tenants[i]!, tenants[Math.min(i + per, tenants.length) - 1]!]);
  let n = 0;
  let mismatches = 0;
  const pool = Array.from({ length: threads }, () => new Worker(worker.href));
  try {
    await Promise.all(
      pool.map(
        (w) =>
          new Promise<void>((resolve, reject) => {
            const next = () => {
              const r = queue.shift();
              if (!r) return resolve();
              w.postMessage({ from: r[0], to: r[1] });
            };
            w.onmessage = (e: MessageEvent<{ n: number; mismatches: number }>) => {
              n += e.data.n;
              mismatches += e.data.mismatches;
              next();
            };
            w.onerror = (e) => reject(new Error(e.message));
            w.postMessage(init);
            next();
          }),
      ),
    );
  } finally {
    for (const w of pool) w.terminate();
  }
  return { n, mismatches };
}
