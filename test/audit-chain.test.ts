import { describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { join } from "node:path";
import vectors from "./vectors/audit-chain.json" with { type: "json" };
import { appendAuditEntry, canonicalJson, canonicalText, entryHash, GENESIS_HASH, type ChainFields } from "../src/audit/chain.ts";
import { CompactRange } from "../src/audit/merkle.ts";
import { generateKeyPair, parseSignerKey, parseVerifierKey } from "../src/audit/note.ts";
import { signRetentionRecord } from "../src/audit/records.ts";
import { verifyTenantChain, type CheckpointRef, type VerifyOptions } from "../src/audit/verify.ts";
import { openStore } from "../src/db.ts";
import { addTenant, tempDir, TEST_SIGNING_KEY, TEST_VERIFIER_KEY } from "./helpers.ts";

const SIGNER = parseSignerKey(TEST_SIGNING_KEY);
const VERIFIERS = [parseVerifierKey(TEST_VERIFIER_KEY)];
/** Nothing signed: no checkpoint, no trusted retention record. */
const BARE: VerifyOptions = { checkpoint: null, verifiers: VERIFIERS };

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

  test("each vector of tenant 1 links to the one before it", () => {
    const t1 = vectors.vectors.filter((v) => v.entry.tenantId === 1);
    expect(t1[0]!.entry.prevHash).toBe(GENESIS_HASH);
    for (let i = 1; i < t1.length; i++) expect(t1[i]!.entry.prevHash).toBe(t1[i - 1]!.hash);
  });

  test("appendAuditEntry reproduces the vectors in a real database", () => {
    const { dir, cleanup } = tempDir();
    const store = openStore(join(dir, "v.db"));
    try {
      const tenant = addTenant(store, "Vectoren");
      expect(tenant).toBe(1);
      for (const v of vectors.vectors.filter((x) => x.entry.tenantId === 1)) {
        const e = appendAuditEntry(store.sqlite, { ...v.input, createdAt: v.input.createdAt });
        expect(e.hash).toBe(v.hash);
      }
    } finally {
      store.close();
      cleanup();
    }
  });
});

describe("canonicalJson", () => {
  test("sorts keys recursively and drops whitespace", () => {
    expect(canonicalJson({ b: 1, a: { d: [3, { y: 1, x: 2 }], c: null } })).toBe('{"a":{"c":null,"d":[3,{"x":2,"y":1}]},"b":1}');
  });
});

function chainOf(n: number) {
  const { dir, cleanup } = tempDir();
  const store = openStore(join(dir, "c.db"));
  const tenant = addTenant(store);
  for (let i = 0; i < n; i++) {
    appendAuditEntry(store.sqlite, {
      tenantId: tenant,
      actor: `user${i}@example.nl`,
      action: "dossier.bekeken",
      subject: `dossier/${i}`,
      details: { i },
      createdAt: new Date(Date.UTC(2026, 0, 1) + i * 60_000),
    });
  }
  const q = (sql: string, ...p: (string | number)[]) => store.sqlite.query(sql).run(...p);
  const row = (seq: number) => store.sqlite.query("SELECT seq, hash, created_at FROM audit_entries WHERE tenant_id = ? AND seq = ?").get(tenant, seq) as { seq: number; hash: string; created_at: string };
  /** The RFC 6962 tree over the entry hashes 1..size, as they are now. */
  const range = (size: number) => {
    const r = new CompactRange();
    for (let s = 1; s <= size; s++) r.pushEntryHash(row(s).hash);
    return r;
  };
  /**
   * A retention record for deleting 1..seq, signed with `signer`, in audit_anchor_log as
   * audit-retentie writes it (`grens` defaults to one that justifies the deletion).
   */
  const retentionRecord = (seq: number, o: { signer?: typeof SIGNER; grens?: string; hash?: string } = {}) => {
    const last = row(seq);
    const note = signRetentionRecord(o.signer ?? SIGNER, {
      tenantId: tenant,
      seq,
      hash: o.hash ?? last.hash,
      createdAt: last.created_at,
      grens: o.grens ?? "2026-06-01T00:00:00.000Z",
      retentieDagen: 30,
      tijdstip: "2026-07-23T12:00:00.000Z",
      bereik: range(seq),
    });
    const { p } = store.sqlite.query("SELECT coalesce(max(positie), -1) + 1000 AS p FROM audit_anchor_log").get() as { p: number };
    q("INSERT INTO audit_anchor_log (positie, soort, tenant_id, grootte, note, bereik) VALUES (?, 'retentie', ?, ?, ?, NULL)", p, tenant, seq, note);
  };
  return {
    store,
    tenant,
    q,
    range,
    retentionRecord,
    verify: (checkpoint: CheckpointRef | null = null) => verifyTenantChain(store.sqlite, tenant, { ...BARE, checkpoint }),
    done() {
      store.close();
      cleanup();
    },
  };
}

describe("the streaming verifier detects each kind of tampering", () => {
  test("an untouched chain is intact and counts every entry", () => {
    const c = chainOf(20);
    expect(c.verify()).toEqual({ intact: true, aantalEntries: 20 });
    c.done();
  });

  test("an empty chain is intact", () => {
    const c = chainOf(0);
    expect(c.verify()).toEqual({ intact: true, aantalEntries: 0 });
    c.done();
  });

  test("a field changed → hash-afwijkend at that entry", () => {
    const c = chainOf(20);
    c.q("UPDATE audit_entries SET subject = 'dossier/999' WHERE tenant_id = ? AND seq = 7", c.tenant);
    const r = c.verify();
    expect(r.intact).toBe(false);
    expect(r.fout).toMatchObject({ seq: 7, reden: "hash-afwijkend" });
    expect(r.fout!.entryId).toBeGreaterThan(0);
    c.done();
  });

  test("a stored hash changed → hash-afwijkend at that entry", () => {
    const c = chainOf(20);
    c.q("UPDATE audit_entries SET hash = ? WHERE tenant_id = ? AND seq = 12", "f".repeat(64), c.tenant);
    expect(c.verify().fout).toMatchObject({ seq: 12, reden: "hash-afwijkend" });
    c.done();
  });

  test("an entry deleted from the middle → volgnummer-gat at the next one", () => {
    const c = chainOf(20);
    c.q("DELETE FROM audit_entries WHERE tenant_id = ? AND seq = 10", c.tenant);
    expect(c.verify().fout).toMatchObject({ seq: 11, reden: "volgnummer-gat" });
    c.done();
  });

  test("two entries swapped (each rehashed at its new place) → koppeling-verbroken", () => {
    const c = chainOf(20);
    const rows = c.store.sqlite
      .query("SELECT * FROM audit_entries WHERE tenant_id = ? AND seq IN (5, 6) ORDER BY seq")
      .all(c.tenant) as any[];
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
      c.q(
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
    const r = c.verify();
    expect(r.intact).toBe(false);
    expect(r.fout).toMatchObject({ seq: 5, reden: "koppeling-verbroken" });
    c.done();
  });

  test("sequence numbers renumbered with a gap (hashes recomputed) → volgnummer-gat", () => {
    const c = chainOf(10);
    // Shift entries 6..10 to 7..11 and rehash them so every hash and link is valid
    // except the numbering.
    let prev = (c.store.sqlite.query("SELECT hash FROM audit_entries WHERE tenant_id = ? AND seq = 5").get(c.tenant) as any).hash;
    for (let seq = 10; seq >= 6; seq--) c.q("UPDATE audit_entries SET seq = seq + 1 WHERE tenant_id = ? AND seq = ?", c.tenant, seq);
    for (let seq = 7; seq <= 11; seq++) {
      const row = c.store.sqlite.query("SELECT * FROM audit_entries WHERE tenant_id = ? AND seq = ?").get(c.tenant, seq) as any;
      const f: ChainFields = { tenantId: c.tenant, seq, createdAt: row.created_at, actor: row.actor, action: row.action, subject: row.subject, details: row.details, prevHash: prev };
      prev = entryHash(f);
      c.q("UPDATE audit_entries SET prev_hash = ?, hash = ? WHERE tenant_id = ? AND seq = ?", f.prevHash, prev, c.tenant, seq);
    }
    expect(c.verify().fout).toMatchObject({ seq: 7, reden: "volgnummer-gat" });
    c.done();
  });

  test("the oldest entries deleted without a retention record → retentie-ontbreekt at the oldest left", () => {
    const c = chainOf(10);
    c.q("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= 3", c.tenant);
    const fourth = c.store.sqlite.query("SELECT id FROM audit_entries WHERE tenant_id = ? AND seq = 4").get(c.tenant) as { id: number };
    expect(c.verify()).toEqual({ intact: false, aantalEntries: 7, fout: { seq: 4, entryId: fourth.id, reden: "retentie-ontbreekt" } });
    c.done();
  });

  test("a cut chain that starts from its signed, justified retention record is intact; a record that does not match, is not trusted or not justified is not", () => {
    const c = chainOf(10);
    const full = c.range(10);
    c.retentionRecord(3);
    c.q("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= 3", c.tenant);
    expect(c.verify()).toEqual({ intact: true, aantalEntries: 7 });
    // The tree goes on from the record's compact range: the checkpoint over all ten entries still holds.
    expect(c.verify({ size: 10, root: full.root() })).toEqual({ intact: true, aantalEntries: 7 });
    c.done();

    // A record naming another hash for entry 3: entry 4 does not link to it.
    const wrongHash = chainOf(10);
    wrongHash.retentionRecord(3, { hash: "b".repeat(64) });
    wrongHash.q("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= 3", wrongHash.tenant);
    expect(wrongHash.verify().fout).toMatchObject({ seq: 4, reden: "anker-afwijkend" });
    wrongHash.done();

    // Signed with a key that is not trusted.
    const foreign = chainOf(10);
    foreign.retentionRecord(3, { signer: parseSignerKey(generateKeyPair("nachtwacht.test/sleutel").signerKey) });
    foreign.q("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= 3", foreign.tenant);
    expect(foreign.verify().fout).toMatchObject({ seq: 4, reden: "retentie-ongeldig" });
    foreign.done();

    // Validly signed but not justified: grens later than tijdstip − 30 days.
    const unjustified = chainOf(10);
    unjustified.retentionRecord(3, { grens: "2026-07-01T00:00:00.000Z" });
    unjustified.q("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= 3", unjustified.tenant);
    expect(unjustified.verify().fout).toMatchObject({ seq: 4, reden: "retentie-ongeldig" });
    unjustified.done();
  });

  test("checkpoints: a chain that reaches its signed root is intact; a changed root and a cut-off tail are detected", () => {
    const c = chainOf(10);
    const eight = c.range(8);
    expect(c.verify({ size: 8, root: eight.root() })).toEqual({ intact: true, aantalEntries: 10 });
    expect(c.verify({ size: 8, root: new Uint8Array(32).fill(0xcc) }).fout).toMatchObject({ seq: 8, reden: "checkpoint-afwijkend" });
    c.q("DELETE FROM audit_entries WHERE tenant_id = ? AND seq >= 8", c.tenant);
    expect(c.verify({ size: 8, root: eight.root() })).toEqual({ intact: false, aantalEntries: 7, fout: { seq: 8, entryId: null, reden: "kop-ontbreekt" } });
    c.done();
  });
});

describe("appending", () => {
  test("continues from the retention anchor after the whole chain was deleted", () => {
    const c = chainOf(3);
    const last = c.store.sqlite.query("SELECT seq, hash FROM audit_entries WHERE tenant_id = ? AND seq = 3").get(c.tenant) as any;
    c.retentionRecord(3);
    c.q("DELETE FROM audit_entries WHERE tenant_id = ?", c.tenant);
    c.q("INSERT INTO audit_retention_anchors (tenant_id, seq, hash, bijgewerkt) VALUES (?, ?, ?, ?)", c.tenant, last.seq, last.hash, "2026-01-02T00:00:00.000Z");
    expect(c.verify()).toEqual({ intact: true, aantalEntries: 0 });
    const e = appendAuditEntry(c.store.sqlite, { tenantId: c.tenant, actor: "a", action: "b", subject: "c" });
    expect(e.seq).toBe(4);
    expect(e.prevHash).toBe(last.hash);
    expect(c.verify()).toEqual({ intact: true, aantalEntries: 1 });
    c.done();
  });

  test("refuses a createdAt that is not ISO UTC with milliseconds", () => {
    const c = chainOf(0);
    expect(() => appendAuditEntry(c.store.sqlite, { tenantId: c.tenant, actor: "a", action: "b", subject: "c", createdAt: "2026-01-01 10:00" })).toThrow(
      /ISO 8601/,
    );
    c.done();
  });

  test("two processes appending to the same tenant at once leave one valid chain", async () => {
    const { dir, cleanup } = tempDir();
    const path = join(dir, "race.db");
    const store = openStore(path);
    const tenant = addTenant(store, "Race");
    const script = join(import.meta.dir, "fixtures", "append-worker.ts");
    const N = 300;
    // both start at the same instant, well after both processes are up
    const startAt = String(Date.now() + 1500);
    const procs = ["A", "B"].map((name) =>
      Bun.spawn([process.execPath, script, path, String(tenant), String(N), name, startAt], { stdout: "pipe", stderr: "pipe" }),
    );
    const codes = await Promise.all(procs.map((p) => p.exited));
    const errs = await Promise.all(procs.map((p) => new Response(p.stderr).text()));
    expect(errs).toEqual(["", ""]);
    expect(codes).toEqual([0, 0]);
    const rows = store.sqlite.query("SELECT actor, count(*) AS n FROM audit_entries WHERE tenant_id = ? GROUP BY actor ORDER BY actor").all(tenant);
    expect(rows).toEqual([
      { actor: "A", n: N },
      { actor: "B", n: N },
    ]);
    // interleaved, not one after the other: the test really raced
    const firstB = store.sqlite.query("SELECT min(seq) AS s FROM audit_entries WHERE tenant_id = ? AND actor = 'B'").get(tenant) as any;
    const lastA = store.sqlite.query("SELECT max(seq) AS s FROM audit_entries WHERE tenant_id = ? AND actor = 'A'").get(tenant) as any;
    const firstA = store.sqlite.query("SELECT min(seq) AS s FROM audit_entries WHERE tenant_id = ? AND actor = 'A'").get(tenant) as any;
    const lastB = store.sqlite.query("SELECT max(seq) AS s FROM audit_entries WHERE tenant_id = ? AND actor = 'B'").get(tenant) as any;
    expect(firstB.s < lastA.s && firstA.s < lastB.s).toBe(true);
    expect(verifyTenantChain(store.sqlite, tenant, BARE)).toEqual({ intact: true, aantalEntries: 2 * N });
    store.close();
    cleanup();
  }, 60_000);
});
