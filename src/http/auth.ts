// The auth gate, the one place that decides who may call a job. It runs
// in onRequest, before Elysia reads or parses a body, so a wrong token with a
// malformed body is 401. Only the Authorization header counts: a token in the query
// string would end up in access logs, so it is never read.
import { createHash, timingSafeEqual } from "node:crypto";
import { json } from "./errors.ts";

const SCHEME = /^bearer +([^\s]+) *$/i;
/** Longer headers are refused without hashing: no secret is this long. */
const MAX_TOKEN = 1024;

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

/** True for every path under /api/, however its slashes and letters are written. */
export function isProtectedPath(pathname: string): boolean {
  return pathname.replace(/\/{2,}/g, "/").toLowerCase().startsWith("/api/");
}

export function unauthorized(): Response {
  return json(401, { error: "Niet geautoriseerd: ontbrekend of ongeldig token." }, { "www-authenticate": "Bearer" });
}

export function authGate(secret: string): (ctx: { request: Request }) => Response | undefined {
  const check = bearerChecker(secret);
  return ({ request }) => {
    const url = request.url;
    // pathname without allocating a URL for every request
    const start = url.indexOf("/", url.indexOf("//") + 2);
    const end = url.indexOf("?", start);
    const pathname = start < 0 ? "/" : url.slice(start, end < 0 ? undefined : end);
    if (!isProtectedPath(pathname)) return undefined;
    if (check(request.headers.get("authorization"))) return undefined;
    return unauthorized();
  };
}
