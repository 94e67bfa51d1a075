// Compares the database's copy of the anchor file (audit_anchor_log) with the file
// itself, line by line in one streaming pass, and collects from the file — the
// authority — each tenant's newest checkpoint, which the chain must still reach.
//
// The database is read in one snapshot taken before the file is read: every line a
// row refers to was appended before that row committed, so the file then holds at
// least what the snapshot does.
import { Database } from "bun:sqlite";
import { existsSync } from "node:fs";
import { readLines } from "./anchor-file.ts";
import type { Verifier } from "./note.ts";
import {
  anchorLineText,
  openAdoptionRecord,
  openInstallationCheckpoint,
  openRestoreRecord,
  openRetentionRecord,
  openTreeHead,
  type AnchorLine,
  type TreeHead,
} from "./records.ts";

/** What is wrong with the anchor file as a whole. */
export type FileReason = "bestand-ontbreekt" | "bestand-ingekort" | "bestand-gewijzigd" | "database-teruggezet";
/** What is wrong with one tenant's rows in audit_anchor_log. */
export type RowReason = "checkpoint-ontbreekt" | "checkpoint-niet-in-bestand";

export interface FileProblem {
  reden: FileReason;
  positie: number | null;
  toelichting: string;
}

export interface RowProblem {
  reden: RowReason;
  /** The `grootte` of the row or line concerned (recordSize: a head's newest seq, a retention record's or adoption's seq). */
  seq: number;
  positie: number;
}

/** A tenant's newest head in the file: a checkpoint, or a restore acceptance after it. `size` is its newest seq. */
export interface FileCheckpoint extends TreeHead {
  positie: number;
  /** The line lies beyond the database's last row (written by a run whose commit the database lacks). */
  inTail: boolean;
}

/** An adoption in the file (signature verified): reported for as long as the file holds it. */
export interface FileAdoption {
  tenantId: number;
  seq: number;
  tijdstip: string;
  positie: number;
}

/** A restore acceptance in the file (signature verified): reported for as long as the file holds it. */
export interface FileRestore {
  tenantId: number;
  van: number;
  naar: number;
  tijdstip: string;
  positie: number;
}

export interface AnchorComparison {
  /** The file exists. */
  bestand: boolean;
  regels: number;
  /** Lines written before signed checkpoints, no longer trusted (docs/audit-chain.md). */
  oudeRegels: number;
  /** The first file-level problem, if any. */
  probleem?: FileProblem;
  /** The first row problem per tenant. */
  perTenant: Map<number, RowProblem>;
  /** The newest checkpoint (or restore acceptance) per tenant in the file, signature verified. */
  checkpoints: Map<number, FileCheckpoint>;
  /** Every adoption and restore acceptance in the file whose signature holds, in file order. */
  adopties: FileAdoption[];
  herstellingen: FileRestore[];
  waarschuwingen: string[];
}

/** The tenant a row or line is about: none for an installation checkpoint, whatever its tenant_id says. */
const rowTenant = (l: Pick<AnchorLine, "soort" | "tenantId">): number | null => (l.soort === "installatie" ? null : l.tenantId);

/** Whether a record's signature holds under a trusted key (and it names its tenant). */
export function recordVerifies(l: AnchorLine, verifiers: Verifier[]): boolean {
  return recordSize(l, verifiers) !== null;
}

/**
 * The size a record stands for (its `grootte`), or null when it does not open as its
 * kind: for a checkpoint or restore acceptance the newest seq it covers (tree size, plus
 * the basis of an adopted tree), for a retention record the seq of the last deleted
 * entry, for an adoption the seq it adopts from, for an installation checkpoint its
 * tree size.
 */
export function recordSize(l: AnchorLine, verifiers: Verifier[]): number | null {
  if (l.soort === "installatie") {
    const o = openInstallationCheckpoint(l.note, verifiers);
    return o.ok ? o.checkpoint.size : null;
  }
  if (l.tenantId === null) return null;
  switch (l.soort) {
    case "checkpoint":
    case "herstel": {
      const o = openTreeHead(l.note, l.tenantId, verifiers, l.soort);
      return o.ok ? o.head.size : null;
    }
    case "retentie": {
      const o = openRetentionRecord(l.note, l.tenantId, verifiers);
      return o.ok ? o.record.seq : null;
    }
    case "adoptie": {
      const o = openAdoptionRecord(l.note, l.tenantId, verifiers);
      return o.ok ? o.record.seq : null;
    }
    // A row's soort is not checked by the database: a kind nachtwacht never writes
    // opens as nothing (undefined here counted as signed, as `!== null`).
    default:
      return null;
  }
}

/**
 * Runs on its own read-only connection to `dbPath` (the shared connection cannot stay
 * in a transaction while the event loop turns), yielding every few thousand lines.
 */
export async function compareWithFile(dbPath: string, path: string, verifiers: Verifier[]): Promise<AnchorComparison> {
  const sqlite = new Database(dbPath, { readonly: true });
  try {
    sqlite.run("PRAGMA busy_timeout = 5000");
    // One snapshot for every row read.
    sqlite.run("BEGIN");
    try {
      const rows = sqlite.query("SELECT positie, soort, tenant_id AS tenantId, grootte, note FROM audit_anchor_log ORDER BY positie").iterate() as IterableIterator<AnchorRow>;
      return await compareRowsWithFile(inChunks(rows), path, verifiers);
    } finally {
      sqlite.run("COMMIT");
    }
  } finally {
    sqlite.close();
  }
}

/** A row of audit_anchor_log, as the comparison reads it. */
export type AnchorRow = { positie: number; soort: AnchorLine["soort"]; tenantId: number | null; grootte: number; note: string };

function* inChunks<T>(it: Iterator<T>, n = 1000): Generator<T[]> {
  let chunk: T[] = [];
  for (let r = it.next(); !r.done; r = it.next()) {
    chunk.push(r.value);
    if (chunk.length === n) {
      yield chunk;
      chunk = [];
    }
  }
  if (chunk.length > 0) yield chunk;
}

/** Steps through rows that come in chunks, awaiting only when a chunk runs out. */
class RowCursor {
  private chunk: readonly AnchorRow[] = [];
  private i = 0;
  private readonly it: AsyncIterator<readonly AnchorRow[]> | Iterator<readonly AnchorRow[]>;
  done = false;
  constructor(rows: AsyncIterable<readonly AnchorRow[]> | Iterable<readonly AnchorRow[]>) {
    this.it = Symbol.asyncIterator in rows ? rows[Symbol.asyncIterator]() : rows[Symbol.iterator]();
  }
  get value(): AnchorRow {
    return this.chunk[this.i]!;
  }
  async next(): Promise<void> {
    this.i++;
    while (this.i >= this.chunk.length) {
      const r = await this.it.next();
      if (r.done) {
        this.done = true;
        return;
      }
      this.chunk = r.value;
      this.i = 0;
    }
  }
}

/**
 * The comparison itself, over the database's rows of audit_anchor_log in positie order,
 * from any store (SQLite here, PostgreSQL in src/pg/offline.ts), in chunks.
 */
export async function compareRowsWithFile(rowChunks: AsyncIterable<readonly AnchorRow[]> | Iterable<readonly AnchorRow[]>, path: string, verifiers: Verifier[]): Promise<AnchorComparison> {
  const out: AnchorComparison = {
    bestand: existsSync(path),
    regels: 0,
    oudeRegels: 0,
    perTenant: new Map(),
    checkpoints: new Map(),
    adopties: [],
    herstellingen: [],
    waarschuwingen: [],
  };
  const fileProblem = (p: FileProblem) => {
    out.probleem ??= p;
  };
  /**
   * A row that does not match the file: a problem of its tenant, and of the file's line's
   * tenant when the row names another (a row moved to a tenant id nobody checks must not
   * take its problem with it); an installation row's, of the file as a whole.
   */
  const rowProblem = (tenantId: number | null, p: RowProblem, toelichting: string) => {
    if (tenantId === null) fileProblem({ reden: p.reden === "checkpoint-ontbreekt" ? "database-teruggezet" : "bestand-gewijzigd", positie: p.positie, toelichting });
    else if (!out.perTenant.has(tenantId)) out.perTenant.set(tenantId, p);
  };

  {
    const row = new RowCursor(rowChunks);
    await row.next(); // onto the first row

    /** Newest checkpoint or restore acceptance line per tenant (verified at the end: one signature per tenant). */
    const newest = new Map<number, { soort: TreeHead["soort"]; note: string; positie: number; inTail: boolean }>();
    /** Adoptions and restore acceptances, opened at the end (few: one per operator action). */
    const operatorLines: { line: AnchorLine & { tenantId: number }; positie: number }[] = [];
    let tail = false;
    let tailInstallations = 0;
    let recordAfterInstallation = false;

    if (!out.bestand) {
      if (!row.done) fileProblem({ reden: "bestand-ontbreekt", positie: null, toelichting: `${path} bestaat niet, maar de database verwijst ernaar` });
      return out;
    }

    let lastYield = performance.now();
    for (const fl of readLines(path)) {
      out.regels++;
      if (performance.now() - lastYield > 20) {
        await new Promise((r) => setImmediate(r));
        lastYield = performance.now();
      }
      // Rows that point before this line start no line of the file.
      while (!row.done && row.value.positie < fl.positie) {
        const r = row.value;
        const forged = !recordVerifies(r, verifiers);
        if (forged) rowProblem(rowTenant(r), { reden: "checkpoint-niet-in-bestand", seq: r.grootte, positie: r.positie }, `rij op positie ${r.positie} staat niet in het bestand`);
        else fileProblem({ reden: "bestand-gewijzigd", positie: r.positie, toelichting: `het bestand heeft op positie ${r.positie} geen regel meer, de database wel` });
        await row.next();
      }
      const p = fl.parsed;
      if (p.kind === "oud") {
        out.oudeRegels++;
      } else if (!row.done && row.value.positie === fl.positie) {
        const r = row.value;
        if (anchorLineText(r) !== fl.text) {
          // Which side changed: the one whose signature no longer holds.
          if (p.kind === "record" && recordVerifies(p.line, verifiers) && !recordVerifies(r, verifiers)) {
            const problem: RowProblem = { reden: "checkpoint-niet-in-bestand", seq: r.grootte, positie: r.positie };
            rowProblem(rowTenant(r), problem, `rij op positie ${r.positie} wijkt af van het bestand`);
            if (p.line.tenantId !== r.tenantId) rowProblem(rowTenant(p.line), problem, `rij op positie ${r.positie} wijkt af van het bestand`);
          } else {
            fileProblem({ reden: "bestand-gewijzigd", positie: fl.positie, toelichting: `regel op positie ${fl.positie} wijkt af van de database` });
          }
        }
        await row.next();
      } else if (p.kind === "onleesbaar") {
        // No row refers to it: a line torn by a crash during an append.
        out.waarschuwingen.push(`onleesbare regel zonder databaserij op positie ${fl.positie} (afgebroken schrijfactie?)`);
      } else {
        // A record the database does not have. After the database's last row this is the
        // tail a crash between fsync and COMMIT leaves: at most one run.
        if (row.done) {
          tail = true;
          if (tailInstallations > 0) recordAfterInstallation = true;
          if (p.line.soort === "installatie") tailInstallations++;
        } else {
          const size = recordSize(p.line, verifiers) ?? 0;
          rowProblem(p.line.tenantId, { reden: "checkpoint-ontbreekt", seq: size, positie: fl.positie }, `regel op positie ${fl.positie} ontbreekt in de database`);
        }
      }
      if (p.kind === "record" && p.line.tenantId !== null) {
        const soort = p.line.soort;
        if (soort === "checkpoint" || soort === "herstel") newest.set(p.line.tenantId, { soort, note: p.line.note, positie: fl.positie, inTail: tail });
        if (soort === "adoptie" || soort === "herstel") operatorLines.push({ line: { ...p.line, tenantId: p.line.tenantId }, positie: fl.positie });
      }
    }
    // One run ends with its installation checkpoint: more than that is not a crash.
    if (tailInstallations > 1 || recordAfterInstallation) {
      fileProblem({ reden: "database-teruggezet", positie: null, toelichting: "het bestand bevat meer dan één run die de database niet kent: de database is ouder dan het bestand" });
    }
    // Rows beyond the end of the file.
    for (; !row.done; await row.next()) {
      const r = row.value;
      if (recordVerifies(r, verifiers)) {
        fileProblem({ reden: "bestand-ingekort", positie: r.positie, toelichting: `de database verwijst naar positie ${r.positie}, voorbij het einde van het bestand` });
      } else {
        rowProblem(rowTenant(r), { reden: "checkpoint-niet-in-bestand", seq: r.grootte, positie: r.positie }, `rij op positie ${r.positie} staat niet in het bestand`);
      }
    }

    for (const [tenantId, n] of newest) {
      // One signature per tenant, about 43 µs each: at 1,000 tenants the event loop must turn in between.
      if (performance.now() - lastYield > 20) {
        await new Promise((r) => setImmediate(r));
        lastYield = performance.now();
      }
      const o = openTreeHead(n.note, tenantId, verifiers, n.soort);
      if (o.ok) out.checkpoints.set(tenantId, { ...o.head, positie: n.positie, inTail: n.inTail });
      else fileProblem({ reden: "bestand-gewijzigd", positie: n.positie, toelichting: `${n.soort} van tenant ${tenantId} op positie ${n.positie}: ${o.error}` });
    }
    // What the operator signed by hand stays in every verdict: only those that verify
    // (one that does not is a changed line, found above or by the chain's start).
    Object.assign(out, operatorRecords(operatorLines.map(({ line, positie }) => ({ soort: line.soort, tenantId: line.tenantId, note: line.note, positie })), verifiers));
    return out;
  }
}

/**
 * The adoptions and restore acceptances among `lines` (of the anchor file, or its copy
 * in audit_anchor_log) whose signature holds, in the order given: what the operator
 * signed by hand and every verdict and daily report keeps naming (operatorWarnings).
 */
export function operatorRecords(
  lines: readonly { soort: string; tenantId: number; note: string; positie: number }[],
  verifiers: Verifier[],
): Pick<AnchorComparison, "adopties" | "herstellingen"> {
  const out: Pick<AnchorComparison, "adopties" | "herstellingen"> = { adopties: [], herstellingen: [] };
  for (const { soort, tenantId, note, positie } of lines) {
    if (soort === "adoptie") {
      const o = openAdoptionRecord(note, tenantId, verifiers);
      if (o.ok) out.adopties.push({ tenantId, seq: o.record.seq, tijdstip: o.record.tijdstip, positie });
    } else if (soort === "herstel") {
      const o = openRestoreRecord(note, tenantId, verifiers);
      if (o.ok) out.herstellingen.push({ tenantId, van: o.record.van, naar: o.record.naar, tijdstip: o.record.tijdstip, positie });
    }
  }
  return out;
}
