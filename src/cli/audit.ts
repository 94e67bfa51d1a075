// The operator's and auditor's audit commands (the code is in src/audit/):
//
//   nachtwacht key [--naam NAAM]
//   nachtwacht verify [--db FILE] [--bestand FILE] [--sleutel VKEY ...] [--checkpoint FILE|-] [--bundel FILE [--checkpoint FILE|-]]
//   nachtwacht export --tenant N [--bewijs SEQ] [--uit FILE] [--db FILE] [--bestand FILE] [--sleutel VKEY ...]
//   nachtwacht adopt --tenant N [--ja] [--db FILE | --database-url URL|-] [--bestand FILE]
//   nachtwacht accept-restore [--ja] [--vervang-keten] [--db FILE | --database-url URL|-] [--bestand FILE]
//
// verify needs public keys only: --sleutel, else AUDIT_VERTROUWDE_SLEUTELS plus the
// public half of AUDIT_ANKER_SLEUTEL when those are in the environment. Exit codes:
// 0 in order, 1 not in order, 2 the check could not be made. adopt and accept-restore
// sign, so they need AUDIT_ANKER_SLEUTEL itself (src/audit/operator.ts; on PostgreSQL
// src/pg/operator.ts): 0 done (or, without --ja, possible), 1 refused, 2 not possible.
import { randomBytes } from "node:crypto";
import { Database } from "bun:sqlite";
import { existsSync, readFileSync, realpathSync } from "node:fs";
import { hostname } from "node:os";
import { basename, dirname, join, resolve } from "node:path";
import type { ParseArgsOptionsConfig } from "node:util";
import { generateKeyPair, isValidKeyName, NoteKeyError, parseSignerKey, parseVerifierKey, type Verifier } from "../audit/note.ts";
import { CannotCheck, compareWithMailedCheckpoint, exportBundle, verifyAgainstInstallationCheckpoint, verifyBundle, verifyDatabase } from "../audit/offline.ts";
import { auditKeys, keyList } from "../audit/keys.ts";
import { acceptRestoreOn, adoptChainOn, openOperatorDatabase, Refused, sqliteOperatorStore, type OperatorStore } from "../audit/operator.ts";
import type { Keys } from "../audit/records.ts";
import type { InstallationVerdict } from "../audit/verify-all.ts";
import { newerSqliteSchemaProblem } from "../db.ts";
import { redenUitleg } from "../reports/shared.ts";
import { redactUrl } from "../pg/url.ts";
import { databaseUrl } from "./database-url.ts";
import { writeStdout } from "./stdout.ts";
import { writeFileDurably } from "../durable-file.ts";
import { OptionError, parseOptions } from "./options.ts";

/** Where adopt and accept-restore find the service's database. */
const DATABASE_HELP =
  "  Database: DATABASE_URL uit de omgeving (PostgreSQL) of --database-url URL|- (een URL met wachtwoord alleen via '-'\n" +
  "  of DATABASE_URL), anders --db of DATABASE_PATH (SQLite). --db samen met DATABASE_URL of --database-url wordt\n" +
  "  geweigerd: welke database bedoeld is, moet vaststaan. Draai het met de omgeving van de service (docs/operations.md).\n" +
  "  Geen --sleutel: het ondertekent met AUDIT_ANKER_SLEUTEL en vertrouwt AUDIT_VERTROUWDE_SLEUTELS, zoals de service.\n";

const HELP: Record<string, string> = {
  key:
    "gebruik: nachtwacht key [--naam NAAM]\n" +
    "  Maakt een nieuw Ed25519-sleutelpaar. De eerste regel (AUDIT_ANKER_SLEUTEL=…) is geheim en hoort alleen in het\n" +
    "  omgevingsbestand (root, 600); de publieke sleutel staat in het commentaar eronder en is voor auditors.\n" +
    "  --naam  sleutelnaam (geen spaties of '+'); standaard nachtwacht.<hostnaam>/<willekeurig>",
  verify:
    "gebruik: nachtwacht verify [--db BESTAND | --database-url URL|-] [--bestand ANKERBESTAND] [--sleutel PUBLIEKE-SLEUTEL ...]\n" +
    "                         [--checkpoint BESTAND|-] [--bundel BESTAND]\n" +
    "  Controleert met alleen de publieke sleutel(s): de database tegen het ankerbestand (standaard),\n" +
    "  tegen een installatie-checkpoint uit de dagrapport-e-mail (--checkpoint), of een bundel van export (--bundel).\n" +
    "  --bundel met --checkpoint: of het installatie-checkpoint in de bundel (dat de kop bevat) dat uit de e-mail is.\n" +
    "  Sleutels: --sleutel (herhaalbaar), anders AUDIT_VERTROUWDE_SLEUTELS en de publieke helft van AUDIT_ANKER_SLEUTEL.\n" +
    "  Standaard DATABASE_PATH en AUDIT_ANKER_BESTAND uit de omgeving. --database-url (of DATABASE_URL zonder --db):\n" +
    "  een PostgreSQL-database, alleen gelezen; een URL met wachtwoord alleen via '-' (standaardinvoer) of DATABASE_URL.\n" +
    "  exit 0: alles klopt; 1: iets klopt niet; 2: controle niet mogelijk (met --bundel en --checkpoint ook: een\n" +
    "  ander installatie-checkpoint dan dat van de bundel, wat zonder ankerbestand niet te vergelijken is).",
  export:
    "gebruik: nachtwacht export --tenant N [--bewijs SEQ] [--uit BESTAND] [--db BESTAND | --database-url URL|-] [--bestand ANKERBESTAND] [--sleutel …]\n" +
    "  Schrijft een bundel (JSON-regels: kop met checkpoint, retentierecord en publieke sleutels, dan de entries)\n" +
    "  die `nachtwacht verify --bundel` offline controleert. --bewijs voegt een RFC 6962-inclusiebewijs van één entry toe.\n" +
    "  De kop krijgt ook het nieuwste installatie-checkpoint dat het checkpoint van de tenant bevat, met het inclusiebewijs.\n" +
    "  --uit schrijft de bundel in een nieuw bestand, alleen leesbaar voor de eigenaar (600), in zijn geheel of niet; nooit\n" +
    "  over een bestaand bestand (een bewaard checkpoint, de database, het ankerbestand: geweigerd, exit 2).\n" +
    "  exit 0: geschreven; 2: niet mogelijk.",
  adopt:
    "gebruik: nachtwacht adopt --tenant N [--ja] [--db BESTAND | --database-url URL|-] [--bestand ANKERBESTAND]\n" +
    "  Adopteert de keten van één tenant die een eerdere versie inkortte zonder ondertekend retentierecord\n" +
    "  (audit-verificatie: retentie-ontbreekt). Met --ja ondertekent het met AUDIT_ANKER_SLEUTEL uit de omgeving een\n" +
    "  adoptierecord (vanaf seq S = de oudste entry min 1, met haar prev_hash, en de datum) en het eerste checkpoint\n" +
    "  van de keten vanaf S+1, en zet ze in het ankerbestand en de database. Elke verificatie noemt de adoptie daarna\n" +
    "  als waarschuwing. Geweigerd als de keten bij seq 1 begint, al een geldig retentie- of adoptierecord heeft, door\n" +
    "  nachtwacht al ondertekend is, of zelf niet klopt; en als het ankerbestand niet met de database klopt.\n" +
    "  Zonder --ja zegt het alleen wat het zou doen en schrijft het niets.\n" +
    DATABASE_HELP +
    "  exit 0: geadopteerd (zonder --ja: mogelijk); 1: geweigerd; 2: niet mogelijk (geen sleutel, geen database, gebruik).",
  "accept-restore":
    "gebruik: nachtwacht accept-restore [--ja] [--vervang-keten] [--db BESTAND | --database-url URL|-] [--bestand ANKERBESTAND]\n" +
    "  Accepteert een bewust teruggezette (oudere) database: meldt per tenant wat de database mist tegenover het\n" +
    "  ankerbestand (de seq van het ondertekende checkpoint tegen de nieuwste entry in de database). Met --ja zet het de\n" +
    "  regels van het ankerbestand die de database mist terug in audit_anchor_log en ondertekent het met\n" +
    "  AUDIT_ANKER_SLEUTEL uit de omgeving per getroffen tenant een herstelrecord (van seq A naar B, met de root bij B\n" +
    "  zoals de database die geeft). Daarna controleert de verificatie die tenants tegen het herstelrecord en noemt\n" +
    "  het verlies voorgoed als waarschuwing. Een keten die zelf niet klopt, rijen die niet met het ankerbestand\n" +
    "  kloppen of een ander probleem met het ankerbestand worden niet geaccepteerd.\n" +
    "  --vervang-keten  ook accepteren dat de database onder ondertekende seqs andere entries heeft (een checkpoint\n" +
    "  waar de keten lang genoeg voor is, klopt niet): per tenant staat welke ondertekende seqs worden vervangen. Een\n" +
    "  databaseschrijver kan precies dit maken; geef het alleen na vergelijking met een back-up. Zonder deze optie\n" +
    "  accepteert --ja alleen puur verlies (de keten korter dan ondertekend, elk checkpoint binnen haar lengte gehaald)\n" +
    "  en schrijft het niets zolang een tenant haar nodig heeft.\n" +
    "  Zonder --ja zegt het alleen wat het zou doen en schrijft het niets.\n" +
    DATABASE_HELP +
    "  exit 0: geaccepteerd of niets te doen (zonder --ja: alles te accepteren); 1: (deels) geweigerd; 2: niet mogelijk.",
};

/** Each command's own options (src/cli/options.ts): one that belongs to another command is refused, not ignored. */
const HELP_OPTION = { help: { type: "boolean", short: "h" } } as const;
const DATABASE_OPTIONS = { db: { type: "string" }, "database-url": { type: "string" }, bestand: { type: "string" } } as const;
const OPTIONS = {
  key: { ...HELP_OPTION, naam: { type: "string" } },
  verify: { ...HELP_OPTION, ...DATABASE_OPTIONS, sleutel: { type: "string", multiple: true }, checkpoint: { type: "string" }, bundel: { type: "string" } },
  export: { ...HELP_OPTION, ...DATABASE_OPTIONS, sleutel: { type: "string", multiple: true }, tenant: { type: "string" }, bewijs: { type: "string" }, uit: { type: "string" } },
  adopt: { ...HELP_OPTION, ...DATABASE_OPTIONS, tenant: { type: "string" }, ja: { type: "boolean" } },
  "accept-restore": { ...HELP_OPTION, ...DATABASE_OPTIONS, ja: { type: "boolean" }, "vervang-keten": { type: "boolean" } },
} as const satisfies Record<keyof typeof HELP, ParseArgsOptionsConfig>;

/** The values of any command's options; those it does not take are always undefined. */
interface AuditOptions {
  help?: boolean;
  naam?: string;
  db?: string;
  "database-url"?: string;
  bestand?: string;
  sleutel?: string[];
  checkpoint?: string;
  bundel?: string;
  tenant?: string;
  bewijs?: string;
  uit?: string;
  ja?: boolean;
  "vervang-keten"?: boolean;
}

/** The commands that sign: they need the signing key itself, never only public keys. */
const SIGNING = new Set(["adopt", "accept-restore"]);

class UsageError extends Error {}

export function trustedKeys(given: string[] | undefined, env: Record<string, string | undefined>): Verifier[] {
  const vkeys = [...(given ?? [])];
  if (vkeys.length === 0) {
    vkeys.push(...keyList(env.AUDIT_VERTROUWDE_SLEUTELS));
    const skey = env.AUDIT_ANKER_SLEUTEL?.trim();
    if (skey) {
      try {
        vkeys.push(parseSignerKey(skey).verifierKey);
      } catch {
        throw new CannotCheck("AUDIT_ANKER_SLEUTEL in de omgeving is geen geldige ondertekeningssleutel");
      }
    }
  }
  if (vkeys.length === 0) throw new CannotCheck("geen publieke sleutel: geef --sleutel, of zet AUDIT_VERTROUWDE_SLEUTELS of AUDIT_ANKER_SLEUTEL");
  return [...new Set(vkeys)].map((k, i) => {
    try {
      return parseVerifierKey(k);
    } catch (e) {
      throw new CannotCheck(`sleutel ${i + 1} ${e instanceof NoteKeyError ? e.message : "is geen publieke sleutel"}`);
    }
  });
}

/** The signing key and every trusted key, from the environment as the service has it: the operator's commands sign. */
function signingKeys(env: Record<string, string | undefined>): Keys {
  const skey = env.AUDIT_ANKER_SLEUTEL?.trim();
  if (!skey) throw new CannotCheck("AUDIT_ANKER_SLEUTEL staat niet in de omgeving: alleen met de ondertekeningssleutel van de service kan dit (docs/operations.md)");
  const trusted = keyList(env.AUDIT_VERTROUWDE_SLEUTELS);
  try {
    return auditKeys({ auditAnkerSleutel: skey, auditVertrouwdeSleutels: trusted });
  } catch (e) {
    throw new CannotCheck(`AUDIT_ANKER_SLEUTEL of AUDIT_VERTROUWDE_SLEUTELS is ongeldig${e instanceof NoteKeyError ? ` (een sleutel ${e.message})` : ""}`);
  }
}

const b64 = (b: Uint8Array) => Buffer.from(b).toString("base64");

/** The store an operator command signs into: the SQLite file, or PostgreSQL (src/pg/operator.ts). */
interface OperatorDatabase {
  /** As printed: the file's path, or the URL without its password. */
  naam: string;
  /** `work` on the store (adoptChainOn, acceptRestoreOn); on PostgreSQL a failure of its own is named without the URL's password. */
  run<T>(work: (store: OperatorStore) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

async function openOperatorStore(pg: string | null, dbPath: string): Promise<OperatorDatabase> {
  if (pg === null) {
    const db = openOperatorDatabase(dbPath);
    return { naam: dbPath, run: (work) => work(sqliteOperatorStore(db, dbPath)), close: async () => db.close() };
  }
  const m = await import("../pg/operator.ts");
  const sql = await m.openOperatorPg(pg);
  const store = m.pgOperatorStore(sql);
  return {
    naam: redactUrl(pg),
    async run(work) {
      try {
        return await work(store);
      } catch (e) {
        // A refusal is the command's answer; anything else may quote the URL.
        if (e instanceof Refused || e instanceof CannotCheck || !(e instanceof Error)) throw e;
        e.message = e.message.replaceAll(pg, redactUrl(pg));
        throw e;
      }
    },
    close: () => sql.close(),
  };
}

async function runAdopt(db: OperatorDatabase, anchorPath: string, keys: Keys, tenantId: number, ja: boolean, out: (s: string) => void): Promise<number> {
  out(`database:     ${db.naam}`);
  out(`ankerbestand: ${anchorPath}`);
  let p;
  try {
    p = await db.run((store) => adoptChainOn(store, anchorPath, keys, tenantId, { ja, now: new Date() }));
  } catch (e) {
    if (!(e instanceof Refused)) throw e;
    out(`RESULTAAT: GEWEIGERD: ${e.message}`);
    return 1;
  }
  out(`tenant ${tenantId}: oudste entry seq ${p.eerste.seq} (${p.eerste.createdAt}), nieuwste seq ${p.laatste}, ${p.aantalEntries} entries; de keten klopt vanaf seq ${p.eerste.seq}`);
  out(`  adoptie bij seq ${p.seq} met hash ${p.hash} (de prev_hash van seq ${p.eerste.seq}); de entries 1 t/m ${p.seq} zijn niet meer te controleren`);
  if (p.retentieAnker) {
    const a = p.retentieAnker;
    out(`  audit_retention_anchors (niet ondertekend, alleen ter vergelijking): seq ${a.seq} — ${a.klopt ? "komt overeen" : `WIJKT AF (hash ${a.hash})`}`);
  } else {
    out("  audit_retention_anchors: geen rij voor deze tenant");
  }
  if (!ja) {
    out(`  zou ondertekenen: een adoptierecord en het eerste checkpoint over seq ${p.eerste.seq} t/m ${p.laatste} (met ${keys.signer.name})`);
    out("RESULTAAT: adoptie mogelijk; er is niets geschreven. Voer het uit met --ja.");
    return 0;
  }
  out(p.adoptie!.trimEnd());
  out(`RESULTAAT: tenant ${tenantId} is geadopteerd vanaf seq ${p.eerste.seq}; adoptierecord, checkpoint en installatie-checkpoint staan in het ankerbestand.`);
  return 0;
}

async function runAcceptRestore(db: OperatorDatabase, anchorPath: string, keys: Keys, o: { ja: boolean; vervangKeten: boolean }, out: (s: string) => void): Promise<number> {
  out(`database:     ${db.naam}`);
  out(`ankerbestand: ${anchorPath}`);
  const ja = o.ja;
  let r;
  try {
    r = await db.run((store) => acceptRestoreOn(store, anchorPath, keys, { ...o, now: new Date() }));
  } catch (e) {
    if (!(e instanceof Refused)) throw e;
    out(`RESULTAAT: GEWEIGERD: ${e.message}`);
    return 1;
  }
  out(`${r.ontbrekend} regel(s) van het ankerbestand ontbreken in de database${r.ontbrekend > 0 ? (ja ? "; teruggezet" : "; worden teruggezet") : ""}`);
  for (const l of [...r.verliezen, ...r.teVervangen].sort((a, b) => a.tenantId - b.tenantId)) {
    const wat = [
      ...(l.vervangen ? [`de database heeft onder de ondertekende seqs ${l.vervangen.van} t/m ${l.vervangen.tot} een andere keten dan ondertekend (${l.reden}); die worden vervangen`] : []),
      ...(l.naar < l.van ? [`de ondertekende entries ${l.naar + 1} t/m ${l.van} zijn verloren`] : []),
    ].join("; ");
    const onbewezen = l.bewezenTot < l.naar ? `; entries ${l.bewezenTot + 1} t/m ${l.naar} zijn tegen geen checkpoint van het ankerbestand te bewijzen en worden zo aanvaard — controleer ze` : "";
    out(`  tenant ${l.tenantId}: van seq ${l.van} terug naar ${l.naar}: ${wat}${onbewezen}; root bij ${l.naar}: ${b64(l.root)}`);
  }
  for (const l of r.teVervangen) {
    out(
      `  tenant ${l.tenantId}: NIET geaccepteerd zonder --vervang-keten: een databaseschrijver kan een keten zo herschrijven; ` +
        `vergelijk de entries ${l.vervangen!.van} t/m ${l.vervangen!.tot} met een back-up en accepteer alleen dan met --ja --vervang-keten`,
    );
  }
  for (const g of r.geweigerd) out(`  tenant ${g.tenantId}: NIET te accepteren: ${g.reden} bij seq ${g.seq} — de keten klopt zelf niet`);
  if (r.teVervangen.length > 0) {
    const tenants = r.teVervangen.map((l) => l.tenantId).join(", ");
    out(`RESULTAAT: er is niets geschreven: tenant(s) ${tenants} vervangen ondertekende entries, wat alleen met --vervang-keten wordt geaccepteerd.`);
    return 1;
  }
  if (r.verliezen.length === 0 && r.ontbrekend === 0) {
    out(r.geweigerd.length > 0 ? "RESULTAAT: niets te accepteren; de genoemde ketens kloppen niet." : "RESULTAAT: niets te accepteren: de database mist niets van het ankerbestand.");
    return r.geweigerd.length > 0 ? 1 : 0;
  }
  if (!ja) {
    out(`RESULTAAT: er is niets geschreven. Met --ja: ${r.verliezen.length} herstelrecord(s) ondertekenen (met ${keys.signer.name}).`);
    return r.geweigerd.length > 0 ? 1 : 0;
  }
  const niet = r.geweigerd.length > 0 ? `; ${r.geweigerd.length} tenant(s) niet geaccepteerd` : "";
  if (r.verliezen.length === 0) out(`RESULTAAT: ${r.ontbrekend} regel(s) in de database teruggezet; geen nieuw herstelrecord nodig${niet}.`);
  else out(`RESULTAAT: ${r.verliezen.length} herstelrecord(s) ondertekend en in het ankerbestand gezet${niet}.`);
  return r.geweigerd.length > 0 ? 1 : 0;
}

function printVerdict(v: InstallationVerdict, out: (s: string) => void): boolean {
  for (const w of v.waarschuwingen) out(`LET OP: ${w}`);
  out(`${v.regels} regel(s) in het ankerbestand, ${v.tenants.length} tenant(s)`);
  if (v.probleem) out(`  ANKERBESTAND: ${v.probleem.reden} — ${redenUitleg(v.probleem.reden)} (${v.probleem.toelichting})`);
  for (const t of v.tenants) {
    if (t.intact) out(`  tenant ${t.tenantId}: in orde (${t.aantalEntries} entries)`);
    else out(`  tenant ${t.tenantId}: GEBROKEN bij seq ${t.fout!.seq}: ${t.fout!.reden} — ${redenUitleg(t.fout!.reden)}`);
  }
  return !v.probleem && v.tenants.every((t) => t.intact);
}

/** A path as the file system resolves it (symbolic links followed); one that does not exist yet, through its folder. */
function resolvedPath(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    try {
      return join(realpathSync(dirname(resolve(path))), basename(path));
    } catch {
      return resolve(path);
    }
  }
}

/** export's --uit must not name one of its inputs: the anchor file, or the SQLite database or its -wal/-shm (null on PostgreSQL). */
function refuseOwnInput(uit: string, anchorPath: string, dbPath: string | null): void {
  const target = resolvedPath(uit);
  const inputs: [string, string][] = [[resolvedPath(anchorPath), "het ankerbestand"]];
  if (dbPath !== null) for (const suffix of ["", "-wal", "-shm"]) inputs.push([resolvedPath(dbPath + suffix), suffix === "" ? "de database" : `het ${suffix}-bestand van de database`]);
  for (const [path, what] of inputs) {
    if (path === target) throw new UsageError(`--uit ${uit} is ${what} (${path}): de bundel zou die overschrijven; kies een ander bestand`);
  }
}

/** export never replaces a file: a bundle or checkpoint kept there would be lost. */
const existingTarget = (uit: string) => `--uit ${uit} bestaat al: export overschrijft geen bestand; kies een nieuwe naam of verwijder het eerst`;

/** The PostgreSQL URL of verify, export, adopt or accept-restore: `--database-url`, or DATABASE_URL when no `--db` is given; null for SQLite. */
async function postgresUrl(o: { "database-url"?: string; db?: string }, env: Record<string, string | undefined>): Promise<string | null> {
  if (o["database-url"] === undefined && (o.db !== undefined || env.DATABASE_URL === undefined)) return null;
  const given = await databaseUrl(o["database-url"], env, () => new Response(Bun.stdin.stream()).text());
  if ("error" in given) throw new UsageError(given.error);
  return given.url;
}

/** A failure to read PostgreSQL is "could not check" (exit 2), named without the URL's password. */
async function onPostgres<T>(url: string, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (e) {
    if (e instanceof CannotCheck) throw e;
    throw new CannotCheck(`PostgreSQL niet te lezen: ${(e instanceof Error ? e.message : String(e)).replaceAll(url, redactUrl(url))}`);
  }
}

/**
 * verify and export read the tables as this version has them: a database of a newer
 * version (more migrations than this one knows) is refused, "could not check", never
 * read as if it were this version's; so is a move's copy on PostgreSQL that was never
 * proved. A missing or unreadable SQLite file is left to the command, which names it.
 */
async function refuseNewerDatabase(pg: string | null, dbPath: string): Promise<void> {
  let newer: string | null = null;
  if (pg === null) {
    if (!existsSync(dbPath)) return;
    let db: Database | undefined;
    try {
      db = new Database(dbPath, { readonly: true, strict: true });
      newer = newerSqliteSchemaProblem(db);
    } catch {
      return;
    } finally {
      db?.close();
    }
  } else {
    const { moveState, newerPgSchemaProblem, pgPool, unprovedCopyMelding } = await import("../pg/store.ts");
    newer = await onPostgres(pg, async () => {
      const sql = pgPool(pg, 1);
      try {
        // A move's copy that was never proved is not checked as if it were the installation.
        if ((await moveState(sql)) === "onbewezen") return unprovedCopyMelding("de database");
        return await newerPgSchemaProblem(sql);
      } finally {
        await sql.close();
      }
    });
  }
  if (newer !== null) throw new CannotCheck(`${pg ? redactUrl(pg) : dbPath}: ${newer}`);
}

/** An installation checkpoint as pasted from the daily e-mail, from a file or stdin ("-"). */
async function readCheckpointNote(path: string): Promise<string> {
  let note: string;
  try {
    note = path === "-" ? await new Response(Bun.stdin.stream()).text() : readFileSync(path, "utf8");
  } catch {
    throw new CannotCheck(`checkpoint niet te lezen: ${path}`);
  }
  // An e-mail client may add blank lines or spaces around the block: the note itself ends after its signature lines.
  return note.replace(/\r\n/g, "\n").trim() + "\n";
}

export async function runAuditCommand(argv: string[], env: Record<string, string | undefined>, out: (s: string) => void, err: (s: string) => void): Promise<number> {
  const [sub, ...args] = argv;
  if (sub === undefined || !(sub in HELP)) {
    err(`onbekend commando ${JSON.stringify(sub ?? "")}; kies uit: ${Object.keys(HELP).join(", ")}`);
    return 2;
  }
  try {
    const o = parseOptions(`nachtwacht ${sub}`, args, OPTIONS[sub as keyof typeof OPTIONS]) as AuditOptions;
    if (o.help) {
      out(HELP[sub]!);
      return 0;
    }
    const dbPath = o.db ?? env.DATABASE_PATH ?? "./data/nachtwacht.db";
    const anchorPath = o.bestand ?? env.AUDIT_ANKER_BESTAND ?? "./data/audit-ankers.jsonl";

    if (sub === "key") {
      if (o.naam !== undefined && !isValidKeyName(o.naam)) {
        throw new UsageError(`--naam ${JSON.stringify(o.naam)} is geen geldige sleutelnaam: niet leeg, zonder spaties of andere witruimte, '+' of stuurtekens`);
      }
      const naam = o.naam ?? `nachtwacht.${hostname().replace(/[^A-Za-z0-9.-]/g, "-") || "host"}/${randomBytes(4).toString("hex")}`;
      const { signerKey, verifierKey } = generateKeyPair(naam);
      out(`AUDIT_ANKER_SLEUTEL=${signerKey}`);
      out(`# publieke sleutel (voor auditors en nachtwacht verify --sleutel): ${verifierKey}`);
      return 0;
    }

    // Two databases named on the command line: which one is meant is not for this command to guess.
    if (o.db !== undefined && o["database-url"] !== undefined) throw new UsageError("--db en --database-url noemen elk een database: geef er één");

    if (SIGNING.has(sub)) {
      if (sub === "adopt" && (o.tenant === undefined || !/^[1-9][0-9]*$/.test(o.tenant))) throw new UsageError("--tenant N is verplicht (een tenant-id)");
      // After a move to PostgreSQL the old SQLite file stays (docs/postgresql.md): signing into
      // the one the operator did not mean would record a loss that never happened.
      // (--db beside --database-url is refused above, for every command.)
      if (o.db !== undefined && env.DATABASE_URL !== undefined) {
        throw new UsageError(
          `--db ${o.db} en DATABASE_URL in de omgeving noemen elk een database: onduidelijk welke bedoeld is. ` +
            "Laat --db weg voor PostgreSQL (DATABASE_URL), of haal DATABASE_URL uit de omgeving voor het SQLite-bestand.",
        );
      }
      const keys = signingKeys(env);
      const pg = await postgresUrl(o, env);
      const db = await openOperatorStore(pg, dbPath);
      try {
        if (sub === "adopt") return await runAdopt(db, anchorPath, keys, Number(o.tenant), o.ja === true, out);
        return await runAcceptRestore(db, anchorPath, keys, { ja: o.ja === true, vervangKeten: o["vervang-keten"] === true }, out);
      } finally {
        await db.close();
      }
    }

    const verifiers = trustedKeys(o.sleutel, env);

    if (sub === "export") {
      if (o.tenant === undefined || !/^[1-9][0-9]*$/.test(o.tenant)) throw new UsageError("--tenant N is verplicht (een tenant-id)");
      if (o.bewijs !== undefined && !/^[1-9][0-9]*$/.test(o.bewijs)) throw new UsageError("--bewijs SEQ moet een volgnummer zijn");
      const proveSeq = o.bewijs === undefined ? undefined : Number(o.bewijs);
      const pg = await postgresUrl(o, env);
      if (o.uit) refuseOwnInput(o.uit, anchorPath, pg ? null : dbPath);
      // Checked again as it is written (writeFileDurably's exclusive link): another export may get there first.
      if (o.uit && existsSync(o.uit)) throw new UsageError(existingTarget(o.uit));
      await refuseNewerDatabase(pg, dbPath);
      const lines = pg
        ? await onPostgres(pg, () => import("../pg/offline.ts").then((m) => m.exportBundlePg(pg, anchorPath, Number(o.tenant), verifiers, proveSeq)))
        : await exportBundle(dbPath, anchorPath, Number(o.tenant), verifiers, proveSeq);
      const text = lines.join("\n") + "\n";
      // Said on stderr either way (stdout may be the bundle): the bundle then proves its entries against its head only.
      if ((JSON.parse(lines[0]!) as { installatie?: unknown }).installatie === undefined) {
        err("let op: geen installatie-checkpoint in het ankerbestand bevat de kop van deze tenant nog (de kop is van na het laatste audit-anker): de bundel bewijst zijn entries tegen zijn kop, maar niet tegen een installatie-checkpoint uit de e-mail");
      }
      if (o.uit) {
        // Owner-only (a tenant's whole audit trail), whole or not at all, on disk when reported.
        try {
          writeFileDurably(o.uit, text, 0o600, { exclusive: true });
        } catch (e) {
          if ((e as { code?: unknown }).code === "EEXIST") throw new UsageError(existingTarget(o.uit));
          throw e;
        }
        err(`bundel geschreven: ${o.uit} (${lines.length - 1} entries)`);
      } else {
        out(text.trimEnd());
      }
      return 0;
    }

    // verify
    if (o.bundel !== undefined) {
      let text: string;
      try {
        text = readFileSync(o.bundel, "utf8");
      } catch {
        throw new CannotCheck(`bundel niet te lezen: ${o.bundel}`);
      }
      const v = verifyBundle(text.split("\n"), verifiers);
      if (v.adoptie) {
        out(`LET OP: de keten is op ${v.adoptie.tijdstip} geadopteerd vanaf seq ${v.adoptie.seq + 1}: de entries 1 t/m ${v.adoptie.seq} zijn door een eerdere versie verwijderd zonder ondertekend retentierecord.`);
      }
      if (v.herstel) out(`LET OP: het checkpoint is een herstelrecord: de keten ging na een teruggezette database terug van seq ${v.herstel.van} naar ${v.herstel.naar}.`);
      // The head's numbers, to compare with the anchor file and the e-mailed installation
      // checkpoint: the bundle proves its entries against its own head, never that the
      // head is still the tenant's newest (docs/audit-chain.md, "Offline verification").
      if (v.kop) out(`kop van de bundel: ${v.kop.soort}, boomgrootte ${v.kop.grootte}, nieuwste seq ${v.kop.seq}, root ${v.kop.root}`);
      // The installation checkpoint the header proves the head in: what the e-mailed one is compared with.
      if (v.installatie) out(`de kop staat in installatie-checkpoint grootte ${v.installatie.grootte}, root ${v.installatie.root} (blad ${v.installatie.index})`);
      else if (v.ok) out("de bundel bevat geen installatie-checkpoint dat de kop dekt (een export van een eerdere versie, of de kop is nieuwer dan het nieuwste installatie-checkpoint)");
      if (!v.ok) {
        out(`RESULTAAT: de bundel klopt NIET: ${v.fout}`);
        return 1;
      }
      out(`RESULTAAT: de bundel van tenant ${v.tenantId} klopt (${v.entries} entries${v.bewijs ? ", inclusiebewijs klopt" : ""}) tegen haar eigen kop, tot en met seq ${v.kop!.seq}.`);
      out("  Of die kop de nieuwste van de tenant is, zegt de bundel niet: vergelijk hem met het ankerbestand en het nieuwste installatie-checkpoint uit de e-mail.");
      if (o.checkpoint === undefined) return 0;
      const m = compareWithMailedCheckpoint(v, await readCheckpointNote(o.checkpoint), verifiers);
      out(`installatie-checkpoint uit de e-mail: grootte ${m.grootte}, root ${m.root}`);
      if (m.uitkomst === "gelijk") {
        out(`RESULTAAT: de kop staat in het installatie-checkpoint uit de e-mail (dezelfde boom: grootte ${m.grootte}, root ${m.root}).`);
        out("  Of de kop toen de nieuwste van de tenant was, zegt ook dit niet: dat staat alleen in het ankerbestand.");
        return 0;
      }
      if (m.uitkomst === "afwijkend") {
        out(`RESULTAAT: de bundel klopt NIET met het installatie-checkpoint uit de e-mail: ${m.reden}`);
        return 1;
      }
      out(`RESULTAAT: niet te bewijzen tegen het installatie-checkpoint uit de e-mail: ${m.reden}`);
      return 2;
    }
    if (o.checkpoint === "-" && o["database-url"] === "-") throw new UsageError("--checkpoint - en --database-url - kunnen niet allebei standaardinvoer lezen");
    // PostgreSQL: the same checks, read through COPY (src/pg/offline.ts).
    const pg = await postgresUrl(o, env);
    await refuseNewerDatabase(pg, dbPath);
    const pgOffline = pg ? await import("../pg/offline.ts") : null;
    out(`database:     ${pg ? redactUrl(pg) : dbPath}`);
    out(`ankerbestand: ${anchorPath}`);
    if (o.checkpoint !== undefined) {
      const note = await readCheckpointNote(o.checkpoint);
      const w =
        pg && pgOffline
          ? await onPostgres(pg, () => pgOffline.verifyAgainstInstallationCheckpointPg(pg, anchorPath, note, verifiers))
          : await verifyAgainstInstallationCheckpoint(dbPath, anchorPath, note, verifiers);
      out(`installatie-checkpoint: ${w.grootte} records`);
      if (w.fout) out(`  FOUT: ${w.fout}`);
      if (w.verdict) {
        out("tegen het installatie-checkpoint:");
        printVerdict({ ...w.verdict, waarschuwingen: [] }, out);
      }
      // And the whole check, as verify without --checkpoint: what was signed after the checkpoint must be there too.
      out("tegen het ankerbestand zoals het nu is:");
      const whole = printVerdict(w.volledig, out);
      if (w.fout === undefined && !whole) out("  FOUT: de database klopt niet met wat na het checkpoint is ondertekend (zie hierboven)");
      out(w.ok ? "RESULTAAT: database en ankerbestand bevatten de ondertekende toestand van het checkpoint." : "RESULTAAT: database en ankerbestand bevatten de toestand van het checkpoint NIET.");
      return w.ok ? 0 : 1;
    }
    const v = pg && pgOffline ? await onPostgres(pg, () => pgOffline.verifyInstallationPg(pg, anchorPath, verifiers, { workers: 2 })) : await verifyDatabase(dbPath, anchorPath, verifiers);
    let ok = printVerdict(v, out);
    // Without the file nothing was checked against a signature: never "klopt". (The
    // service's audit-verificatie calls it bestand-ontbreekt only once the database
    // refers to it: a new installation has no file before its first audit-anker run.)
    if (!v.probleem && !existsSync(anchorPath)) {
      out(`  ANKERBESTAND: ankerbestand ontbreekt: ${anchorPath}; niets kon tegen een handtekening worden gecontroleerd`);
      ok = false;
    }
    out(ok ? "RESULTAAT: de database klopt met het ankerbestand." : "RESULTAAT: de database klopt NIET met het ankerbestand.");
    return ok ? 0 : 1;
  } catch (e) {
    if (e instanceof UsageError || e instanceof OptionError) {
      err(`${e.message}\n${HELP[sub]}`);
      return 2;
    }
    if (e instanceof CannotCheck || e instanceof NoteKeyError) {
      err(`${SIGNING.has(sub) ? `nachtwacht ${sub}: niet mogelijk` : "controle niet mogelijk"}: ${e instanceof NoteKeyError ? `een sleutel ${e.message}` : e.message}`);
      return 2;
    }
    err(`nachtwacht ${sub}: ${e instanceof Error ? e.message : String(e)}`);
    return 2;
  }
}

if (import.meta.main) {
  runAuditCommand(Bun.argv.slice(2), process.env, (s) => writeStdout(s + "\n"), (s) => console.error(s)).then((code) => process.exit(code));
}
