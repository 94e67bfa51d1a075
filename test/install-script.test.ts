// ops/install.sh staged into a temp dir (--root: no user, no systemd): the environment
// file with a fresh secret, root-only, never overwritten; the files in their places.
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseConfig } from "../src/config.ts";
import { parseSignerKey } from "../src/audit/note.ts";
import { BUN, ROOT } from "./binary.ts";
import { TEST_SIGNING_KEY } from "./helpers.ts";

const INSTALL = join(ROOT, "ops", "install.sh");

let dir: string;
let stage: string;
let fakeBinary: string;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "nachtwacht-install-"));
  stage = join(dir, "root");
  // The binary's code from source (install.sh runs its `key` command).
  fakeBinary = join(dir, "nachtwacht");
  writeFileSync(fakeBinary, `#!/bin/sh\nexec ${JSON.stringify(BUN)} ${JSON.stringify(join(ROOT, "src/index.ts"))} "$@"\n`, { mode: 0o755 });
});

afterEach(() => rmSync(dir, { recursive: true, force: true }));

async function install(args: string[] = [], path = "/usr/local/bin:/usr/bin:/bin") {
  const p = Bun.spawn(["bash", INSTALL, "--root", stage, ...args], { env: { PATH: path }, stdout: "pipe", stderr: "pipe" });
  const [code, out, err] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
  return { code, out: out + err };
}

const envPath = () => join(stage, "etc/nachtwacht/nachtwacht.env");
const envText = () => readFileSync(envPath(), "utf8");
const value = (key: string) => new RegExp(`^${key}=(.*)$`, "m").exec(envText())?.[1];
const mode = (p: string) => statSync(p).mode & 0o777;

/** KEY=VALUE lines as systemd's EnvironmentFile reads them (no quotes used here). */
function parseEnvFile(text: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of text.split("\n")) {
    const m = /^([A-Z_]+)=(.*)$/.exec(line);
    if (m) env[m[1]!] = m[2]!;
  }
  return env;
}

describe("ops/install.sh --root", () => {
  test("creates the environment file with mode 600 and fresh 64-hex secrets, never printing them", async () => {
    const r = await install(["--binary", fakeBinary]);
    expect(r.code).toBe(0);
    expect(mode(envPath())).toBe(0o600);
    expect(mode(join(stage, "etc/nachtwacht"))).toBe(0o700);
    const secret = value("CRON_SECRET")!;
    const appSecret = value("APP_SECRET")!;
    const key = value("AUDIT_ANKER_SLEUTEL")!;
    expect(secret).toMatch(/^[0-9a-f]{64}$/);
    expect(appSecret).toMatch(/^[0-9a-f]{64}$/);
    expect(appSecret).not.toBe(secret);
    // An Ed25519 signing key; its public half is in a comment below it and printed, the key itself never.
    const publicKey = parseSignerKey(key).verifierKey;
    expect(envText()).toContain(`# publieke sleutel (voor auditors en nachtwacht verify --sleutel): ${publicKey}`);
    expect(r.out).toContain(`its public key: ${publicKey}`);
    expect(r.out).not.toContain(secret);
    expect(r.out).not.toContain(appSecret);
    // the key's secret part is everything after PRIVATE+KEY+<name>+<id>+ (base64, which may itself hold a "+")
    const seed = key.split("+").slice(4).join("+");
    expect(seed.length).toBeGreaterThanOrEqual(44);
    expect(r.out).not.toContain(seed);
    // the file is a valid configuration for the service as systemd hands it over
    const config = parseConfig({ ...parseEnvFile(envText()), DATABASE_PATH: join(dir, "x.db") });
    expect(config.cronSecret).toBe(secret);
    expect(config.appSecret).toBe(appSecret);
    expect(config.port).toBe(3000);
    expect(config.host).toBe("127.0.0.1");
  });

  test("a second run keeps the secrets and the operator's own lines", async () => {
    expect((await install(["--binary", fakeBinary])).code).toBe(0);
    const secret = value("CRON_SECRET");
    const appSecret = value("APP_SECRET");
    const key = value("AUDIT_ANKER_SLEUTEL");
    writeFileSync(envPath(), envText() + "DAGRAPPORT_EMAIL=ops@example.com\n");
    chmodSync(envPath(), 0o644); // someone loosened it
    const r = await install(["--binary", fakeBinary]);
    expect(r.code).toBe(0);
    expect(r.out).toContain("kept the CRON_SECRET");
    expect(value("CRON_SECRET")).toBe(secret);
    expect(value("AUDIT_ANKER_SLEUTEL")).toBe(key);
    expect(value("APP_SECRET")).toBe(appSecret);
    expect(value("DAGRAPPORT_EMAIL")).toBe("ops@example.com");
    expect(mode(envPath())).toBe(0o600);
  });

  test("an existing file without CRON_SECRET, APP_SECRET and signing key gets all three appended; its other lines stay", async () => {
    mkdirSync(join(stage, "etc/nachtwacht"), { recursive: true });
    writeFileSync(envPath(), "PORT=4000\n# comment\n");
    expect((await install(["--binary", fakeBinary])).code).toBe(0);
    expect(envText()).toStartWith("PORT=4000\n# comment\nCRON_SECRET=");
    expect(value("CRON_SECRET")).toMatch(/^[0-9a-f]{64}$/);
    expect(value("APP_SECRET")).toMatch(/^[0-9a-f]{64}$/);
    expect(parseSignerKey(value("AUDIT_ANKER_SLEUTEL")!).name).toMatch(/^nachtwacht\./);
  });

  test("an HMAC key of an earlier version is replaced by an Ed25519 key, and the operator is told", async () => {
    mkdirSync(join(stage, "etc/nachtwacht"), { recursive: true });
    const hmac = "ab".repeat(32);
    writeFileSync(envPath(), `CRON_SECRET=${"cd".repeat(32)}\nAUDIT_ANKER_SLEUTEL=${hmac}\n`);
    const r = await install(["--binary", fakeBinary]);
    expect(r.code).toBe(0);
    expect(r.out).toContain("was an HMAC key of an earlier version");
    expect(r.out).not.toContain(hmac);
    expect(envText()).not.toContain(hmac);
    expect(value("AUDIT_ANKER_SLEUTEL")).toStartWith("PRIVATE+KEY+");
    expect(value("CRON_SECRET")).toBe("cd".repeat(32));
  });

  test("a quoted signing key is kept, not taken for an HMAC key", async () => {
    expect((await install(["--binary", fakeBinary])).code).toBe(0);
    const key = value("AUDIT_ANKER_SLEUTEL")!;
    writeFileSync(envPath(), envText().replace(/^AUDIT_ANKER_SLEUTEL=.*$/m, `AUDIT_ANKER_SLEUTEL="${key}"`));
    const r = await install(["--binary", fakeBinary]);
    expect(r.code).toBe(0);
    expect(r.out).not.toContain("HMAC");
    expect(value("AUDIT_ANKER_SLEUTEL")).toBe(`"${key}"`);
  });

  test("a signing key and secrets written with blanks around '=' are kept: no key replaced, no second line, nothing rotated", async () => {
    expect((await install(["--binary", fakeBinary])).code).toBe(0);
    const [key, cron, app] = [value("AUDIT_ANKER_SLEUTEL")!, value("CRON_SECRET")!, value("APP_SECRET")!];
    const spaced = `CRON_SECRET = ${cron}\nAPP_SECRET= ${app}\nAUDIT_ANKER_SLEUTEL= ${key}\n`;
    writeFileSync(envPath(), spaced);
    const r = await install(["--binary", fakeBinary]);
    expect(r.code).toBe(0);
    expect(r.out).not.toContain("HMAC");
    expect(r.out).not.toContain("new audit signing key");
    expect(envText()).toBe(spaced);
  });

  test("an empty AUDIT_ANKER_SLEUTEL= or APP_SECRET= line beside one with a value is dropped: the key and the secret stay, no new one is made", async () => {
    mkdirSync(join(stage, "etc/nachtwacht"), { recursive: true });
    const app = "ef".repeat(32);
    // systemd and the service take the last assignment: the empty lines after the real ones
    // must not become new values, nor stay and empty them.
    writeFileSync(envPath(), `CRON_SECRET=${"cd".repeat(32)}\nAPP_SECRET=\nAUDIT_ANKER_SLEUTEL=${TEST_SIGNING_KEY}\nAPP_SECRET=${app}\nAUDIT_ANKER_SLEUTEL=\nPORT=4000\nAUDIT_ANKER_SLEUTEL= \n`);
    const r = await install(["--binary", fakeBinary]);
    expect(r.code).toBe(0);
    expect(r.out).not.toContain("new audit signing key");
    expect(r.out).not.toContain("APP_SECRET written");
    expect(envText()).toBe(`CRON_SECRET=${"cd".repeat(32)}\nAUDIT_ANKER_SLEUTEL=${TEST_SIGNING_KEY}\nAPP_SECRET=${app}\nPORT=4000\n`);
    const config = parseConfig({ ...parseEnvFile(envText()), DATABASE_PATH: join(dir, "x.db") });
    expect(config.appSecret).toBe(app);
  });

  test("several empty AUDIT_ANKER_SLEUTEL= lines and none with a key: one new key, on the first of them", async () => {
    mkdirSync(join(stage, "etc/nachtwacht"), { recursive: true });
    writeFileSync(envPath(), `CRON_SECRET=${"cd".repeat(32)}\nAUDIT_ANKER_SLEUTEL=\nPORT=4000\nAUDIT_ANKER_SLEUTEL=\n`);
    const r = await install(["--binary", fakeBinary]);
    expect(r.code).toBe(0);
    expect(r.out.match(/new audit signing key/g)).toHaveLength(1);
    const lines = envText().split("\n");
    expect(lines.filter((l) => l.startsWith("AUDIT_ANKER_SLEUTEL="))).toHaveLength(1);
    expect(lines[1]).toStartWith("AUDIT_ANKER_SLEUTEL=PRIVATE+KEY+");
    expect(lines[3]).toBe("PORT=4000");
  });

  test("a signing key in a form install.sh does not read is never replaced: it refuses and changes nothing", async () => {
    mkdirSync(join(stage, "etc/nachtwacht"), { recursive: true });
    const odd = `CRON_SECRET=${"cd".repeat(32)}\nAUDIT_ANKER_SLEUTEL=\"x PRIVATE+KEY+nachtwacht/a+12345678+abc\"\n`;
    writeFileSync(envPath(), odd);
    const r = await install(["--binary", fakeBinary]);
    expect(r.code).not.toBe(0);
    expect(r.out).toContain("holds a signing key in a form install.sh does not read");
    expect(envText()).toBe(odd);
    expect(readdirSync(join(stage, "etc/nachtwacht")).filter((f) => f.startsWith(".nachtwacht.env."))).toEqual([]);
  });

  test("with no source of random bytes at all it stops: no empty secret written, no copy of the file left", async () => {
    const bin = join(dir, "bin");
    mkdirSync(bin);
    writeFileSync(join(bin, "openssl"), "#!/bin/sh\nexit 127\n", { mode: 0o755 });
    writeFileSync(join(bin, "od"), "#!/bin/sh\nexit 1\n", { mode: 0o755 });
    mkdirSync(join(stage, "etc/nachtwacht"), { recursive: true });
    writeFileSync(envPath(), `CRON_SECRET=${"cd".repeat(32)}\n`);
    const r = await install(["--binary", fakeBinary], `${bin}:/usr/bin:/bin`);
    expect(r.code).not.toBe(0);
    expect(r.out).toContain("could not make a random secret");
    expect(envText()).toBe(`CRON_SECRET=${"cd".repeat(32)}\n`);
    expect(readdirSync(join(stage, "etc/nachtwacht")).filter((f) => f.startsWith(".nachtwacht.env."))).toEqual([]);
  });

  test("without a working openssl the secret comes from /dev/urandom", async () => {
    const bin = join(dir, "bin");
    mkdirSync(bin);
    writeFileSync(join(bin, "openssl"), "#!/bin/sh\nexit 127\n", { mode: 0o755 });
    expect((await install(["--binary", fakeBinary], `${bin}:/usr/bin:/bin`)).code).toBe(0);
    expect(value("CRON_SECRET")).toMatch(/^[0-9a-f]{64}$/);
  });

  test("--rotate-secret replaces only CRON_SECRET", async () => {
    expect((await install(["--binary", fakeBinary])).code).toBe(0);
    const before = envText();
    const r = await install(["--rotate-secret"]);
    expect(r.code).toBe(0);
    const secret = value("CRON_SECRET")!;
    expect(secret).toMatch(/^[0-9a-f]{64}$/);
    expect(before).not.toContain(secret);
    expect(envText().replace(/^CRON_SECRET=.*$/m, "")).toBe(before.replace(/^CRON_SECRET=.*$/m, ""));
    expect(mode(envPath())).toBe(0o600);
  });

  test("puts the binary, scripts, unit and generated cron file in place with the right modes", async () => {
    expect((await install(["--binary", fakeBinary])).code).toBe(0);
    const files: [string, number, string][] = [
      ["usr/local/bin/nachtwacht", 0o755, fakeBinary],
      ["usr/local/lib/nachtwacht/nachtwacht-call.sh", 0o755, join(ROOT, "ops/nachtwacht-call.sh")],
      ["usr/local/lib/nachtwacht/backup.sh", 0o755, join(ROOT, "ops/backup.sh")],
      ["usr/local/lib/nachtwacht/env-file.sh", 0o644, join(ROOT, "ops/env-file.sh")],
      ["etc/systemd/system/nachtwacht.service", 0o644, join(ROOT, "ops/nachtwacht.service")],
      ["etc/cron.d/nachtwacht", 0o644, join(ROOT, "ops/nachtwacht.cron")],
    ];
    for (const [target, m, source] of files) {
      expect(mode(join(stage, target))).toBe(m);
      expect(readFileSync(join(stage, target), "utf8")).toBe(readFileSync(source, "utf8"));
    }
    expect(mode(join(stage, "var/lib/nachtwacht"))).toBe(0o750);
    expect(mode(join(stage, "var/backups/nachtwacht"))).toBe(0o700);
  });

  test("installs docs/operations.md (the unit's Documentation=) from the documented copy, and says so when docs/ was not copied", async () => {
    // The documented copy to the host: the binary, ops/ and docs/ side by side.
    const host = join(dir, "host");
    mkdirSync(join(host, "docs"), { recursive: true });
    Bun.spawnSync(["cp", "-r", join(ROOT, "ops"), host]);
    Bun.spawnSync(["cp", join(ROOT, "docs/operations.md"), join(host, "docs")]);
    const run = async () => {
      const p = Bun.spawn(["bash", join(host, "ops/install.sh"), "--root", stage, "--binary", fakeBinary], { env: { PATH: "/usr/local/bin:/usr/bin:/bin" }, stdout: "pipe", stderr: "pipe" });
      const [code, out, err] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
      return { code, out: out + err };
    };
    const doc = join(stage, "usr/local/share/doc/nachtwacht/operations.md");
    const r = await run();
    expect(r.code).toBe(0);
    expect(r.out).not.toContain("operations.md");
    expect(readFileSync(doc, "utf8")).toBe(readFileSync(join(ROOT, "docs/operations.md"), "utf8"));
    expect(mode(doc)).toBe(0o644);
    expect(readFileSync(join(ROOT, "docs/operations.md"), "utf8")).toContain("scp -r dist/nachtwacht ops docs");
    rmSync(join(host, "docs"), { recursive: true });
    const without = await run();
    expect(without.code).toBe(0);
    expect(without.out).toContain("WARNING: no docs/operations.md beside ops/");
  });

  test("--help prints the header comment and none of the script", async () => {
    const p = Bun.spawn(["bash", INSTALL, "--help"], { stdout: "pipe", stderr: "pipe" });
    const [code, out] = await Promise.all([p.exited, new Response(p.stdout).text()]);
    expect(code).toBe(0);
    expect(out).toStartWith("# Installs or upgrades nachtwacht");
    expect(out.trimEnd().split("\n").every((l) => l.startsWith("#"))).toBe(true);
    expect(out).not.toContain("set -euo pipefail");
  });

  test("refuses to run without a binary", async () => {
    const r = await install(["--binary", join(dir, "absent")]);
    expect(r.code).not.toBe(0);
    expect(r.out).toContain("no binary");
  });
});

describe("ops/install.sh: the backup before an upgrade", () => {
  // The system install (root, systemd, /) cannot run here, so its step runs alone:
  // pre_upgrade_backup with say, die and split_env_line, their text taken from install.sh
  // itself, against a backup.sh stub that records how it was called and exits as told.
  async function preUpgradeBackup(envFile: string, stubExit: number) {
    const data = join(dir, "data");
    mkdirSync(data, { recursive: true });
    const calls = join(dir, "calls");
    const stub = join(dir, "backup.sh");
    writeFileSync(stub, `#!/bin/sh\necho "DB=\${NACHTWACHT_DB-unset} ENV=\${NACHTWACHT_ENV-unset}" >>${JSON.stringify(calls)}\necho "$(pwd) \${NACHTWACHT_STATE_DIR-unset}" >${JSON.stringify(join(dir, "cwd"))}\nexit ${stubExit}\n`, { mode: 0o755 });
    const script =
      "set -euo pipefail\n" +
      `eval "$(sed -n -e '/^say() /p' -e '/^die() /p' -e '/^split_env_line() {/,/^}/p' -e '/^pre_upgrade_backup() {/,/^}/p' ${JSON.stringify(INSTALL)})"\n` +
      'pre_upgrade_backup "$1" "$2" "$3"\n';
    const p = Bun.spawn(["bash", "-c", script, "bash", envFile, stub, data], { env: { PATH: "/usr/bin:/bin" }, cwd: dir, stdout: "pipe", stderr: "pipe" });
    const [code, out, err] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
    let called: string[] = [];
    try {
      called = readFileSync(calls, "utf8").trimEnd().split("\n");
    } catch {}
    return { code, out: out + err, called, data };
  }
  const envFile = (text: string) => {
    const f = join(dir, "nachtwacht.env");
    writeFileSync(f, text, { mode: 0o600 });
    return f;
  };

  test("PostgreSQL (DATABASE_URL in the env file): backed up although no SQLite file exists, by backup.sh with the env file", async () => {
    const f = envFile(`CRON_SECRET=${"cd".repeat(32)}\nDATABASE_URL="postgres://nachtwacht@db.internal/nachtwacht"\n`);
    const r = await preUpgradeBackup(f, 0);
    expect(r.code).toBe(0);
    expect(r.called).toEqual([`DB=unset ENV=${f}`]);
  });

  test("SQLite at a DATABASE_PATH of the operator's (absolute, or relative to the data folder): that file backed up", async () => {
    const custom = join(dir, "elders.db");
    writeFileSync(custom, "");
    const r = await preUpgradeBackup(envFile(`DATABASE_PATH=${custom}\n`), 0);
    expect([r.code, r.called]).toEqual([0, [`DB=${custom} ENV=${join(dir, "nachtwacht.env")}`]]);
    writeFileSync(join(r.data, "ander.db"), "");
    rmSync(join(dir, "calls"));
    const rel = await preUpgradeBackup(envFile("DATABASE_PATH=ander.db\n"), 0);
    expect(rel.called).toEqual([`DB=${join(rel.data, "ander.db")} ENV=${join(dir, "nachtwacht.env")}`]);
  });

  test("backup.sh runs in the data folder (the unit's WorkingDirectory), so a relative AUDIT_ANKER_BESTAND is the service's file", async () => {
    const pg = await preUpgradeBackup(envFile("DATABASE_URL=postgres://nachtwacht@db.internal/nachtwacht\nAUDIT_ANKER_BESTAND=ankers.jsonl\n"), 0);
    expect(pg.code).toBe(0);
    expect(readFileSync(join(dir, "cwd"), "utf8").trim()).toBe(`${pg.data} ${pg.data}`);
    writeFileSync(join(pg.data, "ander.db"), "");
    rmSync(join(dir, "cwd"));
    const sqlite = await preUpgradeBackup(envFile("DATABASE_PATH=ander.db\nAUDIT_ANKER_BESTAND=ankers.jsonl\n"), 0);
    expect(sqlite.code).toBe(0);
    expect(readFileSync(join(dir, "cwd"), "utf8").trim()).toBe(`${sqlite.data} ${sqlite.data}`);
  });

  test("SQLite at the default path: backed up; no file there (nothing to back up): skipped, said, exit 0", async () => {
    const none = await preUpgradeBackup(envFile("PORT=3000\n"), 0);
    expect([none.code, none.called]).toEqual([0, []]);
    expect(none.out).toContain("nothing to back up");
    writeFileSync(join(none.data, "nachtwacht.db"), "");
    const r = await preUpgradeBackup(envFile("PORT=3000\n"), 0);
    expect([r.code, r.called]).toEqual([0, [`DB=${join(r.data, "nachtwacht.db")} ENV=${join(dir, "nachtwacht.env")}`]]);
  });

  test("a bunfig.toml or .env file in the data folder stops the upgrade before the installed binary runs as root there (one of an earlier version would read it)", async () => {
    const f = envFile("DATABASE_URL=postgres://nachtwacht@db.internal/nachtwacht\n");
    for (const name of ["bunfig.toml", ".env", ".env.production"]) {
      const data = join(dir, "data");
      mkdirSync(data, { recursive: true });
      writeFileSync(join(data, name), 'preload = ["./p.js"]\n');
      const r = await preUpgradeBackup(f, 0);
      expect({ name, code: r.code, called: r.called }).toEqual({ name, code: 1, called: [] });
      expect(r.out).toContain(`found ${join(data, name)} in the service's folder`);
      rmSync(join(data, name));
    }
    expect((await preUpgradeBackup(f, 0)).called).toEqual([`DB=unset ENV=${f}`]);
  });

  test("exit 75 (backup made, not reported: the service is down) is a warning and the upgrade goes on; any other failure stops it, 69 (a backup running) named as such", async () => {
    const f = envFile("DATABASE_URL=postgres://nachtwacht@db.internal/nachtwacht\n");
    const down = await preUpgradeBackup(f, 75);
    expect(down.code).toBe(0);
    expect(down.out).toContain("WARNING: the backup was made but could not be reported");
    const failed = await preUpgradeBackup(f, 65);
    expect(failed.code).not.toBe(0);
    expect(failed.out).toContain("the pre-upgrade backup failed (exit 65");
    const missing = await preUpgradeBackup(f, 66);
    expect(missing.code).not.toBe(0);
    // 69: the nightly backup holds the folder's lock; said as that, with what to do.
    const busy = await preUpgradeBackup(f, 69);
    expect(busy.code).not.toBe(0);
    expect(busy.out).toContain("another backup into the same folder is running right now");
    expect(busy.out).toContain("rerun this install when it is done");
  });

  test("no environment file (a first install): nothing backed up", async () => {
    const r = await preUpgradeBackup(join(dir, "geen.env"), 0);
    expect([r.code, r.called]).toEqual([0, []]);
  });
});

describe("ops/install.sh: waiting for /health after the restart", () => {
  // restart_and_wait with say and die, their text taken from install.sh itself (and its
  // line that sources ops/env-file.sh), against systemctl and curl stubs: curl records
  // the address it was given and answers.
  async function probe(envText: string) {
    const bin = join(dir, "bin");
    mkdirSync(bin, { recursive: true });
    writeFileSync(join(bin, "systemctl"), "#!/bin/sh\nexit 0\n", { mode: 0o755 });
    const urls = join(dir, "urls");
    writeFileSync(join(bin, "curl"), `#!/bin/sh\nfor a; do last=$a; done\necho "$last" >>${JSON.stringify(urls)}\nexit 0\n`, { mode: 0o755 });
    const env = join(dir, "nachtwacht.env");
    writeFileSync(env, envText, { mode: 0o600 });
    const script =
      "set -euo pipefail\n" +
      `here=${JSON.stringify(join(ROOT, "ops"))}\nENV_FILE="$1"\n` +
      `eval "$(sed -n -e '/^say() /p' -e '/^die() /p' -e '/^\\. "\\$here\\/env-file.sh"$/p' -e '/^restart_and_wait() {/,/^}/p' ${JSON.stringify(INSTALL)})"\n` +
      "restart_and_wait\n";
    const p = Bun.spawn(["bash", "-c", script, "bash", env], { env: { PATH: `${bin}:/usr/bin:/bin` }, stdout: "pipe", stderr: "pipe" });
    const [code, out, err] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
    let called: string[] = [];
    try {
      called = readFileSync(urls, "utf8").trimEnd().split("\n");
    } catch {}
    return { code, out: out + err, called };
  }

  test("probes HOST and PORT as nachtwacht-call.sh reaches them: quoted values, another loopback address, wildcards on loopback", async () => {
    for (const [text, url] of [
      ['HOST=127.0.0.2\nPORT="18936"\n', "http://127.0.0.2:18936/health"],
      ["PORT='4001'\nHOST=0.0.0.0\n", "http://127.0.0.1:4001/health"],
      ["HOST=::\n", "http://[::1]:3000/health"],
      ["HOST=::1\nPORT=4002\n", "http://[::1]:4002/health"],
      ["CRON_SECRET=x\n", "http://127.0.0.1:3000/health"],
    ] as const) {
      rmSync(join(dir, "urls"), { force: true });
      const r = await probe(text);
      expect({ text, code: r.code, called: r.called }).toEqual({ text, code: 0, called: [url] });
      expect(r.out).toContain(`nachtwacht is running on ${url.slice("http://".length, -"/health".length)}`);
    }
  });
});

describe("ops/nachtwacht.service", () => {
  const unit = readFileSync(join(ROOT, "ops/nachtwacht.service"), "utf8");
  test("runs the binary as nachtwacht with the root-only environment file, restarts it, and is hardened", () => {
    for (const line of [
      "EnvironmentFile=/etc/nachtwacht/nachtwacht.env",
      "User=nachtwacht",
      "Restart=always",
      "WorkingDirectory=/var/lib/nachtwacht",
      "Environment=DATABASE_PATH=/var/lib/nachtwacht/nachtwacht.db",
      "ExecStart=/usr/local/bin/nachtwacht",
      "NoNewPrivileges=yes",
      "ProtectSystem=strict",
      "ReadWritePaths=/var/lib/nachtwacht",
      "PrivateTmp=yes",
    ]) {
      expect(unit.split("\n")).toContain(line);
    }
  });

  const analyze = Bun.which("systemd-analyze");
  test.skipIf(!analyze)("systemd-analyze verify finds no unknown or invalid setting", async () => {
    // ExecStart must exist for verify; everything else is the unit as shipped.
    const d = mkdtempSync(join(tmpdir(), "nachtwacht-unit-"));
    try {
      writeFileSync(join(d, "nachtwacht.service"), unit.replace(/^ExecStart=.*$/m, "ExecStart=/bin/true"));
      const p = Bun.spawn([analyze!, "verify", join(d, "nachtwacht.service")], { stdout: "pipe", stderr: "pipe" });
      const [code, out, err] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
      expect(out + err).toBe("");
      expect(code).toBe(0);
    } finally {
      rmSync(d, { recursive: true, force: true });
    }
  });
});
if (!Bun.which("systemd-analyze")) console.warn("SKIPPED the systemd-analyze check of ops/nachtwacht.service: systemd-analyze is not installed");
