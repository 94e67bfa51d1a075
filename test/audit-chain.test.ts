import { describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import vectors from "./vectors/audit-chain.json" with { type: "json" };
import { appendAuditEntry, canonicalJson, recordLoginAttempt, canonicalText, entryHash, GENESIS_HASH, type AppendedEntry, type ChainFields, type NewAuditEntry } from "../src/audit/chain.ts";
import { CompactRange } from "../src/audit/merkle.ts";
import { generateKeyPair, parseSignerKey, parseVerifierKey } from "../src/audit/note.ts";
import { signRetentionRecord } from "../src/audit/records.ts";
import { verifyTenantChain, type CheckpointRef, type TenantChainResult, type VerifyOptions } from "../src/audit/verify.ts";
import type { AnyStore } from "../src/deps.ts";
import { appendEntriesPg, verifyTenantChainPg } from "../src/pg/chain.ts";
import { BUN, ROOT } from "./binary.ts";
import { makeTestEnv, TEST_SIGNING_KEY, TEST_VERIFIER_KEY } from "./helpers.ts";
import { addTenant, makeEnv } from "./dialect.ts";

const SIGNER = parseSignerKey(TEST_SIGNING_KEY);
const VERIFIERS = [parseVerifierKey(TEST_VERIFIER_KEY)];
/** Nothing signed: no checkpoint, no trusted retention record. */
const BARE: VerifyOptions = { checkpoint: null, verifiers: VERIFIERS };

/** Appends one entry as appendAuditEntry does (its own transaction), on either store. */
async function append(store: AnyStore, input: NewAuditEntry): Promise<AppendedEntry> {
  if (store.kind === "sqlite") return appendAuditEntry(store.sqlite, input);
  const createdAt = input.createdAt === undefined ? new Date().toISOString() : typeof input.createdAt === "string" ? input.createdAt : input.createdAt.toISOString();
  const entry = { tenantId: input.tenantId, createdAt, actor: input.actor, action: input.action, subject: input.subject, details: canonicalJson(input.details ?? {}) };
  return (await store.sql.begin((tx) => appendEntriesPg(tx, [entry])))[0]!;
}

/** One tenant's chain verified, on either store (verifyTenantChain / verifyTenantChainPg). */
function verifyChain(store: AnyStore, tenantId: number, opts: VerifyOptions): Promise<TenantChainResult> {
  return store.kind === "sqlite" ? Promise.resolve(verifyTenantChain(store.sqlite, tenantId, opts)) : verifyTenantChainPg(store.sql, tenantId, opts);
}

describe("known-answer vectors (test/vectors/audit-chain.json, docs/audit-chain.md)", () => {
  test("the genesis value is 64 zeros", () => {
    expect(vectors.genesis).toBe(GENESIS_HASH);
  });

  for (const [i, v] of vectors.vectors.entries()) {
    test(`vector ${i + 1}: canonical text and SHA-256 match`, () => {
      expect(canonicalJson(v.input.details)).toBe(v.entry.details);
      expect(canonicalText(v.entry as ChainFields)).toBe(v.canonicalText);
      expect(entryHash(v.entry as ChainFields)).toBe(v.hash);
      // independent of Bun's hasher: node:crypto over the UTF-8 bytes
      expect(createHash("sha256").update(Buffer.from(v.canonicalText, "utf8")).digest("hex")).toBe(v.hash);
    });
  }

  test("a vector holds the key order of docs/audit-chain.md's example, an astral key before a BMP key above U+D800, and numbers in exponent form", () => {
    const doc = readFileSync(join(ROOT, "docs/audit-chain.md"), "utf8");
    expect(doc).toContain('`{"b":1,"10":2,"9":3,"01":4}` → `{"9":3,"10":2,"01":4,"b":1}`');
    const v = vectors.vectors.find((x) => x.entry.details.includes('"volgorde":'))!;
    expect(v.entry.details).toContain('"volgorde":{"9":3,"10":2,"01":4,"b":1}');
    // UTF-16 code units: U+1F600 is D83D DE00, below U+FF61; by code point it would come after.
    expect(v.entry.details).toContain('"😀":"astraal","｡":"bmp-boven-d800"}');
    expect(v.entry.details).toContain('"groot":1e+21,"klein":1.5e-7');
    // The loop above checks canonicalJson, the canonical text and the hash of this vector as of every other.
    expect(canonicalJson(v.input.details)).toBe(v.entry.details);
  });

  test("each vector of tenant 1 links to the one before it", () => {
    const t1 = vectors.vectors.filter((v) => v.entry.tenantId === 1);
    expect(t1[0]!.entry.prevHash).toBe(GENESIS_HASH);
    for (let i = 1; i < t1.length; i++) expect(t1[i]!.entry.prevHash).toBe(t1[i - 1]!.hash);
  });

  test("appending (appendAuditEntry; appendEntriesPg on PostgreSQL) reproduces the vectors in a real database", async () => {
    const env = await makeEnv();
    try {
      const tenant = await addTenant(env.db, "Vectoren");
      expect(tenant).toBe(1);
      for (const v of vectors.vectors.filter((x) => x.entry.tenantId === 1)) {
        const e = await append(env.store, { ...v.input, createdAt: v.input.createdAt });
        expect(e.hash).toBe(v.hash);
      }
    } finally {
      await env.cleanup();
    }
  });
});

describe("canonicalJson", () => {
  test("sorts keys recursively and drops whitespace", () => {
    expect(canonicalJson({ b: 1, a: { d: [3, { y: 1, x: 2 }], c: null } })).toBe('{"a":{"c":null,"d":[3,{"x":2,"y":1}]},"b":1}');
  });
});

async function chainOf(n: number) {
  const env = await makeEnv();
  const { store, db } = env;
  const tenant = await addTenant(db);
  for (let i = 0; i < n; i++) {
    await append(store, {
      tenantId: tenant,
      actor: `user${i}@example.nl`,
      action: "dossier.bekeken",
      subject: `dossier/${i}`,
      details: { i },
      createdAt: new Date(Date.UTC(2026, 0, 1) + i * 60_000),
    });
  }
  const q = (sql: string, ...p: (string | number)[]) => db.run(sql, ...p);
  const row = async (seq: number) => (await db.get<{ seq: number; hash: string; created_at: string }>("SELECT seq, hash, created_at FROM audit_entries WHERE tenant_id = ? AND seq = ?", tenant, seq))!;
  /** The RFC 6962 tree over the entry hashes 1..size, as they are now. */
  const range = async (size: number) => {
    const r = new CompactRange();
    for (let s = 1; s <= size; s++) r.pushEntryHash((await row(s)).hash);
    return r;
  };
  /**
   * A retention record for deleting 1..seq, signed with `signer`, in audit_anchor_log as
   * audit-retentie writes it (`grens` defaults to one that justifies the deletion).
   */
  const retentionRecord = async (seq: number, o: { signer?: typeof SIGNER; grens?: string; hash?: string } = {}) => {
    const last = await row(seq);
    const note = signRetentionRecord(o.signer ?? SIGNER, {
      tenantId: tenant,
      seq,
      hash: o.hash ?? last.hash,
      createdAt: last.created_at,
      grens: o.grens ?? "2026-06-01T00:00:00.000Z",
      retentieDagen: 30,
      tijdstip: "2026-07-23T12:00:00.000Z",
      bereik: await range(seq),
    });
    const { p } = (await db.get<{ p: number }>("SELECT coalesce(max(positie), -1) + 1000 AS p FROM audit_anchor_log"))!;
    await q("INSERT INTO audit_anchor_log (positie, soort, tenant_id, grootte, note, bereik) VALUES (?, 'retentie', ?, ?, ?, NULL)", p, tenant, seq, note);
  };
  return {
    store,
    db,
    tenant,
    q,
    range,
    retentionRecord,
    verify: (checkpoint: CheckpointRef | null = null) => verifyChain(store, tenant, { ...BARE, checkpoint }),
    done: () => env.cleanup(),
  };
}

describe("the streaming verifier detects each kind of tampering", () => {
  test("an untouched chain is intact and counts every entry", async () => {
    const c = await chainOf(20);
    expect(await c.verify()).toEqual({ intact: true, aantalEntries: 20 });
    await c.done();
  });

  test("an empty chain is intact", async () => {
    const c = await chainOf(0);
    expect(await c.verify()).toEqual({ intact: true, aantalEntries: 0 });
    await c.done();
  });

  test("a field changed → hash-afwijkend at that entry", async () => {
    const c = await chainOf(20);
    await c.q("UPDATE audit_entries SET subject = 'dossier/999' WHERE tenant_id = ? AND seq = 7", c.tenant);
    const r = await c.verify();
    expect(r.intact).toBe(false);
    expect(r.fout).toMatchObject({ seq: 7, reden: "hash-afwijkend" });
    expect(r.fout!.entryId).toBeGreaterThan(0);
    await c.done();
  });

  test("a stored hash changed → hash-afwijkend at that entry", async () => {
    const c = await chainOf(20);
    await c.q("UPDATE audit_entries SET hash = ? WHERE tenant_id = ? AND seq = 12", "f".repeat(64), c.tenant);
    expect((await c.verify()).fout).toMatchObject({ seq: 12, reden: "hash-afwijkend" });
    await c.done();
  });

  test("an entry deleted from the middle → volgnummer-gat at the next one", async () => {
    const c = await chainOf(20);
    await c.q("DELETE FROM audit_entries WHERE tenant_id = ? AND seq = 10", c.tenant);
    expect((await c.verify()).fout).toMatchObject({ seq: 11, reden: "volgnummer-gat" });
    await c.done();
  });

  test("two entries swapped (each rehashed at its new place) → koppeling-verbroken", async () => {
    const c = await chainOf(20);
    const rows = await c.db.all("SELECT * FROM audit_entries WHERE tenant_id = ? AND seq IN (5, 6) ORDER BY seq", c.tenant);
    // Put entry 6's content at seq 5 and entry 5's at seq 6, keeping each row's own
    // prev_hash but computing a valid hash for its new position: a careful forger.
    const [a, b] = rows;
    for (const [row, seq] of [
      [b, 5],
      [a, 6],
    ] as const) {
      const f: ChainFields = {
        tenantId: c.tenant,
        seq,
        createdAt: row.created_at,
        actor: row.actor,
        action: row.action,
        subject: row.subject,
        details: row.details,
        prevHash: row.prev_hash,
      };
      await c.q(
        "UPDATE audit_entries SET created_at = ?, actor = ?, subject = ?, details = ?, prev_hash = ?, hash = ? WHERE tenant_id = ? AND seq = ?",
        f.createdAt,
        f.actor,
        f.subject,
        f.details,
        f.prevHash,
        entryHash(f),
        c.tenant,
        seq,
      );
    }
    const r = await c.verify();
    expect(r.intact).toBe(false);
    expect(r.fout).toMatchObject({ seq: 5, reden: "koppeling-verbroken" });
    await c.done();
  });

  test("sequence numbers renumbered with a gap (hashes recomputed) → volgnummer-gat", async () => {
    const c = await chainOf(10);
    // Shift entries 6..10 to 7..11 and rehash them so every hash and link is valid
    // except the numbering.
    let prev = (await c.db.get("SELECT hash FROM audit_entries WHERE tenant_id = ? AND seq = 5", c.tenant)).hash;
    for (let seq = 10; seq >= 6; seq--) await c.q("UPDATE audit_entries SET seq = seq + 1 WHERE tenant_id = ? AND seq = ?", c.tenant, seq);
    for (let seq = 7; seq <= 11; seq++) {
      const row = await c.db.get("SELECT * FROM audit_entries WHERE tenant_id = ? AND seq = ?", c.tenant, seq);
      const f: ChainFields = { tenantId: c.tenant, seq, createdAt: row.created_at, actor: row.actor, action: row.action, subject: row.subject, details: row.details, prevHash: prev };
      prev = entryHash(f);
      await c.q("UPDATE audit_entries SET prev_hash = ?, hash = ? WHERE tenant_id = ? AND seq = ?", f.prevHash, prev, c.tenant, seq);
    }
    expect((await c.verify()).fout).toMatchObject({ seq: 7, reden: "volgnummer-gat" });
    await c.done();
  });

  test("the oldest entries deleted without a retention record → retentie-ontbreekt at the oldest left", async () => {
    const c = await chainOf(10);
    await c.q("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= 3", c.tenant);
    const fourth = (await c.db.get<{ id: number }>("SELECT id FROM audit_entries WHERE tenant_id = ? AND seq = 4", c.tenant))!;
    expect(await c.verify()).toEqual({ intact: false, aantalEntries: 7, fout: { seq: 4, entryId: fourth.id, reden: "retentie-ontbreekt" } });
    await c.done();
  });

  test("a cut chain that starts from its signed, justified retention record is intact; a record that does not match, is not trusted or not justified is not", async () => {
    const c = await chainOf(10);
    const full = await c.range(10);
    await c.retentionRecord(3);
    await c.q("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= 3", c.tenant);
    expect(await c.verify()).toEqual({ intact: true, aantalEntries: 7 });
    // The tree goes on from the record's compact range: the checkpoint over all ten entries still holds.
    expect(await c.verify({ size: 10, root: full.root() })).toEqual({ intact: true, aantalEntries: 7 });
    await c.done();

    // A record naming another hash for entry 3: entry 4 does not link to it.
    const wrongHash = await chainOf(10);
    await wrongHash.retentionRecord(3, { hash: "b".repeat(64) });
    await wrongHash.q("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= 3", wrongHash.tenant);
    expect((await wrongHash.verify()).fout).toMatchObject({ seq: 4, reden: "anker-afwijkend" });
    await wrongHash.done();

    // Signed with a key that is not trusted.
    const foreign = await chainOf(10);
    await foreign.retentionRecord(3, { signer: parseSignerKey(generateKeyPair("nachtwacht.test/sleutel").signerKey) });
    await foreign.q("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= 3", foreign.tenant);
    expect((await foreign.verify()).fout).toMatchObject({ seq: 4, reden: "retentie-ongeldig" });
    await foreign.done();

    // Validly signed but not justified: grens later than tijdstip − 30 days.
    const unjustified = await chainOf(10);
    await unjustified.retentionRecord(3, { grens: "2026-07-01T00:00:00.000Z" });
    await unjustified.q("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= 3", unjustified.tenant);
    expect((await unjustified.verify()).fout).toMatchObject({ seq: 4, reden: "retentie-ongeldig" });
    await unjustified.done();
  });

  test("checkpoints: a chain that reaches its signed root is intact; a changed root and a cut-off tail are detected", async () => {
    const c = await chainOf(10);
    const eight = await c.range(8);
    expect(await c.verify({ size: 8, root: eight.root() })).toEqual({ intact: true, aantalEntries: 10 });
    expect((await c.verify({ size: 8, root: new Uint8Array(32).fill(0xcc) })).fout).toMatchObject({ seq: 8, reden: "checkpoint-afwijkend" });
    await c.q("DELETE FROM audit_entries WHERE tenant_id = ? AND seq >= 8", c.tenant);
    expect(await c.verify({ size: 8, root: eight.root() })).toEqual({ intact: false, aantalEntries: 7, fout: { seq: 8, entryId: null, reden: "kop-ontbreekt" } });
    await c.done();
  });
});

/**
 * The PostgreSQL counterpart of test/fixtures/append-worker.ts, run as its own process
 * (`bun -e`): COUNT entries appended to TENANT one transaction each, from START_AT on.
 */
const PG_APPEND_WORKER = `
import { SQL } from "bun";
import { canonicalJson } from ${JSON.stringify(`${ROOT}/src/audit/chain.ts`)};
import { appendEntriesPg } from ${JSON.stringify(`${ROOT}/src/pg/chain.ts`)};
const { URL: url, TENANT, COUNT, ACTOR: actor, START_AT } = process.env;
const sql = new SQL(url, { max: 1 });
await Bun.sleep(Math.max(0, Number(START_AT) - Date.now()));
for (let i = 0; i < Number(COUNT); i++) {
  const input = { tenantId: Number(TENANT), createdAt: new Date().toISOString(), actor, action: "race.append", subject: actor + "/" + i, details: canonicalJson({ i }) };
  await sql.begin((tx) => appendEntriesPg(tx, [input]));
  // a breath after each commit, as append-worker.ts takes, so the two really interleave
  await Bun.sleep(1);
}
await sql.close();
`;

describe("appending", () => {
  test("continues from the retention anchor after the whole chain was deleted", async () => {
    const c = await chainOf(3);
    const last = (await c.db.get("SELECT seq, hash FROM audit_entries WHERE tenant_id = ? AND seq = 3", c.tenant))!;
    await c.retentionRecord(3);
    await c.q("DELETE FROM audit_entries WHERE tenant_id = ?", c.tenant);
    await c.q("INSERT INTO audit_retention_anchors (tenant_id, seq, hash, bijgewerkt) VALUES (?, ?, ?, ?)", c.tenant, last.seq, last.hash, "2026-01-02T00:00:00.000Z");
    expect(await c.verify()).toEqual({ intact: true, aantalEntries: 0 });
    const e = await append(c.store, { tenantId: c.tenant, actor: "a", action: "b", subject: "c" });
    expect(e.seq).toBe(4);
    expect(e.prevHash).toBe(last.hash);
    expect(await c.verify()).toEqual({ intact: true, aantalEntries: 1 });
    await c.done();
  });

  test("refuses a createdAt that is not ISO UTC with milliseconds", async () => {
    const c = await chainOf(0);
    await expect(append(c.store, { tenantId: c.tenant, actor: "a", action: "b", subject: "c", createdAt: "2026-01-01 10:00" })).rejects.toThrow(/ISO 8601/);
    await c.done();
  });

  test("refuses actor, action or subject with a NUL or a lone surrogate, as the write API does, storing nothing", async () => {
    const c = await chainOf(1);
    const base = { tenantId: c.tenant, actor: "a", action: "b", subject: "c", details: {} };
    for (const field of ["actor", "action", "subject"] as const) {
      for (const bad of ["a\u0000b", "x\ud800y", "\udc00"]) {
        await expect(append(c.store, { ...base, [field]: bad })).rejects.toThrow(new RegExp(`^${field} holds a NUL character \\(U\\+0000\\) or a lone UTF-16 surrogate`));
      }
    }
    // A pair is one character: taken.
    await append(c.store, { ...base, actor: "\ud83d\ude00" });
    expect(await c.db.all("SELECT seq, actor FROM audit_entries WHERE tenant_id = ? ORDER BY seq", c.tenant)).toEqual([
      { seq: 1, actor: "user0@example.nl" },
      { seq: 2, actor: "\ud83d\ude00" },
    ]);
    expect(await c.verify()).toEqual({ intact: true, aantalEntries: 2 });
    await c.done();
  });

  test("refuses a createdAt that names no existing moment (geen bestaand tijdstip), storing nothing", async () => {
    const c = await chainOf(0);
    for (const createdAt of ["2026-13-45T25:61:61.000Z", "2026-02-30T00:00:00.000Z", "2026-01-01T24:00:00.000Z", "2026-01-01T00:00:60.000Z"]) {
      await expect(append(c.store, { tenantId: c.tenant, actor: "a", action: "b", subject: "c", createdAt })).rejects.toThrow(`createdAt is no existing moment (the write API's "geen bestaand tijdstip"), got ${createdAt}`);
    }
    expect(await c.db.all("SELECT seq FROM audit_entries WHERE tenant_id = ?", c.tenant)).toEqual([]);
    await append(c.store, { tenantId: c.tenant, actor: "a", action: "b", subject: "c", createdAt: "2028-02-29T23:59:59.999Z" });
    expect(await c.verify()).toEqual({ intact: true, aantalEntries: 1 });
    await c.done();
  });

  test("two processes appending to the same tenant at once leave one valid chain", async () => {
    const env = await makeEnv();
    try {
      const tenant = await addTenant(env.db, "Race");
      const N = 300;
      // both start at the same instant, well after both processes are up
      const startAt = String(Date.now() + 1500);
      const procs = ["A", "B"].map((name) =>
        env.store.kind === "sqlite"
          ? Bun.spawn([BUN, `${ROOT}/test/fixtures/append-worker.ts`, env.config.databasePath, String(tenant), String(N), name, startAt], { stdout: "pipe", stderr: "pipe" })
          : Bun.spawn([BUN, "-e", PG_APPEND_WORKER], {
              cwd: ROOT,
              env: { ...process.env, URL: env.store.url, TENANT: String(tenant), COUNT: String(N), ACTOR: name, START_AT: startAt },
              stdout: "pipe",
              stderr: "pipe",
            }),
      );
      const codes = await Promise.all(procs.map((p) => p.exited));
      const errs = await Promise.all(procs.map((p) => new Response(p.stderr).text()));
      expect(errs).toEqual(["", ""]);
      expect(codes).toEqual([0, 0]);
      const rows = await env.db.all("SELECT actor, count(*) AS n FROM audit_entries WHERE tenant_id = ? GROUP BY actor ORDER BY actor", tenant);
      expect(rows).toEqual([
        { actor: "A", n: N },
        { actor: "B", n: N },
      ]);
      // interleaved, not one after the other: the test really raced
      const firstB = await env.db.get("SELECT min(seq) AS s FROM audit_entries WHERE tenant_id = ? AND actor = 'B'", tenant);
      const lastA = await env.db.get("SELECT max(seq) AS s FROM audit_entries WHERE tenant_id = ? AND actor = 'A'", tenant);
      const firstA = await env.db.get("SELECT min(seq) AS s FROM audit_entries WHERE tenant_id = ? AND actor = 'A'", tenant);
      const lastB = await env.db.get("SELECT max(seq) AS s FROM audit_entries WHERE tenant_id = ? AND actor = 'B'", tenant);
      expect(firstB.s < lastA.s && firstA.s < lastB.s).toBe(true);
      expect(await verifyChain(env.store, tenant, BARE)).toEqual({ intact: true, aantalEntries: 2 * N });
    } finally {
      await env.cleanup();
    }
  }, 60_000);
});


describe("recordLoginAttempt (SQLite: the library's appender of the BeveiligingsLog)", () => {
  test("refuses what the write API refuses: NUL or a lone surrogate in account, ip or reden, a tijdstip that is no existing moment; stores nothing", async () => {
    const env = makeTestEnv();
    try {
      const sqlite = env.store.sqlite;
      const base = { account: "anna@example.nl", ip: "10.0.0.1", gelukt: false, reden: "wachtwoord", tijdstip: "2026-07-23T12:00:00.000Z" };
      for (const field of ["account", "ip", "reden"] as const) {
        for (const bad of ["a\u0000b", "x\ud800y"]) {
          expect(() => recordLoginAttempt(sqlite, { ...base, [field]: bad })).toThrow(new RegExp(`^${field} holds a NUL character`));
        }
      }
      for (const tijdstip of ["2026-99-99T99:99:99.999Z", "2026-02-30T00:00:00.000Z"]) {
        expect(() => recordLoginAttempt(sqlite, { ...base, tijdstip })).toThrow(`tijdstip is no existing moment (the write API's "geen bestaand tijdstip"), got ${tijdstip}`);
      }
      expect(sqlite.query("SELECT count(*) AS n FROM login_attempts").get()).toEqual({ n: 0 });
      const id = recordLoginAttempt(sqlite, { ...base, reden: null, account: "\ud83d\ude00" });
      expect(sqlite.query("SELECT account, tijdstip, reden FROM login_attempts WHERE id = ?").get(id)).toEqual({ account: "\ud83d\ude00", tijdstip: base.tijdstip, reden: null });
    } finally {
      await env.cleanup();
    }
  });
});
