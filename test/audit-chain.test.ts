import { describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { join } from "node:path";
import vectors from "./vectors/audit-chain.json" with { type: "json" };
import { appendAuditEntry, canonicalJson, canonicalText, entryHash, GENESIS_HASH, type ChainFields } from "../src/audit/chain.ts";
import { verifyTenantChain } from "../src/audit/verify.ts";
import { openStore } from "../src/db.ts";
import { addTenant, tempDir } from "./helpers.ts";

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
  return {
    store,
    tenant,
    q,
    verify: () => verifyTenantChain(store.sqlite, tenant),
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

  test("the oldest entries deleted without a retention anchor → anker-afwijkend", () => {
    const c = chainOf(10);
    c.q("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= 3", c.tenant);
    expect(c.verify().fout).toMatchObject({ seq: 4, reden: "anker-afwijkend" });
    c.done();
  });

  test("a cut chain that follows its retention anchor is intact", () => {
    const c = chainOf(10);
    const third = c.store.sqlite.query("SELECT seq, hash FROM audit_entries WHERE tenant_id = ? AND seq = 3").get(c.tenant) as any;
    c.q("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= 3", c.tenant);
    expect(verifyTenantChain(c.store.sqlite, c.tenant, { retentionAnchor: third })).toEqual({ intact: true, aantalEntries: 7 });
    expect(verifyTenantChain(c.store.sqlite, c.tenant, { retentionAnchor: { seq: 3, hash: "b".repeat(64) } }).fout).toMatchObject({
      seq: 4,
      reden: "anker-afwijkend",
    });
    c.done();
  });

  test("head anchors: a changed anchored entry and a cut-off tail are detected", () => {
    const c = chainOf(10);
    const eighth = c.store.sqlite.query("SELECT seq, hash FROM audit_entries WHERE tenant_id = ? AND seq = 8").get(c.tenant) as any;
    expect(verifyTenantChain(c.store.sqlite, c.tenant, { headAnchors: [eighth] }).intact).toBe(true);
    expect(verifyTenantChain(c.store.sqlite, c.tenant, { headAnchors: [{ seq: 8, hash: "c".repeat(64) }] }).fout).toMatchObject({
      seq: 8,
      reden: "anker-afwijkend",
    });
    c.q("DELETE FROM audit_entries WHERE tenant_id = ? AND seq >= 8", c.tenant);
    expect(verifyTenantChain(c.store.sqlite, c.tenant, { headAnchors: [eighth] }).fout).toEqual({
      seq: 8,
      entryId: null,
      reden: "kop-ontbreekt",
    });
    c.done();
  });
});

describe("appending", () => {
  test("continues from the retention anchor after the whole chain was deleted", () => {
    const c = chainOf(3);
    const last = c.store.sqlite.query("SELECT seq, hash FROM audit_entries WHERE tenant_id = ? AND seq = 3").get(c.tenant) as any;
    c.q("DELETE FROM audit_entries WHERE tenant_id = ?", c.tenant);
    c.q("INSERT INTO audit_retention_anchors (tenant_id, seq, hash, bijgewerkt) VALUES (?, ?, ?, ?)", c.tenant, last.seq, last.hash, "2026-01-02T00:00:00.000Z");
    const e = appendAuditEntry(c.store.sqlite, { tenantId: c.tenant, actor: "a", action: "b", subject: "c" });
    expect(e.seq).toBe(4);
    expect(e.prevHash).toBe(last.hash);
    expect(verifyTenantChain(c.store.sqlite, c.tenant, { retentionAnchor: last }).intact).toBe(true);
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
    expect(verifyTenantChain(store.sqlite, tenant)).toEqual({ intact: true, aantalEntries: 2 * N });
    store.close();
    cleanup();
  }, 60_000);
});
