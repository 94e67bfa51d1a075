// `nachtwacht backup` for an installation on PostgreSQL: first the free space in the
// backup folder, held against the tables' data on the server (pgBackupNeed, checkBackupRoom: the
// SQLite backup's rule), then pg_dump in its custom format (compressed, consistent: one
// snapshot), checked by pg_restore --list (the archive reads back and holds every
// table's data), renamed into the backup folder; the anchor file beside it and pruning
// as for SQLite (src/cli/backup.ts). The connection goes to psql and pg_dump through
// their environment (PGHOST, PGPASSWORD …), never their command line, where ps would
// show a password.
import { existsSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { BackupError, BackupSteps, checkBackupRoom, copyAnchorsAndPrune, prepareBackupDir, stampOf, type BackupDone } from "../cli/backup.ts";
import { renameDurably } from "../durable-file.ts";
import { COPIED_TABLES, tableShape } from "./migrate-to.ts";

export interface PgBackupOptions {
  url: string;
  dir: string;
  anchors: string;
  keepDays: number;
  now: Date;
}

/** libpq's environment for a URL: what pg_dump and pg_restore connect with. */
export function libpqEnv(url: string): Record<string, string> {
  const u = new URL(url);
  const env: Record<string, string> = {};
  if (u.hostname) env.PGHOST = decodeURIComponent(u.hostname.replace(/^\[|\]$/g, ""));
  if (u.port) env.PGPORT = u.port;
  if (u.username) env.PGUSER = decodeURIComponent(u.username);
  if (u.password) env.PGPASSWORD = decodeURIComponent(u.password);
  const db = decodeURIComponent(u.pathname.replace(/^\//, ""));
  if (db) env.PGDATABASE = db;
  for (const [k, v] of u.searchParams) {
    const name = Object.hasOwn(LIBPQ_ENV, k) ? LIBPQ_ENV[k] : undefined;
    // Not dropped in silence (a backup over another connection than the service's), nor
    // guessed: sslpassword, e.g., has no environment variable, and is not PGPASSWORD.
    if (name === undefined) throw new BackupError(78, `DATABASE_URL: de parameter ${JSON.stringify(k.slice(0, 40))} kan niet aan pg_dump worden doorgegeven (alleen via zijn omgeving: ${Object.keys(LIBPQ_ENV).join(", ")}).`);
    env[name] = v;
  }
  return env;
}

/** The URL parameters libpq also reads from its environment, and those variables (libpq's "Environment Variables"). */
const LIBPQ_ENV: Record<string, string> = {
  host: "PGHOST",
  hostaddr: "PGHOSTADDR",
  port: "PGPORT",
  dbname: "PGDATABASE",
  user: "PGUSER",
  password: "PGPASSWORD",
  passfile: "PGPASSFILE",
  channel_binding: "PGCHANNELBINDING",
  options: "PGOPTIONS",
  application_name: "PGAPPNAME",
  sslmode: "PGSSLMODE",
  sslcert: "PGSSLCERT",
  sslkey: "PGSSLKEY",
  sslrootcert: "PGSSLROOTCERT",
  sslcrl: "PGSSLCRL",
  sslcrldir: "PGSSLCRLDIR",
  sslsni: "PGSSLSNI",
  requirepeer: "PGREQUIREPEER",
  ssl_min_protocol_version: "PGSSLMINPROTOCOLVERSION",
  ssl_max_protocol_version: "PGSSLMAXPROTOCOLVERSION",
  gssencmode: "PGGSSENCMODE",
  krbsrvname: "PGKRBSRVNAME",
  gsslib: "PGGSSLIB",
  connect_timeout: "PGCONNECT_TIMEOUT",
  client_encoding: "PGCLIENTENCODING",
  target_session_attrs: "PGTARGETSESSIONATTRS",
  load_balance_hosts: "PGLOADBALANCEHOSTS",
  service: "PGSERVICE",
  require_auth: "PGREQUIREAUTH",
  sslnegotiation: "PGSSLNEGOTIATION",
  sslcertmode: "PGSSLCERTMODE",
  sslcompression: "PGSSLCOMPRESSION",
  requiressl: "PGREQUIRESSL",
  gssdelegation: "PGGSSDELEGATION",
};

/**
 * Whether the dump's data of `public.table` (nachtwacht's schema; a table of the same name
 * in another schema is not it) holds a row: pg_restore's plain output of that table
 * read only up to the line after its `COPY … FROM stdin;` (a row, or `\.` for none), then
 * pg_restore stopped. The anchor log grows by a line per tenant a night: the whole of it
 * is never needed here. Throws with pg_restore's message when it fails before that line.
 */
export async function dumpHasRows(dumpPath: string, table: string): Promise<boolean> {
  const p = Bun.spawn(["pg_restore", "--data-only", "--schema=public", `--table=${table}`, "--file=-", dumpPath], { env: { PATH: process.env.PATH ?? "/usr/bin:/bin" }, stdout: "pipe", stderr: "pipe", stdin: "ignore" });
  const decoder = new TextDecoder();
  let buffered = "";
  let answer: boolean | null = null;
  const reader = p.stdout.getReader();
  const read = async () => {
    try {
      return await reader.read();
    } catch (e) {
      p.kill();
      throw e;
    }
  };
  for (let r = await read(); !r.done; r = await read()) {
    buffered += decoder.decode(r.value, { stream: true });
    const header = buffered.search(/^COPY .* FROM stdin;\n/m);
    if (header < 0) {
      // Keep only the line not yet complete: it may be the COPY line.
      buffered = buffered.slice(buffered.lastIndexOf("\n") + 1);
      continue;
    }
    const first = buffered.indexOf("\n", header) + 1;
    const end = buffered.indexOf("\n", first);
    if (end < 0) continue;
    answer = buffered.slice(first, end) !== "\\.";
    break;
  }
  if (answer !== null) {
    void reader.cancel().catch(() => {});
    p.kill();
    await p.exited;
    return answer;
  }
  const [code, err] = await Promise.all([p.exited, new Response(p.stderr).text()]);
  if (code !== 0) throw new Error(err.trim().slice(0, 1000) || `pg_restore exit ${code}`);
  // No COPY block: the table holds no data in the dump.
  return false;
}

async function run(cmd: string[], env: Record<string, string>): Promise<{ code: number; out: string; err: string }> {
  const p = Bun.spawn(cmd, { env: { PATH: process.env.PATH ?? "/usr/bin:/bin", ...env }, stdout: "pipe", stderr: "pipe", stdin: "ignore" });
  const [code, out, err] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
  return { code, out, err };
}

/**
 * The exit code of a failed pg_dump or psql, from what it said: no database reached is
 * 66, as a missing SQLite file (libpq 14+ says "connection to server … failed" where
 * older ones said "could not connect"); its file not written (a full disk) an I/O error,
 * 74, as on SQLite; anything else 65.
 */
function pgFailure(err: string): number {
  if (["could not connect", "connection to server", "does not exist"].some((s) => err.includes(s))) return 66;
  if (["could not write to output file", "could not close output file", "No space left on device"].some((s) => err.includes(s))) return 74;
  return 65;
}

/**
 * What pg_dump's archive holds at the most: every table's data as it lies on the server
 * (pg_table_size: heap with its TOAST, without indexes), summed over the tables outside
 * the system schemas. The catalogs and indexes that pg_database_size counts are not in a
 * dump (an empty nachtwacht database is some 8 MB on the server, its dump 36 KB).
 */
export const DUMPED_DATA_SQL =
  "SELECT coalesce(sum(pg_table_size(c.oid)), 0) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace " +
  "WHERE c.relkind IN ('r', 'm', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')";

/**
 * What a backup of the database needs in the backup folder, for checkBackupRoom (the
 * rule SQLite's backup keeps): the tables' data on the server (DUMPED_DATA_SQL), asked
 * with psql (beside pg_dump in the client package) over the same connection. The dump's
 * own size is not known before it is written; this is a bound above it: a row on the
 * server carries a header of its own and the room of deleted rows until they are
 * vacuumed, and the dump is compressed (--compress=9), where the pages are not. One copy,
 * not SQLite's two: pg_dump writes the compressed archive directly, with no uncompressed
 * copy before it. A bound that is high refuses a backup that might have fit, saying both
 * figures; one that is low would let pg_dump fill the disk halfway through.
 */
async function pgBackupNeed(env: Record<string, string>, fail: (code: number, e?: unknown) => never): Promise<{ bytes: number; basis: string }> {
  // Raw SQL: a catalog query psql runs; --no-psqlrc: no ~/.psqlrc of root's in between.
  const r = await run(["psql", "--no-psqlrc", "--no-align", "--tuples-only", "--quiet", `--command=${DUMPED_DATA_SQL}`], env);
  if (r.code !== 0) fail(pgFailure(r.err), new Error(r.err.trim().slice(0, 1000)));
  const size = Number(r.out.trim());
  if (!Number.isSafeInteger(size) || size < 0) fail(65, new Error(`de grootte van de tabellen gaf ${JSON.stringify(r.out.trim().slice(0, 100))}`));
  return { bytes: size, basis: `de ${size} bytes aan tabelgegevens op de server (pg_table_size, zonder indexen), een bovengrens voor de gecomprimeerde dump die pg_dump ervan schrijft` };
}

export async function makeBackupPg(o: PgBackupOptions): Promise<BackupDone> {
  const steps = new BackupSteps("");
  const fail = (code: number, e?: unknown): never => steps.fail(code, e);
  prepareBackupDir(o.dir, steps);
  const stamp = stampOf(o.now);
  const name = `nachtwacht-${stamp}.pgdump`;
  const tmp = join(o.dir, `.nachtwacht-${stamp}.pgdump.tmp`);
  const env = libpqEnv(o.url);
  try {
    // Before pg_dump writes anything, as the SQLite backup checks before VACUUM INTO.
    steps.step = "grootte van de database (psql, vóór pg_dump)";
    checkBackupRoom(o.dir, await pgBackupNeed(env, fail), steps);

    steps.step = "pg_dump";
    const dump = await run(["pg_dump", "--format=custom", "--compress=9", "--no-owner", "--no-privileges", `--file=${tmp}`], env);
    if (dump.code !== 0) fail(pgFailure(dump.err), new Error(dump.err.trim().slice(0, 1000)));

    steps.step = "controle van de dump (pg_restore --list)";
    const list = await run(["pg_restore", "--list", tmp], {});
    if (list.code !== 0) fail(65, new Error(list.err.trim().slice(0, 1000)));
    // Every table nachtwacht keeps must have its data in the archive.
    const missing = COPIED_TABLES.map((t) => tableShape(t).name).filter((t) => !new RegExp(`TABLE DATA public ${t} `).test(list.out));
    if (missing.length > 0) fail(65, new Error(`de dump mist de gegevens van: ${missing.join(", ")}`));

    // Whether the dump holds anchors, so the anchor file must go beside it
    // (copyAnchorsAndPrune): read from the dump itself, as on SQLite from its copy.
    steps.step = "controle op ankers in de dump (pg_restore)";
    let anchored = false;
    try {
      anchored = await dumpHasRows(tmp, "audit_anchor_log");
    } catch (e) {
      fail(65, e);
    }

    steps.step = "verplaatsen in de back-upmap";
    const path = join(o.dir, name);
    try {
      renameDurably(tmp, path);
    } catch (e) {
      fail(74, e);
    }
    const rest = await copyAnchorsAndPrune(o, stamp, steps, anchored);
    return { name, path, size: statSync(path).size, ...rest };
  } finally {
    if (existsSync(tmp)) rmSync(tmp, { force: true });
  }
}
