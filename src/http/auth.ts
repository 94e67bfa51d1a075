// The auth gate, the one place that decides who may call a job. It runs
// in onRequest, before Elysia reads or parses a body, so a wrong token with a
// malformed body is 401. Only the Authorization header counts: a token in the query
// string would end up in access logs, so it is never read.
import { createHash, timingSafeEqual } from "node:crypto";
import { MAX_SECRET_LENGTH as MAX_TOKEN } from "../config.ts";
import { json } from "./errors.ts";

const SCHEME = /^bearer +([^\s]+) *$/i;

function digest(value: string): Buffer {
  return createHash("sha256").update(value, "utf8").digest();
}

/**
 * Returns a checker for one secret. Both sides are hashed to 32-byte SHA-256 digests
 * and compared with timingSafeEqual: the time does not depend on where the token
 * differs from the secret, nor on its length.
 */
export function bearerChecker(
  secret: string,
  /** The comparison; passed in so a test can see what is compared. */
  compare: (a: Buffer, b: Buffer) => boolean = timingSafeEqual,
): (authorization: string | null) => boolean {
  const expected = digest(secret);
  return (authorization) => {
    if (authorization === null || authorization.length > MAX_TOKEN + 16) return false;
    const m = SCHEME.exec(authorization);
    if (!m) return false;
    return compare(digest(m[1]!), expected);
  };
}

/**
 * Returns a checker for the secrets of one scope (the current one and, during a rotation,
 * the previous): true when the token is any of them. Every secret is compared on every
 * call, never short-circuited, and an unset one (null) stands in as a random secret no
 * token matches: the work, so the time, is the same whichever matched and however many
 * are set.
 */
export function anySecretChecker(
  secrets: readonly (string | null)[],
  compare: (a: Buffer, b: Buffer) => boolean = timingSafeEqual,
): (authorization: string | null) => boolean {
  const checks = secrets.map((s) => bearerChecker(s ?? crypto.randomUUID() + crypto.randomUUID(), compare));
  return (authorization) => checks.map((check) => check(authorization)).includes(true);
}

/** Who may call a path: the crontab (CRON_SECRET), the host application (APP_SECRET), or anyone. */
export type Scope = "cron" | "app" | "open";

/**
 * The scope of a path, however its slashes and letters are written: the jobs under
 * /api/cron/ for the crontab; the paths in `open` (health, the API documentation,
 * /metrics with a gate of its own) for anyone; everything else for the host
 * application, so a path nobody listed is never open by mistake.
 */
export function scopeOf(pathname: string, open: ReadonlySet<string>): Scope {
  const p = pathname.replace(/\/{2,}/g, "/").toLowerCase();
  if (p === "/api/cron" || p.startsWith("/api/cron/")) return "cron";
  if (open.has(p) || (p.length > 1 && p.endsWith("/") && open.has(p.slice(0, -1)))) return "open";
  return "app";
}

/**
 * The path of a request as Bun routes it, without its query; null when request.url is
 * not absolute. Bun routes on the request line's path, but builds request.url from the
 * Host header, and leaves it relative ("/api/audit") when that header is missing or not
 * a valid host ("x/", "a@b"): a path read from such a url by its "//" would be wrong.
 */
export function pathOf(url: string): string | null {
  if (!url.startsWith("http://") && !url.startsWith("https://")) return null;
  // A valid host holds no "/": the path starts at the first one after the scheme.
  const start = url.indexOf("/", url.indexOf("://") + 3);
  if (start < 0) return "/";
  const end = url.indexOf("?", start);
  return url.slice(start, end < 0 ? undefined : end);
}

/** RFC 9112: a request without a valid Host header is answered 400. */
export function badHost(): Response {
  return json(400, { error: "Ontbrekende of ongeldige Host-header." });
}

export function unauthorized(): Response {
  return json(401, { error: "Niet geautoriseerd: ontbrekend of ongeldig token." }, { "www-authenticate": "Bearer" });
}

export function forbidden(scope: "cron" | "app"): Response {
  return json(403, {
    error:
      scope === "cron"
        ? "Verboden: dit token opent de schrijf-API, geen taken; taken vragen CRON_SECRET."
        : "Verboden: dit token opent de taken, niet de schrijf-API; die vraagt APP_SECRET.",
  });
}

export interface GateSecrets {
  cron: string;
  /** Unset: the write API is closed (every token 401, CRON_SECRET 403). */
  app: string | null;
  /** APP_SECRET_VORIG: the previous app secret during a rotation; opens what `app` opens. */
  appVorig?: string | null;
}

/**
 * The gate: every path but the open ones needs the Bearer token of its own scope. All
 * secrets (CRON_SECRET, APP_SECRET, APP_SECRET_VORIG) are compared on every protected
 * request (constant time each), so the answer time does not tell which secret a token is near. A valid token of the other scope is
 * 403, anything else 401; a request without a valid Host header 400, whatever its path.
 */
export function authGate(
  secrets: GateSecrets,
  /** The paths anyone may call (scopeOf). */
  open: ReadonlySet<string>,
  /** Told of every refusal (for the write API's counters). */
  onRefused: (scope: "cron" | "app", status: 401 | 403) => void = () => {},
): (ctx: { request: Request }) => Response | undefined {
  const isCron = bearerChecker(secrets.cron);
  // Without APP_SECRET (or APP_SECRET_VORIG) a random secret stands in: the work done is the same.
  const isApp = anySecretChecker([secrets.app, secrets.appVorig ?? null]);
  return ({ request }) => {
    const pathname = pathOf(request.url);
    if (pathname === null) return badHost();
    const scope = scopeOf(pathname, open);
    if (scope === "open") return undefined;
    const authorization = request.headers.get("authorization");
    const cron = isCron(authorization);
    const app = isApp(authorization);
    if (scope === "cron" ? cron : app) return undefined;
    const status = cron || app ? 403 : 401;
    onRefused(scope, status);
    return status === 403 ? forbidden(scope) : unauthorized();
  };
}
