// audit-anker: signs, per tenant whose chain grew, a checkpoint (C2SP tlog-checkpoint:
// tree size and RFC 6962 root over its entry hashes), and one installation checkpoint
// over every record in the anchor file; appends them to AUDIT_ANKER_BESTAND (the
// authority, fsynced) and copies them into audit_anchor_log. audit-verificatie then
// finds cut-off, recomputed or rolled-back chains; `nachtwacht verify` does the same
// offline with the public key alone. docs/audit-chain.md has the formats. The work is
// anchorAll on SQLite, anchorAllPg on PostgreSQL (the rules of both in
// src/audit/anchoring.ts); this file turns either's result into the same answer.
import { t, type Static } from "elysia";
import { AnchorFileError, anchorAll } from "../audit/anchoring.ts";
import { auditKeys } from "../audit/keys.ts";
import type { Deps } from "../deps.ts";
import { anchorAllPg } from "../pg/anchoring.ts";
import { KetenReden } from "./audit-verificatie.ts";
import { defineJob, type JobResult } from "./job.ts";
import { integer, nullable, enumOf } from "./schema.ts";

export const AuditAnkerBody = t.Object({
  ok: t.Boolean(),
  aantal: integer({ minimum: 0, description: "Aantal checkpoints dat deze run ondertekende." }),
  ongewijzigd: integer({ minimum: 0, description: "Tenants waarvan de keten sinds het laatste checkpoint niet groeide." }),
  bestand: t.String({ description: "AUDIT_ANKER_BESTAND." }),
  verificatieSleutel: t.String({ description: "De publieke sleutel waarmee alles te controleren is (note-formaat)." }),
  checkpoints: t.Array(t.Object({ tenantId: integer(), grootte: integer({ minimum: 0 }), root: t.String({ description: "base64" }) })),
  installatie: nullable(t.String(), { description: "Het ondertekende installatie-checkpoint van deze run (signed note); null als er niets veranderde." }),
  geweigerd: t.Array(t.Object({ tenantId: integer(), seq: integer(), reden: KetenReden }), {
    description: "Tenants die niet zijn ondertekend omdat hun nieuwe entries niet kloppen.",
  }),
  hersteld: integer({ minimum: 0, description: "Regels die een crash alleen in het bestand had achtergelaten, nu in de database gekopieerd." }),
  reden: t.Optional(enumOf(["database-teruggezet", "bestand-gewijzigd"], { description: "Alleen als niets is ondertekend omdat het ankerbestand niet met de database klopt." })),
  fout: t.Optional(t.String({ description: "De toelichting bij `reden`." })),
});
export type AuditAnkerBody = Static<typeof AuditAnkerBody>;

export async function runAuditAnker(deps: Deps, _now: Date): Promise<JobResult<AuditAnkerBody>> {
  const keys = auditKeys(deps.config);
  const bestand = deps.config.auditAnkerBestand;
  const base = { bestand, verificatieSleutel: keys.signer.verifierKey };
  const { store } = deps;
  let r;
  try {
    r = store.kind === "pg" ? await anchorAllPg(store.sql, bestand, keys) : await anchorAll(store.sqlite, store.path, bestand, keys);
  } catch (e) {
    if (!(e instanceof AnchorFileError)) throw e;
    await deps.alarms.raise({
      type: "audit-chain-broken",
      message: `audit-anker heeft niets ondertekend: ${e.message}.`,
      context: { reden: e.reden, bestand },
    });
    return {
      status: 409,
      body: { ok: false, aantal: 0, ongewijzigd: 0, ...base, checkpoints: [], installatie: null, geweigerd: [], hersteld: 0, reden: e.reden, fout: e.message },
    };
  }
  if (r.refused.length > 0) {
    await deps.alarms.raise({
      type: "audit-chain-broken",
      message: `audit-anker heeft ${r.refused.length} tenant(s) niet ondertekend omdat hun nieuwe audit-entries niet kloppen.`,
      context: { geweigerd: r.refused.slice(0, 50) },
    });
  }
  return {
    status: r.refused.length > 0 ? 409 : 200,
    body: {
      ok: r.refused.length === 0,
      aantal: r.checkpoints.length,
      ongewijzigd: r.unchanged,
      ...base,
      checkpoints: r.checkpoints.map((c) => ({ tenantId: c.tenantId, grootte: c.size, root: c.root })),
      installatie: r.installatie,
      geweigerd: r.refused,
      hersteld: r.hersteld,
    },
  };
}

export const auditAnkerJob = defineJob({
  name: "audit-anker",
  summary: "Ondertekent per tenant een checkpoint van de auditketen, plus één installatie-checkpoint",
  description:
    "Voor elke tenant waarvan de keten groeide: een C2SP tlog-checkpoint (grootte = nieuwste volgnummer, RFC 6962-root over de " +
    "entry-hashes), Ed25519-ondertekend met AUDIT_ANKER_SLEUTEL; daarna één installatie-checkpoint over alle records in het " +
    "ankerbestand. Alles wordt aan AUDIT_ANKER_BESTAND toegevoegd (fsync) en in de database gekopieerd. 409 met alarm " +
    "(`audit-chain-broken`) wanneer nieuwe entries van een tenant niet kloppen (die tenant wordt niet ondertekend) of wanneer het " +
    "ankerbestand meer bevat dan de database kent (`database-teruggezet`).",
  run: (deps, now) => runAuditAnker(deps, now),
  responses: {
    200: { description: "Checkpoints ondertekend en vastgelegd.", schema: AuditAnkerBody },
    409: { description: "Een tenant geweigerd, of de database is ouder dan het ankerbestand.", schema: AuditAnkerBody },
  },
});
