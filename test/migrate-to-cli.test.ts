// `nachtwacht migrate-to`'s command line, up to the point where it would connect: a URL
// that carries a password is refused there, wherever in the URL the password stands
// (Bun's client also takes `?password=`), and is never echoed. Needs no PostgreSQL:
// nothing is read or connected before the refusal (test/pg-migrate.test.ts has the rest).
import { describe, expect, test } from "bun:test";
import { SQL } from "bun";
import { runMigrateTo } from "../src/cli/migrate-to.ts";
import { redactUrl } from "../src/pg/url.ts";
import { TEST_VERIFIER_KEY } from "./helpers.ts";

async function migrateTo(url: string) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runMigrateTo(
    ["--database-url", url, "--db", "/nonexistent/nachtwacht.db", "--bestand", "/nonexistent/ankers.jsonl", "--sleutel", TEST_VERIFIER_KEY],
    {},
    (s) => out.push(s),
    (s) => err.push(s),
    () => Promise.reject(new Error("stdin must not be read")),
  );
  return { code, out: out.join("\n"), err: err.join("\n") };
}

describe("migrate-to: no password on the command line", () => {
  test("Bun's client takes a password from the query string, so that is a password on the command line too", () => {
    const s = new SQL("postgres://nw@127.0.0.1:1/nachtwacht?password=geheim-wachtwoord");
    expect(s.options.password).toBe("geheim-wachtwoord");
    void s.close();
  });

  for (const url of [
    "postgres://nw:geheim-wachtwoord@127.0.0.1:1/nachtwacht",
    "postgres://nw@127.0.0.1:1/nachtwacht?password=geheim-wachtwoord",
    "postgresql://nw@127.0.0.1:1/nachtwacht?sslmode=disable&PASSWORD=geheim-wachtwoord",
  ]) {
    test(`refused before anything is read or connected, and not echoed: ${url.replace("geheim-wachtwoord", "…")}`, async () => {
      const r = await migrateTo(url);
      expect(r.code).toBe(2);
      expect(r.err).toContain("een wachtwoord hoort niet op de opdrachtregel");
      expect(r.out + r.err).not.toContain("geheim-wachtwoord");
    });
  }
});

describe("redactUrl: what migrate-to prints of a URL", () => {
  test("masks the password in the user info and in any query parameter named like one", () => {
    expect(redactUrl("postgres://nw:geheim@db.example:5432/nachtwacht")).toBe("postgres://nw:***@db.example:5432/nachtwacht");
    const q = redactUrl("postgres://nw@db.example/nachtwacht?sslmode=require&password=geheim&sslpassword=ook-geheim");
    expect(q).not.toContain("geheim");
    expect(q).toContain("sslmode=require");
  });
});
