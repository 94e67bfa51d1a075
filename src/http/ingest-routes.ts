// The write API's routes: POST /api/audit, POST /api/inlogpogingen, PUT /api/tenants/{id}
// and PUT /api/tenants/{id}/beheerders. The gate (src/http/auth.ts) lets only APP_SECRET
// through, before any of the body is read; here the body is read with its cap and
// schema, checked, and written in one transaction: on SQLite through the grouped writer
// (src/ingest/group-commit.ts: what arrives together shares one COMMIT, each call in its
// own savepoint; waiting for the lock never blocks the event loop), on PostgreSQL
// through src/pg/ingest.ts.
// The work itself, and every rule of it, is in src/ingest/.
import { ValidationError, type Elysia, type TSchema } from "elysia";
import type { Deps } from "../deps.ts";
import { AuditBatch, AuditBatchResult, MAX_BATCH_BYTES, parseAuditBody, prepareAuditBatch, storeAuditBatch, TenantIdPath } from "../ingest/audit.ts";
import { countRejected, type IngestCounters, type IngestKind } from "../ingest/counters.ts";
import { LoginAttemptBatch, LoginAttemptResult, MAX_ATTEMPTS_BYTES, prepareLoginAttempts, storeLoginAttempts } from "../ingest/login-attempts.ts";
import {
  AdministratorList,
  AdministratorsResult,
  MAX_ADMINISTRATORS_BYTES,
  MAX_TENANT_BYTES,
  putAdministrators,
  putTenant,
  TenantInput,
  TenantResult,
} from "../ingest/tenants.ts";
import { groupedWriter, WriteWaitGivenUp } from "../ingest/group-commit.ts";
import { NOTHING_STORED_HEADER, NOTHING_STORED_VALUE } from "../client.ts";
import { putAdministratorsPg, putTenantPg, storeAuditBatchPg, storeLoginAttemptsPg } from "../pg/ingest.ts";
import { Refusal } from "../ingest/refusal.ts";
import { jsonBodyReader } from "./body.ts";
import { log } from "../logger.ts";
import { ErrorBody, HttpError, json, lockWaitGivenUp, markNothingStored, unavailableCode, unexpectedStatus } from "./errors.ts";

function kib(bytes: number): string {
  return bytes >= 1024 * 1024 ? `${bytes / 1024 / 1024} MiB` : `${bytes / 1024} KiB`;
}

/** The status the client gets for `e` (onError, src/app.ts), for the counters. */
function statusOf(e: unknown): number {
  if (e instanceof HttpError || e instanceof Refusal) return e.status;
  if (e instanceof ValidationError) return 400;
  return unexpectedStatus(e);
}

/** Retry-After of the write API's "busy" 503s (a lock wait given up, too many requests in flight), seconds: about one lock wait (BUSY_TIMEOUT_MS). */
export const BUSY_RETRY_AFTER_S = 5;

/**
 * The most write-API requests this process handles at once, from the gate to the answer;
 * one more is answered 503 before its body is read. Each holds its body (up to 1 MiB)
 * and what is parsed from it while it waits in the queue (src/ingest/group-commit.ts,
 * which has no limit of its own): 200 clients sending 1 MiB for 15 s took the process to
 * 1.5 GB. 64 bound that to 64 bodies and their parsed form, and are well above what a
 * host application sends at once (32 clients of single entries already fill the grouped
 * COMMITs, docs/performance.md).
 */
export const MAX_WRITES_IN_FLIGHT = 64;

/**
 * A lock this batch needs stayed taken for the whole wait (lockWaitGivenUp): a 503 the
 * client retries after a few seconds, logged, not an alarm per waiting request. Other
 * errors pass on unchanged. On SQLite the wait from the call's arrival may have run out
 * mostly in this process's own write queue (WriteWaitGivenUp says how it went), which
 * the log says as it was.
 */
function busyAnswer(e: unknown): unknown {
  const wait = lockWaitGivenUp(e);
  if (!wait) return e;
  if (e instanceof WriteWaitGivenUp) {
    log(
      "warn",
      e.queuedMs > e.lockWaitMs
        ? "write API: the wait ran out mostly in this process's own write queue, behind other write-API requests (queuedMs); the write lock, tried for the rest (lockWaitMs), was taken by another connection; answered 503"
        : "write API: the write lock stayed taken by another connection for most of the wait (lockWaitMs; before it queuedMs in this process's own write queue); answered 503",
      { code: wait.code, queuedMs: e.queuedMs, lockWaitMs: e.lockWaitMs },
    );
  } else {
    log("warn", "write API: a lock stayed taken by another session or process for the whole wait; answered 503", { code: wait.code });
  }
  return new HttpError(503, `De database is bezet (${wait.why}); niets is opgeslagen. Probeer het na Retry-After opnieuw, met dezelfde sleutels.`, {
    "retry-after": String(BUSY_RETRY_AFTER_S),
  });
}

/**
 * Whether a 503 of the write API certainly stored nothing, which its answer then says in
 * a header (src/client.ts repeats a call without keys only then). On PostgreSQL every
 * one: it came before the COMMIT, or after one the server says it rolled back
 * (src/pg/commit.ts). On SQLite not an I/O error or a full disk: one at COMMIT may come
 * after the commit frame reached the WAL, which the next open then recovers.
 */
function storedNothing(e: unknown): boolean {
  const code = unavailableCode(e);
  return code !== "SQLITE_IOERR" && code !== "SQLITE_FULL";
}

interface Endpoint<B extends TSchema> {
  kind: IngestKind;
  method: "post" | "put";
  path: string;
  summary: string;
  description: string;
  body: B;
  /** The path's parameters: Elysia checks them (a 400 naming the parameter) before the body is read. */
  params?: TSchema;
  maxBytes: number;
  /** The body's JSON.parse, when not the plain one (numbers a double may not keep as sent: parseAuditBody). */
  parse?: (text: string) => unknown;
  result: TSchema;
  /** When the answer is 201 for a new resource: its description. */
  created?: string;
  /** The documented refusals besides 400/401/403/413/503. */
  refusals: Record<number, string>;
}

function detail(e: Endpoint<TSchema>) {
  const error = (description: string) => ({ description, content: { "application/json": { schema: ErrorBody } } });
  const responses: Record<string, unknown> = {
    200: { description: "Opgeslagen.", content: { "application/json": { schema: e.result } } },
    ...(e.created ? { 201: { description: e.created, content: { "application/json": { schema: e.result } } } } : {}),
    400: error("Ongeldige body of pad; de melding noemt het veld (bij een lijst met de index). Niets is opgeslagen."),
    401: error("Ontbrekend of ongeldig token."),
    403: error("Geldig token voor iets anders (CRON_SECRET): de schrijf-API vraagt APP_SECRET."),
    413: error(`Body groter dan ${kib(e.maxBytes)}.`),
    500: error("Onverwachte fout; gemeld als alarm internal-error. Onbekend of de batch is opgeslagen: herhaal hem met dezelfde sleutels."),
    503: {
      ...error(`De database is bezet of niet beschikbaar, of de service verwerkt al ${MAX_WRITES_IN_FLIGHT} schrijfacties tegelijk (de body is dan niet gelezen); niets is opgeslagen. Probeer het na Retry-After opnieuw (met dezelfde sleutels).`),
      headers: {
        [NOTHING_STORED_HEADER]: { description: "Dat niets is opgeslagen, van de service zelf (de 503 van een proxy ervoor heeft hem niet).", schema: { type: "string", enum: [NOTHING_STORED_VALUE] } },
        "retry-after": { description: "Seconden tot een nieuwe poging.", schema: { type: "string" } },
      },
    },
  };
  for (const [status, description] of Object.entries(e.refusals)) responses[status] = error(description);
  return {
    tags: ["schrijf-API"],
    summary: e.summary,
    description: e.description,
    security: [{ appAuth: [] }],
    responses,
    requestBody: { required: true, content: { "application/json": { schema: e.body } } },
  } as any;
}

export function mountIngest(app: Elysia<any, any, any, any, any, any, any>, deps: Deps, counters: IngestCounters): void {
  const { store } = deps;
  const writer = store.kind === "sqlite" ? groupedWriter(store.sqlite, { stats: counters.sqlite }) : null;
  const route = <B extends TSchema>(e: Endpoint<B>, handle: (body: any, params: Record<string, string>) => Promise<Response>) => {
    const shown = e.path.replace(":id", "{id}");
    const read = jsonBodyReader(e.body, e.maxBytes, `Body te groot: ${shown} accepteert hoogstens ${kib(e.maxBytes)}.`, e.parse);
    const handler = async ({ request, params }: { request: Request; params: Record<string, string> }) => {
      deps.writeApi?.seen();
      // Before the body is read: a refused request costs no memory (MAX_WRITES_IN_FLIGHT).
      if (counters.inFlight >= MAX_WRITES_IN_FLIGHT) {
        countRejected(counters, 503);
        throw markNothingStored(
          new HttpError(503, `De service verwerkt al ${MAX_WRITES_IN_FLIGHT} schrijfacties tegelijk; niets is opgeslagen. Probeer het na Retry-After opnieuw, met dezelfde sleutels.`, {
            "retry-after": String(BUSY_RETRY_AFTER_S),
          }),
        );
      }
      counters.inFlight++;
      // Released on every way out: answered, refused, failed, or the client gone mid-body.
      try {
        const response = await handle(await read(request), params);
        counters.accepted[e.kind]++;
        return response;
      } catch (caught) {
        const err = busyAnswer(caught);
        const status = statusOf(err);
        countRejected(counters, status);
        throw status === 503 && storedNothing(err) ? markNothingStored(err) : err;
      } finally {
        counters.inFlight--;
      }
    };
    // Elysia never reads the body (parse: "none"): only the capped reader does, after the gate.
    app[e.method](e.path, handler as any, { parse: "none", ...(e.params ? { params: e.params } : {}), detail: detail(e) });
  };

  route(
    {
      kind: "audit",
      method: "post",
      path: "/api/audit",
      summary: "Audit-entries toevoegen (batch, alles of niets)",
      description:
        "Voegt 1 tot 1000 entries toe aan de hash-ketens van hun tenants, in één transactie. nachtwacht berekent seq en hash; het antwoord geeft per entry een ontvangstbewijs. Een entry met `sleutel` wordt per tenant één keer opgeslagen: een herhaalde batch (na een time-out) krijgt dezelfde ontvangstbewijzen.",
      body: AuditBatch,
      maxBytes: MAX_BATCH_BYTES,
      parse: parseAuditBody,
      result: AuditBatchResult,
      refusals: {
        409: "Een sleutel is al gebruikt voor een andere entry van die tenant; de melding noemt hem. Niets is opgeslagen.",
        422: "Een onbekende tenant; de melding noemt het veld en het id. Niets is opgeslagen.",
      },
    },
    async (body) => {
      const prepared = prepareAuditBatch(body, deps.clock(), deps.config.auditRetentieDagen);
      const result = store.kind === "pg" ? await storeAuditBatchPg(store, prepared) : await writer!.write(prepared.length, () => storeAuditBatch(store.sqlite, prepared));
      counters.stored.audit += result.opgeslagen;
      counters.replayed += result.alBekend;
      return json(200, result);
    },
  );

  route(
    {
      kind: "inlogpogingen",
      method: "post",
      path: "/api/inlogpogingen",
      summary: "Inlogpogingen toevoegen (batch, alles of niets)",
      description: "Slaat 1 tot 1000 inlogpogingen op (de BeveiligingsLog) in één transactie.",
      body: LoginAttemptBatch,
      maxBytes: MAX_ATTEMPTS_BYTES,
      parse: parseAuditBody,
      result: LoginAttemptResult,
      refusals: { 422: "Een onbekende tenant; de melding noemt het veld en het id. Niets is opgeslagen." },
    },
    async (body) => {
      const rows = prepareLoginAttempts(body, deps.clock());
      const result = store.kind === "pg" ? await storeLoginAttemptsPg(store, rows) : await writer!.write(rows.length, () => storeLoginAttempts(store.sqlite, rows));
      counters.stored.inlogpogingen += result.opgeslagen;
      return json(200, result);
    },
  );

  route(
    {
      kind: "tenants",
      method: "put",
      path: "/api/tenants/:id",
      summary: "Een tenant aanmaken of bijwerken",
      description: "Maakt de tenant met dit id aan (201) of werkt naam en actief bij (200).",
      body: TenantInput,
      params: TenantIdPath,
      maxBytes: MAX_TENANT_BYTES,
      result: TenantResult,
      created: "Aangemaakt.",
      refusals: { 422: "Een nieuwe tenant terwijl er al TENANTS_MAX of meer zijn; niets is aangemaakt (bestaande bijwerken kan wel)." },
    },
    async (body, params) => {
      const id = Number(params.id);
      const now = deps.clock();
      const max = deps.config.tenantsMax;
      const result = store.kind === "pg" ? await putTenantPg(store, id, body, now, max) : await writer!.write(1, () => putTenant(store.db, id, body, now, max));
      return json(result.nieuw ? 201 : 200, result);
    },
  );

  route(
    {
      kind: "beheerders",
      method: "put",
      path: "/api/tenants/:id/beheerders",
      summary: "De beheerders van een tenant vervangen",
      description:
        "Maakt de beheerders van de tenant gelijk aan de lijst, op e-mailadres: bekende worden bijgewerkt, nieuwe toegevoegd, ontbrekende verwijderd (of op niet-actief gezet zolang de verzendadministratie van de weekrapporten naar hen verwijst). Actieve beheerders krijgen het weekrapport.",
      body: AdministratorList,
      params: TenantIdPath,
      maxBytes: MAX_ADMINISTRATORS_BYTES,
      result: AdministratorsResult,
      refusals: { 404: "Onbekende tenant; maak hem eerst aan met PUT /api/tenants/{id}." },
    },
    async (body, params) => {
      const id = Number(params.id);
      return json(200, store.kind === "pg" ? await putAdministratorsPg(store, id, body) : await writer!.write(body.beheerders.length, () => putAdministrators(store.db, id, body)));
    },
  );
}

