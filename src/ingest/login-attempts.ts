// POST /api/inlogpogingen: a batch of login attempts (the BeveiligingsLog) from the host
// application, stored in one transaction; beveiligingslog-analyse reads them and
// beveiligingslog-retentie deletes them after their retention period. On PostgreSQL:
// storeLoginAttemptsPg (src/pg/ingest.ts).
import type { Database } from "bun:sqlite";
import { t, type Static } from "elysia";
import { integer, ipText, nullable, text } from "../jobs/schema.ts";
import { Refusal } from "./refusal.ts";
import { inexactField, MAX_BATCH_ENTRIES, Moment, refuseUnknownTenants, storedMoment, tenantExists, TenantId } from "./audit.ts";

/** The request body's limit: 256 KiB (a thousand attempts fit in about 150 KiB). */
export const MAX_ATTEMPTS_BYTES = 256 * 1024;

export const LoginAttemptInput = t.Object(
  {
    account: text({ minLength: 1, maxLength: 320, description: "Het account (gebruikersnaam of e-mailadres) waarmee werd ingelogd." }),
    ip: ipText({ minLength: 2, maxLength: 45, description: "IPv4- of IPv6-adres van de client." }),
    gelukt: t.Boolean(),
    reden: t.Optional(nullable(text({ maxLength: 200 }), { description: "Waarom het mislukte, bv. `wachtwoord`." })),
    tenantId: t.Optional(nullable(TenantId)),
    tijdstip: t.Optional(Moment("Wanneer (ISO 8601 met tijdzone); standaard nu, hoogstens een minuut in de toekomst.")),
  },
  { additionalProperties: false },
);

export const LoginAttemptBatch = t.Object(
  { pogingen: t.Array(LoginAttemptInput, { minItems: 1, maxItems: MAX_BATCH_ENTRIES, description: `1 tot ${MAX_BATCH_ENTRIES} inlogpogingen.` }) },
  { additionalProperties: false },
);
export type LoginAttemptBatch = Static<typeof LoginAttemptBatch>;

export const LoginAttemptResult = t.Object({
  opgeslagen: integer({ description: "Aantal opgeslagen pogingen." }),
  ids: t.Array(integer(), { description: "login_attempts.id per poging, in volgorde." }),
});
export type LoginAttemptResult = Static<typeof LoginAttemptResult>;

/** A login attempt as stored; `gelukt` as each store writes a boolean. */
export interface AttemptRow {
  tijdstip: string;
  account: string;
  ip: string;
  gelukt: boolean;
  reden: string | null;
  tenantId: number | null;
}

/** The rows as stored; checks that need no database (Refusal 400 naming the field). */
export function prepareLoginAttempts(batch: LoginAttemptBatch, now: Date): AttemptRow[] {
  return batch.pogingen.map((p, i) => {
    const field = inexactField(p);
    if (field !== null) throw new Refusal(400, `Veld pogingen[${i}].${field}.`);
    const tijdstip = storedMoment(p.tijdstip, now, `pogingen[${i}].tijdstip`);
    return { tijdstip, account: p.account, ip: p.ip, gelukt: p.gelukt, reden: p.reden ?? null, tenantId: p.tenantId ?? null };
  });
}

/** The tenants the attempts name (an attempt may name none), in batch order. */
export const attemptTenants = (rows: readonly AttemptRow[]): number[] => rows.flatMap((r) => (r.tenantId === null ? [] : [r.tenantId]));

/** Refuses the batch (422) at its first attempt whose tenant `exists` denies, naming that attempt. */
export function refuseUnknownAttemptTenants(rows: readonly AttemptRow[], exists: (tenantId: number) => boolean): void {
  refuseUnknownTenants(attemptTenants(rows), exists, (id) => `pogingen[${rows.findIndex((r) => r.tenantId === id)}].tenantId`);
}

/** Stores the attempts on SQLite; runs inside the write transaction, so an unknown tenant (422) stores nothing. */
export function storeLoginAttempts(sqlite: Database, rows: readonly AttemptRow[]): LoginAttemptResult {
  refuseUnknownAttemptTenants(rows, tenantExists(sqlite));
  const insert = sqlite.query("INSERT INTO login_attempts (tijdstip, account, ip, gelukt, reden, tenant_id) VALUES (?, ?, ?, ?, ?, ?) RETURNING id");
  const ids = rows.map((r) => (insert.get(r.tijdstip, r.account, r.ip, r.gelukt ? 1 : 0, r.reden, r.tenantId) as { id: number }).id);
  return { opgeslagen: ids.length, ids };
}
