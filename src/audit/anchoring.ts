// Anchoring (audit-anker): per tenant a signed checkpoint of its chain, and one signed
// installation checkpoint over every record in the anchor file; appended to the file
// (the authority) and copied into audit_anchor_log, in one write transaction.
//
// Incremental: a tenant's newest checkpoint row keeps the tree's compact range at its
// size, so a run hashes only the entries since. That range is used only when it folds
// to the signed root of that checkpoint; otherwise the tree is rebuilt from the chain's
// start (genesis, the signed retention record or the signed adoption).
import type { Database } from "bun:sqlite";
import { appendLines, databaseEnd, insertRows, readLines, type StoredLine } from "./anchor-file.ts";
import { compareWithFile, recordSize, type RowReason } from "./anchor-check.ts";
import { entriesAfter, rowHash } from "./chain.ts";
import { CompactRange, leafHashOfBytes } from "./merkle.ts";
import type { Verifier } from "./note.ts";
import { openInstallationCheckpoint, signCheckpoint, signInstallationCheckpoint, anchorLineText, type Keys } from "./records.ts";
import { chainStart, linkBreak, type BreakReason, type CheckpointRef } from "./verify.ts";

/** The file holds records the database lacks that are more than one crashed run: refused. */
export class AnchorFileError extends Error {
  constructor(
    readonly reden: "database-teruggezet" | "bestand-gewijzigd",
    message: string,
  ) {
    super(message);
  }
}

/**
 * Copies the file's tail — records after the database's last row, left by a crash
 * between an append's fsync and its COMMIT — into audit_anchor_log. Runs inside the
 * caller's write transaction, before it appends. More than one run's worth is not a
 * crash but a database older than the file: AnchorFileError, nothing copied.
 */
export function syncTail(sqlite: Database, path: string, verifiers: Verifier[]): number {
  const rows = tailRows(path, databaseEnd(sqlite), verifiers);
  insertRows(sqlite, rows);
  return rows.length;
}

/** The rule of syncTail for any store: the file's records from byte `end` (the database's end) on, as rows to insert. */
export function tailRows(path: string, end: number, verifiers: Verifier[]): StoredLine[] {
  const rows: StoredLine[] = [];
  let installations = 0;
  let afterInstallation = false;
  for (const fl of readLines(path, end)) {
    if (fl.parsed.kind !== "record") continue;
    const l = fl.parsed.line;
    const grootte = recordSize(l, verifiers);
    if (grootte === null) throw new AnchorFileError("bestand-gewijzigd", `regel op positie ${fl.positie} van het ankerbestand is niet geldig ondertekend`);
    if (installations > 0) afterInstallation = true;
    if (l.soort === "installatie") installations++;
    rows.push({ ...l, positie: fl.positie, grootte, bereik: null });
  }
  if (installations > 1 || afterInstallation) {
    throw new AnchorFileError("database-teruggezet", "het ankerbestand bevat meer dan één run die de database niet kent: de database is ouder dan het bestand");
  }
  return rows;
}

export interface Refusal {
  tenantId: number;
  seq: number;
  reden: BreakReason | RowReason;
}

/**
 * Where a tenant's tree continues from. With a previous head (the file's newest
 * checkpoint or restore acceptance, passed in): its row's compact range when that folds
 * to the signed root, else the tree rebuilt from the chain's start, which must reach the
 * same root — a log never signs a checkpoint inconsistent with one it signed before, so
 * a chain recomputed by a database writer is refused here, not signed. Without one: the
 * chain's start (genesis, the signed retention record or the signed adoption). The
 * tree's leaves are the entries after `basis` (0, or S for a chain adopted at S).
 */
function tenantBase(
  sqlite: Database,
  tenantId: number,
  firstSeq: number,
  prev: CheckpointRef | null,
  verifiers: Verifier[],
): { range: CompactRange; basis: number; hash: string | null } | { reden: BreakReason; seq: number } {
  const start = chainStart(sqlite, tenantId, firstSeq, verifiers);
  if (!start.ok) return { reden: start.reden, seq: firstSeq };
  const basis = start.basis;
  // A head of another tree (from genesis, while the chain is adopted, or the other way round).
  if (prev && (prev.basis ?? 0) !== basis) return { reden: "checkpoint-afwijkend", seq: prev.size };
  if (!prev || prev.size <= start.seq) return { range: start.range, basis, hash: start.hash };
  const row = sqlite
    .query("SELECT bereik FROM audit_anchor_log WHERE tenant_id = ? AND soort IN ('checkpoint', 'herstel') AND grootte = ? AND bereik IS NOT NULL ORDER BY positie DESC LIMIT 1")
    .get(tenantId, prev.size) as { bereik: string } | null;
  if (row) {
    try {
      const range = CompactRange.decode(prev.size - basis, row.bereik);
      if (Buffer.from(range.root()).equals(prev.root)) return { range, basis, hash: null };
    } catch {}
  }
  // Rebuild: every entry from the start up to the previous head.
  const range = start.range.clone();
  let prevSeq = start.seq;
  let prevHash = start.hash;
  for (const r of entriesAfter(sqlite, tenantId, start.seq, prev.size)) {
    const reden = linkBreak(rowHash(tenantId, r) !== r.hash, prevSeq === start.seq, r.seq, r.prev_hash, prevSeq, prevHash);
    if (reden) return { reden, seq: r.seq };
    range.pushEntryHash(r.hash);
    prevSeq = r.seq;
    prevHash = r.hash;
  }
  if (basis + range.size < prev.size) return { reden: "kop-ontbreekt", seq: prev.size };
  if (!Buffer.from(range.root()).equals(prev.root)) return { reden: "checkpoint-afwijkend", seq: prev.size };
  return { range, basis, hash: prevHash };
}

/**
 * Extends one tenant's tree to its head, checking each new entry's hash and link on
 * the way: a chain that does not check out is not signed. Null when nothing changed.
 */
function extendTenant(sqlite: Database, tenantId: number, prev: CheckpointRef | null, verifiers: Verifier[]): { range: CompactRange; basis: number } | { refusal: Refusal } | null {
  sqlite.run("BEGIN");
  try {
    const first = sqlite.query("SELECT seq FROM audit_entries WHERE tenant_id = ? ORDER BY seq LIMIT 1").get(tenantId) as { seq: number } | null;
    const head = sqlite.query("SELECT seq FROM audit_entries WHERE tenant_id = ? ORDER BY seq DESC LIMIT 1").get(tenantId) as { seq: number } | null;
    if (!first || !head) return null;
    if (prev && prev.size >= head.seq) {
      // Nothing new; a chain now shorter than its checkpoint is the verifier's to report.
      return prev.size === head.seq ? null : { refusal: { tenantId, seq: prev.size, reden: "kop-ontbreekt" } };
    }
    const base = tenantBase(sqlite, tenantId, first.seq, prev, verifiers);
    if ("reden" in base) return { refusal: { tenantId, seq: base.seq, reden: base.reden } };
    const { range, basis } = base;
    // Extending a stored compact range, the hash of its last entry is read from that
    // entry: the first new entry must link to it. (Were that entry altered, the new one
    // would not link and the tenant is refused; the verifier names the alteration.)
    let prevSeq = basis + range.size;
    let prevHash =
      base.hash ?? (sqlite.query("SELECT hash FROM audit_entries WHERE tenant_id = ? AND seq = ?").get(tenantId, prevSeq) as { hash: string } | null)?.hash ?? null;
    let isFirst = true;
    for (const r of entriesAfter(sqlite, tenantId, prevSeq)) {
      const reden = linkBreak(rowHash(tenantId, r) !== r.hash, isFirst && base.hash !== null, r.seq, r.prev_hash, prevSeq, prevHash ?? r.prev_hash);
      isFirst = false;
      if (reden) return { refusal: { tenantId, seq: r.seq, reden } };
      range.pushEntryHash(r.hash);
      prevSeq = r.seq;
      prevHash = r.hash;
    }
    return { range, basis };
  } finally {
    sqlite.run("COMMIT");
  }
}

/** The installation tree up to the file's end, from the newest valid installation row or from the start. */
function installationRange(sqlite: Database, path: string, verifiers: Verifier[]): { range: CompactRange; rebuilt: boolean } {
  const last = sqlite
    .query("SELECT positie, note, grootte, bereik FROM audit_anchor_log WHERE soort = 'installatie' ORDER BY positie DESC LIMIT 1")
    .get() as { positie: number; note: string; grootte: number; bereik: string | null } | null;
  let range = new CompactRange();
  let from = 0;
  let rebuilt = last !== null;
  if (last && last.bereik !== null) {
    const o = openInstallationCheckpoint(last.note, verifiers);
    let candidate: CompactRange | null = null;
    try {
      candidate = CompactRange.decode(last.grootte, last.bereik);
    } catch {}
    // The row's line must still stand in the file where the row says.
    const line = anchorLineText({ soort: "installatie", tenantId: null, note: last.note });
    let inFile = false;
    for (const fl of readLines(path, last.positie)) {
      inFile = fl.text === line;
      break;
    }
    if (o.ok && candidate && inFile && o.checkpoint.size === candidate.size && Buffer.from(candidate.root()).equals(o.checkpoint.root)) {
      range = candidate;
      from = last.positie + Buffer.byteLength(line) + 1;
      rebuilt = false;
    }
  }
  for (const fl of readLines(path, from)) {
    if (fl.parsed.kind === "record" && fl.parsed.line.soort !== "installatie") range.pushLeafHash(leafHashOfBytes(Buffer.from(fl.parsed.line.note, "utf8")));
  }
  return { range, rebuilt };
}

export interface AnchoringResult {
  checkpoints: { tenantId: number; size: number; root: string }[];
  unchanged: number;
  refused: Refusal[];
  /** The installation checkpoint this run signed; null when nothing changed. */
  installatie: string | null;
  /** Tail lines copied from the file into the database (after a crash). */
  hersteld: number;
  /** The installation tree had to be rebuilt from the whole file. */
  herbouwd: boolean;
}

/**
 * One anchoring run. It first compares the anchor file with its database copy (as the
 * verifier does): a file that is damaged, or that holds runs the database lacks, stops
 * the run (AnchorFileError), and a tenant whose rows do not match the file is refused.
 * What it extends is each tenant's newest checkpoint in the file.
 */
export async function anchorAll(sqlite: Database, dbPath: string, path: string, keys: Keys): Promise<AnchoringResult> {
  const cmp = await compareWithFile(dbPath, path, keys.verifiers);
  if (cmp.probleem) {
    throw new AnchorFileError(cmp.probleem.reden === "database-teruggezet" ? "database-teruggezet" : "bestand-gewijzigd", `${cmp.probleem.reden}: ${cmp.probleem.toelichting}`);
  }
  const tenants = (sqlite.query("SELECT id FROM tenants ORDER BY id").values() as [number][]).map(([id]) => id);
  const lines: StoredLine[] = [];
  const refused: Refusal[] = [];
  const checkpoints: AnchoringResult["checkpoints"] = [];
  let unchanged = 0;
  for (const tenantId of tenants) {
    const rowProblem = cmp.perTenant.get(tenantId);
    if (rowProblem) {
      refused.push({ tenantId, seq: rowProblem.seq, reden: rowProblem.reden });
      continue;
    }
    const prev = cmp.checkpoints.get(tenantId) ?? null;
    const r = extendTenant(sqlite, tenantId, prev && { size: prev.size, root: prev.root, basis: prev.basis }, keys.verifiers);
    if (r === null) {
      unchanged++;
      continue;
    }
    if ("refusal" in r) {
      refused.push(r.refusal);
      continue;
    }
    lines.push(checkpointLine(keys, tenantId, r.range, r.basis));
    checkpoints.push({ tenantId, size: r.basis + r.range.size, root: Buffer.from(r.range.root()).toString("base64") });
  }

  // One write transaction, synchronous throughout (the connection is shared with the
  // rest of the process): the tail check, the installation tree, the append, the copy.
  sqlite.run("BEGIN IMMEDIATE");
  try {
    const hersteld = syncTail(sqlite, path, keys.verifiers);
    const { installatie, herbouwd } = writeRun(sqlite, path, keys, lines);
    sqlite.run("COMMIT");
    return { checkpoints, unchanged, refused, installatie, hersteld, herbouwd };
  } catch (e) {
    sqlite.run("ROLLBACK");
    throw e;
  }
}

/** A signed checkpoint of a tenant's tree as a line to write (its row keeps the compact range). */
export function checkpointLine(keys: Keys, tenantId: number, range: CompactRange, basis: number): StoredLine {
  return { soort: "checkpoint", tenantId, note: signCheckpoint(keys.signer, tenantId, range, basis), positie: 0, grootte: basis + range.size, bereik: range.encode() };
}

/**
 * Writes one run: `lines`, then an installation checkpoint over the whole file with
 * them, appended to the file (fsynced) and inserted as rows. Inside the caller's write
 * transaction (BEGIN IMMEDIATE), after the crash tail was copied in. Every run ends in
 * its installation line, which is how verification tells one run from several. With no
 * lines and a file that did not grow since the last installation checkpoint, nothing.
 */
export function writeRun(sqlite: Database, path: string, keys: Keys, lines: StoredLine[]): { installatie: string | null; herbouwd: boolean } {
  const inst = installationRange(sqlite, path, keys.verifiers);
  const changed = lines.length > 0 || inst.range.size > ((sqlite.query("SELECT max(grootte) AS n FROM audit_anchor_log WHERE soort = 'installatie'").get() as { n: number | null }).n ?? 0);
  if (!changed) return { installatie: null, herbouwd: inst.rebuilt };
  for (const l of lines) inst.range.pushLeafHash(leafHashOfBytes(Buffer.from(l.note, "utf8")));
  const installatie = signInstallationCheckpoint(keys.signer, inst.range);
  const all = [...lines, { soort: "installatie" as const, tenantId: null, note: installatie, positie: 0, grootte: inst.range.size, bereik: inst.range.encode() }];
  const positions = appendLines(path, all);
  all.forEach((l, i) => (l.positie = positions[i]!));
  insertRows(sqlite, all);
  return { installatie, herbouwd: inst.rebuilt };
}

/** The newest installation checkpoint in the database, for the daily report. */
export function latestInstallationCheckpoint(sqlite: Database): string | null {
  const row = sqlite.query("SELECT note FROM audit_anchor_log WHERE soort = 'installatie' ORDER BY positie DESC LIMIT 1").get() as { note: string } | null;
  return row?.note ?? null;
}
