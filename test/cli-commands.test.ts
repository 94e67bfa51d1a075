// The operator's commands in the one binary: `--help` for each, `config check`,
// `crontab`, `demo`, and an unknown command. Run against the compiled binary (built once
// per test run by test/binary.ts) as a real process; the environment file is read from
// disk, so no secret is on a command line.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { buildBinary, freePort, removeEndedBuilds, ROOT } from "./binary.ts";
import { generateKeyPair, parseSignerKey } from "../src/audit/note.ts";
import { TEST_SIGNING_KEY } from "./helpers.ts";

let bin: string;
let dir: string;
beforeAll(async () => {
  bin = (await buildBinary()).path;
  dir = mkdtempSync(join(tmpdir(), "nachtwacht-cli-"));
}, 120_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function run(args: string[], env: Record<string, string> = {}) {
  const p = Bun.spawn([bin, ...args], { cwd: dir, env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: dir, ...env }, stdout: "pipe", stderr: "pipe" });
  const [code, out, err] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
  return { code, out, err };
}

const SECRET = "9f".repeat(32);

describe("nachtwacht <command> --help", () => {
  for (const cmd of [[], ["serve"], ["key"], ["verify"], ["export"], ["adopt"], ["accept-restore"], ["config", "check"], ["backup"], ["crontab"], ["db-convert"], ["migrate-to"], ["demo"]]) {
    test(`${["nachtwacht", ...cmd].join(" ")} --help: usage on stdout, exit 0, nothing started`, async () => {
      const r = await run([...cmd, "--help"]);
      expect(r.code).toBe(0);
      expect(r.out).toContain("gebruik: nachtwacht");
      expect(r.err).toBe("");
    });
  }

  test("help with anything after it: exit 2 naming it, no usage on stdout", async () => {
    for (const args of [["help", "extra"], ["--help", "--nope"], ["-h", "verify"]]) {
      const r = await run(args);
      expect(r.code).toBe(2);
      expect(r.err).toContain(`neemt geen argument ${JSON.stringify(args[1])}`);
      expect(r.out).toBe("");
    }
  });

  test("an unknown command: exit 2 with the list of commands on stderr", async () => {
    const r = await run(["vernietig"]);
    expect(r.code).toBe(2);
    expect(r.err).toContain('onbekende opdracht "vernietig"');
    expect(r.err).toContain("config check");
  });
});

describe("nachtwacht config check", () => {
  test("a sound env file: exit 0", async () => {
    const file = join(dir, "goed.env");
    writeFileSync(file, `# comment\nCRON_SECRET=${SECRET}\nAUDIT_ANKER_SLEUTEL="${TEST_SIGNING_KEY}"\n\nPORT=3100\n; also a comment\n`);
    const r = await run(["config", "check", "--env", file]);
    expect(r.code).toBe(0);
    expect(r.out).toContain("in orde");
  });

  test("every bad variable is named in one run, exit 1, and no value is printed", async () => {
    const file = join(dir, "fout.env");
    const password = "geheim50%wachtwoord";
    writeFileSync(
      file,
      [`CRON_SECRET=kort-geheim`, `AUDIT_ANKER_SLEUTEL=oude-hmac-sleutel-0123456789abcdef0123456789`, `PORT=http`, `SMTP_URL=smtps://u:${password}@mail.example.nl`, `RAPPORT_TIJDZONE=Europe/Atlantis`, `BACKUP_MAX_UREN=26`].join("\n"),
    );
    const r = await run(["config", "check", "--env", file]);
    expect(r.code).toBe(1);
    const named = r.out.split("\n").filter((l) => /^[A-Z_]+:/.test(l)).map((l) => l.split(":")[0]);
    expect(named.sort()).toEqual(["AUDIT_ANKER_SLEUTEL", "CRON_SECRET", "PORT", "RAPPORT_TIJDZONE", "SMTP_URL"]);
    expect(r.out).toContain("5 fouten");
    // What the operator reads is Dutch: none of the English of the earlier messages.
    expect(r.out + r.err).not.toMatch(/\b(is required|must be|is not|got|shorter than|the)\b/);
    for (const secret of ["kort-geheim", "oude-hmac-sleutel", password]) expect(r.out + r.err).not.toContain(secret);
  });

  test("the environment itself when no file is given; a missing signing key is named", async () => {
    const r = await run(["config", "check"], { CRON_SECRET: SECRET });
    expect(r.code).toBe(1);
    expect(r.out).toContain("AUDIT_ANKER_SLEUTEL: is verplicht");
    expect(r.out).toContain("nachtwacht key");
    const ok = await run(["config", "check"], { CRON_SECRET: SECRET, AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY });
    expect(ok.code).toBe(0);
  });

  test("exit 2 when it cannot check: a missing file, a line that is no KEY=VALUE (named by number, not shown)", async () => {
    expect((await run(["config", "check", "--env", join(dir, "bestaat-niet.env")])).code).toBe(2);
    const file = join(dir, "kapot.env");
    writeFileSync(file, `CRON_SECRET=${SECRET}\nexport GEHEIM-REGEL\n`);
    const r = await run(["config", "check", "--env", file]);
    expect(r.code).toBe(2);
    expect(r.err).toContain("regel 2");
    expect(r.err).not.toContain("GEHEIM-REGEL");
    expect((await run(["config"])).code).toBe(2);
  });

  test("a key change that left the old key untrusted is named (the start would refuse it), once the old key is trusted it is in order; an unreadable zegelsleutel: exit 2", async () => {
    const state = join(dir, "sleutelwissel");
    mkdirSync(state, { recursive: true });
    const old = generateKeyPair("nachtwacht.test/oud").verifierKey;
    writeFileSync(join(state, "zegelsleutel"), `${old}\n`);
    const file = join(dir, "sleutelwissel.env");
    const lines = [`CRON_SECRET=${SECRET}`, `AUDIT_ANKER_SLEUTEL=${TEST_SIGNING_KEY}`, `AUDIT_ANKER_BESTAND=${join(state, "audit-ankers.jsonl")}`];
    writeFileSync(file, lines.join("\n"));
    const r = await run(["config", "check", "--env", file]);
    expect(r.code).toBe(1);
    expect(r.out).toContain(`zegelsleutel: ${join(state, "zegelsleutel")} zegt dat de rijen van deze installatie zijn verzegeld met ${old}`);
    expect(r.out).toContain("1 fout in");
    expect(r.out + r.err).not.toContain(TEST_SIGNING_KEY);
    writeFileSync(file, [...lines, `AUDIT_VERTROUWDE_SLEUTELS=${old}`].join("\n"));
    expect(await run(["config", "check", "--env", file])).toMatchObject({ code: 0 });
    // Only read: the marker still names the old key (the start re-seals, then names the new one).
    expect(readFileSync(join(state, "zegelsleutel"), "utf8")).toBe(`${old}\n`);
    rmSync(join(state, "zegelsleutel"));
    mkdirSync(join(state, "zegelsleutel"));
    const unreadable = await run(["config", "check", "--env", file]);
    expect(unreadable.code).toBe(2);
    expect(unreadable.err).toContain(`${join(state, "zegelsleutel")} niet leesbaar (EISDIR)`);
  });

  test("with --env the anchor file is where the service under its unit finds it: a relative AUDIT_ANKER_BESTAND from /var/lib/nachtwacht, not from where the command runs; a marker not there is said", async () => {
    // A marker where the command runs, which the service would never read: no refusal from it.
    const sub = `nw-test-${process.pid}-${Date.now()}`;
    mkdirSync(join(dir, sub), { recursive: true });
    writeFileSync(join(dir, sub, "zegelsleutel"), `${generateKeyPair("nachtwacht.test/elders").verifierKey}\n`);
    const file = join(dir, "relatief.env");
    writeFileSync(file, [`CRON_SECRET=${SECRET}`, `AUDIT_ANKER_SLEUTEL=${TEST_SIGNING_KEY}`, `AUDIT_ANKER_BESTAND=${sub}/audit-ankers.jsonl`].join("\n"));
    const r = await run(["config", "check", "--env", file]);
    expect(r.code).toBe(0);
    expect(r.out).toContain(`zegelsleutel: /var/lib/nachtwacht/${sub}/zegelsleutel bestaat niet (nog geen start met deze map), niet gecontroleerd`);
    // Without --env, the environment it runs in: relative from here, as a service started here would read it.
    const here = await run(["config", "check"], { CRON_SECRET: SECRET, AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY, AUDIT_ANKER_BESTAND: `${sub}/audit-ankers.jsonl` });
    expect(here.code).toBe(1);
    expect(here.out).toContain(`zegelsleutel: ${join(dir, sub, "zegelsleutel")} zegt dat`);
  });
});

test("the binaries test runs build are removed once their run has ended (bun test runs no exit handler), those of live runs are kept", async () => {
  const dir = mkdtempSync(join(tmpdir(), "nachtwacht-builds-"));
  try {
    const ended = Bun.spawn(["true"]);
    await ended.exited;
    const alive = Bun.spawn(["sleep", "60"]);
    try {
      for (const name of [`nachtwacht-bin-${ended.pid}-aB3dE6`, `nachtwacht-bin-${alive.pid}-aB3dE6`, `nachtwacht-bin-${process.pid}-aB3dE6`, "nachtwacht-bin-Xy12Zq", "nachtwacht-test-aB3dE6", "nachtwacht-bin-12-notours"]) {
        mkdirSync(join(dir, name));
        writeFileSync(join(dir, name, "nachtwacht"), "binary");
      }
      expect(removeEndedBuilds(dir).sort()).toEqual([`nachtwacht-bin-${ended.pid}-aB3dE6`, "nachtwacht-bin-Xy12Zq"].sort());
      expect(existsSync(join(dir, `nachtwacht-bin-${alive.pid}-aB3dE6`, "nachtwacht"))).toBe(true);
      expect(existsSync(join(dir, `nachtwacht-bin-${process.pid}-aB3dE6`))).toBe(true);
      expect(existsSync(join(dir, "nachtwacht-test-aB3dE6"))).toBe(true);
      expect(existsSync(join(dir, "nachtwacht-bin-12-notours"))).toBe(true);
    } finally {
      alive.kill();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

describe("the binary and its working directory", () => {
  test("a bunfig.toml and a .env where it is started are not read: root's backup starts in the service user's folder, whose preload would run as root", async () => {
    const folder = join(dir, "dienstmap");
    mkdirSync(folder, { recursive: true });
    const marker = join(folder, "preload-liep");
    writeFileSync(join(folder, "bunfig.toml"), 'preload = ["./p.js"]\n');
    writeFileSync(join(folder, "p.js"), `require("node:fs").writeFileSync(${JSON.stringify(marker)}, "als " + process.getuid());\n`);
    writeFileSync(join(folder, ".env"), `CRON_SECRET=${SECRET}\nAUDIT_ANKER_SLEUTEL=${TEST_SIGNING_KEY}\n`);
    const p = Bun.spawn([bin, "config", "check"], { cwd: folder, env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: dir }, stdout: "pipe", stderr: "pipe" });
    const [code, out] = await Promise.all([p.exited, new Response(p.stdout).text()]);
    // The environment it was given lacks both: .env supplied nothing.
    expect(code).toBe(1);
    expect(out).toContain("CRON_SECRET: is verplicht");
    expect(out).toContain("AUDIT_ANKER_SLEUTEL: is verplicht");
    expect(existsSync(marker)).toBe(false);
  });
});

describe("nachtwacht crontab and demo", () => {
  test("crontab prints the committed cron file", async () => {
    const r = await run(["crontab"]);
    expect(r.code).toBe(0);
    expect(r.out).toBe(readFileSync(join(ROOT, "ops", "nachtwacht.cron"), "utf8"));
  });

  test("demo starts the service on a demo database in ./data, answers /health, and its printed write-API line works", async () => {
    // A service started in ./data with a key of its own left its zegelsleutel there: the
    // demo keeps the files beside its anchor file in ./data/demo, so it starts all the same.
    const other = generateKeyPair("nachtwacht.test/eigen").verifierKey;
    mkdirSync(join(dir, "data"), { recursive: true });
    writeFileSync(join(dir, "data", "zegelsleutel"), `${other}\n`);
    const port = freePort();
    const p = Bun.spawn([bin, "demo"], { cwd: dir, env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: dir, PORT: String(port) }, stdout: "pipe", stderr: "pipe" });
    let printed = "";
    const reading = (async () => {
      const reader = p.stdout.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        printed += new TextDecoder().decode(value);
      }
    })();
    try {
      let health = 0;
      for (let i = 0; i < 600 && health !== 200 && p.exitCode === null; i++) {
        health = await fetch(`http://127.0.0.1:${port}/health`).then((r) => r.status, () => 0);
        if (health !== 200) await Bun.sleep(50);
      }
      expect(health).toBe(200);
      const demoKey = readFileSync(join(dir, "data", "demo-audit-sleutel"), "utf8").trim();
      expect(demoKey).toStartWith("PRIVATE+KEY+");
      expect(readFileSync(join(dir, "data", "demo", "zegelsleutel"), "utf8")).toBe(`${parseSignerKey(demoKey).verifierKey}\n`);
      expect(readFileSync(join(dir, "data", "zegelsleutel"), "utf8")).toBe(`${other}\n`);
      // The banner is written right after the server listens; wait for its last line.
      for (let i = 0; i < 200 && !printed.includes(`"sleutel":"demo-1"}]}'`); i++) await Bun.sleep(25);
      const lines = printed.split("\n");
      const at = lines.findIndex((l) => l.includes("Schrijf een auditregel"));
      const command = (lines[at + 1]! + "\n" + lines[at + 2]!).trim();
      const run = Bun.spawnSync(["bash", "-c", command], { stdout: "pipe", stderr: "pipe" });
      expect(run.exitCode).toBe(0);
      const answer = JSON.parse(run.stdout.toString());
      expect(answer.opgeslagen).toBe(1);
      expect(answer.ontvangstbewijzen[0]).toMatchObject({ tenantId: 1, hash: expect.stringMatching(/^[0-9a-f]{64}$/) });
    } finally {
      p.kill();
      await p.exited;
      await reading;
    }
  }, 60_000);
});
