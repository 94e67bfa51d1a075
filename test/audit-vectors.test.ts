// Known-answer vectors of the operator's records (test/vectors/operator-records.json):
// the adoption, the checkpoints and retention record of an adopted tree, the restore
// acceptances, and an installation checkpoint over them. Our code must reproduce every
// note byte for byte, an RFC 6962 written out here must give every root, the parsers
// must give the fields back and refuse near misses, and Go's golang.org/x/mod/sumdb
// note and tlog (test/go/peer.go) must open every note and compute the same roots.
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CompactRange, inclusionProof, inclusionProofOf, leafHashOfBytes, verifyInclusion } from "../src/audit/merkle.ts";
import { parseSignerKey, parseVerifierKey, signNote } from "../src/audit/note.ts";
import {
  openAdoptionRecord,
  openCheckpoint,
  openRestoreRecord,
  openRetentionRecord,
  openStartRecord,
  openTreeHead,
  signAdoptionRecord,
  signCheckpoint,
  signInstallationCheckpoint,
  signRestoreRecord,
  signRetentionRecord,
} from "../src/audit/records.ts";
import { chainStartFrom, ChainWalk } from "../src/audit/verify.ts";
import { ROOT } from "./binary.ts";
import { mth, rootOfEntryHashes } from "./helpers.ts";

setDefaultTimeout(180_000);

const v = JSON.parse(readFileSync(join(ROOT, "test/vectors/operator-records.json"), "utf8"));
const signer = parseSignerKey(v.signingKey);
const verifiers = [parseVerifierKey(v.verifierKey)];
const t: number = v.tenantId;
const H: string[] = v.entryHashes;
const b64 = (b: Uint8Array) => Buffer.from(b).toString("base64");
const bytes = (s: string) => new Uint8Array(Buffer.from(s, "base64"));

/** The root over entries from..to (seq numbers, inclusive), by RFC 6962 written out in test/helpers.ts. */
const rootOver = (from: number, to: number) => rootOfEntryHashes(H.slice(from - 1, to));
const range = (from: number, to: number) => {
  const r = new CompactRange();
  for (let s = from; s <= to; s++) r.pushEntryHash(H[s - 1]!);
  return r;
};

describe("RFC 6962 inclusion proofs", () => {
  test("every leaf of trees of 1 to 70 leaves: the audit path verifies against the RFC's root (mth), also streamed from a longer list; another leaf, index or root does not", () => {
    const data = Array.from({ length: 75 }, (_, i) => new TextEncoder().encode(`blad ${i}`));
    const hashes = data.map((d) => leafHashOfBytes(d));
    for (let n = 1; n <= 70; n++) {
      const root = mth(data.slice(0, n));
      for (let i = 0; i < n; i++) {
        const proof = inclusionProof(hashes.slice(0, n), i);
        expect(verifyInclusion(hashes[i]!, i, n, proof, root)).toBe(true);
        // Streamed: only the first n leaves of the longer list are read.
        expect(inclusionProofOf(hashes, n, i).map((h) => Buffer.from(h).toString("hex"))).toEqual(proof.map((h) => Buffer.from(h).toString("hex")));
        expect(verifyInclusion(hashes[(i + 1) % 75]!, i, n, proof, root)).toBe(false);
        if (n > 1) expect(verifyInclusion(hashes[i]!, (i + 1) % n, n, proof, root)).toBe(false);
        expect(verifyInclusion(hashes[i]!, i, n, proof, mth(data.slice(0, n + 1)))).toBe(false);
      }
    }
    expect(() => inclusionProofOf(hashes.slice(0, 3), 5, 1)).toThrow("a tree of 5 leaves, but only 3 given");
  });
});

describe("known-answer vectors of the operator's records", () => {
  test("our code reproduces every note byte for byte; the roots are RFC 6962's over the entries after the adoption", () => {
    expect(signer.verifierKey).toBe(v.verifierKey);
    const a = v.adoption;
    expect(signAdoptionRecord(signer, { tenantId: t, seq: a.seq, hash: a.hash, tijdstip: a.tijdstip })).toBe(a.note);
    expect(a.hash).toBe(H[a.seq - 1]); // the prev_hash of entry 4 is entry 3's hash
    for (const c of v.adoptedCheckpoints) {
      const r = range(a.seq + 1, c.seq);
      expect({ size: r.size, root: b64(r.root()), bereik: r.encode(), note: signCheckpoint(signer, t, r, a.seq) }).toEqual({ size: c.size, root: c.root, bereik: c.bereik, note: c.note });
      expect(c.root).toBe(rootOver(a.seq + 1, c.seq));
      expect(c.size).toBe(c.seq - a.seq);
    }
    const ret = v.adoptedRetention;
    expect(signRetentionRecord(signer, { tenantId: t, ...ret, bereik: CompactRange.decode(ret.seq - ret.basis, ret.bereik) })).toBe(ret.note);
    expect(CompactRange.decode(ret.seq - ret.basis, ret.bereik).root()).toEqual(bytes(rootOver(ret.basis + 1, ret.seq)));
    for (const h of v.restores) {
      expect(signRestoreRecord(signer, { tenantId: t, basis: h.basis, van: h.van, vanRoot: bytes(h.vanRoot), naar: h.naar, root: bytes(h.root), tijdstip: h.tijdstip })).toBe(h.note);
      expect([h.vanRoot, h.root]).toEqual([rootOver(h.basis + 1, h.van), rootOver(h.basis + 1, h.naar)]);
    }
    // The first restore acceptance goes back from the size-9 checkpoint of checkpoints.json.
    const base = JSON.parse(readFileSync(join(ROOT, "test/vectors/checkpoints.json"), "utf8"));
    expect(v.restores[0].vanRoot).toBe(base.checkpoints.find((c: { size: number }) => c.size === 9).root);
    const inst = new CompactRange();
    for (const n of [a.note, v.adoptedCheckpoints.at(-1).note, v.restores[0].note]) inst.pushLeafHash(leafHashOfBytes(Buffer.from(n, "utf8")));
    expect(b64(inst.root())).toBe(v.installation.root);
    expect(b64(mth([a.note, v.adoptedCheckpoints.at(-1).note, v.restores[0].note].map((n) => new Uint8Array(Buffer.from(n, "utf8")))))).toBe(v.installation.root);
    expect(signInstallationCheckpoint(signer, inst)).toBe(v.installation.note);
  });

  test("docs/audit-chain.md shows the adoption, the adopted checkpoint and retention record and the restore acceptance verbatim", () => {
    const doc = readFileSync(join(ROOT, "docs/audit-chain.md"), "utf8");
    for (const n of [v.adoption.note, v.adoptedCheckpoints.at(-1).note, v.adoptedRetention.note, v.restores[0].note]) expect(doc).toContain("```\n" + n + "```");
    expect(doc).toContain(v.installation.root);
  });

  test("the parsers give the fields back; a chain whose oldest entry is 4 starts from the adoption, with its tree's basis", () => {
    expect(openAdoptionRecord(v.adoption.note, t, verifiers)).toEqual({ ok: true, record: { tenantId: t, seq: 3, hash: v.adoption.hash, tijdstip: v.adoption.tijdstip } });
    const cp = v.adoptedCheckpoints.at(-1);
    expect(openTreeHead(cp.note, t, verifiers)).toEqual({ ok: true, head: { soort: "checkpoint", basis: 3, size: 9, root: bytes(cp.root) } });
    expect(openCheckpoint(cp.note, t, verifiers)).toMatchObject({ ok: true, basis: 3, checkpoint: { size: 6 } });
    const ret = openRetentionRecord(v.adoptedRetention.note, t, verifiers);
    expect(ret.ok && { seq: ret.record.seq, basis: ret.record.basis, size: ret.record.bereik.size }).toEqual({ seq: 5, basis: 3, size: 2 });
    const h = openRestoreRecord(v.restores[1].note, t, verifiers);
    expect(h.ok && { basis: h.record.basis, van: h.record.van, naar: h.record.naar }).toEqual({ basis: 3, van: 9, naar: 7 });
    expect(openTreeHead(v.restores[0].note, t, verifiers)).toEqual({ ok: true, head: { soort: "herstel", basis: 0, size: 6, root: bytes(v.restores[0].root) } });

    const start = chainStartFrom([v.adoption.note], t, 4, verifiers);
    expect(start).toMatchObject({ ok: true, seq: 3, hash: v.adoption.hash, basis: 3, record: null, adoption: { seq: 3 } });
    // With the retention record of the adopted tree after it, a chain from entry 6 starts there, in the same tree.
    expect(chainStartFrom([v.adoptedRetention.note, v.adoption.note], t, 6, verifiers)).toMatchObject({ ok: true, seq: 5, basis: 3 });
    // An adoption at 3 does not cover a chain that starts at entry 6.
    expect(chainStartFrom([v.adoption.note], t, 6, verifiers)).toEqual({ ok: false, reden: "retentie-ongeldig" });
  });

  test("a head of another tree is never reached, even where its size and root would fit: checkpoint-afwijkend", () => {
    // The adopted tree at its adoption point is empty (seq 3, root of no leaves); a head
    // claiming seq 3 with that root, but from genesis, is another tree's.
    const start = chainStartFrom([v.adoption.note], t, null, verifiers);
    if (!start.ok) throw new Error("the adoption opens");
    const empty = new CompactRange().root();
    expect(new ChainWalk(t, start, null, { size: 3, root: empty, basis: 3 }).result()).toEqual({ intact: true, aantalEntries: 0 });
    expect(new ChainWalk(t, start, null, { size: 3, root: empty, basis: 0 }).result()).toEqual({ intact: false, aantalEntries: 0, fout: { seq: 3, entryId: null, reden: "checkpoint-afwijkend" } });
    expect(new ChainWalk(t, start, null, { size: 3, root: empty }).result()).toMatchObject({ intact: false });
  });

  test("near misses are refused: no kind opens as another, another tenant's or another basis's origin, a leading zero, another reden", () => {
    const sign = (text: string) => signNote(text, signer);
    // Kinds do not cross.
    expect(openTreeHead(v.adoption.note, t, verifiers).ok).toBe(false);
    expect(openTreeHead(v.adoptedRetention.note, t, verifiers).ok).toBe(false);
    expect(openTreeHead(v.restores[0].note, t, verifiers, "checkpoint").ok).toBe(false);
    expect(openTreeHead(v.adoptedCheckpoints[0].note, t, verifiers, "herstel").ok).toBe(false);
    expect(openStartRecord(v.adoptedCheckpoints[0].note, t, verifiers).ok).toBe(false);
    expect(openStartRecord(v.restores[0].note, t, verifiers).ok).toBe(false);
    expect(openAdoptionRecord(v.adoptedRetention.note, t, verifiers).ok).toBe(false);
    // Another tenant (7 vs 70 and 77 share a prefix).
    for (const other of [70, 77, 8]) {
      expect(openAdoptionRecord(v.adoption.note, other, verifiers).ok).toBe(false);
      expect(openTreeHead(v.adoptedCheckpoints[0].note, other, verifiers).ok).toBe(false);
      expect(openRetentionRecord(v.adoptedRetention.note, other, verifiers).ok).toBe(false);
    }
    // Origins that are almost a tree's.
    const body = v.adoptedCheckpoints[1].note.split("\n").slice(1, 3).join("\n") + "\n";
    for (const origin of [`nachtwacht.test/sleutel/tenant/${t}/adoptie/03`, `nachtwacht.test/sleutel/tenant/${t}/adoptie/`, `nachtwacht.test/sleutel/tenant/${t}/adoptie`, `nachtwacht.test/sleutel/tenant/${t}/adoptie/3/x`]) {
      expect({ origin, ok: openTreeHead(sign(`${origin}\n${body}`), t, verifiers).ok }).toEqual({ origin, ok: false });
    }
    // An adoption with another reden, or an extra line; a retention record whose range does not fit the adopted tree.
    expect(openAdoptionRecord(sign(v.adoption.note.split("\n\n")[0].replace("reden eerdere-versie-zonder-retentierecord", "reden anders") + "\n"), t, verifiers).ok).toBe(false);
    expect(openAdoptionRecord(sign(v.adoption.note.split("\n\n")[0] + "\nextra 1\n"), t, verifiers).ok).toBe(false);
    expect(openAdoptionRecord(sign(v.adoption.note.split("\n\n")[0].replace("seq 3", "seq 03") + "\n"), t, verifiers).ok).toBe(false);
    const retText = v.adoptedRetention.note.split("\n\n")[0] + "\n";
    expect(openRetentionRecord(sign(retText.replace(`/adoptie/3/retentie`, `/retentie`)), t, verifiers).ok).toBe(false); // range of 2 for seq 5 from genesis
    expect(openRetentionRecord(sign(retText.replace(`/adoptie/3/retentie`, `/adoptie/5/retentie`)), t, verifiers).ok).toBe(false); // seq not past the basis
    // A restore acceptance going below its tree's basis.
    expect(openRestoreRecord(sign(v.restores[1].note.split("\n\n")[0].replace("naar 7", "naar 2") + "\n"), t, verifiers).ok).toBe(false);
  });

  test("Go's note.Open opens every vector note, reads the adopted checkpoints as checkpoints of their own origin and nothing else as one; tlog computes the same roots", async () => {
    const GOPATH = "/usr/share/gocode";
    if (!Bun.which("go") || !existsSync(join(GOPATH, "src/golang.org/x/mod/sumdb/note"))) {
      throw new Error("this test needs Go and golang.org/x/mod: apt-get install golang-go golang-golang-x-mod-dev (.ci/run does)");
    }
    const notes: string[] = [v.adoption.note, ...v.adoptedCheckpoints.map((c: { note: string }) => c.note), v.adoptedRetention.note, ...v.restores.map((r: { note: string }) => r.note), v.installation.note];
    const leaves = (from: number, to: number) => H.slice(from - 1, to).map((h) => b64(Buffer.from(h, "hex")));
    const trees = [
      ...v.adoptedCheckpoints.map((c: { seq: number }) => ({ leaves: leaves(4, c.seq), proofs: [], check: [] })),
      ...v.restores.map((r: { basis: number; naar: number }) => ({ leaves: leaves(r.basis + 1, r.naar), proofs: [], check: [] })),
    ];
    const cache = mkdtempSync(join(tmpdir(), "nachtwacht-go-"));
    let go: { notes: { ok: boolean; origin?: string; size?: number; root?: string }[]; trees: { root: string }[] };
    try {
      const p = Bun.spawn(["go", "run", join(ROOT, "test/go/peer.go")], {
        env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: cache, GO111MODULE: "off", GOPATH, GOCACHE: join(cache, "build"), GOFLAGS: "" },
        stdin: new Blob([JSON.stringify({ vkeys: [v.verifierKey], notes, trees })]),
        stdout: "pipe",
        stderr: "pipe",
      });
      const [code, out, err] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
      if (code !== 0) throw new Error(`go peer failed (${code}): ${err}`);
      go = JSON.parse(out);
    } finally {
      rmSync(cache, { recursive: true, force: true });
    }
    expect(go.notes.every((n) => n.ok)).toBe(true);
    // Only the checkpoints (and the installation checkpoint) have a checkpoint body.
    expect(go.notes.map((n) => n.origin ?? "")).toEqual([
      "",
      `nachtwacht.test/sleutel/tenant/${t}/adoptie/3`,
      `nachtwacht.test/sleutel/tenant/${t}/adoptie/3`,
      "",
      "",
      "",
      "nachtwacht.test/sleutel/installatie",
    ]);
    v.adoptedCheckpoints.forEach((c: { size: number; root: string }, i: number) => {
      expect(go.notes[1 + i]).toMatchObject({ size: c.size, root: c.root });
      expect(go.trees[i]!.root).toBe(c.root);
    });
    v.restores.forEach((r: { root: string }, i: number) => expect(go.trees[v.adoptedCheckpoints.length + i]!.root).toBe(r.root));
  });
});
