// The write API on PostgreSQL: POST /api/audit, POST /api/inlogpogingen, PUT
// /api/tenants/{id} and PUT /api/tenants/{id}/beheerders, each call one transaction
// with the same answers as on SQLite. What a call stores and what it refuses is decided
// in src/ingest/ (planAuditBatch, administratorChanges, …) for both stores; only the
// reads and writes are here.
//
// SQLite lets one writer in at a time; PostgreSQL runs these calls side by side, in this
// process and in others on the same database. Where a call reads what it then writes on,
// either the lock that makes that read final comes first (the tenant's row before its
// administrators are read), or a key the read missed refuses the write and the call is
// done again (a sleutel: storeAuditBatchPg). Each call's answer says what its COMMIT did,
// also when the connection broke at it (certainTransaction).
import type { SQL } from "bun";
import {
  batchTenants,
  completeAuditBatch,
  freshEntries,
  planAuditBatch,
  refuseUnknownBatchTenants,
  type AuditBatchResult,
  type Prepared,
  type StoredKey,
} from "../ingest/audit.ts";
import { attemptTenants, refuseUnknownAttemptTenants, type AttemptRow, type LoginAttemptResult } from "../ingest/login-attempts.ts";
import {
  administratorChanges,
  keptIds,
  newTenant,
  tenantsLevel,
  tooManyTenants,
  tenantResult,
  unknownTenant,
  type AdministratorList,
  type AdministratorsResult,
  type TenantInput,
  type TenantResult,
} from "../ingest/tenants.ts";
import { appendEntriesPg } from "./chain.ts";
import { certainTransaction, WRITE_API_ADVICE } from "./commit.ts";
import { driverError, HttpError } from "../http/errors.ts";
import { LOCK_LOGIN_IDS, LOCK_NAMESPACE, LOCK_TENANT_IDS, type PgStore } from "./store.ts";

/**
 * Whatever the server's default: every statement after a lock then reads a fresh
 * snapshot, which holds what the lock's previous holder committed.
 */
const READ_COMMITTED = "ISOLATION LEVEL READ COMMITTED";

/** One write-API call's transaction: READ COMMITTED, its outcome certain (certainTransaction). */
const writeCall = <T>(store: PgStore, body: (tx: SQL) => Promise<T>) => certainTransaction(store.sql, READ_COMMITTED, body, WRITE_API_ADVICE);

/**
 * Which of these tenants exist, in one query, their rows held FOR KEY SHARE until the
 * transaction ends: a tenant's DELETE then waits for the append and is refused once it
 * sees its entries (migration 0002, which does what the per-row foreign keys did). KEY
 * SHARE does not conflict with other appends' or with PUT /api/tenants' NO KEY UPDATE.
 */
async function existingTenants(tx: SQL, tenantIds: readonly number[]): Promise<Set<number>> {
  if (tenantIds.length === 0) return new Set();
  const rows: { id: number }[] = await tx`SELECT id FROM tenants WHERE id = ANY(${[...new Set(tenantIds)]}::int[]) ORDER BY id FOR KEY SHARE`;
  return new Set(rows.map((r) => r.id));
}

const keyOf = (tenantId: number, sleutel: string) => `${tenantId}:${sleutel}`;

/** The stored keys among the batch's (tenant, sleutel) pairs, in one query. */
async function storedKeys(tx: SQL, prepared: readonly Prepared[]): Promise<Map<string, StoredKey>> {
  const wanted = prepared.filter((p) => p.key !== undefined);
  const found = new Map<string, StoredKey>();
  if (wanted.length === 0) return found;
  const rows: { tenant_id: number; sleutel: string; inhoud: string; seq: string; id: string; hash: string }[] = await tx`
    SELECT e.tenant_id, e.sleutel, e.inhoud, e.seq, e.id, e.hash
    FROM audit_entries AS e
    JOIN unnest(${wanted.map((p) => p.tenantId)}::int[], ${wanted.map((p) => p.key!.sleutel)}::text[]) AS w (t, s) ON e.tenant_id = w.t AND e.sleutel = w.s`;
  for (const r of rows) found.set(keyOf(r.tenant_id, r.sleutel), { inhoud: r.inhoud, seq: Number(r.seq), id: Number(r.id), hash: r.hash });
  return found;
}

/**
 * POST /api/audit (storeAuditBatch on SQLite): a prepared batch in one transaction, so
 * a Refusal or any error stores nothing.
 *
 * The batch's keys are read before its tenants' chain locks are taken: a batch holds
 * those locks until it commits, and batches over many tenants wait for each other on
 * them, so what is read before them keeps the queue short (bench/pg-ingest-profile.ts:
 * the lookup was a sixth of the time under the locks). Two calls with the same (tenant,
 * sleutel) at the same time then both find no key; the second to commit meets the
 * unique index (tenant_id, sleutel) on inserting its entry (23505), the whole transaction is
 * rolled back — its entries with it — and the call is done again, now finding the first
 * one's key: the same receipt, or 409 for other content. Exactly once either way.
 */
export async function storeAuditBatchPg(store: PgStore, prepared: readonly Prepared[]): Promise<AuditBatchResult> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await storeAuditBatchOnce(store, prepared);
    } catch (e) {
      if (!isKeyRace(e)) throw e;
      // Nothing was stored; the same batch again will very likely go through.
      if (attempt >= KEY_RACE_ATTEMPTS) throw new HttpError(503, "Andere aanroepen sloegen steeds dezelfde sleutels op; niets van deze batch is opgeslagen. Probeer het opnieuw met dezelfde sleutels.", { "retry-after": "1" });
    }
  }
}

/** How often a batch is done again after losing a race for one of its keys; each loss means another call stored that key. */
const KEY_RACE_ATTEMPTS = 3;

/** A unique violation of audit_entries' sleutel index: another call stored one of this batch's keys meanwhile. */
function isKeyRace(e: unknown): boolean {
  const err = driverError(e);
  return err?.errno === "23505" && err.constraint === "audit_entries_sleutel_idx";
}

function storeAuditBatchOnce(store: PgStore, prepared: readonly Prepared[]): Promise<AuditBatchResult> {
  return writeCall(store, async (tx) => {
    const tenantIds = batchTenants(prepared);
    const existing = await existingTenants(tx, tenantIds);
    refuseUnknownBatchTenants(prepared, (id) => existing.has(id));
    const stored = await storedKeys(tx, prepared);
    const plan = planAuditBatch(prepared, (tenantId, sleutel) => stored.get(keyOf(tenantId, sleutel)));
    return completeAuditBatch(prepared, plan, await appendEntriesPg(tx, freshEntries(prepared, plan)));
  });
}

/** POST /api/inlogpogingen (storeLoginAttempts on SQLite), in one transaction: an unknown tenant (422) stores nothing. */
export function storeLoginAttemptsPg(store: PgStore, attempts: readonly AttemptRow[]): Promise<LoginAttemptResult> {
  return writeCall(store, async (tx) => {
    const existing = await existingTenants(tx, attemptTenants(attempts));
    refuseUnknownAttemptTenants(attempts, (id) => existing.has(id));
    // Held until the commit: beveiligingslog-analyse reads the highest id only when no
    // batch holds ids it has not committed (LOCK_LOGIN_IDS).
    await tx`SELECT pg_advisory_xact_lock_shared(${LOCK_NAMESPACE}, ${LOCK_LOGIN_IDS})`;
    // Ids increasing in batch order, as SQLite's inserts one by one give them: taken
    // from the identity's sequence first, since a multi-row INSERT … RETURNING
    // promises no order.
    const idRows: { id: string }[] = await tx`SELECT nextval(pg_get_serial_sequence('login_attempts', 'id')) AS id FROM generate_series(1, ${attempts.length})`;
    const ids = idRows.map((r) => Number(r.id)).sort((a, b) => a - b);
    const rows = attempts.map((a, i) => ({ id: ids[i]!, tijdstip: a.tijdstip, account: a.account, ip: a.ip, gelukt: a.gelukt, reden: a.reden, tenant_id: a.tenantId }));
    // One statement: a batch holds at most MAX_BATCH_ENTRIES (1,000) attempts, 7,000 parameters of PostgreSQL's 65,535.
    await tx`INSERT INTO login_attempts ${tx(rows)}`;
    return { opgeslagen: ids.length, ids };
  });
}

/**
 * PUT /api/tenants/{id} (putTenant on SQLite). Two first PUTs of one id at the same
 * time: the second's insert waits for the first's and then does nothing, and it
 * updates the row instead of failing on the primary key.
 */
export function putTenantPg(store: PgStore, tenantId: number, input: TenantInput, now: Date, max: number): Promise<TenantResult> {
  return writeCall(store, async (tx) => {
    const row = newTenant(tenantId, input, now);
    const [created] = (await tx`INSERT INTO tenants ${tx(row)} ON CONFLICT (id) DO NOTHING RETURNING aangemaakt`) as { aangemaakt: string }[];
    if (created) {
      // The id came from the application, not from the sequence: move the sequence past
      // it, as SQLite's AUTOINCREMENT does, or a tenant later inserted without an id (by
      // the host application, or a restore) would collide with it. setval is outside
      // transactions: these moves are serialised, so among API calls the sequence only
      // goes forward (another writer's nextval between the read and setval cannot be
      // shut out; that window is a statement long).
      await tx`SELECT pg_advisory_xact_lock(${LOCK_NAMESPACE}, ${LOCK_TENANT_IDS})`;
      // Under the same lock, so two instances' creations are counted one after the other (this one included).
      const [counted] = (await tx`SELECT count(*)::int AS n FROM tenants`) as { n: number }[];
      const before = counted!.n - 1;
      if (tenantsLevel(before, max) === "actie") throw tooManyTenants(tenantId, before, max);
      await tx`SELECT setval(seq, ${tenantId}) FROM (SELECT pg_get_serial_sequence('tenants', 'id')::regclass AS seq) AS s
        WHERE coalesce(pg_sequence_last_value(seq), 0) < ${tenantId}`;
      return tenantResult(tenantId, input, created.aangemaakt, true);
    }
    const [updated] = (await tx`UPDATE tenants SET naam = ${input.naam}, actief = ${input.actief} WHERE id = ${tenantId} RETURNING aangemaakt`) as { aangemaakt: string }[];
    return tenantResult(tenantId, input, updated!.aangemaakt, false);
  });
}

/**
 * PUT /api/tenants/{id}/beheerders (putAdministrators on SQLite; administratorChanges
 * decides). The tenant's row is locked first, so two lists for one tenant at the same
 * time are applied one after the other instead of both adding the same address. NO KEY
 * UPDATE: what holds that row KEY SHARE goes on meanwhile (audit appends, from their
 * check that the tenant exists; login attempts, by their foreign key).
 */
export function putAdministratorsPg(store: PgStore, tenantId: number, input: AdministratorList): Promise<AdministratorsResult> {
  return writeCall(store, async (tx) => {
    const [tenant] = await tx`SELECT id FROM tenants WHERE id = ${tenantId} FOR NO KEY UPDATE`;
    if (!tenant) throw unknownTenant(tenantId);
    const ofTenant = async () =>
      ((await tx`SELECT id, naam, email, actief FROM administrators WHERE tenant_id = ${tenantId} ORDER BY id`) as { id: number; naam: string; email: string; actief: boolean }[]).map(
        ({ id, naam, email, actief }) => ({ id, naam, email, actief }),
      );
    const changes = administratorChanges(await ofTenant(), input);
    // As on SQLite (removeAdministrators): the rows not kept deleted, or set inactive while a delivery record refers to them.
    if (changes.deactivate.length > 0) {
      const kept = keptIds(changes);
      // Locked first: a weekly report's reservation whose insert has not committed yet
      // holds them KEY SHARE, so this waits for it, and the DELETE's snapshot, taken after,
      // sees its record (the DELETE alone saw no record, waited, and failed on the key:
      // a 500). A reservation after this lock waits for the commit and finds them gone.
      await tx`SELECT id FROM administrators WHERE tenant_id = ${tenantId} AND id <> ALL(${kept}::int[]) ORDER BY id FOR UPDATE`;
      await tx`DELETE FROM administrators a WHERE a.tenant_id = ${tenantId} AND a.id <> ALL(${kept}::int[]) AND NOT EXISTS (SELECT 1 FROM weekly_report_deliveries d WHERE d.administrator_id = a.id)`;
      await tx`UPDATE administrators SET actief = false WHERE tenant_id = ${tenantId} AND actief AND id <> ALL(${kept}::int[])`;
    }
    for (const { update, values: b } of changes.steps) {
      if (update !== null) await tx`UPDATE administrators SET naam = ${b.naam}, email = ${b.email}, actief = ${b.actief} WHERE id = ${update}`;
      else await tx`INSERT INTO administrators (tenant_id, naam, email, actief) VALUES (${tenantId}, ${b.naam}, ${b.email}, ${b.actief})`;
    }
    return { tenantId, beheerders: await ofTenant() };
  });
}
