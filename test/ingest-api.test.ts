// The write API (src/http/ingest-routes.ts, src/ingest/): who may call what, exactly
// once, all or nothing, every refusal naming what is wrong, and chains written through
// it verify after retention and anchoring.
import { afterEach, describe, expect, spyOn, test } from "bun:test";
import { authGate } from "../src/http/auth.ts";
import { OPEN_PATHS } from "../src/app.ts";
import { GENESIS_HASH, linkEntries, rowHash, type EntryRow } from "../src/audit/chain.ts";
import { JOB_NAMES, jobPath } from "../src/schedule.ts";
import { call, NOW, SECRET } from "./helpers.ts";
import { newIngestCounters } from "../src/ingest/counters.ts";
import { addTenant, DIALECT, makeEnv, type Env } from "./dialect.ts";
import { APP_SECRET, auditEntry, INGEST } from "./ingest-fixtures.ts";
import { detailsProblem, MAX_BATCH_BYTES, MAX_DETAILS_BYTES, MAX_NUMBER_SHOWN } from "../src/ingest/audit.ts";
import { positiveIntegerPattern } from "../src/jobs/schema.ts";
import { MAX_WRITES_IN_FLIGHT } from "../src/http/ingest-routes.ts";
import { NOTHING_STORED_HEADER } from "../src/client.ts";
import { warnIfTenantsFull } from "../src/server.ts";

const WRONG = "wrong-secret-0123456789abcdef0123456789abcdef";
const DAY = 24 * 3600 * 1000;

let env: Env;
afterEach(() => env?.cleanup());

async function appEnv(extra: Record<string, string> = {}): Promise<Env> {
  env = await makeEnv({ APP_SECRET, ...extra });
  return env;
}

const send = (path: string, body: unknown, o: { token?: string | null; method?: string } = {}) =>
  call(env.app, path, { token: o.token === undefined ? APP_SECRET : o.token, method: o.method ?? "POST", body: typeof body === "string" ? body : JSON.stringify(body) });

const entry = auditEntry;

/** A write-API request straight to the app, with `body` as it is (a stream the test controls). */
const post = (path: string, body: BodyInit) => env.app.handle(new Request(`http://localhost${path}`, { method: "POST", headers: { authorization: `Bearer ${APP_SECRET}` }, body }));

/**
 * A request body the test holds open: `taken` resolves when the server first asks for it
 * (highWaterMark 0: only a read asks); `release` sends `text` and ends it, `abort` breaks
 * it off as a dropped connection does.
 */
function heldBody(text: string) {
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  let pulled = false;
  let taken!: () => void;
  const body = new ReadableStream<Uint8Array>(
    {
      start: (c) => void (controller = c),
      pull: () => {
        if (!pulled) taken();
        pulled = true;
      },
    },
    { highWaterMark: 0 },
  );
  return {
    body,
    taken: new Promise<void>((resolve) => (taken = resolve)),
    pulled: () => pulled,
    release: () => {
      controller.enqueue(new TextEncoder().encode(text));
      controller.close();
    },
    abort: () => controller.error(new Error("The connection was closed.")),
  };
}

const count = async (table: string) => (await env.db.get<{ n: number }>(`SELECT count(*) AS n FROM ${table}`))!.n;
const stored = (tenantId: number) =>
  env.db.all<EntryRow>("SELECT seq, id, created_at, actor, action, subject, details, prev_hash, hash FROM audit_entries WHERE tenant_id = ? ORDER BY seq", tenantId);

describe("scope: each secret opens only its own endpoints", () => {
  test("write API: APP_SECRET 200, CRON_SECRET 403, wrong or no token 401; nothing stored when refused", async () => {
    await appEnv();
    await addTenant(env.db, "Eén");
    for (const e of INGEST) {
      for (const [token, status] of [
        [null, 401],
        [WRONG, 401],
        [SECRET, 403],
      ] as const) {
        const r = await send(e.path, e.body, { token, method: e.method });
        expect({ path: e.path, token, status: r.status }).toEqual({ path: e.path, token, status });
        expect(r.json.error).toBeString();
      }
    }
    expect((await count("audit_entries")) + (await count("login_attempts")) + (await count("administrators"))).toBe(0);
    for (const e of INGEST) expect((await send(e.path, e.body, { method: e.method })).status).toBe(200);
    expect([await count("audit_entries"), await count("login_attempts"), await count("administrators")]).toEqual([1, 1, 1]);
    expect(await env.db.get("SELECT naam FROM tenants WHERE id = 1")).toEqual({ naam: "Eén" });
  });

  test("jobs: APP_SECRET is 403 on every job and runs none; CRON_SECRET passes the gate", async () => {
    await appEnv();
    for (const job of JOB_NAMES) {
      const r = await call(env.app, jobPath(job), { token: APP_SECRET });
      expect({ job, status: r.status }).toEqual({ job, status: 403 });
      expect(r.json.error).toContain("CRON_SECRET");
      expect((await call(env.app, jobPath(job), { token: WRONG })).status).toBe(401);
    }
    expect(await count("job_runs")).toBe(0);
    const gate = authGate({ cron: SECRET, app: APP_SECRET }, OPEN_PATHS);
    const req = (path: string, token: string) => new Request(`http://x${path}`, { method: "POST", headers: { authorization: `Bearer ${token}` } });
    for (const job of JOB_NAMES) expect(gate({ request: req(jobPath(job), SECRET) })).toBeUndefined();
    for (const e of INGEST) expect(gate({ request: req(e.path, APP_SECRET) })).toBeUndefined();
    // One job really run with the cron secret, for the other side of the same gate.
    expect((await call(env.app, jobPath("backup-controle"))).status).not.toBe(403);
  });

  // A rotation without overlap refused every write made between the restart of nachtwacht
  // and the application's switch (a 401 the client does not resend): APP_SECRET_VORIG keeps
  // the old value open, for exactly what APP_SECRET opens, until the operator removes it.
  test("rotation: APP_SECRET_VORIG writes (200) beside the new APP_SECRET, is 403 on every job and runs none; once removed, the old value is 401", async () => {
    const NEW = "app-secret-nieuw-0123456789abcdef0123456789abcdef";
    await appEnv({ APP_SECRET: NEW, APP_SECRET_VORIG: APP_SECRET });
    await addTenant(env.db, "Eén");
    for (const e of INGEST) {
      expect({ path: e.path, status: (await send(e.path, e.body, { token: APP_SECRET, method: e.method })).status }).toEqual({ path: e.path, status: 200 });
      expect({ path: e.path, status: (await send(e.path, e.body, { token: NEW, method: e.method })).status }).toEqual({ path: e.path, status: 200 });
      expect((await send(e.path, e.body, { token: SECRET, method: e.method })).status).toBe(403);
      expect((await send(e.path, e.body, { token: WRONG, method: e.method })).status).toBe(401);
    }
    expect(await count("audit_entries")).toBe(2);
    for (const job of JOB_NAMES) {
      const r = await call(env.app, jobPath(job), { token: APP_SECRET });
      expect({ job, status: r.status }).toEqual({ job, status: 403 });
      expect(r.json.error).toContain("CRON_SECRET");
    }
    expect(await count("job_runs")).toBe(0);
    await env.cleanup();

    await appEnv({ APP_SECRET: NEW });
    await addTenant(env.db, "Eén");
    for (const e of INGEST) {
      const r = await send(e.path, e.body, { token: APP_SECRET, method: e.method });
      expect({ path: e.path, status: r.status }).toEqual({ path: e.path, status: 401 });
      expect((await send(e.path, e.body, { token: NEW, method: e.method })).status).toBe(200);
    }
  });

  test("without APP_SECRET the write API is closed: every token refused, nothing stored", async () => {
    env = await makeEnv();
    await addTenant(env.db);
    for (const e of INGEST) {
      expect((await send(e.path, e.body, { token: SECRET, method: e.method })).status).toBe(403);
      expect((await send(e.path, e.body, { token: APP_SECRET, method: e.method })).status).toBe(401);
    }
    expect(await count("audit_entries")).toBe(0);
  });

  test("auth is decided before the body is read: a wrong token with a malformed or oversized body is 401", async () => {
    await appEnv();
    expect((await send("/api/audit", "{not json", { token: WRONG })).status).toBe(401);
    expect((await send("/api/audit", "x".repeat(2 * 1024 * 1024), { token: SECRET })).status).toBe(403);
  });
});

describe("POST /api/audit", () => {
  test("receipts: nachtwacht computes seq and hash, per tenant, in batch order; the stored rows hash to them", async () => {
    await appEnv();
    const a = await addTenant(env.db, "A");
    const b = await addTenant(env.db, "B");
    const r1 = await send("/api/audit", { entries: [entry(a, 0), entry(b, 1), entry(a, 2)] });
    expect(r1.status).toBe(200);
    expect(r1.json.opgeslagen).toBe(3);
    expect(r1.json.alBekend).toBe(0);
    expect(r1.json.ontvangstbewijzen.map((x: any) => [x.tenantId, x.seq])).toEqual([
      [a, 1],
      [b, 1],
      [a, 2],
    ]);
    const r2 = await send("/api/audit", { entries: [entry(a, 3)] });
    expect(r2.json.ontvangstbewijzen[0].seq).toBe(3);
    const rows = await stored(a);
    expect(rows.map((r) => r.seq)).toEqual([1, 2, 3]);
    for (const r of rows) expect(rowHash(a, r)).toBe(r.hash);
    expect(rows[1]!.prev_hash).toBe(rows[0]!.hash);
    expect([r1.json.ontvangstbewijzen[0], r1.json.ontvangstbewijzen[2], r2.json.ontvangstbewijzen[0]]).toEqual(
      rows.map((r) => ({ tenantId: a, seq: r.seq, id: r.id, hash: r.hash })),
    );
    // details stored as canonical JSON (keys sorted), tijdstip defaults to the clock.
    expect(rows[0]!.details).toBe('{"i":0,"nested":{"a":1,"b":2}}');
    expect(rows[0]!.created_at).toBe(NOW.toISOString());
  });

  test("tijdstip: any offset is stored as UTC with milliseconds; more than a minute ahead is refused", async () => {
    await appEnv();
    const a = await addTenant(env.db);
    expect((await send("/api/audit", { entries: [entry(a, 0, { tijdstip: "2026-07-23T14:00:00+02:00" })] })).status).toBe(200);
    expect((await stored(a))[0]!.created_at).toBe("2026-07-23T12:00:00.000Z");
    const ahead = new Date(NOW.getTime() + 61_000).toISOString();
    const r = await send("/api/audit", { entries: [entry(a, 1), entry(a, 2, { tijdstip: ahead })] });
    expect(r.status).toBe(400);
    expect(r.json.error).toContain("entries[1].tijdstip");
    expect(await count("audit_entries")).toBe(1);
    const justAhead = new Date(NOW.getTime() + 60_000).toISOString();
    expect((await send("/api/audit", { entries: [entry(a, 3, { tijdstip: justAhead })] })).status).toBe(200);
  });

  test("a retried batch with sleutels returns the same receipts and stores nothing twice", async () => {
    await appEnv();
    const a = await addTenant(env.db);
    const batch = { entries: [entry(a, 0, { sleutel: "k0" }), entry(a, 1, { sleutel: "k1" }), entry(a, 2)] };
    const first = await send("/api/audit", batch);
    expect(first.status).toBe(200);
    env.setNow(new Date(NOW.getTime() + 5000));
    const retry = await send("/api/audit", { entries: batch.entries.slice(0, 2) });
    expect(retry.status).toBe(200);
    expect(retry.json).toEqual({ opgeslagen: 0, alBekend: 2, ontvangstbewijzen: first.json.ontvangstbewijzen.slice(0, 2) });
    expect(await count("audit_entries")).toBe(3);
    // Half old, half new: the old ones answered, the new one appended after them.
    const mixed = await send("/api/audit", { entries: [entry(a, 1, { sleutel: "k1" }), entry(a, 4, { sleutel: "k4" })] });
    expect(mixed.json.opgeslagen).toBe(1);
    expect(mixed.json.ontvangstbewijzen[0]).toEqual(first.json.ontvangstbewijzen[1]);
    expect(mixed.json.ontvangstbewijzen[1].seq).toBe(4);
    // The same sleutel twice in one batch: one entry, two equal receipts.
    const twice = await send("/api/audit", { entries: [entry(a, 5, { sleutel: "k5" }), entry(a, 5, { sleutel: "k5" })] });
    expect(twice.json.opgeslagen).toBe(1);
    expect(twice.json.ontvangstbewijzen[0]).toEqual(twice.json.ontvangstbewijzen[1]);
    // A sleutel is per tenant: another tenant may use it.
    const b = await addTenant(env.db, "B");
    expect((await send("/api/audit", { entries: [entry(b, 0, { sleutel: "k0" })] })).json.opgeslagen).toBe(1);
    expect(await count("audit_entries")).toBe(6);
  });

  test("the same sleutel with other content is 409 naming it, and nothing of that batch is stored", async () => {
    await appEnv();
    const a = await addTenant(env.db);
    await send("/api/audit", { entries: [entry(a, 0, { sleutel: "factuur-17" })] });
    for (const changed of [{ subject: "dossier/9" }, { details: { i: 1 } }, { tijdstip: "2026-07-23T11:00:00.000Z" }, { actor: "iemand" }]) {
      const r = await send("/api/audit", { entries: [entry(a, 5), entry(a, 0, { sleutel: "factuur-17", ...changed })] });
      expect(r.status).toBe(409);
      expect(r.json.error).toContain('"factuur-17"');
      expect(r.json.error).toContain("entries[1]");
    }
    // Within one batch too.
    const r = await send("/api/audit", { entries: [entry(a, 7, { sleutel: "x" }), entry(a, 8, { sleutel: "x" })] });
    expect(r.status).toBe(409);
    expect(await count("audit_entries")).toBe(1);
    expect(await count("audit_entries WHERE sleutel IS NOT NULL")).toBe(1);
  });

  test("batches sent at once are answered as one after the other would be; on SQLite grouped into shared transactions, each batch in its own savepoint", async () => {
    const counters = newIngestCounters();
    env = await makeEnv({ APP_SECRET }, { counters });
    const a = await addTenant(env.db, "A");
    const b = await addTenant(env.db, "B");
    const batches = [
      { entries: [entry(a, 0, { sleutel: "s1" }), entry(b, 0)] },
      { entries: [entry(a, 0, { sleutel: "s1" })] }, // a retry of the first entry
      { entries: [entry(a, 5, { sleutel: "s1" })] }, // other content under that sleutel
      { entries: [entry(a, 1), entry(4242, 0)] }, // an unknown tenant
      { entries: [entry(a, 2), entry(b, 2)] },
    ];
    const r = await Promise.all(batches.map((batch) => send("/api/audit", batch)));
    const statuses = r.map((x) => x.status);
    if (DIALECT === "sqlite") {
      // In arrival order, in one COMMIT: the refused ones rolled back to their savepoints alone.
      expect(statuses).toEqual([200, 200, 409, 422, 200]);
      // Through the grouped writer, which counts the three stored (how many share a transaction depends on the measured cost; test/group-commit.test.ts).
      expect(counters.sqlite.calls).toBe(3);
      expect(r[1]!.json.ontvangstbewijzen).toEqual([r[0]!.json.ontvangstbewijzen[0]]);
      expect(r[4]!.json.ontvangstbewijzen.map((x: { seq: number }) => x.seq)).toEqual([2, 2]);
    } else {
      // Side by side, in whatever order the server took them: the first content under s1 stands.
      expect([statuses.slice(0, 3).join(), statuses[3], statuses[4]]).toEqual([expect.stringMatching(/^(200,200,409|409,409,200)$/), 422, 200]);
      expect(counters.sqlite).toEqual({ groups: 0, calls: 0 });
    }
    // Every receipt names a stored row with that hash, each stored once; the chains link.
    const answered = r.filter((x) => x.status === 200).flatMap((x) => x.json.ontvangstbewijzen as { tenantId: number; seq: number; hash: string }[]);
    const stored_ = [...(await stored(a)), ...(await stored(b))];
    expect(stored_.length).toBe(r.reduce((n, x) => n + (x.json.opgeslagen ?? 0), 0));
    for (const receipt of answered) expect(stored_.filter((e) => e.hash === receipt.hash).length).toBe(1);
    for (const t of [a, b]) {
      let prev = GENESIS_HASH;
      for (const e of await stored(t)) {
        expect(e.prev_hash).toBe(prev);
        expect(rowHash(t, e)).toBe(e.hash);
        prev = e.hash;
      }
    }
  });

  test("an unknown tenant is 422 naming the field and the id; nothing stored", async () => {
    await appEnv();
    const a = await addTenant(env.db);
    const r = await send("/api/audit", { entries: [entry(a, 0), entry(a, 1), entry(4242, 2)] });
    expect(r.status).toBe(422);
    expect(r.json.error).toContain("entries[2].tenantId");
    expect(r.json.error).toContain("4242");
    expect(await count("audit_entries")).toBe(0);
  });

  test("each invalid field is 400 naming the entry's index and the field; nothing stored", async () => {
    await appEnv();
    const a = await addTenant(env.db);
    const cases: [Record<string, unknown>, string][] = [
      [{ tenantId: "1" }, "entries[1].tenantId"],
      [{ tenantId: 0 }, "entries[1].tenantId"],
      [{ tenantId: 1.5 }, "entries[1].tenantId"],
      [{ actor: "" }, "entries[1].actor"],
      [{ actor: "x".repeat(201) }, "entries[1].actor"],
      [{ action: 7 }, "entries[1].action"],
      [{ subject: null }, "entries[1].subject"],
      [{ subject: "x".repeat(1001) }, "entries[1].subject"],
      [{ details: [1, 2] }, "entries[1].details"],
      [{ details: "tekst" }, "entries[1].details"],
      [{ details: { big: "x".repeat(70 * 1024) } }, "entries[1].details"],
      [{ details: JSON.parse("[".repeat(0) + '{"a":'.repeat(40) + "1" + "}".repeat(40)) }, "entries[1].details"],
      [{ tijdstip: "gisteren" }, "entries[1].tijdstip"],
      [{ tijdstip: "2026-07-23 12:00" }, "entries[1].tijdstip"],
      [{ tijdstip: "2026-02-30T12:00:00Z" }, "entries[1].tijdstip"],
      [{ tijdstip: "2026-07-22T24:00:00Z" }, "entries[1].tijdstip"],
      // in UTC the year -1, which the chain cannot store: 400, not a 500 and an alarm
      [{ tijdstip: "0000-01-01T00:00:00+01:00" }, "entries[1].tijdstip"],
      [{ sleutel: "" }, "entries[1].sleutel"],
      [{ sleutel: "x".repeat(201) }, "entries[1].sleutel"],
      [{ detials: {} }, "entries[1].detials"],
      // half a character: hashed as sent, but stored as U+FFFD, it would never verify again
      [{ actor: "x\ud800y" }, "entries[1].actor"],
      [{ subject: "\udc00" }, "entries[1].subject"],
      [{ sleutel: "k\ud801" }, "entries[1].sleutel"],
    ];
    for (const [change, field] of cases) {
      const r = await send("/api/audit", { entries: [entry(a, 0), { ...entry(a, 1), ...change }] });
      expect({ change: Object.keys(change)[0], status: r.status }).toEqual({ change: Object.keys(change)[0], status: 400 });
      expect(r.json.error).toContain(field);
    }
    // numbers JSON.parse cannot keep as sent (so the body is written out by hand)
    for (const [details, why] of [
      ['{"id":12345678901234567891}', "geheel getal buiten ±2^53"],
      ['{"a":{"big":1e400}}', "getal buiten het bereik van JSON-getallen"],
    ]) {
      const r = await send("/api/audit", `{"entries":[{"tenantId":${a},"actor":"x","action":"a","subject":"","details":${details}}]}`);
      expect(r.status).toBe(400);
      expect(r.json.error).toContain(`Veld entries[0].details bevat een ${why}`);
    }
    const missing = await send("/api/audit", { entries: [entry(a, 0), { tenantId: a, actor: "x", subject: "" }] });
    expect(missing.json.error).toBe("Veld entries[1].action ontbreekt (verplicht: een tekst (geldige Unicode, zonder NUL-teken U+0000 of losse surrogaathelft) van 1 tot 200 tekens).");
    for (const body of [{}, { entries: [] }, { entries: {} }, [entry(a, 0)], "null"]) {
      const r = await send("/api/audit", body);
      expect(r.status).toBe(400);
    }
    expect(await count("audit_entries")).toBe(0);
  });

  test("details: a number a double cannot keep as sent is 400 naming it, also under a used sleutel; numbers kept exactly pass in any notation", async () => {
    await appEnv();
    const a = await addTenant(env.db);
    const body = (details: string, sleutel = "k") => `{"entries":[{"tenantId":${a},"actor":"x","action":"a","subject":"","details":${details},"sleutel":"${sleutel}"}]}`;
    const kept = await send("/api/audit", body(`{"a":[1.0,1e2,-0,0.10,0.30000000000000004,5e-324,123.456e-5,1E+2,100e-2,-2.5e-3,1.5e-300],"b":{"c":0.1},"z":0e-${"9".repeat(20)},"n":[1e1,1.5e-7,2.2250738585072014e-308,123456789012345e-20]}`));
    expect(kept.status).toBe(200);
    expect((await stored(a))[0]!.details).toBe('{"a":[1,100,0,0.1,0.30000000000000004,5e-324,0.00123456,100,1,-0.0025,1.5e-300],"b":{"c":0.1},"n":[10,1.5e-7,2.2250738585072014e-308,0.00000123456789012345],"z":0}');
    const tiny = `0.${"0".repeat(399)}1`;
    // An exponent of 100,000 digits: refused as inexact without being parsed as a number.
    const vast = `1e-${"9".repeat(100_000)}`;
    for (const [details, source] of [
      [`{"a":${vast}}`, vast],
      // a subnormal: fewer digits than sent survive (5e-324 is the double)
      ['{"a":4.9e-324}', "4.9e-324"],
      ['{"a":1e-400}', "1e-400"],
      ['{"a":-2e-324}', "-2e-324"],
      ['{"x":[1,{"y":[0.1000000000000000000001]}]}', "0.1000000000000000000001"],
      ['{"a":1.00000000000000000001}', "1.00000000000000000001"],
      // whitespace before the value, and after `[` and `,` (parseAuditBody's look for such numbers)
      [`{"a" :\n\t ${tiny}}`, tiny],
      ['{"a":[ -0.12345678901234567891]}', "-0.12345678901234567891"],
      ['{"a":[1, 9.999999999999999999e-1]}', "9.999999999999999999e-1"],
      // the same sleutel with other digits than the stored 0.1: not the same content
      ['{"a":[1.0,1e2,-0,0.10,0.30000000000000004,5e-324,123.456e-5,1E+2,100e-2,-2.5e-3,1.5e-300],"b":{"c":0.10000000000000000001}}', "0.10000000000000000001"],
    ] as const) {
      const r = await send("/api/audit", body(details));
      expect({ details, status: r.status, error: r.json.error }).toEqual({
        details,
        status: 400,
        error: `Veld entries[0].details bevat het getal ${source.length > MAX_NUMBER_SHOWN ? `${source.slice(0, MAX_NUMBER_SHOWN)}…` : source}, dat niet exact kan worden bewaard (een JSON-getal wordt een double: ongeveer 17 cijfers, niet kleiner dan 5e-324); stuur het als tekst.`,
      });
    }
    expect(await count("audit_entries")).toBe(1);
  });

  test("a tenantId a double cannot keep as sent (1.00000000000000000001 would be tenant 1) is 400 naming the field, as in details; in any exact notation it passes", async () => {
    await appEnv();
    const a = await addTenant(env.db);
    expect(a).toBe(1);
    const one = (tenantId: string, details = "{}") => `{"tenantId":${tenantId},"actor":"x","action":"a","subject":"","details":${details}}`;
    const body = (...entries: string[]) => `{"entries":[${entries.join(",")}]}`;
    const because = "dat niet exact kan worden bewaard (een JSON-getal wordt een double: ongeveer 17 cijfers, niet kleiner dan 5e-324).";
    for (const source of ["1.00000000000000000001", "0.99999999999999999999", "1.0000000000000000000000000000000000000000001", "1e0000000000000000000000"]) {
      const r = await send("/api/audit", body(one(`${a}`), one(source)));
      const shown = source.length > MAX_NUMBER_SHOWN ? `${source.slice(0, MAX_NUMBER_SHOWN)}…` : source;
      expect({ source, status: r.status, error: r.json.error }).toEqual(
        source.startsWith("1e")
          ? { source, status: 200, error: undefined } // 1e0…0 is exactly 1: only the notation differs
          : { source, status: 400, error: `Veld entries[1].tenantId is het getal ${shown}, ${because}` },
      );
    }
    // Beside an inexact number in details, each names its own field: the entry's first.
    const both = await send("/api/audit", body(one("1.00000000000000000001", '{"a":1e-400}')));
    expect([both.status, both.json.error]).toEqual([400, `Veld entries[0].tenantId is het getal 1.00000000000000000001, ${because}`]);
    for (const exact of ["1.0", "1e0", "10e-1", "0.1e1"]) expect((await send("/api/audit", body(one(exact)))).status).toBe(200);
    expect(await count("audit_entries")).toBe(6);
  });

  test("a name twice in one object (JSON.parse would keep the last, another reader the first) is 400 naming it, nothing stored; the same name in different objects, or inside a text, passes", async () => {
    await appEnv();
    const a = await addTenant(env.db);
    const b = await addTenant(env.db, "Beta");
    const one = (fields: string) => `{"tenantId":${a},"actor":"x","action":"a","subject":"",${fields}}`;
    for (const [text, name] of [
      [`{"entries":[${one('"details":{"bedrag":100,"bedrag":999}')}]}`, "bedrag"],
      [`{"entries":[${one('"details":{}')}],"entries":[${one('"details":{}')}]}`, "entries"],
      [`{"entries":[{"tenantId":${a},"actor":"x","action":"a","subject":"","details":{},"tenantId":${b}}]}`, "tenantId"],
      // spelt differently, the same name once decoded; and white space before the colon
      [`{"entries":[${one('"details":{"ab":1,"a\\u0062" :2}')}]}`, "ab"],
      [`{"entries":[${one('"details":{"x":[{"y":1,"y":1}]}')}]}`, "y"],
    ] as const) {
      const r = await send("/api/audit", text);
      expect({ text, status: r.status, error: r.json.error }).toEqual({
        text,
        status: 400,
        error: `Ongeldige body: de naam "${name}" staat twee keer in hetzelfde object; welke waarde geldt, verschilt per JSON-lezer: stuur hem één keer.`,
      });
    }
    expect(await count("audit_entries")).toBe(0);
    // A name again in another object, and a text that holds `":` (the quick count sees more names than there are).
    const fine = await send("/api/audit", `{"entries":[${one('"details":{"a":{"a":1},"b":[{"a":1},{"a":2}],"s":"{\\"a\\":1,\\"a\\":2}"}')}]}`);
    expect(fine.status).toBe(200);
    expect((await stored(a))[0]!.details).toBe('{"a":{"a":1},"b":[{"a":1},{"a":2}],"s":"{\\"a\\":1,\\"a\\":2}"}');
    // The login attempts' and the jobs' bodies are read by the same reader.
    const login = await send("/api/inlogpogingen", `{"account":"x","account":"y","ip":"10.0.0.1","gelukt":false}`);
    expect([login.status, login.json.error]).toEqual([400, 'Ongeldige body: de naam "account" staat twee keer in hetzelfde object; welke waarde geldt, verschilt per JSON-lezer: stuur hem één keer.']);
    expect(await count("login_attempts")).toBe(0);
  });

  test("details with more values than 64 KiB holds are refused by count, before they are copied, with the size refusal; the count refuses nothing that fits", async () => {
    await appEnv();
    const a = await addTenant(env.db);
    const limit = MAX_DETAILS_BYTES / 2;
    // 340,000 empty objects, a body under 1 MiB: refused by the count (without it they were
    // all walked, and copied by canonicalJson, before the size check refused them)
    const many = { a: Array.from({ length: 340_000 }, () => ({})) };
    expect(detailsProblem(many)).toBe("is groter dan 64 KiB");
    const r = await send("/api/audit", `{"entries":[{"tenantId":${a},"actor":"x","action":"a","subject":"","details":${JSON.stringify(many)}}]}`);
    expect([r.status, r.json.error]).toEqual([400, "Veld entries[0].details is groter dan 64 KiB."]);
    // The count refuses nothing that fits: `limit` − 2 values ({"a":[0,…]}, 65,535 bytes)
    // are stored; `limit` values (65,539 bytes) pass the count and are refused by size;
    // one value more is refused by the count.
    const fits = { a: Array.from({ length: limit - 4 }, () => 0) };
    expect((await send("/api/audit", { entries: [{ ...entry(a, 0), details: fits }] })).status).toBe(200);
    const edge = { a: Array.from({ length: limit - 2 }, () => 0) };
    expect(detailsProblem(edge)).toBeNull();
    const sized = await send("/api/audit", { entries: [{ ...entry(a, 1), details: edge }] });
    expect([sized.status, sized.json.error]).toEqual([400, "Veld entries[0].details is groter dan 64 KiB."]);
    expect(detailsProblem({ a: [...edge.a, 0] })).toBe("is groter dan 64 KiB");
    expect(await count("audit_entries")).toBe(1);
  });

  test("text with whole characters beyond the BMP passes and verifies; a lone surrogate is refused by the library too", async () => {
    await appEnv();
    const a = await addTenant(env.db);
    const r = await send("/api/audit", { entries: [{ ...entry(a, 0), actor: "an😀na", subject: "dossier/𝄞", details: { lone: "\ud800" } }] });
    expect(r.status).toBe(200);
    const [row] = await stored(a);
    expect(row!.actor).toBe("an😀na");
    // details is canonical JSON text: a lone surrogate inside it is an escape, and stays one
    expect(row!.details).toBe('{"lone":"\\ud800"}');
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
    expect(() => linkEntries([{ tenantId: a, createdAt: "2026-01-01T00:00:00.000Z", actor: "x\ud800", action: "a", subject: "", details: "{}" }], () => ({ seq: 0, hash: GENESIS_HASH }), () => 1)).toThrow(
      "actor holds a NUL character (U+0000) or a lone UTF-16 surrogate",
    );
  });

  test("details: a key __proto__ is kept like any other, and counts as content for the sleutel", async () => {
    await appEnv();
    const a = await addTenant(env.db);
    const body = (x: string) => `{"entries":[{"tenantId":${a},"actor":"anna","action":"a","subject":"s","details":{"__proto__":{"x":"${x}"},"y":1},"sleutel":"k1"}]}`;
    const r = await send("/api/audit", body("evil"));
    expect(r.status).toBe(200);
    expect((await stored(a))[0]!.details).toBe('{"__proto__":{"x":"evil"},"y":1}');
    const other = await send("/api/audit", body("other"));
    expect(other.status).toBe(409);
    expect((await send("/api/audit", body("evil"))).json.alBekend).toBe(1);
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
  });

  test("a body that fails its schema is answered by field, whatever its size and depth: no echo of the value, no runaway message", async () => {
    await appEnv();
    const a = await addTenant(env.db);
    // 20,000 nested arrays in details, and a required field missing: Elysia's own error
    // would render all of it, indented, into its message (800 MB); here one line.
    const deep = `{"entries":[{"tenantId":${a},"action":"a","subject":"s","details":{"a":${"[".repeat(20_000)}${"]".repeat(20_000)}}}]}`;
    const r = await send("/api/audit", deep);
    expect(r.status).toBe(400);
    expect(r.json.error).toStartWith("Veld entries[0].actor ontbreekt");
    // As deep, valid otherwise, with a number that takes the parse with the exact-number
    // reviver (whose recursion runs out of stack first): the depth is named, not "no JSON".
    const deeper = `{"entries":[{"tenantId":${a},"actor":"x","action":"a","subject":"s","details":{"a":${"[".repeat(20_000)}1e1${"]".repeat(20_000)}}}]}`;
    const d = await send("/api/audit", deeper);
    expect([d.status, d.json.error]).toEqual([400, "Veld entries[0].details is dieper genest dan 32 niveaus."]);
    // the name of an unknown field is repeated only in part
    const long = "v".repeat(500_000);
    const u = await send("/api/audit", `{"entries":[{"tenantId":${a},"actor":"x","action":"a","subject":"s","${long}":1}]}`);
    expect(u.status).toBe(400);
    expect(u.json.error).toBe(`Onbekend veld entries[0].${"v".repeat(100)}….`);
    expect(await count("audit_entries")).toBe(0);
  });

  test("limits: 1,000 entries pass, 1,001 are 400; a body above 1 MiB is 413, also when chunked", async () => {
    await appEnv();
    const a = await addTenant(env.db);
    const many = (n: number) => ({ entries: Array.from({ length: n }, (_, i) => entry(a, i)) });
    const r = await send("/api/audit", many(1001));
    expect(r.status).toBe(400);
    expect(r.json.error).toContain("entries");
    expect(await count("audit_entries")).toBe(0);
    const ok = await send("/api/audit", many(1000));
    expect(ok.status).toBe(200);
    expect(ok.json.ontvangstbewijzen.at(-1).seq).toBe(1000);
    const big = JSON.stringify({ entries: [entry(a, 0, { details: { x: "y".repeat(1024 * 1024) } })] });
    expect((await send("/api/audit", big)).status).toBe(413);
    const chunked = new ReadableStream({
      start(c) {
        for (let i = 0; i < 20; i++) c.enqueue(new TextEncoder().encode("x".repeat(64 * 1024)));
        c.close();
      },
    });
    const res = await env.app.handle(new Request("http://localhost/api/audit", { method: "POST", headers: { authorization: `Bearer ${APP_SECRET}` }, body: chunked }));
    expect(res.status).toBe(413);
    expect(await count("audit_entries")).toBe(1000);
  });

  test("over a socket, a body a little over 1 MiB meets the gate first (401, 403) and then the route's own 413 {error}, declared or chunked", async () => {
    await appEnv();
    const server = env.app.listen({ port: 0, hostname: "127.0.0.1" });
    try {
      const url = `http://127.0.0.1:${server.server!.port}/api/audit`;
      const big = "x".repeat(MAX_BATCH_BYTES + 1);
      const post = (token: string | null, body: BodyInit) => fetch(url, { method: "POST", headers: token ? { authorization: `Bearer ${token}` } : {}, body });
      for (const [token, status] of [[null, 401], [WRONG, 401], [SECRET, 403], [APP_SECRET, 413]] as const) {
        const r = await post(token, big);
        expect({ token, status: r.status }).toEqual({ token, status });
        expect(((await r.json()) as { error: string }).error).toBeString();
      }
      const declared = await post(APP_SECRET, big);
      expect(((await declared.json()) as { error: string }).error).toBe("Body te groot: /api/audit accepteert hoogstens 1 MiB.");
      const chunked = new ReadableStream({
        start(c) {
          for (let i = 0; i < 17; i++) c.enqueue(new TextEncoder().encode("x".repeat(64 * 1024)));
          c.close();
        },
      });
      const streamed = await post(APP_SECRET, chunked);
      expect(streamed.status).toBe(413);
      expect(((await streamed.json()) as { error: string }).error).toStartWith("Body te groot");
      expect(await count("audit_entries")).toBe(0);
    } finally {
      await server.stop(true);
    }
  });

  test("a client that goes away in the middle of its body: 400, nothing stored, no alarm", async () => {
    await appEnv();
    const a = await addTenant(env.db);
    const text = JSON.stringify({ entries: [entry(a, 0)] });
    const broken = new ReadableStream({
      start(c) {
        c.enqueue(new TextEncoder().encode(text.slice(0, 12)));
        c.error(new Error("The connection was closed."));
      },
    });
    const res = await env.app.handle(new Request("http://localhost/api/audit", { method: "POST", headers: { authorization: `Bearer ${APP_SECRET}` }, body: broken }));
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toStartWith("Body onvolledig");
    expect(await count("audit_entries")).toBe(0);
    expect(env.alarms.raised).toEqual([]);
  });

  test("at most MAX_WRITES_IN_FLIGHT requests at once: one more is 503 with Retry-After 5 and the nothing-stored header, its body unread; released, they are stored and the next passes", async () => {
    const counters = newIngestCounters();
    env = await makeEnv({ APP_SECRET }, { counters });
    const a = await addTenant(env.db);
    const held = Array.from({ length: MAX_WRITES_IN_FLIGHT }, (_, i) => heldBody(JSON.stringify({ entries: [entry(a, i, { sleutel: `h${i}` })] })));
    const answers = held.map((h) => post("/api/audit", h.body));
    // Each has passed the gate and the cap once the server asks for its body.
    await Promise.all(held.map((h) => h.taken));
    expect(counters.inFlight).toBe(MAX_WRITES_IN_FLIGHT);
    // One more, on every endpoint: refused before its body is read.
    for (const e of INGEST) {
      const extra = heldBody(JSON.stringify(e.body));
      const res = await env.app.handle(new Request(`http://localhost${e.path.replace("/1", `/${a}`)}`, { method: e.method, headers: { authorization: `Bearer ${APP_SECRET}` }, body: extra.body }));
      expect({ path: e.path, status: res.status, retryAfter: res.headers.get("retry-after"), stored: res.headers.get(NOTHING_STORED_HEADER) }).toEqual({ path: e.path, status: 503, retryAfter: "5", stored: "nee" });
      expect(((await res.json()) as { error: string }).error).toBe(`De service verwerkt al ${MAX_WRITES_IN_FLIGHT} schrijfacties tegelijk; niets is opgeslagen. Probeer het na Retry-After opnieuw, met dezelfde sleutels.`);
      expect(extra.pulled()).toBe(false);
    }
    expect(counters.rejected["503"]).toBe(INGEST.length);
    expect(await count("audit_entries")).toBe(0);
    expect(await count("login_attempts")).toBe(0);
    for (const h of held) h.release();
    expect((await Promise.all(answers)).map((r) => r.status)).toEqual(held.map(() => 200));
    expect(counters.inFlight).toBe(0);
    expect(await count("audit_entries")).toBe(MAX_WRITES_IN_FLIGHT);
    expect((await send("/api/audit", { entries: [entry(a, 999)] })).status).toBe(200);
    expect(counters.inFlight).toBe(0);
  });

  test("a request's place is given back on every way out: refused (400, 413, 422) or the client gone mid-body (a 503 of the database: test/ingest-lock.test.ts)", async () => {
    const counters = newIngestCounters();
    env = await makeEnv({ APP_SECRET }, { counters });
    const a = await addTenant(env.db);
    const gone = heldBody("");
    const answer = post("/api/audit", gone.body);
    await gone.taken;
    expect(counters.inFlight).toBe(1);
    gone.abort();
    expect((await answer).status).toBe(400);
    expect(counters.inFlight).toBe(0);
    expect((await send("/api/audit", "{")).status).toBe(400);
    expect((await send("/api/audit", { entries: [entry(4242, 0)] })).status).toBe(422);
    expect((await send("/api/audit", JSON.stringify({ entries: [entry(a, 0, { details: { x: "y".repeat(1024 * 1024) } })] }))).status).toBe(413);
    expect(counters.inFlight).toBe(0);
    // Every place given back: a full set fits again.
    const held = Array.from({ length: MAX_WRITES_IN_FLIGHT }, (_, i) => heldBody(JSON.stringify({ entries: [entry(a, i)] })));
    const answers = held.map((h) => post("/api/audit", h.body));
    await Promise.all(held.map((h) => h.taken));
    expect(counters.inFlight).toBe(MAX_WRITES_IN_FLIGHT);
    for (const h of held) h.release();
    expect(new Set((await Promise.all(answers)).map((r) => r.status))).toEqual(new Set([200]));
    expect(counters.inFlight).toBe(0);
  });

  test("a keyed entry just inside the retention period, sent again after it passed the limit, gets its receipt while it is still stored", async () => {
    await appEnv({ AUDIT_RETENTIE_DAGEN: "30" });
    const a = await addTenant(env.db, "Eén");
    const tijdstip = new Date(NOW.getTime() - 30 * DAY + 60_000).toISOString();
    const body = { entries: [entry(a, 0, { tijdstip, sleutel: "evt-1" })] };
    const first = await send("/api/audit", body);
    expect(first.status).toBe(200);
    env.setNow(new Date(NOW.getTime() + 120_000));
    const retry = await send("/api/audit", body);
    expect({ status: retry.status, body: retry.json, stored: await count("audit_entries WHERE sleutel = 'evt-1'") }).toEqual({
      status: 200,
      body: { opgeslagen: 0, alBekend: 1, ontvangstbewijzen: first.json.ontvangstbewijzen },
      stored: 1,
    });
    // Not stored yet, the same age is refused: in batch order, nothing of the batch stored.
    const other = await send("/api/audit", { entries: [entry(a, 1, { sleutel: "evt-2" }), entry(a, 2, { tijdstip, sleutel: "evt-3" }), ...body.entries] });
    expect([other.status, other.json.error]).toEqual([
      400,
      "Veld entries[1].tijdstip ligt verder terug dan de bewaartermijn van 30 dagen (AUDIT_RETENTIE_DAGEN): audit-retentie zou de entry meteen verwijderen.",
    ]);
    expect(await count("audit_entries")).toBe(1);
  });

  test("chains written through the API verify after audit-retentie and audit-anker", async () => {
    await appEnv({ AUDIT_RETENTIE_DAGEN: "30" });
    const a = await addTenant(env.db, "A");
    const b = await addTenant(env.db, "B");
    // 60 entries a day apart, B interleaved: the oldest 30 sent 30 days ago (within the
    // retention period then), the others now; the first 30 are past retention now.
    const entries = Array.from({ length: 60 }, (_, i) => entry(i % 3 === 0 ? b : a, i, { tijdstip: new Date(NOW.getTime() - (60 - i) * DAY).toISOString(), sleutel: `s${i}` }));
    env.setNow(new Date(NOW.getTime() - 30 * DAY));
    expect((await send("/api/audit", { entries: entries.slice(0, 30) })).status).toBe(200);
    env.setNow(NOW);
    expect((await send("/api/audit", { entries: entries.slice(30) })).status).toBe(200);
    // Now the first batch is past retention. Sent again (a retry after a lost answer)
    // while its entries are still stored, it gets their receipts; once retention deleted
    // them and their sleutels, it is refused rather than stored a second time.
    const early = await send("/api/audit", { entries: entries.slice(0, 30) });
    expect([early.status, early.json.opgeslagen, early.json.alBekend]).toEqual([200, 0, 30]);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    const retentie = await call(env.app, "/api/cron/audit-retentie");
    expect(retentie.status).toBe(200);
    expect(retentie.json.verwijderd).toBeGreaterThan(25);
    const late = await send("/api/audit", { entries: entries.slice(0, 30) });
    expect(late.status).toBe(400);
    expect(late.json.error).toContain("Veld entries[0].tijdstip ligt verder terug dan de bewaartermijn van 30 dagen");
    // The keys went with their entries, the others stayed; new ones append after the retention point.
    expect(await count("audit_entries WHERE sleutel IS NOT NULL")).toBe(60 - retentie.json.verwijderd);
    expect((await send("/api/audit", { entries: [entry(a, 100, { sleutel: "na" })] })).status).toBe(200);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    const v = await call(env.app, "/api/cron/audit-verificatie");
    expect(v.status).toBe(200);
    expect(v.json.aantalGebroken).toBe(0);
    expect(v.json.resultaten.map((r: { tenantId: number; intact: boolean }) => [r.tenantId, r.intact])).toEqual([
      [a, true],
      [b, true],
    ]);
    expect(v.json.ankerbestand.intact).toBe(true);
  });
});

describe("someone who can change the database's schema", () => {
  test("a trigger or rule that silently drops a row: the batch is a 500 with an alarm, nothing stored, no receipt for what is not there", async () => {
    await appEnv();
    const a = await addTenant(env.db);
    expect((await send("/api/audit", { entries: [entry(a, 0)] })).status).toBe(200);
    if (DIALECT === "sqlite") {
      await env.db.run("CREATE TRIGGER weg BEFORE INSERT ON audit_entries WHEN NEW.actor = 'mallory@example.nl' BEGIN SELECT RAISE(IGNORE); END");
    } else {
      // (A rule DO INSTEAD NOTHING makes PostgreSQL refuse the INSERT … RETURNING outright; a trigger that returns NULL skips the row quietly.)
      await env.db.run("CREATE FUNCTION weg() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF NEW.actor = 'mallory@example.nl' THEN RETURN NULL; END IF; RETURN NEW; END $$");
      await env.db.run("CREATE TRIGGER weg BEFORE INSERT ON audit_entries FOR EACH ROW EXECUTE FUNCTION weg()");
    }
    const r = await send("/api/audit", { entries: [entry(a, 1), { ...entry(a, 2), actor: "mallory@example.nl" }] });
    expect(r.status).toBe(500);
    expect(r.json.ontvangstbewijzen).toBeUndefined();
    expect(await count("audit_entries")).toBe(1);
    const alarm = env.alarms.raised.find((x) => x.type === "internal-error");
    expect(JSON.stringify(alarm?.context)).toContain("1 van 2 entries opgeslagen zoals berekend");
  });
});

describe("POST /api/inlogpogingen", () => {
  test("a tenantId a double cannot keep as sent is 400 naming the field, storing nothing; in any exact notation it passes", async () => {
    await appEnv();
    const a = await addTenant(env.db);
    const body = (tenantId: string) => `{"pogingen":[{"account":"a","ip":"192.0.2.1","gelukt":false},{"account":"b","ip":"192.0.2.2","gelukt":false,"tenantId":${tenantId}}]}`;
    const r = await send("/api/inlogpogingen", body(`${a}.00000000000000000001`));
    expect([r.status, r.json.error]).toEqual([
      400,
      `Veld pogingen[1].tenantId is het getal ${a}.00000000000000000001, dat niet exact kan worden bewaard (een JSON-getal wordt een double: ongeveer 17 cijfers, niet kleiner dan 5e-324).`,
    ]);
    expect(await count("login_attempts")).toBe(0);
    expect((await send("/api/inlogpogingen", body(`${a}.0e0`))).status).toBe(200);
    expect(await count("login_attempts")).toBe(2);
  });

  test("stores a batch; an unknown tenant is 422 and an invalid field 400, storing nothing", async () => {
    await appEnv();
    const a = await addTenant(env.db);
    const ok = await send("/api/inlogpogingen", {
      pogingen: [
        { account: "a@example.nl", ip: "192.0.2.1", gelukt: false, reden: "wachtwoord", tenantId: a, tijdstip: "2026-07-23T11:59:00Z" },
        { account: "b@example.nl", ip: "2001:db8::1", gelukt: true },
      ],
    });
    expect(ok.status).toBe(200);
    expect(ok.json.opgeslagen).toBe(2);
    expect(await env.db.all("SELECT tijdstip, account, ip, gelukt, reden, tenant_id FROM login_attempts ORDER BY id")).toEqual([
      { tijdstip: "2026-07-23T11:59:00.000Z", account: "a@example.nl", ip: "192.0.2.1", gelukt: 0, reden: "wachtwoord", tenant_id: a },
      { tijdstip: NOW.toISOString(), account: "b@example.nl", ip: "2001:db8::1", gelukt: 1, reden: null, tenant_id: null },
    ]);
    const unknown = await send("/api/inlogpogingen", { pogingen: [{ account: "c", ip: "192.0.2.3", gelukt: false }, { account: "d", ip: "192.0.2.4", gelukt: false, tenantId: 99 }] });
    expect(unknown.status).toBe(422);
    expect(unknown.json.error).toContain("pogingen[1].tenantId");
    const changes: [Record<string, unknown>, string][] = [
      [{ ip: "192.0.2.1; drop" }, "pogingen[0].ip"],
      [{ gelukt: "nee" }, "pogingen[0].gelukt"],
      [{ account: "" }, "pogingen[0].account"],
      [{ tijdstip: new Date(NOW.getTime() + 120_000).toISOString() }, "pogingen[0].tijdstip"],
      [{ tijdstip: "0000-01-01T00:30:00+00:45" }, "pogingen[0].tijdstip"],
    ];
    for (const [change, field] of changes) {
      const r = await send("/api/inlogpogingen", { pogingen: [{ account: "c", ip: "192.0.2.3", gelukt: false, ...change }] });
      expect(r.status).toBe(400);
      expect(r.json.error).toContain(field);
    }
    expect(await count("login_attempts")).toBe(2);
  });
});

describe("text fields count characters, as the OpenAPI document does, and name what they expect", () => {
  test("150 emoji fit a field of at most 200 characters (300 UTF-16 units); 201 characters do not", async () => {
    await appEnv();
    const ok = await send("/api/tenants/7", { naam: "😀".repeat(150), actief: true }, { method: "PUT" });
    expect(ok.status).toBe(201);
    expect((await env.db.get<{ naam: string }>("SELECT naam FROM tenants WHERE id = 7"))!.naam).toBe("😀".repeat(150));
    const over = await send("/api/tenants/8", { naam: "😀".repeat(201), actief: true }, { method: "PUT" });
    expect(over.status).toBe(400);
    expect(over.json.error).toBe("Veld naam moet een tekst (geldige Unicode, zonder NUL-teken U+0000 of losse surrogaathelft) van 1 tot 200 tekens zijn.");
    // the same rule in the document a client is built from: characters, in the pattern
    const doc = (await call(env.app, "/docs/json", { method: "GET", token: null })).json;
    const naam = doc.paths["/api/tenants/{id}"].put.requestBody.content["application/json"].schema.properties.naam;
    expect(new RegExp(naam.pattern).test("😀".repeat(200))).toBe(true);
    expect(new RegExp(naam.pattern, "u").test("😀".repeat(200))).toBe(true);
    expect(new RegExp(naam.pattern).test("😀".repeat(201))).toBe(false);
    expect(naam.maxLength).toBeUndefined();
    expect(await count("tenants")).toBe(1);
  });

  test("an e-mail address with half a character is 400, not stored as another address (and added again on every PUT)", async () => {
    await appEnv();
    await send("/api/tenants/3", { naam: "Drie", actief: true }, { method: "PUT" });
    const body = '{"beheerders":[{"naam":"Ans","email":"ans\\ud800@example.nl","actief":true}]}';
    for (let i = 0; i < 2; i++) {
      const r = await send("/api/tenants/3/beheerders", body, { method: "PUT" });
      expect(r.status).toBe(400);
      expect(r.json.error).toBe("Veld beheerders[0].email moet een e-mailadres (naam@domein) van 3 tot 320 tekens zijn.");
    }
    expect(await count("administrators")).toBe(0);
    // a whole character outside the BMP is an address like any other
    const whole = await send("/api/tenants/3/beheerders", { beheerders: [{ naam: "Ans", email: "😀@example.nl", actief: true }] }, { method: "PUT" });
    expect(whole.status).toBe(200);
  });

  test("the messages say what a field expects: an address, an IP address; null where a field may only be left out", async () => {
    await appEnv();
    const a = await addTenant(env.db);
    const ip = await send("/api/inlogpogingen", { pogingen: [{ account: "ans", ip: "x", gelukt: false }] });
    expect(ip.json.error).toBe("Veld pogingen[0].ip moet een IPv4- of IPv6-adres van 2 tot 45 tekens zijn.");
    const sleutel = await send("/api/audit", { entries: [{ ...entry(a, 0), sleutel: null }] });
    expect(sleutel.status).toBe(400);
    expect(sleutel.json.error).toBe("Veld entries[0].sleutel mag niet null zijn (verwacht: een tekst (geldige Unicode, zonder NUL-teken U+0000 of losse surrogaathelft) van 1 tot 200 tekens).");
    expect((await count("audit_entries")) + (await count("login_attempts"))).toBe(0);
  });
});

describe("PUT /api/tenants/{id} and /beheerders", () => {
  test("creates (201) and updates (200) a tenant; bad ids are 400", async () => {
    await appEnv();
    const c = await send("/api/tenants/7", { naam: "Zeven", actief: true }, { method: "PUT" });
    expect(c.status).toBe(201);
    expect(c.json).toEqual({ tenantId: 7, naam: "Zeven", actief: true, aangemaakt: NOW.toISOString(), nieuw: true });
    const u = await send("/api/tenants/7", { naam: "Zeven BV", actief: false }, { method: "PUT" });
    expect(u.status).toBe(200);
    expect(u.json).toEqual({ tenantId: 7, naam: "Zeven BV", actief: false, aangemaakt: NOW.toISOString(), nieuw: false });
    for (const id of ["0", "-1", "abc", "1.5", "99999999999"]) expect((await send(`/api/tenants/${id}`, { naam: "x", actief: true }, { method: "PUT" })).status).toBe(400);
    expect((await send("/api/tenants/8", { naam: "", actief: true }, { method: "PUT" })).json.error).toContain("naam");
    expect(await count("tenants")).toBe(1);
  });

  test("{id} is a tenant id in digits, 1 to 2147483647 as in a body, checked before the body is read and documented so", async () => {
    await appEnv();
    const message = "Ongeldig pad: {id} moet een tenant-id: een geheel getal van 1 tot 2147483647, in cijfers zijn.";
    for (const id of ["0", "-1", "+5", "05", "1e3", "0x10", "%205", "5%20", "1.5", "2147483648", "9999999999", "99999999999"]) {
      for (const path of [`/api/tenants/${id}`, `/api/tenants/${id}/beheerders`]) {
        // not JSON at all: the path is refused before the body is read
        const r = await send(path, "{niet json", { method: "PUT" });
        expect({ path, status: r.status, error: r.json.error }).toEqual({ path, status: 400, error: message });
      }
    }
    for (const id of [1, 9, 10, 999_999_999, 1_000_000_000, 2_000_000_000, 2_147_483_639, 2_147_483_647]) {
      expect({ id, status: (await send(`/api/tenants/${id}`, { naam: `T${id}`, actief: true }, { method: "PUT" })).status }).toEqual({ id, status: 201 });
    }
    expect(await env.db.get("SELECT max(id) AS id FROM tenants")).toEqual({ id: 2_147_483_647 });
    expect((await send("/api/tenants/2147483647/beheerders", { beheerders: [] }, { method: "PUT" })).status).toBe(200);
    // the document a client is built from says the same, with the same pattern
    const doc = (await call(env.app, "/docs/json", { method: "GET", token: null })).json;
    for (const path of ["/api/tenants/{id}", "/api/tenants/{id}/beheerders"]) {
      const [param] = doc.paths[path].put.parameters;
      expect(param).toMatchObject({ name: "id", in: "path", required: true, schema: { type: "string" } });
      const pattern = new RegExp(param.schema.pattern);
      for (const id of ["1", "42", "2147483647"]) expect(pattern.test(id)).toBe(true);
      for (const id of ["0", "01", "2147483648", "-1", "1e3"]) expect(pattern.test(id)).toBe(false);
    }
  });

  test("the path pattern takes exactly the integers 1 … max, for every length and edge", () => {
    for (const max of [1, 9, 10, 19, 20, 99, 100, 101, 909, 1000, 2_147_483_647]) {
      const pattern = new RegExp(positiveIntegerPattern(max, "x"));
      const edges = new Set<number>([0, 1, 2, max - 1, max, max + 1, max * 10, Math.floor(max / 10)]);
      for (let p = 1; p <= max * 10; p *= 10) for (const d of [-1, 0, 1]) edges.add(p + d);
      let seed = max;
      for (let i = 0; i < 2000; i++) {
        seed = (seed * 1103515245 + 12345) % 2 ** 31;
        edges.add(seed % (max * 10 + 2));
      }
      for (const n of edges) if (n >= 0) expect({ max, n, ok: pattern.test(String(n)) }).toEqual({ max, n, ok: n >= 1 && n <= max });
      expect(pattern.test(`0${max}`)).toBe(false);
    }
  });

  test("no tenant is created past TENANTS_MAX: 422 naming it, nothing created; existing tenants are still updated", async () => {
    await appEnv({ TENANTS_MAX: "2" });
    for (const id of [1, 2]) expect((await send(`/api/tenants/${id}`, { naam: `T${id}`, actief: true }, { method: "PUT" })).status).toBe(201);
    const refused = await send("/api/tenants/3", { naam: "T3", actief: true }, { method: "PUT" });
    expect([refused.status, refused.json]).toEqual([422, { error: "Tenant 3 is niet aangemaakt: er zijn al 2 tenants, en TENANTS_MAX is 2. Bestaande tenants bijwerken kan wel." }]);
    expect((await send("/api/tenants/2", { naam: "T2 BV", actief: false }, { method: "PUT" })).status).toBe(200);
    expect(await env.db.all("SELECT id, naam FROM tenants ORDER BY id")).toEqual([
      { id: 1, naam: "T1" },
      { id: 2, naam: "T2 BV" },
    ]);
  });

  test("an installation holding more tenants than TENANTS_MAX (a lowered default): the 422 names the real count and the maximum; existing tenants still update", async () => {
    await appEnv({ TENANTS_MAX: "5" });
    const ids: number[] = [];
    for (let i = 1; i <= 8; i++) ids.push(await addTenant(env.db, `T${i}`));
    const refused = await send("/api/tenants/100", { naam: "Nieuw", actief: true }, { method: "PUT" });
    expect([refused.status, refused.json]).toEqual([422, { error: "Tenant 100 is niet aangemaakt: er zijn al 8 tenants, en TENANTS_MAX is 5. Bestaande tenants bijwerken kan wel." }]);
    expect((await send(`/api/tenants/${ids[7]}`, { naam: "T8 BV", actief: true }, { method: "PUT" })).status).toBe(200);
    expect(await env.db.get("SELECT count(*) AS n FROM tenants")).toEqual({ n: 8 });
  });

  test("at start one warning when there are TENANTS_MAX tenants or more, with the count and the maximum; none below", async () => {
    await appEnv();
    for (let i = 1; i <= 3; i++) await addTenant(env.db, `T${i}`);
    const lines: string[] = [];
    const stderr = spyOn(process.stderr, "write").mockImplementation(((chunk: unknown) => {
      lines.push(String(chunk));
      return true;
    }) as typeof process.stderr.write);
    try {
      expect(await warnIfTenantsFull(env.store, 4)).toBe(false);
      expect(lines).toEqual([]);
      expect(await warnIfTenantsFull(env.store, 3)).toBe(true);
      expect(await warnIfTenantsFull(env.store, 2)).toBe(true);
    } finally {
      stderr.mockRestore();
    }
    expect(lines.map((l) => JSON.parse(l)).map(({ level, message, tenants, tenantsMax }) => ({ level, reached: message.startsWith("TENANTS_MAX is reached: the write API refuses every new tenant (422)"), tenants, tenantsMax }))).toEqual([
      { level: "warn", reached: true, tenants: 3, tenantsMax: 3 },
      { level: "warn", reached: true, tenants: 3, tenantsMax: 2 },
    ]);
  });

  test("the administrator list is replaced by e-mail: updated, added, the missing removed (set inactive while a weekly report's delivery record names them); the weekly report uses it", async () => {
    await appEnv();
    await send("/api/tenants/3", { naam: "Drie", actief: true }, { method: "PUT" });
    const first = await send("/api/tenants/3/beheerders", { beheerders: [{ naam: "Ans", email: "ans@example.nl", actief: true }, { naam: "Bob", email: "bob@example.nl", actief: true }] }, { method: "PUT" });
    expect(first.status).toBe(200);
    const ids = Object.fromEntries(first.json.beheerders.map((b: { email: string; id: number }) => [b.email, b.id]));
    const second = await send("/api/tenants/3/beheerders", { beheerders: [{ naam: "Ans de Vries", email: "ANS@example.nl", actief: true }, { naam: "Cees", email: "cees@example.nl", actief: true }] }, { method: "PUT" });
    // Bob, never sent a report, is gone: no address is kept once the application dropped it.
    expect(second.json.beheerders).toEqual([
      { id: ids["ans@example.nl"], naam: "Ans de Vries", email: "ANS@example.nl", actief: true },
      { id: expect.any(Number), naam: "Cees", email: "cees@example.nl", actief: true },
    ]);
    expect(await env.db.get("SELECT count(*) AS n FROM administrators WHERE email = 'bob@example.nl'")).toEqual({ n: 0 });
    const dup = await send("/api/tenants/3/beheerders", { beheerders: [{ naam: "A", email: "x@example.nl", actief: true }, { naam: "B", email: "X@example.nl", actief: true }] }, { method: "PUT" });
    expect(dup.status).toBe(400);
    expect(dup.json.error).toContain("beheerders[1].email");
    const bad = await send("/api/tenants/3/beheerders", { beheerders: [{ naam: "A", email: "geen-adres", actief: true }] }, { method: "PUT" });
    expect(bad.status).toBe(400);
    expect(bad.json.error).toContain("beheerders[0].email");
    // One field, one address: a list or a group in it would reach other inboxes than the one listed.
    // Nor a control character (C0, DEL, C1): the mail library drops them, so "a\u001b@x.nl" went to a@x.nl, past the one-address-once check.
    for (const email of ["root,evil@x.nl", "Zuiderhaven-beheer:evil@x.nl;", '"a b"@x.nl', "a(b)@x.nl", "a\u001b@x.nl", "a@x\u007f.nl", "a@x.n\u0085l", "\u0001a@x.nl"]) {
      const r = await send("/api/tenants/3/beheerders", { beheerders: [{ naam: "A", email, actief: true }] }, { method: "PUT" });
      expect({ email, status: r.status }).toEqual({ email, status: 400 });
      expect(r.json.error).toContain("beheerders[0].email");
    }
    const unknown = await send("/api/tenants/4/beheerders", { beheerders: [] }, { method: "PUT" });
    expect(unknown.status).toBe(404);
    // Rows written directly that differ only in case: one is kept up to date, the other set inactive.
    await env.db.run("INSERT INTO administrators (tenant_id, naam, email, actief) VALUES (3, 'Dubbel', 'ans@EXAMPLE.nl', ?)", true);
    const again = await send("/api/tenants/3/beheerders", { beheerders: [{ naam: "Ans", email: "ans@example.nl", actief: true }] }, { method: "PUT" });
    expect(again.json.beheerders).toEqual([{ id: ids["ans@example.nl"], naam: "Ans", email: "ans@example.nl", actief: true }]);
    await send("/api/tenants/3/beheerders", { beheerders: [{ naam: "Ans de Vries", email: "ANS@example.nl", actief: true }, { naam: "Cees", email: "cees@example.nl", actief: true }] }, { method: "PUT" });
    const week = await call(env.app, "/api/cron/weekrapport");
    expect(week.status).toBe(200);
    expect(env.mailer.sent.map((m) => m.to).sort()).toEqual(["ANS@example.nl", "cees@example.nl"]);
    // Both now have this week's delivery record: an empty list sets them inactive (the records name them) …
    const empty = await send("/api/tenants/3/beheerders", { beheerders: [] }, { method: "PUT" });
    expect(empty.json.beheerders.map((b: { email: string; actief: boolean }) => [b.email, b.actief])).toEqual([
      ["ANS@example.nl", false],
      ["cees@example.nl", false],
    ]);
    // … and once the records are pruned (after 13 weeks), the next list removes them for good.
    await env.db.run("DELETE FROM weekly_report_deliveries");
    const later = await send("/api/tenants/3/beheerders", { beheerders: [{ naam: "Dirk", email: "dirk@example.nl", actief: true }] }, { method: "PUT" });
    expect(later.json.beheerders.map((b: { email: string }) => b.email)).toEqual(["dirk@example.nl"]);
    expect(await env.db.get("SELECT count(*) AS n FROM administrators WHERE tenant_id = 3")).toEqual({ n: 1 });
  });
});
