// `nachtwacht backup`: the host backup of the database, run by /etc/cron.d/nachtwacht as
// root (through ops/backup.sh), so the host needs no sqlite3 CLI.
//
//  1. an online, consistent copy with SQLite's VACUUM INTO: one read transaction, so the
//     copy is a snapshot even while the service writes (a plain cp of a live WAL
//     database can copy a torn state and misses what is still in the -wal file);
//  2. an integrity check of the copy, gzip, fsync, and an atomic rename into the backup
//     folder (the folder fsynced after: src/durable-file.ts); the anchor file is
//     copied beside it alike (a missing one is a failure once the database has anchors),
//     old backups are pruned;
//  3. its name and size reported to backup-status ({"exitCode":0,...}).
// On any failure the step, its exit code and its error are reported instead
// ({"exitCode":N,"foutmelding":...}) and the command exits with that code.
//
// The secret for the report is read from the environment file (--env), never from the
// command line. Exit codes (sysexits): 0 ok, 64 usage, 65 the copy is not sound,
// 66 no database, or no anchor file while the database has anchors (the database copy
// is kept), 69 another backup into the same folder is running (refused at once, nothing
// written or reported), 73 backup folder not usable, 74 any other I/O error (also less
// free in the backup folder than the backup needs, checkBackupRoom: on SQLite twice the
// database's pages in use, on PostgreSQL its tables' data, pg_table_size), 75 backup
// made but the report to backup-status failed (also when the port is held by another
// user than the service's: the secret is then not sent, src/cli/listener.ts), 78
// (PostgreSQL) a DATABASE_URL parameter pg_dump cannot be given.
import { dlopen, FFIType } from "bun:ffi";
import { Database, constants as sqlite } from "bun:sqlite";
import { createReadStream, createWriteStream, fstatSync, mkdirSync, readdirSync, readFileSync, realpathSync, rmSync, statfsSync, statSync, accessSync, closeSync, openSync, constants } from "node:fs";
import { basename, dirname, join } from "node:path";
import { pipeline } from "node:stream/promises";
import { createGzip } from "node:zlib";
import { parseEnvFile } from "./config-check.ts";
import { databaseUrl } from "./database-url.ts";
import { listenerRefusal } from "./listener.ts";
import { parseOptions } from "./options.ts";
import { StdoutFailed } from "./stdout.ts";
import { renameDurably, writeFileDurably } from "../durable-file.ts";
import { sealKeyMarker } from "../row-seal.ts";
import { driverError } from "../http/errors.ts";
import { DAY_MS } from "../time.ts";

const USAGE =
  "gebruik: nachtwacht backup [--env BESTAND] [--db BESTAND | --database-url URL|-] [--map MAP] [--ankers BESTAND] [--bewaar-dagen N] [--geen-melding]\n" +
  "  Maakt een online kopie van de database (VACUUM INTO), controleert en comprimeert die in --map,\n" +
  "  of van PostgreSQL met pg_dump (--database-url of DATABASE_URL zonder --db; gecontroleerd met pg_restore --list),\n" +
  "  kopieert het ankerbestand ernaast (en zegelsleutel, de sleutel waarmee de rijen zijn verzegeld) en meldt het resultaat aan backup-status.\n" +
  "  --env           omgevingsbestand met CRON_SECRET, PORT, HOST (standaard /etc/nachtwacht/nachtwacht.env)\n" +
  "  --db            standaard DATABASE_PATH uit --env, anders /var/lib/nachtwacht/nachtwacht.db\n" +
  "  --map           standaard /var/backups/nachtwacht\n" +
  "  --ankers        standaard AUDIT_ANKER_BESTAND uit --env, anders /var/lib/nachtwacht/audit-ankers.jsonl\n" +
  "  Relatieve paden gelden vanaf de map waarin de opdracht start; backup.sh start hem in /var/lib/nachtwacht,\n" +
  "  de werkmap van de dienst, zodat een relatief DATABASE_PATH of AUDIT_ANKER_BESTAND hetzelfde bestand is.\n" +
  "  --bewaar-dagen  oudere back-ups in --map worden na een geslaagde back-up verwijderd (standaard 30);\n" +
  "                 de N nieuwste eerdere van elke soort blijven altijd staan, hoe oud ook (een klok die voorloopt)\n" +
  "  --geen-melding  niets aan backup-status melden\n" +
  "  Exitcode: 0 gelukt, 64 gebruik, 65 kopie niet in orde, 66 geen database, of geen ankerbestand terwijl de database ankers heeft\n" +
  "  (de kopie van de database blijft staan), 69 er loopt al een back-up in --map (niets gedaan, niets gemeld), 73 map onbruikbaar, 74 andere I/O-fout\n" +
  "  (ook: te weinig vrij in --map: twee keer de database, op PostgreSQL de tabelgegevens), 75 back-up gemaakt maar melding mislukt\n" +
  "  (ook als een andere gebruiker dan die van de dienst de poort bezet houdt: CRON_SECRET wordt dan niet verstuurd),\n" +
  "  78 een parameter in DATABASE_URL die niet aan pg_dump door te geven is (PostgreSQL).";

export interface BackupOptions {
  db: string;
  dir: string;
  anchors: string;
  keepDays: number;
  now: Date;
}

export interface BackupDone {
  name: string;
  path: string;
  size: number;
  anchorsCopied: boolean;
  /** Whether the marker zegelsleutel beside the anchor file was copied (zegelsleutel-<stamp>.txt). */
  sealKeyCopied: boolean;
  pruned: string[];
}

/** A failed step: its exit code and a Dutch message naming the step. */
export class BackupError extends Error {
  constructor(
    readonly exitCode: number,
    message: string,
  ) {
    super(message);
  }
}

export const stampOf = (d: Date) => d.toISOString().replace(/[-:]/g, "").replace(/\.\d{3}Z$/, "Z");
/**
 * One backup at a time per folder: an exclusive flock(2) on the backup folder itself
 * (nothing is left in it), taken without waiting. The kernel releases it when the process
 * ends, however it ends. Returns a release function, "busy" when another process holds
 * it, or null when no lock could be taken (the folder cannot be opened: the backup then
 * fails on it with 73; or no flock in this C library): the backup runs without one.
 */
export function lockBackupDir(dir: string): (() => void) | "busy" | null {
  let flock: ((fd: number, op: number) => number) | null = null;
  try {
    const libc = dlopen("libc.so.6", { flock: { args: [FFIType.i32, FFIType.i32], returns: FFIType.i32 } });
    flock = (fd, op) => libc.symbols.flock(fd, op) as number;
  } catch {
    return null;
  }
  let fd: number;
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    fd = openSync(dir, "r");
  } catch {
    return null;
  }
  const LOCK_EX = 2;
  const LOCK_NB = 4;
  if (flock(fd, LOCK_EX | LOCK_NB) !== 0) {
    closeSync(fd);
    return "busy";
  }
  return () => closeSync(fd);
}

const why = (e: unknown) => (e instanceof Error ? e.message : String(e));

/** What openRegularFile refuses: a symbolic link at the path, or something else than a regular file (a FIFO, a folder, a device). */
export class NotARegularFile extends Error {
  constructor(
    readonly path: string,
    readonly symlink: boolean,
  ) {
    super(
      symlink
        ? `${path} is geen gewoon bestand maar een symbolische koppeling; die volgt backup niet`
        : `${path} is geen gewoon bestand (een FIFO, map of apparaat); dat leest backup niet`,
    );
  }
}

/**
 * Opens a file of the service's folder for reading, once: the backup runs as root in a
 * folder the service's user writes, so a check by path followed by an open by path can
 * be raced (a symlink to /etc/nachtwacht/nachtwacht.env renamed in between is followed).
 * O_NOFOLLOW refuses a symlink at the open itself, O_NONBLOCK makes a FIFO open at once
 * instead of blocking root (and the folder's lock) forever, and fstat of the descriptor
 * says what was opened: anything but a regular file is refused (NotARegularFile). Read
 * from the returned descriptor only (readFileSync(fd), createReadStream with `fd`), never
 * by the path again. Other errors (ENOENT, EACCES) are thrown as they are.
 */
export function openRegularFile(path: string): { fd: number; size: number } {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ELOOP") throw new NotARegularFile(path, true);
    throw e;
  }
  const st = fstatSync(fd);
  if (!st.isFile()) {
    closeSync(fd);
    throw new NotARegularFile(path, false);
  }
  return { fd, size: st.size };
}

/** openRegularFile, or null when nothing is at `path` (ENOENT). */
function openIfPresent(path: string): { fd: number; size: number } | null {
  try {
    return openRegularFile(path);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw e;
  }
}

/** Gzips `from` (a path, or a descriptor it then closes) into a new file `to`. */
async function gzipFile(from: string | number, to: string): Promise<void> {
  const source = typeof from === "number" ? createReadStream("", { fd: from }) : createReadStream(from);
  await pipeline(source, createGzip({ level: 9 }), createWriteStream(to, { mode: 0o600 }));
}

/**
 * What VACUUM INTO copies of `db`: its pages in use, as this connection sees them (the
 * WAL's included), not the file's size, which counts free pages (a retention run's, until
 * db-onderhoud) and not what the WAL adds.
 */
function usedBytes(db: Database): number {
  // Raw SQL: pragmas.
  const pragma = (name: string) => Number((db.query(`PRAGMA ${name}`).values() as [number][])[0]![0]);
  return (pragma("page_count") - pragma("freelist_count")) * pragma("page_size");
}

/**
 * The one rule for room in the backup folder, on both stores: `need` bytes, the store's
 * estimate of what its backup writes there (`basis` says how it was reckoned; SQLite:
 * sqliteBackupNeed, PostgreSQL: src/pg/backup.ts), counted in what an unprivileged user
 * may still write (statfs f_bavail). Checked before the backup writes anything. Root may
 * write past that into the blocks reserved for root; a backup that did would fill the
 * disk for the service and everyone else with data the service's user chose. Else exit
 * 74, naming both figures.
 */
export function checkBackupRoom(dir: string, need: { bytes: number; basis: string }, steps: BackupSteps): void {
  steps.step = `controleren van de vrije ruimte in ${dir}`;
  let free: number;
  try {
    const s = statfsSync(dir);
    free = s.bavail * s.bsize;
  } catch (e) {
    return steps.fail(74, e);
  }
  if (free < need.bytes) {
    steps.fail(
      74,
      new Error(
        `te weinig vrije ruimte: ${free} bytes vrij, ${need.bytes} bytes nodig (${need.basis}). ` +
          "Maak ruimte vrij of geef een map op een ander bestandssysteem (--map); de ruimte die alleen root mag gebruiken wordt niet aangesproken",
      ),
    );
  }
}

/** What a SQLite backup of a database that uses `size` bytes (usedBytes) needs: the uncompressed VACUUM INTO copy and its gzip, at most twice that. */
export const sqliteBackupNeed = (size: number) => ({ bytes: 2 * size, basis: `twee keer de ${size} bytes in gebruik in de database: de ongecomprimeerde kopie en de gzip` });

/** The step a backup is at, named in the BackupError that `fail` throws. */
export class BackupSteps {
  constructor(public step: string) {}
  fail(code: number, e?: unknown): never {
    throw new BackupError(code, `backup mislukt bij: ${this.step}${e === undefined ? "" : `: ${why(e)}`}`);
  }
}

/** The backup folder, made private (0700) if new, and writable: else exit 73. */
export function prepareBackupDir(dir: string, steps: BackupSteps): void {
  steps.step = `aanmaken van de back-upmap ${dir}`;
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    accessSync(dir, constants.W_OK);
  } catch (e) {
    steps.fail(73, e);
  }
}

/** SQLite failures of VACUUM INTO that are the disk's, not the database's. */
const DISK_CODES = /^SQLITE_(FULL|IOERR|CANTOPEN|READONLY)/;

const symlinkRefused = (db: string) => new Error(`database ${db} is een symbolische koppeling; die volgt backup niet`);

/** The backup itself: every step, or a BackupError naming the one that failed. */
export async function makeBackup(o: BackupOptions): Promise<BackupDone> {
  const steps = new BackupSteps(`controleren van de database ${o.db}`);
  const fail = (code: number, e?: unknown): never => steps.fail(code, e);
  // Opening a missing path would create an empty database and back that up. Run as root
  // in a folder the service's user owns: a symlink planted there would have root copy
  // whatever it points at into the backup (openRegularFile here; SQLite's own open below
  // refuses one swapped in since).
  let file: string;
  try {
    // SQLite's NOFOLLOW refuses a symlink anywhere in the path: the folders are resolved
    // here (root's, such as /var/lib/nachtwacht linked to a larger disk), the file is not.
    file = join(realpathSync(dirname(o.db)), basename(o.db));
    closeSync(openRegularFile(file).fd);
  } catch (e) {
    return fail(66, e instanceof NotARegularFile && e.symlink ? symlinkRefused(o.db) : new Error(`database ${o.db} bestaat niet of is niet leesbaar`));
  }
  prepareBackupDir(o.dir, steps);

  const stamp = stampOf(o.now);
  const name = `nachtwacht-${stamp}.db.gz`;
  const tmp = join(o.dir, `.nachtwacht-${stamp}.db.tmp`);
  const clean = () => {
    for (const f of [tmp, `${tmp}.gz`]) rmSync(f, { force: true });
  };
  try {
    steps.step = "online kopie (VACUUM INTO)";
    try {
      // SQLITE_OPEN_NOFOLLOW: a symlink at the path (or above it) is refused, and SQLite
      // opens the file itself with O_NOFOLLOW, so one swapped in since openRegularFile is
      // refused at the open too, not followed.
      const src = new Database(file, sqlite.SQLITE_OPEN_READONLY | sqlite.SQLITE_OPEN_NOFOLLOW);
      try {
        // Raw SQL: pragmas and VACUUM INTO have no Drizzle builder.
        src.run("PRAGMA busy_timeout = 30000");
        checkBackupRoom(o.dir, sqliteBackupNeed(usedBytes(src)), steps);
        steps.step = "online kopie (VACUUM INTO)";
        src.query("VACUUM INTO ?").run(tmp);
      } finally {
        src.close();
      }
    } catch (e) {
      if (e instanceof BackupError) throw e;
      if (driverError(e)?.code === "SQLITE_CANTOPEN_SYMLINK") fail(66, symlinkRefused(o.db));
      // The disk (full, an I/O error, the copy not creatable) is 74; what it read (a corrupt database) 65.
      fail(DISK_CODES.test(String(driverError(e)?.code ?? "")) ? 74 : 65, e);
    }

    steps.step = "integriteitscontrole van de kopie";
    let check: string;
    let anchored: boolean;
    try {
      const copy = new Database(tmp, { readonly: true });
      try {
        // Raw SQL: a pragma.
        check = (copy.query("PRAGMA integrity_check").values() as [string][]).map(([v]) => v).join("; ");
        // Whether this copy needs an anchor file beside it (copyAnchorsAndPrune).
        anchored = copy.query("SELECT 1 FROM audit_anchor_log LIMIT 1").get() !== null;
      } finally {
        copy.close();
      }
    } catch (e) {
      return fail(65, e);
    }
    if (check !== "ok") fail(65, new Error(`integrity_check van de kopie: ${check.slice(0, 500)}`));

    steps.step = "comprimeren";
    const path = join(o.dir, name);
    try {
      await gzipFile(tmp, `${tmp}.gz`);
      renameDurably(`${tmp}.gz`, path);
    } catch (e) {
      fail(74, e);
    }
    const size = statSync(path).size;

    return { name, path, size, ...(await copyAnchorsAndPrune(o, stamp, steps, anchored)) };
  } finally {
    clean();
  }
}

/**
 * After a backup: the anchor file gzipped beside it (the two belong together: a restore
 * without it fails verification), then old backups pruned (toPrune). `anchored`:
 * the backed-up database has rows in audit_anchor_log, so an absent anchor file is a
 * failure (66; the database copy stays, nothing is pruned); without them (nothing
 * anchored yet) the database alone is the backup. And the marker zegelsleutel beside the
 * anchor file (sealKeyMarker), as `zegelsleutel-<stamp>.txt`: the key the copy's rows are
 * sealed with, which a restore after a key change writes back into the marker
 * (docs/operations.md). Read after the database was copied: a rotation in between makes
 * it name the newer key, and the restored rows then read as forged (loud), never the
 * older key's rows since the rotation re-sealed as genuine.
 */
export async function copyAnchorsAndPrune(
  o: { dir: string; anchors: string; keepDays: number; now: Date },
  stamp: string,
  steps: BackupSteps,
  anchored: boolean,
): Promise<{ anchorsCopied: boolean; sealKeyCopied: boolean; pruned: string[] }> {
  let anchorsCopied = false;
  steps.step = `kopiëren van het ankerbestand ${o.anchors}`;
  // As for the database: opened once, no symlink (or anything but a file) followed.
  const anchorFile = openOrRefuse(o.anchors, steps);
  if (anchorFile === null && anchored) {
    steps.fail(
      66,
      new Error(
        `het ankerbestand ${o.anchors} ontbreekt, terwijl de database ankers heeft (audit_anchor_log): een terugzetting zonder kan niet verifiëren. ` +
          "Geef het juiste pad (--ankers of AUDIT_ANKER_BESTAND in het omgevingsbestand); de kopie van de database staat er wel",
      ),
    );
  }
  if (anchorFile !== null) {
    const to = join(o.dir, `audit-ankers-${stamp}.jsonl.gz`);
    try {
      await gzipFile(anchorFile.fd, `${to}.tmp`); // closes the descriptor
      renameDurably(`${to}.tmp`, to);
    } catch (e) {
      rmSync(`${to}.tmp`, { force: true });
      steps.fail(74, e);
    }
    anchorsCopied = true;
  }
  let sealKeyCopied = false;
  const marker = sealKeyMarker({ auditAnkerBestand: o.anchors });
  steps.step = `kopiëren van ${marker}`;
  const markerFile = openOrRefuse(marker, steps);
  if (markerFile !== null) {
    try {
      writeFileDurably(join(o.dir, `zegelsleutel-${stamp}.txt`), readFileSync(markerFile.fd), 0o600);
    } catch (e) {
      steps.fail(74, e);
    } finally {
      closeSync(markerFile.fd);
    }
    sealKeyCopied = true;
  }

  steps.step = `opruimen van back-ups ouder dan ${o.keepDays} dagen`;
  let pruned: string[] = [];
  try {
    const files = readdirSync(o.dir)
      // This backup's own files are never pruned, nor counted among the ones kept.
      .filter((f) => BACKUP_FILE.test(f) && !f.includes(`-${stamp}.`))
      .map((f) => ({ f, mtimeMs: statSync(join(o.dir, f)).mtimeMs }));
    pruned = toPrune(files, o.keepDays, o.now);
    for (const f of pruned) rmSync(join(o.dir, f));
  } catch (e) {
    steps.fail(74, e);
  }
  return { anchorsCopied, sealKeyCopied, pruned };
}

/** openIfPresent for a step of copyAnchorsAndPrune: a symlink or other non-file 66, another error 74. */
function openOrRefuse(path: string, steps: BackupSteps): { fd: number; size: number } | null {
  try {
    return openIfPresent(path);
  } catch (e) {
    return steps.fail(e instanceof NotARegularFile ? 66 : 74, e);
  }
}

/** The files a backup leaves in its folder: database copies (SQLite's or pg_dump's), anchor files and seal key markers. */
const BACKUP_FILE = /^nachtwacht-\d{8}T\d{6}Z\.(db\.gz|pgdump)$|^audit-ankers-\d{8}T\d{6}Z\.jsonl\.gz$|^zegelsleutel-\d{8}T\d{6}Z\.txt$/;

/** A backup file's kind, for pruning each kind on its own (toPrune). */
const kindOf = (f: string) => (f.startsWith("audit-ankers-") ? "ankers" : f.startsWith("zegelsleutel-") ? "zegelsleutel" : "database");

/**
 * Which earlier backups to prune (the one just made is not among `files`): of each kind
 * (database copies, anchor files, seal key markers) the newest `keepDays` by modification time are kept
 * whatever their age, and of the older ones those older than `keepDays` days go. With a
 * backup a day that is what the age alone keeps. Age is measured by the host clock:
 * with it a year ahead (an RTC wrong at boot, a VM restored with a skewed clock, a typo in
 * `date -s`) every earlier backup looks old, and the history needed to restore to a
 * point before a tampering would be deleted, leaving only the copy just made.
 */
export function toPrune(files: { f: string; mtimeMs: number }[], keepDays: number, now: Date): string[] {
  const cutoff = now.getTime() - keepDays * DAY_MS;
  const pruned: string[] = [];
  for (const k of new Set(files.map((x) => kindOf(x.f)))) {
    const kind = files.filter((x) => kindOf(x.f) === k).sort((a, b) => b.mtimeMs - a.mtimeMs);
    for (const x of kind.slice(keepDays)) if (x.mtimeMs < cutoff) pruned.push(x.f);
  }
  return pruned;
}

/**
 * How `report` tries again while the service answers 503 (its database busy, or the
 * service stopping for a restart: both say Retry-After): at most `tries` calls, pausing
 * as Retry-After says (else `pauseMs`), no more than `budgetMs` of pauses in all. A report
 * not stored is a backup backup-controle calls missing. Other answers are final (backup-status never
 * answers 409 for another report under way: it is not exclusive); an unreachable service
 * is not retried (the exit 75 says so at once).
 */
export const REPORT_RETRY = { tries: 5, budgetMs: 120_000, pauseMs: 10_000 };

/** Retry-After as the service sends it (seconds), in ms; null when absent or not a number of seconds. */
function retryAfterMs(header: string | null): number | null {
  return header !== null && /^\d+$/.test(header.trim()) ? Number(header.trim()) * 1000 : null;
}

/** The port is held by another user than the service's: nothing was sent (listenerRefusal). */
export class ListenerRefused extends Error {}

/**
 * POSTs a result to backup-status on the local service, tried again on 503 (REPORT_RETRY);
 * returns its last answer. Before each call the port's listeners are checked against the
 * owner of `anchors`, the service's anchor file (listenerRefusal): a port taken by another
 * user while the service restarted throws ListenerRefused, and the secret is not sent.
 */
export async function report(
  env: Record<string, string>,
  anchors: string,
  body: object,
  out: (s: string) => void,
  sleep: (ms: number) => Promise<unknown> = Bun.sleep,
): Promise<{ status: number; text: string }> {
  const secret = env.CRON_SECRET;
  if (!secret) throw new Error("CRON_SECRET staat niet in het omgevingsbestand");
  // As ops/env-file.sh maps it for the call script: a wildcard is called on loopback.
  const host = !env.HOST || env.HOST === "0.0.0.0" ? "127.0.0.1" : env.HOST === "::" ? "::1" : env.HOST;
  const port = env.PORT || "3000";
  const url = `http://${host.includes(":") ? `[${host}]` : host}:${port}/api/cron/backup-status`;
  let paused = 0;
  for (let attempt = 1; ; attempt++) {
    // Each time: a 503 is often a restart, the window in which the port can be taken.
    const refusal = listenerRefusal(Number(port), anchors);
    if (refusal !== null) throw new ListenerRefused(refusal);
    const r = await fetch(url, {
      method: "POST",
      headers: { authorization: `Bearer ${secret}`, "content-type": "application/json" },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(30_000),
    });
    const answer = { status: r.status, text: await r.text() };
    if (answer.status !== 503 || attempt >= REPORT_RETRY.tries) return answer;
    const pause = retryAfterMs(r.headers.get("retry-after")) ?? REPORT_RETRY.pauseMs;
    if (paused + pause > REPORT_RETRY.budgetMs) return answer;
    out(`backup-status: HTTP 503 ${answer.text}; opnieuw over ${Math.round(pause / 1000)} s (poging ${attempt + 1} van ${REPORT_RETRY.tries})`);
    await sleep(pause);
    paused += pause;
  }
}

export async function runBackup(argv: string[], processEnv: Record<string, string | undefined>, out: (s: string) => void, err: (s: string) => void): Promise<number> {
  // Whatever the caller's umask: the copies and pg_dump's file are the whole database.
  const before = process.umask(0o077);
  // Standard output that fails (a full disk, the logger of backup.sh gone) does not stop
  // the backup or its report to backup-status: the rest of the output is skipped, and
  // the exit is 74 (an I/O error) unless the backup itself failed.
  let lost: StdoutFailed | null = null;
  const say = (s: string) => {
    if (lost !== null) return;
    try {
      out(s);
    } catch (e) {
      if (!(e instanceof StdoutFailed)) throw e;
      lost = e;
    }
  };
  try {
    const code = await backupCommand(argv, processEnv, say, err);
    if (lost === null) return code;
    err(`nachtwacht backup: ${(lost as StdoutFailed).message}`);
    return code || 74;
  } finally {
    process.umask(before);
  }
}

async function backupCommand(argv: string[], processEnv: Record<string, string | undefined>, out: (s: string) => void, err: (s: string) => void): Promise<number> {
  let values;
  try {
    values = parseOptions("nachtwacht backup", argv, {
      env: { type: "string" },
      db: { type: "string" },
      "database-url": { type: "string" },
      map: { type: "string" },
      ankers: { type: "string" },
      "bewaar-dagen": { type: "string" },
      "geen-melding": { type: "boolean" },
      help: { type: "boolean", short: "h" },
    });
  } catch (e) {
    err(`nachtwacht backup: ${why(e)}\n${USAGE}`);
    return 64;
  }
  if (values.help) {
    out(USAGE);
    return 0;
  }
  const keepText = values["bewaar-dagen"] ?? "30";
  if (!/^[1-9][0-9]{0,4}$/.test(keepText)) {
    err(`nachtwacht backup: --bewaar-dagen moet een positief geheel getal zijn\n${USAGE}`);
    return 64;
  }
  const envPath = values.env ?? "/etc/nachtwacht/nachtwacht.env";
  const reporting = !values["geen-melding"];
  let env: Record<string, string> = {};
  if (reporting || values.env !== undefined) {
    try {
      env = parseEnvFile(readFileSync(envPath, "utf8"));
    } catch (e) {
      err(`nachtwacht backup: omgevingsbestand ${envPath} niet leesbaar (${(e as NodeJS.ErrnoException).code ?? why(e)}); draai als root, of geef --geen-melding`);
      return 66;
    }
  }
  const options: BackupOptions = {
    db: values.db ?? env.DATABASE_PATH ?? processEnv.DATABASE_PATH ?? "/var/lib/nachtwacht/nachtwacht.db",
    dir: values.map ?? "/var/backups/nachtwacht",
    anchors: values.ankers ?? env.AUDIT_ANKER_BESTAND ?? "/var/lib/nachtwacht/audit-ankers.jsonl",
    keepDays: Number(keepText),
    now: new Date(),
  };

  // PostgreSQL: --database-url, or DATABASE_URL (env file, else environment) when no --db is given.
  let url: string | null = null;
  const pgEnvUrl = env.DATABASE_URL ?? processEnv.DATABASE_URL;
  if (values["database-url"] !== undefined || (values.db === undefined && pgEnvUrl !== undefined)) {
    const given = await databaseUrl(values["database-url"], { DATABASE_URL: pgEnvUrl }, () => Bun.stdin.text());
    if ("error" in given) {
      err(`nachtwacht backup: ${given.error}\n${USAGE}`);
      return 64;
    }
    url = given.url;
  }

  // A second backup into the same folder (cron's and one by hand or install.sh's) is
  // refused before it writes anything: the two would share file names to the second.
  const unlock = lockBackupDir(options.dir);
  if (unlock === "busy") {
    err(`nachtwacht backup: er loopt al een back-up in ${options.dir}; deze is niet gestart (niets gemeld aan backup-status). Wacht tot die klaar is en probeer het dan opnieuw.`);
    return 69;
  }
  try {
    // Under the lock no other backup writes here: what an earlier one that was killed left
    // half-made goes now (each is a whole copy of the database, uncompressed: it would fill
    // the disk and keep audit data past every retention, never pruned).
    if (unlock !== null) removeLeftovers(options.dir, out, err);
    return await backupAndReport(options, url, env, reporting, out, err);
  } finally {
    unlock?.();
  }
}

/** The files a backup writes before it renames them into place (makeBackup, makeBackupPg, copyAnchorsAndPrune). */
const LEFTOVER = /^\.nachtwacht-\d{8}T\d{6}Z\.(db\.tmp(\.gz)?|pgdump\.tmp)$|^audit-ankers-\d{8}T\d{6}Z\.jsonl\.gz\.tmp$|^\.zegelsleutel-\d{8}T\d{6}Z\.txt\.\d+\.[0-9a-f]{8}\.tmp$/;

/** Removes what a killed backup left in `dir` (only while holding its lock); a file it cannot remove is said, not fatal. */
export function removeLeftovers(dir: string, out: (s: string) => void, err: (s: string) => void): void {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return; // no folder yet: makeBackup creates it, or says why it cannot
  }
  for (const f of names.filter((n) => LEFTOVER.test(n))) {
    try {
      rmSync(join(dir, f));
      out(`overblijfsel van een afgebroken back-up verwijderd: ${f}`);
    } catch (e) {
      err(`nachtwacht backup: overblijfsel ${join(dir, f)} niet te verwijderen (${why(e)})`);
    }
  }
}

async function backupAndReport(options: BackupOptions, url: string | null, env: Record<string, string>, reporting: boolean, out: (s: string) => void, err: (s: string) => void): Promise<number> {
  let code = 0;
  let body: object;
  try {
    const done = url !== null ? await (await import("../pg/backup.ts")).makeBackupPg({ ...options, url }) : await makeBackup(options);
    out(`backup ok: ${done.path} (${done.size} bytes)${done.anchorsCopied ? "; ankerbestand ernaast" : ""}${done.sealKeyCopied ? "; zegelsleutel ernaast" : ""}${done.pruned.length ? `; ${done.pruned.length} oude verwijderd` : ""}`);
    body = { exitCode: 0, bestandsnaam: basename(done.path), grootte: done.size };
  } catch (e) {
    const be = e instanceof BackupError ? e : new BackupError(74, `backup mislukt: ${why(e)}`);
    code = be.exitCode;
    err(be.message);
    body = { exitCode: code, foutmelding: be.message.slice(0, 4000) };
  }
  if (!reporting) return code;
  try {
    const r = await report(env, options.anchors, body, out);
    out(`backup-status: HTTP ${r.status} ${r.text}`);
    if (r.status !== 200) return code || 75;
  } catch (e) {
    err(e instanceof ListenerRefused ? `backup-status niet gemeld: ${e.message}` : `backup-status niet bereikt: ${why(e)}`);
    return code || 75;
  }
  return code;
}
