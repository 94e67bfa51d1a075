// PUT /api/tenants/{id} and PUT /api/tenants/{id}/beheerders: the host application keeps
// nachtwacht's list of tenants and their administrators (the weekly report's recipients)
// current, without access to the database. Drizzle's builder: a few rows per call. What
// a call changes is decided here for both stores (newTenant, administratorChanges); the
// PostgreSQL reads and writes are in src/pg/ingest.ts.
import { and, count, eq, notInArray, sql } from "drizzle-orm";
import { t, type Static } from "elysia";
import { administrators, tenants, weeklyReportDeliveries } from "../../db/schema.ts";
import type { Db } from "../db.ts";
import { emailText, integer, text } from "../jobs/schema.ts";
import { Refusal } from "./refusal.ts";

export const MAX_ADMINISTRATORS = 1000;
export const MAX_TENANT_BYTES = 64 * 1024;
export const MAX_ADMINISTRATORS_BYTES = 512 * 1024;

export const TenantInput = t.Object(
  {
    naam: text({ minLength: 1, maxLength: 200, description: "Naam van de tenant, zoals rapporten die tonen." }),
    actief: t.Boolean({ description: "false: geen weekrapport meer; de audit-log blijft bewaard en gecontroleerd." }),
  },
  { additionalProperties: false },
);
export type TenantInput = Static<typeof TenantInput>;

export const TenantResult = t.Object({
  tenantId: integer(),
  naam: t.String(),
  actief: t.Boolean(),
  aangemaakt: t.String({ description: "Wanneer nachtwacht de tenant voor het eerst zag." }),
  nieuw: t.Boolean({ description: "true: met deze aanroep aangemaakt (HTTP 201)." }),
});
export type TenantResult = Static<typeof TenantResult>;

export const AdministratorInput = t.Object(
  {
    naam: text({ minLength: 1, maxLength: 200 }),
    email: emailText({ minLength: 3, maxLength: 320, description: "Uniek binnen de lijst (hoofdletters tellen niet)." }),
    actief: t.Boolean({ description: "false: krijgt geen weekrapport." }),
  },
  { additionalProperties: false },
);

export const AdministratorList = t.Object(
  {
    beheerders: t.Array(AdministratorInput, {
      maxItems: MAX_ADMINISTRATORS,
      description: "De volledige lijst: wie er niet (meer) in staat, wordt verwijderd, of op niet-actief gezet zolang de verzendadministratie van de weekrapporten (13 weken) naar hem verwijst.",
    }),
  },
  { additionalProperties: false },
);
export type AdministratorList = Static<typeof AdministratorList>;

export const Administrator = t.Object({ id: integer(), naam: t.String(), email: t.String(), actief: t.Boolean() });
export const AdministratorsResult = t.Object({
  tenantId: integer(),
  beheerders: t.Array(Administrator, { description: "Alle beheerders van de tenant na de wijziging: de lijst, en wie nog niet-actief bewaard blijft voor de verzendadministratie." }),
});
export type AdministratorsResult = Static<typeof AdministratorsResult>;

/** The row of a tenant seen for the first time: created now. */
export const newTenant = (tenantId: number, input: TenantInput, now: Date) => ({ id: tenantId, naam: input.naam, actief: input.actief, aangemaakt: now.toISOString() });

/** The answer: naam and actief as given, aangemaakt as stored (an update keeps it). */
export const tenantResult = (tenantId: number, input: TenantInput, aangemaakt: string, nieuw: boolean): TenantResult => ({ tenantId, ...input, aangemaakt, nieuw });

/** From this share of TENANTS_MAX on, the daily report says the limit is near (let-op). */
export const TENANTS_NEAR_MAX_PERCENT = 90;

/**
 * Where `aantal` tenants stand against TENANTS_MAX: the one rule for the write API (a new
 * tenant is refused at "actie"), the daily report's point and the warning at start.
 * "actie": no new tenant is created; "let-op": from TENANTS_NEAR_MAX_PERCENT of it on.
 */
export function tenantsLevel(aantal: number, max: number): "ok" | "let-op" | "actie" {
  if (aantal >= max) return "actie";
  if (aantal * 100 >= max * TENANTS_NEAR_MAX_PERCENT) return "let-op";
  return "ok";
}

/**
 * A new tenant while there are `aantal` already, at or past TENANTS_MAX (422): each
 * tenant costs every night (a line in the anchor file, a result in audit-verificatie's
 * answer) and every week (its reports), so whoever holds APP_SECRET must not be able to
 * create them without end. The count is the real one: an installation upgraded past a
 * lowered default holds more than the maximum.
 */
export const tooManyTenants = (tenantId: number, aantal: number, max: number) =>
  new Refusal(422, `Tenant ${tenantId} is niet aangemaakt: er zijn al ${aantal} tenants, en TENANTS_MAX is ${max}. Bestaande tenants bijwerken kan wel.`);

/** Creates or updates a tenant on SQLite; runs inside the write transaction. No tenant is created once tenantsLevel is "actie" (tooManyTenants). */
export function putTenant(db: Db, tenantId: number, input: TenantInput, now: Date, max: number): TenantResult {
  const existing = db.select({ aangemaakt: tenants.aangemaakt }).from(tenants).where(eq(tenants.id, tenantId)).get();
  if (existing) {
    db.update(tenants).set({ naam: input.naam, actief: input.actief }).where(eq(tenants.id, tenantId)).run();
    return tenantResult(tenantId, input, existing.aangemaakt, false);
  }
  const aantal = countTenants(db);
  if (tenantsLevel(aantal, max) === "actie") throw tooManyTenants(tenantId, aantal, max);
  const row = newTenant(tenantId, input, now);
  db.insert(tenants).values(row).run();
  return tenantResult(tenantId, input, row.aangemaakt, true);
}

/** The number of tenants on SQLite (countTenantsPg on PostgreSQL). */
export const countTenants = (db: Db): number => db.select({ n: count() }).from(tenants).get()!.n;

/** PUT …/beheerders for a tenant nachtwacht does not know (404). */
export const unknownTenant = (tenantId: number) => new Refusal(404, `Onbekende tenant ${tenantId}: maak hem eerst aan met PUT /api/tenants/${tenantId}.`);

type AdministratorValues = Static<typeof AdministratorInput>;

/** What a PUT of the list changes: each listed address updated or added, and the rest removed. */
export interface AdministratorChanges {
  /** Per listed address, in list order: the id of the row it updates, or null to add one. */
  steps: { update: number | null; values: AdministratorValues }[];
  /** Rows not in the list: deleted, or set inactive while a weekly report's delivery record (of the 13 weeks kept) refers to them. */
  deactivate: number[];
}

/**
 * Makes the tenant's administrators (`rows`, by id) the given list, matched by e-mail
 * address (case-insensitive): known ones are updated, new ones added, the rest removed:
 * deleted, or set inactive while a delivery record of the weekly report refers to them
 * (a later PUT deletes them once those are pruned). So a tenant never holds more than
 * the list and the last weeks' recipients: no one's address is kept after the
 * application dropped it, and a PUT's work and answer stay bounded (rows only set
 * inactive piled up: 300,000 made an empty PUT hold the service for 7 s). A duplicate
 * address in the list is 400.
 */
export function administratorChanges(rows: readonly { id: number; email: string }[], input: AdministratorList): AdministratorChanges {
  const listed = new Map<string, number>();
  for (const [i, b] of input.beheerders.entries()) {
    const key = b.email.toLowerCase();
    const first = listed.get(key);
    if (first !== undefined) throw new Refusal(400, `Veld beheerders[${i}].email komt al voor in beheerders[${first}].`);
    listed.set(key, i);
  }
  // One row per address is updated (the first); rows the host application wrote directly
  // may differ only in case, and those others are set inactive like any row not listed.
  const known = new Map<string, number>();
  for (const a of rows) if (!known.has(a.email.toLowerCase())) known.set(a.email.toLowerCase(), a.id);
  const steps = input.beheerders.map((values) => ({ update: known.get(values.email.toLowerCase()) ?? null, values }));
  const deactivate = rows.filter((a) => !listed.has(a.email.toLowerCase()) || known.get(a.email.toLowerCase()) !== a.id).map((a) => a.id);
  return { steps, deactivate };
}

/**
 * PUT /api/tenants/{id}/beheerders on SQLite (administratorChanges); runs inside the
 * write transaction. An unknown tenant is 404, a duplicate address 400.
 */
export function putAdministrators(db: Db, tenantId: number, input: AdministratorList): AdministratorsResult {
  if (db.select({ id: tenants.id }).from(tenants).where(eq(tenants.id, tenantId)).get() === undefined) throw unknownTenant(tenantId);
  const ofTenant = () => db.select().from(administrators).where(eq(administrators.tenantId, tenantId)).orderBy(administrators.id).all();
  const changes = administratorChanges(ofTenant(), input);
  removeAdministrators(db, tenantId, changes);
  for (const s of changes.steps) {
    if (s.update !== null) db.update(administrators).set(s.values).where(eq(administrators.id, s.update)).run();
    else db.insert(administrators).values({ tenantId, ...s.values }).run();
  }
  return { tenantId, beheerders: ofTenant().map(({ id, naam, email, actief }) => ({ id, naam, email, actief })) };
}

/** The ids a PUT keeps: the rows it updated. Every other row of the tenant that existed before goes (AdministratorChanges.deactivate). */
export const keptIds = (changes: AdministratorChanges) => changes.steps.flatMap((s) => (s.update === null ? [] : [s.update]));

/**
 * Deletes the tenant's rows that a PUT does not keep and no delivery record refers to, and
 * sets the others inactive: two statements however many rows there are (bounded by the ids
 * kept, at most 1,000). Runs before the list's new rows are added.
 */
function removeAdministrators(db: Db, tenantId: number, changes: AdministratorChanges): void {
  if (changes.deactivate.length === 0) return;
  const kept = keptIds(changes);
  const notKept = and(eq(administrators.tenantId, tenantId), kept.length > 0 ? notInArray(administrators.id, kept) : undefined);
  const delivered = sql`EXISTS (SELECT 1 FROM ${weeklyReportDeliveries} WHERE ${weeklyReportDeliveries.administratorId} = ${administrators.id})`;
  db.delete(administrators).where(and(notKept, sql`NOT ${delivered}`)).run();
  db.update(administrators).set({ actief: false }).where(and(notKept, eq(administrators.actief, true))).run();
}
