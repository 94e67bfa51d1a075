// What the service answers when it does not answer with a job's result: `{ error }`
// with a Dutch message, and the 400 for a body that does not match its schema.
import { ValueErrorType } from "@sinclair/typebox/errors";
import { t, type ValidationError } from "elysia";
import { lengths, PATTERN_MEANINGS } from "../jobs/schema.ts";
import { NOTHING_STORED_HEADER, NOTHING_STORED_VALUE } from "../client.ts";

/** The body of every answer that is not a job's own result. */
export const ErrorBody = t.Object({ error: t.String({ description: "Wat er mis is." }) });

/** An error with the HTTP status and the Dutch message the client should see. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    /** Extra response headers, e.g. Retry-After. */
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = "HttpError";
  }
}

/** SQLite failures that mean "not now" rather than "broken": 503, try again later. */
const UNAVAILABLE = new Set(["SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_FULL", "SQLITE_READONLY", "SQLITE_IOERR", "SQLITE_CANTOPEN"]);

/**
 * PostgreSQL failures that mean "not now": the connection (Bun's ERR_POSTGRES_CONNECTION_*,
 * SQLSTATE class 08), the server shutting down or starting (57P01–57P03), out of disk or
 * memory (class 53), a read-only server (25006: a standby), a lock wait given up (55P03),
 * a deadlock or serialization failure (40P01, 40001: the transaction was rolled back
 * whole, and the same request again may well succeed).
 */
const PG_UNAVAILABLE_STATES = /^(08|53|57P0[123]$|25006$|55P03$|40001$|40P01$)/;

/** A database driver's own error, as driverError finds it. */
export interface DriverError {
  name?: unknown;
  message?: unknown;
  /** SQLite's SQLITE_* code; on PostgreSQL Bun's code (ERR_POSTGRES_…). */
  code?: unknown;
  /** PostgreSQL's SQLSTATE. */
  errno?: unknown;
  /** PostgreSQL: the constraint a violation names. */
  constraint?: unknown;
}

/**
 * The database's own error in `e`: SQLite's (a SQLITE_* code) or PostgreSQL's (Bun's
 * PostgresError, also for a connection that failed), found in `e` itself or down its
 * causes (Drizzle hands the driver's error on as the cause of its DrizzleQueryError; a
 * few levels at most). Undefined for anything else.
 */
export function driverError(e: unknown): DriverError | undefined {
  let candidate = e;
  for (let depth = 0; depth < 4 && candidate !== null && typeof candidate === "object"; depth++) {
    const err = candidate as DriverError & { cause?: unknown };
    if (err.name === "PostgresError" || (typeof err.code === "string" && err.code.startsWith("SQLITE_"))) return err;
    if (err.cause === candidate) break;
    candidate = err.cause;
  }
  return undefined;
}

/**
 * SQLITE_BUSY (for SQLITE_BUSY_SNAPSHOT and the like) when `e` is such a failure, or
 * PostgreSQL's code for one (the SQLSTATE, else Bun's connection code); else undefined.
 */
export function unavailableCode(e: unknown): string | undefined {
  const err = driverError(e);
  if (err === undefined) return undefined;
  const code = err.code;
  if (err.name === "PostgresError") {
    if (typeof err.errno === "string" && PG_UNAVAILABLE_STATES.test(err.errno)) return err.errno;
    return typeof code === "string" && code.startsWith("ERR_POSTGRES_CONNECTION") ? code : undefined;
  }
  const base = typeof code === "string" ? /^SQLITE_[A-Z]+/.exec(code)?.[0] : undefined;
  return base !== undefined && UNAVAILABLE.has(base) ? base : undefined;
}

/**
 * When `e` is a lock wait given up — SQLite's write lock held by another process for
 * the whole busy timeout (SQLITE_BUSY), or on PostgreSQL another session's lock for the
 * whole lock_timeout (55P03), the same wait — its code and what it means, in words for
 * the answer; else undefined. Where such a wait is expected now and then (the write
 * API: a long host transaction, a backup, a hung appender), it is a 503 to try again
 * later, logged, not an alarm per call; the job route decides per store (job-route.ts).
 */
export function lockWaitGivenUp(e: unknown): { code: "SQLITE_BUSY" | "55P03"; why: string } | undefined {
  const code = unavailableCode(e);
  if (code === "SQLITE_BUSY") return { code, why: "SQLITE_BUSY: een ander proces houdt de schrijfvergrendeling vast" };
  if (code === "55P03") return { code, why: "55P03: een andere sessie houdt een vergrendeling vast" };
  return undefined;
}

/**
 * PostgreSQL: the connection went (Bun's ERR_POSTGRES_CONNECTION_*, SQLSTATE class 08) or
 * the server is shutting down or starting (57P01–57P03, a restart): the same write on a
 * new connection moments later may well get through.
 */
export function connectionLost(e: unknown): boolean {
  const code = unavailableCode(e);
  return code !== undefined && /^(08|57P0[123]$|ERR_POSTGRES_CONNECTION)/.test(code);
}

/** Errors of the write API that stored nothing (its 503s), for onError's NOTHING_STORED_HEADER. */
const storedNothing = new WeakSet<object>();

/** Marks `e` as an answer of the write API after which nothing is stored; `e` itself is returned. */
export function markNothingStored<E>(e: E): E {
  if (typeof e === "object" && e !== null) storedNothing.add(e);
  return e;
}

/** The header a marked error's answer carries (src/client.ts: only then is a call without keys repeated). */
export function nothingStoredHeaders(e: unknown): Record<string, string> {
  return typeof e === "object" && e !== null && storedNothing.has(e) ? { [NOTHING_STORED_HEADER]: NOTHING_STORED_VALUE } : {};
}

/**
 * File-system failures that mean "not now" rather than "broken": no space left (ENOSPC,
 * EDQUOT: a quota; EFBIG: the file size limit) or a file system that went read-only
 * (EROFS, as after an I/O error). The anchor file, the outbox and a backup write files
 * of their own beside the database.
 */
const FS_UNAVAILABLE = new Set(["ENOSPC", "EDQUOT", "EFBIG", "EROFS"]);

/** The errno code (ENOSPC, …) when `e` is such a file-system failure (Node's SystemError); else undefined. */
export function fileSystemUnavailableCode(e: unknown): string | undefined {
  if (typeof e !== "object" || e === null) return undefined;
  const code = (e as { code?: unknown }).code;
  return typeof code === "string" && FS_UNAVAILABLE.has(code) ? code : undefined;
}

/**
 * The "not now" codes (unavailableCode, fileSystemUnavailableCode) that mean the storage
 * itself takes no writes, which passes only when someone acts (frees space, repairs the
 * disk, points the service at the primary): SQLite's full, read-only or failing file
 * (SQLITE_FULL, SQLITE_READONLY, SQLITE_IOERR*) or one it cannot open (SQLITE_CANTOPEN:
 * the database's folder gone or not accessible, so neither its -wal/-shm nor a journal
 * can be made), PostgreSQL's disk_full (53100; the rest of its class 53 is memory and
 * connection limits, not storage) and read_only_sql_transaction (25006: after a failover
 * the URL reaches a standby, or default_transaction_read_only is on), and a full or
 * read-only file system under a file the service writes (ENOSPC, EDQUOT, EFBIG, EROFS).
 * Busy, locked or lost connections are not among them: those pass by themselves.
 */
const STORAGE_UNWRITABLE = new Set(["SQLITE_FULL", "SQLITE_READONLY", "SQLITE_IOERR", "SQLITE_CANTOPEN", "53100", "25006"]);

/** The code (SQLITE_FULL, 53100, ENOSPC, …) when `e` says the storage takes no writes (STORAGE_UNWRITABLE); else undefined. */
export function storageUnwritableCode(e: unknown): string | undefined {
  const code = unavailableCode(e);
  if (code !== undefined) return STORAGE_UNWRITABLE.has(code) ? code : undefined;
  return fileSystemUnavailableCode(e);
}

/**
 * The alarm an error no job expected raises: storage-unwritable (mailed) when the storage
 * takes no writes (storageUnwritableCode), else internal-error. onError's, and a job's that
 * carries on past a file it could not write (src/jobs/witness-alarm.ts).
 */
export function unexpectedAlarmType(e: unknown): "storage-unwritable" | "internal-error" {
  return storageUnwritableCode(e) !== undefined ? "storage-unwritable" : "internal-error";
}

/** The status onError answers an unexpected error with: 503 for an unavailable database or a full or read-only disk, else 500. */
export function unexpectedStatus(e: unknown): 500 | 503 {
  return unavailableCode(e) === undefined && fileSystemUnavailableCode(e) === undefined ? 500 : 503;
}

export function json(status: number, body: unknown, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { "content-type": "application/json; charset=utf-8", ...headers },
  });
}

/** A JSON Schema node as far as the messages below read it. */
interface SchemaNode {
  type?: string;
  anyOf?: SchemaNode[];
  enum?: unknown[];
  const?: unknown;
  required?: string[];
  minimum?: number;
  maximum?: number;
  format?: string;
  pattern?: string;
  minLength?: number;
  maxLength?: number;
  minItems?: number;
  maxItems?: number;
}

function bounds(s: SchemaNode): string {
  const parts: string[] = [];
  // The safe-integer bounds only say "a whole JSON number"; not worth a mention.
  if (typeof s.minimum === "number" && s.minimum !== Number.MIN_SAFE_INTEGER) parts.push(`≥ ${s.minimum}`);
  if (typeof s.maximum === "number" && s.maximum !== Number.MAX_SAFE_INTEGER) parts.push(`≤ ${s.maximum}`);
  return parts.length > 0 ? ` ${parts.join(" en ")}` : "";
}

/** What a schema asks for, in Dutch: "een geheel getal ≥ 0 of null". */
export function expectation(schema: unknown): string {
  const s = (schema ?? {}) as SchemaNode;
  if (Array.isArray(s.anyOf)) {
    const orNull = s.anyOf.some((a) => a.type === "null");
    return [...s.anyOf.filter((a) => a.type !== "null").map(expectation), ...(orNull ? ["null"] : [])].join(" of ");
  }
  if (Array.isArray(s.enum)) return `één van ${s.enum.map((v) => JSON.stringify(v)).join(", ")}`;
  if (s.const !== undefined) return JSON.stringify(s.const);
  switch (s.type) {
    case "integer":
      return `een geheel getal${bounds(s)}`;
    case "number":
      return `een getal${bounds(s)}`;
    case "string":
      if (s.format === "date-time") return "een tijdstip in ISO 8601 met tijdzone (bv. 2026-11-23T12:00:00Z)";
      if (s.format === "email") return "een e-mailadres";
      if (s.pattern !== undefined && PATTERN_MEANINGS.has(s.pattern)) return PATTERN_MEANINGS.get(s.pattern)!;
      return `een tekst (string)${lengths(s.minLength, s.maxLength, "tekens")}`;
    case "boolean":
      return "true of false";
    case "array":
      return `een lijst (array)${lengths(s.minItems, s.maxItems, "elementen")}`;
    case "null":
      return "null";
    case "object":
      return s.required && s.required.length > 0 ? `een JSON-object met ten minste ${s.required.join(", ")}` : "een JSON-object";
  }
  return "een geldige waarde";
}

function acceptsNull(schema: SchemaNode): boolean {
  return schema.type === "null" || (Array.isArray(schema.anyOf) && schema.anyOf.some(acceptsNull));
}

/** The most of a field name a message repeats: the name of an unknown field is the caller's. */
const MAX_FIELD_NAME = 100;

/** `/checkpoints/0/root` → `checkpoints[0].root`; each name at most MAX_FIELD_NAME characters, control characters as \uXXXX. */
function fieldName(path: string): string {
  let out = "";
  for (const part of path.split("/").slice(1)) {
    const whole = part.replace(/~1/g, "/").replace(/~0/g, "~");
    const cut = whole.length > MAX_FIELD_NAME ? `${whole.slice(0, MAX_FIELD_NAME)}…` : whole;
    const key = cut.replace(/[\u0000-\u001f\u007f-\u009f\ud800-\udfff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
    out += /^\d+$/.test(key) ? `[${key}]` : out === "" ? key : `.${key}`;
  }
  return out;
}

/**
 * The 400 message for a body that does not match its schema: the first field that is
 * wrong, by name, and what it should be. Never the value itself (it may be anything,
 * a secret pasted in the wrong place included).
 */
export function validationMessage(error: Pick<ValidationError, "valueError"> & { type?: string }): string {
  const first = error.valueError;
  if (!first) return error.type === "params" ? "Ongeldig pad." : "Ongeldige body.";
  const schema = first.schema as SchemaNode;
  const field = fieldName(first.path);
  // A path parameter (PUT /api/tenants/{id}): Elysia checks it before the body is read.
  if (error.type === "params") return `Ongeldig pad: {${field}} moet ${expectation(schema)} zijn.`;
  // additionalProperties: false. A misspelt field would otherwise be dropped unseen.
  if (first.type === ValueErrorType.ObjectAdditionalProperties) return `Onbekend veld ${field}.`;
  if (field === "") return `Ongeldige body: verwacht ${expectation(schema)}.`;
  if (first.value === undefined) return `Veld ${field} ontbreekt (verplicht: ${expectation(schema)}).`;
  // Sent as null where null is not allowed (a required field, or an optional one that is left out instead).
  if (first.value === null && !acceptsNull(schema)) return `Veld ${field} mag niet null zijn (verwacht: ${expectation(schema)}).`;
  return `Veld ${field} moet ${expectation(schema)} zijn.`;
}
