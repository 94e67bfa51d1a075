// Helpers for the tests that run the compiled binary as a real process: build it once
// per test run (with the package.json "build" command, into a temp dir), find a free
// port, start it with its own database and wait for /health.
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import pkg from "../package.json" with { type: "json" };
import { TEST_SIGNING_KEY } from "./helpers.ts";

export const ROOT = resolve(import.meta.dir, "..");
/** Bun itself: under `bun test` this is the bun binary, wherever PATH points. */
export const BUN = process.execPath;

let built: Promise<{ path: string; ms: number }> | undefined;

/**
 * Removes the binaries (120 MB each) that test runs which have ended left in `dir`: bun
 * test runs no "exit" handler, so each run's binary stayed behind (281 of them, 31 GB, on
 * this machine). A dir is named after the pid of the run that built it; the dirs of runs
 * still alive, and of this one, are kept. Also the unnamed ones of the code before.
 */
export function removeEndedBuilds(dir = tmpdir()): string[] {
  const removed: string[] = [];
  for (const name of readdirSync(dir)) {
    const m = /^nachtwacht-bin-(?:(\d+)-)?[A-Za-z0-9]{6}$/.exec(name);
    if (!m) continue;
    if (m[1] !== undefined) {
      const pid = Number(m[1]);
      if (pid === process.pid) continue;
      try {
        process.kill(pid, 0);
        continue; // alive
      } catch (e) {
        if ((e as { code?: string }).code === "EPERM") continue; // alive, another user's
      }
    }
    rmSync(join(dir, name), { recursive: true, force: true });
    removed.push(name);
  }
  return removed;
}

/**
 * Compiles src/index.ts with exactly the flags of `npm run build`, but into a temp
 * dir, so the test never runs a stale dist/ and never races another build of it.
 */
export function buildBinary(): Promise<{ path: string; ms: number }> {
  built ??= (async () => {
    removeEndedBuilds();
    const dir = mkdtempSync(join(tmpdir(), `nachtwacht-bin-${process.pid}-`));
    const out = join(dir, "nachtwacht");
    const words = pkg.scripts.build.split(/\s+/);
    if (words[0] !== "bun" || words[1] !== "build") throw new Error(`unexpected build script: ${pkg.scripts.build}`);
    const args = words.slice(1).map((w, i, all) => (all[i - 1] === "--outfile" ? out : w));
    const t0 = performance.now();
    const p = Bun.spawn([BUN, ...args], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
    const [code, stdout, stderr] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
    if (code !== 0) throw new Error(`bun build failed (${code}):\n${stdout}\n${stderr}`);
    return { path: out, ms: performance.now() - t0 };
  })();
  return built;
}

/** A port that was free a moment ago: bind port 0, read it, let it go. */
export function freePort(): number {
  const l = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = l.port;
  l.stop(true);
  return port;
}

export interface RunningBinary {
  url: string;
  pid: number;
  /** Milliseconds from spawn to the first 200 from /health. */
  startMs: number;
  /** Everything the process wrote so far, stdout and stderr. */
  output(): string;
  stop(): Promise<void>;
}

/**
 * Starts the binary with cwd = a fresh temp dir (so nothing relies on the source tree),
 * its database in that dir, and the given extra environment. The secret goes in the
 * environment only, as systemd's EnvironmentFile does; never on the command line.
 */
export async function startBinary(bin: string, env: Record<string, string>): Promise<RunningBinary & { dir: string }> {
  const dir = mkdtempSync(join(tmpdir(), "nachtwacht-run-"));
  const port = freePort();
  const url = `http://127.0.0.1:${port}`;
  let out = "";
  const t0 = performance.now();
  const proc = Bun.spawn([bin], {
    cwd: dir,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: dir, DATABASE_PATH: join(dir, "data", "nachtwacht.db"), PORT: String(port), HOST: "127.0.0.1", AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY, ...env },
    stdout: "pipe",
    stderr: "pipe",
  });
  const decoder = new TextDecoder();
  const drain = async (s: ReadableStream<Uint8Array>) => {
    const reader = s.getReader();
    for (let r = await reader.read(); !r.done; r = await reader.read()) out += decoder.decode(r.value, { stream: true });
  };
  const drained = Promise.all([drain(proc.stdout), drain(proc.stderr)]);
  let startMs = -1;
  for (let i = 0; i < 400 && startMs < 0; i++) {
    if (proc.exitCode !== null) break;
    try {
      const r = await fetch(`${url}/health`);
      if (r.status === 200) startMs = performance.now() - t0;
    } catch {
      await Bun.sleep(25);
    }
  }
  if (startMs < 0) {
    proc.kill();
    await drained;
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`binary did not answer /health (exit ${proc.exitCode}):\n${out}`);
  }
  return {
    url,
    dir,
    pid: proc.pid,
    startMs,
    output: () => out,
    async stop() {
      proc.kill("SIGTERM");
      await proc.exited;
      await drained;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A test fixture running as its own process (test/fixtures/<name>), its output collected as it comes. */
export interface FixtureProcess {
  proc: ReturnType<typeof Bun.spawn>;
  stdout(): string;
  stderr(): string;
}

export function spawnFixture(
  name: string,
  env: Record<string, string>,
  /** `preload`: fixtures run before it (bun --preload); `stdin`: a pipe the test writes to or ends (proc.stdin). */
  options: { preload?: string; stdin?: "pipe" } = {},
): FixtureProcess {
  const preload = options.preload ? ["--preload", resolve(ROOT, "test", "fixtures", options.preload)] : [];
  const proc = Bun.spawn([BUN, ...preload, resolve(ROOT, "test", "fixtures", name)], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdin: options.stdin ?? "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  const collect = (stream: ReadableStream<Uint8Array>): (() => string) => {
    let text = "";
    const decoder = new TextDecoder();
    const reader = stream.getReader();
    void (async () => {
      for (let r = await reader.read(); !r.done; r = await reader.read()) text += decoder.decode(r.value, { stream: true });
    })();
    return () => text;
  };
  return { proc, stdout: collect(proc.stdout as ReadableStream<Uint8Array>), stderr: collect(proc.stderr as ReadableStream<Uint8Array>) };
}
