// Anchoring (audit-anker): per tenant a signed checkpoint of its chain, and one signed
// installation checkpoint over every record in the anchor file; appended to the file
// (the authority) and copied into audit_anchor_log, in one write transaction.
//
// Incremental: a tenant's newest checkpoint row keeps the tree's compact range at its
// size, so a run hashes only the entries since. That range is used only when it folds
// to the signed root of that checkpoint; otherwise the tree is rebuilt from the chain's
// start (genesis, the signed retention record or the signed adoption).
import { Database } from "bun:sqlite";
import { BUSY_TIMEOUT_MS } from "../db.ts";
import { appendingTransaction, appendLines, databaseEnd, insertRows, lineAt, readLines, type RunAppend, type StoredLine } from "./anchor-file.ts";
import { compareWithFile, recordSize, type AnchorComparison, type RowReason } from "./anchor-check.ts";
import { entriesAfter, orphanChains, rowHash, type EntryRow } from "./chain.ts";
import { CompactRange, installationLeafHash } from "./merkle.ts";
import type { Verifier } from "./note.ts";
import { openInstallationCheckpoint, signCheckpoint, signInstallationCheckpoint, anchorLineText, type Keys } from "./records.ts";
import { chainStart, linkBreak, type BreakReason, type ChainStart, type CheckpointRef } from "./verify.ts";

/** The file holds records the database lacks that are more than one crashed run: refused. */
export class AnchorFileError extends Error {
  constructor(
    readonly reden: "database-teruggezet" | "bestand-gewijzigd",
    message: string,
  ) {
    super(message);
  }
}

/** A problem with the anchor file stops a run that writes: nothing is signed or deleted until it is explained. */
export function throwIfProblem(probleem: { reden: string; toelichting: string } | undefined): void {
  if (probleem) throw new AnchorFileError(probleem.reden === "database-teruggezet" ? "database-teruggezet" : "bestand-gewijzigd", `${probleem.reden}: ${probleem.toelichting}`);
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
 * Whether a tenant's head alone settles its run: undefined when its tree must be
 * extended; null when nothing is new; a refusal when the chain is now shorter than its
 * checkpoint (the verifier's to report). `head` is the newest seq (null: no entries).
 */
export function settledByHead(tenantId: number, prev: CheckpointRef | null, head: number | null): null | { refusal: Refusal } | undefined {
  if (head === null) return null;
  if (prev && prev.size >= head) return prev.size === head ? null : { refusal: { tenantId, seq: prev.size, reden: "kop-ontbreekt" } };
  return undefined;
}

/**
 * The rule of extending one tenant's tree to its head, for any store. Where it continues
 * from: with a previous head (the file's newest checkpoint or restore acceptance), that
 * row's compact range (`stored`) when it folds to the signed root, else the tree rebuilt
 * from the chain's start, which must reach the same root — a log never signs a
 * checkpoint inconsistent with one it signed before, so a chain recomputed by a database
 * writer is refused here, not signed. Without one: the chain's start (genesis, the signed
 * retention record or the signed adoption). The tree's leaves are the entries after
 * `basis` (0, or S for a chain adopted at S). Every new entry's hash and link is checked
 * on the way: a chain that does not check out is not signed.
 *
 * The caller reads the chain's entries with seq > `from`, in order, into push() while it
 * answers true, then takes result().
 */
export class TreeExtension {
  /** Read entries after this seq (none when `reads` is false). */
  readonly from: number = 0;
  readonly reads: boolean = false;
  private range: CompactRange | null = null;
  private basis = 0;
  private phase: "rebuild" | "link" | "extend" = "extend";
  private prevSeq = 0;
  private prevHash: string | null = null;
  /** The hash the tree continues from when known without reading (the start's, or the rebuilt head's). */
  private baseHash: string | null = null;
  private isFirst = true;
  private refusal: Refusal | null = null;

  constructor(
    private readonly tenantId: number,
    firstSeq: number,
    private readonly prev: CheckpointRef | null,
    private readonly start: ChainStart,
    stored: string | null,
  ) {
    if (!start.ok) {
      this.refusal = { tenantId, seq: firstSeq, reden: start.reden };
      return;
    }
    this.basis = start.basis;
    // A head of another tree (from genesis, while the chain is adopted, or the other way round).
    if (prev && (prev.basis ?? 0) !== this.basis) {
      this.refusal = { tenantId, seq: prev.size, reden: "checkpoint-afwijkend" };
      return;
    }
    this.reads = true;
    if (!prev || prev.size <= start.seq) {
      this.range = start.range.clone();
      this.baseHash = start.hash;
      this.prevSeq = this.basis + this.range.size;
      this.prevHash = start.hash;
      this.from = this.prevSeq;
      return;
    }
    if (stored !== null) {
      try {
        const range = CompactRange.decode(prev.size - this.basis, stored);
        if (Buffer.from(range.root()).equals(prev.root)) {
          // Extending a stored compact range, the hash of its last entry is read from that
          // entry (the first row read): the first new entry must link to it. Were that
          // entry altered, the new one would not link and the tenant is refused — unless
          // the writer also rewrote the new entries to link to it, or deleted it (then the
          // first new entry's link is not checked). Such a checkpoint is still signed, but
          // launders nothing: the range keeps the real hash, so the verifier reports the
          // chain (checkpoint-afwijkend, volgnummer-gat).
          this.range = range;
          this.prevSeq = prev.size;
          this.phase = "link";
          this.from = prev.size - 1;
          return;
        }
      } catch {}
    }
    // Rebuild: every entry from the start up to the previous head, then on.
    this.range = start.range.clone();
    this.prevSeq = start.seq;
    this.prevHash = start.hash;
    this.phase = "rebuild";
    this.from = start.seq;
  }

  push(r: EntryRow): boolean {
    if (this.refusal) return false;
    if (this.phase === "link") {
      this.phase = "extend";
      if (r.seq === this.prevSeq) {
        this.prevHash = r.hash;
        return true;
      }
      this.prevHash = null;
    }
    if (this.phase === "rebuild") {
      if (r.seq > this.prev!.size) {
        if (!this.rebuiltReachesPrev()) return false;
        this.phase = "extend";
      } else {
        const start = this.start as Extract<ChainStart, { ok: true }>;
        const reden = linkBreak(rowHash(this.tenantId, r) !== r.hash, this.prevSeq === start.seq, r.seq, r.prev_hash, this.prevSeq, this.prevHash!);
        if (reden) return this.refuse(r.seq, reden);
        this.range!.pushEntryHash(r.hash);
        this.prevSeq = r.seq;
        this.prevHash = r.hash;
        return true;
      }
    }
    const reden = linkBreak(rowHash(this.tenantId, r) !== r.hash, this.isFirst && this.baseHash !== null, r.seq, r.prev_hash, this.prevSeq, this.prevHash ?? r.prev_hash);
    this.isFirst = false;
    if (reden) return this.refuse(r.seq, reden);
    this.range!.pushEntryHash(r.hash);
    this.prevSeq = r.seq;
    this.prevHash = r.hash;
    return true;
  }

  result(): { range: CompactRange; basis: number } | { refusal: Refusal } {
    if (this.phase === "rebuild" && !this.refusal) this.rebuiltReachesPrev();
    if (this.refusal) return { refusal: this.refusal };
    return { range: this.range!, basis: this.basis };
  }

  /** At the end of a rebuild: the tree must have reached the previous head, with its root. */
  private rebuiltReachesPrev(): boolean {
    const prev = this.prev!;
    if (this.basis + this.range!.size < prev.size) return this.refuse(prev.size, "kop-ontbreekt");
    if (!Buffer.from(this.range!.root()).equals(prev.root)) return this.refuse(prev.size, "checkpoint-afwijkend");
    this.baseHash = this.prevHash;
    return true;
  }

  private refuse(seq: number, reden: BreakReason): false {
    this.refusal = { tenantId: this.tenantId, seq, reden };
    return false;
  }
}

/** How long the anchoring walk may hold the event loop before it gives it a turn, ms. */
const TURN_MS = 10;

/**
 * Extends one tenant's tree to its head in one snapshot (TreeExtension); null when nothing
 * changed. With `turns`, `sqlite` is a connection of the anchoring's own, and the event
 * loop gets a turn every TURN_MS while its read transaction stays open; on the service's
 * shared connection a request's write would start inside it. (At L, about 150 new
 * entries for each of 1,000 tenants, walked in one go, held the event loop 1.2 s.)
 */
async function extendTenant(sqlite: Database, tenantId: number, prev: CheckpointRef | null, verifiers: Verifier[], turns: boolean): Promise<{ range: CompactRange; basis: number } | { refusal: Refusal } | null> {
  sqlite.run("BEGIN");
  try {
    const first = sqlite.query("SELECT seq FROM audit_entries WHERE tenant_id = ? ORDER BY seq LIMIT 1").get(tenantId) as { seq: number } | null;
    const head = sqlite.query("SELECT seq FROM audit_entries WHERE tenant_id = ? ORDER BY seq DESC LIMIT 1").get(tenantId) as { seq: number } | null;
    // A seq that is no integer sorts last on SQLite: written by hand, never signed.
    if (head && !Number.isSafeInteger(head.seq)) return { refusal: { tenantId, seq: prev?.size ?? 0, reden: "volgnummer-gat" } };
    const settled = settledByHead(tenantId, prev, first && head ? head.seq : null);
    if (settled !== undefined) return settled;
    const stored =
      prev === null
        ? null
        : ((sqlite
            .query("SELECT bereik FROM audit_anchor_log WHERE tenant_id = ? AND soort IN ('checkpoint', 'herstel') AND grootte = ? AND bereik IS NOT NULL ORDER BY positie DESC LIMIT 1")
            .get(tenantId, prev.size) as { bereik: string } | null)?.bereik ?? null);
    const ext = new TreeExtension(tenantId, first!.seq, prev, chainStart(sqlite, tenantId, first!.seq, verifiers), stored);
    if (ext.reads) {
      let turn = performance.now();
      for (const r of entriesAfter(sqlite, tenantId, ext.from)) {
        if (!ext.push(r)) break;
        if (turns && performance.now() - turn > TURN_MS) {
          await new Promise((resolve) => setImmediate(resolve));
          turn = performance.now();
        }
      }
    }
    return ext.result();
  } finally {
    sqlite.run("COMMIT");
  }
}

/** The newest installation row, which the installation tree continues from. */
export type InstallationRow = { positie: number; note: string; grootte: number; bereik: string | null };

/** The installation tree up to the file's end, from the newest valid installation row (`last`) or from the start; for any store. */
export function installationRangeFrom(last: InstallationRow | null, path: string, verifiers: Verifier[]): { range: CompactRange; rebuilt: boolean } {
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
    const inFile = lineAt(path, last.positie) === line;
    if (o.ok && candidate && inFile && o.checkpoint.size === candidate.size && Buffer.from(candidate.root()).equals(o.checkpoint.root)) {
      range = candidate;
      from = last.positie + Buffer.byteLength(line) + 1;
      rebuilt = false;
    }
  }
  for (const fl of readLines(path, from)) {
    if (fl.parsed.kind === "record" && fl.parsed.line.soort !== "installatie") range.pushLeafHash(installationLeafHash(fl.parsed.line.note));
  }
  return { range, rebuilt };
}

/** The database's newest installation row (InstallationRow), on both stores. */
export const NEWEST_INSTALLATION_SQL = "SELECT positie, note, grootte, bereik FROM audit_anchor_log WHERE soort = 'installatie' ORDER BY positie DESC LIMIT 1";

function installationRange(sqlite: Database, path: string, verifiers: Verifier[]): { range: CompactRange; rebuilt: boolean } {
  const last = sqlite.query(NEWEST_INSTALLATION_SQL).get() as InstallationRow | null;
  return installationRangeFrom(last, path, verifiers);
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
 * The tenants' part of a run, for any store: a tenant whose rows do not match the file
 * is refused; the others' trees are extended from their newest checkpoint in the file
 * (`extend`, one snapshot each) and signed.
 */
export async function anchorTenants(
  tenants: number[],
  cmp: Pick<AnchorComparison, "perTenant" | "checkpoints">,
  keys: Keys,
  extend: (tenantId: number, prev: CheckpointRef | null) => Promise<{ range: CompactRange; basis: number } | { refusal: Refusal } | null>,
): Promise<{ lines: StoredLine[]; refused: Refusal[]; checkpoints: AnchoringResult["checkpoints"]; unchanged: number }> {
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
    const r = await extend(tenantId, prev && { size: prev.size, root: prev.root, basis: prev.basis });
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
  return { lines, refused, checkpoints, unchanged };
}

/**
 * One anchoring run. It first compares the anchor file with its database copy (as the
 * verifier does): a file that is damaged, or that holds runs the database lacks, stops
 * the run (AnchorFileError), and a tenant whose rows do not match the file is refused.
 * What it extends is each tenant's newest checkpoint in the file.
 */
export async function anchorAll(sqlite: Database, dbPath: string, path: string, keys: Keys): Promise<AnchoringResult> {
  const cmp = await compareWithFile(dbPath, path, keys.verifiers);
  throwIfProblem(cmp.probleem);
  // Every tenant, and every chain whose tenant's row is gone (ORPHAN_CHAINS_SQL); once each.
  const tenants = [
    ...new Set([...(sqlite.query("SELECT id FROM tenants").values() as [number][]).map(([id]) => id), ...orphanChains(sqlite)]),
  ].sort((a, b) => a - b);
  // The chains are read on a connection of the anchoring's own (extendTenant), with a turn
  // of the event loop between tenants and within a long one.
  const reader = dbPath === ":memory:" ? null : new Database(dbPath, { readonly: true });
  let extended;
  try {
    reader?.run(`PRAGMA busy_timeout = ${BUSY_TIMEOUT_MS}`);
    extended = await anchorTenants(tenants, cmp, keys, async (tenantId, prev) => {
      // Without a connection of its own (a database in memory), no turns: see extendTenant.
      const r = await extendTenant(reader ?? sqlite, tenantId, prev, keys.verifiers, reader !== null);
      if (reader) await new Promise((resolve) => setImmediate(resolve));
      return r;
    });
  } finally {
    reader?.close();
  }
  const { lines, refused, checkpoints, unchanged } = extended;

  // One write transaction, synchronous throughout (the connection is shared with the
  // rest of the process): the tail check, the installation tree, the append, the copy.
  // A failure takes the appended lines back (appendingTransaction).
  return appendingTransaction(sqlite, (run) => {
    const hersteld = syncTail(sqlite, path, keys.verifiers);
    const { installatie, herbouwd } = writeRun(sqlite, path, keys, lines, run);
    return { checkpoints, unchanged, refused, installatie, hersteld, herbouwd };
  });
}

/** A signed checkpoint of a tenant's tree as a line to write (its row keeps the compact range). */
export function checkpointLine(keys: Keys, tenantId: number, range: CompactRange, basis: number): StoredLine {
  return { soort: "checkpoint", tenantId, note: signCheckpoint(keys.signer, tenantId, range, basis), positie: 0, grootte: basis + range.size, bereik: range.encode() };
}

/**
 * The largest installation checkpoint's tree size, on both stores. `tenant_id IS NULL`
 * (every installation row's) lets the index on (tenant_id, soort, grootte) seek to it:
 * on soort alone the whole index was walked, inside the write lock, and the log grows by
 * a line per tenant per night (154 ms at seven years of 1,000 tenants).
 */
export const LARGEST_INSTALLATION_SQL = "SELECT max(grootte) AS n FROM audit_anchor_log WHERE tenant_id IS NULL AND soort = 'installatie'";

/**
 * Writes one run: `lines`, then an installation checkpoint over the whole file with
 * them, appended to the file (fsynced) and inserted as rows. Inside the caller's write
 * transaction (BEGIN IMMEDIATE), after the crash tail was copied in; `appended` learns
 * what it appended (appendingTransaction). Every run ends in its
 * installation line, which is how verification tells one run from several. With no
 * lines and a file that did not grow since the last installation checkpoint, nothing.
 */
export function writeRun(sqlite: Database, path: string, keys: Keys, lines: StoredLine[], appended: RunAppend): { installatie: string | null; herbouwd: boolean } {
  const inst = installationRange(sqlite, path, keys.verifiers);
  const largest = (sqlite.query(LARGEST_INSTALLATION_SQL).get() as { n: number | null }).n ?? 0;
  const run = runLines(inst, largest, keys, lines);
  if (run.all.length > 0) insertRows(sqlite, appendRun(path, run.all, appended));
  return { installatie: run.installatie, herbouwd: run.herbouwd };
}

/**
 * The rule of a run's lines, for any store: `lines`, then an installation checkpoint over
 * the whole file with them. None when there are no lines and the file did not grow past
 * the largest installation checkpoint (`largest`).
 */
export function runLines(inst: { range: CompactRange; rebuilt: boolean }, largest: number, keys: Keys, lines: StoredLine[]): { all: StoredLine[]; installatie: string | null; herbouwd: boolean } {
  if (lines.length === 0 && inst.range.size <= largest) return { all: [], installatie: null, herbouwd: inst.rebuilt };
  for (const l of lines) inst.range.pushLeafHash(installationLeafHash(l.note));
  const installatie = signInstallationCheckpoint(keys.signer, inst.range);
  const all = [...lines, { soort: "installatie" as const, tenantId: null, note: installatie, positie: 0, grootte: inst.range.size, bereik: inst.range.encode() }];
  return { all, installatie, herbouwd: inst.rebuilt };
}

/** Appends a run's lines to the file (fsynced; `appended` learns what) and sets their positions; the rows to insert. */
export function appendRun(path: string, all: StoredLine[], appended?: RunAppend): StoredLine[] {
  const positions = appendLines(path, all, appended);
  all.forEach((l, i) => (l.positie = positions[i]!));
  return all;
}

/** The installation checkpoint the daily e-mail carries, and why it cannot be trusted as is. */
export interface InstallationWitness {
  /** The anchor file's newest installation line, verbatim, when it opens under a trusted key; else null. */
  checkpoint: string | null;
  /** Dutch: the file's newest installation line does not open, or the database's newest installation row is not in the file; null when neither. */
  probleem: string | null;
}

/**
 * What the daily e-mail carries as the witness, for any store: the anchor file's newest
 * installation line, opened under the trusted keys, never the database's row. The row
 * (`row`, the database's newest installation row) is where the search starts: it is
 * normally the file's last line, so only that line is read. A database writer can change
 * the row, not the file: a row that is not the file's line at its positie is reported,
 * and the file is then read from its start. A row behind the file's newest line (a crash
 * tail, or a run appending right now) is not: the file's line is what is mailed.
 */
export function installationWitness(row: { positie: number; note: string } | null, path: string, verifiers: Verifier[]): InstallationWitness {
  const rowInFile = row !== null && lineAt(path, row.positie) === anchorLineText({ soort: "installatie", tenantId: null, note: row.note });
  let newest: { positie: number; note: string } | null = null;
  for (const fl of readLines(path, rowInFile ? row.positie : 0)) {
    if (fl.parsed.kind === "record" && fl.parsed.line.soort === "installatie") newest = { positie: fl.positie, note: fl.parsed.line.note };
  }
  const opened = newest && openInstallationCheckpoint(newest.note, verifiers);
  const checkpoint = opened?.ok ? newest!.note : null;
  const problems: string[] = [];
  if (row !== null && !rowInFile) {
    problems.push(`Het nieuwste installatie-checkpoint in de database (audit_anchor_log, positie ${row.positie}) staat niet zo in het ankerbestand: de kopie in de database is gewijzigd of vervalst.`);
  }
  if (row === null && newest !== null) {
    problems.push("De database heeft geen installatie-checkpoint, het ankerbestand wel: de kopie in de database is verwijderd, of audit-anker brak af vóór zijn eerste COMMIT.");
  }
  if (row !== null && newest === null) problems.push(`Het ankerbestand (${path}) bevat geen installatie-checkpoint.`);
  if (opened && !opened.ok) {
    problems.push(`Het nieuwste installatie-checkpoint in het ankerbestand (positie ${newest!.positie}) opent niet onder een vertrouwde sleutel (${opened.error}).`);
  }
  if (problems.length === 0) return { checkpoint, probleem: null };
  problems.push(checkpoint === null ? "Deze e-mail bevat daarom geen installatie-checkpoint." : "Het installatie-checkpoint in deze e-mail komt uit het ankerbestand.");
  problems.push("Zoek de oorzaak met nachtwacht verify (docs/operations.md).");
  return { checkpoint, probleem: problems.join(" ") };
}
