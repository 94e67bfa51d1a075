// Each operator command takes its own options only (src/cli/options.ts): one that belongs
// to another command, a single-valued one given twice, a missing value, a stray argument
// are a usage error naming the option, exit 2, nothing done. Found by a review:
// `accept-restore --tenant 2 --ja` signed for every tenant; `export --tenant 1 --tenant 2`
// exported tenant 2.
import { afterEach, describe, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { runAuditCommand } from "../src/cli/audit.ts";
import { BUN, ROOT } from "./binary.ts";
import { addTenant, call, fillChain, makeTestEnv, TEST_SIGNING_KEY, TEST_VERIFIER_KEY, tempDir, type TestEnv } from "./helpers.ts";

let env: TestEnv | undefined;
afterEach(async () => {
  await env?.cleanup();
  env = undefined;
});

async function audit(args: string[], extra: Record<string, string> = {}) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runAuditCommand(args, { AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY, ...extra }, (s) => out.push(s), (s) => err.push(s));
  return { code, out: out.join("\n"), err: err.join("\n") };
}

/** An installation with two signed tenants, on a file the commands can name. */
async function installation() {
  env = makeTestEnv();
  const a = addTenant(env.store, "Alfa");
  const b = addTenant(env.store, "Beta");
  fillChain(env.store, a, 5);
  fillChain(env.store, b, 5);
  expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
  env.store.sqlite.run("PRAGMA wal_checkpoint(TRUNCATE)");
  return { db: env.config.databasePath, anker: env.config.auditAnkerBestand };
}

describe("an option of another command is refused, naming it", () => {
  test("accept-restore --tenant 2 --ja: exit 2, nothing signed", async () => {
    const { db, anker } = await installation();
    const before = readFileSync(anker, "utf8");
    const r = await audit(["accept-restore", "--tenant", "2", "--ja", "--db", db, "--bestand", anker]);
    expect(r.code).toBe(2);
    expect(r.err).toContain("--tenant is geen optie van nachtwacht accept-restore");
    expect(r.err).toContain("gebruik: nachtwacht accept-restore");
    expect(r.out).toBe("");
    expect(readFileSync(anker, "utf8")).toBe(before);
  });

  for (const [args, named] of [
    [["verify", "--uit", "x"], "--uit"],
    [["verify", "--ja"], "--ja"],
    [["verify", "--bewijs", "3"], "--bewijs"],
    [["verify", "--tenant", "2"], "--tenant"],
    [["export", "--tenant", "1", "--ja"], "--ja"],
    [["export", "--tenant", "1", "--checkpoint", "x"], "--checkpoint"],
    [["key", "--db", "x"], "--db"],
    [["adopt", "--tenant", "1", "--sleutel", TEST_VERIFIER_KEY], "--sleutel"],
    [["adopt", "--tenant", "1", "--uit", "x"], "--uit"],
    [["verify", "--foo"], "--foo"],
    [["verify", "-x"], "-x"],
  ] as [string[], string][]) {
    test(`${args.join(" ")}: exit 2 naming ${named}`, async () => {
      const r = await audit(args, { DATABASE_PATH: "/nonexistent/db", AUDIT_ANKER_BESTAND: "/nonexistent/anker" });
      expect(r.code).toBe(2);
      expect(r.err).toContain(`${named} is geen optie van nachtwacht ${args[0]}`);
      expect(r.out).toBe("");
    });
  }
});

describe("a single-valued option given twice is refused, naming it", () => {
  test("export --tenant 1 --tenant 2: exit 2, nothing exported", async () => {
    const { db, anker } = await installation();
    const r = await audit(["export", "--tenant", "1", "--tenant", "2", "--db", db, "--bestand", anker, "--sleutel", TEST_VERIFIER_KEY]);
    expect(r.code).toBe(2);
    expect(r.err).toContain("--tenant is meer dan eens gegeven");
    expect(r.out).toBe("");
  });

  for (const args of [
    ["key", "--naam", "a", "--naam", "b"],
    ["adopt", "--tenant", "1", "--tenant=2"],
    ["adopt", "--tenant", "1", "--db", "x", "--db", "y"],
    ["verify", "--bestand", "x", "--bestand", "y"],
    ["accept-restore", "--ja", "--ja"],
  ]) {
    const named = args.slice(1).find((a, i, all) => all.slice(0, i).some((b) => b.split("=")[0] === a.split("=")[0]) && a.startsWith("--"))!.split("=")[0];
    test(`${args.join(" ")}: exit 2 naming ${named}`, async () => {
      const r = await audit(args);
      expect(r.code).toBe(2);
      expect(r.err).toContain(`${named} is meer dan eens gegeven`);
      expect(r.out).toBe("");
    });
  }

  test("--sleutel stays repeatable for verify and export", async () => {
    const { db, anker } = await installation();
    const r = await audit(["verify", "--db", db, "--bestand", anker, "--sleutel", TEST_VERIFIER_KEY, "--sleutel", TEST_VERIFIER_KEY]);
    expect(r.err).toBe("");
    expect(r.code).toBe(0);
  });
});

describe("values and arguments", () => {
  for (const [args, message] of [
    [["export", "--tenant"], "--tenant heeft een waarde nodig"],
    [["export", "--tenant", "--uit", "x"], "--tenant heeft een waarde nodig"],
    [["adopt", "--tenant", "1", "--ja=nee"], "--ja neemt geen waarde"],
    [["verify", "extra"], 'nachtwacht verify neemt geen argument "extra"'],
  ] as [string[], string][]) {
    test(`${args.join(" ")}: exit 2, ${message}`, async () => {
      const r = await audit(args);
      expect(r.code).toBe(2);
      expect(r.err).toContain(message);
    });
  }
});

describe("key --naam", () => {
  for (const naam of ["a b", "a+b", "", "tab\there"]) {
    test(`${JSON.stringify(naam)}: a Dutch usage error naming what a key name may not hold, exit 2, no key printed`, async () => {
      const r = await audit(["key", "--naam", naam]);
      expect(r.code).toBe(2);
      expect(r.err).toContain(`--naam ${JSON.stringify(naam)} is geen geldige sleutelnaam: niet leeg, zonder spaties of andere witruimte, '+' of stuurtekens`);
      expect(r.err).toContain("gebruik: nachtwacht key");
      expect(r.err).not.toContain("invalid");
      expect(r.out).toBe("");
    });
  }

  test("a valid name: the key pair printed under it", async () => {
    const r = await audit(["key", "--naam", "nachtwacht.example/2026"]);
    expect(r.code).toBe(0);
    expect(r.out).toContain("AUDIT_ANKER_SLEUTEL=PRIVATE+KEY+nachtwacht.example/2026+");
  });
});

describe("crontab and demo take no options", () => {
  for (const command of ["crontab", "demo"]) {
    test(`${command} --foo: exit 2 naming it, nothing started`, () => {
      const t = tempDir("nachtwacht-opt-");
      try {
        const p = Bun.spawnSync([BUN, join(ROOT, "src", "index.ts"), command, "--foo"], { cwd: t.dir, env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: t.dir }, stdout: "pipe", stderr: "pipe", timeout: 20_000 });
        expect(p.exitCode).toBe(2);
        expect(p.stderr.toString()).toContain(`--foo is geen optie van nachtwacht ${command}`);
        expect(p.stdout.toString()).toBe("");
        expect(existsSync(join(t.dir, "data"))).toBe(false);
      } finally {
        t.cleanup();
      }
    });
  }
});

// bun run demo-data: an unknown option ended in a stack trace, and it filled whatever
// DATABASE_PATH named, a real installation included.
describe("demo-data", () => {
  const demoData = (args: string[], extra: Record<string, string> = {}) => {
    const p = Bun.spawnSync([BUN, join(ROOT, "src", "cli", "demo-data.ts"), ...args], { env: { PATH: process.env.PATH ?? "/usr/bin:/bin", ...extra }, stdout: "pipe", stderr: "pipe", timeout: 60_000 });
    return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
  };
  const small = ["--tenants", "2", "--admins", "2", "--audit", "20", "--logins", "5", "--backups", "2"];

  test("an unknown option (--tenant) or a bad number: a usage error naming it, exit 2, no stack trace", () => {
    const t = tempDir("nachtwacht-demo-");
    try {
      const r = demoData(["--db", join(t.dir, "d.db"), "--tenant", "2"]);
      expect(r.code).toBe(2);
      expect(r.err).toContain("--tenant is geen optie van demo-data");
      expect(r.err).toContain("gebruik: bun run demo-data");
      expect(r.err).not.toContain(" at ");
      const n = demoData(["--db", join(t.dir, "d.db"), "--audit", "veel"]);
      expect(n.code).toBe(2);
      expect(n.err).toContain('--audit moet een geheel getal van 0 of meer zijn, niet "veel"');
      expect(existsSync(join(t.dir, "d.db"))).toBe(false);
    } finally {
      t.cleanup();
    }
  });

  test("refuses a database that holds tenants or audit entries (DATABASE_PATH of a real installation), writing nothing; fills a new one", async () => {
    env = makeTestEnv();
    const a = addTenant(env.store, "Echte klant");
    fillChain(env.store, a, 3);
    env.store.sqlite.run("PRAGMA wal_checkpoint(TRUNCATE)");
    const path = env.config.databasePath;
    const count = () => (env!.store.sqlite.query("SELECT (SELECT count(*) FROM tenants) + (SELECT count(*) FROM audit_entries) AS n").get() as { n: number }).n;
    const before = count();
    const r = demoData(small, { DATABASE_PATH: path });
    expect(r.code).toBe(2);
    expect(r.err).toContain(`demo-data: ${path} is niet leeg (het heeft al tenants en audit-entries)`);
    expect(count()).toBe(before);
    // A new file, as the README's command and the benchmarks use it: filled.
    const fresh = join(env.dir, "demo.db");
    const ok = demoData(["--db", fresh, ...small]);
    expect([ok.code, ok.err]).toEqual([0, ""]);
    expect(JSON.parse(ok.out)).toMatchObject({ db: fresh, tenants: 2, audit: 20 });
    // Filled once: a second run on it is refused too.
    expect(demoData(["--db", fresh, ...small]).code).toBe(2);
  });
});

// backup, config check, db-convert and migrate-to parsed their options with node's own
// parseArgs: a single-valued option given twice silently took the last one
// (`backup --map /a --map /b` wrote to /b). They now share parseOptions.
describe("backup, config check, db-convert and migrate-to share the rule", () => {
  const collect = async (run: (out: (s: string) => void, err: (s: string) => void) => number | Promise<number>) => {
    const out: string[] = [];
    const err: string[] = [];
    const code = await run((s) => out.push(s), (s) => err.push(s));
    return { code, out: out.join("\n"), err: err.join("\n") };
  };

  test("an option given twice: a usage error naming it, nothing done", async () => {
    const t = tempDir("nachtwacht-opt-");
    try {
      const a = join(t.dir, "a");
      const b = join(t.dir, "b");
      const db = join(t.dir, "geen.db");
      const { runBackup } = await import("../src/cli/backup.ts");
      const { runConfigCheck } = await import("../src/cli/config-check.ts");
      const { runDbConvert } = await import("../src/cli/db-convert.ts");
      const { runMigrateTo } = await import("../src/cli/migrate-to.ts");
      const cases: [string, number, (out: (s: string) => void, err: (s: string) => void) => number | Promise<number>][] = [
        ["--map", 64, (o, e) => runBackup(["--geen-melding", "--db", db, "--map", a, "--map", b], {}, o, e)],
        ["--env", 2, (o, e) => runConfigCheck(["--env", a, "--env", b], {}, o, e)],
        ["--db", 2, (o, e) => runDbConvert(["--db", a, "--db", b, "--ja"], {}, o, e)],
        ["--parallel", 2, (o, e) => runMigrateTo(["--database-url", "postgres://x@127.0.0.1:1/x", "--db", db, "--parallel", "1", "--parallel", "2"], {}, o, e, async () => "")],
      ];
      for (const [named, exit, run] of cases) {
        const r = await collect(run);
        expect([named, r.code]).toEqual([named, exit]);
        expect(r.err).toContain(`${named} is meer dan eens gegeven`);
        expect(r.out).toBe("");
      }
      expect([existsSync(a), existsSync(b), existsSync(db)]).toEqual([false, false, false]);
    } finally {
      t.cleanup();
    }
  });

  test("a value that is the next option: a Dutch usage error naming it (was node's English text)", async () => {
    const { runDbConvert } = await import("../src/cli/db-convert.ts");
    const r = await collect((o, e) => runDbConvert(["--db", "--ja"], {}, o, e));
    expect(r.code).toBe(2);
    expect(r.err).toContain("--db heeft een waarde nodig");
  });
});
