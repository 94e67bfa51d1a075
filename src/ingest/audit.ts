// POST /api/audit: a batch of audit entries from the host application, appended to the
// tenants' chains in one transaction. The application never computes seq or hash;
// nachtwacht does, as for every other writer (src/audit/chain.ts appendEntries). An
// entry with a `sleutel` is stored once per tenant: a retried batch gets the same
// receipts, other content under a used sleutel is refused (409), and nothing of a
// refused batch is stored. These rules are decided here for both stores
// (planAuditBatch, completeAuditBatch); PostgreSQL's reads and writes are in
// src/pg/ingest.ts.
import type { Database } from "bun:sqlite";
import { t, type Static } from "elysia";
import { appendEntries, canonicalJson, sha256Hex, type AppendedEntry, type ChainInput } from "../audit/chain.ts";
import { dateTime, integer, positiveIntegerPattern, text } from "../jobs/schema.ts";
import { Refusal } from "./refusal.ts";
import { isExistingMoment, retentionBoundary } from "../time.ts";

export const MAX_BATCH_ENTRIES = 1000;
/** The request body's limit: 1 MiB. */
export const MAX_BATCH_BYTES = 1024 * 1024;
/** One entry's details as canonical JSON, at most: 64 KiB. */
export const MAX_DETAILS_BYTES = 64 * 1024;
/** How deeply details may nest (objects and arrays). */
export const MAX_DETAILS_DEPTH = 32;
/** How far in the future a `tijdstip` may lie: clocks differ a little, not more. */
export const MAX_FUTURE_MS = 60_000;

/**
 * A moment as the write API takes it: ISO 8601 with date, time to the second and a zone
 * (Z or ±hh:mm). Without a zone the same text would mean another moment on another host.
 */
export const Moment = (description: string) =>
  dateTime({ pattern: "^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}(\\.\\d{1,9})?(Z|[+-]\\d{2}:\\d{2})$", description });

/** The largest tenant id: PostgreSQL's integer, which tenants.id is there. */
export const MAX_TENANT_ID = 2_147_483_647;

export const TenantId = integer({ minimum: 1, maximum: MAX_TENANT_ID, description: "De tenant (tenants.id)." });

/** A path's `{id}`: the same tenant ids as TenantId, written as digits. */
export const TenantIdPath = t.Object({
  id: t.String({
    pattern: positiveIntegerPattern(MAX_TENANT_ID, `een tenant-id: een geheel getal van 1 tot ${MAX_TENANT_ID}, in cijfers`),
    description: `De tenant (tenants.id): een geheel getal van 1 tot ${MAX_TENANT_ID}, in cijfers.`,
    example: "42",
  }),
});

export const AuditEntryInput = t.Object(
  {
    tenantId: TenantId,
    actor: text({ minLength: 1, maxLength: 200, description: "Wie het deed (gebruiker, systeem)." }),
    action: text({ minLength: 1, maxLength: 200, description: "Wat er gebeurde, bv. `factuur.verwijderd`." }),
    subject: text({ maxLength: 1000, description: "Waarop het betrekking had; mag leeg zijn." }),
    details: t.Optional(
      t.Object({}, { additionalProperties: true, description: `Vrije gegevens (JSON-object, ≤ ${MAX_DETAILS_BYTES / 1024} KiB, ≤ ${MAX_DETAILS_DEPTH} niveaus diep); standaard {}.` }),
    ),
    tijdstip: t.Optional(Moment("Wanneer het gebeurde (ISO 8601 met tijdzone); standaard nu, hoogstens een minuut in de toekomst.")),
    sleutel: t.Optional(
      text({
        minLength: 1,
        maxLength: 200,
        description: "Idempotentiesleutel, uniek per tenant: een herhaalde batch krijgt dezelfde ontvangstbewijzen en slaat niets dubbel op.",
      }),
    ),
  },
  { additionalProperties: false },
);

export const AuditBatch = t.Object(
  { entries: t.Array(AuditEntryInput, { minItems: 1, maxItems: MAX_BATCH_ENTRIES, description: `1 tot ${MAX_BATCH_ENTRIES} entries, in volgorde.` }) },
  { additionalProperties: false },
);
export type AuditBatch = Static<typeof AuditBatch>;

export const Receipt = t.Object({
  tenantId: integer(),
  seq: integer({ description: "Plaats in de keten van de tenant." }),
  id: integer({ description: "audit_entries.id" }),
  hash: t.String({ description: "SHA-256 van de entry (hex); wat checkpoints en `nachtwacht export --bewijs` bewijzen." }),
});
export type Receipt = Static<typeof Receipt>;

export const AuditBatchResult = t.Object({
  opgeslagen: integer({ description: "Entries die nu zijn opgeslagen." }),
  alBekend: integer({ description: "Entries met een sleutel die al was opgeslagen (een herhaalde batch): niet opnieuw opgeslagen." }),
  ontvangstbewijzen: t.Array(Receipt, { description: "Per entry, in de volgorde van de batch." }),
});
export type AuditBatchResult = Static<typeof AuditBatchResult>;

/** A `tijdstip` as stored (UTC, milliseconds); now when absent; Refusal 400 when more than a minute ahead. */
export function storedMoment(tijdstip: string | undefined, now: Date, field: string): string {
  if (tijdstip === undefined) return now.toISOString();
  // The schema's date-time check lets 2026-02-30 through, and Date would store 2026-03-02.
  if (!isExistingMoment(tijdstip)) throw new Refusal(400, `Veld ${field} is geen bestaand tijdstip.`);
  const at = new Date(tijdstip);
  if (at.getTime() > now.getTime() + MAX_FUTURE_MS) throw new Refusal(400, `Veld ${field} ligt meer dan een minuut in de toekomst.`);
  const stored = at.toISOString();
  // An offset can move 0000-01-01 into the year -1, stored as "-000001-…": not a moment
  // the chain's format (or a text comparison of moments) takes.
  if (!/^\d{4}-/.test(stored)) throw new Refusal(400, `Veld ${field} ligt vóór het jaar 0000 (in UTC).`);
  return stored;
}

/** Why details larger than MAX_DETAILS_BYTES are refused, whichever check finds it (detailsProblem, prepareAuditBatch). */
const DETAILS_TOO_LARGE = `is groter dan ${MAX_DETAILS_BYTES / 1024} KiB`;

/** A JSON number's decimal value as text, sign, digits and exponent normalised: `1.0`, `1e0` and `1` give the same. */
function decimalValue(source: string): string {
  const [, sign, int, frac = "", exp = "0"] = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(source)!;
  let digits = (int! + frac).replace(/^0+/, "");
  if (digits === "") return "0"; // -0 and 0.00 are zero, as the double is
  const trailing = digits.length - digits.replace(/0+$/, "").length;
  digits = digits.slice(0, digits.length - trailing);
  // An exponent of 16 digits or more puts a non-zero number (of at most 1 MiB of digits)
  // beyond any double (0 or Infinity): never the value of String(value). Not parsed: BigInt
  // of a 1 MiB exponent would hold the event loop for a third of a second.
  if (exp.replace(/^[+-]?0*/, "").length > 15) return `${sign}${digits}e${exp}`;
  return `${sign}${digits}e${BigInt(exp) - BigInt(frac.length) + BigInt(trailing)}`;
}

/**
 * The JSON numbers of a parsed body that JSON.parse could not keep as sent, by the
 * object or array holding them, with their key there (exactNumbers); detailsProblem
 * refuses them in details, inexactField in an entry's own fields (its tenantId).
 */
const inexact = new WeakMap<object, { key: string; source: string }>();

/**
 * The reviver of POST /api/audit's body: remembers a number whose double is another
 * decimal value than its source text (`1e-400` became 0, `0.1000000000000000000001`
 * 0.1), where String(value) and the source differ in value, not only in form (`1.0`,
 * `1e2`, `-0`, `0.10` are kept exactly). Stored silently changed, a retry with other
 * digits under the same sleutel would count as the same content.
 */
export function exactNumbers(this: object, key: string, value: unknown, context?: { source?: string }): unknown {
  const source = context?.source;
  if (typeof value !== "number" || source === undefined || surelyExact(value, source)) return value;
  if (String(value) !== source && !inexact.has(this) && (!Number.isFinite(value) || decimalValue(source) !== decimalValue(String(value)))) {
    inexact.set(this, { key, source });
  }
  return value;
}

/** The smallest positive double with full precision (2^-1022); below it a double holds fewer digits. */
const MIN_NORMAL = 2.2250738585072014e-308;

/**
 * Whether a number is surely kept as sent, told from its text alone: zero, or at most 15
 * significant digits (which a double keeps exactly, DBL_DIG) in its normal range. Most
 * numbers: so a batch of `1e1`s does not take decimalValue's slow path per number (a 1 MiB
 * body of them held the event loop ~270 ms).
 */
function surelyExact(value: number, source: string): boolean {
  if (!Number.isFinite(value)) return false;
  let digits = 0;
  let zeros = 0;
  let leading = true;
  for (let i = 0; i < source.length; i++) {
    const c = source.charCodeAt(i);
    if (c === 101 || c === 69) break; // e, E: the exponent follows
    if (c < 48 || c > 57) continue; // the sign and the point
    if (c === 48) {
      if (!leading) zeros++;
      continue;
    }
    leading = false;
    digits += zeros + 1;
    zeros = 0;
  }
  return digits === 0 || (digits <= 15 && Math.abs(value) >= MIN_NORMAL);
}

/**
 * A number token a double may not keep: one with an exponent, or with 16 or more digits
 * and dots (up to 15 of them, without exponent, are at most 15 significant digits between
 * 1e-14 and 1e15, which a double keeps exactly). At a value's place, after `:`, `,` or `[`;
 * text inside strings can match too, which only costs the reviver's time.
 */
const MAYBE_INEXACT = /[:,[]\s*-?\d(?:[\d.]{15}|[\d.]*[eE])/;

/**
 * The write API's JSON.parse (POST /api/audit, POST /api/inlogpogingen): with
 * exactNumbers only when a number in the text may need it. The reviver is a call per value: on 1 MiB of empty objects it took the parse
 * from 20 to 90–130 ms (bench/details-refusal.ts); most bodies hold no such number.
 */
export function parseAuditBody(text: string): unknown {
  if (!MAYBE_INEXACT.test(text)) return JSON.parse(text);
  try {
    return JSON.parse(text, exactNumbers);
  } catch (e) {
    // The reviver's recursion ran out of stack (some thousands of levels; the plain parse
    // takes hundreds of thousands): nested far deeper than MAX_DETAILS_DEPTH, which is
    // refused naming that, not as "no valid JSON".
    if (e instanceof RangeError) return JSON.parse(text);
    throw e;
  }
}

/** How much of a refused number the refusal shows. */
export const MAX_NUMBER_SHOWN = 40;

/** A number JSON.parse changed, as sent but cut short (it may be most of a 1 MiB body), and why it is refused. */
const notKept = (source: string) =>
  `het getal ${source.length > MAX_NUMBER_SHOWN ? `${source.slice(0, MAX_NUMBER_SHOWN)}…` : source}, dat niet exact kan worden bewaard (een JSON-getal wordt een double: ongeveer 17 cijfers, niet kleiner dan 5e-324)`;

/** What is wrong with a number of details, if anything; `source` as sent when JSON.parse changed it (exactNumbers). */
function numberProblem(v: number, source?: string): string | null {
  if (!Number.isFinite(v)) return "bevat een getal buiten het bereik van JSON-getallen (±1,8e308)";
  if (Number.isInteger(v) && !Number.isSafeInteger(v)) return "bevat een geheel getal buiten ±2^53 (9007199254740991) dat niet exact kan worden bewaard; stuur het als tekst";
  if (source !== undefined) return `bevat ${notKept(source)}; stuur het als tekst`;
  return null;
}

/**
 * What is wrong with a number among an object's own fields (not those of objects within
 * it), if anything: `tenantId 1.00000000000000000001` passes the schema as tenant 1, and
 * would be stored under it. Its field name and why, for a refusal that names the object.
 * Any number of the body the schema let through is in a details object or an entry's
 * (a login attempt's) own field: this and detailsProblem together see them all.
 */
export function inexactField(holder: object): string | null {
  const lost = inexact.get(holder);
  return lost === undefined ? null : `${lost.key} is ${notKept(lost.source)}`;
}

/**
 * What is wrong with an entry's details, if anything: nested deeper than
 * MAX_DETAILS_DEPTH, more values than fit in MAX_DETAILS_BYTES, or a number that
 * JSON.parse could not keep as sent (beyond ±1.8e308 it became Infinity, stored as null;
 * an integer beyond ±2^53 lost digits; more digits than a double keeps, or too small for
 * one: exactNumbers) — stored silently changed, and a retry with other digits would
 * count as the same content.
 */
export function detailsProblem(value: unknown): string | null {
  const stack: [unknown, number][] = [[value, 1]];
  // Every value costs at least 2 bytes of canonical JSON but one (itself and a comma or
  // bracket; by induction n values take ≥ 2n − 1), so more than MAX_DETAILS_BYTES / 2
  // of them cannot fit: refused by count before walking or copying them all (350,000
  // empty objects in a 1 MiB body held the event loop for 235 ms before canonicalJson's
  // size check refused them).
  let values = 1;
  while (stack.length > 0) {
    const [v, d] = stack.pop()!;
    if (typeof v === "number") {
      const problem = numberProblem(v);
      if (problem !== null) return problem;
      continue;
    }
    if (v === null || typeof v !== "object") continue;
    if (d > MAX_DETAILS_DEPTH) return `is dieper genest dan ${MAX_DETAILS_DEPTH} niveaus`;
    const lost = inexact.get(v);
    if (lost !== undefined) return numberProblem(Number(lost.source), lost.source);
    // An array as it is: Object.values copied one of 340,000 in ~200 ms (Bun 1.4.5).
    const children: readonly unknown[] = Array.isArray(v) ? v : Object.values(v);
    values += children.length;
    if (values > MAX_DETAILS_BYTES / 2) return DETAILS_TOO_LARGE;
    for (const child of children) stack.push([child, d + 1]);
  }
  return null;
}

/**
 * An entry as it will be chained; with a sleutel, its `key` holds that sleutel and the
 * SHA-256 of the entry as sent (`inhoud`), stored in the entry's row.
 */
export interface Prepared extends ChainInput {
  /**
   * Set when its tijdstip lies before the retention period (AUDIT_RETENTIE_DAGEN, this
   * many days): refused if the batch would append it (planAuditBatch), answered with its
   * receipt if its sleutel is stored with the same content.
   */
  pastRetention?: number;
}

/**
 * The checks that need no database, done before the transaction: when (≤ a minute
 * ahead; with `retentieDagen`, entries before the retention period are marked), the
 * details' depth and size, and the canonical forms. Refusal 400 names the entry by index
 * and field.
 */
export function prepareAuditBatch(batch: AuditBatch, now: Date, retentieDagen?: number): Prepared[] {
  const oldest = retentieDagen === undefined ? null : retentionBoundary(now, retentieDagen);
  return batch.entries.map((e, i) => {
    const field = inexactField(e);
    if (field !== null) throw new Refusal(400, `Veld entries[${i}].${field}.`);
    const createdAt = storedMoment(e.tijdstip, now, `entries[${i}].tijdstip`);
    const details = e.details ?? {};
    const problem = detailsProblem(details);
    if (problem !== null) throw new Refusal(400, `Veld entries[${i}].details ${problem}.`);
    const text = canonicalJson(details);
    if (Buffer.byteLength(text, "utf8") > MAX_DETAILS_BYTES) throw new Refusal(400, `Veld entries[${i}].details ${DETAILS_TOO_LARGE}.`);
    const entry: Prepared = { tenantId: e.tenantId, createdAt, actor: e.actor, action: e.action, subject: e.subject, details: text };
    if (oldest !== null && createdAt < oldest) entry.pastRetention = retentieDagen;
    if (e.sleutel === undefined) return entry;
    // The content as sent: a retry without tijdstip is the same content, stored at its first time.
    const inhoud = sha256Hex(JSON.stringify([e.actor, e.action, e.subject, text, e.tijdstip === undefined ? null : createdAt]));
    return { ...entry, key: { sleutel: e.sleutel, inhoud } };
  });
}

/**
 * Refuses the request (422) at the first of `tenantIds` for which `exists` is false;
 * `field` names where the request gave it. Both stores ask their own database.
 */
export function refuseUnknownTenants(tenantIds: Iterable<number>, exists: (tenantId: number) => boolean, field: (tenantId: number) => string): void {
  for (const id of new Set(tenantIds)) {
    if (!exists(id)) throw new Refusal(422, `Onbekende tenant in ${field(id)}: ${id} bestaat niet (PUT /api/tenants/${id} maakt hem aan).`);
  }
}

/** Whether a tenant exists, asked of the SQLite database (refuseUnknownTenants). */
export function tenantExists(sqlite: Database): (tenantId: number) => boolean {
  const exists = sqlite.query("SELECT 1 FROM tenants WHERE id = ?");
  return (id) => exists.get(id) !== null;
}

/** The tenants a prepared batch names, in batch order. */
export const batchTenants = (prepared: readonly Prepared[]): number[] => prepared.map((p) => p.tenantId);

/** Refuses the batch (422) at its first entry whose tenant `exists` denies, naming that entry. */
export function refuseUnknownBatchTenants(prepared: readonly Prepared[], exists: (tenantId: number) => boolean): void {
  refuseUnknownTenants(batchTenants(prepared), exists, (id) => `entries[${prepared.findIndex((p) => p.tenantId === id)}].tenantId`);
}

/** A stored entry found by its sleutel: the content first stored under it, and its receipt. */
export interface StoredKey {
  inhoud: string;
  seq: number;
  id: number;
  hash: string;
}

/** What a batch comes to, decided against the keys already stored (planAuditBatch). */
export interface AuditPlan {
  /** Indexes in `prepared` of the entries to append, in batch order. */
  fresh: number[];
  /** Per entry: its receipt when its sleutel was already stored; the others are filled in once appended. */
  receipts: (Receipt | undefined)[];
  /** An entry with the (tenant, sleutel) of an earlier fresh entry of this batch, and that entry's index. */
  repeats: [index: number, first: number][];
}

/**
 * Decides, for both stores, which entries of a batch are stored now. `storedKey` answers
 * from audit_entries' sleutels as they are inside the write transaction (SQLite: under
 * the write lock; PostgreSQL: read before the chain locks, a key stored meanwhile
 * refusing the insert, and the call done again: storeAuditBatchPg).
 * Entries whose sleutel is stored with the same content are answered from that row; with
 * other content the batch is refused (409). The same sleutel twice in one batch counts as
 * a retry of the first. An entry to append that lies before the retention period is 400.
 */
export function planAuditBatch(prepared: readonly Prepared[], storedKey: (tenantId: number, sleutel: string) => StoredKey | undefined): AuditPlan {
  const receipts: (Receipt | undefined)[] = new Array(prepared.length);
  /** Index in `prepared` of the first entry with a (tenant, sleutel) in this batch. */
  const firstInBatch = new Map<string, number>();
  const fresh: number[] = [];
  const repeats: [index: number, first: number][] = [];
  // Only what is appended is refused for its age: an entry past the retention period
  // that is already stored (its answer lost, the batch sent again before audit-retentie
  // ran) gets its receipt, not a 400 saying nothing was stored.
  const append = (i: number, p: Prepared) => {
    if (p.pastRetention !== undefined) {
      // Appended, audit-retentie would delete it the next night, and with it its sleutel:
      // a retry after that night would store it again, and the newest ids deleted would
      // be given out again.
      throw new Refusal(400, `Veld entries[${i}].tijdstip ligt verder terug dan de bewaartermijn van ${p.pastRetention} dagen (AUDIT_RETENTIE_DAGEN): audit-retentie zou de entry meteen verwijderen.`);
    }
    fresh.push(i);
  };
  for (const [i, p] of prepared.entries()) {
    if (p.key === undefined) {
      append(i, p);
      continue;
    }
    const { sleutel, inhoud } = p.key;
    const row = storedKey(p.tenantId, sleutel);
    const first = firstInBatch.get(`${p.tenantId}\u0000${sleutel}`);
    const earlier = row?.inhoud ?? (first === undefined ? undefined : prepared[first]!.key!.inhoud);
    if (earlier !== undefined && earlier !== inhoud) {
      throw new Refusal(409, `Sleutel ${JSON.stringify(sleutel)} (entries[${i}]) is voor tenant ${p.tenantId} al gebruikt voor een andere entry; niets van deze batch is opgeslagen.`);
    }
    if (row) receipts[i] = { tenantId: p.tenantId, seq: row.seq, id: row.id, hash: row.hash };
    else if (first !== undefined) repeats.push([i, first]);
    else {
      firstInBatch.set(`${p.tenantId}\u0000${sleutel}`, i);
      append(i, p);
    }
  }
  return { fresh, receipts, repeats };
}

/** The entries a plan appends, in batch order. */
export const freshEntries = (prepared: readonly Prepared[], plan: AuditPlan): ChainInput[] => plan.fresh.map((i) => prepared[i]!);

/** The answer to a planned batch once its fresh entries are appended (`appended` in the order of plan.fresh). */
export function completeAuditBatch(prepared: readonly Prepared[], plan: AuditPlan, appended: readonly AppendedEntry[]): AuditBatchResult {
  const receipts = [...plan.receipts];
  for (const [k, i] of plan.fresh.entries()) {
    const a = appended[k]!;
    receipts[i] = { tenantId: a.tenantId, seq: a.seq, id: a.id, hash: a.hash };
  }
  for (const [i, first] of plan.repeats) receipts[i] = receipts[first];
  return { opgeslagen: plan.fresh.length, alBekend: prepared.length - plan.fresh.length, ontvangstbewijzen: receipts as Receipt[] };
}

/**
 * Stores a prepared batch on SQLite; runs inside the write transaction (writeTransaction,
 * src/db.ts), so a Refusal stores nothing. The PostgreSQL counterpart is storeAuditBatchPg
 * (src/pg/ingest.ts).
 */
export function storeAuditBatch(sqlite: Database, prepared: readonly Prepared[]): AuditBatchResult {
  refuseUnknownBatchTenants(prepared, tenantExists(sqlite));
  const stored = sqlite.query("SELECT inhoud, seq, id, hash FROM audit_entries WHERE tenant_id = ? AND sleutel = ?");
  const plan = planAuditBatch(prepared, (tenantId, sleutel) => (stored.get(tenantId, sleutel) as StoredKey | null) ?? undefined);
  return completeAuditBatch(prepared, plan, appendEntries(sqlite, freshEntries(prepared, plan)));
}
