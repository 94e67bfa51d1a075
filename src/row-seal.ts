// Sealed rows: the job runs and the host backup's reports. A database writer can insert
// or change any row (docs/audit-chain.md, threat model), and three of nachtwacht's checks
// trust rows of their own tables:
// - one job_runs row saying audit-verificatie ran "ok" at a time after tonight's schedule
//   would make the crontab's call a 204 ("already done") and taken-controle report the
//   job as fine, night after night, while the chain it no longer checks is rewritten;
//   one failed run changed to "ok" would make taken-controle call a failing job fine;
// - one backup_statuses row saying a backup succeeded just now would keep backup-controle
//   quiet while the host's backups have stopped.
// So each such row is signed with the anchor key (AUDIT_ANKER_SLEUTEL), which the writer
// cannot read, and only a sealed row counts:
// - a run's start (its job and `gestart`) when it starts (`zegel`), and its end (every
//   column the end writes, with the start) when it ends (`eindzegel`): a run counts when
//   its start is sealed and it is either still 'bezig' with no end, or its end is sealed
//   (for a scheduled call's "already done", src/job-lease.ts; for a job's newest run as
//   taken-controle, /metrics and the daily report judge it, src/schedule-due.ts);
// - a backup report, all of its columns, when it is received (`zegel`): backup-controle
//   and the daily report judge the newest sealed one;
// - a job's lease (job_leases), each time it is taken or renewed: one forged lease of a
//   "process on another host" valid for years would make every crontab call of
//   audit-verificatie a 204 ("runs already elsewhere"); an unsealed lease holds nothing
//   and is taken over (alarm `db-integrity`);
// - the install time (service_meta 'geinstalleerd'), when it is first written: moved
//   ahead it would make taken-controle expect no job yet, so a job that stopped running is
//   never called missed; unsealed, no install time counts (every fire time is expected);
// - each tenant's verification result (audit_verification_state), when audit-verificatie
//   writes it: one changed to "intact" would make /metrics, the daily report and the
//   weekly report to the tenant's administrators say the chain is fine; unsealed (or
//   dated ahead), the tenant counts as not checked, and the next run overwrites it. An
//   older sealed result put back counts neither: the newest run's start, from its sealed
//   row and from a file beside the anchor file (verificationSince), is the bound.
// Rows without a valid seal newer than the newest sealed one are counted and reported
// (taken-controle and backup-controle: alarm `db-integrity`).
//
// A seal is the signature lines of a C2SP signed note (src/audit/note.ts) over a text
// naming what it seals; it opens under the current key (AUDIT_ANKER_SLEUTEL's) only. Not
// under the others AUDIT_VERTROUWDE_SLEUTELS keeps after a key change: that key may have
// been rotated out because it leaked, and a row lives in the database alone (an anchor
// file record must also be in the root-owned file, so those do open under every trusted
// key). The rows sealed before a key change are re-sealed with the new key once, at the
// first start with it (sealKeyMarker, resealUpdates); a row sealed with the old key after
// that start counts for nothing.
// What is left to the writer: deleting rows (a job then reads as
// missed, a backup as missing or too old: loud), and putting back an older row as it was
// (its own time then says how old it is).
import { and, eq, isNotNull, isNull, lte, ne, or, type Column } from "drizzle-orm";
import { auditVerificationState, backupStatuses, jobLeases, jobRuns, serviceMeta } from "../db/schema.ts";
import {
  auditVerificationState as auditVerificationStatePg,
  backupStatuses as backupStatusesPg,
  jobLeases as jobLeasesPg,
  jobRuns as jobRunsPg,
  serviceMeta as serviceMetaPg,
} from "../db/schema-pg.ts";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { writeFileDurably } from "./durable-file.ts";
import { latestCountingStart } from "./time.ts";
import { dirname, join, resolve } from "node:path";
import type { Config } from "./config.ts";
import { log } from "./logger.ts";
import type { Db } from "./db.ts";
import type { PgDb } from "./pg/store.ts";
import { auditKeys } from "./audit/keys.ts";
import { openNote, parseVerifierKey, signNote, type Verifier } from "./audit/note.ts";
import type { Keys } from "./audit/records.ts";

/** A run's start as its seal signs it. */
export interface RunStart {
  job: string;
  gestart: string;
}

/** A run's end as its end seal signs it (with its start): every column the end writes. */
export interface RunEndColumns {
  beeindigd: string | null;
  uitkomst: string;
  httpStatus: number | null;
  samenvatting: string | null;
  fout: string | null;
}

/** A job_runs row as the seal judges it. */
export type SealedRunRow = RunStart & RunEndColumns & { zegel: string | null; eindzegel: string | null };

/** A backup_statuses row as its seal signs it: every column but its id. */
export interface BackupColumns {
  ontvangen: string;
  exitCode: number;
  gelukt: boolean;
  bestandsnaam: string | null;
  grootte: number | null;
  foutmelding: string | null;
  bron: string;
}

/** A job_leases row as its seal signs it: what decides whose it is and until when. */
export interface LeaseColumns {
  job: string;
  pid: number;
  instantie: string;
  host: string;
  pidNs: string | null;
  runId: number;
  verloopt: string;
}

/** An audit_verification_state row as its seal signs it: every column. */
export interface VerificationColumns {
  tenantId: number;
  gecontroleerd: string;
  intact: boolean;
  aantalEntries: number;
  foutSeq: number | null;
  foutEntryId: number | null;
  foutReden: string | null;
}

export interface RowSeal {
  /** The seal of a run's start: signature lines ("— <key name> <base64>\n"). */
  seal(run: RunStart): string;
  /** The seal of a run's end, over its start and every column its end writes. */
  sealEnd(run: RunStart & RunEndColumns): string;
  /** Whether a run counts: its start sealed, and either 'bezig' without an end or its end sealed. */
  sealed(row: SealedRunRow): boolean;
  /** Whether the row's start seal opens under the key for exactly its job and start. */
  startSealed(row: RunStart & { zegel: string | null }): boolean;
  /** Whether the row's end seal opens under the key for exactly its start and end (whatever its start seal). */
  endSealed(row: RunStart & RunEndColumns & { eindzegel: string | null }): boolean;
  /** The seal of a backup report as stored. */
  sealBackup(row: BackupColumns): string;
  /** Whether the backup report's seal opens for exactly its columns. */
  backupSealed(row: BackupColumns & { zegel: string | null }): boolean;
  /** The seal of a lease as taken or renewed. */
  sealLease(lease: LeaseColumns): string;
  /** Whether the lease's seal opens for exactly its holder, run and expiry. */
  leaseSealed(lease: LeaseColumns & { zegel: string | null }): boolean;
  /** The seal of the install time (service_meta 'geinstalleerd'). */
  sealInstalled(value: string): string;
  /** Whether the install time's seal opens for exactly its value. */
  installedSealed(row: { value: string; zegel: string | null }): boolean;
  /** The seal of a tenant's verification result. */
  sealVerification(row: VerificationColumns): string;
  /** Whether the verification result's seal opens for exactly its columns. */
  verificationSealed(row: VerificationColumns & { zegel: string | null }): boolean;
  /** The keys it was made from: it signs with `keys.signer`, and opens under that key only (or under rowSeal's `opensUnder`). */
  readonly keys: Keys;
}

// The texts signed. JSON keeps any text of a report or summary on one line, unambiguous.
const startText = (r: RunStart) => `nachtwacht job-run\n${r.job}\n${r.gestart}\n`;
const endText = (r: RunStart & RunEndColumns) => `nachtwacht job-run-end\n${JSON.stringify([r.job, r.gestart, r.beeindigd, r.uitkomst, r.httpStatus, r.samenvatting, r.fout])}\n`;
const backupText = (r: BackupColumns) =>
  `nachtwacht backup-status\n${JSON.stringify([r.ontvangen, r.exitCode, r.gelukt, r.bestandsnaam, r.grootte, r.foutmelding, r.bron])}\n`;
const leaseText = (l: LeaseColumns) => `nachtwacht job-lease\n${JSON.stringify([l.job, l.pid, l.instantie, l.host, l.pidNs, l.runId, l.verloopt])}\n`;
const installedText = (value: string) => `nachtwacht geinstalleerd\n${JSON.stringify(value)}\n`;
const verificationText = (r: VerificationColumns) =>
  `nachtwacht audit-verificatie\n${JSON.stringify([r.tenantId, r.gecontroleerd, r.intact, r.aantalEntries, r.foutSeq, r.foutEntryId, r.foutReden])}\n`;

/** How many notes that opened a seal rowSeal keeps in memory, at most: the reports and /metrics read the same rows again and again. */
const OPENED_MAX = 100_000;

/**
 * The row seal of `keys`: signs with keys.signer, and opens under its key only, not
 * under keys.verifiers' others (a rotated-out key may have leaked; the header above).
 * `opensUnder`: other keys to open under instead, for finding the rows sealed before a
 * key change (keyChange), never for judging a row.
 */
export function rowSeal(keys: Keys, opensUnder: Verifier[] = [parseVerifierKey(keys.signer.verifierKey)]): RowSeal {
  // Notes that opened, so that a row read again costs a lookup, not a signature check
  // (~70 µs, bench/seal.ts): /metrics reads every tenant's verification result on each scrape. Only a
  // note that opened is kept (the same note always opens under the same keys), and each
  // note this process signs (it opens), so the rows a job just wrote cost nothing either.
  const opened = new Set<string>();
  const remember = (note: string) => {
    if (opened.size >= OPENED_MAX) opened.clear();
    opened.add(note);
  };
  const sign = (text: string) => {
    const note = signNote(text, keys.signer);
    remember(note);
    return note.slice(text.length + 1);
  };
  const opens = (text: string, zegel: string | null) => {
    if (zegel === null) return false;
    const note = `${text}\n${zegel}`;
    if (opened.has(note)) return true;
    // The text that opened must be the seal's own (a note's text could hold a blank line).
    const o = openNote(note, opensUnder);
    if (!o.ok || o.text !== text) return false;
    remember(note);
    return true;
  };
  const startSealed = (r: RunStart & { zegel: string | null }) => opens(startText(r), r.zegel);
  const endSealed = (r: RunStart & RunEndColumns & { eindzegel: string | null }) => opens(endText(r), r.eindzegel);
  return {
    keys,
    seal: (r) => sign(startText(r)),
    sealEnd: (r) => sign(endText(r)),
    startSealed,
    endSealed,
    sealed: (r) => startSealed(r) && (r.uitkomst === "bezig" ? r.beeindigd === null : endSealed(r)),
    sealBackup: (r) => sign(backupText(r)),
    backupSealed: (r) => opens(backupText(r), r.zegel),
    sealLease: (l) => sign(leaseText(l)),
    leaseSealed: (l) => opens(leaseText(l), l.zegel),
    sealInstalled: (value) => sign(installedText(value)),
    installedSealed: (r) => opens(installedText(r.value), r.zegel),
    sealVerification: (r) => sign(verificationText(r)),
    verificationSealed: (r) => opens(verificationText(r), r.zegel),
  };
}

const perConfig = new WeakMap<object, RowSeal>();

/** The service's seal, from its configuration's keys (parsed once per configuration). */
export function rowSealOf(config: Pick<Config, "auditAnkerSleutel" | "auditVertrouwdeSleutels">): RowSeal {
  let s = perConfig.get(config);
  if (!s) perConfig.set(config, (s = rowSeal(auditKeys(config))));
  return s;
}

const RUN_SEAL_COLUMNS = ["job", "gestart", "beeindigd", "uitkomst", "httpStatus", "samenvatting", "fout", "zegel", "eindzegel"] as const;
const BACKUP_SEAL_COLUMNS = ["ontvangen", "exitCode", "gelukt", "bestandsnaam", "grootte", "foutmelding", "bron", "zegel"] as const;

/** The job_runs columns a run's seal is judged by, of either dialect's table: select them to call `sealed`. */
export function sealedRunColumns<T extends typeof jobRuns | typeof jobRunsPg>(t: T): Pick<T, (typeof RUN_SEAL_COLUMNS)[number]> {
  return Object.fromEntries(RUN_SEAL_COLUMNS.map((k) => [k, t[k]])) as Pick<T, (typeof RUN_SEAL_COLUMNS)[number]>;
}

/** The backup_statuses columns a report's seal is judged by, of either dialect's table. */
export function sealedBackupColumns<T extends typeof backupStatuses | typeof backupStatusesPg>(t: T): Pick<T, (typeof BACKUP_SEAL_COLUMNS)[number]> {
  return Object.fromEntries(BACKUP_SEAL_COLUMNS.map((k) => [k, t[k]])) as Pick<T, (typeof BACKUP_SEAL_COLUMNS)[number]>;
}

/**
 * The latest moment a verification state may carry, read at `now`: a minute ahead (clocks
 * of two instances differ a little, not more). A row dated later is no check but a
 * database writer's: audit-verificatie overwrites it, and until then it does not count.
 */
export const stateNotAfter = (now: Date) => new Date(now.getTime() + 60_000).toISOString();

/**
 * From when a verification result counts (verificationSince): a start, results older than
 * it having been put back; null, no bound (audit-verificatie never ran); false, none counts.
 */
export type VerificationSince = string | null | false;

/**
 * Whether a tenant's verification result counts at `now`, for the reports and /metrics:
 * sealed, not dated ahead, and not older than `since`, the start of the newest
 * audit-verificatie run that did its work (verificationSince; each such run writes every
 * tenant's result with its start): an older sealed result put back by a database writer
 * would otherwise hide the broken chain the newest run found.
 */
export function countsAsVerification(row: VerificationColumns & { zegel: string | null }, seal: RowSeal, now: Date, since: VerificationSince): boolean {
  return since !== false && row.gecontroleerd <= stateNotAfter(now) && (since === null || row.gecontroleerd >= since) && seal.verificationSealed(row);
}

/**
 * `since` of countsAsVerification, from audit-verificatie's newest rows (newest first) and
 * the start its witness file holds (verificationWitnessFile, null without one; not one
 * beyond latestCountingStart(now)): the later
 * of that and the start of the newest sealed run among the rows that did its work (ok or
 * afwijking). The rows are the writer's: tonight's deleted, last night's run reads as the
 * newest; the file says otherwise. When neither names a run but the job has rows (every
 * newest one unsealed, or none that did its work), no result counts: a writer who floods
 * the newest rows hides every sealed run, and results of a run that cannot be named cannot
 * be told from ones put back.
 */
export function verificationSince(rows: readonly SealedRunRow[], seal: RowSeal, witnessed: string | null, now: Date): VerificationSince {
  // A start witnessed beyond latestCountingStart(now) was written with the clock ahead: it does not count, as its row does not.
  const witnessedStart = witnessed !== null && witnessed <= latestCountingStart(now) ? witnessed : null;
  const last = rows.find((r) => (r.uitkomst === "ok" || r.uitkomst === "afwijking") && seal.sealed(r))?.gestart ?? null;
  if (last === null && witnessedStart === null) return rows.length > 0 ? false : null;
  return last !== null && (witnessedStart === null || last > witnessedStart) ? last : witnessedStart;
}

/** Rows sealed or checked between two turns of the event loop (mapInTurns): a few milliseconds' worth (bench/seal.ts). */
export const SEAL_CHUNK = 64;

/**
 * `f` over `xs`, SEAL_CHUNK at a time with the event loop (/health, the write API) served
 * in between: a seal costs 20-80 µs (bench/seal.ts), so ten thousand tenants' results in
 * one go would hold the loop for half a second.
 */
export async function mapInTurns<T, R>(xs: readonly T[], f: (x: T) => R): Promise<R[]> {
  const out: R[] = [];
  for (let i = 0; i < xs.length; i++) {
    if (i > 0 && i % SEAL_CHUNK === 0) await new Promise((resolve) => setImmediate(resolve));
    out.push(f(xs[i]!));
  }
  return out;
}

/** The service_meta key of the install time. */
export const INSTALLED = "geinstalleerd";

/** How many of a job's (or the backup's) newest rows are read to find the newest sealed one. */
export const NEWEST_ROWS = 20;

/** The newest sealed row among the newest rows (newest first), and how many rows without a valid seal came before it. */
export function newestSealed<R>(rows: readonly R[], isSealed: (row: R) => boolean): { run: R | null; vervalst: number } {
  let vervalst = 0;
  for (const r of rows) {
    if (isSealed(r)) return { run: r, vervalst };
    vervalst++;
  }
  return { run: null, vervalst };
}

/** The newest sealed backup report that counts at `now`, without its seal, with what is wrong beside it. */
export interface SealedBackup<B> {
  backup: B | null;
  /** Rows without a valid seal newer than `backup` (dated in the future ones included). */
  vervalst: number;
  /**
   * The newest sealed report dated after latestCountingStart(now): stored while the host
   * clock ran ahead (src/job-runs.ts, FUTURE_START_MARGIN_MS); it does not count, or it
   * would hide every later report until real time catches up with it. Shown beside
   * `backup` (backup-controle, the daily report, /metrics), its outcome too.
   */
  future: B | null;
}

/**
 * Of the newest backup rows received by latestCountingStart(now) and of those dated later
 * (both newest first), the newest sealed one that counts: the one rule for both stores
 * (backup-controle, the daily report, /metrics), as lastRunOf is for job runs.
 */
export function newestSealedBackup<R extends BackupColumns & { zegel: string | null }>(
  counting: readonly R[],
  future: readonly R[],
  seal: RowSeal,
): SealedBackup<Omit<R, "zegel">> {
  const { run, vervalst: unsealed } = newestSealed(counting, seal.backupSealed);
  const sealedFuture = future.filter((r) => seal.backupSealed(r));
  const vervalst = unsealed + future.length - sealedFuture.length;
  const withoutSeal = ({ zegel: _, ...row }: R): Omit<R, "zegel"> => row;
  return { backup: run && withoutSeal(run), vervalst, future: sealedFuture[0] ? withoutSeal(sealedFuture[0]) : null };
}

/** Which of the seal columns a database had before this start's migrations (SEAL_COLUMNS, looked up by openStore and migratePg). */
export interface SealColumns {
  /** job_runs.zegel */
  runStarts: boolean;
  /** job_runs.eindzegel */
  runEnds: boolean;
  /** backup_statuses.zegel */
  backups: boolean;
  /** service_meta.zegel (the install time's) */
  installed: boolean;
  /** audit_verification_state.zegel */
  verification: boolean;
}

/** The columns the seals live in, as (table, column), to be looked up before migrating. */
export const SEAL_COLUMNS: Record<keyof SealColumns, readonly [string, string]> = {
  runStarts: ["job_runs", "zegel"],
  runEnds: ["job_runs", "eindzegel"],
  backups: ["backup_statuses", "zegel"],
  installed: ["service_meta", "zegel"],
  verification: ["audit_verification_state", "zegel"],
};

/** A file of nachtwacht's in the anchor file's folder: out of a database writer's reach, and moved with the anchor file. */
const besideAnchorFile = (config: Pick<Config, "auditAnkerBestand">, name: string) => join(dirname(resolve(config.auditAnkerBestand)), name);

/**
 * The file beside the anchor file that says this installation's rows of the past have
 * been sealed (sealLegacyRows). It is in nachtwacht's state directory, out of a database
 * writer's reach: once it exists, no start seals rows of the past again, so dropping a
 * seal column and its migration record (the next start would add it again) gets a
 * writer's rows sealed by nobody.
 */
export const pastSealedMarker = (config: Pick<Config, "auditAnkerBestand">) => besideAnchorFile(config, "zegels-sinds");

/**
 * The file beside the anchor file that names the key this installation's rows are sealed
 * with (its verifier key: name, key ID, public key). A start whose AUDIT_ANKER_SLEUTEL is
 * another key re-seals the rows sealed with the key it names (keyChange, resealUpdates)
 * and then names its own: once per key change, so a row sealed with the old key after
 * that start is never re-sealed, by that start or a later one.
 */
export const sealKeyMarker = (config: Pick<Config, "auditAnkerBestand">) => besideAnchorFile(config, "zegelsleutel");

/**
 * The file beside the anchor file that holds when the newest backup report this process
 * stored was received (backup-status writes it, backup-controle reads it). A database
 * writer can delete the newest report, a failed one, so that the one before reads as the
 * newest; the file, out of their reach, says a newer one was there.
 */
export const backupWitnessFile = (config: Pick<Config, "auditAnkerBestand">) => besideAnchorFile(config, "laatste-backupmelding");

/**
 * The file beside the anchor file that holds the start of the newest audit-verificatie
 * run that stored its results (the job writes it after them; the reports and /metrics
 * read it, verificationSince). A database writer can put last night's sealed "intact"
 * results back and delete tonight's run's row; the file, out of their reach, says a newer
 * check was made.
 */
export const verificationWitnessFile = (config: Pick<Config, "auditAnkerBestand">) => besideAnchorFile(config, "laatste-verificatie");

/**
 * Records `at` in a witness file (backupWitnessFile, verificationWitnessFile) as the
 * newest moment (atomically, owner-only); never moves it back, except from a time beyond
 * latestCountingStart(at): written while the host clock ran ahead, it would otherwise
 * stay "newest" until real time caught up, and a later row deleted meanwhile would go
 * unnoticed.
 */
export function witnessMoment(path: string, at: string): void {
  const known = witnessedMoment(path);
  if (known !== null && known >= at && known <= latestCountingStart(new Date(at))) return;
  writeBesideAnchorFile(path, `${at}\n`);
}

/**
 * The one rule by which the files beside the anchor file (besideAnchorFile) are written:
 * their folder made, owner-only, durably (writeFileDurably: lost to a power cut, a marker
 * would make the next start seal rows again, a witness would forget what it saw).
 * `exclusive`: never over an existing file (EEXIST).
 */
function writeBesideAnchorFile(path: string, text: string, o: { exclusive?: boolean } = {}): void {
  mkdirSync(dirname(path), { recursive: true });
  writeFileDurably(path, text, 0o600, o);
}

/** The moment a witness file holds, or null (none yet, or the file is unreadable). */
export function witnessedMoment(path: string): string | null {
  try {
    const v = readFileSync(path, "utf8").trim();
    return /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/.test(v) ? v : null;
  } catch {
    return null;
  }
}

/** Every kind of row as not sealed before: sealLegacyRows then seals each kind's unsealed rows of the past. */
const NONE_SEALED: SealColumns = { runStarts: false, runEnds: false, backups: false, installed: false, verification: false };

/**
 * Which kinds of rows of the past this start seals (sealLegacyRows), or null for none.
 * While the service's `marker` does not exist, every kind's unsealed rows: so a first
 * start that died after its migrations committed and before it sealed (the columns were
 * there at the next start) still seals them, as does the start after an operator removed
 * the marker (docs/operations.md). Without a marker (tools and tests): the kinds whose
 * column this start's migrations added. Once the marker exists, none: seal columns added
 * again after it was written are logged as an error; their rows stay unsealed, and are
 * reported.
 */
export function pastRowsToSeal(marker: string | undefined, had: SealColumns): SealColumns | null {
  if (marker === undefined) return had;
  if (!existsSync(marker)) return NONE_SEALED;
  const added = (Object.keys(had) as (keyof SealColumns)[]).filter((k) => !had[k]);
  if (added.length > 0) {
    log(
      "error",
      "seal columns were added again after this installation's rows were sealed: someone who can change the database's schema dropped them, or an older database was restored without removing the marker (docs/operations.md, rolling back); the rows already recorded stay unsealed and are reported",
      { columns: added.map((k) => SEAL_COLUMNS[k].join(".")), marker },
    );
  }
  return null;
}

/**
 * Writes `marker` (once, never over an existing one; owner-only) after the rows of the
 * past were sealed, or found sealed. Durably, as the witness files: lost to a power cut,
 * the next start would seal the rows of the past again, a database writer's among them.
 * Any failure but EEXIST (another start wrote it first) fails the start.
 */
export function markPastSealed(marker: string | undefined, now: Date): void {
  if (marker === undefined || existsSync(marker)) return;
  try {
    writeBesideAnchorFile(marker, `${now.toISOString()}\n`, { exclusive: true });
  } catch (e) {
    if ((e as { code?: unknown }).code !== "EEXIST") throw e;
  }
}

/**
 * A start refused because the key the rows were sealed with (sealKeyMarker) is not one
 * this start trusts, or the marker names no key: the entry point prints its message in one
 * line and exits 2 (src/start-failure.ts). The marker is left as it is.
 */
export class UntrustedSealKey extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UntrustedSealKey";
  }
}

/** Where the operator reads what to do about a refused start over zegelsleutel. */
const SEAL_KEY_DOCS = 'docs/operations.md, "A start refused over zegelsleutel"';

/**
 * What the operator can do about a marker naming a key this start does not trust
 * (UntrustedSealKey). One remedy only: the likeliest cause is an instance whose
 * environment was not switched, and trusting the marker's key there instead would
 * re-seal the switched instance's rows with the old key (the docs say when that is right).
 */
const sealKeyRemedy =
  "geef deze instantie de AUDIT_ANKER_SLEUTEL die zegelsleutel noemt (een tweede instantie waarvan de omgeving niet is omgezet, of een teruggezet env-bestand?); " +
  `na een restore of een bewuste terugkeer naar een oude sleutel: zie ${SEAL_KEY_DOCS}`;

/**
 * What this start does about the key the rows were sealed with (sealKeyMarker `marker`):
 * null, nothing (the marker names this seal's key, or there is no marker: tools and
 * tests); otherwise re-seal the rows whose seals open under `former` (resealUpdates; null:
 * there is no key to look for), then markSealKey. `former` opens under the key the marker
 * names, when AUDIT_VERTROUWDE_SLEUTELS still trusts it; without a marker (the first start
 * of this version, or of an installation) under every other trusted key. Only the key the
 * marker names: rows sealed with a key rotated out before it (one that may have leaked)
 * after that rotation's start stay as they are, not counting.
 * A marker naming a key this start does not trust, or no key, refuses the start
 * (UntrustedSealKey) before anything is re-sealed or marked: a start with the key before
 * (a second instance sharing the anchor folder whose environment was not switched, an
 * environment file put back) would otherwise name that key in the marker, and the next
 * start with the current key would re-seal, as genuine, every row sealed with it since
 * the rotation: a thief's forgeries among them.
 */
export function keyChange(marker: string | undefined, seal: RowSeal): { former: RowSeal | null } | null {
  if (marker === undefined) return null;
  let text: string | null = null;
  try {
    text = readFileSync(marker, "utf8").trim();
  } catch (e) {
    if ((e as { code?: unknown }).code !== "ENOENT") throw e;
  }
  const current = seal.keys.signer.verifierKey;
  const others = seal.keys.verifiers.filter((v) => v.verifierKey !== current);
  if (text === null) return { former: others.length > 0 ? rowSeal(seal.keys, others) : null };
  let named: string;
  try {
    // Compared as parsed (canonical): a key written into the marker by hand, its key ID in upper case, is the same key.
    named = parseVerifierKey(text).verifierKey;
  } catch {
    throw new UntrustedSealKey(`${marker} hoort de publieke sleutel te noemen waarmee de rijen van deze installatie zijn verzegeld, maar is leeg of bevat geen geldige publieke sleutel: schrijf daarin die sleutel (de verificatieSleutel van de laatste start, of na een restore die van AUDIT_ANKER_SLEUTEL toen de backup werd gemaakt; ${SEAL_KEY_DOCS})`);
  }
  if (named === current) return null;
  const former = others.filter((v) => v.verifierKey === named);
  if (former.length === 0) {
    throw new UntrustedSealKey(
      `${marker} zegt dat de rijen van deze installatie zijn verzegeld met ${named}; deze start heeft AUDIT_ANKER_SLEUTEL ${current}, en ${named} staat niet in AUDIT_VERTROUWDE_SLEUTELS: ${sealKeyRemedy}`,
    );
  }
  return { former: rowSeal(seal.keys, former) };
}

/**
 * Names `seal`'s key in `marker` (sealKeyMarker), after the rows sealed with the one
 * before were re-sealed (keyChange; `resealed`: how many, null when there was no key to
 * look for): the caller re-seals first, so a crash in between re-seals again, never marks
 * a key whose rows were left unsealed. The one step of a key change for both stores.
 */
export function markSealKey(marker: string, seal: RowSeal, resealed: ReturnType<typeof resealCounts> | null): void {
  if (resealed) log("info", "rows sealed with the previous key re-sealed with AUDIT_ANKER_SLEUTEL", { ...resealed, marker });
  writeBesideAnchorFile(marker, `${seal.keys.signer.verifierKey}\n`);
  // Said once, when the file is written: an operator who rolls back or restores reads here which key it named.
  log("info", "zegelsleutel names the key this installation's rows are sealed with", { marker, sleutel: seal.keys.signer.verifierKey });
}

/** The sealed rows of every kind, as a store reads them for re-sealing after a key change (resealUpdates). */
export interface SealedRows<Id> {
  runs: readonly (SealedRunRow & { id: Id })[];
  backups: readonly (BackupColumns & { id: Id; zegel: string | null })[];
  verification: readonly (VerificationColumns & { zegel: string | null })[];
  /** The install time's row (service_meta INSTALLED), or null. */
  installed: { value: string; zegel: string | null } | null;
  leases: readonly (LeaseColumns & { zegel: string | null })[];
}

/** A row's new seals, and the seals it had: a store writes the new ones only where the old ones are still there. */
export interface Reseal<R, S> {
  row: R;
  set: S;
}

/**
 * Of `rows`, the seals that open under `former` (keyChange), made again with `seal`: a
 * run's start and end each on its own (an end a writer changed stays unsealed). Rows
 * without a seal, or with one that opens under no former key, are left as they are.
 * Idempotent: a row re-sealed opens under `seal`'s key, not under `former`.
 */
export function resealUpdates<Id>(rows: SealedRows<Id>, seal: RowSeal, former: RowSeal) {
  const runs: Reseal<SealedRunRow & { id: Id }, { zegel?: string; eindzegel?: string }>[] = [];
  for (const r of rows.runs) {
    const set: { zegel?: string; eindzegel?: string } = {};
    if (former.startSealed(r)) set.zegel = seal.seal(r);
    if (r.eindzegel !== null && former.endSealed(r)) set.eindzegel = seal.sealEnd(r);
    if (set.zegel !== undefined || set.eindzegel !== undefined) runs.push({ row: r, set });
  }
  const installed = rows.installed && former.installedSealed(rows.installed) ? { row: rows.installed, set: { zegel: seal.sealInstalled(rows.installed.value) } } : null;
  return {
    runs,
    backups: rows.backups.filter((r) => former.backupSealed(r)).map((row) => ({ row, set: { zegel: seal.sealBackup(row) } })),
    verification: rows.verification.filter((r) => former.verificationSealed(r)).map((row) => ({ row, set: { zegel: seal.sealVerification(row) } })),
    installed,
    leases: rows.leases.filter((r) => former.leaseSealed(r)).map((row) => ({ row, set: { zegel: seal.sealLease(row) } })),
  };
}

/** How many rows of each kind resealUpdates re-seals: for the start's log. */
export const resealCounts = (u: ReturnType<typeof resealUpdates>) => ({
  jobRuns: u.runs.length,
  backupStatuses: u.backups.length,
  verificatie: u.verification.length,
  geinstalleerd: u.installed ? 1 : 0,
  leases: u.leases.length,
});

/**
 * Seals the rows recorded before their kind was sealed, once: at the start whose
 * migrations add the column (openStore, migratePg; `had` says which kinds to leave,
 * pastRowsToSeal). Only rows without a seal.
 * Only rows of the past (started, ended, received, installed by `now`): a row dated
 * later stays unsealed, so it never counts. An end is sealed only where its start's seal
 * holds. Leases are not: one left from before lasts seconds, and is taken over.
 * Whatever a database writer had put in these tables by then is sealed with them: trust
 * on first use, once.
 */
export function sealLegacyRows(db: Db, seal: RowSeal, now: Date, had: SealColumns): void {
  if (Object.values(had).every(Boolean)) return;
  const at = now.toISOString();
  db.transaction((tx) => {
    if (!had.verification) {
      const s = auditVerificationState;
      const rows = tx.select().from(s).where(and(isNull(s.zegel), lte(s.gecontroleerd, at))).all();
      for (const r of rows) tx.update(s).set({ zegel: seal.sealVerification(r) }).where(eq(s.tenantId, r.tenantId)).run();
    }
    if (!had.installed) {
      const row = tx.select({ value: serviceMeta.value, zegel: serviceMeta.zegel }).from(serviceMeta).where(eq(serviceMeta.key, INSTALLED)).get();
      if (row && row.zegel === null && row.value <= at) tx.update(serviceMeta).set({ zegel: seal.sealInstalled(row.value) }).where(eq(serviceMeta.key, INSTALLED)).run();
    }
    if (!had.runStarts) {
      const rows = tx.select({ id: jobRuns.id, job: jobRuns.job, gestart: jobRuns.gestart }).from(jobRuns).where(and(isNull(jobRuns.zegel), lte(jobRuns.gestart, at))).all();
      for (const r of rows) tx.update(jobRuns).set({ zegel: seal.seal(r) }).where(eq(jobRuns.id, r.id)).run();
    }
    if (!had.runEnds) {
      const rows = tx.select({ id: jobRuns.id, ...sealedRunColumns(jobRuns) }).from(jobRuns).where(legacyEnd(jobRuns, at)).all();
      for (const r of rows) if (seal.startSealed(r)) tx.update(jobRuns).set({ eindzegel: seal.sealEnd(r) }).where(eq(jobRuns.id, r.id)).run();
    }
    if (!had.backups) {
      const rows = tx.select({ id: backupStatuses.id, ...sealedBackupColumns(backupStatuses) }).from(backupStatuses).where(and(isNull(backupStatuses.zegel), lte(backupStatuses.ontvangen, at))).all();
      for (const r of rows) tx.update(backupStatuses).set({ zegel: seal.sealBackup(r) }).where(eq(backupStatuses.id, r.id)).run();
    }
  });
}

/** sealLegacyRows on PostgreSQL, inside the migrating session's hold of the migration lock. */
export async function sealLegacyRowsPg(db: PgDb, seal: RowSeal, now: Date, had: SealColumns): Promise<void> {
  if (Object.values(had).every(Boolean)) return;
  const at = now.toISOString();
  const runs = jobRunsPg;
  const backups = backupStatusesPg;
  const meta = serviceMetaPg;
  await db.transaction(async (tx) => {
    if (!had.verification) {
      const s = auditVerificationStatePg;
      const rows = await tx.select().from(s).where(and(isNull(s.zegel), lte(s.gecontroleerd, at)));
      for (const r of rows) await tx.update(s).set({ zegel: seal.sealVerification(r) }).where(eq(s.tenantId, r.tenantId));
    }
    if (!had.installed) {
      const [row] = await tx.select({ value: meta.value, zegel: meta.zegel }).from(meta).where(eq(meta.key, INSTALLED));
      if (row && row.zegel === null && row.value <= at) await tx.update(meta).set({ zegel: seal.sealInstalled(row.value) }).where(eq(meta.key, INSTALLED));
    }
    if (!had.runStarts) {
      const rows = await tx.select({ id: runs.id, job: runs.job, gestart: runs.gestart }).from(runs).where(and(isNull(runs.zegel), lte(runs.gestart, at)));
      for (const r of rows) await tx.update(runs).set({ zegel: seal.seal(r) }).where(eq(runs.id, r.id));
    }
    if (!had.runEnds) {
      const rows = await tx.select({ id: runs.id, ...sealedRunColumns(runs) }).from(runs).where(legacyEnd(runs, at));
      for (const r of rows) if (seal.startSealed(r)) await tx.update(runs).set({ eindzegel: seal.sealEnd(r) }).where(eq(runs.id, r.id));
    }
    if (!had.backups) {
      const rows = await tx.select({ id: backups.id, ...sealedBackupColumns(backups) }).from(backups).where(and(isNull(backups.zegel), lte(backups.ontvangen, at)));
      for (const r of rows) await tx.update(backups).set({ zegel: seal.sealBackup(r) }).where(eq(backups.id, r.id));
    }
  });
}

/** The ended runs without an end seal whose end is not later than `at`. */
const legacyEnd = (t: typeof jobRuns | typeof jobRunsPg, at: string) => and(isNull(t.eindzegel), ne(t.uitkomst, "bezig"), isNotNull(t.beeindigd), lte(t.beeindigd, at));

/** A column still holding `v` (null: still none): a re-seal writes only over the seal it read, not over one written meanwhile. */
const still = (c: Column, v: string | null) => (v === null ? isNull(c) : eq(c, v));

/**
 * After a key change (keyChange): re-seals with `seal` the rows whose seals open under
 * `former` (resealUpdates), in one transaction; each only where its seals are still the
 * ones read. Returns how many of each kind.
 */
export function resealRows(db: Db, seal: RowSeal, former: RowSeal): ReturnType<typeof resealCounts> {
  const leaseColumns = { job: jobLeases.job, pid: jobLeases.pid, instantie: jobLeases.instantie, host: jobLeases.host, pidNs: jobLeases.pidNs, runId: jobLeases.runId, verloopt: jobLeases.verloopt, zegel: jobLeases.zegel };
  const u = resealUpdates(
    {
      runs: db.select({ id: jobRuns.id, ...sealedRunColumns(jobRuns) }).from(jobRuns).where(or(isNotNull(jobRuns.zegel), isNotNull(jobRuns.eindzegel))).all(),
      backups: db.select({ id: backupStatuses.id, ...sealedBackupColumns(backupStatuses) }).from(backupStatuses).where(isNotNull(backupStatuses.zegel)).all(),
      verification: db.select().from(auditVerificationState).where(isNotNull(auditVerificationState.zegel)).all(),
      installed: db.select({ value: serviceMeta.value, zegel: serviceMeta.zegel }).from(serviceMeta).where(eq(serviceMeta.key, INSTALLED)).get() ?? null,
      leases: db.select(leaseColumns).from(jobLeases).where(isNotNull(jobLeases.zegel)).all(),
    },
    seal,
    former,
  );
  db.transaction((tx) => {
    for (const { row, set } of u.runs) tx.update(jobRuns).set(set).where(and(eq(jobRuns.id, row.id), still(jobRuns.zegel, row.zegel), still(jobRuns.eindzegel, row.eindzegel))).run();
    for (const { row, set } of u.backups) tx.update(backupStatuses).set(set).where(and(eq(backupStatuses.id, row.id), still(backupStatuses.zegel, row.zegel))).run();
    const s = auditVerificationState;
    for (const { row, set } of u.verification) tx.update(s).set(set).where(and(eq(s.tenantId, row.tenantId), still(s.zegel, row.zegel))).run();
    if (u.installed) tx.update(serviceMeta).set(u.installed.set).where(and(eq(serviceMeta.key, INSTALLED), still(serviceMeta.zegel, u.installed.row.zegel))).run();
    for (const { row, set } of u.leases) tx.update(jobLeases).set(set).where(and(eq(jobLeases.job, row.job), still(jobLeases.zegel, row.zegel))).run();
  });
  return resealCounts(u);
}

/** resealRows on PostgreSQL, inside the migrating session's hold of the migration lock. */
export async function resealRowsPg(db: PgDb, seal: RowSeal, former: RowSeal): Promise<ReturnType<typeof resealCounts>> {
  const runs = jobRunsPg;
  const backups = backupStatusesPg;
  const meta = serviceMetaPg;
  const leases = jobLeasesPg;
  const s = auditVerificationStatePg;
  const leaseColumns = { job: leases.job, pid: leases.pid, instantie: leases.instantie, host: leases.host, pidNs: leases.pidNs, runId: leases.runId, verloopt: leases.verloopt, zegel: leases.zegel };
  const u = resealUpdates(
    {
      runs: await db.select({ id: runs.id, ...sealedRunColumns(runs) }).from(runs).where(or(isNotNull(runs.zegel), isNotNull(runs.eindzegel))),
      backups: await db.select({ id: backups.id, ...sealedBackupColumns(backups) }).from(backups).where(isNotNull(backups.zegel)),
      verification: await db.select().from(s).where(isNotNull(s.zegel)),
      installed: (await db.select({ value: meta.value, zegel: meta.zegel }).from(meta).where(eq(meta.key, INSTALLED)))[0] ?? null,
      leases: await db.select(leaseColumns).from(leases).where(isNotNull(leases.zegel)),
    },
    seal,
    former,
  );
  await db.transaction(async (tx) => {
    for (const { row, set } of u.runs) await tx.update(runs).set(set).where(and(eq(runs.id, row.id), still(runs.zegel, row.zegel), still(runs.eindzegel, row.eindzegel)));
    for (const { row, set } of u.backups) await tx.update(backups).set(set).where(and(eq(backups.id, row.id), still(backups.zegel, row.zegel)));
    for (const { row, set } of u.verification) await tx.update(s).set(set).where(and(eq(s.tenantId, row.tenantId), still(s.zegel, row.zegel)));
    if (u.installed) await tx.update(meta).set(u.installed.set).where(and(eq(meta.key, INSTALLED), still(meta.zegel, u.installed.row.zegel)));
    for (const { row, set } of u.leases) await tx.update(leases).set(set).where(and(eq(leases.job, row.job), still(leases.zegel, row.zegel)));
  });
  return resealCounts(u);
}
