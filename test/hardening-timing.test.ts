// Timing (issue 8, part 2). The argument: src/http/auth.ts hashes the presented token
// and the secret to SHA-256 digests (always 32 bytes) and compares those with
// crypto.timingSafeEqual, which looks at every byte whatever they hold. The hash runs
// over the presented token only, so its time depends on the token's length (which the
// caller chose) and not on how much of it matches the secret; and a matching prefix
// of the token says nothing about a matching prefix of its digest.
//
// The tests: (1) structural — every comparison is timingSafeEqual over two 32-byte
// buffers that are exactly sha256(token) and sha256(secret), for tokens of any length;
// (2) statistical — interleaved batches, medians: a wrong token sharing 60 characters
// with the secret costs the same as one sharing none, while the same harness clearly
// sees the difference for an early-exit comparison (so it has the power to notice).
import { afterAll, describe, expect, mock, test } from "bun:test";
import * as realCrypto from "node:crypto";

const SECRET = "a1b2c3d4".repeat(8); // 64 characters, like `openssl rand -hex 32`
/** node:crypto as it was before any mock (mock.module updates live bindings). */
const ORIGINAL = { ...realCrypto };
const sha256 = (s: string) => ORIGINAL.createHash("sha256").update(s, "utf8").digest();
// mock.module is process-wide: hand node:crypto back as it was.
const restoreCrypto = () => mock.module("node:crypto", () => ({ ...ORIGINAL }));
afterAll(restoreCrypto);

describe("the secret comparison", () => {
  test("compares SHA-256 digests of token and secret (32 bytes each) with timingSafeEqual, whatever the token's length", async () => {
    const compared: [Buffer, Buffer][] = [];
    const real = ORIGINAL;
    mock.module("node:crypto", () => ({
      ...real,
      timingSafeEqual: (a: Buffer, b: Buffer) => {
        compared.push([Buffer.from(a), Buffer.from(b)]);
        return real.timingSafeEqual(a, b);
      },
    }));
    // A fresh instance of the gate, bound to the wrapped timingSafeEqual.
    const fresh = "../src/http/auth.ts?timing-test";
    const { bearerChecker } = (await import(fresh)) as typeof import("../src/http/auth.ts");
    const check = bearerChecker(SECRET);
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
    restoreCrypto();
  });

  test("statistically: a wrong token sharing a 60-character prefix costs what one sharing nothing costs; an early-exit compare would not", async () => {
    const { bearerChecker } = await import("../src/http/auth.ts");
    const check = bearerChecker(SECRET);
    const near = `Bearer ${SECRET.slice(0, 60)}zzzz`;
    const far = `Bearer ${"y".repeat(64)}`;
    // The comparison the gate must not be: stops at the first differing character.
    const earlyExit = (h: string) => {
      const t = h.slice(7);
      if (t.length !== SECRET.length) return false;
      for (let i = 0; i < t.length; i++) if (t.charCodeAt(i) !== SECRET.charCodeAt(i)) return false;
      return true;
    };
    /** Median ns per call of a and of b, in interleaved batches (alternating which goes first). */
    const medians = (f: (h: string) => boolean, a: string, b: string) => {
      const ta: number[] = [];
      const tb: number[] = [];
      let accepted = 0;
      for (let round = 0; round < 300; round++) {
        const order = round % 2 === 0 ? ([[a, ta], [b, tb]] as const) : ([[b, tb], [a, ta]] as const);
        for (const [token, out] of order) {
          const t0 = Bun.nanoseconds();
          for (let i = 0; i < 200; i++) if (f(token)) accepted++;
          out.push((Bun.nanoseconds() - t0) / 200);
        }
      }
      const med = (x: number[]) => x.sort((p, q) => p - q)[x.length >> 1]!;
      expect(accepted).toBe(0);
      return { near: med(ta), far: med(tb), ratio: med(ta) / med(tb) };
    };
    medians(check, near, far); // warm-up (JIT)
    const gate = medians(check, near, far);
    const naive = medians(earlyExit, near, far);
    console.log(`ns per check, near/far: gate ${gate.near.toFixed(0)}/${gate.far.toFixed(0)} (×${gate.ratio.toFixed(3)}), early-exit ${naive.near.toFixed(0)}/${naive.far.toFixed(0)} (×${naive.ratio.toFixed(2)})`);
    // Measured on the 2-core build machine: gate ×0.99–1.00, early-exit ×2.1–2.8.
    expect(naive.ratio).toBeGreaterThan(1.4);
    expect(gate.ratio).toBeGreaterThan(0.85);
    expect(gate.ratio).toBeLessThan(1.15);
  });
});
