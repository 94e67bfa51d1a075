// What an auditor runs, with the public key(s) alone and nothing of the service: the
// whole check of a database against its anchor file, the check against an
// installation checkpoint kept off the machine (the daily e-mail), and the export and
// offline check of one tenant's bundle with RFC 6962 inclusion proofs (of an entry in
// the tenant's tree, and of the bundle's head in an installation checkpoint).
// src/cli/audit.ts gives them their command line.
import { Database } from "bun:sqlite";
import { existsSync } from "node:fs";
import { jsonLine } from "../format.ts";
import { readLines } from "./anchor-file.ts";
import { entriesAfter, entryHash, GENESIS_HASH, type ChainFields, type EntryRow } from "./chain.ts";
import { CompactRange, inclusionProof, inclusionProofOf, installationLeafHash, leafHashOfHex, verifyInclusion } from "./merkle.ts";
import type { Verifier } from "./note.ts";
import { openAdoptionRecord, openInstallationCheckpoint, openRestoreRecord, openRetentionRecord, openTreeHead, retentionUnjustified, type AdoptionRecord } from "./records.ts";
import { verifyInstallation, type InstallationVerdict } from "./verify-all.ts";
import { chainStart, linkBreak, type ChainStart, type CheckpointRef } from "./verify.ts";

/** The check could not be made (a missing file, an unreadable database, a malformed input): exit 2. */
export class CannotCheck extends Error {}

function openReadOnly(dbPath: string): Database {
  if (!existsSync(dbPath)) throw new CannotCheck(`database niet gevonden: ${dbPath}`);
  try {
    const db = new Database(dbPath, { readonly: true, strict: true });
    db.run("PRAGMA busy_timeout = 5000");
    db.query("SELECT 1 FROM audit_entries LIMIT 1").get();
    return db;
  } catch (e) {
    throw new CannotCheck(`database niet te lezen: ${dbPath}: ${e instanceof Error ? e.message : String(e)}`);
  }
}

/** The nightly job's check, offline: the database against its anchor file. */
export async function verifyDatabase(dbPath: string, anchorPath: string, verifiers: Verifier[]): Promise<InstallationVerdict> {
  const db = openReadOnly(dbPath);
  try {
    const tenants = (db.query("SELECT id FROM tenants ORDER BY id").values() as [number][]).map(([id]) => id);
    return await verifyInstallation(db, dbPath, anchorPath, tenants, verifiers, { workers: 0 });
  } finally {
    db.close();
  }
}

export interface WitnessVerdict {
  /** The file holds the checkpoint's records, the chains reach them, and the whole check passes (`volledig`). */
  ok: boolean;
  /** Why the anchor file does not hold the checkpoint's state; absent when it does. */
  fout?: string;
  grootte: number;
  /** The chains against each tenant's newest checkpoint among the checkpoint's records; absent when the file does not hold them. */
  verdict?: InstallationVerdict;
  /** The whole check, as `verify` without --checkpoint: the database against the file as it is now. */
  volledig: InstallationVerdict;
}

/**
 * Does the database and its anchor file still hold the state an installation checkpoint
 * (kept off the machine) signed? The checkpoint's tree is over the file's checkpoint and
 * retention lines in order: the root over the first `size` of them must equal it, and
 * the chains must still reach each tenant's newest checkpoint among those lines. And the
 * whole check must pass as well: an older checkpoint says nothing of what was signed
 * after it, and entries signed since then and deleted (or a database put back a run)
 * still reach the older checkpoint's sizes.
 */
export async function verifyAgainstInstallationCheckpoint(dbPath: string, anchorPath: string, note: string, verifiers: Verifier[]): Promise<WitnessVerdict> {
  return verifyAgainstInstallationCheckpointWith(anchorPath, note, verifiers, async (targets) => {
    const db = openReadOnly(dbPath);
    try {
      const tenants = (db.query("SELECT id FROM tenants ORDER BY id").values() as [number][]).map(([id]) => id);
      return await verifyInstallation(db, dbPath, anchorPath, tenants, verifiers, { workers: 0, ...(targets ? { checkpoints: targets } : {}) });
    } finally {
      db.close();
    }
  });
}

/**
 * The witness check for any store: `verifyAt` checks the database's chains against the
 * given checkpoints (the newest of each tenant among the file's first `size` records),
 * or, given none, makes the whole check (the file's newest checkpoints, and the database
 * not behind the file).
 */
export async function verifyAgainstInstallationCheckpointWith(
  anchorPath: string,
  note: string,
  verifiers: Verifier[],
  verifyAt: (targets?: Map<number, CheckpointRef>) => Promise<InstallationVerdict>,
): Promise<WitnessVerdict> {
  const o = openInstallationCheckpoint(note, verifiers);
  if (!o.ok) throw new CannotCheck(`het installatie-checkpoint is niet geldig ondertekend door een vertrouwde sleutel (${o.error})`);
  const witness = await witnessCheck(anchorPath, o.checkpoint, verifiers, verifyAt);
  const volledig = await verifyAt();
  const holds = (v: InstallationVerdict) => !v.probleem && v.tenants.every((t) => t.intact);
  return { ...witness, ok: witness.fout === undefined && holds(witness.verdict!) && holds(volledig), volledig };
}

/** The checkpoint's own part: the file's first `size` records under its root, and the chains reaching their newest checkpoints. */
async function witnessCheck(
  anchorPath: string,
  checkpoint: { size: number; root: Uint8Array },
  verifiers: Verifier[],
  verifyAt: (targets: Map<number, CheckpointRef>) => Promise<InstallationVerdict>,
): Promise<{ grootte: number; fout: string } | { grootte: number; fout?: undefined; verdict: InstallationVerdict }> {
  const size = checkpoint.size;
  if (!existsSync(anchorPath)) return { grootte: size, fout: `ankerbestand ontbreekt: ${anchorPath}` };
  const range = new CompactRange();
  const newest = new Map<number, { soort: "checkpoint" | "herstel"; note: string }>();
  for (const fl of readLines(anchorPath)) {
    if (range.size >= size) break;
    if (fl.parsed.kind !== "record" || fl.parsed.line.soort === "installatie") continue;
    const l = fl.parsed.line;
    range.pushLeafHash(installationLeafHash(l.note));
    if ((l.soort === "checkpoint" || l.soort === "herstel") && l.tenantId !== null) newest.set(l.tenantId, { soort: l.soort, note: l.note });
  }
  if (range.size < size) {
    return { grootte: size, fout: `het ankerbestand bevat ${range.size} records, het checkpoint telt er ${size}: het bestand is ingekort of teruggezet` };
  }
  if (!Buffer.from(range.root()).equals(Buffer.from(checkpoint.root))) {
    return { grootte: size, fout: "de eerste records van het ankerbestand geven een andere root dan het checkpoint: het bestand is herschreven" };
  }
  const targets = new Map<number, CheckpointRef>();
  for (const [tenantId, n] of newest) {
    const c = openTreeHead(n.note, tenantId, verifiers, n.soort);
    if (!c.ok) return { grootte: size, fout: `${n.soort} van tenant ${tenantId} in het bestand is niet geldig ondertekend` };
    targets.set(tenantId, c.head);
  }
  return { grootte: size, verdict: await verifyAt(targets) };
}

/** The first line of a bundle (docs/audit-chain.md, "Offline verification", gives each field's encoding). */
export interface BundleHeader {
  soort: "nachtwacht-bundel-v1";
  tenantId: number;
  verificatieSleutels: string[];
  /** The tenant's newest checkpoint in the anchor file (a signed note), or the restore acceptance signed after it. */
  checkpoint: string;
  /** The signed retention record the exported chain starts from; null from genesis or from an adoption. */
  retentie: string | null;
  /** The signed adoption of a chain adopted by the operator (its tree starts after the adoption's seq); absent or null otherwise. */
  adoptie?: string | null;
  /** RFC 6962 inclusion proof: `index` is the leaf's index in the tree (seq − 1, minus an adoption's seq), `grootte` the tree size. */
  bewijs?: { seq: number; index: number; grootte: number; hashes: string[] };
  /**
   * The anchor file's newest installation checkpoint (a signed note) when it covers the
   * head's line, and the RFC 6962 inclusion proof of the head in its tree: `index` is the
   * head line's leaf index (its place among the file's non-installation lines), `hashes`
   * the audit path. Absent when no installation checkpoint covers the head yet, and in
   * bundles of earlier versions.
   */
  installatie?: { checkpoint: string; index: number; hashes: string[] };
}

/** One entry of a bundle: the hashed fields (the tenant is the bundle's), its id and hash. */
export interface BundleEntry extends Omit<ChainFields, "tenantId"> {
  id: number;
  hash: string;
}

/** One tenant's entries with what proves them, as JSON lines; `proveSeq` adds an inclusion proof. */
export async function exportBundle(dbPath: string, anchorPath: string, tenantId: number, verifiers: Verifier[], proveSeq?: number): Promise<string[]> {
  return exportBundleFrom(
    async (size) => {
      const db = openReadOnly(dbPath);
      try {
        db.run("BEGIN");
        const first = db.query("SELECT seq FROM audit_entries WHERE tenant_id = ? ORDER BY seq LIMIT 1").get(tenantId) as { seq: number } | null;
        const start = chainStart(db, tenantId, first?.seq ?? null, verifiers);
        const entries: EntryRow[] = start.ok ? [...entriesAfter(db, tenantId, start.seq, size)] : [];
        db.run("COMMIT");
        return { start, entries };
      } finally {
        db.close();
      }
    },
    anchorPath,
    tenantId,
    verifiers,
    proveSeq,
  );
}

/**
 * A tenant's chain as a bundle, the chain read by `readChain` from any store (SQLite
 * above, PostgreSQL in src/pg/offline.ts): in one snapshot, its start and its entries
 * after the start up to seq `size`.
 */
export async function exportBundleFrom(
  readChain: (size: number) => Promise<{ start: ChainStart; entries: EntryRow[] }>,
  anchorPath: string,
  tenantId: number,
  verifiers: Verifier[],
  proveSeq?: number,
): Promise<string[]> {
  let checkpoint: { soort: "checkpoint" | "herstel"; note: string; leaf: number } | null = null;
  let adoptie: string | null = null;
  // The installation tree's leaves are counted here (every record line but installation
  // lines) and hashed in a second pass (installationProof): a file of years holds millions.
  let leaves = 0;
  let installation: string | null = null;
  if (!existsSync(anchorPath)) throw new CannotCheck(`ankerbestand niet gevonden: ${anchorPath}`);
  for (const fl of readLines(anchorPath)) {
    const p = fl.parsed;
    if (p.kind !== "record") continue;
    if (p.line.soort === "installatie") {
      installation = p.line.note;
      continue;
    }
    leaves++;
    if (p.line.tenantId !== tenantId) continue;
    if (p.line.soort === "checkpoint" || p.line.soort === "herstel") checkpoint = { soort: p.line.soort, note: p.line.note, leaf: leaves - 1 };
    if (p.line.soort === "adoptie" && openAdoptionRecord(p.line.note, tenantId, verifiers).ok) adoptie = p.line.note;
  }
  if (checkpoint === null) throw new CannotCheck(`tenant ${tenantId} heeft nog geen checkpoint in het ankerbestand`);
  const cp = openTreeHead(checkpoint.note, tenantId, verifiers, checkpoint.soort);
  if (!cp.ok) throw new CannotCheck(`het nieuwste checkpoint van tenant ${tenantId} is niet geldig ondertekend (${cp.error})`);
  const { size, basis } = cp.head;

  const { start, entries: rows } = await readChain(size);
  if (!start.ok) throw new CannotCheck(`de keten van tenant ${tenantId} begint niet bij een geldig retentie- of adoptierecord (${start.reden}); controleer eerst met verify`);
  if (start.basis !== basis) throw new CannotCheck(`het nieuwste checkpoint van tenant ${tenantId} hoort bij een andere boom dan de keten; controleer eerst met verify`);
  const entries: BundleEntry[] = rows.map((r) => ({ seq: r.seq, id: r.id, createdAt: r.created_at, actor: r.actor, action: r.action, subject: r.subject, details: r.details, prevHash: r.prev_hash, hash: r.hash }));
  const header: BundleHeader = {
    soort: "nachtwacht-bundel-v1",
    tenantId,
    verificatieSleutels: verifiers.map((v) => v.verifierKey),
    checkpoint: checkpoint.note,
    retentie: start.record ? start.note : null,
    // The adoption travels with every bundle of an adopted chain: verify --bundel names it.
    ...(basis > 0 ? { adoptie: start.adoption ? start.note : adoptie } : {}),
  };
  if (proveSeq !== undefined) {
    if (start.seq > start.basis) throw new CannotCheck("een inclusiebewijs kan alleen zolang de keten haar eerste blad nog heeft; na audit-retentie ontbreken de oudste bladeren");
    if (proveSeq <= basis || proveSeq > size) throw new CannotCheck(`seq ${proveSeq} valt buiten het checkpoint (seq ${basis + 1} t/m ${size})`);
    if (entries.length !== size - basis) throw new CannotCheck(`de keten haalt het checkpoint niet (${entries.length} van ${size - basis} entries); controleer eerst met verify`);
    const leaves = entries.map((e) => leafHashOfHex(e.hash));
    const index = proveSeq - basis - 1;
    header.bewijs = { seq: proveSeq, index, grootte: size - basis, hashes: inclusionProof(leaves, index).map((h) => Buffer.from(h).toString("base64")) };
  }
  const covering = installation === null ? undefined : installationProof(installation, anchorPath, checkpoint, verifiers);
  if (covering) header.installatie = covering;
  // jsonLine: the bundle goes to a terminal as often as to a file (export without --uit).
  return [jsonLine(header), ...entries.map((e) => jsonLine(e))];
}

/** The installation tree's leaf hashes of the anchor file, in file order (every record line but installation lines). */
function* installationLeaves(anchorPath: string): Generator<Uint8Array> {
  for (const fl of readLines(anchorPath)) {
    if (fl.parsed.kind === "record" && fl.parsed.line.soort !== "installatie") yield installationLeafHash(fl.parsed.line.note);
  }
}

/**
 * The file's newest installation checkpoint (`note`) with the inclusion proof of the
 * head's line (`head.leaf`) in its tree, hashed in one more pass over the file (lines
 * appended meanwhile lie past the tree); undefined when it does not cover that line yet
 * (a head appended after it). A checkpoint that does not open, or whose root the proof
 * from the file's leaves does not give, is a file problem: export refuses, as verify
 * would say.
 */
function installationProof(note: string, anchorPath: string, head: { note: string; leaf: number }, verifiers: Verifier[]): BundleHeader["installatie"] {
  const { leaf } = head;
  const o = openInstallationCheckpoint(note, verifiers);
  if (!o.ok) throw new CannotCheck(`het nieuwste installatie-checkpoint in het ankerbestand is niet geldig ondertekend (${o.error}); controleer eerst met verify`);
  const size = o.checkpoint.size;
  if (size <= leaf) return undefined;
  const noRoot = "het ankerbestand geeft niet de root van zijn nieuwste installatie-checkpoint; controleer eerst met verify";
  let proof: Uint8Array[];
  try {
    proof = inclusionProofOf(installationLeaves(anchorPath), size, leaf);
  } catch {
    throw new CannotCheck(noRoot);
  }
  // For the head's note as the first pass read it: whatever the file says between the passes, the signed root holds that note there.
  if (!verifyInclusion(installationLeafHash(head.note), leaf, size, proof, o.checkpoint.root)) throw new CannotCheck(noRoot);
  return { checkpoint: note, index: leaf, hashes: proof.map((h) => Buffer.from(h).toString("base64")) };
}

export interface BundleVerdict {
  ok: boolean;
  tenantId: number | null;
  entries: number;
  fout?: string;
  /** The inclusion proof held (absent when the bundle has none). */
  bewijs?: boolean;
  /** The chain was adopted by the operator: what it cannot prove (absent otherwise). */
  adoptie?: AdoptionRecord;
  /** The bundle's head is a restore acceptance: the chain went back from `van` to `naar`. */
  herstel?: { van: number; naar: number };
  /**
   * The head the bundle was checked against, once it opened: an auditor compares it with
   * the anchor file and the newest e-mailed installation checkpoint, since a bundle alone
   * never shows that its head is still the tenant's newest. `grootte` is the tree size as
   * signed, `seq` the newest seq (basis + tree size), `root` base64.
   */
  kop?: { soort: "checkpoint" | "herstel"; grootte: number; seq: number; root: string };
  /**
   * The installation checkpoint whose tree holds the head (its note at leaf `index`), as
   * proved by the header; absent when the bundle has none. `grootte` is its tree size,
   * `root` base64: what an auditor compares with an e-mailed installation checkpoint.
   */
  installatie?: { grootte: number; root: string; index: number };
}

/** Why a signed note of the bundle does not open, worded by openNote's or the parser's reason. */
function unopened(what: string, reason: string): string {
  switch (reason) {
    case "andere-oorsprong":
      return `${what} is geldig ondertekend, maar van een andere tenant, sleutel of boom (andere-oorsprong)`;
    case "misvormd":
      return `${what} is niet te openen (misvormd)`;
    default:
      return `${what} is niet geldig ondertekend door een vertrouwde sleutel (${reason})`;
  }
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);
const isSeq = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;
const isHash32 = (v: unknown) => typeof v === "string" && Buffer.from(v, "base64").length === 32 && Buffer.from(v, "base64").toString("base64") === v;

/**
 * Which field of a bundle's header does not have its documented shape, or null: checked
 * before use, so a hand-edited or foreign bundle is refused by name (exit 2), never by a
 * TypeError halfway through.
 */
function malformedHeaderField(h: Record<string, unknown>): string | null {
  if (!("retentie" in h) || (h.retentie !== null && typeof h.retentie !== "string")) return "retentie (een ondertekend retentierecord als tekst, of null)";
  if (h.adoptie !== undefined && h.adoptie !== null && typeof h.adoptie !== "string") return "adoptie (een ondertekend adoptierecord als tekst, null of afwezig)";
  if (h.bewijs === undefined) return null;
  const b = h.bewijs;
  if (!isObject(b)) return "bewijs (een object {seq, index, grootte, hashes})";
  for (const k of ["seq", "index", "grootte"] as const) if (!isSeq(b[k])) return `bewijs.${k} (een geheel getal van 0 of meer)`;
  if (!Array.isArray(b.hashes) || !b.hashes.every(isHash32)) return "bewijs.hashes (een lijst van 32-byte hashes in standaard base64 met opvulling)";
  return null;
}

/** The same for the optional `installatie` field: {checkpoint, index, hashes}. */
function malformedInstallationField(h: Record<string, unknown>): string | null {
  if (h.installatie === undefined) return null;
  const i = h.installatie;
  if (!isObject(i)) return "installatie (een object {checkpoint, index, hashes})";
  if (typeof i.checkpoint !== "string") return "installatie.checkpoint (een ondertekend installatie-checkpoint als tekst)";
  if (!isSeq(i.index)) return "installatie.index (een geheel getal van 0 of meer)";
  if (!Array.isArray(i.hashes) || !i.hashes.every(isHash32)) return "installatie.hashes (een lijst van 32-byte hashes in standaard base64 met opvulling)";
  return null;
}

const ENTRY_TEXT_FIELDS = ["createdAt", "actor", "action", "subject", "details", "prevHash", "hash"] as const;

/** The same for an entry line: `seq` and `id` integers, the other fields strings (`details` the stored text). */
function malformedEntryField(e: unknown): string | null {
  if (!isObject(e)) return "(geen object)";
  if (!isSeq(e.seq)) return "seq";
  if (!Number.isSafeInteger(e.id)) return "id";
  return ENTRY_TEXT_FIELDS.find((k) => typeof e[k] !== "string") ?? null;
}

/** Checks a bundle offline, with only the trusted public keys. */
export function verifyBundle(lines: string[], verifiers: Verifier[]): BundleVerdict {
  const nonEmpty = lines.filter((l) => l.trim() !== "");
  let header: BundleHeader;
  let entries: BundleEntry[];
  try {
    header = JSON.parse(nonEmpty[0] ?? "") as BundleHeader;
    entries = nonEmpty.slice(1).map((l) => JSON.parse(l) as BundleEntry);
  } catch {
    throw new CannotCheck("geen bundel: een regel is geen JSON");
  }
  if (!isObject(header) || header.soort !== "nachtwacht-bundel-v1" || !Number.isSafeInteger(header.tenantId) || typeof header.checkpoint !== "string") {
    throw new CannotCheck("geen bundel van nachtwacht (nachtwacht-bundel-v1)");
  }
  const badField = malformedHeaderField(header as unknown as Record<string, unknown>) ?? malformedInstallationField(header as unknown as Record<string, unknown>);
  if (badField) throw new CannotCheck(`geen geldige bundel: het veld ${badField} van de kopregel is ongeldig of ontbreekt`);
  for (const [i, e] of entries.entries()) {
    const bad = malformedEntryField(e);
    if (bad) throw new CannotCheck(`geen geldige bundel: regel ${i + 2}, veld ${bad} van de entry is ongeldig of ontbreekt`);
  }
  const tenantId = header.tenantId;
  let kop: BundleVerdict["kop"];
  const fail = (fout: string): BundleVerdict => ({ ok: false, tenantId, entries: entries.length, fout, ...(kop ? { kop } : {}) });
  const cp = openTreeHead(header.checkpoint, tenantId, verifiers);
  if (!cp.ok) return fail(unopened("het checkpoint", cp.error));
  const head = cp.head;
  kop = { soort: head.soort, grootte: head.size - head.basis, seq: head.size, root: Buffer.from(head.root).toString("base64") };
  let range = new CompactRange();
  let prevSeq = 0;
  let prevHash = GENESIS_HASH;
  let basis = 0;
  let adoption: AdoptionRecord | undefined;
  if (header.adoptie != null) {
    const a = openAdoptionRecord(header.adoptie, tenantId, verifiers);
    if (!a.ok) return fail(unopened("het adoptierecord", a.error));
    adoption = a.record;
    basis = prevSeq = a.record.seq;
    prevHash = a.record.hash;
  }
  if (header.retentie !== null) {
    const r = openRetentionRecord(header.retentie, tenantId, verifiers);
    if (!r.ok) return fail(unopened("het retentierecord", r.error));
    const why = retentionUnjustified(r.record);
    if (why) return fail(`het retentierecord rechtvaardigt de verwijdering niet: ${why}`);
    if (r.record.basis !== basis) return fail("het retentierecord hoort bij een andere boom dan het adoptierecord");
    range = r.record.bereik.clone();
    prevSeq = r.record.seq;
    prevHash = r.record.hash;
  }
  // A tree that starts after an adoption is never taken for one from genesis: the adoption must be in the bundle.
  if (head.basis !== basis) return fail(head.basis > 0 ? `het checkpoint is van een keten die bij seq ${head.basis} is geadopteerd, maar de bundel bevat dat adoptierecord niet` : "het checkpoint hoort bij een andere boom dan het begin van de bundel");
  for (const [i, e] of entries.entries()) {
    const reden = linkBreak(entryHash({ ...e, tenantId }) !== e.hash, i === 0, e.seq, e.prevHash, prevSeq, prevHash);
    if (reden) return fail(`entry seq ${e.seq}: ${reden}`);
    range.pushEntryHash(e.hash);
    prevSeq = e.seq;
    prevHash = e.hash;
  }
  if (basis + range.size !== head.size) return fail(`de bundel bevat entries tot seq ${basis + range.size}, het checkpoint telt er tot seq ${head.size}`);
  if (!Buffer.from(range.root()).equals(head.root)) return fail("de entries geven een andere Merkle-root dan het ondertekende checkpoint");
  const out: BundleVerdict = { ok: true, tenantId, entries: entries.length, kop };
  if (adoption) out.adoptie = adoption;
  if (head.soort === "herstel") {
    const h = openRestoreHead(header.checkpoint, tenantId, verifiers);
    if (h) out.herstel = h;
  }
  if (header.bewijs) {
    const b = header.bewijs;
    const entry = entries.find((e) => e.seq === b.seq);
    const proof = b.hashes.map((h) => new Uint8Array(Buffer.from(h, "base64")));
    const held =
      entry !== undefined && b.index === b.seq - basis - 1 && b.grootte === head.size - basis && verifyInclusion(leafHashOfHex(entry.hash), b.index, b.grootte, proof, head.root);
    if (!held) return { ...fail(`het inclusiebewijs voor seq ${b.seq} klopt niet`), bewijs: false };
    out.bewijs = true;
  }
  if (header.installatie) {
    // The head's note is a leaf of the installation tree: the proof ties the bundle to an installation checkpoint.
    const i = header.installatie;
    const o = openInstallationCheckpoint(i.checkpoint, verifiers);
    if (!o.ok) return fail(unopened("het installatie-checkpoint", o.error));
    const proof = i.hashes.map((h) => new Uint8Array(Buffer.from(h, "base64")));
    if (!verifyInclusion(installationLeafHash(header.checkpoint), i.index, o.checkpoint.size, proof, o.checkpoint.root)) {
      return fail(`het inclusiebewijs van de kop in het installatie-checkpoint (grootte ${o.checkpoint.size}, blad ${i.index}) klopt niet`);
    }
    out.installatie = { grootte: o.checkpoint.size, root: Buffer.from(o.checkpoint.root).toString("base64"), index: i.index };
  }
  return out;
}

/** How a bundle's installation checkpoint compares with one kept off the machine (the daily e-mail). */
export interface MailedComparison {
  /** `gelijk`: the same tree, so the e-mailed root covers the head; `afwijkend`: two trees of one size (exit 1); `onbewijsbaar`: not provable from the bundle (exit 2). */
  uitkomst: "gelijk" | "afwijkend" | "onbewijsbaar";
  grootte: number;
  root: string;
  /** Dutch: why, for afwijkend and onbewijsbaar. */
  reden?: string;
}

/**
 * The bundle's installation checkpoint (`v.installatie`, as verifyBundle proved it)
 * against an e-mailed one (`note`, which must open under a trusted key: else CannotCheck).
 * Only equality is proved: that trees of different sizes are one growing tree needs a
 * consistency proof, and that the anchor file (verify --checkpoint).
 */
export function compareWithMailedCheckpoint(v: BundleVerdict, note: string, verifiers: Verifier[]): MailedComparison {
  const o = openInstallationCheckpoint(note, verifiers);
  if (!o.ok) throw new CannotCheck(`het installatie-checkpoint is niet geldig ondertekend door een vertrouwde sleutel (${o.error})`);
  const mail = { grootte: o.checkpoint.size, root: Buffer.from(o.checkpoint.root).toString("base64") };
  const b = v.installatie;
  const withFile = "dat kan alleen met het ankerbestand (verify --checkpoint, docs/audit-chain.md)";
  if (!b) return { ...mail, uitkomst: "onbewijsbaar", reden: `de bundel bevat geen installatie-checkpoint (een export van een eerdere versie, of de kop is nieuwer dan het nieuwste installatie-checkpoint): de kop is niet aan het checkpoint uit de e-mail te binden; ${withFile}` };
  if (b.grootte === mail.grootte) {
    if (b.root === mail.root) return { ...mail, uitkomst: "gelijk" };
    return { ...mail, uitkomst: "afwijkend", reden: `het installatie-checkpoint van de bundel en dat uit de e-mail hebben dezelfde grootte ${mail.grootte} maar een andere root: er zijn twee verschillende bomen ondertekend, het ankerbestand is herschreven` };
  }
  const what =
    mail.grootte > b.grootte
      ? `de e-mail (grootte ${mail.grootte}) is van na het installatie-checkpoint van de bundel (grootte ${b.grootte})`
      : `de e-mail (grootte ${mail.grootte}) is van vóór het installatie-checkpoint van de bundel (grootte ${b.grootte})${b.index >= mail.grootte ? `, en de kop (blad ${b.index}) is pas daarna ondertekend` : ""}`;
  return { ...mail, uitkomst: "onbewijsbaar", reden: `${what}: dat beide één groeiende boom zijn, vraagt een consistentiebewijs, en ${withFile}` };
}

function openRestoreHead(note: string, tenantId: number, verifiers: Verifier[]): { van: number; naar: number } | null {
  const o = openRestoreRecord(note, tenantId, verifiers);
  return o.ok ? { van: o.record.van, naar: o.record.naar } : null;
}
