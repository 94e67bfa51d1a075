// C2SP signed-note v1 with Ed25519 (signature type 0x01), byte for byte as
// golang.org/x/mod/sumdb/note reads and writes it, including its key encodings:
//
//   signer key (secret, env file only):  PRIVATE+KEY+<name>+<key ID, 8 hex>+<base64(0x01 ‖ 32-byte seed)>
//   verifier key (public):               <name>+<key ID, 8 hex>+<base64(0x01 ‖ 32-byte public key)>
//   key ID = first 4 bytes of SHA-256(name ‖ 0x0A ‖ 0x01 ‖ public key), big-endian
//   note = text ending in "\n", a blank line, then lines "— <name> base64(key ID ‖ signature)\n"
//
// A verifier trusts only the verifier keys it is given: signatures from unknown keys
// are ignored, a known key's signature that fails rejects the note (as Go's note.Open).
// test/checkpoint-go.test.ts holds Go to this, case by case. Two places where Go has no
// counterpart to mirror, both refusing only what Go could never have written: a key name
// with a control character (no note holding it opens), and a string that is not
// well-formed UTF-16 (Go reads bytes and refuses invalid UTF-8; here the note arrives
// decoded, and a lone surrogate would be verified as the U+FFFD it encodes to).
import { createPrivateKey, createPublicKey, generateKeyPairSync, sign, verify, type KeyObject } from "node:crypto";

const ALG_ED25519 = 0x01;
const PKCS8_ED25519 = Buffer.from("302e020100300506032b657004220420", "hex");
const SPKI_ED25519 = Buffer.from("302a300506032b6570032100", "hex");

export interface Signer {
  name: string;
  keyId: number;
  /** The matching verifier key, in note format: what auditors are given. */
  verifierKey: string;
  sign(text: string): Uint8Array;
}

export interface Verifier {
  name: string;
  keyId: number;
  verifierKey: string;
  verify(text: string, sig: Uint8Array): boolean;
}

export class NoteKeyError extends Error {}

/**
 * Key names, in keys and in signature lines: Go's isValidName (non-empty, valid UTF-8,
 * no unicode.IsSpace rune, which is exactly Unicode's White_Space, no "+"; JavaScript's
 * \s differs: it has U+FEFF and lacks U+0085), and no control character.
 */
export function isValidKeyName(name: string): boolean {
  return name !== "" && name.isWellFormed() && !/[\p{White_Space}+\x00-\x1f]/u.test(name);
}

export function keyId(name: string, publicKey: Uint8Array): number {
  const h = new Bun.CryptoHasher("sha256").update(name).update("\n").update(new Uint8Array([ALG_ED25519])).update(publicKey).digest();
  return h.readUInt32BE(0);
}

const hex8 = (id: number) => id.toString(16).padStart(8, "0");

function rawPublicKey(pub: KeyObject): Uint8Array {
  return new Uint8Array(Buffer.from(pub.export({ format: "jwk" }).x!, "base64url"));
}

/**
 * Base64 as Go's base64.StdEncoding.DecodeString reads it: padded to a multiple of 4,
 * and (not being Strict) ignoring the unused bits before the padding, so a signature
 * another implementation wrote with them set still decodes. Go skips "\r" and "\n"
 * inside; in a note none reach here (lines are split at "\n", "\r" is refused before),
 * in a key they are refused.
 */
function decodeBase64(s: string): Buffer | null {
  return /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/.test(s) ? Buffer.from(s, "base64") : null;
}

/** A key ID as Go's strconv.ParseUint(s, 16, 32) of 8 characters reads it: either case. */
function parseKeyId(s: string): number | null {
  return /^[0-9a-fA-F]{8}$/.test(s) ? parseInt(s, 16) : null;
}

export function verifierKeyString(name: string, publicKey: Uint8Array): string {
  return `${name}+${hex8(keyId(name, publicKey))}+${Buffer.concat([Buffer.from([ALG_ED25519]), publicKey]).toString("base64")}`;
}

/** Parses a signer key (PRIVATE+KEY+…); throws NoteKeyError saying what is wrong, never echoing the key. */
/** Splits at the first `n − 1` "+" (the base64 key at the end may itself contain "+"), as Go's note does. */
function chop(s: string, n: number): string[] {
  const out: string[] = [];
  let rest = s;
  for (let i = 0; i < n - 1; i++) {
    const k = rest.indexOf("+");
    if (k < 0) return out;
    out.push(rest.slice(0, k));
    rest = rest.slice(k + 1);
  }
  out.push(rest);
  return out;
}

export function parseSignerKey(skey: string): Signer {
  const parts = chop(skey, 5);
  if (parts.length !== 5 || parts[0] !== "PRIVATE" || parts[1] !== "KEY") {
    throw new NoteKeyError("is geen ondertekeningssleutel van de vorm PRIVATE+KEY+<naam>+<id>+<sleutel>");
  }
  const [, , name, idHex, b64] = parts as [string, string, string, string, string];
  if (!isValidKeyName(name)) throw new NoteKeyError("heeft een ongeldige sleutelnaam");
  const raw = decodeBase64(b64);
  const givenId = parseKeyId(idHex);
  if (givenId === null || !raw || raw.length !== 33 || raw[0] !== ALG_ED25519) {
    throw new NoteKeyError("is geen geldige Ed25519-ondertekeningssleutel");
  }
  const priv = createPrivateKey({ key: Buffer.concat([PKCS8_ED25519, raw.subarray(1)]), format: "der", type: "pkcs8" });
  const pub = rawPublicKey(createPublicKey(priv));
  const id = keyId(name, pub);
  if (id !== givenId) throw new NoteKeyError("heeft een sleutel-ID dat niet bij de sleutel past");
  return { name, keyId: id, verifierKey: verifierKeyString(name, pub), sign: (text) => new Uint8Array(sign(null, Buffer.from(text, "utf8"), priv)) };
}

/**
 * Parses a verifier key (<name>+<id>+<key>). Its `verifierKey` is the canonical spelling
 * (verifierKeyString: a lower-case key ID), however it was written: the key ID is accepted
 * in either case, as Go does, and keys are compared by that string (the marker of the
 * row seals' key, keyChange in src/row-seal.ts; a note's verifiedBy).
 */
export function parseVerifierKey(vkey: string): Verifier {
  const parts = chop(vkey, 3);
  if (parts.length !== 3) throw new NoteKeyError("is geen publieke sleutel van de vorm <naam>+<id>+<sleutel>");
  const [name, idHex, b64] = parts as [string, string, string];
  if (!isValidKeyName(name)) throw new NoteKeyError("heeft een ongeldige sleutelnaam");
  const raw = decodeBase64(b64);
  const givenId = parseKeyId(idHex);
  if (givenId === null || !raw || raw.length !== 33 || raw[0] !== ALG_ED25519) {
    throw new NoteKeyError("is geen geldige publieke Ed25519-sleutel");
  }
  const pubBytes = new Uint8Array(raw.subarray(1));
  const id = keyId(name, pubBytes);
  if (id !== givenId) throw new NoteKeyError("heeft een sleutel-ID dat niet bij de sleutel past");
  const pub = createPublicKey({ key: Buffer.concat([SPKI_ED25519, pubBytes]), format: "der", type: "spki" });
  return { name, keyId: id, verifierKey: verifierKeyString(name, pubBytes), verify: (text, sig) => sig.length === 64 && verify(null, Buffer.from(text, "utf8"), pub, sig) };
}

/** A new key pair in note format. */
export function generateKeyPair(name: string): { signerKey: string; verifierKey: string } {
  if (!isValidKeyName(name)) throw new NoteKeyError("heeft een ongeldige sleutelnaam");
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  const seed = Buffer.from(privateKey.export({ format: "jwk" }).d!, "base64url");
  const pub = rawPublicKey(publicKey);
  const id = hex8(keyId(name, pub));
  return {
    signerKey: `PRIVATE+KEY+${name}+${id}+${Buffer.concat([Buffer.from([ALG_ED25519]), seed]).toString("base64")}`,
    verifierKey: verifierKeyString(name, pub),
  };
}

/** Note text must be non-empty, end in a newline, and hold no control characters but newline. */
function checkText(text: string): void {
  if (text === "" || !text.endsWith("\n")) throw new Error("note text must end in a newline");
  if (/[\x00-\x09\x0b-\x1f]/.test(text)) throw new Error("note text may not contain control characters");
}

/** Signs `text` (which ends in "\n") with every signer: the complete note. */
export function signNote(text: string, ...signers: Signer[]): string {
  checkText(text);
  let out = text + "\n";
  for (const s of signers) {
    const id = Buffer.alloc(4);
    id.writeUInt32BE(s.keyId, 0);
    out += `\u2014 ${s.name} ${Buffer.concat([id, s.sign(text)]).toString("base64")}\n`;
  }
  return out;
}

export type OpenResult =
  | { ok: true; text: string; verifiedBy: string[] }
  | { ok: false; reason: "misvormd" | "onbekende-sleutel" | "handtekening-ongeldig" };

const SIG_PREFIX = "\u2014 ";
const MAX_SIGNATURES = 100;
const MALFORMED = { ok: false, reason: "misvormd" } as const;

/**
 * Opens a signed note: its text when at least one signature from a trusted key
 * verifies and none from a trusted key fails. Go's note.Open step by step, in its order
 * (so the reason is its error's): each line split at its first space after "— " into a
 * name and base64; a line that does not parse, an invalid name or more than 100 lines
 * make the note malformed, even in a signature nobody here trusts; a trusted key's
 * second signature is skipped unverified, as Go does (its first one decided).
 */
export function openNote(note: string, verifiers: Verifier[]): OpenResult {
  if (!note.isWellFormed() || /[\x00-\x09\x0b-\x1f]/.test(note)) return MALFORMED;
  const split = note.lastIndexOf("\n\n");
  if (split < 0) return MALFORMED;
  const text = note.slice(0, split + 1);
  const sigs = note.slice(split + 2);
  if (sigs === "" || !sigs.endsWith("\n")) return MALFORMED;
  const verifiedBy: string[] = [];
  const seen = new Set<Verifier>();
  let count = 0;
  for (const line of sigs.slice(0, -1).split("\n")) {
    if (!line.startsWith(SIG_PREFIX)) return MALFORMED;
    const rest = line.slice(SIG_PREFIX.length);
    const space = rest.indexOf(" ");
    const name = space < 0 ? rest : rest.slice(0, space);
    const raw = decodeBase64(space < 0 ? "" : rest.slice(space + 1));
    if (!raw || !isValidKeyName(name) || raw.length < 5) return MALFORMED;
    if (++count > MAX_SIGNATURES) return MALFORMED;
    const id = raw.readUInt32BE(0);
    const v = verifiers.find((x) => x.name === name && x.keyId === id);
    if (!v || seen.has(v)) continue;
    seen.add(v);
    if (!v.verify(text, new Uint8Array(raw.subarray(4)))) return { ok: false, reason: "handtekening-ongeldig" };
    verifiedBy.push(v.verifierKey);
  }
  if (verifiedBy.length === 0) return { ok: false, reason: "onbekende-sleutel" };
  return { ok: true, text, verifiedBy };
}
