// What only the operator signs, by hand, with the signing key (AUDIT_ANKER_SLEUTEL):
//
// - an adoption (`nachtwacht adopt`): a chain whose oldest entries an earlier version
//   deleted without a signed retention record can never be started from a record, so
//   it would stay `retentie-ontbreekt` for good. The adoption says, signed: this chain
//   is taken on from seq S (the entry after it must link to hash H), on this date. Its
//   tree then runs from S + 1 under its own origin (records.ts, tenantOrigin), so it is
//   never mistaken for a tree from genesis, and every verdict names it.
// - a restore acceptance (`nachtwacht accept-restore`): after a deliberate restore of an
//   older database the chains no longer reach their signed heads. Per tenant that lost
//   something it says, signed: the chain went back from seq A (root RA) to B, where the
//   tree recomputed from the database has root R. From then on it is that tenant's head.
//
// Both refuse what they must not accept (a chain broken in itself, a damaged anchor
// file, rows that do not match it), append their lines as one run ending in an
// installation checkpoint (anchoring.ts, writeRun) and copy them into audit_anchor_log
// in one write transaction. A database writer has no key: whatever it inserts is not
// signed, and it is not in the file. docs/audit-chain.md has the formats and reasoning.
//
// The rules are here once, for any store (adoptChainOn, acceptRestoreOn over an
// OperatorStore); the SQLite store is at the end of this file, PostgreSQL's in
// src/pg/operator.ts. Each reads and writes in one transaction: with --ja under the lock
// that orders the anchor file's appenders (SQLite's write lock; on PostgreSQL the
// anchor file's advisory lock and the chains' locks), so a running service cannot
// interleave; without --ja in one read snapshot.
import { Database } from "bun:sqlite";
import { existsSync } from "node:fs";
import { applyPragmas, newerSqliteSchemaProblem } from "../db.ts";
import { insertRows, readLines, abandonAppend, RunAppend, type StoredLine } from "./anchor-file.ts";
import { compareWithFile, recordSize, type AnchorComparison } from "./anchor-check.ts";
import { checkpointLine, syncTail, writeRun } from "./anchoring.ts";
import { entriesAfter, type EntryRow } from "./chain.ts";
import { CompactRange } from "./merkle.ts";
import type { Verifier } from "./note.ts";
import { openTreeHead, signAdoptionRecord, signRestoreRecord, type Keys, type RecordKind, type RestoreRecord, type TreeHead } from "./records.ts";
import { CannotCheck } from "./offline.ts";
import { chainStart, chainStartFromRecords, ChainWalk, rootsEqual, type ChainStart } from "./verify.ts";

/** What the operator asked for cannot be done, and why (the command exits 1). */
export class Refused extends Error {}

// ---------------------------------------------------------------------------------
// What the rules need of a store

/** A tenant's oldest remaining entry. */
export type EntryHead = { seq: number; id: number; prev_hash: string; created_at: string };

/** What the rules read and write, inside the store's one transaction (OperatorStore.transaction). */
export interface OperatorTx {
  oldestEntry(tenantId: number): Promise<EntryHead | null>;
  /** Where the chain starts (chainStart) from the start records in audit_anchor_log. */
  chainStart(tenantId: number, firstSeq: number, verifiers: Verifier[]): Promise<ChainStart>;
  /** The tenant's entries with seq > afterSeq, in seq order, each handed to `take`. */
  entries(tenantId: number, afterSeq: number, take: (r: EntryRow) => void): Promise<void>;
  /** The unsigned audit_retention_anchors row an earlier version left, or null. */
  retentionAnchor(tenantId: number): Promise<{ seq: number; hash: string } | null>;
  /** Every positie of audit_anchor_log, ascending, in chunks. */
  positions(): AsyncIterable<readonly number[]> | Iterable<readonly number[]>;
  /** Holds back the host application's appends to these chains until the transaction ends (SQLite's write lock does already). */
  lockChains(tenantIds: number[]): Promise<void>;
  /** The file's crash tail copied into audit_anchor_log (syncTail); how many rows. */
  syncTail(path: string, verifiers: Verifier[]): Promise<number>;
  insertRows(rows: StoredLine[]): Promise<void>;
  /** One run: `lines` and an installation checkpoint, appended to the file (fsynced) and inserted (writeRun). */
  writeRun(path: string, keys: Keys, lines: StoredLine[]): Promise<{ installatie: string | null }>;
}

export interface OperatorStore {
  /** The anchor file against audit_anchor_log, in one read snapshot (compareWithFile). */
  compare(path: string, verifiers: Verifier[]): Promise<AnchorComparison>;
  /**
   * `work` in one transaction: when it writes, under the lock of the anchor file's
   * appenders, taken before anything is read; else in one read snapshot.
   */
  transaction<T>(writes: boolean, work: (tx: OperatorTx) => Promise<T>): Promise<T>;
}

/** The whole check first: a file that does not match its copy is solved before anything is signed by hand. */
function requireSoundFile(cmp: AnchorComparison, allowRestore: boolean): void {
  if (cmp.probleem && !(allowRestore && cmp.probleem.reden === "database-teruggezet")) {
    throw new Refused(`het ankerbestand klopt niet met de database (${cmp.probleem.reden}: ${cmp.probleem.toelichting}); los dat eerst op`);
  }
}

// ---------------------------------------------------------------------------------
// Adoption

export interface AdoptionPlan {
  tenantId: number;
  /** The adoption point: the seq before the oldest remaining entry. */
  seq: number;
  /** The oldest remaining entry's prev_hash: what it must keep linking to. */
  hash: string;
  eerste: { seq: number; createdAt: string };
  /** The newest seq: the first checkpoint of the adopted tree covers up to it. */
  laatste: number;
  aantalEntries: number;
  /** The unsigned audit_retention_anchors row the earlier version left, compared (never trusted); null when there is none. */
  retentieAnker: { seq: number; hash: string; klopt: boolean } | null;
  /** With --ja: what was signed and appended. */
  adoptie?: string;
  checkpoint?: string;
  installatie?: string | null;
  /** Crash-tail lines copied into the database first. */
  hersteld?: number;
}

/**
 * Plans, and with `ja` signs, the adoption of one tenant's chain, on any store. Refused
 * (Refused) when the anchor file does not match the database, when the file holds any
 * record of this tenant (nachtwacht signed this chain before, so its missing start was
 * not the earlier version's doing, or it was adopted already), when the chain is empty,
 * starts at seq 1, already starts from a valid record or has an invalid one, or does not
 * verify from its oldest entry on.
 */
export async function adoptChainOn(store: OperatorStore, path: string, keys: Keys, tenantId: number, o: { ja: boolean; now: Date }): Promise<AdoptionPlan> {
  const cmp = await store.compare(path, keys.verifiers);
  requireSoundFile(cmp, false);
  const rows = cmp.perTenant.get(tenantId);
  if (rows) throw new Refused(`de rijen van tenant ${tenantId} in audit_anchor_log kloppen niet met het ankerbestand (${rows.reden} bij ${rows.seq}); los dat eerst op`);
  return store.transaction(o.ja, async (tx) => {
    if (o.ja) await tx.lockChains([tenantId]);
    const plan = await planAdoption(tx, path, tenantId, keys);
    if (!o.ja) return plan.plan;
    // Lines a crashed run left in the file go in first, so the rows stay in file order.
    const hersteld = await tx.syncTail(path, keys.verifiers);
    const adoptie = signAdoptionRecord(keys.signer, { tenantId, seq: plan.plan.seq, hash: plan.plan.hash, tijdstip: o.now.toISOString() });
    // The first checkpoint of the adopted tree at once: no day of unsigned tail for the whole chain.
    const cp = checkpointLine(keys, tenantId, plan.range, plan.plan.seq);
    const { installatie } = await tx.writeRun(path, keys, [{ soort: "adoptie", tenantId, note: adoptie, positie: 0, grootte: plan.plan.seq, bereik: null }, cp]);
    return { ...plan.plan, adoptie, checkpoint: cp.note, installatie, hersteld };
  });
}

async function planAdoption(tx: OperatorTx, path: string, tenantId: number, keys: Keys): Promise<{ plan: AdoptionPlan; range: CompactRange }> {
  const first = await tx.oldestEntry(tenantId);
  if (!first) throw new Refused(`tenant ${tenantId} heeft geen audit-entries: er valt niets te adopteren`);
  if (first.seq === 1) throw new Refused(`de keten van tenant ${tenantId} begint bij seq 1: er ontbreekt niets, adoptie is niet nodig`);
  const start = await tx.chainStart(tenantId, first.seq, keys.verifiers);
  if (start.ok) throw new Refused(`de keten van tenant ${tenantId} begint al bij een geldig ${start.record ? "retentierecord" : "adoptierecord"} (seq ${start.seq})`);
  if (start.reden !== "retentie-ontbreekt") {
    throw new Refused(`de keten van tenant ${tenantId} heeft retentierecords in de database, maar geen geldig (${start.reden}); los dat eerst op`);
  }
  // Anything nachtwacht signed for this tenant proves the chain was whole under its watch
  // from there on: entries missing since were not the earlier version's doing.
  for (const fl of readLines(path)) {
    const p = fl.parsed;
    if (p.kind === "record" && p.line.tenantId === tenantId) {
      throw new Refused(
        `het ankerbestand bevat al een ${p.line.soort}-regel van tenant ${tenantId} (positie ${fl.positie}): ` +
          (p.line.soort === "adoptie" ? "de keten is al geadopteerd" : "nachtwacht heeft deze keten al ondertekend, dus haar begin is niet door een eerdere versie verwijderd"),
      );
    }
  }
  const seq = first.seq - 1;
  const adopted: Extract<ChainStart, { ok: true }> = {
    ok: true,
    seq,
    hash: first.prev_hash,
    range: new CompactRange(),
    basis: seq,
    record: null,
    adoption: null,
    note: null,
  };
  // The chain from its oldest entry on must be sound: a broken chain is evidence, never adopted.
  const walk = new ChainWalk(tenantId, adopted, first, null, true);
  await tx.entries(tenantId, seq, (r) => walk.push(r));
  const res = walk.result();
  if (!res.intact) {
    throw new Refused(`de keten van tenant ${tenantId} klopt niet vanaf seq ${first.seq}: ${res.fout!.reden} bij seq ${res.fout!.seq}; een gebroken keten wordt niet geadopteerd`);
  }
  const tree = walk.tree();
  const anchor = await tx.retentionAnchor(tenantId);
  return {
    plan: {
      tenantId,
      seq,
      hash: first.prev_hash,
      eerste: { seq: first.seq, createdAt: first.created_at },
      laatste: tree.size,
      aantalEntries: res.aantalEntries,
      retentieAnker: anchor && { ...anchor, klopt: anchor.seq === seq && anchor.hash === first.prev_hash },
    },
    range: tree.range,
  };
}

// ---------------------------------------------------------------------------------
// Restore acceptance

/**
 * What one tenant lost against the anchor file, and the state accepted in its place:
 * the restore acceptance's fields (records.ts RestoreRecord: `van`/`vanRoot` the signed
 * head in the file the chain no longer reaches, `naar`/`root` the newest seq in the
 * database and the tree's root there), without the date it is signed on.
 */
export interface RestoreLoss extends Omit<RestoreRecord, "tijdstip"> {
  /** How the chain misses the head: cut short, or (new entries under the lost numbers) another tree. */
  reden: "kop-ontbreekt" | "checkpoint-afwijkend";
  range: CompactRange;
  /** The newest seq a head of the anchor file still proves (else the chain's start: genesis or its signed retention record): entries after it up to `naar` are accepted unproven. Not signed. */
  bewezenTot: number;
  /**
   * The signed seqs under which the database holds other entries (`bewezenTot` + 1 up to
   * `naar` or `van`, whichever is lower): a head of the file the chain is long enough
   * for does not hold. null for a pure loss (the chain only shorter than the file's
   * heads). A database writer can make this state at will, so it is accepted only with
   * `vervangKeten` (acceptRestoreOn).
   */
  vervangen: { van: number; tot: number } | null;
}

export interface RestoreOutcome {
  /** Records in the file with no row in the database (what the restored copy lacks); copied in with --ja. */
  ontbrekend: number;
  verliezen: RestoreLoss[];
  /** Tenants whose chains do not check out in themselves: never accepted. */
  geweigerd: { tenantId: number; seq: number; reden: string }[];
  /** Losses that replace signed entries (RestoreLoss.vervangen) while `vervangKeten` was not given: not accepted, and with --ja nothing is written at all. */
  teVervangen: RestoreLoss[];
  /** With --ja: the restore acceptances signed, and the run's installation checkpoint. */
  herstel?: string[];
  installatie?: string | null;
}

type HeadLine = { soort: "checkpoint" | "herstel"; note: string; positie: number };

type FileRecords = {
  missing: StoredLine[];
  starts: Map<number, { note: string; grootte: number; positie: number }[]>;
  heads: Map<number, HeadLine>;
  /**
   * Per tenant, the newest head the database itself held before the file's newest run
   * (a line it has a row for, written before that run's lines, after the tenant's newest
   * adoption or restore acceptance). A restored copy reaches its own checkpoints; only
   * the newest run may have been copied back into it from the file (audit-anker after a
   * crash-like tail). A chain that misses such a head was changed, not restored.
   */
  known: Map<number, HeadLine>;
  /**
   * Per tenant every head of the file in its current tree (after its newest adoption or
   * restore acceptance), oldest first, whether or not the database has a row for it: the
   * heads a restored chain must reach where it is long enough (tenantLoss).
   */
  fileHeads: Map<number, HeadLine[]>;
};

/**
 * Reads the anchor file — the authority — beside its copy (`positions`: every positie
 * of audit_anchor_log, ascending, in chunks): the records the database has no row for,
 * and per tenant its start records and newest head, whether or not the restored
 * database knows them.
 */
async function readAuthority(path: string, keys: Keys, positions: AsyncIterable<readonly number[]> | Iterable<readonly number[]>): Promise<FileRecords> {
  const out: FileRecords = { missing: [], starts: new Map(), heads: new Map(), known: new Map(), fileHeads: new Map() };
  /** Per tenant its last two heads the database has rows for (the newest run holds one head per tenant at most). */
  const rowHeads = new Map<number, HeadLine[]>();
  /** Where the last two installation lines (each ends a run) stand. */
  const runEnds: number[] = [];
  const rows = Symbol.asyncIterator in positions ? positions[Symbol.asyncIterator]() : positions[Symbol.iterator]();
  let chunk: readonly number[] = [];
  let i = 0;
  let done = false;
  /** The current row's positie (null past the last row). */
  const current = async (): Promise<number | null> => {
    while (!done && i >= chunk.length) {
      const r = await rows.next();
      if (r.done) done = true;
      else [chunk, i] = [r.value, 0];
    }
    return done ? null : chunk[i]!;
  };
  try {
    for (const fl of readLines(path)) {
      let row = await current();
      while (row !== null && row < fl.positie) {
        i++;
        row = await current();
      }
      if (fl.parsed.kind !== "record") continue;
      const l = fl.parsed.line;
      const start = l.soort === "retentie" || l.soort === "adoptie";
      const hasRow = row === fl.positie;
      const grootte = !hasRow || start ? recordSize(l, keys.verifiers) : 0;
      if (!hasRow) {
        if (grootte === null) throw new Refused(`regel op positie ${fl.positie} van het ankerbestand is niet geldig ondertekend`);
        out.missing.push({ ...l, positie: fl.positie, grootte, bereik: null });
      }
      if (l.soort === "installatie") {
        runEnds.push(fl.positie);
        if (runEnds.length > 2) runEnds.shift();
      }
      if (l.tenantId === null) continue;
      // An adoption or a restore acceptance starts another tree: the heads before it are not this chain's.
      if (l.soort === "adoptie" || l.soort === "herstel") {
        rowHeads.delete(l.tenantId);
        out.fileHeads.delete(l.tenantId);
      }
      if (l.soort === "checkpoint" || l.soort === "herstel") {
        const list = out.fileHeads.get(l.tenantId) ?? [];
        list.push({ soort: l.soort, note: l.note, positie: fl.positie });
        out.fileHeads.set(l.tenantId, list);
      }
      if (hasRow && (l.soort === "checkpoint" || l.soort === "herstel")) {
        rowHeads.set(l.tenantId, [...(rowHeads.get(l.tenantId) ?? []).slice(-1), { soort: l.soort, note: l.note, positie: fl.positie }]);
      }
      if (start && grootte !== null) {
        const list = out.starts.get(l.tenantId) ?? [];
        list.push({ note: l.note, grootte, positie: fl.positie });
        out.starts.set(l.tenantId, list);
      }
      if (l.soort === "checkpoint" || l.soort === "herstel") out.heads.set(l.tenantId, { soort: l.soort, note: l.note, positie: fl.positie });
    }
    // Read to the end (a stream broken off may take its transaction with it).
    while ((await current()) !== null) i = chunk.length;
  } finally {
    if (!done) await rows.return?.();
  }
  // The newest run begins after the installation line before the last one.
  const newestRun = runEnds.length === 2 ? runEnds[0]! : -1;
  for (const [tenantId, list] of rowHeads) {
    const h = list.filter((x) => x.positie < newestRun).at(-1);
    if (h) out.known.set(tenantId, h);
  }
  return out;
}

/**
 * Plans, and with `ja` signs, the acceptance of a restored database, on any store. Per
 * tenant whose chain no longer reaches its newest signed head (kop-ontbreekt, or
 * checkpoint-afwijkend when new entries took the lost numbers) but is sound in itself
 * from its start, one restore acceptance: from the head's seq and root to the database's
 * newest seq and the root recomputed there. Records of the file the restored copy lacks
 * are copied back first. Refused when the anchor file has any problem other than the
 * rollback itself, or when rows of the database copy do not match the file; a tenant
 * whose chain is broken in itself is listed in `geweigerd` and not accepted.
 *
 * A chain holding other entries under signed numbers (RestoreLoss.vervangen) is to the
 * chain a restore followed by new entries as much as a rewrite by a database writer,
 * who can also delete the rows of the runs that signed them: only the operator, having
 * compared with a backup, can tell. So it is accepted only with `vervangKeten`; without
 * it such a tenant is listed in `teVervangen` and --ja writes nothing at all (copying the
 * file's lines back alone would give the database rows of the heads the chain misses,
 * and the explicit acceptance would then be refused as a rewrite).
 */
export async function acceptRestoreOn(store: OperatorStore, path: string, keys: Keys, o: { ja: boolean; vervangKeten: boolean; now: Date }): Promise<RestoreOutcome> {
  const cmp = await store.compare(path, keys.verifiers);
  requireSoundFile(cmp, true);
  if (cmp.perTenant.size > 0) {
    const list = [...cmp.perTenant].map(([t, p]) => `tenant ${t}: ${p.reden} bij ${p.seq}`).join(", ");
    throw new Refused(`rijen in audit_anchor_log kloppen niet met het ankerbestand (${list}); dat is geen terugzetten, los dat eerst op`);
  }
  return store.transaction(o.ja, async (tx) => {
    const file = await readAuthority(path, keys, tx.positions());
    // Only a tenant with a head in the file can have lost anything against it.
    const tenants = [...file.heads.keys()].sort((a, b) => a - b);
    if (o.ja) await tx.lockChains(tenants);
    const verliezen: RestoreLoss[] = [];
    const teVervangen: RestoreLoss[] = [];
    const geweigerd: RestoreOutcome["geweigerd"] = [];
    for (const tenantId of tenants) {
      const r = await tenantLoss(tx, tenantId, file.heads.get(tenantId)!, file.known.get(tenantId) ?? null, file.fileHeads.get(tenantId) ?? [], file.starts.get(tenantId) ?? [], keys);
      if (r === null) continue;
      if ("refused" in r) geweigerd.push({ tenantId, ...r.refused });
      else if (r.loss.vervangen !== null && !o.vervangKeten) teVervangen.push(r.loss);
      else verliezen.push(r.loss);
    }
    const out: RestoreOutcome = { ontbrekend: file.missing.length, verliezen, geweigerd, teVervangen };
    if (!o.ja || teVervangen.length > 0 || (file.missing.length === 0 && verliezen.length === 0)) return out;
    await tx.insertRows(file.missing);
    const tijdstip = o.now.toISOString();
    const lines: StoredLine[] = verliezen.map((l) => ({
      soort: "herstel" as RecordKind,
      tenantId: l.tenantId,
      note: signRestoreRecord(keys.signer, { ...l, tijdstip }),
      positie: 0,
      grootte: l.naar,
      // The compact range at naar, as a checkpoint row keeps it: audit-anker extends from it.
      bereik: l.range.encode(),
    }));
    const { installatie } = await tx.writeRun(path, keys, lines);
    return { ...out, herstel: lines.map((l) => l.note), installatie };
  });
}

/** One tenant against its newest head in the file: null when it still reaches it, else its loss or why it cannot be accepted. */
async function tenantLoss(
  tx: OperatorTx,
  tenantId: number,
  headLine: HeadLine,
  /** The newest head the database held itself (FileRecords.known): a restored chain still reaches it. */
  knownLine: HeadLine | null,
  /** Every head of the file in the tenant's current tree (FileRecords.fileHeads). */
  fileHeadLines: HeadLine[],
  starts: { note: string; grootte: number; positie: number }[],
  keys: Keys,
): Promise<{ loss: RestoreLoss } | { refused: { seq: number; reden: string } } | null> {
  const refused = (seq: number, reden: string) => ({ refused: { seq, reden } });
  const h = openTreeHead(headLine.note, tenantId, keys.verifiers, headLine.soort);
  if (!h.ok) return refused(0, `bestand-gewijzigd (${headLine.soort}: ${h.error})`);
  const head = h.head;
  const first = await tx.oldestEntry(tenantId);
  // The start from the file's records: a restored copy may lack a record the file holds.
  const start = chainStartFromRecords(starts, tenantId, first?.seq ?? null, keys.verifiers);
  if (!start.ok) return refused(first?.seq ?? 0, start.reden);
  if (start.basis !== head.basis) return refused(head.size, "checkpoint-afwijkend (het checkpoint hoort bij een andere boom dan de keten)");
  const against = new ChainWalk(tenantId, start, first, head);
  await tx.entries(tenantId, 0, (r) => against.push(r));
  const missed = against.result();
  if (missed.intact) return null;
  const f = missed.fout!;
  if (f.seq !== head.size || (f.reden !== "kop-ontbreekt" && f.reden !== "checkpoint-afwijkend")) return refused(f.seq, f.reden);
  // A chain rewritten in the database (every hash after the change recomputed) also
  // misses only its newest head, but it misses the database's own older heads as well.
  let known: TreeHead | null = null;
  if (knownLine !== null && knownLine.positie !== headLine.positie) {
    const k = openTreeHead(knownLine.note, tenantId, keys.verifiers, knownLine.soort);
    if (!k.ok) return refused(0, `bestand-gewijzigd (${knownLine.soort}: ${k.error})`);
    known = k.head;
  }
  // The database's own rows are the writer's to delete: the file's heads count too. A
  // restored copy is an older state of the chain, so it reaches the file's heads up to
  // where it was copied and misses the later ones; a chain rewritten from some entry on
  // misses every head from there. So at least one head it is long enough for must hold.
  const fileHeads: TreeHead[] = [];
  for (const line of fileHeadLines) {
    if (line.positie === headLine.positie) continue;
    const o = openTreeHead(line.note, tenantId, keys.verifiers, line.soort);
    if (!o.ok) return refused(0, `bestand-gewijzigd (${line.soort}: ${o.error})`);
    if (o.head.basis === start.basis) fileHeads.push(o.head);
  }
  // What the database holds instead must be sound in itself, from its start to its newest
  // entry, and reach that older head: one walk for both, keeping the roots at the file's heads.
  const whole = new ChainWalk(tenantId, start, first, known, true, null, new Set(fileHeads.map((x) => x.size)));
  await tx.entries(tenantId, 0, (r) => whole.push(r));
  const own = whole.result();
  if (!own.intact) {
    const why = known ? ` (de keten haalt het checkpoint bij seq ${known.size} niet, dat de database zelf al had: dit is geen teruggezette database maar een gewijzigde keten)` : "";
    return refused(own.fout!.seq, `${own.fout!.reden}${why}`);
  }
  const tree = whole.tree();
  // Heads up to the chain's start (a retention point) cover entries no longer there: the
  // signed record the chain starts from stands for those.
  const startSize = start.basis + start.range.size;
  const within = fileHeads.filter((x) => x.size > startSize && x.size <= tree.size);
  const reached = within.filter((x) => rootsEqual(whole.rootAt(x.size)!, x.root));
  if (within.length > 0 && reached.length === 0) {
    const oldest = within.reduce((a, b) => (a.size <= b.size ? a : b));
    return refused(
      oldest.size,
      `checkpoint-afwijkend (de keten haalt geen enkel checkpoint van het ankerbestand waar ze lang genoeg voor is, ook dat bij seq ${oldest.size} niet: dit is geen teruggezette database maar een gewijzigde keten)`,
    );
  }
  const bewezenTot = reached.reduce((n, x) => Math.max(n, x.size), startSize);
  // Only a chain shorter than the newest head that reaches every head within its length
  // is a pure loss; a head it is long enough for and misses means other entries under
  // numbers already signed.
  const replaces = f.reden === "checkpoint-afwijkend" || reached.length < within.length;
  const vervangen = replaces ? { van: bewezenTot + 1, tot: Math.min(tree.size, head.size) } : null;
  return {
    loss: { tenantId, basis: head.basis, van: head.size, vanRoot: head.root, naar: tree.size, root: tree.range.root(), reden: f.reden, range: tree.range, bewezenTot, vervangen },
  };
}

// ---------------------------------------------------------------------------------
// On SQLite

/** The SQLite store of the operator's commands: `sqlite` read-write (openOperatorDatabase); the comparison on its own connection to `dbPath`. */
export function sqliteOperatorStore(sqlite: Database, dbPath: string): OperatorStore {
  /** What the running transaction appended to the anchor file, taken back when it fails. */
  let appended = new RunAppend();
  const tx: OperatorTx = {
    oldestEntry: async (tenantId) =>
      sqlite.query("SELECT seq, id, prev_hash, created_at FROM audit_entries WHERE tenant_id = ? ORDER BY seq LIMIT 1").get(tenantId) as EntryHead | null,
    chainStart: async (tenantId, firstSeq, verifiers) => chainStart(sqlite, tenantId, firstSeq, verifiers),
    entries: async (tenantId, afterSeq, take) => {
      for (const r of entriesAfter(sqlite, tenantId, afterSeq)) take(r);
    },
    retentionAnchor: async (tenantId) => sqlite.query("SELECT seq, hash FROM audit_retention_anchors WHERE tenant_id = ?").get(tenantId) as { seq: number; hash: string } | null,
    positions: () => positionChunks(sqlite),
    // BEGIN IMMEDIATE holds every writer back already.
    lockChains: async () => {},
    syncTail: async (path, verifiers) => syncTail(sqlite, path, verifiers),
    insertRows: async (rows) => insertRows(sqlite, rows),
    writeRun: async (path, keys, lines) => writeRun(sqlite, path, keys, lines, appended),
  };
  return {
    compare: (path, verifiers) => compareWithFile(dbPath, path, verifiers),
    // IMMEDIATE (the write lock first) when it writes, else a read snapshot. The connection is the command's own.
    // A failure (also at COMMIT) takes back what the transaction appended (abandonAppend), as
    // appendingTransaction (src/audit/anchor-file.ts) does; that one is synchronous, this one awaits the command's work.
    async transaction(writes, work) {
      appended = new RunAppend();
      sqlite.run(writes ? "BEGIN IMMEDIATE" : "BEGIN");
      try {
        const r = await work(tx);
        sqlite.run("COMMIT");
        return r;
      } catch (e) {
        abandonAppend(sqlite, appended);
        throw e;
      }
    },
  };
}

/** audit_anchor_log's positie column, ascending, streamed in chunks. */
function* positionChunks(sqlite: Database): Generator<number[]> {
  let chunk: number[] = [];
  for (const r of sqlite.query("SELECT positie FROM audit_anchor_log ORDER BY positie").iterate() as IterableIterator<{ positie: number }>) {
    chunk.push(r.positie);
    if (chunk.length === 1000) {
      yield chunk;
      chunk = [];
    }
  }
  if (chunk.length > 0) yield chunk;
}

/** The service's database, read-write, for an operator command (never created: a missing file is an error). */
export function openOperatorDatabase(dbPath: string): Database {
  if (!existsSync(dbPath)) throw new CannotCheck(`database niet gevonden: ${dbPath}`);
  let db: Database | undefined;
  try {
    db = new Database(dbPath, { readwrite: true, create: false, strict: true });
    applyPragmas(db);
    db.query("SELECT 1 FROM audit_anchor_log LIMIT 1").get();
  } catch (e) {
    db?.close();
    throw new CannotCheck(`database niet te openen: ${dbPath}: ${e instanceof Error ? e.message : String(e)}`);
  }
  // Nothing signed into a database of a newer version: its rules for these rows are not this version's.
  const newer = newerSqliteSchemaProblem(db);
  if (newer !== null) {
    db.close();
    throw new CannotCheck(`${dbPath}: ${newer}; niets geschreven`);
  }
  return db;
}
