// What nachtwacht signs (docs/audit-chain.md gives each format byte for byte):
//
// - a tenant checkpoint: a C2SP tlog-checkpoint v1 over the tenant's entry hashes from
//   seq 1 (origin `<key name>/tenant/<id>`, tree size = newest seq, RFC 6962 root);
// - a retention record: a signed note saying which prefix audit-retentie deleted, why
//   that was allowed, and the tree's compact range at that point;
// - an installation checkpoint: a tlog-checkpoint (origin `<key name>/installatie`)
//   over every checkpoint and retention record in the anchor file, in file order.
//
// Each is one line of AUDIT_ANKER_BESTAND (JSON: soort, tenantId, note) and one row
// of audit_anchor_log.
import { retentionBoundary } from "../time.ts";
import { CompactRange } from "./merkle.ts";
import { openNote, signNote, type Signer, type Verifier } from "./note.ts";

export type RecordKind = "checkpoint" | "retentie" | "installatie";

export const tenantOrigin = (keyName: string, tenantId: number) => `${keyName}/tenant/${tenantId}`;
export const installationOrigin = (keyName: string) => `${keyName}/installatie`;
export const retentionOrigin = (keyName: string, tenantId: number) => `${keyName}/tenant/${tenantId}/retentie`;

const b64 = (b: Uint8Array) => Buffer.from(b).toString("base64");

export interface Checkpoint {
  origin: string;
  size: number;
  /** 32 bytes. */
  root: Uint8Array;
}

export function checkpointText(c: Checkpoint): string {
  return `${c.origin}\n${c.size}\n${b64(c.root)}\n`;
}

/** Parses a checkpoint's note text (after its signature was verified). */
export function parseCheckpointText(text: string): Checkpoint | null {
  const lines = text.split("\n");
  if (lines.length < 4 || lines[lines.length - 1] !== "") return null;
  const [origin, sizeText, rootText] = lines as [string, string, string];
  if (origin === "" || !/^(0|[1-9][0-9]{0,15})$/.test(sizeText)) return null;
  const root = Buffer.from(rootText, "base64");
  if (root.length !== 32 || root.toString("base64") !== rootText) return null;
  return { origin, size: Number(sizeText), root: new Uint8Array(root) };
}

export interface RetentionRecord {
  tenantId: number;
  /** seq and hash of the last deleted entry. */
  seq: number;
  hash: string;
  /** created_at of that entry: must be before grens. */
  createdAt: string;
  grens: string;
  retentieDagen: number;
  /** When the run that deleted it started: grens must not be later than tijdstip − retentieDagen. */
  tijdstip: string;
  /** The tree's compact range at size seq. */
  bereik: CompactRange;
}

const RETENTION_KEYS = ["seq", "hash", "created-at", "grens", "retentiedagen", "tijdstip", "bereik"] as const;

export function retentionText(keyName: string, r: RetentionRecord): string {
  if (r.bereik.size !== r.seq) throw new Error("the compact range must be at the size of the retention point");
  return (
    `${retentionOrigin(keyName, r.tenantId)}\n` +
    `seq ${r.seq}\nhash ${r.hash}\ncreated-at ${r.createdAt}\ngrens ${r.grens}\n` +
    `retentiedagen ${r.retentieDagen}\ntijdstip ${r.tijdstip}\nbereik ${r.bereik.encode()}\n`
  );
}

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/** Parses a retention record's note text; `keyName` is that of the key that signed it. */
export function parseRetentionText(keyName: string, tenantId: number, text: string): RetentionRecord | null {
  const lines = text.split("\n");
  if (lines.length !== 9 || lines[8] !== "" || lines[0] !== retentionOrigin(keyName, tenantId)) return null;
  const v: Record<string, string> = {};
  for (let i = 0; i < RETENTION_KEYS.length; i++) {
    const line = lines[i + 1]!;
    const k = RETENTION_KEYS[i]!;
    if (!line.startsWith(k + " ")) return null;
    v[k] = line.slice(k.length + 1);
  }
  if (!/^[1-9][0-9]{0,15}$/.test(v.seq!) || !/^[0-9a-f]{64}$/.test(v.hash!) || !/^[1-9][0-9]{0,5}$/.test(v.retentiedagen!)) return null;
  if (!ISO.test(v["created-at"]!) || !ISO.test(v.grens!) || !ISO.test(v.tijdstip!)) return null;
  const seq = Number(v.seq);
  let bereik: CompactRange;
  try {
    bereik = CompactRange.decode(seq, v.bereik!);
  } catch {
    return null;
  }
  return { tenantId, seq, hash: v.hash!, createdAt: v["created-at"]!, grens: v.grens!, retentieDagen: Number(v.retentiedagen), tijdstip: v.tijdstip!, bereik };
}


/**
 * Why a retention record does not justify its deletion, or null when it does: the last
 * deleted entry must be older than grens, and grens no later than the run's time minus
 * the retention days.
 */
export function retentionUnjustified(r: RetentionRecord): string | null {
  if (!(r.createdAt < r.grens)) return `de laatst verwijderde entry (${r.createdAt}) is niet ouder dan de grens ${r.grens}`;
  const latest = retentionBoundary(new Date(r.tijdstip), r.retentieDagen);
  if (r.grens > latest) return `de grens ${r.grens} ligt na het tijdstip ${r.tijdstip} min ${r.retentieDagen} dagen`;
  return null;
}

/** One line of AUDIT_ANKER_BESTAND, without its newline. */
export interface AnchorLine {
  soort: RecordKind;
  tenantId: number | null;
  note: string;
}

export function anchorLineText(l: AnchorLine): string {
  return l.tenantId === null ? JSON.stringify({ soort: l.soort, note: l.note }) : JSON.stringify({ soort: l.soort, tenantId: l.tenantId, note: l.note });
}

/** A line of the anchor file: a record, a line written before signed checkpoints (`oud`), or not readable. */
export type ParsedLine = { kind: "record"; line: AnchorLine } | { kind: "oud" } | { kind: "onleesbaar" };

export function parseAnchorLineText(text: string): ParsedLine {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return { kind: "onleesbaar" };
  }
  if (v === null || typeof v !== "object" || Array.isArray(v)) return { kind: "onleesbaar" };
  const o = v as Record<string, unknown>;
  if (o.soort === undefined && typeof o.hash === "string" && Number.isSafeInteger(o.seq)) return { kind: "oud" };
  if ((o.soort !== "checkpoint" && o.soort !== "retentie" && o.soort !== "installatie") || typeof o.note !== "string") return { kind: "onleesbaar" };
  const tenantId = o.soort === "installatie" ? null : o.tenantId;
  if (tenantId !== null && !Number.isSafeInteger(tenantId)) return { kind: "onleesbaar" };
  const line: AnchorLine = { soort: o.soort, tenantId: tenantId as number | null, note: o.note };
  // Only the canonical serialisation counts: the database row must reproduce the line exactly.
  if (anchorLineText(line) !== text) return { kind: "onleesbaar" };
  return { kind: "record", line };
}

/** The signing key, and every key whose signatures are trusted (the signer's own included). */
export interface Keys {
  signer: Signer;
  verifiers: Verifier[];
}

export function signCheckpoint(signer: Signer, tenantId: number, range: CompactRange): string {
  return signNote(checkpointText({ origin: tenantOrigin(signer.name, tenantId), size: range.size, root: range.root() }), signer);
}

export function signInstallationCheckpoint(signer: Signer, range: CompactRange): string {
  return signNote(checkpointText({ origin: installationOrigin(signer.name), size: range.size, root: range.root() }), signer);
}

export function signRetentionRecord(signer: Signer, r: RetentionRecord): string {
  return signNote(retentionText(signer.name, r), signer);
}

/** The verifier (and so the key name) whose signature opened a note. */
function opened(note: string, verifiers: Verifier[]): { text: string; keyName: string } | { error: string } {
  const r = openNote(note, verifiers);
  if (!r.ok) return { error: r.reason };
  const v = verifiers.find((x) => x.verifierKey === r.verifiedBy[0])!;
  return { text: r.text, keyName: v.name };
}

/** A tenant checkpoint that verifies under a trusted key and names this tenant, or why not. */
export function openCheckpoint(note: string, tenantId: number, verifiers: Verifier[]): { ok: true; checkpoint: Checkpoint } | { ok: false; error: string } {
  const o = opened(note, verifiers);
  if ("error" in o) return { ok: false, error: o.error };
  const c = parseCheckpointText(o.text);
  if (!c) return { ok: false, error: "misvormd" };
  if (c.origin !== tenantOrigin(o.keyName, tenantId)) return { ok: false, error: "andere-oorsprong" };
  return { ok: true, checkpoint: c };
}

export function openInstallationCheckpoint(note: string, verifiers: Verifier[]): { ok: true; checkpoint: Checkpoint } | { ok: false; error: string } {
  const o = opened(note, verifiers);
  if ("error" in o) return { ok: false, error: o.error };
  const c = parseCheckpointText(o.text);
  if (!c) return { ok: false, error: "misvormd" };
  if (c.origin !== installationOrigin(o.keyName)) return { ok: false, error: "andere-oorsprong" };
  return { ok: true, checkpoint: c };
}

export function openRetentionRecord(note: string, tenantId: number, verifiers: Verifier[]): { ok: true; record: RetentionRecord } | { ok: false; error: string } {
  const o = opened(note, verifiers);
  if ("error" in o) return { ok: false, error: o.error };
  const r = parseRetentionText(o.keyName, tenantId, o.text);
  if (!r) return { ok: false, error: "misvormd" };
  return { ok: true, record: r };
}
