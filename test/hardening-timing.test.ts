// The secret comparison. src/http/auth.ts hashes the presented token and the secret to
// SHA-256 digests (always 32 bytes) and compares those with crypto.timingSafeEqual,
// which looks at every byte whatever they hold. The hash runs over the presented token
// only, so its time depends on the token's length (which the caller chose) and not on
// how much of it matches the secret; and a matching prefix of the token says nothing
// about a matching prefix of its digest.
//
// This test checks the structure: every comparison is timingSafeEqual's kind over two
// 32-byte buffers that are exactly sha256(token) and sha256(secret). The timing itself
// (a near miss costs what a far miss costs, an early-exit compare would not) is
// measured in bench/auth-timing.ts, not here: timings belong in benchmarks.
import { describe, expect, test } from "bun:test";
import { createHash, timingSafeEqual } from "node:crypto";
import { anySecretChecker, authGate, bearerChecker } from "../src/http/auth.ts";
import { OPEN_PATHS } from "../src/app.ts";

const SECRET = "a1b2c3d4".repeat(8); // 64 characters, like `openssl rand -hex 32`
const sha256 = (s: string) => createHash("sha256").update(s, "utf8").digest();

describe("the secret comparison", () => {
  test("compares SHA-256 digests of token and secret (32 bytes each), whatever the token's length", () => {
    const compared: [Buffer, Buffer][] = [];
    const check = bearerChecker(SECRET, (a, b) => {
      compared.push([Buffer.from(a), Buffer.from(b)]);
      return timingSafeEqual(a, b);
    });
    const tokens = ["x", SECRET.slice(0, 60), SECRET.slice(0, 63) + "0", SECRET + "0", "z".repeat(1024), SECRET];
    for (const t of tokens) expect(check(`Bearer ${t}`)).toBe(t === SECRET);
    expect(compared).toHaveLength(tokens.length);
    compared.forEach(([presented, expected], i) => {
      expect(presented.length).toBe(32);
      expect(expected.length).toBe(32);
      expect(presented.equals(sha256(tokens[i]!))).toBe(true);
      expect(expected.equals(sha256(SECRET))).toBe(true);
    });
    // Malformed headers never reach a comparison at all (refused on their shape).
    compared.length = 0;
    for (const h of [null, "", "Basic abc", "Bearer", `Bearer ${"a".repeat(5000)}`]) expect(check(h)).toBe(false);
    expect(compared).toHaveLength(0);
  });

  // With APP_SECRET_VORIG beside APP_SECRET (a rotation) the write API has two secrets:
  // were the second compared only when the first missed, the time would tell which matched.
  test("a scope's secrets, current and previous, are each compared on every call, whichever matches; an unset one stands in", () => {
    const OLD = "e5f6a7b8".repeat(8);
    let compared: Buffer[] = [];
    const counting = (a: Buffer, b: Buffer) => {
      compared.push(Buffer.from(b));
      return timingSafeEqual(a, b);
    };
    const check = anySecretChecker([SECRET, OLD], counting);
    for (const [t, ok] of [[SECRET, true], [OLD, true], ["z".repeat(64), false]] as const) {
      compared = [];
      expect(check(`Bearer ${t}`)).toBe(ok);
      expect(compared.map((b) => b.toString("hex"))).toEqual([sha256(SECRET).toString("hex"), sha256(OLD).toString("hex")]);
    }
    const single = anySecretChecker([SECRET, null], counting);
    compared = [];
    expect(single(`Bearer ${SECRET}`)).toBe(true);
    expect(compared).toHaveLength(2);
    const closed = anySecretChecker([null, null], counting);
    compared = [];
    expect(closed(`Bearer ${SECRET}`)).toBe(false);
    expect(compared).toHaveLength(2);
  });

  test("the gate with its default comparison: the secret passes however 'Bearer' is written, a near miss is 401", () => {
    const gate = authGate({ cron: SECRET, app: null }, OPEN_PATHS);
    const req = (auth?: string) => new Request("http://x/api/cron/dagrapport", { method: "POST", headers: auth ? { authorization: auth } : {} });
    expect(gate({ request: req(`Bearer ${SECRET}`) })).toBeUndefined();
    expect(gate({ request: req(`bearer   ${SECRET}  `) })).toBeUndefined();
    expect(gate({ request: req(`Bearer ${SECRET.slice(0, 63)}0`) })?.status).toBe(401);
    expect(gate({ request: req() })?.status).toBe(401);
  });
});
