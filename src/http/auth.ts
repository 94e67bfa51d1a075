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

/** Who may call a path: the crontab (CRON_SECRET), the host application (APP_SECRET), or anyone. */
export type Scope = "cron" | "app" | "open";

/**
 * The scope of a path, however its slashes and letters are written: the jobs under
 * /api/cron/, the write API everywhere else under /api/, the rest (health, docs) open.
 */
export function scopeOf(pathname: string): Scope {
  const p = pathname.replace(/\/{2,}/g, "/").toLowerCase();
  if (p === "/api/cron" || p.startsWith("/api/cron/")) return "cron";
  if (p.startsWith("/api/")) return "app";
  return "open";
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
}

/**
 * The gate: every path under /api/ needs the Bearer token of its own scope. Both
 * secrets are compared on every protected request (constant time each), so the answer
 * time does not tell which secret a token is near. A valid token of the other scope is
 * 403, anything else 401.
 */
export function authGate(
  secrets: GateSecrets,
  /** Told of every refusal (for the write API's counters). */
  onRefused: (scope: "cron" | "app", status: 401 | 403) => void = () => {},
): (ctx: { request: Request }) => Response | undefined {
  const isCron = bearerChecker(secrets.cron);
  // Without APP_SECRET no token can match: a random secret stands in, so the work done is the same.
  const isApp = bearerChecker(secrets.app ?? crypto.randomUUID() + crypto.randomUUID());
  return ({ request }) => {
    const url = request.url;
    // pathname without allocating a URL for every request
    const start = url.indexOf("/", url.indexOf("//") + 2);
    const end = url.indexOf("?", start);
    const pathname = start < 0 ? "/" : url.slice(start, end < 0 ? undefined : end);
    const scope = scopeOf(pathname);
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
