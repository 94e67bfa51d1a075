// Anchoring (audit-anker): per tenant a signed checkpoint of its chain, and one signed
// installation checkpoint over every record in the anchor file; appended to the file
// (the authority) and copied into audit_anchor_log, in one write transaction.
//
// Incremental: a tenant's newest checkpoint row keeps the tree's compact range at its
// size, so a run hashes only the entries since. That range is used only when it folds
// to the signed root of that checkpoint; otherwise the tree is rebuilt from the chain's
// start (genesis or the signed retention record).
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
  const rows: StoredLine[] = [];
  let installations = 0;
  let afterInstallation = false;
  for (const fl of readLines(path, databaseEnd(sqlite))) {
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
  insertRows(sqlite, rows);
  return rows.length;
}

export interface Refusal {
  tenantId: number;
  seq: number;
  reden: BreakReason | RowReason;
}

/**
 * Where a tenant's tree continues from. With a previous checkpoint (the file's newest,
 * passed in): its row's compact range when that folds to the signed root, else the tree
 * rebuilt from the chain's start, which must reach the same root — a log never signs a
 * checkpoint inconsistent with one it signed before, so a chain recomputed by a database
 * writer is refused here, not signed. Without one: the chain's start (genesis or the
 * signed retention record).
 */
function tenantBase(sqlite: Database, tenantId: number, firstSeq: number, prev: CheckpointRef | null, verifiers: Verifier[]): { range: CompactRange; hash: string | null } | { reden: BreakReason; seq: number } {
  const start = chainStart(sqlite, tenantId, firstSeq, verifiers);
  if (!start.ok) return { reden: start.reden, seq: firstSeq };
  if (!prev || prev.size <= start.seq) return { range: start.range, hash: start.hash };
  const row = sqlite
    .query("SELECT bereik FROM audit_anchor_log WHERE tenant_id = ? AND soort = 'checkpoint' AND grootte = ? AND bereik IS NOT NULL ORDER BY positie DESC LIMIT 1")
    .get(tenantId, prev.size) as { bereik: string } | null;
  if (row) {
    try {
      const range = CompactRange.decode(prev.size, row.bereik);
      if (Buffer.from(range.root()).equals(prev.root)) return { range, hash: null };
    } catch {}
  }
  // Rebuild: every entry from the start up to the previous checkpoint.
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
  if (range.size < prev.size) return { reden: "kop-ontbreekt", seq: prev.size };
  if (!Buffer.from(range.root()).equals(prev.root)) return { reden: "checkpoint-afwijkend", seq: prev.size };
  return { range, hash: prevHash };
}

/**
 * Extends one tenant's tree to its head, checking each new entry's hash and link on
 * the way: a chain that does not check out is not signed. Null when nothing changed.
 */
function extendTenant(sqlite: Database, tenantId: number, prev: CheckpointRef | null, verifiers: Verifier[]): { range: CompactRange } | { refusal: Refusal } | null {
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
    const { range } = base;
    // Extending a stored compact range, the hash of its last entry is read from that
    // entry: the first new entry must link to it. (Were that entry altered, the new one
    // would not link and the tenant is refused; the verifier names the alteration.)
    let prevHash =
      base.hash ?? (sqlite.query("SELECT hash FROM audit_entries WHERE tenant_id = ? AND seq = ?").get(tenantId, range.size) as { hash: string } | null)?.hash ?? null;
    let prevSeq = range.size;
    let isFirst = true;
    for (const r of entriesAfter(sqlite, tenantId, range.size)) {
      const reden = linkBreak(rowHash(tenantId, r) !== r.hash, isFirst && base.hash !== null, r.seq, r.prev_hash, prevSeq, prevHash ?? r.prev_hash);
      isFirst = false;
      if (reden) return { refusal: { tenantId, seq: r.seq, reden } };
      range.pushEntryHash(r.hash);
      prevSeq = r.seq;
      prevHash = r.hash;
    }
    return { range };
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
    const r = extendTenant(sqlite, tenantId, prev && { size: prev.size, root: prev.root }, keys.verifiers);
    if (r === null) {
      unchanged++;
      continue;
    }
    if ("refusal" in r) {
      refused.push(r.refusal);
      continue;
    }
    const note = signCheckpoint(keys.signer, tenantId, r.range);
    lines.push({ soort: "checkpoint", tenantId, note, positie: 0, grootte: r.range.size, bereik: r.range.encode() });
    checkpoints.push({ tenantId, size: r.range.size, root: Buffer.from(r.range.root()).toString("base64") });
  }

  // One write transaction, synchronous throughout (the connection is shared with the
  // rest of the process): the tail check, the installation tree, the append, the copy.
  sqlite.run("BEGIN IMMEDIATE");
  try {
    const hersteld = syncTail(sqlite, path, keys.verifiers);
    const inst = installationRange(sqlite, path, keys.verifiers);
    const changed = lines.length > 0 || inst.range.size > ((sqlite.query("SELECT max(grootte) AS n FROM audit_anchor_log WHERE soort = 'installatie'").get() as { n: number | null }).n ?? 0);
    let installatie: string | null = null;
    if (changed) {
      for (const l of lines) inst.range.pushLeafHash(leafHashOfBytes(Buffer.from(l.note, "utf8")));
      installatie = signInstallationCheckpoint(keys.signer, inst.range);
      lines.push({ soort: "installatie", tenantId: null, note: installatie, positie: 0, grootte: inst.range.size, bereik: inst.range.encode() });
      const positions = appendLines(path, lines);
      lines.forEach((l, i) => (l.positie = positions[i]!));
      insertRows(sqlite, lines);
    }
    sqlite.run("COMMIT");
    return { checkpoints, unchanged, refused, installatie, hersteld, herbouwd: inst.rebuilt };
  } catch (e) {
    sqlite.run("ROLLBACK");
    throw e;
  }
}

/** The newest installation checkpoint in the database, for the daily report. */
export function latestInstallationCheckpoint(sqlite: Database): string | null {
  const row = sqlite.query("SELECT note FROM audit_anchor_log WHERE soort = 'installatie' ORDER BY positie DESC LIMIT 1").get() as { note: string } | null;
  return row?.note ?? null;
}
