// audit-retentie: deletes audit entries older than AUDIT_RETENTIE_DAGEN,
// per tenant only a prefix of the chain, and records where each chain was cut as the
// tenant's retention anchor so audit-verificatie still succeeds afterwards.
import { deleteOldAuditEntries, retentionBoundary, type RetentionOptions } from "../audit/retention.ts";
import { AnchorFileError } from "../audit/anchoring.ts";
import { auditKeys } from "../audit/keys.ts";
import { workerCount } from "../audit/verify-parallel.ts";
import type { Deps } from "../deps.ts";
import { defineJob, type JobResult } from "./job.ts";

export type RetentieBody = {
  ok: boolean;
  verwijderd: number;
  retentieDagen: number;
  grens: string;
  /** 409 only: why nothing was deleted. */
  reden?: "database-teruggezet" | "bestand-gewijzigd";
  fout?: string;
};

export async function runAuditRetentie(deps: Deps, now: Date, o: RetentionOptions = {}): Promise<JobResult<RetentieBody>> {
  const retentieDagen = deps.config.auditRetentieDagen;
  const grens = retentionBoundary(now, retentieDagen);
  const { sqlite, path: dbPath } = deps.store;
  const workers = workerCount((sqlite.query("SELECT count(*) AS n FROM audit_entries").get() as { n: number }).n);
  const signing = { path: deps.config.auditAnkerBestand, keys: auditKeys(deps.config), retentieDagen, dbPath, workers };
  let result;
  try {
    result = await deleteOldAuditEntries(sqlite, grens, now, signing, o);
  } catch (e) {
    if (!(e instanceof AnchorFileError)) throw e;
    // The anchor file does not match the database: nothing is deleted until it is explained.
    await deps.alarms.raise({ type: "audit-chain-broken", message: `audit-retentie heeft niets verwijderd: ${e.message}.`, context: { reden: e.reden, grens } });
    return { status: 409, body: { ok: false, verwijderd: 0, retentieDagen, grens, reden: e.reden, fout: e.message } };
  }
  const { verwijderd, gestopt } = result;
  if (gestopt.length > 0) {
    // The old part of these chains does not check out: it stays as evidence, and the
    // next audit-verificatie reports it as well.
    await deps.alarms.raise({
      type: "audit-chain-broken",
      message: `audit-retentie heeft bij ${gestopt.length} tenant(s) oude entries laten staan omdat de hashketen daar niet klopt.`,
      context: { gestopt: gestopt.slice(0, 50), aantal: gestopt.length, grens },
    });
  }
  return { status: 200, body: { ok: true, verwijderd, retentieDagen, grens } };
}

const RETENTIE_SCHEMA = {
  type: "object",
  required: ["ok", "verwijderd", "retentieDagen", "grens"],
  properties: {
    ok: { type: "boolean" },
    verwijderd: { type: "integer", description: "Aantal verwijderde audit-entries." },
    retentieDagen: { type: "integer", description: "Toegepaste bewaartermijn in dagen (AUDIT_RETENTIE_DAGEN)." },
    grens: { type: "string", format: "date-time", description: "now − retentieDagen × 24 h; entries van vóór dit moment zijn verwijderd." },
    reden: { type: "string", enum: ["database-teruggezet", "bestand-gewijzigd"], description: "Alleen bij 409: waarom niets is verwijderd." },
    fout: { type: "string" },
  },
};

export const auditRetentieJob = defineJob({
  name: "audit-retentie",
  summary: "Verwijdert audit-entries ouder dan AUDIT_RETENTIE_DAGEN",
  description:
    "Controleert eerst alles wat audit-verificatie controleert; daarna verwijdert het per tenant het begin van de hashketen tot de " +
    "eerste entry die niet ouder is dan `grens` (nooit een gat), in kleine schrijftransacties, met per batch en tenant een " +
    "ondertekend retentierecord (volgnummer, hash en tijdstip van de laatst verwijderde entry, grens, bewaartermijn, de compacte " +
    "boom op dat punt) in AUDIT_ANKER_BESTAND en de database. Een keten die niet klopt, blijft staan als bewijs (200 met alarm " +
    "`audit-chain-broken`); een ankerbestand dat niet met de database klopt: 409, niets verwijderd, alarm.",
  run: (deps, now) => runAuditRetentie(deps, now),
  openapi: {
    responses: {
      200: { description: "Verwijderd.", schema: RETENTIE_SCHEMA },
      409: { description: "Het ankerbestand klopt niet met de database: niets verwijderd.", schema: RETENTIE_SCHEMA },
    },
  },
});
