// Checks a database against the anchor file alone (contract §4): for an operator with
// a suspicious database and the copy of AUDIT_ANKER_BESTAND from the backup. The
// anchors in the database itself are not trusted here; only the file's.
//
//   AUDIT_ANKER_SLEUTEL=... bun run verify-anchors -- --db ./data/nachtwacht.db --bestand ./audit-ankers.jsonl
//
// The key comes from the environment only, never from the command line (where any
// user could read it in the process list). The database is opened read-only.
//
// Per line: the signature holds under the key. Per tenant: every anchored seq is still
// in the chain with the anchored hash, and the whole chain verifies (hashes, links,
// sequence numbers, retention anchor). Exit 0 when all holds, 1 when anything does not,
// 2 when the check could not be made (missing file, unreadable database).
import { Database } from "bun:sqlite";
import { parseArgs } from "node:util";
import { parseAnchorLine, verifyAnchorSignature } from "../audit/anchors.ts";
import { verifyTenantChain, type AnchorRef } from "../audit/verify.ts";

export interface AnchorFileReport {
  ok: boolean;
  regels: number;
  /** Lines that are not a well-formed anchor, or whose signature fails. */
  fouten: string[];
  waarschuwingen: string[];
  tenants: { tenantId: number; ankers: number; intact: boolean; aantalEntries: number; fout?: { seq: number; reden: string } }[];
}

export async function verifyAgainstAnchorFile(sqlite: Database, fileText: AsyncIterable<string>, key: string | null): Promise<AnchorFileReport> {
  const fouten: string[] = [];
  const waarschuwingen: string[] = [];
  // Only seq and hash per anchor are kept; duplicate lines collapse.
  const perTenant = new Map<number, Map<number, string>>();
  let regels = 0;
  let n = 0;
  for await (const raw of fileText) {
    n++;
    const line = raw.trim();
    if (line === "") continue;
    regels++;
    const a = parseAnchorLine(line);
    if (!a) {
      fouten.push(`regel ${n}: geen geldig anker`);
      continue;
    }
    if (key !== null && !verifyAnchorSignature(key, a, a.handtekening)) {
      fouten.push(
        `regel ${n}: handtekening ${a.handtekening === null ? "ontbreekt" : "ongeldig"} (tenant ${a.tenantId}, seq ${a.seq})`,
      );
      continue;
    }
    let m = perTenant.get(a.tenantId);
    if (!m) perTenant.set(a.tenantId, (m = new Map()));
    const seen = m.get(a.seq);
    if (seen !== undefined && seen !== a.hash) {
      fouten.push(`regel ${n}: tenant ${a.tenantId} seq ${a.seq} staat eerder in het bestand met een andere hash`);
      continue;
    }
    m.set(a.seq, a.hash);
  }
  if (key === null) {
    waarschuwingen.push("AUDIT_ANKER_SLEUTEL is niet gezet: de handtekeningen in het bestand zijn niet gecontroleerd.");
  }

  const retention = sqlite.query("SELECT seq, hash FROM audit_retention_anchors WHERE tenant_id = ?");
  const tenants: AnchorFileReport["tenants"] = [];
  for (const [tenantId, m] of [...perTenant].sort((a, b) => a[0] - b[0])) {
    const retentionAnchor = retention.get(tenantId) as AnchorRef | null;
    const headAnchors: AnchorRef[] = [...m].map(([seq, hash]) => ({ seq, hash }));
    // An anchor exactly at the retention point can still be compared: retention
    // recorded the hash of the last entry it deleted.
    if (retentionAnchor) {
      const atCut = m.get(retentionAnchor.seq);
      if (atCut !== undefined && atCut !== retentionAnchor.hash) {
        fouten.push(`tenant ${tenantId}: het retentie-anker (seq ${retentionAnchor.seq}) wijkt af van het anker in het bestand`);
      }
    }
    const r = verifyTenantChain(sqlite, tenantId, { retentionAnchor, headAnchors });
    tenants.push({
      tenantId,
      ankers: m.size,
      intact: r.intact,
      aantalEntries: r.aantalEntries,
      ...(r.fout ? { fout: { seq: r.fout.seq, reden: r.fout.reden } } : {}),
    });
  }
  if (regels === 0) fouten.push("het ankerbestand bevat geen ankers");
  const unanchored = (sqlite.query("SELECT DISTINCT tenant_id FROM audit_entries").values() as [number][]).filter(
    ([id]) => !perTenant.has(id),
  ).length;
  if (unanchored > 0) {
    waarschuwingen.push(`${unanchored} tenant(s) met audit-entries hebben geen anker in het bestand en zijn niet tegen het bestand gecontroleerd.`);
  }
  return { ok: fouten.length === 0 && tenants.every((t) => t.intact), regels, fouten, waarschuwingen, tenants };
}

async function* fileLines(path: string): AsyncIterable<string> {
  // Streamed: the file grows by a line per changed tenant per day.
  const decoder = new TextDecoder();
  let rest = "";
  const reader = Bun.file(path).stream().getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    rest += decoder.decode(value, { stream: true });
    let i: number;
    while ((i = rest.indexOf("\n")) >= 0) {
      yield rest.slice(0, i);
      rest = rest.slice(i + 1);
    }
  }
  rest += decoder.decode();
  if (rest !== "") yield rest;
}

const REASONS: Record<string, string> = {
  "hash-afwijkend": "de hash van een entry klopt niet met de inhoud",
  "koppeling-verbroken": "een entry verwijst niet naar de hash van de vorige",
  "volgnummer-gat": "er ontbreken volgnummers",
  "anker-afwijkend": "een entry wijkt af van het anker in het bestand (of van het retentie-anker)",
  "kop-ontbreekt": "de keten eindigt vóór een vastgelegd anker: de nieuwste entries zijn verwijderd",
};

async function main(): Promise<number> {
  const { values } = parseArgs({
    args: Bun.argv.slice(2),
    options: { db: { type: "string" }, bestand: { type: "string" }, help: { type: "boolean", short: "h" } },
    strict: true,
  });
  if (values.help) {
    console.log(
      "gebruik: AUDIT_ANKER_SLEUTEL=<sleutel> bun run verify-anchors -- --db <database> --bestand <ankerbestand>\n" +
        "  standaard: DATABASE_PATH en AUDIT_ANKER_BESTAND uit de omgeving. De sleutel alleen via de omgeving.\n" +
        "  exit 0: alles klopt; 1: een afwijking; 2: controle niet mogelijk.",
    );
    return 0;
  }
  const dbPath = values.db ?? process.env.DATABASE_PATH ?? "./data/nachtwacht.db";
  const filePath = values.bestand ?? process.env.AUDIT_ANKER_BESTAND ?? "./data/audit-ankers.jsonl";
  const key = process.env.AUDIT_ANKER_SLEUTEL?.trim() || null;

  if (!(await Bun.file(filePath).exists())) {
    console.error(`ankerbestand niet gevonden: ${filePath}`);
    return 2;
  }
  let sqlite: Database;
  try {
    sqlite = new Database(dbPath, { readonly: true, strict: true });
    sqlite.query("SELECT 1 FROM audit_entries LIMIT 1").get();
  } catch (e) {
    console.error(`database niet te openen: ${dbPath}: ${e instanceof Error ? e.message : String(e)}`);
    return 2;
  }

  console.log(`database:     ${dbPath}`);
  console.log(`ankerbestand: ${filePath}`);
  const report = await verifyAgainstAnchorFile(sqlite, fileLines(filePath), key);
  sqlite.close();
  for (const w of report.waarschuwingen) console.log(`LET OP: ${w}`);
  console.log(`${report.regels} ankerregel(s), ${report.tenants.length} tenant(s)`);
  for (const t of report.tenants) {
    if (t.intact) console.log(`  tenant ${t.tenantId}: in orde (${t.ankers} anker(s), ${t.aantalEntries} entries)`);
    else console.log(`  tenant ${t.tenantId}: GEBROKEN bij seq ${t.fout!.seq}: ${t.fout!.reden} — ${REASONS[t.fout!.reden] ?? ""}`);
  }
  for (const f of report.fouten) console.log(`  FOUT: ${f}`);
  console.log(report.ok ? "RESULTAAT: de database klopt met het ankerbestand." : "RESULTAAT: de database klopt NIET met het ankerbestand.");
  return report.ok ? 0 : 1;
}

if (import.meta.main) {
  main().then(
    (code) => process.exit(code),
    (e) => {
      console.error(`verify-anchors: ${e instanceof Error ? e.message : String(e)}`);
      process.exit(2);
    },
  );
}
