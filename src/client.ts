// A small typed client for nachtwacht's write API (POST /api/audit, POST
// /api/inlogpogingen, PUT /api/tenants/{id}, PUT /api/tenants/{id}/beheerders), for a
// host application written in TypeScript. docs/integration.md says when to use it and
// how to keep APP_SECRET.
//
// The types are the server's own: Static<typeof …> of the TypeBox schemas the routes
// validate with (src/ingest/*.ts). Those imports are type-only and vanish when
// compiled, so this file has no runtime dependency at all: it runs under Bun and under
// Node ≥ 20 (global fetch, AbortSignal.timeout), e.g. after `bun build --target=node`.
//
// Retries: a call is tried again, with exponential backoff and jitter, at most
// `maxAttempts` times, after an answer that says "not now" (503, 429) and after a
// connection error. A Retry-After of the server is honoured: never tried earlier (it
// waits that long plus a random part of the backoff, so refused clients spread); when
// it asks for longer than `maxDelayMs`, the client stops and throws (the error carries
// retryAfterMs, so the caller can queue the batch). After a timeout, a dropped
// connection, a 429 or another 5xx the request may have been stored; such calls are
// retried only when they are idempotent: PUTs, and audit batches in which every entry has
// a `sleutel` (the service then answers a repeat with the same receipts). Login attempts
// have no keys: they are retried only when the service certainly stored nothing — a
// name that did not resolve, a refused connection, or a 503 carrying the service's own
// NOTHING_STORED_HEADER (a proxy's 503 may come after it passed the request on).
// Every other answer (4xx) is final: NachtwachtError with the status and the server's
// `error` message. A body larger than its route takes is refused before sending (413,
// nothingStored): Bun closes the connection on one over 2 MiB without reading it, which
// a sending client sees as a reset, not as the refusal it is. A 2xx is the service's
// answer only when it has the call's shape (one receipt per entry, one id per attempt):
// a gateway's `{"status":"ok"}` is no receipt.
import type { Static } from "@sinclair/typebox";
import type { AuditBatchResult as AuditBatchResultSchema, AuditEntryInput, Receipt as ReceiptSchema } from "./ingest/audit.ts";
import type { LoginAttemptInput, LoginAttemptResult as LoginAttemptResultSchema } from "./ingest/login-attempts.ts";
import type {
  AdministratorInput,
  AdministratorsResult as AdministratorsResultSchema,
  TenantInput as TenantInputSchema,
  TenantResult as TenantResultSchema,
} from "./ingest/tenants.ts";

/** One audit entry as POST /api/audit takes it. Give it a `sleutel` (e.g. your event id) so retries are safe. */
export type AuditEntry = Static<typeof AuditEntryInput>;
/** What the service answers per entry: where it stands in its tenant's chain and its hash. Keep it. */
export type Receipt = Static<typeof ReceiptSchema>;
export type AuditBatchResult = Static<typeof AuditBatchResultSchema>;
/** One login attempt as POST /api/inlogpogingen takes it. */
export type LoginAttempt = Static<typeof LoginAttemptInput>;
export type LoginAttemptResult = Static<typeof LoginAttemptResultSchema>;
export type TenantInput = Static<typeof TenantInputSchema>;
export type TenantResult = Static<typeof TenantResultSchema>;
/** One administrator in the full list PUT /api/tenants/{id}/beheerders takes. */
export type Administrator = Static<typeof AdministratorInput>;
export type AdministratorsResult = Static<typeof AdministratorsResultSchema>;

/** Why a call is being retried, for logging (`onRetry`). */
export interface RetryInfo {
  method: string;
  path: string;
  /** The attempt that failed (1 = the first). */
  attempt: number;
  /** How long the client waits before the next attempt. */
  delayMs: number;
  /** The HTTP status, or null when there was no answer (connection error, timeout). */
  status: number | null;
  /** The server's `error`, or the connection error's message. */
  reason: string;
}

export interface ClientOptions {
  /** Where the service listens, e.g. `https://nachtwacht.intern.example` or `http://127.0.0.1:3000`. */
  baseUrl: string;
  /** APP_SECRET of the service. Take it from the environment or a secrets store, never from argv. */
  secret: string;
  /** Attempts per call, the first included (default 5). */
  maxAttempts?: number;
  /** Backoff: 2^(attempt−1) × this, with jitter (default 500 ms). */
  baseDelayMs?: number;
  /** The longest wait between two attempts (default 60 s; the service's busy 503 asks for 5 s). A Retry-After above it ends the retries. */
  maxDelayMs?: number;
  /** Per attempt, connecting and reading the answer included (default 30 s). */
  timeoutMs?: number;
  /** Called before each wait between attempts. */
  onRetry?: (info: RetryInfo) => void;
  /** Another fetch (a proxy agent, a test); the global one by default. */
  fetch?: (input: string, init: RequestInit) => Promise<Response>;
}

/**
 * The header with which the service says that it stored nothing of a call it answered
 * 503 (a busy or unavailable database): only then is a call without keys repeated. A
 * proxy in front may answer 503 after it passed the request on, without this header.
 */
export const NOTHING_STORED_HEADER = "nachtwacht-opgeslagen";
export const NOTHING_STORED_VALUE = "nee";

/**
 * A call that did not succeed. `status` is the HTTP status, or null when no answer came
 * (connection error, timeout); `error` is the server's message (`{ error }`), or the
 * connection error's. With `attempts` 0 the client refused the call itself before
 * sending (a body over its route's limit: status 413, as the service would answer, and
 * the message says the client refused it). Never carries the secret.
 */
export class NachtwachtError extends Error {
  override readonly name = "NachtwachtError";
  constructor(
    readonly method: string,
    readonly path: string,
    readonly status: number | null,
    readonly error: string,
    /** How many requests were sent; 0 when the client refused the call itself, before sending (a body over its route's limit): then no status or error is the server's. */
    readonly attempts: number,
    /** The server's Retry-After, in milliseconds, when it sent one. */
    readonly retryAfterMs: number | null = null,
    options?: { cause?: unknown; nothingStored?: boolean },
  ) {
    super(`nachtwacht ${method} ${path}: ${attempts === 0 ? `door de client geweigerd vóór het versturen (${status}, geen antwoord van de service)` : status === null ? "geen antwoord" : `HTTP ${status}`}: ${error}`, options);
    // A final refusal (4xx but 408 and 429, which may come from a proxy after it passed the call on) stored nothing.
    this.nothingStored = options?.nothingStored ?? (status !== null && status >= 400 && status < 500 && status !== 408 && status !== 429);
  }

  /**
   * True when the service certainly stored nothing of this call: a 4xx refusal, its own
   * 503 (NOTHING_STORED_HEADER), a name that did not resolve, a refused connection. Only
   * then may a call without keys (login attempts, audit entries without `sleutel`) be
   * sent again.
   */
  readonly nothingStored: boolean;

  /** True when the same call may succeed later (no answer, 408, 429, 5xx); 4xx otherwise are final. Without keys, repeat it only when `nothingStored`. */
  get retryable(): boolean {
    return this.status === null || this.status === 408 || this.status === 429 || this.status >= 500;
  }

  /**
   * True when the batch must be kept to send again later: `retryable`; refused 401 or
   * 403 — the secret is wrong (a rotation out of step), not the batch; or an answer
   * below 400 that was not the service's (a gateway's 200 without receipts, a redirect
   * this client does not follow) — the address is wrong, not the batch. Send it again,
   * with the same keys, once the configuration is fixed, and alert. False for a refusal
   * of the batch itself (400, 404, 409, 413, 422).
   */
  get keepForLater(): boolean {
    return this.retryable || this.status === 401 || this.status === 403 || (this.status !== null && this.status < 400);
  }
}

/** Retry-After as milliseconds: delta-seconds or an HTTP date; null when absent or unreadable. */
export function parseRetryAfter(value: string | null, now = Date.now()): number | null {
  if (value === null) return null;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  const at = Date.parse(v);
  return Number.isNaN(at) ? null : Math.max(0, at - now);
}

/** No answer: did the request certainly not reach the service (the name did not resolve, or the connection was refused)? */
function neverSent(e: unknown): boolean {
  const code = (x: unknown) => (x as { code?: unknown } | null)?.code;
  return [code(e), code((e as { cause?: unknown } | null)?.cause)].some((c) => c === "ECONNREFUSED" || c === "ENOTFOUND" || c === "EAI_AGAIN");
}

/**
 * The largest body each write-API route takes, in bytes of the serialised JSON: the
 * server's MAX_BATCH_BYTES, MAX_ATTEMPTS_BYTES (src/ingest/audit.ts, login-attempts.ts),
 * MAX_TENANT_BYTES and MAX_ADMINISTRATORS_BYTES (src/ingest/tenants.ts). Mirrored, not
 * imported: this file is bundled standalone, without the server's runtime code;
 * test/client.test.ts asserts they are equal.
 */
export const MAX_BODY_BYTES = {
  audit: 1024 * 1024,
  loginAttempts: 256 * 1024,
  tenant: 64 * 1024,
  administrators: 512 * 1024,
} as const;

/**
 * What the service takes as a secret (src/config.ts `secret()`): 32 to 1024 printable
 * ASCII characters without spaces. Checked up front: a line break (a multi-line secrets
 * file) would otherwise reach fetch, which puts the whole header value in its error.
 */
const SECRET_FORM = /^[\x21-\x7e]{32,1024}$/;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export class NachtwachtClient {
  readonly baseUrl: string;
  // A private field: console.log(client) and JSON.stringify(client) do not show it.
  readonly #secret: string;
  readonly #o: Required<Omit<ClientOptions, "baseUrl" | "secret" | "onRetry" | "fetch">> & Pick<ClientOptions, "onRetry">;
  readonly #fetch: (input: string, init: RequestInit) => Promise<Response>;

  constructor(options: ClientOptions) {
    const url = new URL(options.baseUrl);
    if (url.protocol !== "http:" && url.protocol !== "https:") throw new TypeError("baseUrl moet http: of https: zijn");
    if (url.username !== "" || url.password !== "") throw new TypeError("baseUrl mag geen gebruikersnaam of wachtwoord bevatten");
    // Never echo the value, not even in this message.
    if (typeof options.secret !== "string" || !SECRET_FORM.test(options.secret)) {
      throw new TypeError("secret (APP_SECRET) moet 32 tot 1024 afdrukbare ASCII-tekens zijn, zonder spaties of regelovergangen (zoals de service eist)");
    }
    this.baseUrl = url.href.replace(/\/+$/, "");
    this.#secret = options.secret;
    this.#o = {
      maxAttempts: Math.max(1, Math.floor(options.maxAttempts ?? 5)),
      baseDelayMs: options.baseDelayMs ?? 500,
      maxDelayMs: options.maxDelayMs ?? 60_000,
      timeoutMs: options.timeoutMs ?? 30_000,
      onRetry: options.onRetry,
    };
    this.#fetch = options.fetch ?? ((input, init) => fetch(input, init));
  }

  /**
   * Appends 1–1000 entries to their tenants' chains, all or nothing, and returns one
   * receipt per entry in batch order. Retried after a timeout or 5xx only when every
   * entry has a `sleutel`.
   */
  appendAudit(entries: readonly AuditEntry[]): Promise<AuditBatchResult> {
    const idempotent = entries.length > 0 && entries.every((e) => e.sleutel !== undefined);
    return this.#call<AuditBatchResult>("POST", "/api/audit", { entries }, idempotent, MAX_BODY_BYTES.audit, (r) => {
      const receipts = (r as Partial<AuditBatchResult> | null)?.ontvangstbewijzen;
      if (!Array.isArray(receipts) || receipts.length !== entries.length) return `geen ${entries.length} ontvangstbewijzen`;
      const bad = receipts.findIndex((x, i) => !isInteger(x?.seq) || !isInteger(x?.id) || x?.tenantId !== entries[i]!.tenantId || typeof x?.hash !== "string" || !/^[0-9a-f]{64}$/.test(x.hash));
      return bad < 0 ? null : `ontvangstbewijzen[${bad}] is geen ontvangstbewijs van entries[${bad}]`;
    });
  }

  /** Stores 1–1000 login attempts, all or nothing. No idempotency keys: retried only when nothing can have been stored. */
  recordLoginAttempts(pogingen: readonly LoginAttempt[]): Promise<LoginAttemptResult> {
    return this.#call<LoginAttemptResult>("POST", "/api/inlogpogingen", { pogingen }, false, MAX_BODY_BYTES.loginAttempts, (r) => {
      const ids = (r as Partial<LoginAttemptResult> | null)?.ids;
      return Array.isArray(ids) && ids.length === pogingen.length && ids.every(isInteger) ? null : `geen ${pogingen.length} ids`;
    });
  }

  /** Creates (`nieuw: true`, HTTP 201) or updates a tenant. */
  putTenant(id: number, tenant: TenantInput): Promise<TenantResult> {
    return this.#call<TenantResult>("PUT", `/api/tenants/${tenantPath(id)}`, { naam: tenant.naam, actief: tenant.actief }, true, MAX_BODY_BYTES.tenant, (r) => {
      const x = r as Partial<TenantResult> | null;
      return x?.tenantId === id && typeof x.naam === "string" && typeof x.actief === "boolean" && typeof x.aangemaakt === "string" && typeof x.nieuw === "boolean" ? null : `geen tenant ${id}`;
    });
  }

  /** Makes the tenant's administrators exactly this list (by e-mail; the missing ones removed, or kept inactive while a weekly report's delivery record names them). 404 for an unknown tenant. */
  putAdministrators(id: number, beheerders: readonly Administrator[]): Promise<AdministratorsResult> {
    return this.#call<AdministratorsResult>("PUT", `/api/tenants/${tenantPath(id)}/beheerders`, { beheerders }, true, MAX_BODY_BYTES.administrators, (r) => {
      const x = r as Partial<AdministratorsResult> | null;
      const valid = x?.tenantId === id && Array.isArray(x.beheerders) && x.beheerders.every((b) => isInteger(b?.id) && typeof b?.email === "string" && typeof b?.actief === "boolean");
      return valid ? null : `geen beheerderslijst van tenant ${id}`;
    });
  }

  /** `problem` says why a 2xx body is not this call's answer, or null when it is. */
  async #call<T>(method: string, path: string, body: unknown, idempotent: boolean, maxBytes: number, problem: (answer: unknown) => string | null): Promise<T> {
    // Serialised once: every attempt sends the same bytes, the same sleutels.
    const payload = JSON.stringify(body);
    const bytes = new TextEncoder().encode(payload).byteLength;
    if (bytes > maxBytes) {
      // attempts 0: nothing was sent, and the message says the refusal is the client's own, not an answer.
      throw new NachtwachtError(method, path, 413, `body is ${bytes} bytes, meer dan de ${maxBytes} bytes die ${path} aanneemt; niets verstuurd, niets opgeslagen: splits de batch`, 0, null, { nothingStored: true });
    }
    const headers = { authorization: `Bearer ${this.#secret}`, "content-type": "application/json", accept: "application/json" };
    for (let attempt = 1; ; attempt++) {
      let status: number | null = null;
      let reason: string;
      let retryAfterMs: number | null = null;
      let cause: unknown;
      // Whether the service certainly stored nothing: then any call may be repeated.
      let nothingStored: boolean;
      try {
        // redirect: manual — the service never redirects; following one could carry the token elsewhere.
        const res = await this.#fetch(this.baseUrl + path, { method, headers, body: payload, redirect: "manual", signal: AbortSignal.timeout(this.#o.timeoutMs) });
        status = res.status;
        const text = await res.text();
        if (status >= 200 && status < 300) {
          const answer: unknown = JSON.parse(text);
          const why = problem(answer);
          // Not the service's answer (a gateway's {"status":"ok"}): treated as unreadable, never as a success.
          if (why !== null) throw new Error(`niet het antwoord van nachtwacht: ${why}`);
          return answer as T;
        }
        reason = errorMessage(text, status);
        retryAfterMs = parseRetryAfter(res.headers.get("retry-after"));
        // Only the service's own word counts: a proxy's 503 or 429 may come after it passed the request on.
        nothingStored = status === 503 && res.headers.get(NOTHING_STORED_HEADER) === NOTHING_STORED_VALUE;
        const retryable = status === 408 || status === 429 || status >= 500;
        if (!retryable) throw new NachtwachtError(method, path, status, reason, attempt, retryAfterMs);
      } catch (e) {
        if (e instanceof NachtwachtError) throw e;
        if (status === null) {
          cause = e;
          reason = e instanceof Error ? e.message : String(e);
          nothingStored = neverSent(e);
        } else {
          // The answer came but its body could not be read (connection lost) or parsed: the request may have been stored.
          cause = e;
          reason = `antwoord ${status} onleesbaar: ${e instanceof Error ? e.message : String(e)}`;
          nothingStored = false;
        }
      }
      const giveUp = (why?: string) => new NachtwachtError(method, path, status, why ? `${reason} (${why})` : reason, attempt, retryAfterMs, { cause, nothingStored });
      if (!idempotent && !nothingStored) throw giveUp("niet herhaald: misschien al opgeslagen en zonder sleutel niet veilig te herhalen");
      if (attempt >= this.#o.maxAttempts) throw giveUp(`opgegeven na ${attempt} pogingen`);
      if (retryAfterMs !== null && retryAfterMs > this.#o.maxDelayMs) throw giveUp(`Retry-After ${retryAfterMs / 1000} s is langer dan maxDelayMs`);
      const backoff = Math.min(this.#o.maxDelayMs, this.#o.baseDelayMs * 2 ** (attempt - 1));
      // After a Retry-After: that wait plus a random part of the backoff, so that clients
      // refused at once (the busy 503's Retry-After: 5) do not all return at once; never sooner.
      const delayMs =
        retryAfterMs === null
          ? Math.round(backoff / 2 + Math.random() * (backoff / 2))
          : Math.max(retryAfterMs, Math.min(this.#o.maxDelayMs, Math.round(retryAfterMs + Math.random() * backoff)));
      this.#o.onRetry?.({ method, path, attempt, delayMs, status, reason });
      await sleep(delayMs);
    }
  }
}

const isInteger = (v: unknown): boolean => Number.isSafeInteger(v);

function tenantPath(id: number): string {
  if (!Number.isSafeInteger(id) || id < 1) throw new TypeError(`tenant-id moet een geheel getal ≥ 1 zijn, niet ${id}`);
  return String(id);
}

/** The `error` of a `{ error }` body; else the start of the text. */
function errorMessage(text: string, status: number): string {
  try {
    const parsed = JSON.parse(text) as { error?: unknown };
    if (typeof parsed?.error === "string") return parsed.error;
  } catch {
    // not JSON: a proxy's page, say
  }
  const short = text.trim().slice(0, 200);
  return short === "" ? `HTTP ${status} zonder body` : short;
}
