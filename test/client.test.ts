// src/client.ts against the real service, started from source as a process: the four
// calls, refusals as NachtwachtError with the server's message, retries with backoff
// through a real flaky HTTP proxy (Retry-After honoured; retried after a lost answer only
// when the call is idempotent), a real 503 while another process holds the database's
// write lock (SQLite) or while the database refuses writes (PostgreSQL), and the same
// client bundled for Node 20 and run there. On the PostgreSQL run (test/dialect.ts) the
// service gets DATABASE_URL, a fresh database of the run's cluster, and the tests read
// that database; on SQLite they read the service's file.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { MAX_BODY_BYTES, NachtwachtClient, NachtwachtError, NOTHING_STORED_HEADER, NOTHING_STORED_VALUE, parseRetryAfter, type AuditEntry, type ClientOptions, type RetryInfo } from "../src/client.ts";
import { freePort } from "./binary.ts";
import { ROOT, startService, type ServiceProcess } from "./fixtures/hardening.ts";
import { holdWriteLock } from "./ingest-fixtures.ts";
import { TEST_SIGNING_KEY, until } from "./helpers.ts";
import { MAX_WRITES_IN_FLIGHT } from "../src/http/ingest-routes.ts";
import { MAX_BATCH_BYTES } from "../src/ingest/audit.ts";
import { MAX_ATTEMPTS_BYTES } from "../src/ingest/login-attempts.ts";
import { MAX_ADMINISTRATORS_BYTES, MAX_TENANT_BYTES } from "../src/ingest/tenants.ts";
import { parseConfig } from "../src/config.ts";
import { DIALECT, pgOnly, serviceReader, sqliteOnly, testCluster } from "./dialect.ts";

const APP = `app-${randomBytes(24).toString("hex")}`;
const CRON = `cron-${randomBytes(24).toString("hex")}`;

let dir: string;
let dbPath: string;
let svc: ServiceProcess;
let nextTenant = 100;
/** PostgreSQL run: the service's database (DATABASE_URL). */
let pgUrl: string | null = null;
/** The test's reads of the service's database. */
let data: Awaited<ReturnType<typeof serviceReader>> | null = null;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "nachtwacht-client-"));
  dbPath = join(dir, "data", "nachtwacht.db");
  const env: Record<string, string> = { CRON_SECRET: CRON, APP_SECRET: APP, AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY, DATABASE_PATH: dbPath, AUDIT_ANKER_BESTAND: join(dir, "ankers.jsonl") };
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
  }
  await data?.close();
  rmSync(dir, { recursive: true, force: true });
});

const client = (o: Partial<ClientOptions> = {}) => new NachtwachtClient({ baseUrl: svc.url, secret: APP, baseDelayMs: 5, ...o });

async function newTenant(): Promise<number> {
  const id = nextTenant++;
  expect((await client().putTenant(id, { naam: `Tenant ${id}`, actief: true })).nieuw).toBe(true);
  return id;
}

const entry = (tenantId: number, i: number, sleutel?: string): AuditEntry => ({
  tenantId,
  actor: "anna@example.nl",
  action: "dossier.bekeken",
  subject: `dossier/${i}`,
  details: { i },
  ...(sleutel === undefined ? {} : { sleutel }),
});

/** `count(*) AS n` of `sql`, read from the service's database (its file, opened read-only, or its PostgreSQL database). */
async function count(sql: string, ...params: number[]): Promise<number> {
  return (await data!.db.get<{ n: number }>(sql, ...params))!.n;
}
const entriesOf = (tenantId: number) => count("SELECT count(*) AS n FROM audit_entries WHERE tenant_id = ?", tenantId);

/** A rejection of `p`, which must be a NachtwachtError. */
async function failure(p: Promise<unknown>): Promise<NachtwachtError> {
  const e = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(e).toBeInstanceOf(NachtwachtError);
  return e as NachtwachtError;
}

type Step = { status: number; retryAfter?: string; nothingStored?: true } | "lose" | "pass" | "pass-then-503";

/**
 * A real HTTP server in front of the service. Per request, in order: `{status}` answers
 * that status (with Retry-After when given, and the service's nothing-stored header with
 * `nothingStored`) without passing the request on; `lose` passes it on and answers 502
 * (the service stored it, the answer was lost); `pass-then-503` passes it on and answers
 * 503 without that header, as a proxy whose upstream connection reset does; `pass`, and
 * every request after the list, passes it on.
 */
function flakyProxy(steps: Step[]) {
  const seen: { at: number; authorization: string | null; body: string }[] = [];
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(req) {
      const body = await req.text();
      seen.push({ at: performance.now(), authorization: req.headers.get("authorization"), body });
      const step = steps[seen.length - 1] ?? "pass";
      if (typeof step === "object") {
        const headers: Record<string, string> = step.retryAfter === undefined ? {} : { "retry-after": step.retryAfter };
        if (step.nothingStored) headers[NOTHING_STORED_HEADER] = NOTHING_STORED_VALUE;
        return Response.json({ error: `proxy ${step.status}` }, { status: step.status, headers });
      }
      const res = await fetch(svc.url + new URL(req.url).pathname, { method: req.method, headers: { authorization: req.headers.get("authorization") ?? "", "content-type": "application/json" }, body });
      const text = await res.text();
      if (step === "lose") return new Response("Bad Gateway", { status: 502 });
      // As Envoy does when the upstream connection resets before the headers: a 503 after the request went on.
      if (step === "pass-then-503") return new Response("upstream connect error or disconnect/reset before headers", { status: 503, headers: { "retry-after": "0" } });
      return new Response(text, { status: res.status, headers: { "content-type": "application/json" } });
    },
  });
  return { url: `http://127.0.0.1:${server.port}`, seen, stop: () => server.stop(true) };
}

describe("the four calls against the service", () => {
  test("putTenant creates (nieuw) and updates; putAdministrators replaces the list by e-mail", async () => {
    const c = client();
    const id = nextTenant++;
    const created = await c.putTenant(id, { naam: "Acme", actief: true });
    expect(created).toMatchObject({ tenantId: id, naam: "Acme", actief: true, nieuw: true });
    const updated = await c.putTenant(id, { naam: "Acme BV", actief: false });
    expect(updated).toEqual({ tenantId: id, naam: "Acme BV", actief: false, aangemaakt: created.aangemaakt, nieuw: false });

    const first = await c.putAdministrators(id, [
      { naam: "Ans", email: "ans@example.nl", actief: true },
      { naam: "Bob", email: "bob@example.nl", actief: true },
    ]);
    expect(first.beheerders.map((b) => [b.email, b.actief])).toEqual([
      ["ans@example.nl", true],
      ["bob@example.nl", true],
    ]);
    const second = await c.putAdministrators(id, [{ naam: "Ans de Vries", email: "ANS@example.nl", actief: true }]);
    // Bob, left out and never sent a report, is removed.
    expect(second.beheerders).toEqual([{ id: first.beheerders[0]!.id, naam: "Ans de Vries", email: "ANS@example.nl", actief: true }]);
  });

  test("appendAudit returns receipts in batch order; the same batch again returns the same receipts and stores nothing", async () => {
    const c = client();
    const t = await newTenant();
    const batch = [entry(t, 0, "e-0"), entry(t, 1, "e-1"), entry(t, 2, "e-2")];
    const first = await c.appendAudit(batch);
    expect(first.opgeslagen).toBe(3);
    expect(first.ontvangstbewijzen.map((r) => r.seq)).toEqual([1, 2, 3]);
    for (const r of first.ontvangstbewijzen) expect(r.hash).toMatch(/^[0-9a-f]{64}$/);
    expect(await c.appendAudit(batch)).toEqual({ opgeslagen: 0, alBekend: 3, ontvangstbewijzen: first.ontvangstbewijzen });
    expect(await entriesOf(t)).toBe(3);
  });

  test("recordLoginAttempts stores the attempts and returns their ids", async () => {
    const t = await newTenant();
    const before = await count("SELECT count(*) AS n FROM login_attempts");
    const r = await client().recordLoginAttempts([
      { account: "a@example.nl", ip: "192.0.2.1", gelukt: false, reden: "wachtwoord", tenantId: t },
      { account: "b@example.nl", ip: "2001:db8::1", gelukt: true },
    ]);
    expect(r.opgeslagen).toBe(2);
    expect(r.ids).toHaveLength(2);
    expect(await count("SELECT count(*) AS n FROM login_attempts")).toBe(before + 2);
  });
});

describe("refusals: NachtwachtError with the status and the server's message, never retried", () => {
  test("409, 422, 400, 404, 401, 403", async () => {
    const retries: RetryInfo[] = [];
    const c = client({ onRetry: (i) => retries.push(i) });
    const t = await newTenant();
    await c.appendAudit([entry(t, 0, "factuur-17")]);

    const conflict = await failure(c.appendAudit([entry(t, 1, "factuur-17")]));
    expect(conflict).toMatchObject({ name: "NachtwachtError", method: "POST", path: "/api/audit", status: 409, attempts: 1, retryable: false });
    expect(conflict.error).toContain('Sleutel "factuur-17" (entries[0])');
    expect(conflict.message).toBe(`nachtwacht POST /api/audit: HTTP 409: ${conflict.error}`);

    const unknown = await failure(c.appendAudit([entry(t, 2), entry(4242, 3)]));
    expect(unknown.status).toBe(422);
    expect(unknown.error).toContain("entries[1].tenantId");

    const invalid = await failure(c.appendAudit([{ ...entry(t, 4), actor: "" }]));
    expect(invalid.status).toBe(400);
    expect(invalid.error).toContain("entries[0].actor");
    const badAttempt = await failure(c.recordLoginAttempts([{ account: "a", ip: "not an ip", gelukt: false }]));
    expect(badAttempt.status).toBe(400);
    expect(badAttempt.error).toContain("pogingen[0].ip");

    const noTenant = await failure(c.putAdministrators(nextTenant + 1000, []));
    expect(noTenant.status).toBe(404);
    expect(noTenant.path).toBe(`/api/tenants/${nextTenant + 1000}/beheerders`);

    const wrong = await failure(client({ secret: "w".repeat(40) }).putTenant(t, { naam: "x", actief: true }));
    expect(wrong.status).toBe(401);
    const cron = await failure(client({ secret: CRON }).putTenant(t, { naam: "x", actief: true }));
    expect(cron.status).toBe(403);
    expect(cron.error).toContain("APP_SECRET");

    expect(retries).toEqual([]);
    expect(await entriesOf(t)).toBe(1);
  });

  test("arguments the client refuses before sending", () => {
    expect(() => client().putTenant(0, { naam: "x", actief: true })).toThrow(TypeError);
    expect(() => new NachtwachtClient({ baseUrl: "ftp://x", secret: APP })).toThrow(TypeError);
    expect(() => new NachtwachtClient({ baseUrl: "http://u:p@127.0.0.1", secret: APP })).toThrow(TypeError);
    expect(() => new NachtwachtClient({ baseUrl: svc.url, secret: "short" })).toThrow(TypeError);
  });

  test("a body larger than its route takes is refused before sending: 413, nothingStored, nothing sent (Bun closes the connection on one over 2 MiB unread, a reset to a client still sending)", async () => {
    const t = await newTenant();
    let sent = 0;
    const retries: RetryInfo[] = [];
    const c = client({ onRetry: (i) => retries.push(i), fetch: (input, init) => (sent++, fetch(input, init)) });
    const padded = (kib: number, keyed: boolean) =>
      Array.from({ length: 100 }, (_, i) => ({ ...entry(t, i, keyed ? `groot-${kib}-${i}` : undefined), details: { pad: "x".repeat(kib * 10.24 + 1) } }));
    for (const [batch, keyed] of [[padded(3 * 1024, true), true], [padded(1536, false), false]] as const) {
      const e = await failure(c.appendAudit(batch));
      expect({ keyed, status: e.status, attempts: e.attempts, nothingStored: e.nothingStored, retryable: e.retryable }).toEqual({ keyed, status: 413, attempts: 0, nothingStored: true, retryable: false });
      // The message says the client refused it before sending (not "HTTP 413", as if the service had answered), with the size and the limit.
      const bytes = new TextEncoder().encode(JSON.stringify({ entries: batch })).byteLength;
      expect(e.message).toBe(
        `nachtwacht POST /api/audit: door de client geweigerd vóór het versturen (413, geen antwoord van de service): ` +
          `body is ${bytes} bytes, meer dan de ${MAX_BODY_BYTES.audit} bytes die /api/audit aanneemt; niets verstuurd, niets opgeslagen: splits de batch`,
      );
      expect(e.message).not.toContain("HTTP");
      expect(e.error).toContain("niets opgeslagen");
    }
    const attempts = Array.from({ length: 1000 }, (_, i) => ({ account: `${"a".repeat(300)}${i}`, ip: "192.0.2.1", gelukt: false }));
    const login = await failure(c.recordLoginAttempts(attempts));
    expect({ status: login.status, attempts: login.attempts, nothingStored: login.nothingStored }).toEqual({ status: 413, attempts: 0, nothingStored: true });
    expect(login.message).toContain(`door de client geweigerd vóór het versturen (413, geen antwoord van de service)`);
    expect(login.message).toContain(`meer dan de ${MAX_BODY_BYTES.loginAttempts} bytes die /api/inlogpogingen aanneemt`);
    expect({ sent, retries }).toEqual({ sent: 0, retries: [] });
    expect(await entriesOf(t)).toBe(0);
    // Within the limit: sent, and the server's own answer (here: stored).
    const r = await c.appendAudit([{ ...entry(t, 0, "binnen"), details: { pad: "x".repeat(60_000) } }]);
    expect({ sent, opgeslagen: r.opgeslagen }).toEqual({ sent: 1, opgeslagen: 1 });
    // A 413 the service (or a proxy) answers is told apart: HTTP 413, one attempt, its own message.
    const answered = await failure(client({ fetch: async () => Response.json({ error: "te groot" }, { status: 413 }) }).appendAudit([entry(t, 1, "klein")]));
    expect({ status: answered.status, attempts: answered.attempts, message: answered.message }).toEqual({ status: 413, attempts: 1, message: "nachtwacht POST /api/audit: HTTP 413: te groot" });
  }, 30_000);

  test("MAX_BODY_BYTES mirrors the server's limits per route (the client is bundled without server code)", () => {
    expect(MAX_BODY_BYTES).toEqual({ audit: MAX_BATCH_BYTES, loginAttempts: MAX_ATTEMPTS_BYTES, tenant: MAX_TENANT_BYTES, administrators: MAX_ADMINISTRATORS_BYTES });
  });

  test("a secret the service would not take (a line break from a multi-line secrets file, a space, too short or long) is refused up front, without its value in the error", () => {
    const serverTakes = (v: string) => {
      try {
        parseConfig({ CRON_SECRET: CRON, APP_SECRET: v, AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY });
        return true;
      } catch (e) {
        expect(String(e)).not.toContain(v);
        return false;
      }
    };
    const values = [`geheim-${"y".repeat(30)}\n`, `geheim-${"y".repeat(30)}\r`, `geheim ${"y".repeat(30)}`, `geheim-${"é".repeat(30)}`, "g".repeat(31), "g".repeat(1025), "g".repeat(32), "g".repeat(1024), APP];
    for (const v of values) {
      let error: unknown = null;
      try {
        new NachtwachtClient({ baseUrl: svc.url, secret: v });
      } catch (e) {
        error = e;
      }
      // The client's rule is the server's: what one takes, the other takes.
      expect({ v, clientTakes: error === null }).toEqual({ v, clientTakes: serverTakes(v) });
      if (error !== null) {
        expect(error).toBeInstanceOf(TypeError);
        expect(Bun.inspect(error)).not.toContain(v.trim());
      }
    }
  });

  test("the secret is not visible in the client or its errors", async () => {
    const c = client();
    expect(JSON.stringify(c)).not.toContain(APP);
    expect(Bun.inspect(c)).not.toContain(APP);
    const e = await failure(c.putAdministrators(999_999, []));
    expect(Bun.inspect(e)).not.toContain(APP);
  });
});

describe("a 2xx that is not the call's answer (a gateway's {\"status\":\"ok\"}) is no success", () => {
  /** A server that answers every request 200 with `answer`. */
  function answering(answer: unknown) {
    let requests = 0;
    const server = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => (requests++, Response.json(answer)) });
    return { url: `http://127.0.0.1:${server.port}`, requests: () => requests, stop: () => server.stop(true) };
  }

  test("keyed and PUT calls are retried and then fail unreadable (nothingStored false); calls without keys fail at once", async () => {
    const ok = answering({ status: "ok" });
    try {
      const c = client({ baseUrl: ok.url, maxAttempts: 2 });
      const keyed = await failure(c.appendAudit([entry(1, 0, "gw-0")]));
      expect(keyed).toMatchObject({ status: 200, attempts: 2, nothingStored: false });
      expect(keyed.error).toContain("antwoord 200 onleesbaar");
      expect(keyed.error).toContain("ontvangstbewijzen");
      const login = await failure(c.recordLoginAttempts([{ account: "a", ip: "192.0.2.1", gelukt: false }]));
      expect(login).toMatchObject({ status: 200, attempts: 1, nothingStored: false });
      expect(login.error).toContain("niet herhaald");
      const unkeyed = await failure(c.appendAudit([entry(1, 0)]));
      expect(unkeyed).toMatchObject({ status: 200, attempts: 1 });
      expect((await failure(c.putTenant(1, { naam: "x", actief: true }))).attempts).toBe(2);
      expect((await failure(c.putAdministrators(1, []))).attempts).toBe(2);
      expect(ok.requests()).toBe(2 + 1 + 1 + 2 + 2);
    } finally {
      ok.stop();
    }
  });

  test("receipts that do not match the batch (too few, another tenant, no hash), ids of the wrong count and another tenant's PUT answer are no answer", async () => {
    const receipt = { tenantId: 1, seq: 1, id: 1, hash: "a".repeat(64) };
    const attempt = { ip: "192.0.2.1", gelukt: false };
    const cases: [answer: unknown, call: (c: NachtwachtClient) => Promise<unknown>][] = [
      [{ opgeslagen: 1, alBekend: 0, ontvangstbewijzen: [receipt] }, (c) => c.appendAudit([entry(1, 0, "k0"), entry(1, 1, "k1")])],
      [{ opgeslagen: 1, alBekend: 0, ontvangstbewijzen: [{ ...receipt, tenantId: 2 }] }, (c) => c.appendAudit([entry(1, 0, "k0")])],
      [{ opgeslagen: 1, alBekend: 0, ontvangstbewijzen: [{ ...receipt, hash: "" }] }, (c) => c.appendAudit([entry(1, 0, "k0")])],
      [{ opgeslagen: 1, ids: [1] }, (c) => c.recordLoginAttempts([{ account: "a", ...attempt }, { account: "b", ...attempt }])],
      [{ tenantId: 2, naam: "x", actief: true, aangemaakt: "2026-01-01T00:00:00.000Z", nieuw: true }, (c) => c.putTenant(1, { naam: "x", actief: true })],
    ];
    for (const [answer, call] of cases) {
      const s = answering(answer);
      try {
        const e = await failure(call(client({ baseUrl: s.url, maxAttempts: 1 })));
        expect({ answer, error: e.error }).toEqual({ answer, error: expect.stringContaining("onleesbaar") });
      } finally {
        s.stop();
      }
    }
  });
});

describe("retries", () => {
  test("503 with Retry-After: 0 twice, then stored: three attempts, the same bytes each time", async () => {
    const proxy = flakyProxy([{ status: 503, retryAfter: "0" }, { status: 503, retryAfter: "0" }, "pass"]);
    try {
      const retries: RetryInfo[] = [];
      const t = await newTenant();
      const r = await client({ baseUrl: proxy.url, onRetry: (i) => retries.push(i) }).appendAudit([entry(t, 0, "r-0"), entry(t, 1, "r-1")]);
      expect(r.opgeslagen).toBe(2);
      expect(retries.map((i) => [i.attempt, i.status, i.reason])).toEqual([
        [1, 503, "proxy 503"],
        [2, 503, "proxy 503"],
      ]);
      expect(proxy.seen).toHaveLength(3);
      expect(new Set(proxy.seen.map((s) => s.body)).size).toBe(1);
      for (const s of proxy.seen) expect(s.authorization).toBe(`Bearer ${APP}`);
      expect(await entriesOf(t)).toBe(2);
    } finally {
      proxy.stop();
    }
  });

  test("Retry-After is honoured: the next attempt waits at least that long", async () => {
    const proxy = flakyProxy([{ status: 503, retryAfter: "1" }, "pass"]);
    try {
      const retries: RetryInfo[] = [];
      const t = await newTenant();
      await client({ baseUrl: proxy.url, onRetry: (i) => retries.push(i) }).appendAudit([entry(t, 0, "w-0")]);
      expect(retries).toHaveLength(1);
      expect(retries[0]!.delayMs).toBeGreaterThanOrEqual(1000);
      expect(proxy.seen[1]!.at - proxy.seen[0]!.at).toBeGreaterThanOrEqual(990);
    } finally {
      proxy.stop();
    }
  });

  test("clients refused with the same Retry-After do not all return at once: each waits it plus a random part of its backoff, never less", async () => {
    const n = 8;
    const proxy = flakyProxy(Array.from({ length: n }, () => ({ status: 503, retryAfter: "1" })));
    try {
      const t = await newTenant();
      const delays = await Promise.all(
        Array.from({ length: n }, async (_, i) => {
          const retries: RetryInfo[] = [];
          await client({ baseUrl: proxy.url, baseDelayMs: 1000, maxAttempts: 2, onRetry: (x) => retries.push(x) }).appendAudit([entry(t, i, `kudde-${i}`)]);
          return retries.map((x) => x.delayMs);
        }),
      );
      expect(delays.every((d) => d.length === 1 && d[0]! >= 1000 && d[0]! <= 2000)).toBe(true);
      // Before: max(Retry-After, a backoff of at most 1000) — every client 1000 ms exactly.
      expect(new Set(delays.flat()).size).toBeGreaterThan(1);
      expect(await entriesOf(t)).toBe(n);
    } finally {
      proxy.stop();
    }
  });

  test("a Retry-After longer than maxDelayMs ends the retries at once, with retryAfterMs for the caller", async () => {
    const proxy = flakyProxy([{ status: 429, retryAfter: "120" }]);
    try {
      const e = await failure(client({ baseUrl: proxy.url, maxDelayMs: 1000 }).putTenant(1, { naam: "x", actief: true }));
      expect(e).toMatchObject({ status: 429, attempts: 1, retryAfterMs: 120_000, retryable: true });
      expect(e.message).toContain("Retry-After");
      expect(proxy.seen).toHaveLength(1);
    } finally {
      proxy.stop();
    }
  });

  test("a lost answer (502 after the service stored it): an audit batch with sleutels is retried and gets the stored receipts; one without is not retried", async () => {
    const t = await newTenant();
    const proxy = flakyProxy(["lose", "pass", "lose"]);
    try {
      const c = client({ baseUrl: proxy.url });
      const r = await c.appendAudit([entry(t, 0, "l-0"), entry(t, 1, "l-1")]);
      expect(r).toMatchObject({ opgeslagen: 0, alBekend: 2 });
      expect(r.ontvangstbewijzen.map((x) => x.seq)).toEqual([1, 2]);
      expect(await entriesOf(t)).toBe(2);
      // No sleutel on one entry: a repeat could store it twice, so the client stops and says so.
      const e = await failure(c.appendAudit([entry(t, 2, "l-2"), entry(t, 3)]));
      expect(e).toMatchObject({ status: 502, attempts: 1, retryable: true });
      expect(e.error).toContain("niet herhaald");
      expect(await entriesOf(t)).toBe(4);
      expect(proxy.seen).toHaveLength(3);
    } finally {
      proxy.stop();
    }
  });

  test("login attempts (no keys): retried after a 503 that says nothing was stored; not after a lost answer, nor after a proxy's 503 without that word", async () => {
    const proxy = flakyProxy([{ status: 503, retryAfter: "0", nothingStored: true }, "pass", "lose", "pass-then-503"]);
    try {
      const before = await count("SELECT count(*) AS n FROM login_attempts");
      const c = client({ baseUrl: proxy.url });
      expect((await c.recordLoginAttempts([{ account: "x", ip: "192.0.2.9", gelukt: false }])).opgeslagen).toBe(1);
      const e = await failure(c.recordLoginAttempts([{ account: "y", ip: "192.0.2.9", gelukt: false }]));
      expect(e).toMatchObject({ status: 502, attempts: 1, nothingStored: false });
      const proxied503 = await failure(c.recordLoginAttempts([{ account: "z", ip: "192.0.2.9", gelukt: false }]));
      expect(proxied503).toMatchObject({ status: 503, attempts: 1, nothingStored: false, retryable: true });
      expect(proxy.seen).toHaveLength(4);
      expect(await count("SELECT count(*) AS n FROM login_attempts")).toBe(before + 3);
    } finally {
      proxy.stop();
    }
  });

  test("connection refused: retried (nothing can have been stored) up to maxAttempts, then status null", async () => {
    const retries: RetryInfo[] = [];
    const c = client({ baseUrl: `http://127.0.0.1:${freePort()}`, maxAttempts: 3, onRetry: (i) => retries.push(i) });
    const e = await failure(c.recordLoginAttempts([{ account: "x", ip: "192.0.2.9", gelukt: false }]));
    expect(e).toMatchObject({ status: null, attempts: 3, retryable: true });
    expect(e.error).toContain("opgegeven na 3 pogingen");
    expect(e.cause).toBeDefined();
    expect(retries.map((i) => i.status)).toEqual([null, null]);
  });

  test("a name that does not resolve: nothing left the machine, so even login attempts (no keys) are tried again up to maxAttempts", async () => {
    const retries: RetryInfo[] = [];
    const c = client({ baseUrl: "http://nachtwacht.invalid", maxAttempts: 2, onRetry: (i) => retries.push(i) });
    const e = await failure(c.recordLoginAttempts([{ account: "x", ip: "192.0.2.9", gelukt: false }]));
    expect(e).toMatchObject({ status: null, attempts: 2, nothingStored: true });
    expect(e.error).toContain("opgegeven na 2 pogingen");
    expect(retries.map((i) => i.status)).toEqual([null]);
  });

  test("a timeout counts as no answer: retried for an idempotent call", async () => {
    // A server that accepts the connection and never answers.
    const silent = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
    try {
      const retries: RetryInfo[] = [];
      const e = await failure(client({ baseUrl: `http://127.0.0.1:${silent.port}`, timeoutMs: 100, maxAttempts: 2, onRetry: (i) => retries.push(i) }).putTenant(1, { naam: "x", actief: true }));
      expect(e).toMatchObject({ status: null, attempts: 2 });
      expect(retries).toHaveLength(1);
    } finally {
      silent.stop(true);
    }
  });

  test("nothingStored of an error built without it: a final refusal (4xx) stored nothing; 408, 429, 5xx and no answer may have", () => {
    const of = (status: number | null) => new NachtwachtError("POST", "/api/inlogpogingen", status, "x", 1).nothingStored;
    expect([400, 401, 403, 409, 413, 422].map(of)).toEqual([true, true, true, true, true, true]);
    expect([408, 429, 500, 502, 503, 504, null].map(of)).toEqual([false, false, false, false, false, false, false]);
  });

  test("keepForLater: what must stay in the outbox — retryable, and 401/403 (the secret is wrong, not the batch); not a refusal of the batch itself", () => {
    const keep = (status: number | null) => new NachtwachtError("POST", "/api/audit", status, "x", 1).keepForLater;
    expect([null, 401, 403, 408, 429, 500, 502, 503].map(keep)).toEqual([true, true, true, true, true, true, true, true]);
    // An answer below 400 reaches an error only when it was not the service's: the address is wrong, not the batch.
    expect([200, 201, 301, 308].map(keep)).toEqual([true, true, true, true]);
    expect([400, 404, 409, 413, 422].map(keep)).toEqual([false, false, false, false, false]);
  });

  test("parseRetryAfter: seconds, an HTTP date, nonsense", () => {
    const now = Date.parse("2026-07-23T12:00:00Z");
    expect(parseRetryAfter("60", now)).toBe(60_000);
    expect(parseRetryAfter("Thu, 23 Jul 2026 12:00:05 GMT", now)).toBe(5000);
    expect(parseRetryAfter("Thu, 23 Jul 2026 11:00:00 GMT", now)).toBe(0);
    expect(parseRetryAfter("soon", now)).toBeNull();
    expect(parseRetryAfter(null, now)).toBeNull();
  });
});


// The service's own limit on write-API requests at once (MAX_WRITES_IN_FLIGHT): with that
// many bodies held open, one more is a 503 that says nothing was stored, so the client
// repeats even login attempts (no keys), after the Retry-After (5 s); then it is stored once.
test("a real 503 of a full write API: login attempts (no keys) are repeated after its Retry-After and stored once", async () => {
  const inFlight = async () => {
    const text = await (await fetch(`${svc.url}/metrics`, { headers: { authorization: `Bearer ${CRON}` } })).text();
    return Number(/^nachtwacht_ingest_requests_in_flight (\d+)$/m.exec(text)?.[1]);
  };
  const held = Array.from({ length: MAX_WRITES_IN_FLIGHT }, (_, i) => {
    let c!: ReadableStreamDefaultController<Uint8Array>;
    const body = new ReadableStream<Uint8Array>({ start: (x) => void (c = x) });
    c.enqueue(new TextEncoder().encode('{"pogingen": ['));
    const answer = fetch(`${svc.url}/api/inlogpogingen`, { method: "POST", headers: { authorization: `Bearer ${APP}` }, body });
    const release = () => {
      c.enqueue(new TextEncoder().encode(`{"account": "held${i}", "ip": "192.0.2.7", "gelukt": false}]}`));
      c.close();
    };
    return { answer, release };
  });
  const before = await count("SELECT count(*) AS n FROM login_attempts");
  await until("every held request taken", async () => (await inFlight()) === MAX_WRITES_IN_FLIGHT);
  const retries: RetryInfo[] = [];
  const c = client({
    maxAttempts: 2,
    onRetry: (info) => {
      retries.push(info);
      for (const h of held) h.release();
    },
  });
  const r = await c.recordLoginAttempts([{ account: "na-de-503", ip: "192.0.2.8", gelukt: false }]);
  expect(r.opgeslagen).toBe(1);
  expect(retries.map((x) => [x.status, x.delayMs >= 5000])).toEqual([[503, true]]);
  expect(retries[0]!.reason).toContain("schrijfacties tegelijk");
  expect((await Promise.all(held.map((h) => h.answer))).map((x) => x.status)).toEqual(held.map(() => 200));
  expect(await count("SELECT count(*) AS n FROM login_attempts")).toBe(before + MAX_WRITES_IN_FLIGHT + 1);
  expect(await count("SELECT count(*) AS n FROM login_attempts WHERE account = 'na-de-503'")).toBe(1);
  expect(await inFlight()).toBe(0);
}, 30_000);

// SQLite's write lock, held by another process past the service's busy_timeout; PostgreSQL
// has no such lock (its counterpart below: a database that refuses writes).
sqliteOnly("a real 503: the service gives up on a write lock held by another process; its Retry-After (5 s) is honoured, so the client stops; later the same batch is stored once", async () => {
  const t = await newTenant();
  const batch = [entry(t, 0, "lock-0"), entry(t, 1, "lock-1")];
  const lock = await holdWriteLock(dbPath);
  let e: NachtwachtError;
  try {
    e = await failure(client({ maxDelayMs: 1000 }).appendAudit(batch));
  } finally {
    await lock.release();
  }
  expect(e).toMatchObject({ status: 503, attempts: 1, retryAfterMs: 5_000, retryable: true, nothingStored: true });
  expect(e.error).toContain("SQLITE_BUSY");
  expect(await entriesOf(t)).toBe(0);
  const r = await client().appendAudit(batch);
  expect(r.opgeslagen).toBe(2);
  expect(await entriesOf(t)).toBe(2);
}, 20_000);

// PostgreSQL's counterpart of the write lock above: the database refuses the write as a
// standby does (SQLSTATE 25006, read-only), which the service answers 503 with its
// Retry-After (60 s); the client stops, nothing is stored, and once the database takes
// writes again the same batch is stored once. The pool's open sessions cannot be made
// read-only from outside (ending them is a failure of its own), so the server's own
// read-only error comes from a trigger on audit_entries, as in test/job-wrapper.test.ts.
pgOnly("a real 503: the database refuses writes (read-only, 25006); its Retry-After (60 s) is honoured, so the client stops; later the same batch is stored once", async () => {
  const t = await newTenant();
  const batch = [entry(t, 0, "ro-0"), entry(t, 1, "ro-1")];
  const sql = data!.pg!.sql;
  await sql.unsafe(
    `CREATE FUNCTION alleen_lezen() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
       RAISE EXCEPTION 'cannot execute % in a read-only transaction', TG_OP USING ERRCODE = 'read_only_sql_transaction';
     END $$;
     CREATE TRIGGER alleen_lezen BEFORE INSERT OR UPDATE OR DELETE ON audit_entries FOR EACH STATEMENT EXECUTE FUNCTION alleen_lezen();`,
  );
  let e: NachtwachtError;
  try {
    e = await failure(client({ maxDelayMs: 1000 }).appendAudit(batch));
  } finally {
    await sql.unsafe("DROP TRIGGER alleen_lezen ON audit_entries; DROP FUNCTION alleen_lezen();");
  }
  expect(e).toMatchObject({ status: 503, attempts: 1, retryAfterMs: 60_000, retryable: true, nothingStored: true });
  expect(e.error).toContain("De database is tijdelijk niet beschikbaar (25006)");
  expect(await entriesOf(t)).toBe(0);
  const r = await client().appendAudit(batch);
  expect(r.opgeslagen).toBe(2);
  expect(await entriesOf(t)).toBe(2);
}, 20_000);

test("under Node 20: bundled for Node (no runtime dependency), the client stores and refuses as under Bun", async () => {
  const node = Bun.which("node");
  const version = node ? Bun.spawnSync([node, "--version"]).stdout.toString().trim() : "";
  // Node ≥ 20 is what the README asks for on every machine: its absence is a failure, not a skip.
  expect(Number(/^v(\d+)/.exec(version)?.[1] ?? 0)).toBeGreaterThanOrEqual(20);
  const out = join(dir, "client.mjs");
  const build = Bun.spawnSync([process.execPath, "build", "--target=node", "--format=esm", "src/client.ts", "--outfile", out], { cwd: ROOT, stderr: "pipe" });
  expect(build.exitCode).toBe(0);
  const bundled = readFileSync(out, "utf8");
  // The server's schemas were types only: nothing of elysia or typebox is in the bundle.
  expect(bundled).not.toMatch(/elysia|typebox|bun:/i);
  const t = await newTenant();
  const script = join(dir, "node-run.mjs");
  writeFileSync(
    script,
    `import { NachtwachtClient, NachtwachtError } from ${JSON.stringify(out)};
     const c = new NachtwachtClient({ baseUrl: process.env.NACHTWACHT_URL, secret: process.env.APP_SECRET, baseDelayMs: 5 });
     const r = await c.appendAudit([{ tenantId: ${t}, actor: "node", action: "node.test", subject: "", sleutel: "node-1" }]);
     let refused;
     try { await c.putAdministrators(999999, []); } catch (e) { refused = { isError: e instanceof NachtwachtError, status: e.status }; }
     console.log(JSON.stringify({ r, refused, node: process.version }));`,
  );
  const p = Bun.spawn([node!, script], { env: { PATH: process.env.PATH ?? "/usr/bin:/bin", NACHTWACHT_URL: svc.url, APP_SECRET: APP }, stdout: "pipe", stderr: "pipe" });
  const [code, stdout, stderr] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
  expect({ code, stderr }).toEqual({ code: 0, stderr: "" });
  const result = JSON.parse(stdout);
  expect(result.r.ontvangstbewijzen.map((x: { tenantId: number; seq: number }) => [x.tenantId, x.seq])).toEqual([[t, 1]]);
  expect(result.refused).toEqual({ isError: true, status: 404 });
  expect(await entriesOf(t)).toBe(1);
});
