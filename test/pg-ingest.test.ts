// The write API on PostgreSQL (src/pg/ingest.ts) against a real server (test/pg.ts):
// the scenarios of test/ingest-api.test.ts — who may write, receipts, retries stored
// once, 409 / 422 / 400 / 404 storing nothing, tenants and administrators, login
// attempts — with the same answers as on SQLite, chains that verify, and what SQLite's
// single writer gave for free: concurrent requests (in this process and from two REAL
// processes) with the same sleutels store each entry once, give every caller the same
// receipt, and never fork a chain.
import { afterEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { ORPHAN_CHAINS_SQL, rowHash, type EntryRow } from "../src/audit/chain.ts";
import { driverError } from "../src/http/errors.ts";
import { CHAIN_LOCK, verifyTenantChainPg } from "../src/pg/chain.ts";
import { pgPool } from "../src/pg/store.ts";
import { spawnFixture, type FixtureProcess } from "./binary.ts";
import { call, makePgTestEnv, makeTestEnv, NOW, SECRET, until, type PgTestEnv, type TestEnv } from "./helpers.ts";
import { APP_SECRET, auditEntry as entry, INGEST } from "./ingest-fixtures.ts";
import { useTestCluster } from "./pg.ts";

setDefaultTimeout(120_000);

const WRONG = "wrong-secret-0123456789abcdef0123456789abcdef";

const cluster = useTestCluster();
let env: PgTestEnv | undefined;
let sqliteEnv: TestEnv | undefined;
afterEach(async () => {
  await env?.cleanup();
  await sqliteEnv?.cleanup();
  env = sqliteEnv = undefined;
});

async function pgEnv(): Promise<PgTestEnv> {
  env = await makePgTestEnv(cluster, { APP_SECRET });
  return env;
}

type App = { handle(r: Request): Promise<Response> };
const sendTo = (app: App, path: string, body: unknown, o: { token?: string | null; method?: string } = {}) =>
  call(app, path, { token: o.token === undefined ? APP_SECRET : o.token, method: o.method ?? "POST", body: typeof body === "string" ? body : JSON.stringify(body) });
const send = (path: string, body: unknown, o: { token?: string | null; method?: string } = {}) => sendTo(env!.app, path, body, o);

/** Creates tenant `id` through the API. */
async function tenant(id: number, naam = `Tenant ${id}`): Promise<number> {
  expect((await send(`/api/tenants/${id}`, { naam, actief: true }, { method: "PUT" })).status).toBe(201);
  return id;
}

const count = async (table: string) => Number(((await env!.store.sql.unsafe(`SELECT count(*) AS n FROM ${table}`)) as { n: string }[])[0]!.n);
const stored = async (tenantId: number): Promise<EntryRow[]> =>
  ((await env!.store.sql`SELECT seq, id, created_at, actor, action, subject, details, prev_hash, hash FROM audit_entries WHERE tenant_id = ${tenantId} ORDER BY seq`) as EntryRow[]).map((r) => ({
    ...r,
    seq: Number(r.seq),
    id: Number(r.id),
  }));
const verified = (tenantId: number) => verifyTenantChainPg(env!.store.sql, tenantId, { checkpoint: null, verifiers: [] });

describe("the write API on PostgreSQL", () => {
  test("APP_SECRET writes on every endpoint; CRON_SECRET 403, wrong or no token 401, and nothing stored when refused", async () => {
    await pgEnv();
    await tenant(1, "Eerst");
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
    expect(await env!.store.sql`SELECT naam FROM tenants WHERE id = 1`).toEqual([{ naam: "Eén" }]);
  });

  test("receipts: seq and hash per tenant in batch order; the stored rows hash to them, link up and verify", async () => {
    await pgEnv();
    const a = await tenant(1, "A");
    const b = await tenant(2, "B");
    const r1 = await send("/api/audit", { entries: [entry(a, 0), entry(b, 1), entry(a, 2)] });
    expect(r1.status).toBe(200);
    expect([r1.json.opgeslagen, r1.json.alBekend]).toEqual([3, 0]);
    expect(r1.json.ontvangstbewijzen.map((x: { tenantId: number; seq: number }) => [x.tenantId, x.seq])).toEqual([
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
    expect([r1.json.ontvangstbewijzen[0], r1.json.ontvangstbewijzen[2], r2.json.ontvangstbewijzen[0]]).toEqual(rows.map((r) => ({ tenantId: a, seq: r.seq, id: r.id, hash: r.hash })));
    expect(rows[0]!.details).toBe('{"i":0,"nested":{"a":1,"b":2}}');
    expect(rows[0]!.created_at).toBe(NOW.toISOString());
    expect(await verified(a)).toEqual({ intact: true, aantalEntries: 3 });
    expect(await verified(b)).toEqual({ intact: true, aantalEntries: 1 });
  });

  test("a retried batch with sleutels gets the same receipts and stores nothing twice; a sleutel is per tenant", async () => {
    await pgEnv();
    const a = await tenant(1);
    const batch = { entries: [entry(a, 0, { sleutel: "k0" }), entry(a, 1, { sleutel: "k1" }), entry(a, 2)] };
    const first = await send("/api/audit", batch);
    expect(first.status).toBe(200);
    env!.setNow(new Date(NOW.getTime() + 5000));
    const retry = await send("/api/audit", { entries: batch.entries.slice(0, 2) });
    expect(retry.status).toBe(200);
    expect(retry.json).toEqual({ opgeslagen: 0, alBekend: 2, ontvangstbewijzen: first.json.ontvangstbewijzen.slice(0, 2) });
    expect(await count("audit_entries")).toBe(3);
    const mixed = await send("/api/audit", { entries: [entry(a, 1, { sleutel: "k1" }), entry(a, 4, { sleutel: "k4" })] });
    expect(mixed.json.opgeslagen).toBe(1);
    expect(mixed.json.ontvangstbewijzen[0]).toEqual(first.json.ontvangstbewijzen[1]);
    expect(mixed.json.ontvangstbewijzen[1].seq).toBe(4);
    const twice = await send("/api/audit", { entries: [entry(a, 5, { sleutel: "k5" }), entry(a, 5, { sleutel: "k5" })] });
    expect([twice.json.opgeslagen, twice.json.alBekend]).toEqual([1, 1]);
    expect(twice.json.ontvangstbewijzen[0]).toEqual(twice.json.ontvangstbewijzen[1]);
    const b = await tenant(2, "B");
    expect((await send("/api/audit", { entries: [entry(b, 0, { sleutel: "k0" })] })).json.opgeslagen).toBe(1);
    expect([await count("audit_entries"), await count("audit_entries WHERE sleutel IS NOT NULL")]).toEqual([6, 5]);
    // Sleutels with the characters an array literal or a pair key could trip over.
    const odd = ['a,b', 'q"x', "{}", "back\\slash", "NULL", "1:2", " "];
    const sent = await send("/api/audit", { entries: odd.map((s, i) => entry(a, 10 + i, { sleutel: s })) });
    expect(sent.json.opgeslagen).toBe(odd.length);
    const again = await send("/api/audit", { entries: odd.map((s, i) => entry(a, 10 + i, { sleutel: s })) });
    expect(again.json).toEqual({ opgeslagen: 0, alBekend: odd.length, ontvangstbewijzen: sent.json.ontvangstbewijzen });
    expect(await verified(a)).toEqual({ intact: true, aantalEntries: 5 + odd.length });
  });

  test("the same sleutel with other content is 409 naming it and the entry, and nothing of that batch is stored", async () => {
    await pgEnv();
    const a = await tenant(1);
    await send("/api/audit", { entries: [entry(a, 0, { sleutel: "factuur-17" })] });
    for (const changed of [{ subject: "dossier/9" }, { details: { i: 1 } }, { tijdstip: "2026-07-23T11:00:00.000Z" }, { actor: "iemand" }]) {
      const r = await send("/api/audit", { entries: [entry(a, 5), entry(a, 0, { sleutel: "factuur-17", ...changed })] });
      expect(r.status).toBe(409);
      expect(r.json.error).toBe('Sleutel "factuur-17" (entries[1]) is voor tenant 1 al gebruikt voor een andere entry; niets van deze batch is opgeslagen.');
    }
    const within = await send("/api/audit", { entries: [entry(a, 7, { sleutel: "x" }), entry(a, 8, { sleutel: "x" })] });
    expect(within.status).toBe(409);
    expect(within.json.error).toContain("entries[1]");
    expect([await count("audit_entries"), await count("audit_entries WHERE sleutel IS NOT NULL")]).toEqual([1, 1]);
  });

  test("an unknown tenant is 422 naming the field and the id; nothing stored", async () => {
    await pgEnv();
    const a = await tenant(1);
    const r = await send("/api/audit", { entries: [entry(a, 0), entry(a, 1), entry(4242, 2)] });
    expect(r.status).toBe(422);
    expect(r.json.error).toBe("Onbekende tenant in entries[2].tenantId: 4242 bestaat niet (PUT /api/tenants/4242 maakt hem aan).");
    expect(await count("audit_entries")).toBe(0);
  });

  test("an invalid field is 400 naming the entry and the field; nothing stored", async () => {
    await pgEnv();
    const a = await tenant(1);
    const cases: [Record<string, unknown>, string][] = [
      [{ tenantId: "1" }, "entries[1].tenantId"],
      [{ actor: "" }, "entries[1].actor"],
      [{ details: [1, 2] }, "entries[1].details"],
      [{ details: { big: "x".repeat(70 * 1024) } }, "entries[1].details"],
      [{ details: JSON.parse('{"a":'.repeat(40) + "1" + "}".repeat(40)) }, "entries[1].details"],
      [{ tijdstip: "2026-02-30T12:00:00Z" }, "entries[1].tijdstip"],
      [{ tijdstip: new Date(NOW.getTime() + 61_000).toISOString() }, "entries[1].tijdstip"],
      [{ sleutel: "" }, "entries[1].sleutel"],
      [{ detials: {} }, "entries[1].detials"],
    ];
    for (const [change, field] of cases) {
      const r = await send("/api/audit", { entries: [entry(a, 0), { ...entry(a, 1), ...change }] });
      expect({ change: Object.keys(change)[0], status: r.status }).toEqual({ change: Object.keys(change)[0], status: 400 });
      expect(r.json.error).toContain(field);
    }
    expect(await count("audit_entries")).toBe(0);
  });

  test("login attempts: a batch stored with its ids in order; an unknown tenant is 422 and an invalid field 400, storing nothing", async () => {
    await pgEnv();
    const a = await tenant(1);
    const ok = await send("/api/inlogpogingen", {
      pogingen: [
        { account: "a@example.nl", ip: "192.0.2.1", gelukt: false, reden: "wachtwoord", tenantId: a, tijdstip: "2026-07-23T11:59:00Z" },
        { account: "b@example.nl", ip: "2001:db8::1", gelukt: true },
      ],
    });
    expect(ok.status).toBe(200);
    expect(ok.json.opgeslagen).toBe(2);
    const rows = await env!.store.sql`SELECT id, tijdstip, account, ip, gelukt, reden, tenant_id FROM login_attempts ORDER BY id`;
    expect(rows.map((r: { id: string }) => Number(r.id))).toEqual(ok.json.ids);
    expect(ok.json.ids[1]).toBeGreaterThan(ok.json.ids[0]);
    expect(rows.map(({ id, ...r }: { id: string }) => r)).toEqual([
      { tijdstip: "2026-07-23T11:59:00.000Z", account: "a@example.nl", ip: "192.0.2.1", gelukt: false, reden: "wachtwoord", tenant_id: a },
      { tijdstip: NOW.toISOString(), account: "b@example.nl", ip: "2001:db8::1", gelukt: true, reden: null, tenant_id: null },
    ]);
    const unknown = await send("/api/inlogpogingen", { pogingen: [{ account: "c", ip: "192.0.2.3", gelukt: false }, { account: "d", ip: "192.0.2.4", gelukt: false, tenantId: 99 }] });
    expect(unknown.status).toBe(422);
    expect(unknown.json.error).toContain("pogingen[1].tenantId");
    const future = await send("/api/inlogpogingen", { pogingen: [{ account: "c", ip: "192.0.2.3", gelukt: false, tijdstip: new Date(NOW.getTime() + 120_000).toISOString() }] });
    expect(future.status).toBe(400);
    expect(future.json.error).toContain("pogingen[0].tijdstip");
    expect(await count("login_attempts")).toBe(2);
  });

  test("a tenant created with its id moves the id sequence past it, as SQLite's AUTOINCREMENT: a tenant inserted later without an id (the host application) gets the next one, never a collision", async () => {
    sqliteEnv = makeTestEnv({ APP_SECRET });
    await pgEnv();
    for (const id of [50, 7]) {
      expect((await sendTo(sqliteEnv.app, `/api/tenants/${id}`, { naam: `T${id}`, actief: true }, { method: "PUT" })).status).toBe(201);
      expect((await send(`/api/tenants/${id}`, { naam: `T${id}`, actief: true }, { method: "PUT" })).status).toBe(201);
    }
    const onSqlite = sqliteEnv.store.sqlite.query("INSERT INTO tenants (naam, actief, aangemaakt) VALUES ('zonder id', 1, '2026-01-01T00:00:00.000Z') RETURNING id").get() as { id: number };
    const [onPg] = (await env!.store.sql`INSERT INTO tenants (naam, actief, aangemaakt) VALUES ('zonder id', true, '2026-01-01T00:00:00.000Z') RETURNING id`) as { id: number }[];
    expect(onSqlite.id).toBe(51);
    expect(onPg!.id).toBe(onSqlite.id);
  });

  test("tenants are created (201) and updated (200); administrators replaced by e-mail; unknown tenant 404, duplicate address 400", async () => {
    await pgEnv();
    const c = await send("/api/tenants/7", { naam: "Zeven", actief: true }, { method: "PUT" });
    expect([c.status, c.json]).toEqual([201, { tenantId: 7, naam: "Zeven", actief: true, aangemaakt: NOW.toISOString(), nieuw: true }]);
    env!.setNow(new Date(NOW.getTime() + 60_000));
    const u = await send("/api/tenants/7", { naam: "Zeven BV", actief: false }, { method: "PUT" });
    expect([u.status, u.json]).toEqual([200, { tenantId: 7, naam: "Zeven BV", actief: false, aangemaakt: NOW.toISOString(), nieuw: false }]);
    const first = await send("/api/tenants/7/beheerders", { beheerders: [{ naam: "Ans", email: "ans@example.nl", actief: true }, { naam: "Bob", email: "bob@example.nl", actief: true }] }, { method: "PUT" });
    expect(first.status).toBe(200);
    const ids = Object.fromEntries(first.json.beheerders.map((b: { email: string; id: number }) => [b.email, b.id]));
    const second = await send("/api/tenants/7/beheerders", { beheerders: [{ naam: "Ans de Vries", email: "ANS@example.nl", actief: true }, { naam: "Cees", email: "cees@example.nl", actief: true }] }, { method: "PUT" });
    expect(second.json).toEqual({
      tenantId: 7,
      beheerders: [
        { id: ids["ans@example.nl"], naam: "Ans de Vries", email: "ANS@example.nl", actief: true },
        { id: expect.any(Number), naam: "Cees", email: "cees@example.nl", actief: true },
      ],
    });
    const dup = await send("/api/tenants/7/beheerders", { beheerders: [{ naam: "A", email: "x@example.nl", actief: true }, { naam: "B", email: "X@example.nl", actief: true }] }, { method: "PUT" });
    expect([dup.status, dup.json.error]).toEqual([400, "Veld beheerders[1].email komt al voor in beheerders[0]."]);
    const unknown = await send("/api/tenants/4/beheerders", { beheerders: [] }, { method: "PUT" });
    expect([unknown.status, unknown.json.error]).toEqual([404, "Onbekende tenant 4: maak hem eerst aan met PUT /api/tenants/4."]);
    // Rows written directly that differ only in case: one is kept up to date, the other removed (as Bob and Cees, no report sent to them).
    await env!.store.sql`INSERT INTO administrators (tenant_id, naam, email, actief) VALUES (7, 'Dubbel', 'ans@EXAMPLE.nl', true)`;
    const again = await send("/api/tenants/7/beheerders", { beheerders: [{ naam: "Ans", email: "ans@example.nl", actief: true }] }, { method: "PUT" });
    expect(again.json.beheerders).toEqual([{ id: ids["ans@example.nl"], naam: "Ans", email: "ans@example.nl", actief: true }]);
    expect([await count("tenants"), await count("administrators")]).toEqual([1, 1]);
  });

  test("a PostgreSQL error mid-batch answers as SQLite's unexpected errors do (500, alarm) and rolls back what the batch appended", async () => {
    // The same failure on both stores: the entry with sleutel "boem" cannot be stored,
    // after the batch's chain locks and heads were taken (and on SQLite, which inserts
    // row by row, after its first entry was appended), in the same transaction.
    sqliteEnv = makeTestEnv({ APP_SECRET });
    sqliteEnv.store.sqlite.run("INSERT INTO tenants (id, naam, actief, aangemaakt) VALUES (1, 'A', 1, '2026-01-01T00:00:00.000Z')");
    sqliteEnv.store.sqlite.run("CREATE TRIGGER boem BEFORE INSERT ON audit_entries WHEN NEW.sleutel = 'boem' BEGIN SELECT RAISE(ABORT, 'boem'); END");
    await pgEnv();
    await tenant(1);
    await env!.store.sql`ALTER TABLE audit_entries ADD CONSTRAINT boem CHECK (sleutel <> 'boem')`;
    const batch = { entries: [entry(1, 0), entry(1, 1, { sleutel: "boem" })] };
    const onSqlite = await sendTo(sqliteEnv.app, "/api/audit", batch);
    const onPg = await send("/api/audit", batch);
    expect([onPg.status, onPg.json]).toEqual([onSqlite.status, onSqlite.json]);
    expect([onPg.status, onPg.json]).toEqual([500, { error: "Interne fout; de fout is gemeld." }]);
    expect(env!.alarms.raised.map((a) => a.type)).toEqual(["internal-error"]);
    expect(await count("audit_entries")).toBe(0);
    // The chain goes on from genesis: nothing of the failed batch is in it.
    expect((await send("/api/audit", { entries: [entry(1, 2)] })).json.ontvangstbewijzen[0].seq).toBe(1);
  });

  test("a NUL character (U+0000), which PostgreSQL's text cannot hold, is a 400 naming the field on both stores, storing nothing; SQLite no longer takes what PostgreSQL would refuse", async () => {
    sqliteEnv = makeTestEnv({ APP_SECRET });
    await pgEnv();
    const nul = "a\u0000b";
    const requests = [
      { path: "/api/tenants/1", method: "PUT", body: { naam: nul, actief: true }, field: "naam" },
      { path: "/api/tenants/1", method: "PUT", body: { naam: "Eén", actief: true }, field: null },
      { path: "/api/audit", method: "POST", body: { entries: [entry(1, 0), { ...entry(1, 1), actor: nul }] }, field: "entries[1].actor" },
      { path: "/api/audit", method: "POST", body: { entries: [{ ...entry(1, 0), sleutel: nul }] }, field: "entries[0].sleutel" },
      { path: "/api/inlogpogingen", method: "POST", body: { pogingen: [{ account: nul, ip: "192.0.2.1", gelukt: false }] }, field: "pogingen[0].account" },
      { path: "/api/tenants/1/beheerders", method: "PUT", body: { beheerders: [{ naam: nul, email: "ans@example.nl", actief: true }] }, field: "beheerders[0].naam" },
      { path: "/api/tenants/1/beheerders", method: "PUT", body: { beheerders: [{ naam: "Ans", email: "a\u0000@example.nl", actief: true }] }, field: "beheerders[0].email" },
    ];
    for (const r of requests) {
      const onSqlite = await sendTo(sqliteEnv.app, r.path, r.body, { method: r.method });
      const onPg = await send(r.path, r.body, { method: r.method });
      expect([onPg.status, onPg.json]).toEqual([onSqlite.status, onSqlite.json]);
      if (r.field === null) continue;
      expect(onPg.status).toBe(400);
      expect(onPg.json.error).toStartWith(`Veld ${r.field} moet`);
    }
    expect(await count("audit_entries")).toBe(0);
    expect(await count("login_attempts")).toBe(0);
    expect(await count("administrators")).toBe(0);
    expect(env!.alarms.raised).toEqual([]);
  });

  test("one scenario answers exactly the same on SQLite and on PostgreSQL, refusals included", async () => {
    sqliteEnv = makeTestEnv({ APP_SECRET });
    await pgEnv();
    const later = new Date(NOW.getTime() + 5000);
    const steps: { path: string; body: unknown; method?: string; at?: Date }[] = [
      { path: "/api/tenants/1", method: "PUT", body: { naam: "A", actief: true } },
      { path: "/api/tenants/2", method: "PUT", body: { naam: "B", actief: true } },
      { path: "/api/tenants/1", method: "PUT", body: { naam: "A BV", actief: false } },
      { path: "/api/audit", body: { entries: [entry(1, 0, { sleutel: "s0" }), entry(2, 1, { sleutel: "s0" }), entry(1, 2), entry(2, 3, { sleutel: "s3" })] } },
      { path: "/api/audit", at: later, body: { entries: [entry(2, 3, { sleutel: "s3" }), entry(1, 0, { sleutel: "s0" }), entry(1, 4, { sleutel: "s4" }), entry(1, 4, { sleutel: "s4" })] } },
      { path: "/api/audit", body: { entries: [entry(1, 5), entry(1, 6, { sleutel: "s0" })] } },
      { path: "/api/audit", body: { entries: [entry(1, 7, { sleutel: "d" }), entry(1, 8, { sleutel: "d" })] } },
      { path: "/api/audit", body: { entries: [entry(1, 9), entry(3, 9)] } },
      { path: "/api/audit", body: { entries: [entry(1, 9, { tijdstip: "2026-07-23T12:01:01Z" })] } },
      { path: "/api/audit", body: { entries: [entry(2, 10, { tijdstip: "2026-07-23T14:00:00+02:00", sleutel: "s10" }), entry(1, 11)] } },
      { path: "/api/inlogpogingen", body: { pogingen: [{ account: "a", ip: "192.0.2.1", gelukt: false, tenantId: 1 }, { account: "b", ip: "::1", gelukt: true }] } },
      { path: "/api/inlogpogingen", body: { pogingen: [{ account: "c", ip: "192.0.2.1", gelukt: false, tenantId: 9 }] } },
      { path: "/api/inlogpogingen", body: { pogingen: [{ account: "d", ip: "192.0.2.2", gelukt: false, reden: "wachtwoord" }] } },
      { path: "/api/tenants/1/beheerders", method: "PUT", body: { beheerders: [{ naam: "Ans", email: "ans@example.nl", actief: true }, { naam: "Bob", email: "bob@example.nl", actief: true }] } },
      { path: "/api/tenants/1/beheerders", method: "PUT", body: { beheerders: [{ naam: "Bob B", email: "BOB@example.nl", actief: false }, { naam: "Cees", email: "cees@example.nl", actief: true }] } },
      { path: "/api/tenants/1/beheerders", method: "PUT", body: { beheerders: [{ naam: "X", email: "x@example.nl", actief: true }, { naam: "Y", email: "X@example.nl", actief: true }] } },
      { path: "/api/tenants/3/beheerders", method: "PUT", body: { beheerders: [] } },
    ];
    const answers = async (app: App, setNow: (d: Date) => void) => {
      const out: { step: number; status: number; json: unknown }[] = [];
      for (const [step, s] of steps.entries()) {
        setNow(s.at ?? NOW);
        const r = await sendTo(app, s.path, s.body, { method: s.method });
        out.push({ step, status: r.status, json: r.json });
      }
      return out;
    };
    const onSqlite = await answers(sqliteEnv.app, sqliteEnv.setNow);
    const onPg = await answers(env!.app, env!.setNow);
    expect(onPg).toEqual(onSqlite);
    // The scenario did reach every kind of answer.
    expect(onPg.map((a) => a.status)).toEqual([201, 201, 200, 200, 200, 409, 409, 422, 400, 200, 200, 422, 200, 200, 200, 400, 404]);
  });
});

describe("concurrent writers on PostgreSQL", () => {
  test("40 concurrent requests with overlapping sleutels on two tenants: one entry per sleutel, every caller the same receipt, chains without gaps that verify", async () => {
    await pgEnv();
    const [a, b] = [await tenant(1), await tenant(2)];
    const POOL = 24;
    const REQUESTS = 40;
    const at = "2026-07-23T11:00:00Z";
    const keyed = (t: number, k: number) => entry(t, k, { sleutel: `k${k}`, tijdstip: at });
    const batches = Array.from({ length: REQUESTS }, (_, i) => {
      const ks = [0, 1, 2, 3].map((j) => (i * 5 + j) % POOL);
      // Half the requests name tenant b first: the lock order must not depend on it.
      const tenants = i % 2 === 0 ? [a, b] : [b, a];
      return { entries: [...tenants.flatMap((t) => ks.map((k) => keyed(t, k))), entry(a, 1000 + i)] };
    });
    const results = await Promise.all(batches.map((body) => send("/api/audit", body)));
    expect(results.map((r) => r.status)).toEqual(batches.map(() => 200));

    const receiptOf = new Map<string, unknown>();
    const differing: string[] = [];
    for (const [i, r] of results.entries()) {
      for (const [j, e] of batches[i]!.entries.entries()) {
        if (!("sleutel" in e)) continue;
        const key = `${e.tenantId}/${e.sleutel}`;
        const receipt = r.json.ontvangstbewijzen[j];
        if (!receiptOf.has(key)) receiptOf.set(key, receipt);
        else if (JSON.stringify(receiptOf.get(key)) !== JSON.stringify(receipt)) differing.push(key);
      }
    }
    expect(differing).toEqual([]);
    const used = new Set(batches.flatMap((x) => x.entries.filter((e) => "sleutel" in e).map((e) => `${e.tenantId}/${(e as { sleutel: string }).sleutel}`)));
    expect(used.size).toBe(2 * POOL);
    // Each entry stored once: the sleutels used, plus each request's own entry.
    expect(results.reduce((n, r) => n + r.json.opgeslagen, 0)).toBe(used.size + REQUESTS);
    expect([await count("audit_entries"), await count("audit_entries WHERE sleutel IS NOT NULL")]).toEqual([used.size + REQUESTS, used.size]);
    const keys = (await env!.store.sql`SELECT tenant_id, sleutel, seq, id, hash FROM audit_entries WHERE sleutel IS NOT NULL`) as { tenant_id: number; sleutel: string; seq: string; id: string; hash: string }[];
    for (const k of keys) expect(receiptOf.get(`${k.tenant_id}/${k.sleutel}`)).toEqual({ tenantId: k.tenant_id, seq: Number(k.seq), id: Number(k.id), hash: k.hash });
    for (const t of [a, b]) {
      const rows = await stored(t);
      expect(rows.map((r) => r.seq)).toEqual(rows.map((_, i) => i + 1));
      expect(await verified(t)).toEqual({ intact: true, aantalEntries: rows.length });
    }
  });

  test("a writer frozen inside its transaction (an instance under SIGSTOP) holds a tenant's chain lock only until the server ends its idle session: every nachtwacht session starts with idle_in_transaction_session_timeout", async () => {
    await pgEnv();
    await tenant(1);
    // The service's own sessions carry the limit (IDLE_IN_TRANSACTION_MS, 1 min).
    expect((await env!.store.sql`SHOW idle_in_transaction_session_timeout`)[0].idle_in_transaction_session_timeout).toBe("1min");
    // The frozen writer: a session of nachtwacht's pool that took tenant 1's chain lock and
    // sends nothing more. The limit lowered for it alone, so the test need not wait a minute.
    const frozen = pgPool(env!.url, 1);
    try {
      const holder = await frozen.reserve();
      await holder`SET idle_in_transaction_session_timeout = '1s'`;
      await holder`BEGIN`;
      await holder`SELECT pg_advisory_xact_lock(${CHAIN_LOCK}, 1)`;
      // Meanwhile: 503 "nothing stored" (the 5 s lock wait)…
      const refused = await send("/api/audit", { entries: [{ ...entry(1, 0), sleutel: "na-bevriezing" }] });
      // …or, should the server have ended the session within that wait already, stored.
      expect([200, 503]).toContain(refused.status);
      // The server ends the idle session and its lock goes: the same batch again is stored, once.
      const stored1 = await until("the batch stored after the frozen session ended", async () => {
        const r = await send("/api/audit", { entries: [{ ...entry(1, 0), sleutel: "na-bevriezing" }] });
        return r.status === 200 ? r : undefined;
      });
      expect(stored1.json.ontvangstbewijzen).toHaveLength(1);
      expect((await stored(1)).map((r) => r.seq)).toEqual([1]);
      await expect(holder`SELECT 1`).rejects.toThrow();
      holder.release();
    } finally {
      await frozen.close();
    }
  });

  test("two calls that both found a sleutel free before the chain lock: the second to commit meets the key, is rolled back whole and done again, and answers from the first one's key (one entry, one receipt)", async () => {
    await pgEnv();
    await tenant(1);
    // Tenant 1's chain lock held elsewhere: both calls read the (absent) key, then wait for it.
    const holder = await env!.store.sql.reserve();
    await holder`BEGIN`;
    await holder`SELECT pg_advisory_xact_lock(${CHAIN_LOCK}, 1)`;
    const batch = (other: number) => ({ entries: [{ ...entry(1, 0), sleutel: "gedeeld" }, entry(1, other)] });
    const first = send("/api/audit", batch(1));
    const second = send("/api/audit", batch(2));
    const waiting = async () => Number(((await env!.store.sql`SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`) as { n: string }[])[0]!.n);
    await until("both calls to wait for the chain lock", async () => (await waiting()) === 2);
    await holder`COMMIT`;
    holder.release();
    const [a, b] = await Promise.all([first, second]);
    expect([a.status, b.status]).toEqual([200, 200]);
    expect(a.json.ontvangstbewijzen[0]).toEqual(b.json.ontvangstbewijzen[0]);
    // One stored the shared entry and its own; the other only its own: three entries, a chain without gaps.
    expect(a.json.opgeslagen + b.json.opgeslagen).toBe(3);
    expect((await stored(1)).map((r) => r.seq)).toEqual([1, 2, 3]);
    expect(await count("audit_entries WHERE sleutel IS NOT NULL")).toBe(1);
    expect((await verified(1)).intact).toBe(true);
  });

  test("a tenant with audit entries is neither deleted nor renumbered (23503, as SQLite's foreign key answers); one without is; a DELETE racing an append waits for it and is then refused", async () => {
    await pgEnv();
    const a = await tenant(1);
    const leeg = await tenant(2);
    expect((await send("/api/audit", { entries: [entry(a, 0)] })).status).toBe(200);
    const refused = async (q: string) => {
      const e = await env!.store.sql.unsafe(q).then(() => null, (x: unknown) => x as { errno?: string; message?: string });
      expect(e?.errno).toBe("23503");
      expect(e?.message).toContain("tenant 1 has audit entries");
    };
    await refused("DELETE FROM tenants WHERE id = 1");
    await refused("UPDATE tenants SET id = 99 WHERE id = 1");
    // Its other columns change as before (PUT /api/tenants), and a tenant without entries goes.
    expect((await send(`/api/tenants/${a}`, { naam: "Hernoemd", actief: false }, { method: "PUT" })).status).toBe(200);
    await env!.store.sql`DELETE FROM tenants WHERE id = ${leeg}`;
    expect(await count("tenants")).toBe(1);

    // The race a check without a lock would lose: the append has found tenant 3 and waits
    // for its chain lock when the DELETE comes. Tenant 3 has no entries yet.
    const t = await tenant(3);
    const holder = await env!.store.sql.reserve();
    await holder`BEGIN`;
    await holder`SELECT pg_advisory_xact_lock(${CHAIN_LOCK}, ${t})`;
    const append = send("/api/audit", { entries: [entry(t, 0)] });
    const waitingOn = async (locktype: string) => Number(((await env!.store.sql`SELECT count(*) AS n FROM pg_locks WHERE locktype = ${locktype} AND NOT granted`) as { n: string }[])[0]!.n);
    await until("the append to wait for the chain lock", async () => (await waitingOn("advisory")) === 1);
    const other = await env!.store.sql.reserve();
    const deletion = other`DELETE FROM tenants WHERE id = ${t}`.then(() => null, (x: unknown) => x as { errno?: string });
    // The DELETE waits for the append's KEY SHARE on the tenant's row (a transactionid lock).
    await until("the DELETE to wait for the append", async () => (await waitingOn("transactionid")) === 1);
    await holder`COMMIT`;
    holder.release();
    expect((await append).status).toBe(200);
    expect((await deletion)?.errno).toBe("23503");
    other.release();
    expect((await env!.store.sql`SELECT id FROM tenants WHERE id = ${t}`).length).toBe(1);
    expect(await verified(t)).toEqual({ intact: true, aantalEntries: 1 });
  });

  test("the ways around a check the foreign keys closed stay closed: a temporary audit_entries in the deleting session, a REPEATABLE READ delete, TRUNCATE … CASCADE, and audit rows written or moved to a tenant that does not exist", async () => {
    await pgEnv();
    const a = await tenant(1);
    expect((await send("/api/audit", { entries: [{ ...entry(a, 0), sleutel: "s1" }] })).status).toBe(200);
    const conn = await env!.store.sql.reserve();
    const failure = (q: string) => conn.unsafe(q).then(() => null, (x: unknown) => driverError(x)?.errno);
    try {
      // Tables of the session's own cannot stand in for nachtwacht's (the functions name theirs, search_path fixed).
      await conn`CREATE TEMP TABLE audit_entries (tenant_id int)`;
      expect(await failure("DELETE FROM public.tenants WHERE id = 1")).toBe("23503");
      await conn`DROP TABLE pg_temp.audit_entries`;
      // A snapshot older than an append's commit would not see its entries: refused whatever it would see.
      await conn`BEGIN ISOLATION LEVEL REPEATABLE READ`;
      expect(await failure("DELETE FROM tenants WHERE id = 1")).toBe("40001");
      await conn`ROLLBACK`;
      expect(await failure("TRUNCATE tenants CASCADE")).toBe("23503");
      expect(await failure("INSERT INTO audit_entries (tenant_id, seq, created_at, actor, action, subject, details, prev_hash, hash) VALUES (999, 1, '2026-07-23T12:00:00.000Z', 'x', 'y', 'z', '{}', 'p', 'h')")).toBe("23503");
      expect(await failure("UPDATE audit_entries SET tenant_id = 777 WHERE tenant_id = 1")).toBe("23503");
    } finally {
      conn.release();
    }
    expect(await count("tenants")).toBe(1);
    expect((await env!.store.sql.unsafe(ORPHAN_CHAINS_SQL)).length).toBe(0);
    expect(await verified(a)).toEqual({ intact: true, aantalEntries: 1 });
  });

  test("the same sleutel at the same time: identical content stores once and answers all alike; other content stores one and is 409 for the rest", async () => {
    await pgEnv();
    const a = await tenant(1);
    const same = await Promise.all(Array.from({ length: 12 }, () => send("/api/audit", { entries: [entry(a, 0, { sleutel: "zelfde", tijdstip: "2026-07-23T11:00:00Z" })] })));
    expect(same.map((r) => r.status)).toEqual(same.map(() => 200));
    expect(same.map((r) => r.json.opgeslagen).sort()).toEqual([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    expect(new Set(same.map((r) => JSON.stringify(r.json.ontvangstbewijzen))).size).toBe(1);

    const other = await Promise.all(Array.from({ length: 12 }, (_, i) => send("/api/audit", { entries: [entry(a, 100 + i, { sleutel: "anders" })] })));
    const won = other.filter((r) => r.status === 200);
    expect(won.length).toBe(1);
    expect(won[0]!.json.opgeslagen).toBe(1);
    for (const r of other.filter((x) => x.status !== 200)) {
      expect(r.status).toBe(409);
      expect(r.json.error).toContain('"anders"');
    }
    expect(await count("audit_entries")).toBe(2);
    expect(await verified(a)).toEqual({ intact: true, aantalEntries: 2 });
  });

  test("concurrent PUTs of one new tenant: one 201, the rest 200, one row; concurrent administrator lists: no address twice", async () => {
    await pgEnv();
    const puts = await Promise.all(Array.from({ length: 8 }, (_, i) => send("/api/tenants/50", { naam: `Vijftig ${i}`, actief: true }, { method: "PUT" })));
    expect(puts.map((r) => r.status).sort()).toEqual([200, 200, 200, 200, 200, 200, 200, 201]);
    expect(await count("tenants")).toBe(1);
    const list = { beheerders: ["ans", "bob", "cees"].map((n) => ({ naam: n, email: `${n}@example.nl`, actief: true })) };
    const lists = await Promise.all(Array.from({ length: 8 }, () => send("/api/tenants/50/beheerders", list, { method: "PUT" })));
    expect(lists.map((r) => r.status)).toEqual(lists.map(() => 200));
    expect(new Set(lists.map((r) => JSON.stringify(r.json))).size).toBe(1);
    expect(await count("administrators")).toBe(3);
  });

  test("a list that drops an administrator while weekrapport reserves a message to them (the reservation's insert not yet committed): the PUT waits for it and sets them inactive, never a 500", async () => {
    await pgEnv();
    await tenant(60);
    const both = { beheerders: ["ans", "bob"].map((n) => ({ naam: n, email: `${n}@example.nl`, actief: true })) };
    const first = await send("/api/tenants/60/beheerders", both, { method: "PUT" });
    const bob = (first.json.beheerders as { id: number; email: string }[]).find((b) => b.email === "bob@example.nl")!.id;
    // weekrapport's reservation (reserveDeliveryPg), held open between its INSERT and its COMMIT.
    const reservation = await env!.store.sql.reserve();
    try {
      await reservation`BEGIN`;
      await reservation`INSERT INTO weekly_report_deliveries (administrator_id, tenant_id, iso_week, verstuurd) VALUES (${bob}, 60, '2026-W30', 'verzenden')`;
      const put = send("/api/tenants/60/beheerders", { beheerders: both.beheerders.slice(0, 1) }, { method: "PUT" });
      await until("the PUT to wait for the reservation", async () => {
        const [w] = (await env!.store.sql`SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%administrators%'`) as { n: number }[];
        return w!.n > 0;
      });
      await reservation`COMMIT`;
      const answer = await put;
      expect({ status: answer.status, body: answer.json }).toEqual({
        status: 200,
        body: {
          tenantId: 60,
          beheerders: [
            { id: expect.any(Number), naam: "ans", email: "ans@example.nl", actief: true },
            { id: bob, naam: "bob", email: "bob@example.nl", actief: false },
          ],
        },
      });
    } finally {
      reservation.release();
    }
    expect(env!.alarms.raised).toEqual([]);
  });

  test("two processes appending batches with the same sleutels to two tenants: each entry once, both got the same receipts, the chains verify", async () => {
    await pgEnv();
    for (const t of [1, 2]) await tenant(t);
    const ROUNDS = 60;
    const BARRIER = 0x696e6773; // a key of this test's own, outside nachtwacht's (src/pg/store.ts)
    const gate = await env!.store.sql.reserve();
    let writers: FixtureProcess[] = [];
    try {
      await gate`SELECT pg_advisory_lock(${BARRIER}::bigint)`;
      writers = ["a", "b"].map((label) => startWriter(env!.url, label, ROUNDS, BARRIER));
      await until("both writers to be ready", () => {
        for (const w of writers) if (w.proc.exitCode !== null) throw new Error(`a writer exited early (${w.proc.exitCode}): ${w.stderr()}`);
        return writers.every((w) => w.stdout().startsWith("ready\n"));
      });
    } finally {
      await gate`SELECT pg_advisory_unlock(${BARRIER}::bigint)`;
      gate.release();
    }
    const codes = await Promise.all(writers.map((w) => w.proc.exited));
    expect({ codes, stderr: writers.map((w) => w.stderr()) }).toEqual({ codes: [0, 0], stderr: ["", ""] });
    const [ra, rb] = writers.map((w) => JSON.parse(w.stdout().trim().split("\n").at(-1)!) as { stored: number; known: number; receipts: Record<string, unknown> });
    // Sleutels k0 … k(ROUNDS+1) on both tenants, each sent by both processes.
    const distinct = 2 * (ROUNDS + 2);
    expect(Object.keys(ra!.receipts).sort()).toEqual(Object.keys(rb!.receipts).sort());
    expect(Object.keys(ra!.receipts).length).toBe(distinct);
    expect(ra!.receipts).toEqual(rb!.receipts);
    expect(ra!.stored + rb!.stored).toBe(distinct + 2 * ROUNDS);
    expect([await count("audit_entries"), await count("audit_entries WHERE sleutel IS NOT NULL")]).toEqual([distinct + 2 * ROUNDS, distinct]);
    for (const t of [1, 2]) {
      const rows = await stored(t);
      expect(rows.map((r) => r.seq)).toEqual(rows.map((_, i) => i + 1));
      expect(await verified(t)).toEqual({ intact: true, aantalEntries: rows.length });
    }
  });
});

// ---------------------------------------------------------------- two real processes

function startWriter(url: string, label: string, rounds: number, barrier: number): FixtureProcess {
  return spawnFixture("pg-ingest-writer.ts", { INGEST_PG_URL: url, INGEST_LABEL: label, INGEST_ROUNDS: String(rounds), INGEST_BARRIER: String(barrier) });
}

