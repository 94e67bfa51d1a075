// What the service prints when it starts: the redacted configuration and the public
// verifier key that auditors need, never the signing key (started from source as a
// real process, as systemd would run it). On both stores: on PostgreSQL the process
// serves a fresh database of the run's cluster (DATABASE_URL), which it migrates at start.
// And a start that cannot succeed: one line naming the setting and what to do, exit 2.
import { afterEach, describe, expect, test } from "bun:test";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BUN, freePort, ROOT } from "./binary.ts";
import { startService, testDatabase } from "./fixtures/hardening.ts";
import { DIALECT, sqliteOnly, testCluster } from "./dialect.ts";
import { fillUntilFree, mountTmpfs, NOW, SECRET, TEST_SIGNING_KEY, TEST_VERIFIER_KEY } from "./helpers.ts";
import { generateKeyPair } from "../src/audit/note.ts";

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
    // A rotation's previous secrets beside the current ones: none of the four is printed.
    const bearer = { APP_SECRET: "app-secret-nieuw-4f0c1d2e3b4a59687766554433221100", APP_SECRET_VORIG: "app-secret-oud-9e8d7c6b5a4938271605f4e3d2c1b0a9", METRICS_SECRET: "metrics-secret-nieuw-1a2b3c4d5e6f708192a3b4c5d6e7f8", METRICS_SECRET_VORIG: "metrics-secret-oud-f1e2d3c4b5a6978877665544332211" };
    const env: Record<string, string> = { ...(url === null ? db.env : { ...db.env, DATABASE_URL: url }), ...bearer };
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
    expect(listening!.config).toMatchObject({ appSecret: "***", appSecretVorig: "***", metricsSecret: "***", metricsSecretVorig: "***" });
    expect(listening!.config.databaseUrl).toBe(url === null ? null : Object.assign(new URL(url), { password: "***" }).href);

    const seed = TEST_SIGNING_KEY.split("+").slice(4).join("+");
    expect(out).not.toContain(TEST_SIGNING_KEY);
    expect(out).not.toContain(seed);
    expect(out).not.toContain("PRIVATE+KEY");
    expect(out).not.toContain(SECRET);
    expect(out).not.toContain(DB_PASSWORD);
    for (const v of Object.values(bearer)) expect(out).not.toContain(v);
  });
});

/** The service started as a process that is expected to stop at once: its exit code and output. */
async function failedStart(env: Record<string, string>) {
  const p = Bun.spawn([BUN, join(ROOT, "src/index.ts")], { cwd: ROOT, env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: tmpdir(), ...env }, stdout: "pipe", stderr: "pipe" });
  const [code, out, err] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
  return { code, out, err };
}

/** Its database setting on the run's store. */
async function database(env: Record<string, string>): Promise<Record<string, string>> {
  return DIALECT === "pg" ? { ...env, DATABASE_URL: await (await testCluster()).createDatabase() } : env;
}

/** A folder of its own that no one may write (a read-only tmpfs: root ignores file modes). */
function readOnlyFolder(dir: string): string {
  const ro = join(dir, "alleen-lezen");
  mkdirSync(ro);
  const r = Bun.spawnSync(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", ro], { stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`this test needs root to mount a tmpfs (as .ci/run runs it): ${r.stderr.toString().trim()}`);
  cleanups.push(() => Bun.spawnSync(["umount", "-l", ro]));
  return ro;
}

describe("a start that cannot succeed: exit 2 and one line that says why, no stack trace", () => {
  test("a second service on the HOST and PORT of a running one does not start beside it (it would take a share of the calls and writes): EADDRINUSE; the first serves on", async () => {
    const db = testDatabase(cleanups, NOW, () => {});
    const first = await startService(await database(db.env));
    cleanups.push(() => (first.proc.exitCode === null ? first.proc.kill("SIGKILL") : undefined));
    const port = new URL(first.url).port;
    const other = testDatabase(cleanups, NOW, () => {});
    const second = await failedStart({ ...(await database(other.env)), HOST: "127.0.0.1", PORT: port });
    expect({ code: second.code, err: second.err }).toEqual({
      code: 2,
      err: `nachtwacht: kan niet starten: kan niet luisteren op HOST 127.0.0.1, PORT ${port} (EADDRINUSE): daar luistert al een ander proces (een tweede nachtwacht?); stop het of kies een andere PORT\n`,
    });
    for (let i = 0; i < 5; i++) expect((await fetch(`${first.url}/health`)).status).toBe(200);
  });

  test("a HOST that is no address of this host: EADDRNOTAVAIL, naming HOST", async () => {
    const db = testDatabase(cleanups, NOW, () => {});
    const r = await failedStart({ ...(await database(db.env)), HOST: "192.0.2.55", PORT: String(freePort()) });
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/^nachtwacht: kan niet starten: kan niet luisteren op HOST 192\.0\.2\.55, PORT \d+ \(EADDRNOTAVAIL\): dat adres hoort niet bij deze host \(HOST\)\n$/);
  });

  test("an anchor file in a folder the service may not write (as under the unit's ProtectSystem): the setting, the path, and ReadWritePaths", async () => {
    const db = testDatabase(cleanups, NOW, () => {});
    const ro = readOnlyFolder(db.dir);
    const r = await failedStart({ ...(await database(db.env)), AUDIT_ANKER_BESTAND: join(ro, "audit-ankers.jsonl"), PORT: String(freePort()) });
    expect(r.code).toBe(2);
    expect(r.err).toStartWith(`nachtwacht: kan niet starten: AUDIT_ANKER_BESTAND: kan ${join(ro, "zegels-sinds")} niet schrijven (EROFS). `);
    expect(r.err).toContain(`ReadWritePaths=${ro}`);
    expect(r.err.trim().split("\n")).toHaveLength(1);
  });

  test("a row seal key marker naming a key the start does not trust (a start with the key before a rotation): one line naming the file and what to do; the marker unchanged", async () => {
    const db = testDatabase(cleanups, NOW, () => {});
    const marker = join(db.dir, "zegelsleutel");
    const nieuw = generateKeyPair("nachtwacht.test/nieuw");
    writeFileSync(marker, `${nieuw.verifierKey}\n`);
    const r = await failedStart({ ...(await database(db.env)), PORT: String(freePort()) });
    expect(r.code).toBe(2);
    expect(r.err).toStartWith(`nachtwacht: kan niet starten: ${marker} zegt dat de rijen van deze installatie zijn verzegeld met ${nieuw.verifierKey}; `);
    expect(r.err.trim().split("\n")).toHaveLength(1);
    expect(readFileSync(marker, "utf8")).toBe(`${nieuw.verifierKey}\n`);
  });

  sqliteOnly("a database in a folder the service may not write: DATABASE_PATH, and ReadWritePaths", async () => {
    const db = testDatabase(cleanups, NOW, () => {});
    const ro = readOnlyFolder(db.dir);
    const r = await failedStart({ ...db.env, DATABASE_PATH: join(ro, "nachtwacht.db"), PORT: String(freePort()) });
    expect(r.code).toBe(2);
    expect(r.err).toStartWith(`nachtwacht: kan niet starten: DATABASE_PATH: kan ${join(ro, "nachtwacht.db")} niet openen of schrijven (SQLITE_CANTOPEN`);
    expect(r.err).toContain(`ReadWritePaths=${ro}`);
    expect(r.err.trim().split("\n")).toHaveLength(1);
  });

  sqliteOnly("a restart on a full disk (a clean stop removed -shm, which SQLite cannot make again: SQLITE_IOERR_SHMSIZE): DATABASE_PATH, and that the disk may be full", async () => {
    const fs = mountTmpfs("4m");
    cleanups.push(fs.cleanup);
    const db = testDatabase(cleanups, NOW, () => {});
    const env = { ...db.env, DATABASE_PATH: join(fs.dir, "nachtwacht.db") };
    const first = await startService(env);
    cleanups.push(() => (first.proc.exitCode === null ? first.proc.kill("SIGKILL") : undefined));
    first.proc.kill("SIGTERM");
    expect(await first.exited).toBe(0);
    fillUntilFree(fs.dir, 0);
    const r = await failedStart({ ...env, PORT: String(freePort()) });
    expect(r.code).toBe(2);
    expect(r.err).toStartWith(`nachtwacht: kan niet starten: DATABASE_PATH: kan ${join(fs.dir, "nachtwacht.db")} niet openen of schrijven (SQLITE_IOERR`);
    expect(r.err).toContain(`df -h ${fs.dir}`);
    expect(r.err.trim().split("\n")).toHaveLength(1);
  });
});
