import { describe, expect, test } from "bun:test";
import type { Database } from "bun:sqlite";
import { appendFileSync, existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { anchorText, loadHeadAnchors, signAnchor, verifyAnchorSignature, withAnchorSignatures } from "../src/audit/anchors.ts";
import { appendAuditEntry, entryHash } from "../src/audit/chain.ts";
import { verifyTenantChain } from "../src/audit/verify.ts";
import { runAuditAnker } from "../src/jobs/audit-anker.ts";
import { addTenant, call, makeTestEnv, NOW, type TestEnv } from "./helpers.ts";

const KEY = "anker-sleutel-0123456789abcdef0123456789";
const REPO = join(import.meta.dir, "..");

function chain(env: TestEnv, tenantId: number, n: number, startMs = NOW.getTime() - 3600_000) {
  for (let i = 0; i < n; i++) {
    appendAuditEntry(env.store.sqlite, {
      tenantId,
      actor: "anna@x.nl",
      action: "dossier.bekeken",
      subject: `dossier/${i}`,
      details: { i },
      createdAt: new Date(startMs + i * 1000),
    });
  }
}

/**
 * What someone who can write the database does to hide an edit: change entry `from`,
 * then recompute every hash and prevHash after it. The result is a valid SHA-256 chain.
 */
function rewriteChainFrom(sqlite: Database, tenantId: number, from: number) {
  const rows = sqlite
    .query("SELECT seq, created_at, actor, action, subject, details, prev_hash FROM audit_entries WHERE tenant_id = ? AND seq >= ? ORDER BY seq")
    .all(tenantId, from) as { seq: number; created_at: string; actor: string; action: string; subject: string; details: string; prev_hash: string }[];
  let prev = rows[0]!.prev_hash;
  const upd = sqlite.query("UPDATE audit_entries SET subject = ?, prev_hash = ?, hash = ? WHERE tenant_id = ? AND seq = ?");
  for (const r of rows) {
    const subject = r.seq === from ? "dossier/verborgen" : r.subject;
    const hash = entryHash({ tenantId, seq: r.seq, createdAt: r.created_at, actor: r.actor, action: r.action, subject, details: r.details, prevHash: prev });
    upd.run(subject, prev, hash, tenantId, r.seq);
    prev = hash;
  }
}

const fileLines = (path: string) =>
  readFileSync(path, "utf8")
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => JSON.parse(l));

async function verifyAnchorsCommand(dbPath: string, file: string, key: string | null) {
  const env: Record<string, string | undefined> = { ...process.env, AUDIT_ANKER_SLEUTEL: key ?? undefined };
  if (key === null) delete env.AUDIT_ANKER_SLEUTEL;
  const proc = Bun.spawn([process.execPath, "run", "src/cli/verify-anchors.ts", "--db", dbPath, "--bestand", file], {
    cwd: REPO,
    env,
    stdout: "pipe",
    stderr: "pipe",
  });
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  return { code, out: out + err };
}

describe("audit-anker", () => {
  test("records each tenant's head, signed, in the database and as a JSON line in the append-only file", async () => {
    const env = makeTestEnv({ AUDIT_ANKER_SLEUTEL: KEY });
    try {
      const file = join(env.dir, "sub", "ankers.jsonl"); // directory does not exist yet
      env.deps.config.auditAnkerBestand = file;
      const a = addTenant(env.store, "A");
      const b = addTenant(env.store, "B");
      addTenant(env.store, "Leeg"); // no entries: nothing to anchor
      chain(env, a, 5);
      chain(env, b, 3);
      const headA = env.store.sqlite.query("SELECT hash FROM audit_entries WHERE tenant_id = ? AND seq = 5").get(a) as { hash: string };

      const res = await call(env.app, "/api/cron/audit-anker");
      expect(res.status).toBe(200);
      expect(res.json).toMatchObject({ ok: true, ondertekend: true, aantal: 2, ongewijzigd: 0, bestand: file });
      expect(res.json.waarschuwing).toBeUndefined();
      expect(res.json.ankers[0]).toEqual({ tenantId: a, seq: 5, hash: headA.hash });

      const rows = env.store.sqlite.query("SELECT tenant_id, seq, hash, tijdstip, handtekening FROM audit_head_anchors ORDER BY tenant_id").all() as {
        tenant_id: number;
        seq: number;
        hash: string;
        tijdstip: string;
        handtekening: string;
      }[];
      expect(rows.map((r) => [r.tenant_id, r.seq])).toEqual([[a, 5], [b, 3]]);
      expect(rows[0]!.tijdstip).toBe(NOW.toISOString());
      expect(rows[0]!.handtekening).toMatch(/^[0-9a-f]{64}$/);
      expect(verifyAnchorSignature(KEY, { tenantId: a, seq: 5, hash: headA.hash, tijdstip: NOW.toISOString() }, rows[0]!.handtekening)).toBe(true);

      const lines = fileLines(file);
      expect(lines).toEqual(rows.map((r) => ({ tenantId: r.tenant_id, seq: r.seq, hash: r.hash, tijdstip: r.tijdstip, handtekening: r.handtekening })));

      // Unchanged heads are not anchored again; a moved head is, and the file only grows.
      chain(env, b, 2, NOW.getTime());
      env.setNow(new Date(NOW.getTime() + 86_400_000));
      const again = await call(env.app, "/api/cron/audit-anker");
      expect(again.json).toMatchObject({ aantal: 1, ongewijzigd: 1, ankers: [{ tenantId: b, seq: 5 }] });
      const after = fileLines(file);
      expect(after.slice(0, 2)).toEqual(lines);
      expect(after).toHaveLength(3);
    } finally {
      env.cleanup();
    }
  });

  test("without AUDIT_ANKER_SLEUTEL the anchors are unsigned and the response says so", async () => {
    const env = makeTestEnv();
    try {
      chain(env, addTenant(env.store), 2);
      const r = await runAuditAnker(env.deps, NOW);
      expect(r.status).toBe(200);
      expect(r.body.ondertekend).toBe(false);
      expect(r.body.waarschuwing).toContain("AUDIT_ANKER_SLEUTEL");
      expect(fileLines(env.config.auditAnkerBestand)[0].handtekening).toBeNull();
      // Once a key is set, the head is anchored again, signed, even though it did not move.
      env.deps.config.auditAnkerSleutel = KEY;
      const signed = await runAuditAnker(env.deps, NOW);
      expect(signed.body).toMatchObject({ ondertekend: true, aantal: 1, ongewijzigd: 0 });
    } finally {
      env.cleanup();
    }
  });

  test("the signature covers tenant, seq, hash and time in a fixed canonical text", () => {
    const facts = { tenantId: 7, seq: 42, hash: "ab".repeat(32), tijdstip: "2026-07-23T12:00:00.000Z" };
    expect(anchorText(facts)).toBe(`["nachtwacht-anker-v1",7,42,"${"ab".repeat(32)}","2026-07-23T12:00:00.000Z"]`);
    const sig = signAnchor(KEY, facts);
    expect(verifyAnchorSignature(KEY, facts, sig)).toBe(true);
    expect(verifyAnchorSignature(KEY, { ...facts, seq: 43 }, sig)).toBe(false);
    expect(verifyAnchorSignature(KEY, { ...facts, tenantId: 8 }, sig)).toBe(false);
    expect(verifyAnchorSignature(KEY, { ...facts, tijdstip: "2026-07-24T12:00:00.000Z" }, sig)).toBe(false);
    expect(verifyAnchorSignature("een-andere-sleutel-0123456789abcdef", facts, sig)).toBe(false);
    expect(verifyAnchorSignature(KEY, facts, null)).toBe(false);
    expect(verifyAnchorSignature(KEY, facts, "zz")).toBe(false);
  });

  test("signed anchors of an untouched chain: audit-verificatie stays 200", async () => {
    const env = makeTestEnv({ AUDIT_ANKER_SLEUTEL: KEY });
    try {
      const t = addTenant(env.store);
      chain(env, t, 4);
      await runAuditAnker(env.deps, NOW);
      chain(env, t, 3, NOW.getTime());
      await runAuditAnker(env.deps, NOW);
      expect(loadHeadAnchors(env.store.sqlite, t, KEY)).toEqual({ anchors: [{ seq: 4, hash: expect.any(String) }, { seq: 7, hash: expect.any(String) }], gecontroleerd: true });
      const res = await call(env.app, "/api/cron/audit-verificatie");
      expect(res.status).toBe(200);
      expect(res.json.resultaten[0]).toMatchObject({ intact: true, aantalEntries: 7 });
    } finally {
      env.cleanup();
    }
  });

  test("tail truncation after an anchor → kop-ontbreekt (the bare chain still looks intact)", async () => {
    const env = makeTestEnv({ AUDIT_ANKER_SLEUTEL: KEY });
    try {
      const t = addTenant(env.store);
      chain(env, t, 10);
      await runAuditAnker(env.deps, NOW);
      env.store.sqlite.run("DELETE FROM audit_entries WHERE seq > 7");

      expect(verifyTenantChain(env.store.sqlite, t).intact).toBe(true);
      const loaded = loadHeadAnchors(env.store.sqlite, t, KEY);
      expect(loaded.invalid).toBeUndefined();
      expect(verifyTenantChain(env.store.sqlite, t, { headAnchors: loaded.anchors })).toEqual({
        intact: false,
        aantalEntries: 7,
        fout: { seq: 10, entryId: null, reden: "kop-ontbreekt" },
      });

      const res = await call(env.app, "/api/cron/audit-verificatie");
      expect(res.status).toBe(409);
      expect(res.json.resultaten[0].fout).toEqual({ seq: 10, entryId: null, reden: "kop-ontbreekt" });
    } finally {
      env.cleanup();
    }
  });

  test("a chain fully recomputed with valid SHA-256 hashes is caught by the signed anchor → anker-afwijkend", async () => {
    const env = makeTestEnv({ AUDIT_ANKER_SLEUTEL: KEY });
    try {
      const t = addTenant(env.store);
      chain(env, t, 10);
      await runAuditAnker(env.deps, NOW);
      rewriteChainFrom(env.store.sqlite, t, 4);

      // Every hash and link is valid again: without anchors nothing is found.
      expect(verifyTenantChain(env.store.sqlite, t)).toEqual({ intact: true, aantalEntries: 10 });
      const loaded = loadHeadAnchors(env.store.sqlite, t, KEY);
      const r = verifyTenantChain(env.store.sqlite, t, { headAnchors: loaded.anchors });
      expect(r.intact).toBe(false);
      expect(r.fout).toMatchObject({ seq: 10, reden: "anker-afwijkend" });

      const res = await call(env.app, "/api/cron/audit-verificatie");
      expect(res.status).toBe(409);
      expect(res.json.resultaten[0].fout).toMatchObject({ seq: 10, reden: "anker-afwijkend" });
    } finally {
      env.cleanup();
    }
  });

  test("a forged anchor written into the database without the key is detected (signature invalid or missing)", async () => {
    const env = makeTestEnv({ AUDIT_ANKER_SLEUTEL: KEY });
    try {
      const { sqlite } = env.store;
      const t = addTenant(env.store);
      chain(env, t, 10);
      await runAuditAnker(env.deps, NOW);
      // The attacker recomputes the chain and makes the stored anchor match it: new hash,
      // and a signature made with a key of their own.
      rewriteChainFrom(sqlite, t, 4);
      const head = sqlite.query("SELECT hash FROM audit_entries WHERE tenant_id = ? AND seq = 10").get(t) as { hash: string };
      const forged = signAnchor("niet-de-echte-sleutel-0123456789abcdef", { tenantId: t, seq: 10, hash: head.hash, tijdstip: NOW.toISOString() });
      sqlite.query("UPDATE audit_head_anchors SET hash = ?, handtekening = ? WHERE tenant_id = ?").run(head.hash, forged, t);

      // Taken at face value the anchor now agrees with the rewritten chain...
      const unchecked = loadHeadAnchors(sqlite, t, null);
      expect(verifyTenantChain(sqlite, t, { headAnchors: unchecked.anchors }).intact).toBe(true);
      // ...but its signature does not hold under the real key.
      const loaded = loadHeadAnchors(sqlite, t, KEY);
      expect(loaded.invalid).toMatchObject({ seq: 10, reden: "anker-afwijkend", probleem: "handtekening-ongeldig" });
      expect(loaded.anchors).toEqual([]);
      const r = withAnchorSignatures(sqlite, t, verifyTenantChain(sqlite, t, { headAnchors: loaded.anchors }), loaded);
      const entry10 = sqlite.query("SELECT id FROM audit_entries WHERE tenant_id = ? AND seq = 10").get(t) as { id: number };
      expect(r).toEqual({ intact: false, aantalEntries: 10, fout: { seq: 10, entryId: entry10.id, reden: "anker-afwijkend" } });
      const res = await call(env.app, "/api/cron/audit-verificatie");
      expect(res.status).toBe(409);
      expect(res.json.resultaten[0].fout).toEqual({ seq: 10, entryId: entry10.id, reden: "anker-afwijkend" });

      // Clearing the signature instead does not help: with a key, unsigned counts as invalid.
      sqlite.query("UPDATE audit_head_anchors SET handtekening = NULL WHERE tenant_id = ?").run(t);
      expect(loadHeadAnchors(sqlite, t, KEY).invalid?.probleem).toBe("handtekening-ontbreekt");
    } finally {
      env.cleanup();
    }
  });

  test("verify-anchors (a separate process, key from the environment): 0 for a sound database, 1 for a tampered or truncated one", async () => {
    const env = makeTestEnv({ AUDIT_ANKER_SLEUTEL: KEY });
    try {
      const { sqlite } = env.store;
      const a = addTenant(env.store, "A");
      const b = addTenant(env.store, "B");
      chain(env, a, 6);
      chain(env, b, 4);
      await runAuditAnker(env.deps, NOW);
      chain(env, a, 2, NOW.getTime()); // newer entries after the anchor are fine
      const file = env.config.auditAnkerBestand;
      const dbPath = env.store.path;
      sqlite.run("PRAGMA wal_checkpoint(TRUNCATE)");

      const good = await verifyAnchorsCommand(dbPath, file, KEY);
      expect(good.out).toContain("RESULTAAT: de database klopt met het ankerbestand.");
      expect(good.code).toBe(0);

      // Anchors deleted from the database do not matter: the file is the reference.
      sqlite.run("DELETE FROM audit_head_anchors");
      rewriteChainFrom(sqlite, b, 2);
      sqlite.run("PRAGMA wal_checkpoint(TRUNCATE)");
      const tampered = await verifyAnchorsCommand(dbPath, file, KEY);
      expect(tampered.code).toBe(1);
      expect(tampered.out).toContain(`tenant ${b}: GEBROKEN bij seq 4: anker-afwijkend`);
      expect(tampered.out).toContain(`tenant ${a}: in orde`);

      // A forged line appended to the file is reported as such.
      appendFileSync(file, JSON.stringify({ tenantId: a, seq: 8, hash: "0".repeat(64), tijdstip: NOW.toISOString(), handtekening: "f".repeat(64) }) + "\n");
      const forgedLine = await verifyAnchorsCommand(dbPath, file, KEY);
      expect(forgedLine.code).toBe(1);
      expect(forgedLine.out).toContain("regel 3: handtekening ongeldig");
    } finally {
      env.cleanup();
    }
  });

  test("verify-anchors finds a cut-off tail, and warns when it cannot check signatures", async () => {
    const env = makeTestEnv({ AUDIT_ANKER_SLEUTEL: KEY });
    try {
      const t = addTenant(env.store);
      chain(env, t, 5);
      await runAuditAnker(env.deps, NOW);
      env.store.sqlite.run("DELETE FROM audit_entries WHERE seq = 5");
      env.store.sqlite.run("PRAGMA wal_checkpoint(TRUNCATE)");
      const r = await verifyAnchorsCommand(env.store.path, env.config.auditAnkerBestand, null);
      expect(r.code).toBe(1);
      expect(r.out).toContain("kop-ontbreekt");
      expect(r.out).toContain("AUDIT_ANKER_SLEUTEL is niet gezet");
      expect(r.out).not.toContain(KEY);

      const missing = await verifyAnchorsCommand(env.store.path, join(env.dir, "bestaat-niet.jsonl"), KEY);
      expect(missing.code).toBe(2);
      expect(existsSync(join(env.dir, "bestaat-niet.jsonl"))).toBe(false);
    } finally {
      env.cleanup();
    }
  });
});
