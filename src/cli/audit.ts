// The operator's and auditor's audit commands (the code is in src/audit/):
//
//   nachtwacht key [--naam NAAM]
//   nachtwacht verify [--db FILE] [--bestand FILE] [--sleutel VKEY ...] [--checkpoint FILE|-] [--bundel FILE]
//   nachtwacht export --tenant N [--bewijs SEQ] [--uit FILE] [--db FILE] [--bestand FILE] [--sleutel VKEY ...]
//
// verify needs public keys only: --sleutel, else AUDIT_VERTROUWDE_SLEUTELS plus the
// public half of AUDIT_ANKER_SLEUTEL when those are in the environment. Exit codes:
// 0 in order, 1 not in order, 2 the check could not be made.
import { randomBytes } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { parseArgs } from "node:util";
import { generateKeyPair, NoteKeyError, parseSignerKey, parseVerifierKey, type Verifier } from "../audit/note.ts";
import { CannotCheck, exportBundle, verifyAgainstInstallationCheckpoint, verifyBundle, verifyDatabase } from "../audit/offline.ts";
import type { InstallationVerdict } from "../audit/verify-all.ts";
import { redenUitleg } from "../reports/shared.ts";

const HELP: Record<string, string> = {
  key:
    "gebruik: nachtwacht key [--naam NAAM]\n" +
    "  Maakt een nieuw Ed25519-sleutelpaar. De eerste regel (AUDIT_ANKER_SLEUTEL=…) is geheim en hoort alleen in het\n" +
    "  omgevingsbestand (root, 600); de publieke sleutel staat in het commentaar eronder en is voor auditors.\n" +
    "  --naam  sleutelnaam (geen spaties of '+'); standaard nachtwacht.<hostnaam>/<willekeurig>",
  verify:
    "gebruik: nachtwacht verify [--db BESTAND] [--bestand ANKERBESTAND] [--sleutel PUBLIEKE-SLEUTEL ...]\n" +
    "                         [--checkpoint BESTAND|-] [--bundel BESTAND]\n" +
    "  Controleert met alleen de publieke sleutel(s): de database tegen het ankerbestand (standaard),\n" +
    "  tegen een installatie-checkpoint uit de dagrapport-e-mail (--checkpoint), of een bundel van export (--bundel).\n" +
    "  Sleutels: --sleutel (herhaalbaar), anders AUDIT_VERTROUWDE_SLEUTELS en de publieke helft van AUDIT_ANKER_SLEUTEL.\n" +
    "  Standaard DATABASE_PATH en AUDIT_ANKER_BESTAND uit de omgeving.\n" +
    "  exit 0: alles klopt; 1: iets klopt niet; 2: controle niet mogelijk.",
  export:
    "gebruik: nachtwacht export --tenant N [--bewijs SEQ] [--uit BESTAND] [--db BESTAND] [--bestand ANKERBESTAND] [--sleutel …]\n" +
    "  Schrijft een bundel (JSON-regels: kop met checkpoint, retentierecord en publieke sleutels, dan de entries)\n" +
    "  die `nachtwacht verify --bundel` offline controleert. --bewijs voegt een RFC 6962-inclusiebewijs van één entry toe.\n" +
    "  exit 0: geschreven; 2: niet mogelijk.",
};

class UsageError extends Error {}

export function trustedKeys(given: string[] | undefined, env: Record<string, string | undefined>): Verifier[] {
  const vkeys = [...(given ?? [])];
  if (vkeys.length === 0) {
    vkeys.push(...(env.AUDIT_VERTROUWDE_SLEUTELS ?? "").split(/[\s,]+/).filter((k) => k !== ""));
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

export async function runAuditCommand(argv: string[], env: Record<string, string | undefined>, out: (s: string) => void, err: (s: string) => void): Promise<number> {
  const [sub, ...args] = argv;
  if (sub === undefined || !(sub in HELP)) {
    err(`onbekend commando ${JSON.stringify(sub ?? "")}; kies uit: ${Object.keys(HELP).join(", ")}`);
    return 2;
  }
  try {
    let parsed;
    try {
      parsed = parseArgs({
        args,
        options: {
          help: { type: "boolean", short: "h" },
          naam: { type: "string" },
          db: { type: "string" },
          bestand: { type: "string" },
          sleutel: { type: "string", multiple: true },
          checkpoint: { type: "string" },
          bundel: { type: "string" },
          tenant: { type: "string" },
          bewijs: { type: "string" },
          uit: { type: "string" },
        },
        strict: true,
      });
    } catch (e) {
      throw new UsageError(e instanceof Error ? e.message : String(e));
    }
    const o = parsed.values;
    if (o.help) {
      out(HELP[sub]!);
      return 0;
    }
    const dbPath = o.db ?? env.DATABASE_PATH ?? "./data/nachtwacht.db";
    const anchorPath = o.bestand ?? env.AUDIT_ANKER_BESTAND ?? "./data/audit-ankers.jsonl";

    if (sub === "key") {
      const naam = o.naam ?? `nachtwacht.${hostname().replace(/[^A-Za-z0-9.-]/g, "-") || "host"}/${randomBytes(4).toString("hex")}`;
      const { signerKey, verifierKey } = generateKeyPair(naam);
      out(`AUDIT_ANKER_SLEUTEL=${signerKey}`);
      out(`# publieke sleutel (voor auditors en nachtwacht verify --sleutel): ${verifierKey}`);
      return 0;
    }

    const verifiers = trustedKeys(o.sleutel, env);

    if (sub === "export") {
      if (o.tenant === undefined || !/^[1-9][0-9]*$/.test(o.tenant)) throw new UsageError("--tenant N is verplicht (een tenant-id)");
      if (o.bewijs !== undefined && !/^[1-9][0-9]*$/.test(o.bewijs)) throw new UsageError("--bewijs SEQ moet een volgnummer zijn");
      const lines = await exportBundle(dbPath, anchorPath, Number(o.tenant), verifiers, o.bewijs === undefined ? undefined : Number(o.bewijs));
      const text = lines.join("\n") + "\n";
      if (o.uit) {
        writeFileSync(o.uit, text);
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
      if (v.ok) out(`RESULTAAT: de bundel van tenant ${v.tenantId} klopt (${v.entries} entries${v.bewijs ? ", inclusiebewijs klopt" : ""}).`);
      else out(`RESULTAAT: de bundel klopt NIET: ${v.fout}`);
      return v.ok ? 0 : 1;
    }
    out(`database:     ${dbPath}`);
    out(`ankerbestand: ${anchorPath}`);
    if (o.checkpoint !== undefined) {
      let note: string;
      try {
        note = o.checkpoint === "-" ? await new Response(Bun.stdin.stream()).text() : readFileSync(o.checkpoint, "utf8");
      } catch {
        throw new CannotCheck(`checkpoint niet te lezen: ${o.checkpoint}`);
      }
      // An e-mail client may add blank lines or spaces around the block: the note itself ends after its signature lines.
      note = note.replace(/\r\n/g, "\n").trim() + "\n";
      const w = await verifyAgainstInstallationCheckpoint(dbPath, anchorPath, note, verifiers);
      out(`installatie-checkpoint: ${w.grootte} records`);
      if (w.fout) out(`  FOUT: ${w.fout}`);
      const ok = w.ok && (w.verdict ? printVerdict(w.verdict, out) : true);
      out(ok ? "RESULTAAT: database en ankerbestand bevatten de ondertekende toestand van het checkpoint." : "RESULTAAT: database en ankerbestand bevatten de toestand van het checkpoint NIET.");
      return ok ? 0 : 1;
    }
    const v = await verifyDatabase(dbPath, anchorPath, verifiers);
    const ok = printVerdict(v, out);
    out(ok ? "RESULTAAT: de database klopt met het ankerbestand." : "RESULTAAT: de database klopt NIET met het ankerbestand.");
    return ok ? 0 : 1;
  } catch (e) {
    if (e instanceof UsageError) {
      err(`${e.message}\n${HELP[sub]}`);
      return 2;
    }
    if (e instanceof CannotCheck || e instanceof NoteKeyError) {
      err(`controle niet mogelijk: ${e.message}`);
      return 2;
    }
    err(`nachtwacht ${sub}: ${e instanceof Error ? e.message : String(e)}`);
    return 2;
  }
}

if (import.meta.main) {
  runAuditCommand(Bun.argv.slice(2), process.env, (s) => console.log(s), (s) => console.error(s)).then((code) => process.exit(code));
}
