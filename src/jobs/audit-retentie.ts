// audit-retentie (contract §3): deletes audit entries older than AUDIT_RETENTIE_DAGEN,
// per tenant only a prefix of the chain, and records where each chain was cut as the
// tenant's retention anchor so audit-verificatie still succeeds afterwards.
import { deleteOldAuditEntries, retentionBoundary, type RetentionOptions } from "../audit/retention.ts";
import { auditKeys } from "../audit/keys.ts";
import type { Deps } from "../deps.ts";
import { defineJob, type JobResult } from "./job.ts";

export type RetentieBody = {
  ok: true;
  verwijderd: number;
  retentieDagen: number;
  grens: string;
};

export async function runAuditRetentie(deps: Deps, now: Date, o: RetentionOptions = {}): Promise<JobResult<RetentieBody>> {
  const retentieDagen = deps.config.auditRetentieDagen;
  const grens = retentionBoundary(now, retentieDagen);
  const signing = { path: deps.config.auditAnkerBestand, keys: auditKeys(deps.config), retentieDagen };
  const { verwijderd, gestopt } = await deleteOldAuditEntries(deps.store.sqlite, grens, now, signing, o);
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
    ok: { type: "boolean", const: true },
    verwijderd: { type: "integer", description: "Aantal verwijderde audit-entries." },
    retentieDagen: { type: "integer", description: "Toegepaste bewaartermijn in dagen (AUDIT_RETENTIE_DAGEN)." },
    grens: { type: "string", format: "date-time", description: "now − retentieDagen × 24 h; entries van vóór dit moment zijn verwijderd." },
  },
};

export const auditRetentieJob = defineJob({
  name: "audit-retentie",
  summary: "Verwijdert audit-entries ouder dan AUDIT_RETENTIE_DAGEN",
  description:
    "Verwijdert per tenant het begin van de hashketen tot de eerste entry die niet ouder is dan `grens` " +
    "(nooit een gat), in kleine schrijftransacties. Per batch en tenant een ondertekend retentierecord (volgnummer, hash en " +
    "tijdstip van de laatst verwijderde entry, grens, bewaartermijn, de compacte boom op dat punt) in AUDIT_ANKER_BESTAND en de database. Een keten die in het te verwijderen deel niet klopt, blijft vanaf die plek staan (alarm).",
  run: (deps, now) => runAuditRetentie(deps, now),
  openapi: { responses: { 200: { description: "Verwijderd.", schema: RETENTIE_SCHEMA } } },
});
