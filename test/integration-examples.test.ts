// The integration examples (examples/audit.sh, .py, .ts, .php; docs/integration.md) run
// as child processes against the real service, itself a process started from source:
// their output (the receipts) and the database agree, a rerun with the same sleutels
// stores nothing new, retries through a real flaky HTTP proxy store once, refusals are
// final, and the chains they wrote verify. The secret is never on a command line:
// checked statically in the sources and, while each example waits for an answer, in
// /proc/*/cmdline of every process. Each example needs its interpreter (python3, php with
// the curl extension; .ci/run installs them): without it its tests fail, naming the
// package. On the PostgreSQL run
// (test/dialect.ts) the service gets DATABASE_URL, a fresh database of the run's cluster,
// and the tests (and `nachtwacht export`) read that database instead of the service's file.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { rowHash, type EntryRow } from "../src/audit/chain.ts";
import type { AuditAnswer } from "../examples/audit.ts";
import { NOTHING_STORED_HEADER, NOTHING_STORED_VALUE } from "../src/client.ts";
import { freePort } from "./binary.ts";
import { ROOT, startService, type ServiceProcess } from "./fixtures/hardening.ts";
import { TEST_SIGNING_KEY, TEST_VERIFIER_KEY } from "./helpers.ts";
import { DIALECT, serviceReader, testCluster } from "./dialect.ts";
import { MAX_BATCH_BYTES } from "../src/ingest/audit.ts";

// Random per run, so finding one on a command line cannot be a coincidence.
const APP = `app-${randomBytes(24).toString("hex")}`;
const CRON = `cron-${randomBytes(24).toString("hex")}`;

function phpWithCurl(): boolean {
  if (!Bun.which("php")) return false;
  return Bun.spawnSync(["php", "-r", "exit(function_exists('curl_init') ? 0 : 1);"]).exitCode === 0;
}

interface Example {
  file: string;
  cmd: string[];
  /** Why it cannot run here; null when it can. */
  missing: string | null;
}

const EXAMPLES: Example[] = [
  { file: "examples/audit.sh", cmd: ["bash", "examples/audit.sh"], missing: Bun.which("curl") ? null : "no curl (Debian package curl)" },
  { file: "examples/audit.py", cmd: ["python3", "examples/audit.py"], missing: Bun.which("python3") ? null : "no python3 (Debian package python3)" },
  { file: "examples/audit.ts", cmd: [process.execPath, "examples/audit.ts"], missing: null },
  { file: "examples/audit.php", cmd: ["php", "examples/audit.php"], missing: phpWithCurl() ? null : "no php with the curl extension (Debian packages php-cli php-curl)" },
];

let dir: string;
let svc: ServiceProcess;
let dbPath: string;
let anchorPath: string;
let nextTenant = 1;
/** PostgreSQL run: the service's database (DATABASE_URL). */
let pgUrl: string | null = null;
/** The test's reads of the service's database. */
let data: Awaited<ReturnType<typeof serviceReader>> | null = null;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "nachtwacht-examples-"));
  dbPath = join(dir, "data", "nachtwacht.db");
  anchorPath = join(dir, "ankers.jsonl");
  const env: Record<string, string> = { CRON_SECRET: CRON, APP_SECRET: APP, AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY, DATABASE_PATH: dbPath, AUDIT_ANKER_BESTAND: anchorPath };
  if (DIALECT === "pg") {
    // An empty database: the service migrates it at start.
    pgUrl = await (await testCluster()).createDatabase();
    env.DATABASE_URL = pgUrl;
  }
  svc = await startService(env);
  data = await serviceReader({ path: dbPath, url: pgUrl });
});

afterAll(async () => {
  if (svc) {
    svc.proc.kill("SIGTERM");
    await svc.exited;
    // The secret is in the service's environment, never in what it wrote.
    expect(svc.output()).not.toContain(APP);
  }
  await data?.close();
  rmSync(dir, { recursive: true, force: true });
});

async function api(method: string, path: string, body: unknown, token = APP) {
  const res = await fetch(svc.url + path, { method, headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: res.status, json: (await res.json()) as any };
}

/** A new tenant, created through the write API as the host application would. */
async function newTenant(): Promise<number> {
  const id = nextTenant++;
  const r = await api("PUT", `/api/tenants/${id}`, { naam: `Tenant ${id}`, actief: true });
  expect(r.status).toBe(201);
  return id;
}

/** examples/batch.json for another tenant, its sleutels with a suffix; written to a file. */
function batchFor(tenantId: number, suffix = ""): { path: string; text: string; sleutels: string[] } {
  const batch = JSON.parse(readFileSync(join(ROOT, "examples/batch.json"), "utf8")) as { entries: { tenantId: number; sleutel: string }[] };
  for (const e of batch.entries) {
    e.tenantId = tenantId;
    e.sleutel += suffix;
  }
  const text = JSON.stringify(batch);
  const path = join(dir, `batch-${tenantId}${suffix}.json`);
  writeFileSync(path, text);
  return { path, text, sleutels: batch.entries.map((e) => e.sleutel) };
}

/** The same with no entry carrying a sleutel. */
function keylessBatchFor(tenantId: number): { path: string; text: string } {
  const batch = JSON.parse(readFileSync(join(ROOT, "examples/batch.json"), "utf8")) as { entries: { tenantId: number; sleutel?: string }[] };
  for (const e of batch.entries) {
    e.tenantId = tenantId;
    delete e.sleutel;
  }
  const text = JSON.stringify(batch);
  const path = join(dir, `batch-${tenantId}-keyless.json`);
  writeFileSync(path, text);
  return { path, text };
}

/** A PATH with only what examples/audit.sh needs, and no jq. */
function pathWithoutJq(): string {
  const bin = join(dir, "bin-without-jq");
  mkdirSync(bin, { recursive: true });
  for (const tool of ["bash", "curl", "cat", "cp", "mktemp", "rm", "tr", "awk", "grep", "head", "sleep", "printf", "wc"]) {
    const at = Bun.which(tool);
    if (at && !existsSync(join(bin, tool))) symlinkSync(at, join(bin, tool));
  }
  return bin;
}

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs an example with the given environment (nothing else of ours) and waits for its exit. */
async function runExample(ex: Example, args: string[], env: Record<string, string>, stdin?: string): Promise<Run> {
  const p = Bun.spawn([...ex.cmd, ...args], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: dir, TMPDIR: dir, NACHTWACHT_BACKOFF_MS: "20", ...env },
    stdin: stdin === undefined ? "ignore" : new TextEncoder().encode(stdin),
    stdout: "pipe",
    stderr: "pipe",
  });
  // A bound, not a synchronisation: a hanging example fails the test instead of outliving it.
  const bound = setTimeout(() => p.kill("SIGKILL"), 25_000);
  const [code, stdout, stderr] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
  clearTimeout(bound);
  return { code: p.signalCode ? null : code, stdout, stderr };
}

const envFor = (url: string, extra: Record<string, string> = {}) => ({ NACHTWACHT_URL: url, APP_SECRET: APP, ...extra });

/** The rows of `sql`, read from the service's database (its file, opened read-only, or its PostgreSQL database). */
async function rowsFromDb<T>(sql: string, ...params: number[]): Promise<T[]> {
  return data!.db.all<T>(sql, ...params);
}

const rowsOf = (tenantId: number) =>
  rowsFromDb<EntryRow>("SELECT seq, id, created_at, actor, action, subject, details, prev_hash, hash FROM audit_entries WHERE tenant_id = ? ORDER BY seq", tenantId);
const sleutelsOf = async (tenantId: number) => (await rowsFromDb<{ sleutel: string }>("SELECT sleutel FROM audit_entries WHERE tenant_id = ? AND sleutel IS NOT NULL ORDER BY seq", tenantId)).map((r) => r.sleutel);

/** Every process's command line (argv joined by NUL), as far as this user may read it. */
function commandLines(): { pid: string; argv: string }[] {
  const out: { pid: string; argv: string }[] = [];
  for (const pid of readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
    try {
      out.push({ pid, argv: readFileSync(`/proc/${pid}/cmdline`, "latin1") });
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return out;
}

type Step = "busy" | "busy-1s" | "busy-long" | "busy-nothing-stored" | "lose" | "odd-5xx" | "html-200" | "empty-2xx" | "redirect" | "pass";

/**
 * A real HTTP server between an example and the service. Per request, in order: `busy`
 * answers 503 with Retry-After: 0 without passing the request on, as a proxy does;
 * `busy-long` the same with Retry-After: 60; `busy-nothing-stored` 503 with Retry-After:
 * 0 and the header the service itself sends when it stored nothing; `lose` passes it on
 * (the service stores it) and then answers 502, as a proxy does that lost the answer;
 * `odd-5xx` the same with a CDN's 520; `html-200` passes it on and answers 200 with a
 * page of its own (a login portal); `empty-2xx` passes it on and answers 204 without a
 * body; `redirect` answers 302 without passing it on; `pass`
 * (and every request after the list) passes it on. What the service answered to a
 * request whose answer was replaced is in `lost`. While it holds a request, it reads
 * every process's command line.
 */
function flakyProxy(steps: Step[]) {
  const seen: { authorization: string | null; body: string }[] = [];
  const scans: { pid: string; argv: string }[][] = [];
  const lost: string[] = [];
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(req) {
      const body = await req.text();
      seen.push({ authorization: req.headers.get("authorization"), body });
      // The example is waiting for this answer: it and its curl are alive now.
      scans.push(commandLines());
      const step = steps[seen.length - 1] ?? "pass";
      if (step === "busy") return Response.json({ error: "bezet (proxy)" }, { status: 503, headers: { "retry-after": "0" } });
      if (step === "busy-1s") return Response.json({ error: "bezet (proxy)" }, { status: 503, headers: { "retry-after": "1" } });
      if (step === "busy-long") return Response.json({ error: "bezet (proxy)" }, { status: 503, headers: { "retry-after": "60" } });
      if (step === "busy-nothing-stored") return Response.json({ error: "De database is bezet" }, { status: 503, headers: { "retry-after": "0", [NOTHING_STORED_HEADER]: NOTHING_STORED_VALUE } });
      if (step === "redirect") return new Response("", { status: 302, headers: { location: "http://127.0.0.1:1/elders" } });
      const res = await fetch(svc.url + new URL(req.url).pathname, {
        method: req.method,
        headers: { authorization: req.headers.get("authorization") ?? "", "content-type": "application/json" },
        body,
      });
      const text = await res.text();
      if (step === "empty-2xx") {
        lost.push(text);
        return new Response(null, { status: 204 });
      }
      if (step === "lose" || step === "odd-5xx" || step === "html-200") {
        lost.push(text);
        const [status, page] = step === "lose" ? [502, "502 Bad Gateway"] : step === "odd-5xx" ? [520, "520 Web server returned an unknown error"] : [200, "Inloggen bij het netwerk"];
        return new Response(`<html>${page}</html>`, { status, headers: { "content-type": "text/html" } });
      }
      return new Response(text, { status: res.status, headers: { "content-type": res.headers.get("content-type") ?? "application/json" } });
    },
  });
  return { url: `http://127.0.0.1:${server.port}`, seen, scans, lost, stop: () => server.stop(true) };
}

type RawStep = "drop" | "continue-then-503" | "cut-body" | "not-http" | "pass";

/**
 * A TCP server speaking just enough HTTP/1.1, for what Bun.serve cannot do. Per request,
 * in order: `drop` passes it on to the service (which stores it) and closes the
 * connection without an answer; `continue-then-503` answers `100 Continue` carrying
 * `nachtwacht-opgeslagen: nee` and then a 503 without it (only the final answer's headers
 * count), not passing it on; `cut-body` passes it on and answers a 502 whose body breaks
 * off after 3 of its 100 bytes; `not-http` passes it on and answers with a line that is
 * not HTTP; `pass` (and every request after the list) passes it on. What the service
 * answered to a request whose answer was not passed back is in `stored`.
 */
function rawProxy(steps: RawStep[]) {
  let requests = 0;
  const stored: string[] = [];
  const server = Bun.listen<{ buf: Buffer; done: boolean }>({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      open(socket) {
        socket.data = { buf: Buffer.alloc(0), done: false };
      },
      async data(socket, chunk) {
        const st = socket.data;
        if (st.done) return;
        st.buf = Buffer.concat([st.buf, chunk]);
        const end = st.buf.indexOf("\r\n\r\n");
        if (end < 0) return;
        const head = st.buf.subarray(0, end).toString("latin1");
        const length = Number(/^content-length:\s*(\d+)/im.exec(head)?.[1] ?? 0);
        if (st.buf.length < end + 4 + length) return;
        st.done = true;
        const body = st.buf.subarray(end + 4, end + 4 + length).toString("utf8");
        const step = steps[requests++] ?? "pass";
        if (step === "continue-then-503") {
          socket.write("HTTP/1.1 100 Continue\r\nnachtwacht-opgeslagen: nee\r\n\r\n");
          const text = JSON.stringify({ error: "bezet (proxy)" });
          socket.end(`HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 0\r\ncontent-length: ${text.length}\r\nconnection: close\r\n\r\n${text}`);
          return;
        }
        const [, method, path] = /^(\S+) (\S+)/.exec(head)!;
        const authorization = /^authorization:\s*(.*)$/im.exec(head)?.[1] ?? "";
        const res = await fetch(svc.url + path, { method, headers: { authorization, "content-type": "application/json" }, body });
        const text = await res.text();
        if (step === "drop" || step === "cut-body" || step === "not-http") {
          stored.push(text);
          if (step === "cut-body") socket.end("HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/plain\r\ncontent-length: 100\r\n\r\nabc");
          else if (step === "not-http") socket.end("HELLO\r\n\r\n");
          else socket.end();
          return;
        }
        const bytes = Buffer.from(text, "utf8");
        socket.end(`HTTP/1.1 ${res.status} X\r\ncontent-type: application/json\r\ncontent-length: ${bytes.length}\r\nconnection: close\r\n\r\n${text}`);
      },
    },
  });
  return { url: `http://127.0.0.1:${server.port}`, requests: () => requests, stored, stop: () => server.stop(true) };
}

describe.each(EXAMPLES)("$file", (ex) => {
  // Nothing is skipped: without its interpreter an example's tests fail, naming the package.
  const it = (name: string, fn: () => Promise<void>, timeout?: number) =>
    test(
      name,
      async () => {
        if (ex.missing !== null) throw new Error(`${ex.file} cannot run: ${ex.missing}; .ci/run installs it`);
        await fn();
      },
      timeout,
    );

  it("stores the batch once: receipts seq 1..n that match the database; a rerun stores nothing and prints the same receipts", async () => {
    const tenantId = await newTenant();
    const batch = batchFor(tenantId);
    const first = await runExample(ex, [batch.path], envFor(svc.url));
    expect({ code: first.code, stderr: first.stderr }).toEqual({ code: 0, stderr: "" });
    const answer = JSON.parse(first.stdout) as AuditAnswer;
    expect(answer.opgeslagen).toBe(3);
    expect(answer.alBekend).toBe(0);
    expect(answer.ontvangstbewijzen.map((r) => [r.tenantId, r.seq])).toEqual([
      [tenantId, 1],
      [tenantId, 2],
      [tenantId, 3],
    ]);
    const rows = await rowsOf(tenantId);
    expect(answer.ontvangstbewijzen).toEqual(rows.map((r) => ({ tenantId, seq: r.seq, id: r.id, hash: r.hash })));
    for (const r of rows) expect(rowHash(tenantId, r)).toBe(r.hash);
    expect(rows.map((r) => [r.action, r.created_at])).toEqual([
      ["factuur.aangemaakt", "2026-03-02T09:15:02.000Z"],
      ["factuur.verzonden", "2026-03-02T09:15:40.000Z"],
      ["export.gedownload", expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)],
    ]);
    expect(rows[1]!.details).toBe('{"aan":"debiteuren@klant.example"}');
    expect(rows[2]!.details).toBe("{}");
    expect(await sleutelsOf(tenantId)).toEqual(batch.sleutels);

    const again = await runExample(ex, [batch.path], envFor(svc.url));
    expect(again.code).toBe(0);
    expect(JSON.parse(again.stdout)).toEqual({ opgeslagen: 0, alBekend: 3, ontvangstbewijzen: answer.ontvangstbewijzen });
    expect(await rowsOf(tenantId)).toEqual(rows);
  });

  it("retries the same batch (stdin) after a 503 with Retry-After and after a lost answer; stored once; the secret on no command line", async () => {
    const tenantId = await newTenant();
    const batch = batchFor(tenantId, "-stdin");
    const proxy = flakyProxy(["busy", "lose", "pass"]);
    try {
      const run = await runExample(ex, ["-"], envFor(proxy.url), batch.text);
      expect({ code: run.code, stderr: run.stderr }).toEqual({ code: 0, stderr: expect.stringContaining("attempt 2") });
      expect(run.stderr).toContain("HTTP 503");
      expect(run.stderr).toContain("HTTP 502");
      expect(proxy.seen).toHaveLength(3);
      // Every attempt: the same bytes (so the same sleutels) and the right header.
      expect(new Set(proxy.seen.map((s) => s.body)).size).toBe(1);
      expect(JSON.parse(proxy.seen[0]!.body)).toEqual(JSON.parse(batch.text));
      for (const s of proxy.seen) expect(s.authorization).toBe(`Bearer ${APP}`);
      // The lost answer stored the batch; the retry was answered from the sleutels.
      const lost = JSON.parse(proxy.lost[0]!) as AuditAnswer;
      expect(lost.opgeslagen).toBe(3);
      expect(JSON.parse(run.stdout)).toEqual({ opgeslagen: 0, alBekend: 3, ontvangstbewijzen: lost.ontvangstbewijzen });
      expect((await rowsOf(tenantId)).map((r) => r.seq)).toEqual([1, 2, 3]);
      // While it waited for each answer, no process had the secret in its command line,
      // and the scan did see the example (for the shell script: its curl, header from stdin).
      for (const scan of proxy.scans) {
        expect(scan.filter((p) => p.argv.includes(APP)).map((p) => p.pid)).toEqual([]);
        expect(scan.some((p) => p.argv.includes(ex.file))).toBe(true);
        if (ex.file.endsWith(".sh")) expect(scan.some((p) => p.argv.startsWith("curl\0") && p.argv.includes("\0--header\0@-\0"))).toBe(true);
      }
    } finally {
      proxy.stop();
    }
  });

  it("entries without a sleutel: sent again after the service's 503 that stored nothing or a refused connection; not after a lost answer or a proxy's 503 (exit 3), so never stored twice", async () => {
    const tenantId = await newTenant();
    const keyless = keylessBatchFor(tenantId);
    const proxy = flakyProxy(["busy-nothing-stored", "lose", "busy"]);
    try {
      const lost = await runExample(ex, [keyless.path], envFor(proxy.url));
      expect(lost.code).toBe(3);
      expect(lost.stdout).toBe("");
      expect(lost.stderr).toContain("attempt 1: HTTP 503");
      expect(lost.stderr).toContain("HTTP 502");
      expect(lost.stderr).toContain("perhaps stored");
      expect(lost.stderr).toContain("sleutel");
      // the second attempt was stored (its answer lost); there was no third
      expect(proxy.seen).toHaveLength(2);
      expect(JSON.parse(proxy.lost[0]!).opgeslagen).toBe(3);
      expect((await rowsOf(tenantId)).map((r) => r.seq)).toEqual([1, 2, 3]);

      // a 503 without the service's header (a proxy's): perhaps stored, not repeated
      const proxied = await runExample(ex, [keyless.path], envFor(proxy.url));
      expect(proxied.code).toBe(3);
      expect(proxy.seen).toHaveLength(3);
      expect((await rowsOf(tenantId)).map((r) => r.seq)).toEqual([1, 2, 3]);
    } finally {
      proxy.stop();
    }
    // the connection dropped after the service stored it: perhaps stored, not repeated;
    // a 503 whose 100 Continue before it carried the header: not the service's own
    const raw = rawProxy(["drop", "continue-then-503"]);
    try {
      const dropped = await runExample(ex, [keylessBatchFor(tenantId).path], envFor(raw.url));
      expect(dropped.code).toBe(3);
      expect(raw.requests()).toBe(1);
      expect(JSON.parse(raw.stored[0]!).opgeslagen).toBe(3);
      expect((await rowsOf(tenantId)).map((r) => r.seq)).toEqual([1, 2, 3, 4, 5, 6]);
      const continued = await runExample(ex, [keylessBatchFor(tenantId).path], envFor(raw.url));
      expect(continued.code).toBe(3);
      expect(continued.stderr).toContain("HTTP 503");
      expect(raw.requests()).toBe(2);
      expect((await rowsOf(tenantId)).map((r) => r.seq)).toEqual([1, 2, 3, 4, 5, 6]);
    } finally {
      raw.stop();
    }
    // nobody listening: nothing left the machine, so it is tried again until given up
    const nobody = await runExample(ex, [keyless.path], envFor(`http://127.0.0.1:${freePort()}`, { NACHTWACHT_MAX_ATTEMPTS: "2" }));
    expect(nobody.code).toBe(75);
    expect(nobody.stderr).toContain("attempt 1");
    expect(nobody.stderr).toContain("gave up after 2 attempts");
  });

  it("a batch with sleutels is sent again after a connection dropped once the service stored it, and stored once", async () => {
    const tenantId = await newTenant();
    const batch = batchFor(tenantId, "-drop");
    const raw = rawProxy(["drop"]);
    try {
      const run = await runExample(ex, [batch.path], envFor(raw.url));
      expect({ code: run.code, stderr: run.stderr }).toEqual({ code: 0, stderr: expect.stringContaining("attempt 1: no answer") });
      expect(raw.requests()).toBe(2);
      const first = JSON.parse(raw.stored[0]!) as AuditAnswer;
      expect(first.opgeslagen).toBe(3);
      expect(JSON.parse(run.stdout)).toEqual({ opgeslagen: 0, alBekend: 3, ontvangstbewijzen: first.ontvangstbewijzen });
      expect(await sleutelsOf(tenantId)).toEqual(batch.sleutels);
    } finally {
      raw.stop();
    }
  });

  it("an answer it cannot trust is no success: a CDN's 520, a 200 that is not nachtwacht's, an empty 204, an answer that breaks off or is not HTTP; sent again when every entry has a sleutel (stored once), not when one has none (exit 3)", async () => {
    const tenantId = await newTenant();
    const batch = batchFor(tenantId, "-vreemd");
    const proxy = flakyProxy(["odd-5xx", "html-200", "empty-2xx"]);
    try {
      const run = await runExample(ex, [batch.path], envFor(proxy.url));
      expect({ code: run.code, stderr: run.stderr }).toEqual({ code: 0, stderr: expect.stringContaining("HTTP 520") });
      expect(run.stderr).toContain("not nachtwacht's answer");
      expect(proxy.seen).toHaveLength(4);
      const first = JSON.parse(proxy.lost[0]!) as AuditAnswer;
      expect(first.opgeslagen).toBe(3);
      expect(JSON.parse(run.stdout)).toEqual({ opgeslagen: 0, alBekend: 3, ontvangstbewijzen: first.ontvangstbewijzen });
    } finally {
      proxy.stop();
    }
    const raw = rawProxy(["cut-body", "not-http"]);
    try {
      const run = await runExample(ex, [batchFor(tenantId, "-afgebroken").path], envFor(raw.url));
      expect({ code: run.code, stderr: run.stderr }).toEqual({ code: 0, stderr: expect.stringContaining("attempt 2") });
      expect(raw.requests()).toBe(3);
      expect(JSON.parse(run.stdout).alBekend).toBe(3);
    } finally {
      raw.stop();
    }
    expect((await rowsOf(tenantId)).map((r) => r.seq)).toEqual([1, 2, 3, 4, 5, 6]);

    // Without sleutels each of them ends the run at once: perhaps stored, nothing printed, stored once.
    const keyless = keylessBatchFor(tenantId);
    let stored = 6;
    for (const step of ["odd-5xx", "html-200", "empty-2xx"] as const) {
      const p = flakyProxy([step]);
      try {
        const run = await runExample(ex, [keyless.path], envFor(p.url));
        expect({ step, code: run.code, stdout: run.stdout }).toEqual({ step, code: 3, stdout: "" });
        expect(run.stderr).toContain("perhaps stored");
        expect(p.seen).toHaveLength(1);
      } finally {
        p.stop();
      }
      expect((await rowsOf(tenantId)).length).toBe((stored += 3));
    }
    for (const step of ["cut-body", "not-http"] as const) {
      const r = rawProxy([step]);
      try {
        const run = await runExample(ex, [keyless.path], envFor(r.url));
        expect({ step, code: run.code, stdout: run.stdout }).toEqual({ step, code: 3, stdout: "" });
        expect(r.requests()).toBe(1);
      } finally {
        r.stop();
      }
      expect((await rowsOf(tenantId)).length).toBe((stored += 3));
    }

    // A name that does not resolve: nothing left the machine, so even this batch is tried again until given up.
    const unresolved = await runExample(ex, [keyless.path], envFor("http://nachtwacht.invalid", { NACHTWACHT_MAX_ATTEMPTS: "2" }));
    expect(unresolved.code).toBe(75);
    expect(unresolved.stderr).toContain("attempt 1");
    expect(unresolved.stderr).toContain("gave up after 2 attempts");
  });

  it("a redirect is final (exit 1, not followed); settings that are no whole number ≥ 1 are usage errors (exit 2, nothing sent); a leading zero is decimal", async () => {
    const proxy = flakyProxy(["redirect"]);
    try {
      const tenantId = await newTenant();
      const moved = await runExample(ex, [batchFor(tenantId, "-verhuisd").path], envFor(proxy.url));
      expect(moved.code).toBe(1);
      expect(moved.stderr).toContain("302");
      expect(proxy.seen).toHaveLength(1);
      const bads: Record<string, string>[] = [{ NACHTWACHT_MAX_ATTEMPTS: "0" }, { NACHTWACHT_BACKOFF_MS: "-1" }, { NACHTWACHT_MAX_DELAY_MS: "1e3" }];
      for (const bad of bads) {
        const run = await runExample(ex, [batchFor(tenantId, "-verhuisd").path], envFor(proxy.url, bad));
        expect({ bad, code: run.code }).toEqual({ bad, code: 2 });
        expect(run.stderr).toContain(Object.keys(bad)[0]!);
      }
      expect(proxy.seen).toHaveLength(1);
      const line = await runExample(ex, [batchFor(tenantId, "-verhuisd").path], { NACHTWACHT_URL: proxy.url, APP_SECRET: `${APP}\nX-Extra: 1` });
      expect(line.code).toBe(2);
      expect(line.stderr).toContain("line break");
      const noScheme = await runExample(ex, [keylessBatchFor(tenantId).path], envFor(proxy.url.replace("http://", "")));
      expect(noScheme.code).toBe(2);
      expect(noScheme.stderr).toContain("http://");
      expect(proxy.seen).toHaveLength(1);
      // 08 and 09 are no octal numbers here: a wait of 8 ms, then stored.
      const zero = await runExample(ex, [batchFor(tenantId, "-nul").path], envFor(proxy.url, { NACHTWACHT_BACKOFF_MS: "08", NACHTWACHT_MAX_ATTEMPTS: "09" }));
      expect(zero.code).toBe(0);
      expect(JSON.parse(zero.stdout).opgeslagen).toBe(3);
    } finally {
      proxy.stop();
    }
  });

  it("a batch over the service's limit (MAX_BATCH_BYTES, named in the example) is refused before sending: exit 1, 413, nothing sent, also with sleutels", async () => {
    expect(Number(/max_batch_bytes\s*=\s*(\d+)/i.exec(source(ex.file))?.[1])).toBe(MAX_BATCH_BYTES);
    const tenantId = await newTenant();
    const proxy = flakyProxy([]);
    try {
      // Over Bun's 2 MiB too: sent, the service would close the connection on it unread.
      for (const mib of [1.5, 3]) {
        const entries = Array.from({ length: 100 }, (_, i) => ({ tenantId, actor: "a", action: "b", subject: "s", details: { pad: "x".repeat((mib * 1024 * 1024) / 100) }, sleutel: `groot-${mib}-${i}` }));
        const path = join(dir, `groot-${tenantId}-${mib}.json`);
        writeFileSync(path, JSON.stringify({ entries }));
        const run = await runExample(ex, [path], envFor(proxy.url));
        expect({ mib, code: run.code, stdout: run.stdout }).toEqual({ mib, code: 1, stdout: "" });
        // The same words in every example: refused by the example itself, before sending, not an answer of the service ("HTTP 413").
        const said = /refused, by this client, before sending \(413, no answer from the service\): the batch is (\d+) bytes, more than the (\d+) bytes the service takes; nothing sent, nothing stored: split it\n/.exec(run.stderr);
        expect({ mib, stderr: said === null ? run.stderr : "as said" }).toEqual({ mib, stderr: "as said" });
        expect(Number(said![1])).toBeGreaterThan(mib * 1024 * 1024);
        expect(Number(said![2])).toBe(MAX_BATCH_BYTES);
        expect(run.stderr).not.toContain("HTTP 413");
      }
      expect(proxy.seen).toHaveLength(0);
      expect(await rowsOf(tenantId)).toEqual([]);
    } finally {
      proxy.stop();
    }
  });

  it("after a Retry-After it waits that plus a random part of its backoff: two runs refused at once do not return at once", async () => {
    const tenantId = await newTenant();
    const proxy = flakyProxy(["busy-1s", "busy-1s"]);
    try {
      const runs = await Promise.all(
        ["-a", "-b"].map((suffix) => runExample(ex, [batchFor(tenantId, `-kudde${suffix}`).path], envFor(proxy.url, { NACHTWACHT_BACKOFF_MS: "1000", NACHTWACHT_MAX_ATTEMPTS: "2" }))),
      );
      const delays = runs.map((r) => Number(/again in (\d+) ms/.exec(r.stderr)?.[1]));
      expect(runs.map((r) => r.code)).toEqual([0, 0]);
      expect(delays.every((d) => d >= 1000 && d <= 2000)).toBe(true);
      // Before: max(Retry-After, a backoff of at most 1000) — 1000 ms for both.
      expect(delays.some((d) => d > 1000)).toBe(true);
    } finally {
      proxy.stop();
    }
  });

  it("a refusal is final (exit 1, the server's message on stderr, one request); no answer gives up (75); a long Retry-After is honoured by stopping", async () => {
    const proxy = flakyProxy(["pass", "pass", "busy-long"]);
    try {
      const unknown = batchFor(4242);
      const refused = await runExample(ex, [unknown.path], envFor(proxy.url));
      expect(refused.code).toBe(1);
      expect(refused.stderr).toContain("422");
      expect(refused.stderr).toContain("Onbekende tenant in entries[0].tenantId: 4242");
      expect(refused.stdout).toBe("");
      const wrong = await runExample(ex, [unknown.path], { ...envFor(proxy.url), APP_SECRET: "x".repeat(40) });
      expect(wrong.code).toBe(1);
      expect(wrong.stderr).toContain("401");
      expect(proxy.seen).toHaveLength(2);

      const tenantId = await newTenant();
      const long = await runExample(ex, [batchFor(tenantId, "-lang").path], envFor(proxy.url, { NACHTWACHT_MAX_DELAY_MS: "1000" }));
      expect(long.code).toBe(75);
      expect(long.stderr).toContain("Retry-After");
      expect(proxy.seen).toHaveLength(3);
      expect(await rowsOf(tenantId)).toEqual([]);
    } finally {
      proxy.stop();
    }
    const nobody = await runExample(ex, [batchFor(1).path], envFor(`http://127.0.0.1:${freePort()}`, { NACHTWACHT_MAX_ATTEMPTS: "3" }));
    expect(nobody.code).toBe(75);
    expect(nobody.stderr).toContain("attempt 1");
    expect(nobody.stderr).toContain("attempt 2");
    expect(nobody.stderr).toContain("gave up after 3 attempts");

    const unset = await runExample(ex, [batchFor(1).path], { NACHTWACHT_URL: svc.url });
    expect(unset.code).toBe(2);
    expect(unset.stderr).toContain("APP_SECRET");
  });
});

describe("examples/audit.sh without jq", () => {
  test("cannot check the sleutels, so a lost answer is not repeated even for a batch that has them (exit 3); the service's own 503 is", async () => {
    const sh = EXAMPLES.find((e) => e.file === "examples/audit.sh")!;
    if (sh.missing !== null) throw new Error(`${sh.file} cannot run: ${sh.missing}; .ci/run installs it`);
    const PATH = pathWithoutJq();
    expect(Bun.spawnSync(["bash", "-c", "command -v jq || echo none"], { env: { PATH } }).stdout.toString().trim()).toBe("none");
    const tenantId = await newTenant();
    const batch = batchFor(tenantId, "-zonder-jq");
    const proxy = flakyProxy(["busy-nothing-stored", "lose"]);
    try {
      const run = await runExample(sh, [batch.path], { ...envFor(proxy.url), PATH });
      expect(run.code).toBe(3);
      expect(run.stderr).toContain("jq");
      expect(proxy.seen).toHaveLength(2);
      expect(await sleutelsOf(tenantId)).toEqual(batch.sleutels);
    } finally {
      proxy.stop();
    }
  });
});

const source = (f: string) => readFileSync(join(ROOT, f), "utf8");

describe("the secret stays off command lines (static)", () => {
  const code = (f: string, comment: RegExp) =>
    source(f)
      .split("\n")
      .filter((l) => !comment.test(l));

  test("audit.sh: $APP_SECRET goes to one command only, the here-string that is curl's stdin (--header @-); its other expansions are checks inside [[ ]]", () => {
    const lines = code("examples/audit.sh", /^\s*#/);
    const expansions = lines.filter((l) => /\$\{?APP_SECRET\b/.test(l));
    // The emptiness and line-break checks (inside [[ ]], a shell keyword, no process) and the here-string.
    expect(expansions.map((l) => l.trim())).toEqual([
      '[[ -n ${APP_SECRET:-} ]] || die "APP_SECRET is not set"',
      '[[ ${#APP_SECRET} -ge 32 && ${#APP_SECRET} -le 1024 && $APP_SECRET =~ ^[!-~]+$ ]] || die "APP_SECRET must be 32 to 1024 printable ASCII characters, without spaces or line breaks (as the service requires)"',
      '"$url" <<<"Authorization: Bearer $APP_SECRET") || rc=$?',
    ]);
    const script = lines.join("\n");
    expect(script).toContain("--header @-");
    // Nothing else could carry it: no header given as an argument, no redirects followed, no eval/export.
    expect(script).not.toMatch(/-H\s+["']?Authorization|--header\s+["']Authorization|--location|\s-L\s|\beval\b|\bexport\b|\benv\b/);
  });

  test("audit.py, audit.ts, audit.php: the secret from the environment into a request header; no subprocess at all", () => {
    const py = code("examples/audit.py", /^\s*#/).join("\n");
    expect(py).toContain('os.environ.get("APP_SECRET")');
    expect(py).not.toMatch(/subprocess|os\.system|os\.exec|os\.spawn|popen/i);
    const ts = code("examples/audit.ts", /^\s*\/\//).join("\n");
    expect(ts).toContain("process.env.APP_SECRET");
    expect(ts).not.toMatch(/child_process|Bun\.spawn|\$`|execSync|spawnSync/);
    const php = code("examples/audit.php", /^\s*(\/\/|\*|\/\*\*)/).join("\n");
    expect(php).toContain("getenv('APP_SECRET')");
    expect(php).not.toMatch(/\b(exec|shell_exec|system|passthru|proc_open|popen|pcntl_exec)\s*\(|`/);
  });

  test("the /proc scan would see a secret on a command line (so its 'none' above means something)", async () => {
    const marker = `marker-${randomBytes(16).toString("hex")}`;
    const p = Bun.spawn([process.execPath, "-e", "console.log('ready'); process.stdin.on('data', () => process.exit(0))", marker], { stdin: "pipe", stdout: "pipe" });
    try {
      // Once it has printed, it runs its own program (exec is done): its argv is in /proc.
      const reader = p.stdout.getReader();
      for (let out = ""; !out.includes("ready"); ) {
        const { value, done } = await reader.read();
        if (done) throw new Error("the control process exited");
        out += new TextDecoder().decode(value);
      }
      expect(commandLines().some((c) => c.pid === String(p.pid) && c.argv.includes(marker))).toBe(true);
    } finally {
      p.stdin.write("x");
      await p.stdin.end();
      await p.exited;
    }
  });
});

describe("the importable functions check the secret before sending, without its value in the error", () => {
  const bad = `geheim-${randomBytes(16).toString("hex")}\n`;
  const cases = [
    { file: "examples/audit.py", cmd: ["python3", "-c", "import os, sys; sys.path.insert(0, 'examples'); import audit; audit.send_audit('http://127.0.0.1:1', os.environ['S'], [])"] },
    { file: "examples/audit.ts", cmd: [process.execPath, "-e", "const { sendAudit } = await import('./examples/audit.ts'); await sendAudit('http://127.0.0.1:1', process.env.S, [])"] },
    { file: "examples/audit.php", cmd: ["php", "-r", "require 'examples/audit.php'; nachtwacht_send_audit('http://127.0.0.1:1', getenv('S'), []);"] },
  ];
  for (const c of cases) {
    test(c.file, async () => {
      const p = Bun.spawn(c.cmd, { cwd: ROOT, env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: dir, S: bad, PYTHONDONTWRITEBYTECODE: "1" }, stdout: "pipe", stderr: "pipe" });
      const [code, stdout, stderr] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
      expect(code).not.toBe(0);
      expect(stderr).toContain("printable ASCII");
      expect(stdout + stderr).not.toContain(bad.trim());
    });
  }
});

describe("docs/integration.md", () => {
  test("every code block titled with an example file is a verbatim part of that file", () => {
    const doc = readFileSync(join(ROOT, "docs/integration.md"), "utf8");
    const blocks = [...doc.matchAll(/^```\w+ title=(examples\/[\w.]+)\n([\s\S]*?)^```$/gm)];
    expect(blocks.map((b) => b[1]).sort()).toEqual(expect.arrayContaining(["examples/audit.php", "examples/audit.py", "examples/audit.sh", "examples/audit.ts"]));
    for (const [, file, body] of blocks) expect({ file, inFile: source(file!).includes(body!) }).toEqual({ file, inFile: true });
  });
});

test("after the examples: audit-anker signs, audit-verificatie finds every chain intact, and a receipt matches the exported, proven entry", async () => {
  const tenantId = await newTenant();
  const run = await runExample(EXAMPLES[0]!, [batchFor(tenantId, "-bewijs").path], envFor(svc.url));
  expect(run.code).toBe(0);
  const receipt = (JSON.parse(run.stdout) as AuditAnswer).ontvangstbewijzen[1]!;

  const cron = (job: string) => api("POST", `/api/cron/${job}`, undefined, CRON);
  expect((await cron("audit-anker")).status).toBe(200);
  const v = await cron("audit-verificatie");
  expect(v.status).toBe(200);
  expect(v.json.aantalGebroken).toBe(0);
  expect(v.json.gecontroleerd).toBe(nextTenant - 1);
  expect(v.json.resultaten.every((r: { intact: boolean }) => r.intact)).toBe(true);

  // What a receipt is for: the entry an auditor gets, with its inclusion proof under the signed checkpoint, is the one acknowledged.
  const bundle = join(dir, "bundel.jsonl");
  const cli = async (...args: string[]) => {
    // On PostgreSQL, export reads the service's database from DATABASE_URL (given no --db).
    const env = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: dir, ...(pgUrl ? { DATABASE_URL: pgUrl } : {}) };
    const p = Bun.spawn([process.execPath, "src/index.ts", ...args], { cwd: ROOT, env, stdout: "pipe", stderr: "pipe" });
    const [code, out, err] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
    return { code, out: out + err };
  };
  const dbArgs = pgUrl ? [] : ["--db", dbPath];
  const exp = await cli("export", "--tenant", String(tenantId), "--bewijs", String(receipt.seq), "--uit", bundle, ...dbArgs, "--bestand", anchorPath, "--sleutel", TEST_VERIFIER_KEY);
  expect(exp).toMatchObject({ code: 0 });
  const [header, ...entries] = readFileSync(bundle, "utf8").trim().split("\n").map((l) => JSON.parse(l));
  expect(header.bewijs.seq).toBe(receipt.seq);
  expect(entries.find((e: { seq: number }) => e.seq === receipt.seq)).toMatchObject({ seq: receipt.seq, id: receipt.id, hash: receipt.hash });
  const check = await cli("verify", "--bundel", bundle, "--sleutel", TEST_VERIFIER_KEY);
  expect(check.code).toBe(0);
  expect(check.out).toContain("inclusiebewijs klopt");
});
