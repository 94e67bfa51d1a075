// What nachtwacht signs (docs/audit-chain.md gives each format byte for byte):
//
// - a tenant checkpoint: a C2SP tlog-checkpoint v1 over the tenant's entry hashes from
//   seq 1 (origin `<key name>/tenant/<id>`, tree size = newest seq, RFC 6962 root);
//   for a chain adopted at seq S, over the entries from S + 1 (origin
//   `<key name>/tenant/<id>/adoptie/<S>`, tree size = newest seq − S);
// - a retention record: a signed note saying which prefix audit-retentie deleted, why
//   that was allowed, and the tree's compact range at that point;
// - an adoption record (`nachtwacht adopt`): the operator's signed statement that a
//   chain shortened by an earlier version without a record is taken on from seq S;
// - a restore acceptance (`nachtwacht accept-restore`): the operator's signed statement
//   that a tenant's chain went back from seq A to B after a restore, with the root at B;
// - an installation checkpoint: a tlog-checkpoint (origin `<key name>/installatie`)
//   over every other record in the anchor file, in file order.
//
// Each is one line of AUDIT_ANKER_BESTAND (JSON: soort, tenantId, note) and one row
// of audit_anchor_log.
import { retentionBoundary } from "../time.ts";
import { CompactRange } from "./merkle.ts";
import { openNote, signNote, type Signer, type Verifier } from "./note.ts";

export type RecordKind = "checkpoint" | "retentie" | "installatie" | "adoptie" | "herstel";
const RECORD_KINDS: readonly string[] = ["checkpoint", "retentie", "installatie", "adoptie", "herstel"] satisfies RecordKind[];

/**
 * The origin of a tenant's tree: `<key name>/tenant/<id>` from genesis, or
 * `<key name>/tenant/<id>/adoptie/<basis>` for a chain adopted at seq `basis` (its tree's
 * first leaf is entry basis + 1). Checkpoints carry it; retention records and restore
 * acceptances carry it with `/retentie` or `/herstel` after it.
 */
export const tenantOrigin = (keyName: string, tenantId: number, basis = 0) => `${keyName}/tenant/${tenantId}${basis > 0 ? `/adoptie/${basis}` : ""}`;
export const installationOrigin = (keyName: string) => `${keyName}/installatie`;
export const retentionOrigin = (keyName: string, tenantId: number, basis = 0) => `${tenantOrigin(keyName, tenantId, basis)}/retentie`;
export const restoreOrigin = (keyName: string, tenantId: number, basis = 0) => `${tenantOrigin(keyName, tenantId, basis)}/herstel`;
/** The adoption record's first line: no tree origin (no number follows `adoptie`), so never a checkpoint's. */
export const adoptionOrigin = (keyName: string, tenantId: number) => `${keyName}/tenant/${tenantId}/adoptie`;

/**
 * The basis a tree origin names (0: from genesis, S: adopted at S), when `line` is this
 * tenant's tree origin under `keyName` followed by exactly `suffix`; null otherwise.
 */
function originBasis(line: string, keyName: string, tenantId: number, suffix: string): number | null {
  const prefix = `${keyName}/tenant/${tenantId}`;
  if (line.length < prefix.length + suffix.length || !line.startsWith(prefix) || !line.endsWith(suffix)) return null;
  const mid = line.slice(prefix.length, line.length - suffix.length);
  if (mid === "") return 0;
  const m = /^\/adoptie\/([1-9][0-9]{0,15})$/.exec(mid);
  return m ? Number(m[1]) : null;
}

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
  /** The tree's compact range at the retention point (size seq − basis). */
  bereik: CompactRange;
  /** The chain's tree starts after this seq: 0 from genesis, S for a chain adopted at S (in the origin). */
  basis?: number;
}

const RETENTION_KEYS = ["seq", "hash", "created-at", "grens", "retentiedagen", "tijdstip", "bereik"] as const;

export function retentionText(keyName: string, r: RetentionRecord): string {
  const basis = r.basis ?? 0;
  if (r.seq <= basis || r.bereik.size !== r.seq - basis) throw new Error("the compact range must be at the size of the retention point");
  return (
    `${retentionOrigin(keyName, r.tenantId, basis)}\n` +
    `seq ${r.seq}\nhash ${r.hash}\ncreated-at ${r.createdAt}\ngrens ${r.grens}\n` +
    `retentiedagen ${r.retentieDagen}\ntijdstip ${r.tijdstip}\nbereik ${r.bereik.encode()}\n`
  );
}

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/** Parses a retention record's note text; `keyName` is that of the key that signed it. */
export function parseRetentionText(keyName: string, tenantId: number, text: string): RetentionRecord | null {
  const lines = text.split("\n");
  const basis = lines.length === 9 && lines[8] === "" ? originBasis(lines[0]!, keyName, tenantId, "/retentie") : null;
  if (basis === null) return null;
  const v = keyedLines(lines, RETENTION_KEYS);
  if (!v) return null;
  if (!/^[1-9][0-9]{0,15}$/.test(v.seq!) || !/^[0-9a-f]{64}$/.test(v.hash!) || !/^[1-9][0-9]{0,5}$/.test(v.retentiedagen!)) return null;
  if (!ISO.test(v["created-at"]!) || !ISO.test(v.grens!) || !ISO.test(v.tijdstip!)) return null;
  const seq = Number(v.seq);
  if (seq <= basis) return null;
  let bereik: CompactRange;
  try {
    bereik = CompactRange.decode(seq - basis, v.bereik!);
  } catch {
    return null;
  }
  return { tenantId, seq, hash: v.hash!, createdAt: v["created-at"]!, grens: v.grens!, retentieDagen: Number(v.retentiedagen), tijdstip: v.tijdstip!, bereik, basis };
}

/** The values of lines 1.. of a note text, each `<key> <value>` with exactly these keys in this order; null otherwise. */
function keyedLines(lines: string[], keys: readonly string[]): Record<string, string> | null {
  if (lines.length !== keys.length + 2) return null;
  const v: Record<string, string> = {};
  for (let i = 0; i < keys.length; i++) {
    const line = lines[i + 1]!;
    const k = keys[i]!;
    if (!line.startsWith(k + " ")) return null;
    v[k] = line.slice(k.length + 1);
  }
  return v;
}

/** The one reason an adoption is signed for (its `reden` line). */
export const ADOPTION_REASON = "eerdere-versie-zonder-retentierecord";

/**
 * An adoption: the operator's statement, signed with the key, that a chain whose oldest
 * entries an earlier version deleted without a signed record is taken on from the
 * entry after `seq`, which must link to `hash`. The tree then runs from seq + 1
 * (tenantOrigin with basis = seq). `nachtwacht adopt` signs it.
 */
export interface AdoptionRecord {
  tenantId: number;
  /** The seq before the oldest remaining entry: the adopted tree's basis. */
  seq: number;
  /** That entry's prev_hash. */
  hash: string;
  /** When the operator adopted the chain. */
  tijdstip: string;
}

const ADOPTION_KEYS = ["seq", "hash", "tijdstip", "reden"] as const;

export function adoptionText(keyName: string, a: AdoptionRecord): string {
  if (!Number.isSafeInteger(a.seq) || a.seq < 1) throw new Error("an adoption starts after seq 1 or later");
  return `${adoptionOrigin(keyName, a.tenantId)}\nseq ${a.seq}\nhash ${a.hash}\ntijdstip ${a.tijdstip}\nreden ${ADOPTION_REASON}\n`;
}

export function parseAdoptionText(keyName: string, tenantId: number, text: string): AdoptionRecord | null {
  const lines = text.split("\n");
  if (lines[0] !== adoptionOrigin(keyName, tenantId) || lines[lines.length - 1] !== "") return null;
  const v = keyedLines(lines, ADOPTION_KEYS);
  if (!v) return null;
  if (!/^[1-9][0-9]{0,15}$/.test(v.seq!) || !/^[0-9a-f]{64}$/.test(v.hash!) || !ISO.test(v.tijdstip!) || v.reden !== ADOPTION_REASON) return null;
  return { tenantId, seq: Number(v.seq), hash: v.hash!, tijdstip: v.tijdstip! };
}

/**
 * A restore acceptance: the operator's statement, signed with the key, that the
 * tenant's chain went back from the signed head at seq `van` (root `vanRoot`) to seq
 * `naar`, where the tree (recomputed from the database) has root `root`. From then on
 * it is the tenant's head, as a checkpoint is. `nachtwacht accept-restore` signs it.
 */
export interface RestoreRecord {
  tenantId: number;
  /** The tree's basis (0, or S for an adopted chain): in the origin. */
  basis: number;
  van: number;
  vanRoot: Uint8Array;
  naar: number;
  root: Uint8Array;
  tijdstip: string;
}

const RESTORE_KEYS = ["van", "van-root", "naar", "root", "tijdstip"] as const;

export function restoreText(keyName: string, r: RestoreRecord): string {
  if (r.van < r.basis || r.naar < r.basis) throw new Error("a restore acceptance names seqs of the tree, at or after its basis");
  return `${restoreOrigin(keyName, r.tenantId, r.basis)}\nvan ${r.van}\nvan-root ${b64(r.vanRoot)}\nnaar ${r.naar}\nroot ${b64(r.root)}\ntijdstip ${r.tijdstip}\n`;
}

function root32(text: string): Uint8Array | null {
  const b = Buffer.from(text, "base64");
  return b.length === 32 && b.toString("base64") === text ? new Uint8Array(b) : null;
}

export function parseRestoreText(keyName: string, tenantId: number, text: string): RestoreRecord | null {
  const lines = text.split("\n");
  const body = restoreBody(lines);
  const basis = body ? originBasis(lines[0]!, keyName, tenantId, "/herstel") : null;
  if (!body || basis === null || body.van < basis || body.naar < basis) return null;
  return { tenantId, basis, ...body };
}

/** A restore acceptance's lines after its origin, whatever the origin says; null when they are not one's. */
function restoreBody(lines: string[]): Omit<RestoreRecord, "tenantId" | "basis"> | null {
  if (lines[lines.length - 1] !== "") return null;
  const v = keyedLines(lines, RESTORE_KEYS);
  if (!v) return null;
  const seq = /^(0|[1-9][0-9]{0,15})$/;
  if (!seq.test(v.van!) || !seq.test(v.naar!) || !ISO.test(v.tijdstip!)) return null;
  const vanRoot = root32(v["van-root"]!);
  const root = root32(v.root!);
  if (!vanRoot || !root) return null;
  return { van: Number(v.van), vanRoot, naar: Number(v.naar), root, tijdstip: v.tijdstip! };
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
  if (typeof o.soort !== "string" || !RECORD_KINDS.includes(o.soort) || typeof o.note !== "string") return { kind: "onleesbaar" };
  const tenantId = o.soort === "installatie" ? null : o.tenantId;
  if (tenantId !== null && !Number.isSafeInteger(tenantId)) return { kind: "onleesbaar" };
  const line: AnchorLine = { soort: o.soort as RecordKind, tenantId: tenantId as number | null, note: o.note };
  // Only the canonical serialisation counts: the database row must reproduce the line exactly.
  if (anchorLineText(line) !== text) return { kind: "onleesbaar" };
  return { kind: "record", line };
}

/** The signing key, and every key whose signatures are trusted (the signer's own included). */
export interface Keys {
  signer: Signer;
  verifiers: Verifier[];
}

/** A checkpoint of the tenant's tree; `basis` S for a chain adopted at S (the range then holds the entries from S + 1). */
export function signCheckpoint(signer: Signer, tenantId: number, range: CompactRange, basis = 0): string {
  return signNote(checkpointText({ origin: tenantOrigin(signer.name, tenantId, basis), size: range.size, root: range.root() }), signer);
}

export function signInstallationCheckpoint(signer: Signer, range: CompactRange): string {
  return signNote(checkpointText({ origin: installationOrigin(signer.name), size: range.size, root: range.root() }), signer);
}

export function signRetentionRecord(signer: Signer, r: RetentionRecord): string {
  return signNote(retentionText(signer.name, r), signer);
}

export function signAdoptionRecord(signer: Signer, a: AdoptionRecord): string {
  return signNote(adoptionText(signer.name, a), signer);
}

export function signRestoreRecord(signer: Signer, r: RestoreRecord): string {
  return signNote(restoreText(signer.name, r), signer);
}

/** The verifier (and so the key name) whose signature opened a note. */
function opened(note: string, verifiers: Verifier[]): { text: string; keyName: string } | { error: string } {
  const r = openNote(note, verifiers);
  if (!r.ok) return { error: r.reason };
  const v = verifiers.find((x) => x.verifierKey === r.verifiedBy[0])!;
  return { text: r.text, keyName: v.name };
}

/**
 * A tenant checkpoint that verifies under a trusted key and names this tenant, or why
 * not. `checkpoint.size` is the tree size as signed; `basis` is the seq before the
 * tree's first leaf (0, or S for an adopted chain), so the newest seq is basis + size.
 */
export function openCheckpoint(note: string, tenantId: number, verifiers: Verifier[]): { ok: true; checkpoint: Checkpoint; basis: number } | { ok: false; error: string } {
  const o = opened(note, verifiers);
  if ("error" in o) return { ok: false, error: o.error };
  const c = parseCheckpointText(o.text);
  if (!c) return { ok: false, error: "misvormd" };
  const basis = originBasis(c.origin, o.keyName, tenantId, "");
  if (basis === null) return { ok: false, error: "andere-oorsprong" };
  return { ok: true, checkpoint: c, basis };
}

/**
 * What a tenant's chain must reach: its newest checkpoint, or a restore acceptance
 * signed after it. `size` is the newest seq covered (basis + tree size), in the seq
 * numbers the verifier walks.
 */
export interface TreeHead {
  soort: "checkpoint" | "herstel";
  basis: number;
  size: number;
  root: Uint8Array;
}

/**
 * A checkpoint or restore acceptance (`soort`; either when omitted) of this tenant,
 * opened. `andere-oorsprong` when the text is one but its origin names another key,
 * tenant or tree (a relabelled head, as openCheckpoint says); `misvormd` when it is neither.
 */
export function openTreeHead(note: string, tenantId: number, verifiers: Verifier[], soort?: TreeHead["soort"]): { ok: true; head: TreeHead } | { ok: false; error: string } {
  const o = opened(note, verifiers);
  if ("error" in o) return { ok: false, error: o.error };
  let foreignOrigin = false;
  if (soort !== "herstel") {
    const c = parseCheckpointText(o.text);
    const basis = c && originBasis(c.origin, o.keyName, tenantId, "");
    if (c && basis !== null) return { ok: true, head: { soort: "checkpoint", basis, size: basis + c.size, root: c.root } };
    foreignOrigin ||= c !== null; // parsed, so only its origin did not fit
  }
  if (soort !== "checkpoint") {
    const r = parseRestoreText(o.keyName, tenantId, o.text);
    if (r) return { ok: true, head: { soort: "herstel", basis: r.basis, size: r.naar, root: r.root } };
    const lines = o.text.split("\n");
    foreignOrigin ||= restoreBody(lines) !== null && originBasis(lines[0]!, o.keyName, tenantId, "/herstel") === null;
  }
  return { ok: false, error: foreignOrigin ? "andere-oorsprong" : "misvormd" };
}

export function openInstallationCheckpoint(note: string, verifiers: Verifier[]): { ok: true; checkpoint: Checkpoint } | { ok: false; error: string } {
  const o = opened(note, verifiers);
  if ("error" in o) return { ok: false, error: o.error };
  const c = parseCheckpointText(o.text);
  if (!c) return { ok: false, error: "misvormd" };
  if (c.origin !== installationOrigin(o.keyName)) return { ok: false, error: "andere-oorsprong" };
  return { ok: true, checkpoint: c };
}

/**
 * Why a signed text that `parse` refused is not this tenant's record: `andere-oorsprong`
 * when it would be one had its origin named this key and tenant (a record of another
 * tenant or key, relabelled or mixed up, as openTreeHead says of heads), `misvormd` otherwise.
 */
function refusal(text: string, keyName: string, tenantId: number, ...parsers: ((text: string) => unknown)[]): "andere-oorsprong" | "misvormd" {
  const nl = text.indexOf("\n");
  if (nl < 0) return "misvormd";
  // `<key name>/tenant/<id>` and what follows it: `/retentie`, `/adoptie/5/herstel` …
  const m = /^.+\/tenant\/[0-9]+((?:\/[a-z]+(?:\/[0-9]+)?)*)$/.exec(text.slice(0, nl));
  const ours = m && `${keyName}/tenant/${tenantId}${m[1]}${text.slice(nl)}`;
  return ours && ours !== text && parsers.some((parse) => parse(ours) !== null) ? "andere-oorsprong" : "misvormd";
}

export function openRetentionRecord(note: string, tenantId: number, verifiers: Verifier[]): { ok: true; record: RetentionRecord & { basis: number } } | { ok: false; error: string } {
  const o = opened(note, verifiers);
  if ("error" in o) return { ok: false, error: o.error };
  const r = parseRetentionText(o.keyName, tenantId, o.text);
  if (!r) return { ok: false, error: refusal(o.text, o.keyName, tenantId, (t) => parseRetentionText(o.keyName, tenantId, t)) };
  return { ok: true, record: { ...r, basis: r.basis ?? 0 } };
}

export function openAdoptionRecord(note: string, tenantId: number, verifiers: Verifier[]): { ok: true; record: AdoptionRecord } | { ok: false; error: string } {
  const o = opened(note, verifiers);
  if ("error" in o) return { ok: false, error: o.error };
  const a = parseAdoptionText(o.keyName, tenantId, o.text);
  if (!a) return { ok: false, error: refusal(o.text, o.keyName, tenantId, (t) => parseAdoptionText(o.keyName, tenantId, t)) };
  return { ok: true, record: a };
}

export function openRestoreRecord(note: string, tenantId: number, verifiers: Verifier[]): { ok: true; record: RestoreRecord } | { ok: false; error: string } {
  const o = opened(note, verifiers);
  if ("error" in o) return { ok: false, error: o.error };
  const r = parseRestoreText(o.keyName, tenantId, o.text);
  if (!r) return { ok: false, error: refusal(o.text, o.keyName, tenantId, (t) => parseRestoreText(o.keyName, tenantId, t)) };
  return { ok: true, record: r };
}

/** A record a chain can start from: a retention record or an adoption, opened (the origin tells which). */
export function openStartRecord(
  note: string,
  tenantId: number,
  verifiers: Verifier[],
): { ok: true; retention: RetentionRecord & { basis: number } } | { ok: true; adoption: AdoptionRecord } | { ok: false; error: string } {
  const o = opened(note, verifiers);
  if ("error" in o) return { ok: false, error: o.error };
  const r = parseRetentionText(o.keyName, tenantId, o.text);
  if (r) return { ok: true, retention: { ...r, basis: r.basis ?? 0 } };
  const a = parseAdoptionText(o.keyName, tenantId, o.text);
  if (a) return { ok: true, adoption: a };
  return { ok: false, error: refusal(o.text, o.keyName, tenantId, (t) => parseRetentionText(o.keyName, tenantId, t), (t) => parseAdoptionText(o.keyName, tenantId, t)) };
}
