// Moving an installation from its SQLite file to PostgreSQL (`nachtwacht migrate-to`):
// check the source, copy every table in one PostgreSQL transaction (COPY FROM STDIN),
// then prove the copy before saying done: every row equal, in key order, and every
// tenant's chain verifying on PostgreSQL against the anchor file's signed checkpoints.
import { Database } from "bun:sqlite";
import { orphanChains } from "../audit/chain.ts";
import type { SQL } from "bun";
import { is } from "drizzle-orm";
import { getTableConfig, PgTable } from "drizzle-orm/pg-core";
import * as pgSchema from "../../db/schema-pg.ts";
import { compareWithFile } from "../audit/anchor-check.ts";
import type { Verifier } from "../audit/note.ts";
import { verifyDatabase } from "../audit/offline.ts";
import { copyRows, copyUnescape, verifyTenantsPg } from "./chain.ts";
import { MOVE_BEGUN_KEY, openPgStore, pgPool, PROVED_KEY } from "./store.ts";
import { redactUrl } from "./url.ts";
import { schemaVersionProblem } from "../db.ts";

/**
 * The tables copied, parents before children (foreign keys). Not copied: job_leases
 * (who runs a job now; nothing runs during the move), alarm_mails (which alarm conditions
 * were mailed: after the move a condition that lasts is mailed once more, a reminder early
 * at most) and drizzle's own migration table (the target has its own).
 */
export const COPIED_TABLES: readonly PgTable[] = [
  pgSchema.tenants,
  pgSchema.administrators,
  pgSchema.auditEntries,
  pgSchema.auditRetentionAnchors,
  pgSchema.auditHeadAnchors,
  pgSchema.auditAnchorLog,
  pgSchema.loginAttempts,
  pgSchema.backupStatuses,
  pgSchema.jobRuns,
  pgSchema.weeklyReportDeliveries,
  pgSchema.serviceMeta,
  pgSchema.auditVerificationState,
];

interface TableShape {
  name: string;
  columns: string[];
  /** Per column: stored as boolean in PostgreSQL (0/1 in SQLite). */
  booleans: boolean[];
  /** Per column: an integer type (a key printed as a number). */
  integers: boolean[];
  /** Per column: text in PostgreSQL (which cannot hold a NUL). */
  texts: boolean[];
  key: string[];
  /** Columns whose sequence must continue after the copied ids. */
  sequences: string[];
}

export function tableShape(table: PgTable): TableShape {
  const c = getTableConfig(table);
  const key = c.primaryKeys.length > 0 ? c.primaryKeys[0]!.columns.map((k) => k.name) : c.columns.filter((k) => k.primary).map((k) => k.name);
  return {
    name: c.name,
    columns: c.columns.map((k) => k.name),
    booleans: c.columns.map((k) => k.columnType === "PgBoolean"),
    integers: c.columns.map((k) => ["PgInteger", "PgSerial", "PgBigInt53"].includes(k.columnType)),
    texts: c.columns.map((k) => k.getSQLType().startsWith("text")),
    key,
    sequences: c.columns.filter((k) => k.columnType === "PgSerial" || (k as { generatedIdentity?: unknown }).generatedIdentity !== undefined).map((k) => k.name),
  };
}

const quote = (name: string) => `"${name.replaceAll('"', '""')}"`;

/** What COPY's text format escapes, as PostgreSQL's COPY TO writes it (copyUnescape in src/pg/chain.ts reads it back). */
const ESCAPED: Record<string, string> = { "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v" };
const TO_ESCAPE = /[\\\b\f\n\r\t\v]/g;

/**
 * One value in COPY's text format: \N for null; a backslash, backspace, form feed,
 * newline, carriage return, tab and vertical tab escaped exactly as PostgreSQL's own
 * COPY TO escapes them, so compareTable compares like with like.
 */
export function copyText(v: unknown, boolean: boolean): string {
  if (v === null || v === undefined) return "\\N";
  if (boolean) return v ? "t" : "f";
  const s = typeof v === "string" ? v : String(v);
  return s.replace(TO_ESCAPE, (ch) => ESCAPED[ch]!);
}

/**
 * The first row (in key order) of a table of the source with a NUL character (U+0000) in
 * a text column, and that column; null when there is none. SQLite keeps a NUL that a
 * writer put there (before the library's appenders refused it as the write API does:
 * isStorableText); PostgreSQL's text cannot hold one, and COPY would stop at it with an
 * encoding error naming no row. A lone surrogate the source cannot hold: SQLite's text
 * is UTF-8, and the driver wrote U+FFFD for it. One scan of the table.
 */
export function rowWithNul(source: Database, shape: TableShape): { sleutel: string; kolom: string } | null {
  const texts = shape.columns.filter((_, i) => shape.texts[i]);
  if (texts.length === 0) return null;
  const has = (c: string) => `instr(${quote(c)}, char(0)) > 0`;
  // Raw SQL: SQLite's instr finds a NUL inside a text (its length() stops there).
  const row = source
    .query(
      `SELECT ${shape.key.map(quote).join(", ")}, CASE ${texts.map((c, i) => `WHEN ${has(c)} THEN ${i}`).join(" ")} END AS "kolom#"
       FROM ${quote(shape.name)} WHERE ${texts.map(has).join(" OR ")} ORDER BY ${shape.key.map(quote).join(", ")} LIMIT 1`,
    )
    .get() as Record<string, unknown> | null;
  if (row === null) return null;
  // The key's values as JSON: a text key may hold the NUL itself.
  return { sleutel: shape.key.map((k) => `${k} ${JSON.stringify(row[k])}`).join(", "), kolom: texts[row["kolom#"] as number]! };
}

/** SQLite's AUTOINCREMENT counters (sqlite_sequence): the highest id each such table ever gave out, by table; empty without any. */
function autoincrementCounters(source: Database): Map<string, number> {
  // Raw SQL: SQLite's own table.
  if (source.query("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'sqlite_sequence'").get() === null) return new Map();
  const rows = source.query("SELECT name, seq FROM sqlite_sequence").all() as { name: string; seq: number }[];
  return new Map(rows.filter((r) => Number.isSafeInteger(r.seq) && r.seq > 0).map((r) => [r.name, r.seq]));
}

async function copyTable(tx: SQL, source: Database, shape: TableShape): Promise<number> {
  const cols = shape.columns.map(quote).join(", ");
  const writer = tx.unsafe(`COPY ${quote(shape.name)} (${cols}) FROM STDIN`).writable().getWriter();
  let rows = 0;
  let chunk = "";
  try {
    // Raw SQL: a streamed scan of a whole table, column names from the schema.
    for (const values of source.query(`SELECT ${cols} FROM ${quote(shape.name)} ORDER BY ${shape.key.map(quote).join(", ")}`).iterate() as IterableIterator<Record<string, unknown>>) {
      let line = "";
      for (let i = 0; i < shape.columns.length; i++) line += (i === 0 ? "" : "\t") + copyText(values[shape.columns[i]!], shape.booleans[i]!);
      chunk += line + "\n";
      rows++;
      if (chunk.length >= 1 << 20) {
        await writer.write(chunk);
        chunk = "";
      }
    }
    if (chunk !== "") await writer.write(chunk);
    await writer.close();
  } catch (e) {
    await writer.abort(e).catch(() => {});
    throw e;
  }
  return rows;
}

export interface TableDifference {
  tabel: string;
  /** The first row that differs, as its key values; null when one side ran out. */
  sleutel: unknown[] | null;
  toelichting: string;
}

/**
 * Compares a table row by row in key order, both sides in COPY's text form (SQLite's
 * values encoded by copyText, PostgreSQL's as its COPY TO STDOUT writes them), streamed:
 * memory does not grow with the table. The first difference, or null when equal; the count too.
 */
export async function compareTable(source: Database, target: SQL, shape: TableShape): Promise<{ rows: number; verschil: TableDifference | null }> {
  const cols = shape.columns.map(quote).join(", ");
  const query = `SELECT ${cols} FROM ${quote(shape.name)} ORDER BY ${shape.key.map(quote).join(", ")}`;
  // SQLite orders text bytewise; PostgreSQL by the database's collation unless told
  // otherwise ("C": by bytes, as SQLite), and a linguistic one sorts "B" after "ab".
  // The move's own rows (MOVE_BEGUN_KEY, written with the copy) are no rows of the source.
  const moveRows = shape.name === "service_meta" ? ` WHERE "key" NOT IN ('${MOVE_BEGUN_KEY}', '${PROVED_KEY}')` : "";
  const pgQuery = `SELECT ${cols} FROM ${quote(shape.name)}${moveRows} ORDER BY ${shape.key.map((k) => (shape.integers[shape.columns.indexOf(k)] ? quote(k) : `${quote(k)} COLLATE "C"`)).join(", ")}`;
  const keyAt = shape.key.map((k) => shape.columns.indexOf(k));
  const left = (source.query(query).iterate() as IterableIterator<Record<string, unknown>>)[Symbol.iterator]();
  const keyOfSource = (row: Record<string, unknown>) => keyAt.map((i) => row[shape.columns[i]!]);
  let rows = 0;
  for await (const chunk of copyRows(target, pgQuery)) {
    for (const right of chunk) {
      const l = left.next();
      if (l.done) {
        const key = keyAt.map((i) => (shape.integers[i] ? Number(right[i]) : copyUnescape(right[i]!)));
        return { rows, verschil: { tabel: shape.name, sleutel: key, toelichting: "rij staat alleen in PostgreSQL" } };
      }
      if (shape.columns.some((c, i) => copyText(l.value[c], shape.booleans[i]!) !== right[i])) {
        return { rows, verschil: { tabel: shape.name, sleutel: keyOfSource(l.value), toelichting: "rij verschilt" } };
      }
      rows++;
    }
  }
  const rest = left.next();
  if (!rest.done) return { rows, verschil: { tabel: shape.name, sleutel: keyOfSource(rest.value), toelichting: "rij ontbreekt in PostgreSQL" } };
  return { rows, verschil: null };
}

export { MOVE_BEGUN_KEY, PROVED_KEY } from "./store.ts";

export interface MigrateOptions {
  dbPath: string;
  anchorPath: string;
  url: string;
  verifiers: Verifier[];
  log: (line: string) => void;
  /** Worker threads verifying ranges of tenants at the same time on PostgreSQL. */
  parallel?: number;
}

export type MigrateResult =
  | { uitkomst: "klaar"; tabellen: { tabel: string; rijen: number }[]; ketens: number; entries: number }
  | { uitkomst: "bron-niet-in-orde"; toelichting: string }
  /** The source is of another version than this binary: not damage, a version to use (exit 2). */
  | { uitkomst: "bron-andere-versie"; toelichting: string }
  | { uitkomst: "doel-niet-leeg"; toelichting: string }
  | { uitkomst: "doel-heeft-andere-tabellen"; toelichting: string }
  | { uitkomst: "bron-gewijzigd"; toelichting: string }
  | { uitkomst: "kopie-wijkt-af"; toelichting: string };

/**
 * The tables nachtwacht keeps in PostgreSQL: every table of db/schema-pg.ts, and drizzle's
 * migrations table (its own schema "drizzle" by default; named in case it is in public).
 */
export const OWN_TABLES: ReadonlySet<string> = new Set([
  ...(Object.values(pgSchema) as unknown[])
    .filter((v): v is PgTable => is(v, PgTable))
    .map((t) => getTableConfig(t).name),
  "__drizzle_migrations",
]);

/**
 * The tables (and views) of `url` that are not nachtwacht's: another application's
 * database. Every schema counts but the system's and drizzle's own (its migrations
 * table); outside `public` a table is named with its schema. Read before anything is
 * migrated there.
 */
export async function foreignTables(url: string): Promise<string[]> {
  const sql = pgPool(url, 1);
  try {
    // An extension's own relations (pg_stat_statements' views, PostGIS's spatial_ref_sys)
    // are no application's data: an empty database of a cluster that installs them in
    // every new database is still empty.
    const rows = (await sql`SELECT n.nspname AS schema, c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'drizzle') AND n.nspname NOT LIKE 'pg\_%'
        AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
        AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')
      ORDER BY n.nspname, c.relname`) as { schema: string; name: string }[];
    return rows.filter((r) => r.schema !== "public" || !OWN_TABLES.has(r.name)).map((r) => (r.schema === "public" ? r.name : `${r.schema}.${r.name}`));
  } finally {
    await sql.close();
  }
}

/** Migration 0002's statement trigger that checks new audit rows' tenants. */
const TENANT_CHECK = "audit_entries_have_tenant";

/** schemaVersionProblem of the source file; null when it cannot be opened (the check after names that). */
function sourceVersionProblem(dbPath: string): string | null {
  let db: Database | undefined;
  try {
    db = new Database(dbPath, { readonly: true, strict: true });
    db.run("PRAGMA busy_timeout = 5000");
    return schemaVersionProblem(db);
  } catch {
    return null;
  } finally {
    db?.close();
  }
}

export async function migrateToPostgres(o: MigrateOptions): Promise<MigrateResult> {
  // 1. The source must verify: a copy of a log that does not would carry the break over
  //    and lose the evidence of where it happened.
  o.log(`bron controleren: ${o.dbPath} met ${o.anchorPath}`);
  // First the version: the copy and the check read this version's columns, and a file
  // another version left is neither damaged nor tampered with (named, before it is read).
  const version = sourceVersionProblem(o.dbPath);
  if (version !== null) return { uitkomst: "bron-andere-versie", toelichting: `${o.dbPath}: ${version}; niets gekopieerd` };
  const verdict = await verifyDatabase(o.dbPath, o.anchorPath, o.verifiers);
  const broken = verdict.tenants.filter((t) => !t.intact);
  if (verdict.probleem || broken.length > 0) {
    const why = verdict.probleem ? `${verdict.probleem.reden}: ${verdict.probleem.toelichting}` : `tenant ${broken[0]!.tenantId}: ${broken[0]!.fout?.reden} bij seq ${broken[0]!.fout?.seq}`;
    return { uitkomst: "bron-niet-in-orde", toelichting: `de bron verifieert niet (${why}); eerst uitzoeken, niets gekopieerd` };
  }
  const checkpoints = (await compareWithFile(o.dbPath, o.anchorPath, o.verifiers)).checkpoints;

  const source = new Database(o.dbPath, { readonly: true, strict: true });
  source.run("PRAGMA busy_timeout = 5000");
  // One snapshot of the source from here (a read transaction, its snapshot taken at its
  // first read: the data_version below), held through the copy and its proof: what is
  // checked is what is copied. A writer still at work does NOT show as a difference (the
  // proof compares the copy with this snapshot, not with the file as it is now): SQLite's
  // data_version, read again after the snapshot ends, differs if another connection
  // committed in between, and then the copy is not proved.
  source.run("BEGIN");
  const dataVersion = () => (source.query("PRAGMA data_version").get() as { data_version: number }).data_version;
  const versionAtSnapshot = dataVersion();
  // Audit entries of a tenant that is not there: SQLite checks its foreign keys only on
  // connections that ask for it, and PostgreSQL would refuse the rows mid-copy
  // (migration 0002). Named before anything is copied. The other tables' keys PostgreSQL
  // checks itself.
  const orphan = orphanChains(source)[0];
  if (orphan !== undefined) {
    source.close();
    return { uitkomst: "bron-niet-in-orde", toelichting: `tenant ${orphan} heeft audit-entries maar staat niet in tenants; eerst uitzoeken, niets gekopieerd` };
  }
  // Text PostgreSQL cannot hold (a NUL): named with its row and column before anything
  // is created or copied, where COPY would stop at it with a bare encoding error. An
  // audit entry holding one may be signed: then the installation stays on SQLite until
  // it is looked into.
  const shapes = COPIED_TABLES.map(tableShape);
  for (const s of shapes) {
    const nul = rowWithNul(source, s);
    if (nul === null) continue;
    source.close();
    return {
      uitkomst: "bron-niet-in-orde",
      toelichting: `${s.name} (${nul.sleutel}) heeft in kolom ${nul.kolom} een NUL-teken (U+0000), dat PostgreSQL niet kan opslaan; eerst uitzoeken, niets gekopieerd`,
    };
  }
  // Never into another application's database: checked before the migrations create
  // anything there.
  let foreign: string[];
  try {
    foreign = await foreignTables(o.url);
  } catch (e) {
    source.close();
    throw e;
  }
  if (foreign.length > 0) {
    source.close();
    const named = foreign.slice(0, 5).join(", ") + (foreign.length > 5 ? ` en nog ${foreign.length - 5}` : "");
    return {
      uitkomst: "doel-heeft-andere-tabellen",
      toelichting: `${redactUrl(o.url)} bevat tabellen die niet van nachtwacht zijn (${named}): migrate-to schrijft alleen in een lege database; maak er een nieuwe, lege voor aan. Er is niets aangemaakt of gekopieerd`,
    };
  }
  const target = await openPgStore(o.url, { max: Math.max(2, (o.parallel ?? 2) + 1) });
  let snapshotOpen = true;
  try {
    // 2. Only into an empty database: never merge two installations' chains.
    for (const s of shapes) {
      const [row] = await target.sql.unsafe(`SELECT EXISTS (SELECT 1 FROM ${quote(s.name)}) AS filled`);
      if (!row.filled) continue;
      const [proved] = await target.sql`SELECT value FROM service_meta WHERE key = ${PROVED_KEY}`;
      return {
        uitkomst: "doel-niet-leeg",
        toelichting: proved
          ? `${redactUrl(o.url)} bevat al een bewezen kopie (${proved.value}); migrate-to schrijft alleen in een lege database`
          : `tabel ${s.name} in ${redactUrl(o.url)} bevat al rijen, zonder bewezen kopie (een eerdere migrate-to werd onderbroken of afgekeurd, of het is een andere database): ` +
            "verwijder die database en maak haar leeg opnieuw aan, dan opnieuw",
      };
    }
    // 3. Copy: the source's snapshot (above), one transaction on the target.
    o.log(`kopiëren naar ${redactUrl(o.url)}`);
    try {
      const tabellen: { tabel: string; rijen: number }[] = [];
      const autoincrementFloor = autoincrementCounters(source);
      await target.sql.begin(async (tx) => {
        // The audit entries' statement trigger (migration 0002) would keep every copied
        // row in a transition table to look its tenant up: gigabytes of temporary files at
        // millions of entries, for a check made above already (no orphan rows) and after
        // the copy (row by row). Off for this transaction only; ALTER TABLE is
        // transactional, so an aborted copy leaves it on.
        await tx.unsafe(`ALTER TABLE audit_entries DISABLE TRIGGER ${TENANT_CHECK}`);
        for (const s of shapes) {
          const rijen = await copyTable(tx, source, s);
          tabellen.push({ tabel: s.name, rijen });
          o.log(`  ${s.name}: ${rijen} rijen`);
          // Ids handed out after the move continue after the copied ones, and after every
          // id SQLite ever gave out (its AUTOINCREMENT counter): rows deleted since, such
          // as login attempts past retention, keep their ids used, as on SQLite.
          for (const col of s.sequences) {
            const used = `greatest(coalesce((SELECT max(${quote(col)}) FROM ${quote(s.name)}), 0), ${autoincrementFloor.get(s.name) ?? 0})`;
            await tx.unsafe(`SELECT setval(pg_get_serial_sequence('${s.name}', '${col}'), greatest(${used}, 1), ${used} > 0)`);
          }
        }
        await tx.unsafe(`ALTER TABLE audit_entries ENABLE TRIGGER ${TENANT_CHECK}`);
        // With the rows: from here the database is a move's copy, and until PROVED_KEY an
        // unproved one, which the service and the operator's commands refuse (moveState).
        await tx`INSERT INTO service_meta (key, value) VALUES (${MOVE_BEGUN_KEY}, ${new Date().toISOString()})`;
      });

    // Statistics for the planner now: after a bulk COPY PostgreSQL has none until
    // autovacuum gets to it, and meanwhile it plans the service's queries blind (a
    // retention batch of the login attempts scanned the whole table).
    await target.sql`ANALYZE`;

    // 4. Prove the copy: every row equal in key order…
    o.log("kopie controleren: rij voor rij");
    for (const s of shapes) {
      const { verschil } = await compareTable(source, target.sql, s);
      if (verschil) return { uitkomst: "kopie-wijkt-af", toelichting: `${verschil.tabel} ${JSON.stringify(verschil.sleutel)}: ${verschil.toelichting}` };
    }
    // …and every chain of the copy (every tenant in it, and every one the anchor file
    // has a checkpoint of) verifying on PostgreSQL against the anchor file's checkpoints.
    o.log("kopie controleren: ketens tegen de ondertekende checkpoints");
    const copied = ((await target.sql`SELECT id FROM tenants`) as { id: number }[]).map((t) => t.id);
    const ids = [...new Set([...copied, ...checkpoints.keys()])];
    const tasks = ids.map((tenantId) => ({ tenantId, checkpoint: checkpoints.get(tenantId) ?? null }));
    const results = await verifyTenantsPg(target.sql, tasks, { parallel: o.parallel ?? 2, verifiers: o.verifiers, workers: { url: o.url, count: o.parallel ?? 2 } });
    let entries = 0;
    for (const [tenantId, r] of [...results].sort((a, b) => a[0] - b[0])) {
      if (!r.intact) return { uitkomst: "kopie-wijkt-af", toelichting: `tenant ${tenantId}: keten in PostgreSQL ${r.fout?.reden} bij seq ${r.fout?.seq}` };
      entries += r.aantalEntries;
    }
    // The snapshot ends; if another connection committed to the source since it began,
    // the copy (proved equal to the snapshot) lacks that.
    source.run("COMMIT");
    snapshotOpen = false;
    if (dataVersion() !== versionAtSnapshot) {
      return {
        uitkomst: "bron-gewijzigd",
        toelichting:
          `tijdens het kopiëren is in ${o.dbPath} geschreven (draait de service nog?); wat daarna kwam, staat niet in de kopie. ` +
          `De kopie in ${redactUrl(o.url)} is niet bewezen en niet te gebruiken: stop de service (systemctl stop nachtwacht), ` +
          "verwijder die database en draai migrate-to opnieuw in een nieuwe, lege database",
      };
    }
    // Only now is the copy proved; a copy without this row (a run that was stopped, or
    // whose proof failed, or whose source changed meanwhile) is never mistaken for one,
    // and a rerun says so.
    await target.sql`INSERT INTO service_meta (key, value) VALUES (${PROVED_KEY}, ${new Date().toISOString()})`;
    return { uitkomst: "klaar", tabellen, ketens: tasks.length, entries };
    } finally {
      if (snapshotOpen) source.run("COMMIT");
    }
  } finally {
    source.close();
    await target.close();
  }
}
