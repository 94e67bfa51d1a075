// `nachtwacht db-convert [--ja]`: the one-time conversion of a database without
// incremental auto-vacuum (made before that was the default), which the weekly
// db-onderhoud only reports. It rewrites the whole file with a full VACUUM: writers
// wait for minutes on a large file, so it is an explicit operator command, run with
// the service stopped, and it asks for --ja first.
import { existsSync, statSync } from "node:fs";
import { Database } from "bun:sqlite";
import { openStore, schemaVersionProblem } from "../db.ts";
import { convertToIncrementalAutoVacuum } from "../jobs/db-onderhoud.ts";
import { parseOptions } from "./options.ts";

const HELP =
  "gebruik: nachtwacht db-convert [--db BESTAND] [--ja]\n" +
  "  Zet een database zonder incrementele auto-vacuum eenmalig om (volledige VACUUM). Dat herschrijft het hele\n" +
  "  bestand en houdt schrijvers minuten op bij een groot bestand: stop eerst de service (systemctl stop nachtwacht)\n" +
  "  en maak een back-up. Zonder --ja zegt het alleen wat het zou doen.\n" +
  "  exit 0: omgezet (of niet nodig); 1: de database is beschadigd (quick_check, of SQLite meldt beschadiging);\n" +
  "  2: niet uitgevoerd (gebruik, geen --ja, een andere versie, of het kon niet: een ander proces houdt de schrijfvergrendeling\n" +
  "  vast (database is locked), schijf vol, geen schrijfrecht; de reden staat erbij, het bestand is niet omgezet).";

export function runDbConvert(argv: string[], env: Record<string, string | undefined>, out: (s: string) => void, err: (s: string) => void): number {
  let values;
  try {
    values = parseOptions("nachtwacht db-convert", argv, { db: { type: "string" }, ja: { type: "boolean" }, help: { type: "boolean", short: "h" } });
  } catch (e) {
    err(`${e instanceof Error ? e.message : String(e)}\n${HELP}`);
    return 2;
  }
  if (values.help) {
    out(HELP);
    return 0;
  }
  const path = values.db ?? env.DATABASE_PATH ?? "./data/nachtwacht.db";
  if (!existsSync(path)) {
    err(`database niet gevonden: ${path}`);
    return 2;
  }
  // Not a database at all is not a damaged one (exit 1): named, exit 2.
  const stat = statSync(path);
  if (!stat.isFile()) {
    err(`${path} is geen bestand${stat.isDirectory() ? " maar een map" : ""}: geef met --db het databasebestand`);
    return 2;
  }
  if (stat.size === 0) {
    err(`${path} is leeg (0 bytes): geen nachtwacht-database; geef met --db het databasebestand`);
    return 2;
  }
  // Not migrated here: the service's start does that, and seals the rows of the past with the key this command does not hold.
  let version: string | null;
  let incremental: boolean;
  try {
    const check = new Database(path, { readonly: true, strict: true });
    try {
      version = schemaVersionProblem(check);
      incremental = (check.query("PRAGMA auto_vacuum").get() as { auto_vacuum: number }).auto_vacuum === 2;
    } finally {
      check.close();
    }
  } catch (e) {
    const code = (e as { code?: unknown }).code;
    err(code === "SQLITE_NOTADB" ? `${path} is geen SQLite-database; niets omgezet` : `${path} niet te lezen: ${e instanceof Error ? e.message : String(e)}; niets omgezet`);
    return 2;
  }
  if (version !== null) {
    err(`${version}; niets omgezet`);
    return 2;
  }
  // Said before --ja is asked for: without it, the command says what it would do, and here that is nothing.
  if (incremental) {
    out("niet nodig: auto_vacuum is al incremental.");
    return 0;
  }
  if (!values.ja) {
    out(`LET OP: dit herschrijft ${path} volledig (VACUUM); schrijvers wachten zolang het duurt.`);
    out("Stop eerst de service en maak een back-up; voer het dan uit met --ja.");
    return 2;
  }
  let store: ReturnType<typeof openStore> | undefined;
  let r: ReturnType<typeof convertToIncrementalAutoVacuum>;
  try {
    store = openStore(path);
    r = convertToIncrementalAutoVacuum(store, new Date());
  } catch (e) {
    // Could not run (a lock held by another process, a full disk, no write permission):
    // 2, with SQLite's reason. Only SQLite saying the file is damaged is 1.
    const code = (e as { code?: unknown }).code;
    const damaged = typeof code === "string" && (code.startsWith("SQLITE_CORRUPT") || code === "SQLITE_NOTADB");
    const reason = e instanceof Error ? e.message : String(e);
    if (damaged) {
      err(`NIET omgezet: de database is beschadigd (${reason}); herstel eerst de database (docs/operations.md).`);
      return 1;
    }
    err(`NIET omgezet: ${reason}${code === "SQLITE_BUSY" ? " (een ander proces schrijft: stop eerst de service, systemctl stop nachtwacht)" : ""}; het bestand is niet omgezet.`);
    return 2;
  } finally {
    store?.close();
  }
  // Reported after the conversion's own errors: output that cannot be written is not a failed conversion.
  if (r.integriteit !== "ok") {
    out(`NIET omgezet: quick_check meldt ${JSON.stringify(r.integriteit)}; herstel eerst de database (docs/operations.md).`);
    return 1;
  }
  out(r.omgezet ? `omgezet: auto_vacuum is nu ${r.autoVacuum}; ${r.vrijgemaakt} bytes vrijgemaakt (${r.grootteVoor} → ${r.grootteNa}).` : `niet nodig: auto_vacuum is al ${r.autoVacuum}.`);
  return 0;
}
