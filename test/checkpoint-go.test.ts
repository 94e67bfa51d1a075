// The formats against a real peer: Go's golang.org/x/mod/sumdb/note opens every note
// nachtwacht signs, and golang.org/x/mod/sumdb/tlog computes the same RFC 6962 roots and
// inclusion proofs (test/go/peer.go; Debian's golang-go and golang-golang-x-mod-dev).
// The other way round too: a note Go signs opens with our code, and Go's key strings
// parse. And the known-answer vectors of test/vectors/checkpoints.json.
import { afterEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { anchorAll } from "../src/audit/anchoring.ts";
import { runAuditRetentie } from "../src/jobs/audit-retentie.ts";
import { appendEntries, canonicalJson, type AppendedEntry, type ChainInput } from "../src/audit/chain.ts";
import { auditKeys } from "../src/audit/keys.ts";
import { CompactRange, inclusionProof, leafHashOfBytes, leafHashOfHex } from "../src/audit/merkle.ts";
import { generateKeyPair, openNote, parseSignerKey, parseVerifierKey, signNote, verifierKeyString } from "../src/audit/note.ts";
import { signCheckpoint, signInstallationCheckpoint, signRetentionRecord, parseAnchorLineText } from "../src/audit/records.ts";
import type { AnyStore } from "../src/deps.ts";
import { anchorAllPg } from "../src/pg/anchoring.ts";
import { appendEntriesPg } from "../src/pg/chain.ts";
import { runAuditCommand } from "../src/cli/audit.ts";
import { ROOT } from "./binary.ts";
import { NOW, TEST_VERIFIER_KEY } from "./helpers.ts";
import { addTenant, makeEnv, type Env } from "./dialect.ts";

// `go run` compiles the peer first: a generous bound (a hang is the failure).
setDefaultTimeout(180_000);

let env: Env | undefined;
afterEach(() => env?.cleanup());

/** Appends entries as the write API does, on either store, and returns them as stored. */
async function append(store: AnyStore, inputs: ChainInput[]): Promise<AppendedEntry[]> {
  if (store.kind === "sqlite") return store.sqlite.transaction(() => appendEntries(store.sqlite, inputs)).immediate();
  return store.sql.begin((tx) => appendEntriesPg(tx, inputs));
}

/** One audit-anker run's work on the env's store (anchorAll, anchorAllPg). */
function anchor(e: Env) {
  const keys = auditKeys(e.config);
  if (e.store.kind === "sqlite") return anchorAll(e.store.sqlite, e.store.path, e.config.auditAnkerBestand, keys);
  return anchorAllPg(e.store.sql, e.config.auditAnkerBestand, keys);
}

const GOPATH = "/usr/share/gocode";
const b64 = (b: Uint8Array) => Buffer.from(b).toString("base64");

interface GoAnswer {
  keys: string[] | null;
  notes: { ok: boolean; error?: string; text?: string; origin?: string; size?: number; root?: string }[] | null;
  trees: { root: string; proofs: Record<string, string[]>; checks: string[] | null }[] | null;
  sign?: { skey: string; vkey: string; note: string };
}

async function goPeer(request: unknown): Promise<GoAnswer> {
  if (!Bun.which("go") || !existsSync(join(GOPATH, "src/golang.org/x/mod/sumdb/note"))) {
    throw new Error("this test needs Go and golang.org/x/mod: apt-get install golang-go golang-golang-x-mod-dev (.ci/run does)");
  }
  const cache = mkdtempSync(join(tmpdir(), "nachtwacht-go-"));
  try {
    const p = Bun.spawn(["go", "run", join(ROOT, "test/go/peer.go")], {
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: cache, GO111MODULE: "off", GOPATH, GOCACHE: join(cache, "build"), GOFLAGS: "" },
      stdin: new Blob([JSON.stringify(request)]),
      stdout: "pipe",
      stderr: "pipe",
    });
    const [code, out, err] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
    if (code !== 0) throw new Error(`go peer failed (${code}): ${err}`);
    return JSON.parse(out) as GoAnswer;
  } finally {
    rmSync(cache, { recursive: true, force: true });
  }
}

describe("what nachtwacht signs, checked by Go's note and tlog", () => {
  test("every checkpoint, retention record and installation checkpoint of a real run opens with note.Open; the roots are tlog's; our inclusion proofs are tlog's", async () => {
    env = await makeEnv({ AUDIT_RETENTIE_DAGEN: "900" });
    // Odd, even and power-of-two trees; sizes 1 to 3 are in the vectors below.
    const sizes = [4, 5, 7, 8, 9, 16, 33];
    const hashes = new Map<number, string[]>();
    for (const n of sizes) {
      const t = await addTenant(env.db, `T${n}`);
      const inputs: ChainInput[] = [];
      for (let i = 0; i < n; i++) {
        inputs.push({ tenantId: t, actor: "a", action: "b", subject: `s${i}`, details: canonicalJson({ i }), createdAt: new Date(NOW.getTime() - (i < 3 ? 1000 : 100) * 24 * 3600 * 1000).toISOString() });
      }
      hashes.set(t, (await append(env.store, inputs)).map((e) => e.hash));
    }
    // Retention first (the three oldest entries of each tenant), so its signed records are in the file too.
    expect((await runAuditRetentie(env.deps, NOW)).body.verwijderd).toBe(3 * sizes.length);
    const r = await anchor(env);
    expect(r.checkpoints).toHaveLength(sizes.length);
    const lines = readFileSync(env.config.auditAnkerBestand, "utf8").trimEnd().split("\n").map((l) => parseAnchorLineText(l));
    const notes = lines.map((l) => (l.kind === "record" ? l.line.note : ""));
    expect(notes.every((n) => n !== "")).toBe(true);
    expect(lines.filter((l) => l.kind === "record" && l.line.soort === "retentie")).toHaveLength(sizes.length);

    const tenants = [...hashes.keys()];
    const trees = tenants.map((t) => {
      const leaves = hashes.get(t)!.map((h) => b64(Buffer.from(h, "hex")));
      const n = leaves.length;
      const idx = [...new Set([0, Math.floor(n / 2), n - 1])];
      const leafHashes = hashes.get(t)!.map(leafHashOfHex);
      return { leaves, proofs: idx, check: idx.map((i) => ({ index: i, proof: inclusionProof(leafHashes, i).map(b64) })) };
    });
    const tampered = "x" + notes[0]!;
    const go = await goPeer({ vkeys: [TEST_VERIFIER_KEY], notes: [...notes, tampered], trees });

    const opened = go.notes!;
    for (let i = 0; i < notes.length; i++) expect({ i, ok: opened[i]!.ok, error: opened[i]!.error }).toEqual({ i, ok: true, error: undefined });
    expect(opened.at(-1)!.ok).toBe(false);
    // Each tenant checkpoint: Go's parse of the body, against tlog.TreeHash over the entry hashes.
    for (const [k, t] of tenants.entries()) {
      const i = lines.findIndex((l) => l.kind === "record" && l.line.soort === "checkpoint" && l.line.tenantId === t);
      expect(opened[i]!.origin).toBe(`nachtwacht.test/sleutel/tenant/${t}`);
      expect(opened[i]!.size).toBe(hashes.get(t)!.length);
      expect(opened[i]!.root).toBe(go.trees![k]!.root);
      // Our RFC 6962 audit paths are tlog's, and tlog.CheckRecord accepts them.
      for (const c of trees[k]!.check) expect(go.trees![k]!.proofs[String(c.index)] ?? []).toEqual(c.proof);
      expect(go.trees![k]!.checks!.every((x) => x === "")).toBe(true);
    }
    // The installation checkpoint: a tree over the notes of the lines before it.
    const inst = lines.findIndex((l) => l.kind === "record" && l.line.soort === "installatie");
    const instTree = await goPeer({ vkeys: [], notes: [], trees: [{ leaves: notes.slice(0, inst).map((n) => b64(Buffer.from(n, "utf8"))), proofs: [], check: [] }] });
    expect(opened[inst]!.origin).toBe("nachtwacht.test/sleutel/installatie");
    expect(opened[inst]!.root).toBe(instTree.trees![0]!.root);
  });

  test("an exported bundle's proof of its head in the installation checkpoint: tlog.CheckRecord accepts it over the anchor file's leaves, and refuses it altered", async () => {
    env = await makeEnv();
    const e = env;
    const tenants = [await addTenant(e.db, "P"), await addTenant(e.db, "Q"), await addTenant(e.db, "R")];
    // Runs that each change some tenants: the installation tree has 7 leaves, the heads at different places.
    for (const changed of [[0, 1, 2], [1], [0, 2], [1]]) {
      await append(e.store, changed.map((k) => ({ tenantId: tenants[k]!, actor: "a", action: "b", subject: "s", details: canonicalJson({ k }), createdAt: NOW.toISOString() })));
      await anchor(e);
    }
    const lines = readFileSync(e.config.auditAnkerBestand, "utf8").trimEnd().split("\n").map((l) => parseAnchorLineText(l));
    const records = lines.flatMap((l) => (l.kind === "record" ? [l.line] : []));
    const leaves = records.filter((l) => l.soort !== "installatie").map((l) => b64(Buffer.from(l.note, "utf8")));
    const installation = records.findLast((l) => l.soort === "installatie")!.note;
    expect(leaves).toHaveLength(7);
    const db = e.store.kind === "sqlite" ? ["--db", e.store.path] : ["--database-url", e.store.url];
    const bundles = [];
    for (const t of tenants) {
      const out: string[] = [];
      const code = await runAuditCommand(["export", ...db, "--bestand", e.config.auditAnkerBestand, "--sleutel", TEST_VERIFIER_KEY, "--tenant", String(t)], {}, (x) => out.push(x), (x) => out.push(x));
      expect(code).toBe(0);
      const header = JSON.parse(out.join("\n").split("\n")[0]!);
      expect(header.installatie.checkpoint).toBe(installation);
      bundles.push(header.installatie as { index: number; hashes: string[] });
    }
    // Leaves P Q R, Q, P R, Q: P's head is leaf 4, Q's 6 (the last), R's 5.
    expect(bundles.map((i) => i.index)).toEqual([4, 6, 5]);
    const altered = bundles.map((i) => ({ index: i.index, proof: i.hashes.map((h, k) => (k === 0 ? b64(Buffer.alloc(32, 9)) : h)) }));
    const go = await goPeer({ vkeys: [TEST_VERIFIER_KEY], notes: [installation], trees: [{ leaves, proofs: [], check: [...bundles.map((i) => ({ index: i.index, proof: i.hashes })), ...altered] }] });
    expect(go.notes![0]!.ok).toBe(true);
    expect(go.notes![0]!.size).toBe(7);
    expect(go.trees![0]!.root).toBe(go.notes![0]!.root!);
    expect(go.trees![0]!.checks!.slice(0, 3)).toEqual(["", "", ""]);
    expect(go.trees![0]!.checks!.slice(3).every((x) => x !== "")).toBe(true);
  });

  test("a note Go signs opens with our code; Go's key strings parse and belong together", async () => {
    const go = await goPeer({ vkeys: [], notes: [], trees: [], sign: { name: "peer.go.test/sleutel", text: "go.example/log\n3\nq6ysVYr5XqVS+qO5PClRz3TRAn5sv5pAkiwJqPfuhpM=\n" } });
    const s = go.sign!;
    const opened = openNote(s.note, [parseVerifierKey(s.vkey)]);
    expect(opened).toEqual({ ok: true, text: "go.example/log\n3\nq6ysVYr5XqVS+qO5PClRz3TRAn5sv5pAkiwJqPfuhpM=\n", verifiedBy: [s.vkey] });
    expect(parseSignerKey(s.skey).verifierKey).toBe(s.vkey);
    // A signature by a key we do not trust is not accepted.
    expect(openNote(s.note, [parseVerifierKey(TEST_VERIFIER_KEY)])).toEqual({ ok: false, reason: "onbekende-sleutel" });
  });
});

describe("reading notes and keys as Go's note.Open and note.NewVerifier do", () => {
  // A note cosigned by a third party (a C2SP witness adds its own signature lines) must
  // open here exactly when it opens in Go: same answer, same reason, case by case.
  const signer = parseSignerKey(generateKeyPair("nachtwacht.test/verschil").signerKey);
  const text = "nachtwacht.test/verschil/tenant/1\n3\nq6ysVYr5XqVS+qO5PClRz3TRAn5sv5pAkiwJqPfuhpM=\n";
  const valid = signNote(text, signer).slice(text.length + 1);
  /** The trusted key's signature line with one signature byte changed. */
  const broken = (() => {
    const raw = Buffer.from(valid.slice(valid.lastIndexOf(" ") + 1, -1), "base64");
    raw[10]! ^= 1;
    return `\u2014 ${signer.name} ${raw.toString("base64")}\n`;
  })();
  /** A signature line by a key nobody here trusts, under `name`, with `b64` as written. */
  const witnessRaw = Buffer.concat([Buffer.from([0xde, 0xad, 0xbe, 0xef]), Buffer.alloc(64, 7)]);
  const witness = (name: string, b64 = witnessRaw.toString("base64")) => `\u2014 ${name} ${b64}\n`;
  /** Base64 of 68 bytes ends in one "=" after a digit with 2 unused bits: set one. */
  const loosePadding = (b64: string) => {
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const i = b64.indexOf("=") - 1;
    return b64.slice(0, i) + alphabet[alphabet.indexOf(b64[i]!) + 1] + b64.slice(i + 1);
  };
  const cases: Record<string, string> = {
    "plain note": text + "\n" + valid,
    "invalid trusted signature before the valid one": text + "\n" + broken + valid,
    "witness name with U+0085": text + "\n" + valid + witness("getuige\u0085x"),
    "witness name with +": text + "\n" + valid + witness("getuige+x"),
    "witness name with U+FEFF": text + "\n" + valid + witness("getuige\ufeffx"),
    "witness name with U+3000": text + "\n" + valid + witness("getuige\u3000x"),
    "witness signature with non-zero padding bits": text + "\n" + valid + witness("getuige", loosePadding(witnessRaw.toString("base64"))),
    "witness signature without padding": text + "\n" + valid + witness("getuige", witnessRaw.toString("base64").replace(/=+$/, "")),
    "witness signature of 4 bytes": text + "\n" + valid + witness("getuige", "3q2+7w=="),
    "witness line without a space": text + "\n" + valid + "\u2014 getuige\n",
    "witness line with two spaces": text + "\n" + valid + witness("getuige ", witnessRaw.toString("base64")),
    "witness line with an empty name": text + "\n" + valid + witness(""),
    "second, invalid copy of the trusted signature": text + "\n" + valid + broken,
    "second, identical copy of the trusted signature": text + "\n" + valid + valid,
    "the trusted name with another key ID": text + "\n" + valid + witness(signer.name),
    "only a witness signature": text + "\n" + witness("getuige"),
    "100 signature lines": text + "\n" + valid + witness("getuige").repeat(99),
    "101 signature lines": text + "\n" + valid + witness("getuige").repeat(100),
    "101 lines, the first an invalid trusted signature": text + "\n" + broken + witness("getuige").repeat(100),
    "DEL in the text": "a\x7fb\n\n" + signNote("a\x7fb\n", signer).slice(5),
    "no signature lines": text + "\n",
    "a line before the blank one is the text": text + "\n" + valid.slice(0, -1) + "x\n\n" + valid,
  };
  // Verifier keys Go's NewVerifier accepts or refuses; all for the same public key (33
  // bytes: base64 without padding, so no padding bits to set).
  const canonical = signer.verifierKey;
  const [vName, vId] = canonical.split("+") as [string, string];
  const vKey = canonical.slice(vName.length + 1 + vId.length + 1); // base64 may hold "+" itself
  const pub = new Uint8Array(Buffer.from(vKey, "base64").subarray(1));
  const keys: Record<string, string> = {
    canonical,
    "key ID in upper case": `${vName}+${vId.toUpperCase()}+${vKey}`,
    "name with U+FEFF": verifierKeyString("verschil\ufeffx", pub),
    "name with U+0085": verifierKeyString("verschil\u0085x", pub),
    "key ID with a sign": `${vName}+-${vId.slice(1)}+${vKey}`,
  };

  test("every case answers as Go does: accepted, or refused for the same reason", async () => {
    const go = await goPeer({ vkeys: [canonical], keys: Object.values(keys), notes: Object.values(cases), trees: [] });
    const goReason = (n: { ok: boolean; error?: string }) =>
      n.ok ? "ok"
      : n.error === "malformed note" ? "misvormd"
      : n.error!.startsWith("invalid signature for key ") ? "handtekening-ongeldig"
      : n.error === "note has no verifiable signatures" ? "onbekende-sleutel"
      : n.error!;
    const verifiers = [parseVerifierKey(canonical)];
    const ours = (note: string) => {
      const r = openNote(note, verifiers);
      return r.ok ? "ok" : r.reason;
    };
    const parses = (k: string) => {
      try {
        parseVerifierKey(k);
        return "ok";
      } catch {
        return "geweigerd";
      }
    };
    const names = Object.keys(cases);
    const keyNames = Object.keys(keys);
    expect({
      notes: Object.fromEntries(names.map((n) => [n, ours(cases[n]!)])),
      keys: Object.fromEntries(keyNames.map((n) => [n, parses(keys[n]!)])),
    }).toEqual({
      notes: Object.fromEntries(names.map((n, i) => [n, goReason(go.notes![i]!)])),
      keys: Object.fromEntries(keyNames.map((n, i) => [n, go.keys![i] === "" ? "ok" : "geweigerd"])),
    });
    // The five the reviewer found, and the two that always agreed, as Go answers them.
    expect(names.slice(0, 5).map((n, i) => goReason(go.notes![i]!))).toEqual(["ok", "handtekening-ongeldig", "misvormd", "misvormd", "ok"]);
    expect(goReason(go.notes![names.indexOf("witness signature with non-zero padding bits")]!)).toBe("ok");
    expect(goReason(go.notes![names.indexOf("second, invalid copy of the trusted signature")]!)).toBe("ok");
  });
});

describe("what Go cannot be asked: a note that is not well-formed text", () => {
  test("a lone surrogate in the text is misvormd, even with a signature over the U+FFFD it would encode to", () => {
    const signer = parseSignerKey(generateKeyPair("nachtwacht.test/surrogaat").signerKey);
    const sig = signNote("a\ufffdb\n", signer).slice("a\ufffdb\n".length);
    expect(openNote("a\ufffdb\n" + sig, [parseVerifierKey(signer.verifierKey)]).ok).toBe(true);
    expect(openNote("a\ud800b\n" + sig, [parseVerifierKey(signer.verifierKey)])).toEqual({ ok: false, reason: "misvormd" });
  });
});

describe("known-answer vectors (test/vectors/checkpoints.json)", () => {
  const v = JSON.parse(readFileSync(join(ROOT, "test/vectors/checkpoints.json"), "utf8"));
  const signer = parseSignerKey(v.signingKey);

  test("our code reproduces every note byte for byte", () => {
    expect(signer.verifierKey).toBe(v.verifierKey);
    for (const c of v.checkpoints) {
      const r = new CompactRange();
      for (const h of v.entryHashes.slice(0, c.size)) r.pushEntryHash(h);
      expect({ size: c.size, root: b64(r.root()), bereik: r.encode(), note: signCheckpoint(signer, v.tenantId, r) }).toEqual({ size: c.size, root: c.root, bereik: c.bereik, note: c.note });
    }
    const ret = v.retention;
    const bereik = CompactRange.decode(ret.seq, ret.bereik);
    expect(signRetentionRecord(signer, { ...ret, bereik })).toBe(ret.note);
    const inst = new CompactRange();
    for (const n of [v.checkpoints.at(-1).note, ret.note]) inst.pushLeafHash(leafHashOfBytes(Buffer.from(n, "utf8")));
    expect(b64(inst.root())).toBe(v.installation.root);
    expect(signInstallationCheckpoint(signer, inst)).toBe(v.installation.note);
  });

  test("Go opens every vector note and computes the same roots", async () => {
    const notes = [...v.checkpoints.map((c: { note: string }) => c.note), v.retention.note, v.installation.note];
    const trees = v.checkpoints.map((c: { size: number }) => ({ leaves: v.entryHashes.slice(0, c.size).map((h: string) => b64(Buffer.from(h, "hex"))), proofs: [], check: [] }));
    const go = await goPeer({ vkeys: [v.verifierKey], notes, trees });
    expect(go.notes!.every((n) => n.ok)).toBe(true);
    v.checkpoints.forEach((c: { root: string }, i: number) => {
      expect(go.notes![i]!.root).toBe(c.root);
      expect(go.trees![i]!.root).toBe(c.root);
    });
  });
});
