// nachtwacht migrate-to --database-url URL|- [--db FILE] [--bestand FILE] [--sleutel VKEY ...] [--parallel N]
//
// Copies the SQLite installation to an empty PostgreSQL database and proves the copy
// (src/pg/migrate-to.ts). A URL with a password (in its user info or as `?password=`)
// never goes on the command line (where ps and shell history show it): give `-` and the
// URL on standard input, or set DATABASE_URL in the environment. Exit 0 done and
// proved, 1 the source does not verify, the copy differs, or the source was written to
// during the copy (the service still running), 2 could not (usage, keys, connection, a
// target that is not empty or holds another application's tables).
import { CannotCheck } from "../audit/offline.ts";
import { migrateToPostgres } from "../pg/migrate-to.ts";
import { redactUrl } from "../pg/url.ts";
import { trustedKeys } from "./audit.ts";
import { databaseUrl } from "./database-url.ts";
import { parseOptions } from "./options.ts";
import { StdoutFailed } from "./stdout.ts";

export const MIGRATE_TO_HELP =
  "gebruik: nachtwacht migrate-to --database-url URL|- [--db BESTAND] [--bestand ANKERBESTAND] [--sleutel PUBLIEKE-SLEUTEL ...] [--parallel N]\n" +
  "  Kopieert de SQLite-database naar een lege PostgreSQL-database (15 of nieuwer) en bewijst de kopie voordat het klaar zegt:\n" +
  "  eerst moet de bron verifiëren (ketens tegen het ankerbestand), dan gaat alles in één transactie over (COPY), dan wordt\n" +
  "  elke tabel rij voor rij vergeleken en elke keten in PostgreSQL geverifieerd tegen de ondertekende checkpoints.\n" +
  "  Stop de service eerst: wordt er tijdens het kopiëren in het SQLite-bestand geschreven, dan is de kopie niet bewezen\n" +
  "  (exit 1, bron-gewijzigd): stop dan de service en draai het opnieuw in een nieuwe, lege database.\n" +
  "  Alleen in een lege database: staan er tabellen van een andere toepassing in (in welk schema ook), dan wordt er niets aangemaakt.\n" +
  "  --database-url  postgres://gebruiker@host:poort/database; met een wachtwoord alleen via '-' (de URL op standaardinvoer)\n" +
  "                  of DATABASE_URL in de omgeving, nooit op de opdrachtregel\n" +
  "  Sleutels: --sleutel (herhaalbaar), anders AUDIT_VERTROUWDE_SLEUTELS en de publieke helft van AUDIT_ANKER_SLEUTEL.\n" +
  "  Standaard DATABASE_PATH en AUDIT_ANKER_BESTAND uit de omgeving.\n" +
  "  exit 0: gekopieerd en bewezen; 1: bron verifieert niet, kopie wijkt af of de bron veranderde tijdens het kopiëren;\n" +
  "  2: niet mogelijk (gebruik, verbinding, doel niet leeg of met tabellen van een andere toepassing).";

/**
 * Whether a URL carries a password: in its user info, or in a query parameter (Bun's
 * client takes `?password=` as the password; any parameter named like one counts).
 */
export async function runMigrateTo(args: string[], env: Record<string, string | undefined>, out: (s: string) => void, err: (s: string) => void, stdin: () => Promise<string> = () => Bun.stdin.text()): Promise<number> {
  let o;
  try {
    o = parseOptions("nachtwacht migrate-to", args, {
      help: { type: "boolean", short: "h" },
      "database-url": { type: "string" },
      db: { type: "string" },
      bestand: { type: "string" },
      sleutel: { type: "string", multiple: true },
      parallel: { type: "string" },
    });
  } catch (e) {
    err(`nachtwacht migrate-to: ${e instanceof Error ? e.message : String(e)}\n${MIGRATE_TO_HELP}`);
    return 2;
  }
  if (o.help) {
    out(MIGRATE_TO_HELP);
    return 0;
  }
  const given = await databaseUrl(o["database-url"], env, stdin);
  if ("error" in given) {
    err(`nachtwacht migrate-to: ${given.error}${given.error.startsWith("--") ? `\n${MIGRATE_TO_HELP}` : ""}`);
    return 2;
  }
  const { url } = given;
  const parallel = o.parallel === undefined ? 2 : Number(o.parallel);
  if (!Number.isInteger(parallel) || parallel < 1 || parallel > 16) {
    err("nachtwacht migrate-to: --parallel moet een geheel getal van 1 tot en met 16 zijn");
    return 2;
  }
  try {
    const result = await migrateToPostgres({
      dbPath: o.db ?? env.DATABASE_PATH ?? "./data/nachtwacht.db",
      anchorPath: o.bestand ?? env.AUDIT_ANKER_BESTAND ?? "./data/audit-ankers.jsonl",
      url,
      verifiers: trustedKeys(o.sleutel, env),
      log: out,
      parallel,
    });
    switch (result.uitkomst) {
      case "klaar":
        out(`KLAAR: ${result.tabellen.reduce((n, t) => n + t.rijen, 0)} rijen in ${result.tabellen.length} tabellen gekopieerd en gelijk bevonden; ${result.ketens} keten(s), ${result.entries} entries, geverifieerd in ${redactUrl(url)}.`);
        return 0;
      case "doel-niet-leeg":
      case "doel-heeft-andere-tabellen":
      case "bron-andere-versie":
        err(`nachtwacht migrate-to: ${result.toelichting}`);
        return 2;
      case "kopie-wijkt-af":
        err(`nachtwacht migrate-to: ${result.uitkomst}: ${result.toelichting}; de kopie in ${redactUrl(url)} is niet bewezen en niet te gebruiken: verwijder die database`);
        return 1;
      default:
        err(`nachtwacht migrate-to: ${result.uitkomst}: ${result.toelichting}`);
        return 1;
    }
  } catch (e) {
    if (e instanceof StdoutFailed) throw e; // not a failed copy: the entry point reports it
    // Never the URL as given: it may carry a password.
    const msg = (e instanceof Error ? e.message : String(e)).replaceAll(url, redactUrl(url));
    err(`nachtwacht migrate-to: ${e instanceof CannotCheck ? "" : "niet gelukt: "}${msg}`);
    return 2;
  }
}
