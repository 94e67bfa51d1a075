// audit-retentie: deletes audit entries older than AUDIT_RETENTIE_DAGEN,
// per tenant only a prefix of the chain, and records where each chain was cut as the
// tenant's retention anchor so audit-verificatie still succeeds afterwards. The work is
// deleteOldAuditEntries on SQLite, deleteOldAuditEntriesPg on PostgreSQL (the rules of
// both in src/audit/retention.ts); this file turns either's result into the same answer.
import { t, type Static } from "elysia";
import { deleteOldAuditEntries, jobRetentionOptions, retentionBoundary, type RetentionOptions } from "../audit/retention.ts";
import { AnchorFileError } from "../audit/anchoring.ts";
import { auditKeys } from "../audit/keys.ts";
import type { Deps } from "../deps.ts";
import { deleteOldAuditEntriesPg } from "../pg/audit-retention.ts";
import { verificationWorkers } from "./audit-verificatie.ts";
import { defineJob, type JobResult } from "./job.ts";
import { clockReasonSchema, retentionClockRefusal } from "./retention-clock.ts";
import { dateTime, integer } from "./schema.ts";

const retentie = {
  retentieDagen: integer({ description: "Toegepaste bewaartermijn in dagen (AUDIT_RETENTIE_DAGEN)." }),
  grens: dateTime({ description: "now − retentieDagen × 24 h; entries van vóór dit moment zijn verwijderd." }),
};

/** How many tenants an answer or an alarm lists (held back, or stopped at a broken chain); the counts hold them all. */
const MAX_LISTED = 50;

/** 200: deleted (a chain that does not check out is left standing, with an alarm). */
export const RetentieOk = t.Object({
  ok: t.Literal(true),
  verwijderd: integer({ minimum: 0, description: "Aantal verwijderde audit-entries." }),
  ...retentie,
  achtergehouden: integer({
    minimum: 0,
    description:
      "Entries ouder dan `grens` die blijven staan achter een nieuwere entry eerder in hun keten (alleen het begin van een keten wordt verwijderd): " +
      "een entry met een tijdstip in de toekomst houdt ze elk jaar tegen, na de bewaartermijn. Meer dan 0: alarm `audit-retention-held`. " +
      "Niet meegeteld: ketens die niet kloppen (die blijven als bewijs staan, met alarm `audit-chain-broken`).",
  }),
  achtergehoudenBij: t.Array(
    t.Object({
      tenantId: integer(),
      aantal: integer({ minimum: 1, description: "Entries ouder dan `grens` die blijven staan." }),
      seq: integer({ description: "De eerste entry van de keten, die ze tegenhoudt: niet ouder dan `grens`." }),
      tijdstip: t.String({ description: "Haar created_at, zoals opgeslagen." }),
    }),
    { maxItems: MAX_LISTED, description: `Per tenant, hoogstens ${MAX_LISTED}, op tenant-id.` },
  ),
});

/** 409: the anchor file does not match the database, or the host clock looks ahead (retentionClockRefusal); nothing deleted. */
export const RetentieAfwijking = t.Object({
  ok: t.Literal(false),
  verwijderd: t.Literal(0),
  ...retentie,
  reden: clockReasonSchema(["database-teruggezet", "bestand-gewijzigd"] as const),
  fout: t.String({ description: "De toelichting bij `reden`." }),
});

export type RetentieBody = Static<typeof RetentieOk> | Static<typeof RetentieAfwijking>;

export async function runAuditRetentie(deps: Deps, now: Date, o: RetentionOptions = {}): Promise<JobResult<RetentieBody>> {
  const retentieDagen = deps.config.auditRetentieDagen;
  const grens = retentionBoundary(now, retentieDagen);
  // Deleting by a clock that runs ahead would delete entries inside the legal retention period.
  const refusal = await retentionClockRefusal(deps, "audit-retentie", grens);
  if (refusal !== null) return { status: 409, body: { ok: false, verwijderd: 0, retentieDagen, grens, ...refusal } };
  const { store } = deps;
  const signing = { path: deps.config.auditAnkerBestand, keys: auditKeys(deps.config), retentieDagen, workers: await verificationWorkers(store) };
  let result;
  try {
    result =
      store.kind === "pg"
        ? await deleteOldAuditEntriesPg(store.sql, grens, now, { ...signing, url: store.url }, o)
        : await deleteOldAuditEntries(store.sqlite, grens, now, { ...signing, dbPath: store.path }, jobRetentionOptions(deps, o));
  } catch (e) {
    if (!(e instanceof AnchorFileError)) throw e;
    // The anchor file does not match the database: nothing is deleted until it is explained.
    await deps.alarms.raise({ type: "audit-chain-broken", message: `audit-retentie heeft niets verwijderd: ${e.message}.`, context: { reden: e.reden, grens } });
    return { status: 409, body: { ok: false, verwijderd: 0, retentieDagen, grens, reden: e.reden, fout: e.message } };
  }
  const { verwijderd, gestopt, achtergehouden } = result;
  if (gestopt.length > 0) {
    // The old part of these chains does not check out: it stays as evidence, and the
    // next audit-verificatie reports it as well.
    await deps.alarms.raise({
      type: "audit-chain-broken",
      message: `audit-retentie heeft bij ${gestopt.length} tenant(s) oude entries laten staan omdat de hashketen daar niet klopt.`,
      context: { gestopt: gestopt.slice(0, MAX_LISTED), aantal: gestopt.length, grens },
    });
  }
  const aantal = achtergehouden.reduce((n, h) => n + h.aantal, 0);
  const achtergehoudenBij = achtergehouden.slice(0, MAX_LISTED);
  if (aantal > 0) {
    await deps.alarms.raise({
      type: "audit-retention-held",
      message: `audit-retentie liet bij ${achtergehouden.length} tenant(s) ${aantal} entries ouder dan de bewaartermijn staan: een nieuwere entry eerder in de keten houdt ze tegen.`,
      context: { achtergehoudenBij, aantal, grens },
    });
  }
  return { status: 200, body: { ok: true, verwijderd, retentieDagen, grens, achtergehouden: aantal, achtergehoudenBij } };
}

export const auditRetentieJob = defineJob({
  name: "audit-retentie",
  summary: "Verwijdert audit-entries ouder dan AUDIT_RETENTIE_DAGEN",
  description:
    "Controleert eerst alles wat audit-verificatie controleert; daarna verwijdert het per tenant het begin van de hashketen tot de " +
    "eerste entry die niet ouder is dan `grens` (nooit een gat), in kleine schrijftransacties, met per batch en tenant een " +
    "ondertekend retentierecord (volgnummer, hash en tijdstip van de laatst verwijderde entry, grens, bewaartermijn, de compacte " +
    "boom op dat punt) in AUDIT_ANKER_BESTAND en de database. Een keten die niet klopt, blijft staan als bewijs (200 met alarm " +
    "`audit-chain-broken`); een ankerbestand dat niet met de database klopt: 409, niets verwijderd, alarm. Loopt de klok van de host " +
    "zichtbaar voor (sinds de start van de dienst meer dan 10 minuten vooruitgezet, of bij PostgreSQL meer dan 10 s voor op de databaseserver): " +
    "409, niets verwijderd, alarm `clock-ahead`.",
  run: (deps, now) => runAuditRetentie(deps, now),
  responses: {
    200: { description: "Verwijderd.", schema: RetentieOk },
    409: { description: "Het ankerbestand klopt niet met de database, of de klok van de host loopt voor: niets verwijderd.", schema: RetentieAfwijking },
  },
});
