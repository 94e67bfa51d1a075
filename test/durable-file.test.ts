// How the operator's commands put a file in place (src/durable-file.ts): whole or
// not at all, owner-only, and on disk before they report it. The function itself; and,
// traced with strace as real processes, `nachtwacht backup` and `nachtwacht export --uit`
// using it, and the mail outbox: each file's data fsynced before its rename, its folder
// fsynced after. Also `nachtwacht backup` when the anchor file the database's anchor log
// needs is missing, or its standard output fails.
import { afterEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { existsSync, mkdirSync, readdirSync, readFileSync, realpathSync, rmSync, statSync, symlinkSync, utimesSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { appendAuditEntry } from "../src/audit/chain.ts";
import { runBackup } from "../src/cli/backup.ts";
import { StdoutFailed } from "../src/cli/stdout.ts";
import { writeFileDurably } from "../src/durable-file.ts";
import { BUN, ROOT } from "./binary.ts";
import { addTenant, call, makeTestEnv, NOW, tempDir, TEST_VERIFIER_KEY, type TestEnv } from "./helpers.ts";

setDefaultTimeout(60_000);
const dirs: { cleanup(): void }[] = [];
let env: TestEnv | undefined;
afterEach(async () => {
  dirs.splice(0).forEach((d) => d.cleanup());
  await env?.cleanup();
  env = undefined;
});
const scratch = () => {
  const d = tempDir();
  dirs.push(d);
  return realpathSync(d.dir);
};

describe("writeFileDurably", () => {
  test("the file complete, mode 600 whatever the umask, no temporary file left; an existing file replaced whole", () => {
    const dir = scratch();
    const path = join(dir, "bundel.jsonl");
    const before = process.umask(0);
    try {
      writeFileDurably(path, "een\n".repeat(100_000));
    } finally {
      process.umask(before);
    }
    expect(readFileSync(path, "utf8")).toBe("een\n".repeat(100_000));
    expect(statSync(path).mode & 0o777).toBe(0o600);
    writeFileDurably(path, "twee\n", 0o640);
    expect(readFileSync(path, "utf8")).toBe("twee\n");
    expect(statSync(path).mode & 0o777).toBe(0o640);
    expect(readdirSync(dir)).toEqual(["bundel.jsonl"]);
  });

  test("a symbolic link at the final name is replaced, not written through", () => {
    const dir = scratch();
    writeFileSync(join(dir, "doel"), "blijft");
    symlinkSync(join(dir, "doel"), join(dir, "uit"));
    writeFileDurably(join(dir, "uit"), "nieuw");
    expect(readFileSync(join(dir, "doel"), "utf8")).toBe("blijft");
    expect(readFileSync(join(dir, "uit"), "utf8")).toBe("nieuw");
  });

  test("a failure is thrown, and leaves neither the file nor a temporary one", () => {
    const dir = scratch();
    mkdirSync(join(dir, "map"));
    // Renaming a file over a directory fails (EISDIR) after the temporary file was written.
    expect(() => writeFileDurably(join(dir, "map"), "x")).toThrow();
    expect(readdirSync(dir)).toEqual(["map"]);
    expect(readdirSync(join(dir, "map"))).toEqual([]);
    expect(() => writeFileDurably(join(dir, "bestaat-niet", "f"), "x")).toThrow();
  });

  test("exclusive: never over an existing name (a file, a symbolic link, one that appears meanwhile): EEXIST, it unchanged, no temporary file left", () => {
    const dir = scratch();
    writeFileSync(join(dir, "checkpoint.txt"), "bewaard");
    symlinkSync(join(dir, "checkpoint.txt"), join(dir, "link"));
    for (const name of ["checkpoint.txt", "link"]) {
      expect(() => writeFileDurably(join(dir, name), "nieuw", 0o600, { exclusive: true })).toThrow(expect.objectContaining({ code: "EEXIST" }));
    }
    expect(readFileSync(join(dir, "checkpoint.txt"), "utf8")).toBe("bewaard");
    expect(readdirSync(dir).sort()).toEqual(["checkpoint.txt", "link"]);
    // Two writers of the same new name: the first wins, the second gets EEXIST.
    writeFileDurably(join(dir, "bundel"), "eerste", 0o600, { exclusive: true });
    expect(() => writeFileDurably(join(dir, "bundel"), "tweede", 0o600, { exclusive: true })).toThrow(expect.objectContaining({ code: "EEXIST" }));
    expect(readFileSync(join(dir, "bundel"), "utf8")).toBe("eerste");
    expect(statSync(join(dir, "bundel")).mode & 0o777).toBe(0o600);
    expect(readdirSync(dir).sort()).toEqual(["bundel", "checkpoint.txt", "link"]);
  });
});

/** A database with a signed chain, its anchor file beside it (the service's audit-anker). */
async function signedInstallation(): Promise<TestEnv> {
  env = makeTestEnv();
  const a = addTenant(env.store, "Alfa");
  for (let i = 0; i < 5; i++) appendAuditEntry(env.store.sqlite, { tenantId: a, actor: `u${i}@alfa.nl`, action: "inlog", subject: "s", details: {}, createdAt: NOW });
  expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
  expect(existsSync(env.config.auditAnkerBestand)).toBe(true);
  return env;
}

/** `nachtwacht <args>` from source (or `bun <bunArgs>`) under strace: its fsyncs and renames, in order. */
async function traced(args: string[], cwd: string, bunArgs = [join(ROOT, "src/index.ts")]) {
  const log = join(scratch(), "strace.log");
  const p = Bun.spawn(["strace", "-f", "-qq", "-y", "-o", log, "-e", "trace=fsync,fdatasync,rename,renameat,renameat2,link,linkat", BUN, ...bunArgs, ...args], {
    cwd,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: cwd },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [code, out, err] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
  // A file put in place by rename, or (export --uit, never over an existing file) by link.
  const calls: ({ op: "fsync"; path: string } | { op: "rename" | "link"; from: string; to: string })[] = [];
  for (const line of readFileSync(log, "utf8").split("\n")) {
    const f = /\b(?:fsync|fdatasync)\(\d+<([^>]+)>/.exec(line);
    if (f) calls.push({ op: "fsync", path: f[1]! });
    const r = /\brename(?:at2?)?\((?:[A-Z_]+|\d+<[^>]*>), "([^"]+)", (?:[A-Z_]+|\d+<[^>]*>), "([^"]+)"|\brename\("([^"]+)", "([^"]+)"/.exec(line);
    if (r) calls.push({ op: "rename", from: r[1] ?? r[3]!, to: r[2] ?? r[4]! });
    const l = /\blinkat\((?:[A-Z_]+(?:<[^>]*>)?|\d+<[^>]*>), "([^"]+)", (?:[A-Z_]+(?:<[^>]*>)?|\d+<[^>]*>), "([^"]+)"|\blink\("([^"]+)", "([^"]+)"/.exec(line);
    if (l && / = 0$/.test(line)) calls.push({ op: "link", from: l[1] ?? l[3]!, to: l[2] ?? l[4]! });
  }
  return { code, out: out + err, calls };
}

/** `path` was put in place durably: renamed (or, `op` "link", linked) from a file fsynced before, its folder fsynced after. */
function expectDurablyPlaced(calls: Awaited<ReturnType<typeof traced>>["calls"], path: string, op: "rename" | "link" = "rename"): void {
  const i = calls.findIndex((c) => c.op === op && c.to === path);
  expect([path, i >= 0]).toEqual([path, true]);
  const from = (calls[i] as { from: string }).from;
  expect([path, "data fsynced before the rename", calls.slice(0, i).some((c) => c.op === "fsync" && c.path === from)]).toEqual([path, "data fsynced before the rename", true]);
  expect([path, "folder fsynced after the rename", calls.slice(i + 1).some((c) => c.op === "fsync" && c.path === dirname(path))]).toEqual([path, "folder fsynced after the rename", true]);
}

describe("on disk before reported (strace; test/preflight.ts names it when missing)", () => {
  test("nachtwacht backup: the database copy and the anchor copy each fsynced, renamed, their folder fsynced", async () => {
    const e = await signedInstallation();
    const map = join(scratch(), "backups");
    const r = await traced(["backup", "--geen-melding", "--db", e.config.databasePath, "--ankers", e.config.auditAnkerBestand, "--map", map], e.dir);
    expect([r.code, r.out]).toEqual([0, expect.stringContaining("backup ok:")]);
    const files = readdirSync(map).sort();
    expect(files).toEqual([expect.stringMatching(/^audit-ankers-\d{8}T\d{6}Z\.jsonl\.gz$/), expect.stringMatching(/^nachtwacht-\d{8}T\d{6}Z\.db\.gz$/)]);
    for (const f of files) expectDurablyPlaced(r.calls, join(realpathSync(map), f));
  });

  test("nachtwacht export --uit: the bundle fsynced, linked to its name (never over an existing file), its folder fsynced", async () => {
    const e = await signedInstallation();
    const uit = join(scratch(), "bundel.jsonl");
    const r = await traced(["export", "--tenant", "1", "--db", e.config.databasePath, "--bestand", e.config.auditAnkerBestand, "--sleutel", TEST_VERIFIER_KEY, "--uit", uit], e.dir);
    expect([r.code, r.out]).toEqual([0, expect.stringContaining("bundel geschreven")]);
    expectDurablyPlaced(r.calls, uit, "link");
  });
});

describe("zegels-sinds and zegelsleutel, the markers that the rows of the past were sealed and with which key: put in place by writeFileDurably", () => {
  /** A script opening a new database with its markers in `state` (as the service's start does); it prints "open" or "failed <name> <code>". */
  const openOnce = (db: string, state: string) => `const { openStore } = await import(${JSON.stringify(join(ROOT, "src/db.ts"))});
const { TEST_SEAL } = await import(${JSON.stringify(join(ROOT, "test/helpers.ts"))});
try {
  openStore(${JSON.stringify(db)}, new Date(), TEST_SEAL, ${JSON.stringify(join(state, "zegels-sinds"))}, ${JSON.stringify(join(state, "zegelsleutel"))}).close();
  console.log("open");
} catch (e) { console.log("failed", e.name, e.code); }`;

  test("on disk before the start goes on: fsynced, linked to its name (never over an existing marker; zegelsleutel renamed over the one before), its folder fsynced", async () => {
    const dir = scratch();
    const state = join(dir, "state");
    const r = await traced([], dir, ["-e", openOnce(join(dir, "nachtwacht.db"), state)]);
    // The start logs (stdout, info) the key it named in zegelsleutel, then the script says "open".
    const lines = r.out.trim().split("\n");
    expect([r.code, lines.at(-1)]).toEqual([0, "open"]);
    expect(lines.map((l) => (l.startsWith("{") ? JSON.parse(l).message : l))).toEqual(["zegelsleutel names the key this installation's rows are sealed with", "open"]);
    expectDurablyPlaced(r.calls, join(state, "zegels-sinds"), "link");
    expectDurablyPlaced(r.calls, join(state, "zegelsleutel"), "rename");
  });

  test("its folder's fsync failing (strace injects EIO into fsync of the state folder only): the start fails, it does not go on", async () => {
    const dir = scratch();
    const state = join(dir, "state");
    mkdirSync(state);
    const p = Bun.spawn(["strace", "-f", "-qq", "-o", "/dev/null", "-P", state, "-e", "trace=fsync", "-e", "inject=fsync:error=EIO", BUN, "-e", openOnce(join(dir, "nachtwacht.db"), state)], {
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: dir },
      stdout: "pipe",
      stderr: "pipe",
    });
    const [code, out] = await Promise.all([p.exited, new Response(p.stdout).text()]);
    expect([code, out.trim()]).toEqual([0, "failed FolderNotSynced EIO"]);
  });
});

describe("the mail outbox (no SMTP_URL): each message an .eml file put in place by writeFileDurably", () => {
  /** A script sending one message of about 40 KB to `outbox`; it prints "sent" or "failed <name> <code>". */
  const sendOne = (outbox: string) => `const { createMailer } = await import(${JSON.stringify(join(ROOT, "src/mail/transport.ts"))});
const mailer = createMailer({ smtpUrl: null, from: "nw@example.test", outboxDir: ${JSON.stringify(outbox)} });
try {
  await mailer.send({ to: "beheer@example.test", subject: "weekrapport", html: "<p>" + "x".repeat(20000) + "</p>", text: "x".repeat(20000) });
  console.log("sent");
} catch (e) { console.log("failed", e.name, e.cause?.code); }`;

  test("on disk before the send counts as done: the message fsynced, renamed, its folder fsynced; owner-only", async () => {
    const outbox = join(scratch(), "outbox");
    const r = await traced([], scratch(), ["-e", sendOne(outbox)]);
    expect([r.code, r.out.trim()]).toEqual([0, "sent"]);
    const files = readdirSync(outbox);
    expect(files).toEqual([expect.stringMatching(/^[^.].*\.eml$/)]);
    expectDurablyPlaced(r.calls, join(outbox, files[0]!));
    expect(statSync(join(outbox, files[0]!)).mode & 0o777).toBe(0o600);
  });

  test("the folder's fsync failing after the rename (strace injects EIO into fsync of the outbox folder only) is not MailNotSent: the file is in place, the error says so", async () => {
    const outbox = join(scratch(), "outbox");
    mkdirSync(outbox);
    const script = sendOne(outbox).replace('console.log("failed", e.name, e.cause?.code);', 'console.log("failed", e.name, e.cause?.code, e.message);');
    const p = Bun.spawn(["strace", "-f", "-qq", "-o", "/dev/null", "-P", outbox, "-e", "trace=fsync", "-e", "inject=fsync:error=EIO", BUN, "-e", script], {
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: scratch() },
      stdout: "pipe",
      stderr: "pipe",
    });
    const [code, out] = await Promise.all([p.exited, new Response(p.stdout).text()]);
    const files = readdirSync(outbox);
    expect(files).toEqual([expect.stringMatching(/^[^.].*\.eml$/)]);
    // Not MailNotSent (surelyNotDelivered false): weekrapport counts it onzeker and dagrapport answers 409, neither writes it again.
    expect([code, out.trim()]).toEqual([0, `failed Error EIO outbox: ${files[0]} staat in de outbox, maar de map kon niet worden gesynchroniseerd (fsync): EIO: i/o error, fsync`]);
  });

  test("a write that fails part way (the file size limit: EFBIG) is MailNotSent and leaves no temporary file", () => {
    const outbox = join(scratch(), "outbox");
    // A child under `ulimit -f` (8 KiB; SIGXFSZ ignored, so EFBIG), as on a disk that fills up during the write.
    const r = Bun.spawnSync(["bash", "-c", `trap '' XFSZ; ulimit -f 8; exec "$0" -e "$1"`, BUN, sendOne(outbox)], { stdout: "pipe", stderr: "pipe" });
    expect(r.stdout.toString().trim()).toBe("failed MailNotSent EFBIG");
    expect(readdirSync(outbox)).toEqual([]);
  });
});

describe("nachtwacht backup: the anchor file", () => {
  async function backup(args: string[]) {
    const out: string[] = [];
    const err: string[] = [];
    const code = await runBackup(["--geen-melding", ...args], {}, (s) => out.push(s), (s) => err.push(s));
    return { code, out: out.join("\n"), err: err.join("\n") };
  }

  test("missing while the database's anchor log has rows: exit 66, named in Dutch; the database copy is kept, nothing pruned", async () => {
    const e = await signedInstallation();
    const map = join(scratch(), "backups");
    const weg = join(e.dir, "data", "elders-ankers.jsonl");
    // An old backup with its anchor file, past --bewaar-dagen: kept, as the newest lacks one.
    mkdirSync(map);
    const old = ["nachtwacht-20200101T000000Z.db.gz", "audit-ankers-20200101T000000Z.jsonl.gz"];
    for (const f of old) {
      writeFileSync(join(map, f), "oud");
      utimesSync(join(map, f), new Date("2020-01-01"), new Date("2020-01-01"));
    }
    const r = await backup(["--db", e.config.databasePath, "--ankers", weg, "--map", map]);
    expect(r.code).toBe(66);
    expect(r.err).toContain(`het ankerbestand ${weg} ontbreekt`);
    expect(r.err).toContain("audit_anchor_log");
    expect(readdirSync(map).sort()).toEqual(["audit-ankers-20200101T000000Z.jsonl.gz", "nachtwacht-20200101T000000Z.db.gz", expect.stringMatching(/^nachtwacht-\d{8}T\d{6}Z\.db\.gz$/)]);
  });

  test("missing while nothing was anchored yet (a new installation): exit 0, the database alone", async () => {
    env = makeTestEnv();
    const map = join(scratch(), "backups");
    const r = await backup(["--db", env.config.databasePath, "--ankers", join(env.dir, "geen-ankers.jsonl"), "--map", map]);
    expect([r.code, r.err]).toEqual([0, ""]);
    expect(readdirSync(map)).toEqual([expect.stringMatching(/^nachtwacht-\d{8}T\d{6}Z\.db\.gz$/)]);
  });

  test("standard output failing (a full disk, the logger gone): the backup is still made, the exit is 74 with the reason on stderr", async () => {
    env = makeTestEnv();
    const map = join(scratch(), "backups");
    const err: string[] = [];
    const full = () => {
      throw new StdoutFailed("ENOSPC");
    };
    const code = await runBackup(["--geen-melding", "--db", env.config.databasePath, "--ankers", join(env.dir, "geen-ankers.jsonl"), "--map", map], {}, full, (s) => err.push(s));
    expect([code, err]).toEqual([74, ["nachtwacht backup: standaarduitvoer niet geschreven (ENOSPC): de uitvoer is onvolledig"]]);
    expect(readdirSync(map)).toEqual([expect.stringMatching(/^nachtwacht-\d{8}T\d{6}Z\.db\.gz$/)]);
  });

  test("present: copied beside the database, both owner-only, no temporary file left", async () => {
    const e = await signedInstallation();
    const map = join(scratch(), "backups");
    const r = await backup(["--db", e.config.databasePath, "--ankers", e.config.auditAnkerBestand, "--map", map]);
    expect([r.code, r.err]).toEqual([0, ""]);
    const files = readdirSync(map).sort();
    expect(files.length).toBe(2);
    for (const f of files) expect(statSync(join(map, f)).mode & 0o777).toBe(0o600);
    const anchors = files.find((f) => f.startsWith("audit-ankers-"))!;
    expect(Buffer.from(Bun.gunzipSync(readFileSync(join(map, anchors)))).toString("utf8")).toBe(readFileSync(e.config.auditAnkerBestand, "utf8"));
    rmSync(map, { recursive: true });
  });
});
