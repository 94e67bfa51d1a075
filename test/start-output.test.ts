// What the service prints when it starts: the redacted configuration and the public
// verifier key that auditors need, never the signing key (started from source as a
// real process, as systemd would run it). On both stores: on PostgreSQL the process
// serves a fresh database of the run's cluster (DATABASE_URL), which it migrates at start.
import { afterEach, describe, expect, test } from "bun:test";
import { startService, testDatabase } from "./fixtures/hardening.ts";
import { DIALECT, testCluster } from "./dialect.ts";
import { NOW, SECRET, TEST_SIGNING_KEY, TEST_VERIFIER_KEY } from "./helpers.ts";

const DB_PASSWORD = "db-wachtwoord-7c41e0";
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const f of cleanups.splice(0).reverse()) await f();
});

describe("start output", () => {
  test("the listening line carries the public verifier key; neither the signing key nor the secret appears anywhere", async () => {
    const db = testDatabase(cleanups, NOW, () => {});
    // On PostgreSQL the URL carries a password (the test cluster trusts loopback and does
    // not ask for it): a secret of the environment too, printed only redacted.
    const url = DIALECT === "pg" ? Object.assign(new URL(await (await testCluster()).createDatabase()), { password: DB_PASSWORD }).href : null;
    const env: Record<string, string> = url === null ? db.env : { ...db.env, DATABASE_URL: url };
    const svc = await startService(env);
    cleanups.push(() => (svc.proc.exitCode === null ? svc.proc.kill("SIGKILL") : undefined));
    // Stop it and wait for the exit: then every line it wrote has been read.
    svc.proc.kill("SIGTERM");
    expect(await svc.exited).toBe(0);
    const out = svc.output();

    const lines = out.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l) as Record<string, any>);
    const listening = lines.find((l) => l.message === "nachtwacht listening");
    expect(listening).toBeDefined();
    expect(listening!.verificatieSleutel).toBe(TEST_VERIFIER_KEY);
    expect(listening!.config.auditAnkerSleutel).toBe("***");
    expect(listening!.config.databaseUrl).toBe(url === null ? null : Object.assign(new URL(url), { password: "***" }).href);

    const seed = TEST_SIGNING_KEY.split("+").slice(4).join("+");
    expect(out).not.toContain(TEST_SIGNING_KEY);
    expect(out).not.toContain(seed);
    expect(out).not.toContain("PRIVATE+KEY");
    expect(out).not.toContain(SECRET);
    expect(out).not.toContain(DB_PASSWORD);
  });
});
