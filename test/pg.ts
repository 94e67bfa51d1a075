// A throw-away PostgreSQL cluster for the tests: Debian's postgresql server binaries,
// a fresh data directory, loopback only, trust authentication for one user, stopped
// (immediate) and removed after the file's tests. PostgreSQL refuses to run as root,
// so as root it runs as the `postgres` user (runuser). test/preflight.ts names the
// package when the server is missing.
import { chmodSync, existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll } from "bun:test";
import { SQL } from "bun";
import { freePort } from "./binary.ts";

/** The newest installed server's bin directory, or null. */
export function postgresBinDir(): string | null {
  const root = "/usr/lib/postgresql";
  if (!existsSync(root)) return null;
  const versions = readdirSync(root)
    .filter((v) => existsSync(join(root, v, "bin", "initdb")))
    .sort((a, b) => Number(b) - Number(a));
  return versions.length > 0 ? join(root, versions[0]!, "bin") : null;
}

export interface TestCluster {
  /** The maintenance database's URL (user nw, no password, 127.0.0.1). */
  url: string;
  port: number;
  /** The directory that holds its data directory and socket (stopClusterAt). */
  dir: string;
  /**
   * A new database on the cluster; its URL. Empty, or a copy of `template` (a database
   * nobody is connected to); `icuLocale` gives it a linguistic (ICU) collation instead of
   * the cluster's C.UTF-8.
   */
  createDatabase(name?: string, o?: { icuLocale?: string; template?: string }): Promise<string>;
  dropDatabase(name: string): Promise<void>;
  stop(): Promise<void>;
}

/** The folder where each process of the PostgreSQL pass names its cluster (test/pg-pass.ts, test/dialect.ts). */
export const CLUSTERS_ENV = "NACHTWACHT_TEST_CLUSTERS";

/**
 * Stops the cluster in `dir` (startCluster's: its data directory `dir/data`), if it still
 * runs, and removes `dir`. Also for clusters another process started (test/pg-pass.ts).
 */
export function stopClusterAt(dir: string): void {
  const bin = postgresBinDir();
  try {
    if (bin !== null && existsSync(join(dir, "data", "postmaster.pid"))) {
      run([join(bin, "pg_ctl"), "-D", join(dir, "data"), "-m", "immediate", "-w", "stop"], process.getuid?.() === 0);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function run(cmd: string[], asPostgres: boolean): void {
  const full = asPostgres ? ["runuser", "-u", "postgres", "--", ...cmd] : cmd;
  const r = Bun.spawnSync(full, { stdout: "pipe", stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`${cmd[0]} failed (${r.exitCode}): ${r.stderr.toString()}${r.stdout.toString()}`);
}

let counter = 0;

/** `settings`: server settings (`-c name=value`) beyond the defaults initdb leaves; the benchmarks try some. */
export async function startCluster(o: { settings?: Record<string, string> } = {}): Promise<TestCluster> {
  const bin = postgresBinDir();
  if (bin === null) throw new Error("PostgreSQL server not installed (Debian package postgresql; test/preflight.ts)");
  const asPostgres = process.getuid?.() === 0;
  const dir = mkdtempSync(join(tmpdir(), "nachtwacht-pg-"));
  // The postgres user must reach its data directory and socket directory.
  chmodSync(dir, 0o777);
  const data = join(dir, "data");
  run([join(bin, "initdb"), "-D", data, "-A", "trust", "-U", "nw", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"], asPostgres);
  const port = freePort();
  // fsync stays on: the crash tests rely on what a committed transaction promises.
  const extra = Object.entries(o.settings ?? {}).map(([k, v]) => {
    if (!/^[a-z_]+$/.test(k) || !/^[A-Za-z0-9_.]+$/.test(v)) throw new Error(`not a server setting: ${k}=${v}`);
    return ` -c ${k}=${v}`;
  });
  run(
    [join(bin, "pg_ctl"), "-D", data, "-l", join(dir, "log"), "-w", "-o", `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c max_connections=100${extra.join("")}`, "start"],
    asPostgres,
  );
  const url = `postgres://nw@127.0.0.1:${port}/postgres`;
  const admin = new SQL(url, { max: 1 });
  return {
    url,
    port,
    dir,
    async createDatabase(name = `t${process.pid}_${++counter}`, o: { icuLocale?: string; template?: string } = {}) {
      const icu = o.icuLocale ? ` TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE '${o.icuLocale.replace(/'/g, "")}'` : "";
      const template = o.template ? ` TEMPLATE "${o.template.replace(/"/g, "")}"` : "";
      await admin.unsafe(`CREATE DATABASE "${name.replace(/"/g, "")}"${icu || template}`);
      return `postgres://nw@127.0.0.1:${port}/${name}`;
    },
    async dropDatabase(name: string) {
      await admin.unsafe(`DROP DATABASE "${name.replace(/"/g, "")}" WITH (FORCE)`);
    },
    async stop() {
      await admin.close();
      stopClusterAt(dir);
    },
  };
}

/**
 * One cluster for a test file: started before its tests (beforeAll), stopped after them
 * (afterAll). The object stands for it once started, so the file writes `cluster.url`,
 * `cluster.createDatabase()` as with startCluster's own.
 */
export function useTestCluster(): TestCluster {
  let started: TestCluster | undefined;
  beforeAll(async () => {
    started = await startCluster();
  });
  afterAll(async () => {
    await started?.stop();
  });
  const it = () => {
    if (!started) throw new Error("the test cluster is not started yet (useTestCluster: use it inside tests or hooks)");
    return started;
  };
  return {
    get url() {
      return it().url;
    },
    get port() {
      return it().port;
    },
    get dir() {
      return it().dir;
    },
    createDatabase: (name, o) => it().createDatabase(name, o),
    dropDatabase: (name) => it().dropDatabase(name),
    stop: () => it().stop(),
  };
}
