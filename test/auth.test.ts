import { afterEach, describe, expect, test } from "bun:test";
import { SQL } from "bun";
import { t } from "elysia";
import { bearerChecker, pathOf, scopeOf } from "../src/http/auth.ts";
import { OPEN_PATHS } from "../src/app.ts";
import { defineJob } from "../src/jobs/job.ts";
import { call, SECRET, until } from "./helpers.ts";
import { makeEnv, pgOnly, sqliteOnly, type Env } from "./dialect.ts";
import { chmodSync } from "node:fs";

// A job that takes a JSON body, to show the gate decides before any body is read.
const echoJob = defineJob({
  name: "backup-status",
  summary: "test",
  description: "test",
  input: { schema: t.Object({}), maxBytes: 64 * 1024 },
  run: async (_deps, _now, input) => ({ status: 200, body: { ok: true, input } }),
});

/** Counts every look at a request's body stream: the gate must decide before any. */
let bodyReads = 0;
class CountingRequest extends Request {
  override get body() {
    bodyReads++;
    return super.body;
  }
}

let env: Env;
afterEach(() => env?.cleanup());

describe("the auth gate", () => {
  const path = "/api/cron/backup-status";
  /** The app, handed requests whose body reads are counted. */
  const app = { handle: (r: Request) => env.app.handle(new CountingRequest(r)) };
  const setup = async () => {
    env = await makeEnv({}, { jobs: [echoJob] });
    bodyReads = 0;
  };

  test("the right token passes", async () => {
    await setup();
    const r = await call(app, path, { body: '{"a":1}' });
    expect(r.status).toBe(200);
    expect(r.json).toEqual({ ok: true, input: { a: 1 } });
    expect(bodyReads).toBeGreaterThan(0); // the counting sees a read when there is one
  });

  test("the scheme word is case-insensitive", async () => {
    await setup();
    for (const scheme of ["bearer", "BEARER", "BeArEr"]) {
      const r = await call(app, path, { token: null, headers: { authorization: `${scheme} ${SECRET}` }, body: "{}" });
      expect(r.status).toBe(200);
    }
  });

  const refused: [string, Record<string, string>][] = [
    ["missing header", {}],
    ["empty header", { authorization: "" }],
    ["scheme only", { authorization: "Bearer" }],
    ["scheme and space only", { authorization: "Bearer " }],
    ["wrong token", { authorization: "Bearer wrong-token-0123456789abcdef0123456789" }],
    ["the secret with one character changed", { authorization: `Bearer ${SECRET.slice(0, -1)}X` }],
    ["the secret plus a character", { authorization: `Bearer ${SECRET}x` }],
    ["a prefix of the secret", { authorization: `Bearer ${SECRET.slice(0, 32)}` }],
    ["Basic scheme with the secret", { authorization: `Basic ${SECRET}` }],
    ["Basic scheme base64", { authorization: `Basic ${btoa(`cron:${SECRET}`)}` }],
    ["no space after Bearer", { authorization: `Bearer${SECRET}` }],
    ["two tokens", { authorization: `Bearer ${SECRET} ${SECRET}` }],
    ["a huge header", { authorization: `Bearer ${"a".repeat(8000)}` }],
  ];
  for (const [name, headers] of refused) {
    test(`${name} → 401 {error} with WWW-Authenticate: Bearer, body unread`, async () => {
      await setup();
      const r = await call(app, path, { token: null, headers, body: '{"exitCode":0}' });
      expect(r.status).toBe(401);
      expect(typeof r.json.error).toBe("string");
      expect(r.headers.get("www-authenticate")).toBe("Bearer");
      expect(r.headers.get("content-type")).toContain("application/json");
      expect(r.text).not.toContain(SECRET);
      expect(bodyReads).toBe(0);
    });
  }

  test("a wrong token with a malformed body is 401, not 400", async () => {
    await setup();
    const r = await call(app, path, { token: "wrong", body: "{not json", headers: { "content-type": "application/json" } });
    expect(r.status).toBe(401);
    expect(bodyReads).toBe(0);
  });

  test("a token in the query string is not accepted", async () => {
    await setup();
    for (const q of [`?access_token=${SECRET}`, `?token=${SECRET}`, `?authorization=Bearer%20${SECRET}`]) {
      const r = await call(app, path + q, { token: null, body: "{}" });
      expect(r.status).toBe(401);
    }
  });

  test("every job path is gated, including odd spellings", async () => {
    env = await makeEnv();
    for (const p of ["/api/cron/weekrapport", "/api/cron/audit-verificatie", "/api/cron/weekrapport/", "//api/cron/dagrapport", "/API/CRON/dagrapport", "/api/cron/unknown"]) {
      const r = await call(env.app, p, { token: null });
      expect(r.status).toBe(401);
    }
  });

  test("with a valid token an unknown job path is 404 {error}", async () => {
    env = await makeEnv();
    const r = await call(env.app, "/api/cron/bestaat-niet");
    expect(r.status).toBe(404);
    expect(typeof r.json.error).toBe("string");
  });

  test("a GET on a job path does not run the job", async () => {
    await setup();
    const r = await call(app, path, { method: "GET" });
    expect([404, 405]).toContain(r.status);
    expect(bodyReads).toBe(0);
    const runs = await env.db.get<{ n: number }>("SELECT count(*) AS n FROM job_runs");
    expect(runs!.n).toBe(0);
  });

  test("GET /health needs no token and says nothing secret", async () => {
    env = await makeEnv();
    const r = await call(env.app, "/health", { method: "GET", token: null });
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ status: "ok", database: "bereikbaar" });
    expect(r.text).not.toContain(SECRET);
    expect(r.text).not.toContain(env.config.databasePath);
    // on PostgreSQL the database's location is DATABASE_URL
    if (env.store.kind === "pg") expect(r.text).not.toContain(env.store.url);
  });

  test("GET /health answers 503 when the database is gone", async () => {
    env = await makeEnv();
    // SQLite's file handle closed; PostgreSQL's pool closed (no connection to be had)
    if (env.store.kind === "sqlite") env.store.sqlite.close();
    else await env.store.close();
    const r = await call(env.app, "/health", { method: "GET", token: null });
    expect(r.status).toBe(503);
    expect(r.json).toEqual({ status: "fout", database: "onbereikbaar" });
    env.store.close = async () => {};
  });

  sqliteOnly("GET /health answers 503 alleen-lezen when the SQLite file may not be written (it answered 200 while every write failed)", async () => {
    env = await makeEnv();
    if (env.store.kind !== "sqlite") throw new Error("SQLite only");
    const path = env.store.path;
    // Root writes whatever the mode says: an immutable file (ext4's chattr +i) is one root
    // may not write either, as a file system remounted read-only; anyone else: its mode.
    const root = process.getuid?.() === 0;
    const lock = (on: boolean) => {
      if (!root) return chmodSync(path, on ? 0o444 : 0o644);
      const p = Bun.spawnSync(["chattr", on ? "+i" : "-i", path], { stderr: "pipe" });
      if (p.exitCode !== 0) throw new Error(`chattr ${on ? "+i" : "-i"} ${path}: ${p.stderr.toString()}`);
    };
    lock(true);
    try {
      const r = await call(env.app, "/health", { method: "GET", token: null });
      expect([r.status, r.json]).toEqual([503, { status: "fout", database: "alleen-lezen" }]);
    } finally {
      lock(false);
    }
    expect((await call(env.app, "/health", { method: "GET", token: null })).status).toBe(200);
  });

  pgOnly("GET /health answers 503 alleen-lezen when PostgreSQL takes no writes (a standby after a failover answers reads alike)", async () => {
    env = await makeEnv();
    if (env.store.kind !== "pg") throw new Error("PostgreSQL only");
    const name = new URL(env.store.url).pathname.slice(1);
    // Another session drops every connection of the service's pool: the new ones get the setting.
    const admin = new SQL(env.store.url, { max: 1 });
    const reconnect = () => admin`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`;
    try {
      await admin.unsafe(`ALTER DATABASE "${name}" SET default_transaction_read_only = on`);
      await reconnect();
      const r = await until("the read-only answer", async () => {
        const a = await call(env.app, "/health", { method: "GET", token: null }).catch(() => null);
        return a !== null && a.status === 503 && a.json.database === "alleen-lezen" ? a : undefined;
      });
      expect(r.json).toEqual({ status: "fout", database: "alleen-lezen" });
      // A write is refused meanwhile: what /health now says ahead of it.
      expect((await call(env.app, "/api/cron/dagrapport")).status).toBe(503);
      await admin.unsafe(`ALTER DATABASE "${name}" RESET default_transaction_read_only`);
      await reconnect();
    } finally {
      await admin.close();
    }
    await until("ok again", async () => ((await call(env.app, "/health", { method: "GET", token: null }).catch(() => null))?.status === 200 ? true : undefined));
  });
});

describe("bearerChecker and scopeOf", () => {
  const check = bearerChecker(SECRET);
  test("accepts only the exact secret", () => {
    expect(check(`Bearer ${SECRET}`)).toBe(true);
    expect(check(`Bearer  ${SECRET}`)).toBe(true);
    expect(check(null)).toBe(false);
    expect(check(`Bearer ${SECRET.toUpperCase()}`)).toBe(false);
  });
  test("protects every path but the open ones: the jobs for the crontab, the rest for the application", () => {
    const scope = (p: string) => scopeOf(p, OPEN_PATHS);
    expect(scope("/api/cron/x")).toBe("cron");
    expect(scope("//API//cron")).toBe("cron");
    expect(scope("/api//CRON//dagrapport")).toBe("cron");
    expect(scope("/api/cronx")).toBe("app");
    expect(scope("/api/audit")).toBe("app");
    expect(scope("//api/tenants/1")).toBe("app");
    expect(scope("/api/")).toBe("app");
    for (const p of ["/health", "/docs", "/docs/", "/docs/json", "/docs/assets/swagger-ui.css", "/metrics", "//Health"]) expect({ p, s: scope(p) }).toEqual({ p, s: "open" });
    // Nothing is open unless listed: an unknown path, a prefix or an extension of an open one.
    for (const p of ["/", "/audit", "/healthz", "/health/x", "/docs/assets/other.js", "/docsx", "/metrics/x"]) expect({ p, s: scope(p) }).toEqual({ p, s: "app" });
  });
  test("pathOf reads the path Bun routes on, and nothing from a relative request.url", () => {
    expect(pathOf("http://x/api/audit?a=b")).toBe("/api/audit");
    expect(pathOf("http://[::1]:8080//api/cron/x")).toBe("//api/cron/x");
    expect(pathOf("https://example.nl")).toBe("/");
    // What Bun hands over when the Host header is missing or invalid.
    expect(pathOf("/api/audit")).toBeNull();
    expect(pathOf("api/audit")).toBeNull();
  });
});

// A review found that APP_SECRET ran any job when the Host header had 1–3 characters:
// the gate read the path after the host in request.url, Elysia's router from the first
// "/" at index 11 or later (its `standardHostname`, which takes a host of at least 4),
// so `POST /ab/api/cron/backup-status` with `Host: x` was "app" to the gate and
// backup-status to the router: a forged, sealed "backup OK". The router now reads where
// the gate does (src/app.ts), whatever the host's length.
describe("the gate and the router read the same path, whatever the Host header's length", () => {
  const APP = "app-secret-0123456789abcdef0123456789abcdef";
  /** One request over a real socket, `Connection: close`: its status line once the server closed. */
  async function statusOf(port: number, request: string): Promise<string> {
    let out = "";
    const closed = Promise.withResolvers<void>();
    const socket = await Bun.connect({
      hostname: "127.0.0.1",
      port,
      socket: {
        data: (_s, d) => void (out += d.toString()),
        close: () => closed.resolve(),
        error: () => closed.resolve(),
      },
    });
    socket.write(request);
    await closed.promise;
    return out.split("\r\n")[0]!;
  }

  test("APP_SECRET runs no job and CRON_SECRET writes nothing through any prefix of the path, with hosts of 1 to 5 characters", async () => {
    env = await makeEnv({ APP_SECRET: APP });
    const served = env.app.listen({ port: 0, hostname: "127.0.0.1" });
    try {
      const port = served.server!.port!;
      const backup = JSON.stringify({ exitCode: 0, bestandsnaam: "vals.db.gz", grootte: 1, foutmelding: "" });
      const audit = JSON.stringify({ entries: [{ tenantId: 1, actor: "a", action: "b", subject: "" }] });
      const request = (host: string, path: string, token: string, body: string) =>
        `POST ${path} HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`;
      const answers: string[] = [];
      for (const host of ["x", "xy", "xyz", "wxyz", "vwxyz"]) {
        for (const prefix of ["", "/a", "/ab", "/abc", "/a/b", "//"]) {
          answers.push(`${host} ${prefix} cron: ${await statusOf(port, request(host, `${prefix}/api/cron/backup-status`, APP, backup))}`);
          answers.push(`${host} ${prefix} app: ${await statusOf(port, request(host, `${prefix}/api/audit`, SECRET, audit))}`);
        }
      }
      // Refused (403: the other side's token) or not found; never a route run.
      for (const a of answers) expect(a).toMatch(/: HTTP\/1\.1 (403|404) /);
      expect(answers.filter((a) => a.endsWith("403 Forbidden")).length).toBeGreaterThan(0);
      expect(await env.db.get<{ n: number }>("SELECT count(*) AS n FROM backup_statuses")).toEqual({ n: 0 });
      expect(await env.db.get<{ n: number }>("SELECT count(*) AS n FROM audit_entries")).toEqual({ n: 0 });
      // The right token through the same short hosts: the route runs.
      expect(await statusOf(port, request("x", "/api/cron/backup-status", SECRET, backup))).toBe("HTTP/1.1 200 OK");
    } finally {
      served.stop(true);
    }
  });
});
