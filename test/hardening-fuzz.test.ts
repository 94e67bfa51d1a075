// Hostile input (issue 8, part 1): thousands of random and malformed requests at every
// job, in-process through app.handle and, fewer, over a real socket so Bun's own limits
// (header size, body size, HTTP parsing) are part of the test. The property: the answer
// is 400, 401, 404, 405 or 413 with a JSON {error} (or the job's documented result when
// the request is valid), never a 500, a stack trace or the secret, and a rejected
// request stores nothing.
//
// fast-check runs with a fixed seed so a failure reproduces; FC_SEED=<n> explores others.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import fc from "fast-check";
import { canonicalJson } from "../src/audit/chain.ts";
import { MAX_REQUEST_BODY, OPEN_PATHS } from "../src/app.ts";
import { ALL_JOBS } from "../src/jobs/index.ts";
import { JOB_NAMES } from "../src/schedule.ts";
import { NOW, SECRET } from "./helpers.ts";
import { addAdmin, addLoginAttempt, addTenant, appendInputs, makeEnv, type Env } from "./dialect.ts";

const SEED = Number(process.env.FC_SEED ?? 20260723);
const DAY = 24 * 3600 * 1000;

// ---------------------------------------------------------------- the request model

interface FuzzRequest {
  method: string;
  path: string;
  authorization: string | null;
  /** True only when `authorization` is a correct Bearer header for SECRET. */
  validToken: boolean;
  headers: [string, string][];
  body: string | Uint8Array | null;
}

const JOB_PATHS = JOB_NAMES.map((j) => `/api/cron/${j}`);

/** Latin-1 text: what an HTTP header value can carry (Headers refuses code points > 255). */
const latin1 = (max: number) => fc.string({ unit: fc.integer({ min: 0x20, max: 0xff }).map((c) => String.fromCharCode(c === 0x7f ? 0x7e : c)), maxLength: max });

const wrongAuthorization: fc.Arbitrary<string | null> = fc.oneof(
  fc.constant(null),
  fc.constantFrom("", "Bearer", "Bearer ", "Bearer  ", "bearer", "Basic", "Token abc", "Bearer null", "Bearer undefined", "Bearer \t"),
  latin1(80),
  latin1(80).map((t) => `Bearer ${t}`),
  // Near misses: the secret with one character changed, cut, extended, with another scheme.
  fc.integer({ min: 0, max: SECRET.length - 1 }).map((i) => `Bearer ${SECRET.slice(0, i)}${SECRET[i] === "x" ? "y" : "x"}${SECRET.slice(i + 1)}`),
  fc.integer({ min: 0, max: SECRET.length - 1 }).map((i) => `Bearer ${SECRET.slice(0, i)}`),
  latin1(5).filter((s) => s.length > 0 && !/^\s+$/.test(s)).map((s) => `Bearer ${SECRET}${s}`),
  fc.constantFrom(`Basic ${SECRET}`, `Basic ${btoa(`cron:${SECRET}`)}`, `Bearer${SECRET}`, `Bearer ${SECRET} ${SECRET}`, `Bearer "${SECRET}"`, `Bearer ${SECRET.toUpperCase()}`, `${SECRET}`, `Bearer,${SECRET}`),
  // Long ones, up to 64 KiB (in-process there is no header limit).
  fc.integer({ min: 1000, max: 65536 }).map((n) => `Bearer ${"A".repeat(n)}`),
);

const validAuthorization = fc.constantFrom(`Bearer ${SECRET}`, `bearer ${SECRET}`, `BEARER ${SECRET}`, `Bearer   ${SECRET}`, `Bearer ${SECRET} `);

const pathArb: fc.Arbitrary<string> = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom(...JOB_PATHS) },
  {
    weight: 3,
    arbitrary: fc.tuple(fc.constantFrom(...JOB_PATHS), fc.constantFrom("/", "//", "?", "?x=1", `?token=${SECRET}`, "#frag", "/..", "/.", ";x", "%00", "%2F", "/extra", "?a=" + "b".repeat(3000))).map(([p, s]) => p + s),
  },
  { weight: 1, arbitrary: fc.constantFrom(...JOB_PATHS).map((p) => p.toUpperCase()) },
  { weight: 1, arbitrary: fc.constantFrom(...JOB_PATHS).map((p) => p.replace("/api/", "//api//")) },
  { weight: 2, arbitrary: fc.string({ maxLength: 40 }).map((s) => `/api/cron/${encodeURIComponent(s)}`) },
  { weight: 1, arbitrary: fc.string({ maxLength: 40 }).map((s) => `/api/${encodeURIComponent(s)}`) },
  { weight: 1, arbitrary: fc.webPath() },
  { weight: 1, arbitrary: fc.constantFrom("/", "/api", "/api/", "/api/cron", "/api/cron/", "/%61pi/cron/weekrapport", "/api%2Fcron%2Fweekrapport", `/api/cron/${SECRET}`) },
);

const contentTypes = fc.constantFrom(
  "application/json",
  "application/json; charset=utf-8",
  "text/plain",
  "multipart/form-data; boundary=xyz",
  "application/x-www-form-urlencoded",
  "application/octet-stream",
  "application/json; charset=utf-16",
  "*/*",
  "",
);

/** Backup reports with every field right, wrong, absent or odd. */
const reportLike = fc.record(
  {
    exitCode: fc.oneof(fc.integer({ min: -300, max: 300 }), fc.double(), fc.string(), fc.constant(null), fc.boolean(), fc.constant(2 ** 60), fc.array(fc.integer(), { maxLength: 2 })),
    bestandsnaam: fc.oneof(fc.string({ maxLength: 2000 }), fc.integer(), fc.constant(null)),
    grootte: fc.oneof(fc.integer({ min: -5, max: 2 ** 40 }), fc.double(), fc.string({ maxLength: 5 }), fc.constant(null)),
    foutmelding: fc.oneof(fc.string({ maxLength: 300 }), fc.constant(SECRET), fc.object({ maxDepth: 1 }), fc.constant(null)),
  },
  { requiredKeys: [] },
);

const bodyArb: fc.Arbitrary<string | Uint8Array | null> = fc.oneof(
  { weight: 2, arbitrary: fc.constant(null) },
  { weight: 1, arbitrary: fc.constantFrom("", " ", "{", "}", "[]", "null", "0", '"x"', "{not json", '{"exitCode":', "\u0000", "{}".repeat(1000)) },
  { weight: 3, arbitrary: reportLike.map((o) => JSON.stringify(o)) },
  { weight: 1, arbitrary: fc.json({ maxDepth: 3 }) },
  { weight: 1, arbitrary: fc.string({ maxLength: 500 }) },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 300 }) },
  // Around the 64 KiB backup-status limit and far over it.
  { weight: 1, arbitrary: fc.integer({ min: 65_000, max: 70_000 }).map((n) => JSON.stringify({ exitCode: 0, foutmelding: "x".repeat(n) })) },
  { weight: 1, arbitrary: fc.constantFrom(300_000, 1_100_000).map((n) => "x".repeat(n)) },
);

const headerArb: fc.Arbitrary<[string, string][]> = fc.array(
  fc.oneof(
    fc.tuple(fc.constant("content-type"), contentTypes),
    // Lies about the length; the in-process Request does not check them.
    fc.tuple(fc.constant("content-length"), fc.oneof(fc.nat({ max: 2_000_000 }).map(String), fc.constantFrom("-1", "abc", "1e9", " 12 ", "99999999999999999999"))),
    fc.tuple(fc.constant("transfer-encoding"), fc.constantFrom("chunked", "gzip", "identity", "chunked, chunked")),
    fc.tuple(fc.constant("content-encoding"), fc.constantFrom("gzip", "br", "deflate")),
    fc.tuple(fc.constantFrom("x-forwarded-for", "cookie", "accept", "x-request-id", "expect"), latin1(200)),
    fc.tuple(fc.stringMatching(/^[a-z][a-z0-9-]{0,20}$/), latin1(100)),
    fc.tuple(fc.constant("x-big"), fc.integer({ min: 1, max: 200_000 }).map((n) => "h".repeat(n))),
  ),
  { maxLength: 4 },
);

const methodArb = fc.oneof(
  { weight: 8, arbitrary: fc.constant("POST") },
  { weight: 3, arbitrary: fc.constantFrom("GET", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "post", "Post") },
  { weight: 1, arbitrary: fc.stringMatching(/^[A-Z]{1,10}$/) },
);

const requestArb: fc.Arbitrary<FuzzRequest> = fc
  .record({
    method: methodArb,
    path: pathArb,
    auth: fc.oneof({ weight: 4, arbitrary: wrongAuthorization.map((a) => ({ a, valid: false })) }, { weight: 1, arbitrary: validAuthorization.map((a) => ({ a, valid: true })) }),
    headers: headerArb,
    body: bodyArb,
  })
  .map(({ method, path, auth, headers, body }) => ({ method, path, authorization: auth.a, validToken: auth.valid, headers, body }));

/** fast-check's report, cut short: a counterexample may carry a 1 MiB body. */
function reporter<T>(out: fc.RunDetails<T>): void {
  if (out.failed) throw new Error(fc.defaultReportMessage(out)?.replace(/(.)\1{200,}/g, (m) => `${m[0]}×${m.length}`).slice(0, 4000));
}

function toRequest(base: string, r: FuzzRequest): Request | null {
  const headers = new Headers();
  try {
    for (const [k, v] of r.headers) headers.append(k, v);
    if (r.authorization !== null) headers.set("authorization", r.authorization);
    const upper = r.method.toUpperCase();
    const body = upper === "GET" || upper === "HEAD" ? null : r.body;
    return new Request(base + r.path, { method: r.method, headers, body: body as BodyInit | null });
  } catch {
    // Not expressible as a Request (a forbidden method such as TRACE): nothing to send.
    return null;
  }
}

// ---------------------------------------------------------------- the oracle

const documented = new Map(ALL_JOBS.map((j) => [j.name as string, j]));
// SQLite's and PostgreSQL's error names are internal detail too.
const STACK = /\n\s+at |\bat [^\s]+ \(|\.tsx?:\d+|node_modules|\/work\/|\bError:|SQLITE_|PostgresError|ERR_POSTGRES/;
const ERROR_STATUSES = new Set([400, 401, 404, 405, 413]);

/** The job a request reaches when it gets past the gate, or null for none. */
function jobOf(r: FuzzRequest): string | null {
  if (r.method.toUpperCase() !== "POST") return null;
  const pathname = new URL("http://localhost" + r.path).pathname;
  const m = /^\/api\/cron\/([a-z-]+)\/?$/.exec(pathname);
  return m && documented.has(m[1]!) ? m[1]! : null;
}

function normalized(path: string): string {
  return new URL("http://localhost" + path).pathname.replace(/\/{2,}/g, "/").toLowerCase();
}

/** Every path needs a token but the few open ones (health, docs, metrics), with or without a trailing slash. */
function isProtected(path: string): boolean {
  const p = normalized(path);
  return !OPEN_PATHS.has(p) && !OPEN_PATHS.has(p.replace(/(.)\/$/, "$1"));
}

/** The jobs' part of /api/, which the cron token opens; the rest of /api/ is the write API (APP_SECRET). */
function isCronPath(path: string): boolean {
  const p = normalized(path);
  return p === "/api/cron" || p.startsWith("/api/cron/");
}

interface Counts {
  backups: number;
  runs: number;
  audit: number;
  logins: number;
}

async function counts(env: Env): Promise<Counts> {
  const row = await env.db.get<Counts>(
    `SELECT (SELECT count(*) FROM backup_statuses) AS backups, (SELECT count(*) FROM job_runs) AS runs,
            (SELECT count(*) FROM audit_entries) AS audit, (SELECT count(*) FROM login_attempts) AS logins`,
  );
  return row!;
}

interface Seen {
  statuses: Map<number, number>;
  jobsRun: Set<string>;
}

/** Checks one answer; returns a description of what is wrong, or null. */
function judge(r: FuzzRequest, method: string, status: number, type: string | null, text: string, before: Counts, after: Counts): string | null {
  if (text.includes(SECRET)) return "the secret is in the answer";
  if (STACK.test(text)) return `something like a stack trace or internal detail in the answer: ${text.slice(0, 200)}`;
  const job = jobOf(r);
  const gated = isProtected(r.path) && !r.validToken;
  const ranJob = job !== null && !gated && (status === 200 || status === 409 || status === 502);

  // The cron token on the write API's paths: valid, but for the other scope.
  const otherScope = isProtected(r.path) && r.validToken && !isCronPath(r.path);
  if (gated && status !== 401) return `wrong token on a protected path answered ${status}, not 401`;
  if (otherScope && status !== 403) return `the cron token outside /api/cron/ answered ${status}, not 403`;
  if (!ranJob && !ERROR_STATUSES.has(status) && !(otherScope && status === 403)) return `status ${status} for a request that runs no job`;
  if (ranJob) {
    const def = documented.get(job)!;
    const schema = def.responses?.[status as 200 | 409 | 502]?.schema;
    if (!schema) return `${job} answered ${status}, not one of its documented statuses`;
    const body = JSON.parse(text);
    if (!Value.Check(schema, body)) return `${job} ${status} does not match its schema: ${[...Value.Errors(schema, body)].map((e) => `${e.path} ${e.message}`).slice(0, 3).join("; ")}`;
    if (after.runs !== before.runs + 1) return `${job} ran but job_runs grew by ${after.runs - before.runs}`;
  } else {
    if (method !== "HEAD") {
      if (!type?.startsWith("application/json")) return `error answer with content-type ${type}`;
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch {
        return `error answer is not JSON: ${text.slice(0, 100)}`;
      }
      if (body === null || typeof body !== "object" || Object.keys(body).join() !== "error" || typeof (body as { error: unknown }).error !== "string") {
        return `error answer is not exactly {error: string}: ${text.slice(0, 200)}`;
      }
    }
    if (status === 401 && type !== null && method !== "HEAD" && !text.includes("error")) return "401 without {error}";
    // Nothing stored from a rejected request.
    if (after.runs !== before.runs) return `rejected request (${status}) added a job run`;
    if (after.backups !== before.backups) return `rejected request (${status}) stored a backup status`;
  }
  if (job !== "backup-status" || !ranJob) {
    if (after.backups !== before.backups) return "a backup status stored by something other than an accepted backup-status call";
  }
  if (after.audit > before.audit || after.logins > before.logins) return "audit entries or login attempts were added";
  return null;
}

// ---------------------------------------------------------------- fixtures

let env: Env;
const written: string[] = [];
const originalStdout = process.stdout.write.bind(process.stdout);
const originalStderr = process.stderr.write.bind(process.stderr);

beforeAll(async () => {
  env = await makeEnv();
  const t = await addTenant(env.db, "Alfa BV");
  await addAdmin(env.db, t, "anna@alfa.test");
  for (let i = 0; i < 20; i++) {
    await appendInputs(env.store, [
      { tenantId: t, actor: "a", action: "dossier.bekeken", subject: `d${i}`, details: canonicalJson({}), createdAt: new Date(NOW.getTime() - (3000 - i) * DAY).toISOString() },
    ]);
    await addLoginAttempt(env.db, { account: "anna", ip: "10.0.0.1", gelukt: i % 3 !== 0, tenantId: t, tijdstip: new Date(NOW.getTime() - i * 3600_000) });
  }
  // Everything the service logs while under fire is kept, to look for the secret in it.
  const capture = (orig: typeof process.stdout.write) =>
    ((chunk: unknown, ...rest: unknown[]) => {
      written.push(String(chunk));
      return (orig as (...a: unknown[]) => boolean)(chunk, ...rest);
    }) as typeof process.stdout.write;
  process.stdout.write = capture(originalStdout);
  process.stderr.write = capture(originalStderr);
});

afterAll(async () => {
  process.stdout.write = originalStdout;
  process.stderr.write = originalStderr;
  await env?.cleanup();
});

// ---------------------------------------------------------------- in-process

describe("hostile input in-process (app.handle)", () => {
  test("4000 random requests: only 400/401/404/405/413 {error} or a job's documented result; no 500, trace or secret; rejected ones store nothing", async () => {
    const seen: Seen = { statuses: new Map(), jobsRun: new Set() };
    await fc.assert(
      fc.asyncProperty(requestArb, async (r) => {
        const req = toRequest("http://localhost", r);
        fc.pre(req !== null);
        const before = await counts(env);
        const res = await env.app.handle(req!);
        const text = await res.text();
        const after = await counts(env);
        const problem = judge(r, req!.method, res.status, res.headers.get("content-type"), text, before, after);
        seen.statuses.set(res.status, (seen.statuses.get(res.status) ?? 0) + 1);
        const job = jobOf(r);
        if (job && (res.status === 200 || res.status === 409) && r.validToken) seen.jobsRun.add(job);
        if (problem) throw new Error(`${problem}\nrequest: ${JSON.stringify({ ...r, body: typeof r.body === "string" ? r.body.slice(0, 300) : r.body })}`);
      }),
      { numRuns: 4000, seed: SEED, endOnFailure: true, reporter },
    );
    console.log(`fuzz (seed ${SEED}) statuses: ${JSON.stringify(Object.fromEntries([...seen.statuses].sort()))}; jobs run: ${seen.jobsRun.size}`);
    // The generator reaches every kind of answer, and every job ran at least once.
    for (const s of [200, 400, 401, 404, 413]) expect(seen.statuses.get(s) ?? 0).toBeGreaterThan(0);
    // (backup-status needs a fully valid body to run; the next test covers its acceptance)
    expect([...seen.jobsRun]).toEqual(expect.arrayContaining(JOB_NAMES.filter((j) => j !== "backup-status")));
    expect(seen.statuses.has(500)).toBe(false);
    expect(env.alarms.raised.filter((a) => a.type === "internal-error")).toEqual([]);
    expect(written.join("")).not.toContain(SECRET);
  }, 120_000);

  test("valid backup reports among the noise are stored exactly once each, and nothing else is", async () => {
    const before = (await counts(env)).backups;
    let accepted = 0;
    await fc.assert(
      fc.asyncProperty(fc.oneof(reportLike.map((o) => JSON.stringify(o)), bodyArb.filter((b): b is string => typeof b === "string")), async (body) => {
        const res = await env.app.handle(
          new Request("http://localhost/api/cron/backup-status", { method: "POST", headers: { authorization: `Bearer ${SECRET}` }, body }),
        );
        const text = await res.text();
        expect([200, 400, 413]).toContain(res.status);
        if (res.status === 200) {
          accepted++;
          expect(JSON.parse(text)).toEqual({ ok: true, gelukt: expect.any(Boolean) });
        } else {
          expect(Object.keys(JSON.parse(text))).toEqual(["error"]);
        }
      }),
      { numRuns: 600, seed: SEED + 1, reporter },
    );
    expect(accepted).toBeGreaterThan(20);
    expect((await counts(env)).backups - before).toBe(accepted);
    // A failure report's foutmelding that happens to be the secret is scrubbed from the alarm.
    expect(JSON.stringify(env.alarms.raised)).toContain("backup-failure");
  }, 60_000);
});

// ---------------------------------------------------------------- over a real socket

interface RawAnswer {
  status: number;
  head: string;
  body: string;
  closed: boolean;
}

/** Sends raw bytes, reads one answer (or until the server closes), bounded in time. */
async function raw(port: number, bytes: string | Uint8Array, waitMs = 3000): Promise<RawAnswer | null> {
  let out = "";
  const done = Promise.withResolvers<void>();
  let closed = false;
  const sock = await Bun.connect({
    hostname: "127.0.0.1",
    port,
    socket: {
      data(_s, d) {
        out += new TextDecoder("latin1").decode(d);
        const end = out.indexOf("\r\n\r\n");
        if (end >= 0) {
          const len = /content-length: *(\d+)/i.exec(out.slice(0, end))?.[1];
          if (len === undefined || out.length >= end + 4 + Number(len)) done.resolve();
        }
      },
      close() {
        closed = true;
        done.resolve();
      },
      error() {
        done.resolve();
      },
    },
  });
  sock.write(bytes);
  await Promise.race([done.promise, Bun.sleep(waitMs)]);
  sock.end();
  const m = /^HTTP\/1\.1 (\d{3})/.exec(out);
  if (!m) return null;
  const end = out.indexOf("\r\n\r\n");
  return { status: Number(m[1]), head: out.slice(0, end), body: out.slice(end + 4), closed };
}

describe("hostile input over HTTP (Bun.serve of the app)", () => {
  let served: ReturnType<Env["app"]["listen"]>;
  let port: number;
  let base: string;
  beforeAll(() => {
    // Same construction as startServer: createApp(...).listen(); its serve options
    // (maxRequestBodySize) come from createApp.
    served = env.app.listen({ port: 0, hostname: "127.0.0.1" });
    port = served.server!.port!;
    base = `http://127.0.0.1:${port}`;
  });
  afterAll(() => served?.stop(true));

  test("250 random requests over fetch obey the same rules; Bun's own refusals (413, 431) come without a body", async () => {
    const seen = new Map<number, number>();
    await fc.assert(
      fc.asyncProperty(requestArb, async (r) => {
        // Bun's fetch sends a body only with the standard methods, spelled in capitals.
        const upper = r.method.toUpperCase();
        const standard = ["POST", "PUT", "PATCH", "DELETE", "OPTIONS", "GET", "HEAD"].includes(upper);
        const req = toRequest(base, standard ? { ...r, method: upper } : { ...r, body: null });
        fc.pre(req !== null);
        const before = await counts(env);
        let res: Response;
        try {
          res = await fetch(req!);
        } catch (e) {
          // Bun drops the connection for bodies it will not read (declared over the limit).
          throw new Error(`no answer: ${String(e)} for ${r.method} ${r.path}`);
        }
        const text = await res.text();
        const after = await counts(env);
        seen.set(res.status, (seen.get(res.status) ?? 0) + 1);
        const headerBytes = r.headers.reduce((n, [k, v]) => n + k.length + v.length + 4, 0) + (r.authorization?.length ?? 0) + r.path.length;
        if (res.status === 431 || (res.status === 413 && text === "")) {
          // Refused by Bun before the app saw it: only for what is really over its limits.
          if (res.status === 431) expect(headerBytes).toBeGreaterThan(8 * 1024);
          if (res.status === 413) expect(typeof r.body === "string" ? r.body.length : (r.body?.length ?? 0)).toBeGreaterThan(MAX_REQUEST_BODY);
          expect(after).toEqual(before);
          return;
        }
        const problem = judge(r, req!.method, res.status, res.headers.get("content-type"), text, before, after);
        if (problem) throw new Error(`${problem}\nrequest: ${r.method} ${r.path} auth=${r.authorization?.slice(0, 80)}`);
      }),
      { numRuns: 250, seed: SEED + 2, endOnFailure: true, reporter },
    );
    console.log(`over HTTP: ${JSON.stringify(Object.fromEntries([...seen].sort()))}`);
    expect(seen.has(500)).toBe(false);
  }, 60_000);

  test("maxRequestBodySize (MAX_REQUEST_BODY, 2 MiB) applies to the listening app: one byte over is 413 from Bun, nothing stored", async () => {
    const before = await counts(env);
    const over = await raw(port, `POST /api/cron/backup-status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${SECRET}\r\nContent-Length: ${MAX_REQUEST_BODY + 1}\r\n\r\n` + "x".repeat(MAX_REQUEST_BODY + 1));
    expect(over?.status).toBe(413);
    expect(over?.body).toBe("");
    // Exactly MAX_REQUEST_BODY reaches the app, whose backup-status reads at most 64 KiB: 413 {error}.
    const at = await raw(port, `POST /api/cron/backup-status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${SECRET}\r\nContent-Length: ${MAX_REQUEST_BODY}\r\n\r\n` + "x".repeat(MAX_REQUEST_BODY));
    expect(at?.status).toBe(413);
    expect(JSON.parse(at!.body).error).toContain("65536");
    // Over the limit even with a wrong token: Bun refuses it on the declared length.
    const wrong = await raw(port, `POST /api/cron/backup-status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nope\r\nContent-Length: ${2 * MAX_REQUEST_BODY}\r\n\r\n`, 2000);
    expect(wrong?.status).toBe(413);
    expect(await counts(env)).toEqual(before);
  }, 30_000);

  test("a request without a valid Host header is 400 on every path: Bun leaves its url relative, and no path read from it opens a route", async () => {
    const before = await counts(env);
    const audit = JSON.stringify({ entries: [{ tenantId: 1, actor: "mallory", action: "x", subject: "" }] });
    const tenant = JSON.stringify({ naam: "aanvaller", actief: true });
    const requests = (host: string | null) =>
      [
        ["POST", "/api/cron/weekrapport", ""],
        ["POST", "/api/cron/backup-status", '{"gelukt":true}'],
        ["POST", "/api/audit", audit],
        ["PUT", "/api/tenants/777", tenant],
        ["GET", "/health", ""],
      ].map(([method, path, body]) =>
        host === null
          ? `${method} ${path} HTTP/1.0\r\nContent-Length: ${body!.length}\r\n\r\n${body}`
          : `${method} ${path} HTTP/1.1\r\nHost: ${host}\r\nContent-Type: application/json\r\nContent-Length: ${body!.length}\r\nConnection: close\r\n\r\n${body}`,
      );
    // No token at all: before the gate read the path from request.url, these ran jobs and stored entries.
    for (const host of [null, "", "x/", "a/b", "a?", "a#b", "a\\b", "a b", "@", "a@b", "x/health?"]) {
      for (const req of requests(host)) {
        const a = await raw(port, req);
        expect({ host, req: req.split("\r\n")[0], status: a?.status }).toEqual({ host, req: req.split("\r\n")[0], status: 400 });
        expect(JSON.parse(a!.body)).toEqual({ error: expect.stringContaining("Host") });
      }
    }
    expect(await counts(env)).toEqual(before);
    // A valid Host, without a token: the gate as always; with one: the route.
    expect((await raw(port, `POST /api/cron/weekrapport HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Length: 0\r\n\r\n`))?.status).toBe(401);
    expect((await raw(port, `GET /health HTTP/1.1\r\nHost: [::1]\r\n\r\n`))?.status).toBe(200);
    expect((await raw(port, `GET /bestaat-niet HTTP/1.1\r\nHost: x\r\n\r\n`))?.status).toBe(401);
  }, 30_000);

  test("a chunked body without content-length is cut at 64 KiB by backup-status (413), or refused unread with a wrong token (401)", async () => {
    const before = await counts(env);
    const chunks = ("100000\r\n" + "x".repeat(0x100000) + "\r\n").repeat(2) + "0\r\n\r\n";
    const good = await raw(port, `POST /api/cron/backup-status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${SECRET}\r\nTransfer-Encoding: chunked\r\n\r\n` + chunks);
    expect(good?.status).toBe(413);
    expect(Object.keys(JSON.parse(good!.body))).toEqual(["error"]);
    const bad = await raw(port, `POST /api/cron/backup-status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nope\r\nTransfer-Encoding: chunked\r\n\r\n` + chunks);
    expect(bad?.status).toBe(401);
    expect(await counts(env)).toEqual(before);
  }, 30_000);

  test("oversized headers, an oversized URL and 500 headers are 431 from Bun; 16 000 bytes still reach the gate", async () => {
    for (const req of [
      `POST /api/cron/weekrapport HTTP/1.1\r\nHost: x\r\nX-A: ${"a".repeat(16_384)}\r\nContent-Length: 0\r\n\r\n`,
      `POST /api/cron/weekrapport HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${"a".repeat(100_000)}\r\nContent-Length: 0\r\n\r\n`,
      `POST /api/cron/${"a".repeat(20_000)} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n`,
      `POST /api/cron/weekrapport HTTP/1.1\r\nHost: x\r\n${Array.from({ length: 500 }, (_, i) => `X-H${i}: v\r\n`).join("")}Content-Length: 0\r\n\r\n`,
    ]) {
      const a = await raw(port, req);
      expect(a?.status).toBe(431);
      expect(a?.body).toBe("");
    }
    const fits = await raw(port, `POST /api/cron/weekrapport HTTP/1.1\r\nHost: x\r\nX-A: ${"a".repeat(16_000)}\r\nContent-Length: 0\r\n\r\n`);
    expect(fits?.status).toBe(401);
    expect(JSON.parse(fits!.body).error).toEqual(expect.any(String));
  }, 30_000);

  test("malformed HTTP (length lies, smuggling, bad header lines, garbage) is 400 or 413/431/505 from Bun and runs nothing", async () => {
    const before = await counts(env);
    const A = `Authorization: Bearer ${SECRET}\r\n`;
    const cases: [string, string, number[]][] = [
      ["content-length shorter than the body", `POST /api/cron/backup-status HTTP/1.1\r\nHost: x\r\n${A}Content-Length: 5\r\n\r\n{"exitCode":0}`, [400]],
      ["content-length not a number", `POST /api/cron/backup-status HTTP/1.1\r\nHost: x\r\n${A}Content-Length: abc\r\n\r\n{"exitCode":0}`, [400]],
      ["negative content-length", `POST /api/cron/backup-status HTTP/1.1\r\nHost: x\r\n${A}Content-Length: -1\r\n\r\n{"exitCode":0}`, [400]],
      ["content-length and chunked at once", `POST /api/cron/backup-status HTTP/1.1\r\nHost: x\r\n${A}Content-Length: 14\r\nTransfer-Encoding: chunked\r\n\r\ne\r\n{"exitCode":0}\r\n0\r\n\r\n`, [400]],
      ["two different content-lengths", `POST /api/cron/backup-status HTTP/1.1\r\nHost: x\r\n${A}Content-Length: 14\r\nContent-Length: 15\r\n\r\n{"exitCode":0}`, [400]],
      ["header line without colon", `POST /api/cron/backup-status HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n`, [400]],
      ["NUL in the authorization header", `POST /api/cron/backup-status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \u0000${SECRET}\r\n\r\n`, [400, 401]],
      ["request target without slash", `POST api/cron/weekrapport HTTP/1.1\r\nHost: x\r\n${A}Content-Length: 0\r\n\r\n`, [400]],
      ["binary garbage", "\u0000\u0001\u0002 hello\r\n\r\n", [400]],
      ["HTTP/0.9 request", "GET /\r\n\r\n", [400, 505]],
      ["percent-encoded /api (no bypass of the gate: a path nobody listed as open needs a token)", "POST /%61pi/cron/weekrapport HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", [401]],
      ["absolute-form target without token", "POST http://evil/api/cron/weekrapport HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", [401]],
      ["dot segments without token", "POST /x/../api/cron/weekrapport HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", [401]],
    ];
    for (const [name, bytes, allowed] of cases) {
      const a = await raw(port, bytes);
      if (!allowed.includes(a?.status ?? -1)) throw new Error(`${name}: answered ${a?.status}, expected one of ${allowed}`);
      expect(a!.body).not.toContain(SECRET);
      // A body, when there is one, is {error}.
      if (a!.body.trim() !== "") expect(Object.keys(JSON.parse(a!.body.split("HTTP/1.1")[0]!))).toEqual(["error"]);
    }
    expect(await counts(env)).toEqual(before);
  }, 60_000);

  test("a body that never arrives holds only its own connection: other calls are answered meanwhile", async () => {
    // Declares 100 bytes, sends 14 and waits: backup-status waits for the rest (Bun's
    // idle timeout closes such a connection after 10 s), while the service goes on.
    const stuck = raw(port, `POST /api/cron/backup-status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${SECRET}\r\nContent-Length: 100\r\n\r\n{"exitCode":0}`, 1500);
    const t0 = performance.now();
    const other = await fetch(`${base}/api/cron/backup-controle`, { method: "POST", headers: { authorization: `Bearer ${SECRET}` } });
    expect([200, 409]).toContain(other.status);
    await other.text();
    expect(performance.now() - t0).toBeLessThan(1000);
    expect(await stuck).toBeNull();
  }, 30_000);
});
