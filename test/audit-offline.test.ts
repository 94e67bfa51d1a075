// The auditor's commands as separate processes: `verify` with the public key alone
// (exit 0 / 1 / 2), `export` and `verify --bundel` with an inclusion proof, `verify
// --checkpoint` with the installation checkpoint of the daily e-mail (the one check that
// catches a rollback of both the database and the anchor file), and `key`. On both
// stores: on PostgreSQL the commands read the installation's database through
// `--database-url` (src/pg/offline.ts) instead of `--db`.
import { afterEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { generateKeyPair, parseSignerKey, parseVerifierKey, signNote } from "../src/audit/note.ts";
import { adoptionText, openAdoptionRecord, parseAnchorLineText, openRestoreRecord, openRetentionRecord, openStartRecord, openTreeHead, signAdoptionRecord, signRestoreRecord, signRetentionRecord } from "../src/audit/records.ts";
import { CompactRange } from "../src/audit/merkle.ts";
import { runAuditCommand } from "../src/cli/audit.ts";
import { anchorRecordsPg } from "../src/pg/daily.ts";
import { anchorRecords } from "../src/reports/daily.ts";
import { BUN, buildBinary, ROOT } from "./binary.ts";
import { addTenant, copyDatabase, fillChain, makeEnv, restoreCopy, type Env } from "./dialect.ts";
import { call, DAY_MS, NOW, TEST_SIGNING_KEY, TEST_VERIFIER_KEY } from "./helpers.ts";

let env: Env;
/** What the commands read: the SQLite file, or the PostgreSQL database's URL (`--database-url`). */
let target: string;
afterEach(() => env?.cleanup());
// Each command is a new process (a generous bound: a hang is the failure here).
setDefaultTimeout(120_000);

/** Entry i made (500 − i) days before NOW. */
const at = (i: number) => new Date(NOW.getTime() - (500 - i) * DAY_MS);

async function fresh(): Promise<void> {
  env = await makeEnv();
  target = env.store.kind === "sqlite" ? env.config.databasePath : env.store.url;
}

async function signed(): Promise<{ a: number; b: number }> {
  await fresh();
  const a = await addTenant(env.db, "A");
  const b = await addTenant(env.db, "B");
  await fillChain(env.store, a, 37, { at });
  await fillChain(env.store, b, 12, { at });
  expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
  return { a, b };
}

/** Runs a command with no secret in its environment: only PATH and HOME. `stdoutTo`: a file its stdout is opened on instead of a pipe. */
async function run(args: string[], o: { stdin?: string; exe?: string[]; umask?: number; stdoutTo?: string } = {}) {
  const exe = o.exe ?? [BUN, join(ROOT, "src/index.ts")];
  // With a umask of its own: through the shell, which sets it and then becomes the command.
  const cmd = o.umask === undefined ? [...exe, ...args] : ["sh", "-c", `umask ${o.umask.toString(8)} && exec "$@"`, "sh", ...exe, ...args];
  const p = Bun.spawn(cmd, {
    cwd: env.dir,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: env.dir },
    stdin: o.stdin === undefined ? "ignore" : new Blob([o.stdin]),
    stdout: o.stdoutTo === undefined ? "pipe" : Bun.file(o.stdoutTo),
    stderr: "pipe",
  });
  const [code, out, err] = await Promise.all([p.exited, p.stdout instanceof ReadableStream ? new Response(p.stdout).text() : "", new Response(p.stderr).text()]);
  return { code, out, err };
}

/** The database option of a command: `--db FILE` on SQLite, `--database-url URL` on PostgreSQL (the test URL has no password). */
const dbArgs = (where = target) => (env.dialect === "sqlite" ? ["--db", where] : ["--database-url", where]);
const base = () => [...dbArgs(), "--bestand", env.config.auditAnkerBestand, "--sleutel", TEST_VERIFIER_KEY];

/** The newest installation checkpoint, as the daily e-mail carries it (src/reports/daily.ts, src/pg/daily.ts). */
async function mailedCheckpoint(): Promise<string | null> {
  return (env.store.kind === "sqlite" ? anchorRecords(env.store.sqlite, env.config) : await anchorRecordsPg(env.store.db, env.config)).installatie.checkpoint;
}

/** A database that does not exist: a file path on SQLite, a database name on the cluster on PostgreSQL. */
const missingDatabase = () => (env.dialect === "sqlite" ? join(env.dir, "bestaat-niet.db") : Object.assign(new URL(target), { pathname: "/bestaat_niet" }).href);

describe("nachtwacht verify (public key only)", () => {
  test("a sound database: exit 0; a changed entry: exit 1 naming the reden", async () => {
    const { a } = await signed();
    const ok = await run(["verify", ...base()]);
    expect(ok.code).toBe(0);
    expect(ok.out).toContain("RESULTAAT: de database klopt met het ankerbestand.");
    await env.db.run("UPDATE audit_entries SET actor = 'x' WHERE tenant_id = ? AND seq = 9", a);
    const bad = await run(["verify", ...base()]);
    expect(bad.code).toBe(1);
    expect(bad.out).toContain(`tenant ${a}: GEBROKEN bij seq 9: hash-afwijkend`);
  });

  test("newest entries cut and the tenant's rows deleted: exit 1 (kop-ontbreekt)", async () => {
    const { b } = await signed();
    await env.db.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq > 5", b);
    await env.db.run("DELETE FROM audit_anchor_log WHERE tenant_id = ?", b);
    const r = await run(["verify", ...base()]);
    expect(r.code).toBe(1);
    expect(r.out).toContain(`tenant ${b}: GEBROKEN bij seq 12: kop-ontbreekt`);
  });

  test("exit 2 when it cannot check: no key, a missing database, a malformed key; the anchor file removed is exit 1", async () => {
    await signed();
    const noKey = await run(["verify", ...dbArgs(), "--bestand", env.config.auditAnkerBestand]);
    expect(noKey.code).toBe(2);
    expect(noKey.err).toContain("geen publieke sleutel");
    expect((await run(["verify", ...base(), ...dbArgs(missingDatabase())])).code).toBe(2);
    const malformed = await run(["verify", ...dbArgs(), "--sleutel", "geen-sleutel"]);
    expect(malformed.code).toBe(2);
    expect(malformed.err).toContain("controle niet mogelijk: sleutel 1 is geen publieke sleutel van de vorm <naam>+<id>+<sleutel>");
    expect((await run(["verify", "--onbekend"])).code).toBe(2);
    // --db and --database-url together: refused, whichever store the run is on.
    const both = await run(["verify", "--bestand", env.config.auditAnkerBestand, "--sleutel", TEST_VERIFIER_KEY, "--db", env.config.databasePath, "--database-url", "postgres://nw@127.0.0.1:1/geen"]);
    expect(both.code).toBe(2);
    expect(both.err).toContain("--db en --database-url noemen elk een database");
    rmSync(env.config.auditAnkerBestand);
    const gone = await run(["verify", ...base()]);
    expect(gone.code).toBe(1);
    expect(gone.out).toContain("bestand-ontbreekt");
  });

  test("no anchor file (and no anchor rows): exit 1 naming it, since nothing was checked against a signature", async () => {
    await fresh();
    const a = await addTenant(env.db, "Gemeente Delft");
    await fillChain(env.store, a, 5, { at });
    expect(existsSync(env.config.auditAnkerBestand)).toBe(false);
    const r = await run(["verify", ...base()]);
    expect(r.code).toBe(1);
    expect(r.out).toContain(`ankerbestand ontbreekt: ${env.config.auditAnkerBestand}; niets kon tegen een handtekening worden gecontroleerd`);
    expect(r.out).toContain("RESULTAAT: de database klopt NIET met het ankerbestand.");
    // The service's own check is unchanged: a new installation before its first audit-anker run is in order.
    expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
  });

  test("the compiled binary carries the command", async () => {
    await signed();
    const { path } = await buildBinary();
    const r = await run(["verify", ...base()], { exe: [path] });
    expect(r.code).toBe(0);
    expect(r.out).toContain("RESULTAAT: de database klopt met het ankerbestand.");
  }, 120_000);
});

describe("nachtwacht export and verify --bundel", () => {
  test("a bundle verifies offline; a changed entry, another key or a wrong proof does not", async () => {
    const { a } = await signed();
    const file = join(env.dir, "bundel.jsonl");
    const ex = await run(["export", ...base(), "--tenant", String(a), "--bewijs", "23", "--uit", file]);
    expect(ex.code).toBe(0);
    const lines = readFileSync(file, "utf8").trimEnd().split("\n");
    expect(lines).toHaveLength(1 + 37);
    expect(JSON.parse(lines[0]!)).toMatchObject({ soort: "nachtwacht-bundel-v1", tenantId: a, retentie: null, bewijs: { seq: 23, index: 22, grootte: 37 } });
    const ok = await run(["verify", "--bundel", file, "--sleutel", TEST_VERIFIER_KEY]);
    expect(ok.code).toBe(0);
    expect(ok.out).toContain("inclusiebewijs klopt");

    const entry = JSON.parse(lines[10]!);
    writeFileSync(file, [...lines.slice(0, 10), JSON.stringify({ ...entry, subject: "dossier/anders" }), ...lines.slice(11)].join("\n"));
    const changed = await run(["verify", "--bundel", file, "--sleutel", TEST_VERIFIER_KEY]);
    expect(changed.code).toBe(1);
    expect(changed.out).toContain(`entry seq ${entry.seq}: hash-afwijkend`);

    const other = (await run(["key", "--naam", "nachtwacht.test/sleutel"])).out.match(/publieke sleutel.*: (\S+)/)![1]!;
    writeFileSync(file, lines.join("\n"));
    const wrongKey = await run(["verify", "--bundel", file, "--sleutel", other]);
    expect(wrongKey.code).toBe(1);
    expect(wrongKey.out).toContain("niet geldig ondertekend");

    const header = JSON.parse(lines[0]!);
    header.bewijs.seq = 24;
    writeFileSync(file, [JSON.stringify(header), ...lines.slice(1)].join("\n"));
    const wrongProof = await run(["verify", "--bundel", file, "--sleutel", TEST_VERIFIER_KEY]);
    expect(wrongProof.code).toBe(1);
    expect(wrongProof.out).toContain("inclusiebewijs voor seq 24 klopt niet");
  });
});

/** verify --bundel in this process (runAuditCommand): its exit code and output. */
async function verifyBundleFile(file: string) {
  const o: string[] = [];
  const code = await runAuditCommand(["verify", "--bundel", file, "--sleutel", TEST_VERIFIER_KEY], {}, (s) => o.push(s), (s) => o.push(s));
  return { code, out: o.join("\n") };
}

/** Exports tenant `a`'s bundle into the test directory and returns its file and lines. */
async function exported(a: number, name: string, extra: string[] = []): Promise<{ file: string; lines: string[]; err: string }> {
  const file = join(env.dir, name);
  const r = await run(["export", ...base(), "--tenant", String(a), "--uit", file, ...extra]);
  expect(r.code).toBe(0);
  return { file, lines: readFileSync(file, "utf8").trimEnd().split("\n"), err: r.err };
}

describe("verify --bundel names its head: a bundle proves its entries against its own head only", () => {
  test("the result lines give the head's tree size, newest seq and root; an older export still verifies, and its numbers show its age", async () => {
    const { a } = await signed();
    const old = await exported(a, "oud.jsonl");
    const oldRoot = JSON.parse(old.lines[0]!).checkpoint.split("\n")[2];
    await fillChain(env.store, a, 5, { from: 37, at });
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    const now = await exported(a, "nu.jsonl");
    const newRoot = JSON.parse(now.lines[0]!).checkpoint.split("\n")[2];
    expect(newRoot).not.toBe(oldRoot);

    const r = await verifyBundleFile(old.file);
    expect(r.code).toBe(0);
    expect(r.out).toContain(`kop van de bundel: checkpoint, boomgrootte 37, nieuwste seq 37, root ${oldRoot}`);
    expect(r.out).toContain(`RESULTAAT: de bundel van tenant ${a} klopt (37 entries) tegen haar eigen kop, tot en met seq 37.`);
    expect(r.out).toContain("Of die kop de nieuwste van de tenant is, zegt de bundel niet");
    const n = await verifyBundleFile(now.file);
    expect(n.code).toBe(0);
    expect(n.out).toContain(`kop van de bundel: checkpoint, boomgrootte 42, nieuwste seq 42, root ${newRoot}`);
  });
});

/** verify --bundel FILE --checkpoint MAILED in this process, the e-mailed note written beside the bundle. */
async function verifyBundleAgainst(file: string, mailed: string) {
  const cp = join(env.dir, "e-mail-checkpoint.txt");
  // As pasted from an e-mail: blank lines around it.
  writeFileSync(cp, `\n${mailed}\n\n`);
  const o: string[] = [];
  const code = await runAuditCommand(["verify", "--bundel", file, "--checkpoint", cp, "--sleutel", TEST_VERIFIER_KEY], {}, (s) => o.push(s), (s) => o.push(s));
  return { code, out: o.join("\n") };
}

/** The anchor file's record lines as the installation tree counts them: each line's leaf index (or null for installation lines). */
function anchorLeaves(): { soort: string; tenantId: number | null; note: string; leaf: number | null }[] {
  let n = 0;
  const out: { soort: string; tenantId: number | null; note: string; leaf: number | null }[] = [];
  for (const text of readFileSync(env.config.auditAnkerBestand, "utf8").trimEnd().split("\n")) {
    const p = parseAnchorLineText(text);
    if (p.kind !== "record") continue;
    out.push({ ...p.line, leaf: p.line.soort === "installatie" ? null : n++ });
  }
  return out;
}

describe("verify --bundel: the head in an installation checkpoint (the e-mailed one)", () => {
  test("export proves the head's line in the file's newest installation checkpoint; verify checks it with the trusted key and names size and root; an altered proof or a checkpoint under another key fails", async () => {
    const { a, b } = await signed();
    // More runs, so that A's head is a leaf inside a larger tree: leaves cpA cpB cpB cpA cpB.
    for (const [t, from] of [[b, 12], [a, 37], [b, 13]] as const) {
      await fillChain(env.store, t, 1, { from, at });
      expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    }
    const { file, lines } = await exported(a, "bundel.jsonl");
    const header = JSON.parse(lines[0]!);
    const mailed = (await mailedCheckpoint())!;
    const [, size, root] = mailed.split("\n");
    // The head's line in the anchor file, counted as the installation tree counts its leaves.
    const head = anchorLeaves().findLast((l) => l.soort === "checkpoint" && l.tenantId === a)!;
    expect(head.note).toBe(header.checkpoint);
    expect(header.installatie).toMatchObject({ checkpoint: mailed, index: 3 });
    expect([head.leaf, size]).toEqual([3, "5"]);

    const ok = await verifyBundleFile(file);
    expect(ok.code).toBe(0);
    expect(ok.out).toContain(`de kop staat in installatie-checkpoint grootte ${size}, root ${root} (blad ${head.leaf})`);
    const withMail = await verifyBundleAgainst(file, mailed);
    expect(withMail.code).toBe(0);
    expect(withMail.out).toContain(`RESULTAAT: de kop staat in het installatie-checkpoint uit de e-mail (dezelfde boom: grootte ${size}, root ${root}).`);

    const write = (h: unknown) => writeFileSync(file, [JSON.stringify(h), ...lines.slice(1)].join("\n"));
    const i = header.installatie;
    // An altered audit path, another index, another head: the proof does not hold (exit 1).
    const flipped = Buffer.from(i.hashes[0], "base64");
    flipped[0]! ^= 1;
    for (const altered of [
      { ...header, installatie: { ...i, hashes: [flipped.toString("base64"), ...i.hashes.slice(1)] } },
      { ...header, installatie: { ...i, hashes: i.hashes.slice(1) } },
      { ...header, installatie: { ...i, index: i.index + 1 } },
    ]) {
      write(altered);
      const r = await verifyBundleFile(file);
      expect([r.code, r.out]).toEqual([1, expect.stringContaining(`RESULTAAT: de bundel klopt NIET: het inclusiebewijs van de kop in het installatie-checkpoint (grootte ${size}, blad `)]);
    }
    // The same tree signed by a key that is not trusted, even when the header names that key.
    const other = generateKeyPair("nachtwacht.test/sleutel");
    const foreign = signNote(mailed.slice(0, mailed.indexOf("\n\n") + 1), parseSignerKey(other.signerKey));
    write({ ...header, verificatieSleutels: [other.verifierKey], installatie: { ...i, checkpoint: foreign } });
    const untrusted = await verifyBundleFile(file);
    expect(untrusted.code).toBe(1);
    expect(untrusted.out).toContain("RESULTAAT: de bundel klopt NIET: het installatie-checkpoint is niet geldig ondertekend door een vertrouwde sleutel (onbekende-sleutel)");
    // A tenant checkpoint in its place (trusted key, wrong origin).
    write({ ...header, installatie: { ...i, checkpoint: header.checkpoint } });
    expect((await verifyBundleFile(file)).out).toContain("het installatie-checkpoint is geldig ondertekend, maar van een andere tenant, sleutel of boom (andere-oorsprong)");
    // A field of the wrong shape: not a bundle to check (exit 2).
    write({ ...header, installatie: { ...i, index: "3" } });
    expect(await verifyBundleFile(file)).toEqual({ code: 2, out: expect.stringContaining("geen geldige bundel: het veld installatie.index (") });

    // A bundle of an earlier version (no installatie): verifies as before, and says what it cannot tie.
    const { installatie: _, ...older } = header;
    write(older);
    const old = await verifyBundleFile(file);
    expect(old.code).toBe(0);
    expect(old.out).toContain(`RESULTAAT: de bundel van tenant ${a} klopt (38 entries) tegen haar eigen kop`);
    expect(old.out).toContain("de bundel bevat geen installatie-checkpoint dat de kop dekt");
    const oldWithMail = await verifyBundleAgainst(file, mailed);
    expect(oldWithMail.code).toBe(2);
    expect(oldWithMail.out).toContain("RESULTAAT: niet te bewijzen tegen het installatie-checkpoint uit de e-mail: de bundel bevat geen installatie-checkpoint");
  });

  test("--checkpoint: the same tree passes; a newer e-mail cannot be proved without the file (exit 2); another root at the same size fails (exit 1); an untrusted e-mail cannot be checked (exit 2)", async () => {
    const { a, b } = await signed();
    const before = await exported(a, "voor.jsonl");
    const firstMail = (await mailedCheckpoint())!;
    // Another tenant grows: a new installation checkpoint, tenant A's head unchanged.
    await fillChain(env.store, b, 3, { from: 12, at });
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    const secondMail = (await mailedCheckpoint())!;
    expect(secondMail).not.toBe(firstMail);
    const after = await exported(a, "na.jsonl");
    expect(JSON.parse(after.lines[0]!).checkpoint).toBe(JSON.parse(before.lines[0]!).checkpoint);
    expect(JSON.parse(after.lines[0]!).installatie.checkpoint).toBe(secondMail);

    expect((await verifyBundleAgainst(after.file, secondMail)).code).toBe(0);
    const newer = await verifyBundleAgainst(before.file, secondMail);
    expect(newer.code).toBe(2);
    expect(newer.out).toContain("RESULTAAT: niet te bewijzen tegen het installatie-checkpoint uit de e-mail: de e-mail (grootte");
    expect(newer.out).toContain("consistentiebewijs");
    const older = await verifyBundleAgainst(after.file, firstMail);
    expect(older.code).toBe(2);
    expect(older.out).toContain("is van vóór het installatie-checkpoint van de bundel");

    // A second tree of the same size, signed by the trusted key (the key holder rewrote the file).
    const [origin, size] = secondMail.split("\n");
    const fork = signNote(`${origin}\n${size}\n${Buffer.alloc(32, 7).toString("base64")}\n`, parseSignerKey(TEST_SIGNING_KEY));
    const forked = await verifyBundleAgainst(after.file, fork);
    expect(forked.code).toBe(1);
    expect(forked.out).toContain(`RESULTAAT: de bundel klopt NIET met het installatie-checkpoint uit de e-mail: het installatie-checkpoint van de bundel en dat uit de e-mail hebben dezelfde grootte ${size} maar een andere root`);

    const other = generateKeyPair("nachtwacht.test/sleutel");
    const untrusted = await verifyBundleAgainst(after.file, signNote(secondMail.slice(0, secondMail.indexOf("\n\n") + 1), parseSignerKey(other.signerKey)));
    expect(untrusted.code).toBe(2);
    expect(untrusted.out).toContain("controle niet mogelijk: het installatie-checkpoint is niet geldig ondertekend door een vertrouwde sleutel (onbekende-sleutel)");
  });

  test("a head line after the file's newest installation checkpoint (a run's tail): the bundle has no installatie and still verifies", async () => {
    const { a } = await signed();
    const head = anchorLeaves().find((l) => l.soort === "checkpoint" && l.tenantId === a)!;
    // The head's line once more at the end: the newest head is now past every installation checkpoint.
    writeFileSync(env.config.auditAnkerBestand, JSON.stringify({ soort: "checkpoint", tenantId: a, note: head.note }) + "\n", { flag: "a" });
    const { file, lines, err } = await exported(a, "staart.jsonl");
    expect(JSON.parse(lines[0]!).installatie).toBeUndefined();
    // Export says so on stderr, not only verify.
    expect(err).toContain("let op: geen installatie-checkpoint in het ankerbestand bevat de kop van deze tenant nog");
    const r = await verifyBundleFile(file);
    expect(r.code).toBe(0);
    expect(r.out).toContain("de bundel bevat geen installatie-checkpoint dat de kop dekt");
  });
});

describe("verify --bundel: why a head does not open", () => {
  test("a head relabelled to another tenant, or with a foreign origin signed by a trusted key, is andere-oorsprong; so openTreeHead says", async () => {
    const { a, b } = await signed();
    const { file, lines } = await exported(a, "bundel.jsonl");
    const header = JSON.parse(lines[0]!);
    writeFileSync(file, [JSON.stringify({ ...header, tenantId: b }), ...lines.slice(1)].join("\n"));
    const relabelled = await verifyBundleFile(file);
    expect(relabelled.code).toBe(1);
    expect(relabelled.out).toContain("RESULTAAT: de bundel klopt NIET: het checkpoint is geldig ondertekend, maar van een andere tenant, sleutel of boom (andere-oorsprong)");

    const signer = parseSignerKey(TEST_SIGNING_KEY);
    const [, size, root] = header.checkpoint.split("\n");
    const foreign = signNote(`ander.voorbeeld/log/tenant/${a}\n${size}\n${root}\n`, signer);
    writeFileSync(file, [JSON.stringify({ ...header, checkpoint: foreign }), ...lines.slice(1)].join("\n"));
    const r = await verifyBundleFile(file);
    expect(r.code).toBe(1);
    expect(r.out).toContain("het checkpoint is geldig ondertekend, maar van een andere tenant, sleutel of boom (andere-oorsprong)");

    const verifiers = [parseVerifierKey(TEST_VERIFIER_KEY)];
    expect(openTreeHead(foreign, a, verifiers)).toEqual({ ok: false, error: "andere-oorsprong" });
    expect(openTreeHead(header.checkpoint, b, verifiers, "checkpoint")).toEqual({ ok: false, error: "andere-oorsprong" });
    // A restore acceptance of another tenant, as openTreeHead reads a herstel line of the file.
    const restore = signRestoreRecord(signer, { tenantId: b, basis: 0, van: 37, vanRoot: new Uint8Array(32), naar: 30, root: new Uint8Array(32), tijdstip: NOW.toISOString() });
    expect(openTreeHead(restore, a, verifiers, "herstel")).toEqual({ ok: false, error: "andere-oorsprong" });
    expect(openTreeHead(restore, b, verifiers, "herstel").ok).toBe(true);
    // Retention, adoption and restore records of another tenant, or under another key
    // name, say so too (they said misvormd); a record of this tenant with a broken body,
    // or a record of another kind, stays misvormd.
    const bereik = new CompactRange();
    for (const h of ["1", "2", "3"]) bereik.pushEntryHash(h.repeat(64));
    const retention = signRetentionRecord(signer, { tenantId: b, seq: 3, hash: "a".repeat(64), createdAt: "2019-01-01T00:00:00.000Z", grens: "2019-02-01T00:00:00.000Z", retentieDagen: 2555, tijdstip: NOW.toISOString(), bereik });
    const adoption = signAdoptionRecord(signer, { tenantId: b, seq: 5, hash: "b".repeat(64), tijdstip: NOW.toISOString() });
    expect(openRetentionRecord(retention, b, verifiers).ok).toBe(true);
    expect(openAdoptionRecord(adoption, b, verifiers).ok).toBe(true);
    expect(openRetentionRecord(retention, a, verifiers)).toEqual({ ok: false, error: "andere-oorsprong" });
    expect(openAdoptionRecord(adoption, a, verifiers)).toEqual({ ok: false, error: "andere-oorsprong" });
    expect(openRestoreRecord(restore, a, verifiers)).toEqual({ ok: false, error: "andere-oorsprong" });
    expect(openStartRecord(retention, a, verifiers)).toEqual({ ok: false, error: "andere-oorsprong" });
    expect(openStartRecord(adoption, a, verifiers)).toEqual({ ok: false, error: "andere-oorsprong" });
    const otherKeyName = signNote(adoptionText(signer.name, { tenantId: a, seq: 5, hash: "b".repeat(64), tijdstip: NOW.toISOString() }).replace(signer.name, "ander.voorbeeld/log"), signer);
    expect(openAdoptionRecord(otherKeyName, a, verifiers)).toEqual({ ok: false, error: "andere-oorsprong" });
    const broken = signNote(adoptionText(signer.name, { tenantId: a, seq: 5, hash: "b".repeat(64), tijdstip: NOW.toISOString() }).replace("seq 5", "seq vijf"), signer);
    expect(openAdoptionRecord(broken, a, verifiers)).toEqual({ ok: false, error: "misvormd" });
    expect(openAdoptionRecord(retention, b, verifiers)).toEqual({ ok: false, error: "misvormd" });
    // A bundle whose adoption record is another tenant's: named as such.
    writeFileSync(file, [JSON.stringify({ ...header, adoptie: adoption }), ...lines.slice(1)].join("\n"));
    const withForeignAdoption = await verifyBundleFile(file);
    expect(withForeignAdoption.code).toBe(1);
    expect(withForeignAdoption.out).toContain("het adoptierecord is geldig ondertekend, maar van een andere tenant, sleutel of boom (andere-oorsprong)");
    // Not a head at all, or not the kind asked for: still misvormd.
    expect(openTreeHead(signNote("geen checkpoint\n", signer), a, verifiers)).toEqual({ ok: false, error: "misvormd" });
    expect(openTreeHead(restore, b, verifiers, "checkpoint")).toEqual({ ok: false, error: "misvormd" });
    expect(openTreeHead(header.checkpoint, a, verifiers, "herstel")).toEqual({ ok: false, error: "misvormd" });
  });
});

describe("verify --bundel: a header of the wrong shape", () => {
  test("a header without retentie, a bewijs without hashes, adoptie 5 or an entry without its hash: exit 2 naming the field", async () => {
    const { a } = await signed();
    const { file, lines } = await exported(a, "bundel.jsonl", ["--bewijs", "5"]);
    const header = JSON.parse(lines[0]!);
    const { retentie: _, ...withoutRetentie } = header;
    const { hashes: __, ...bewijsWithoutHashes } = header.bewijs;
    const cases: [unknown, string][] = [
      [withoutRetentie, "het veld retentie (een ondertekend retentierecord als tekst, of null) van de kopregel"],
      [{ ...header, bewijs: bewijsWithoutHashes }, "het veld bewijs.hashes ("],
      [{ ...header, bewijs: { ...header.bewijs, hashes: ["AAAA"] } }, "het veld bewijs.hashes ("],
      [{ ...header, bewijs: { ...header.bewijs, index: "4" } }, "het veld bewijs.index ("],
      [{ ...header, bewijs: 1 }, "het veld bewijs (een object"],
      [{ ...header, adoptie: 5 }, "het veld adoptie (een ondertekend adoptierecord als tekst, null of afwezig)"],
    ];
    for (const [h, field] of cases) {
      writeFileSync(file, [JSON.stringify(h), ...lines.slice(1)].join("\n"));
      const r = await verifyBundleFile(file);
      expect([r.code, r.out]).toEqual([2, expect.stringContaining(`geen geldige bundel: ${field}`)]);
      expect(r.out).not.toContain("TypeError");
    }
    const { hash: ___, ...entryWithoutHash } = JSON.parse(lines[3]!);
    writeFileSync(file, [lines[0], ...lines.slice(1, 3), JSON.stringify(entryWithoutHash), ...lines.slice(4)].join("\n"));
    const r = await verifyBundleFile(file);
    expect([r.code, r.out]).toEqual([2, expect.stringContaining("geen geldige bundel: regel 4, veld hash van de entry")]);
  });
});

describe("nachtwacht export --uit", () => {
  test("never over its own inputs: --uit naming the anchor file (also through a symbolic link) or the database (or its -wal) is refused, exit 2, nothing changed", async () => {
    const { a } = await signed();
    const anchors = readFileSync(env.config.auditAnkerBestand);
    const link = join(env.dir, "link-naar-ankers.jsonl");
    symlinkSync(env.config.auditAnkerBestand, link);
    const inputs = [env.config.auditAnkerBestand, link, ...(env.dialect === "sqlite" ? [env.config.databasePath, `${env.config.databasePath}-wal`] : [])];
    const db = env.dialect === "sqlite" ? readFileSync(env.config.databasePath) : null;
    for (const uit of inputs) {
      const r = await run(["export", ...base(), "--tenant", String(a), "--uit", uit]);
      expect([uit, r.code]).toEqual([uit, 2]);
      expect(r.err).toContain("--uit");
      expect(r.err).toMatch(/is het ankerbestand|is de database|is het -wal-bestand van de database/);
    }
    expect(readFileSync(env.config.auditAnkerBestand)).toEqual(anchors);
    if (db !== null) expect(readFileSync(env.config.databasePath)).toEqual(db);
    expect((await run(["verify", ...base()])).code).toBe(0);
  });

  test("never over an existing file (a checkpoint kept there): refused naming it, exit 2, the file unchanged", async () => {
    const { a } = await signed();
    const kept = join(env.dir, "checkpoint.txt");
    writeFileSync(kept, "het checkpoint uit de e-mail van maandag\n");
    const r = await run(["export", ...base(), "--tenant", String(a), "--uit", kept]);
    expect(r.code).toBe(2);
    expect(r.err).toContain(`--uit ${kept} bestaat al`);
    expect(readFileSync(kept, "utf8")).toBe("het checkpoint uit de e-mail van maandag\n");
  });

  test("the bundle is written owner-only whatever the umask, with no temporary file left beside it", async () => {
    const { a } = await signed();
    const dir = join(env.dir, "uit");
    mkdirSync(dir);
    const file = join(dir, "bundel.jsonl");
    const r = await run(["export", ...base(), "--tenant", String(a), "--uit", file], { umask: 0o022 });
    expect(r.code).toBe(0);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(readdirSync(dir)).toEqual(["bundel.jsonl"]);
    expect(readFileSync(file, "utf8").trimEnd().split("\n")).toHaveLength(1 + 37);
  });
});

describe("nachtwacht verify --checkpoint (the off-machine witness)", () => {
  test("holds for the e-mailed checkpoint; after both the database and the anchor file were rolled back it exits 1, though the nightly check sees nothing", async () => {
    const { a } = await signed();
    // The state after the first run, as root would keep it to roll back to.
    if (env.store.kind === "sqlite") env.store.sqlite.run("PRAGMA wal_checkpoint(TRUNCATE)");
    const oldDb = await copyDatabase(env);
    const oldFile = join(env.dir, "oud.jsonl");
    copyFileSync(env.config.auditAnkerBestand, oldFile);
    // A day later: new entries, anchored; the daily e-mail carries this checkpoint.
    await fillChain(env.store, a, 4, { from: 37, at });
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    const mailed = (await mailedCheckpoint())!;
    const cpFile = join(env.dir, "checkpoint.txt");
    writeFileSync(cpFile, `\n${mailed}\n\n`); // as copied out of an e-mail, blank lines around it
    expect((await run(["verify", ...base(), "--checkpoint", cpFile])).code).toBe(0);
    expect((await run(["verify", ...base(), "--checkpoint", "-"], { stdin: mailed })).code).toBe(0);

    // Root rolls both back to the earlier pair.
    // On PostgreSQL in place: the commands' --database-url names the installation's database.
    await restoreCopy(env, oldDb, { inPlace: true });
    copyFileSync(oldFile, env.config.auditAnkerBestand);
    expect((await run(["verify", ...base()])).code).toBe(0);
    const witness = await run(["verify", ...base(), "--checkpoint", cpFile]);
    expect(witness.code).toBe(1);
    expect(witness.out).toContain("ingekort of teruggezet");
    expect(witness.out).toContain("RESULTAAT: database en ankerbestand bevatten de toestand van het checkpoint NIET.");
  });

  test("an older e-mail's checkpoint does not vouch for what was signed after it: entries signed since and deleted, or the database put back a run under the current file, exit 1 with the reason; the state before passes", async () => {
    const { a } = await signed();
    const older = join(env.dir, "ouder.txt");
    writeFileSync(older, (await mailedCheckpoint())!);
    if (env.store.kind === "sqlite") env.store.sqlite.run("PRAGMA wal_checkpoint(TRUNCATE)");
    const oldDb = await copyDatabase(env);
    // The next night signs four more entries of tenant a.
    await fillChain(env.store, a, 4, { from: 37, at });
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    const sound = await run(["verify", ...base(), "--checkpoint", older]);
    expect(sound.code).toBe(0);
    expect(sound.out).toContain(`  tenant ${a}: in orde (41 entries)`);

    // A database writer deletes the entries signed since the older checkpoint.
    await env.db.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq > 37", a);
    const deleted = await run(["verify", ...base(), "--checkpoint", older]);
    expect(deleted.code).toBe(1);
    expect(deleted.out).toContain("tegen het installatie-checkpoint:");
    expect(deleted.out).toContain(`  tenant ${a}: GEBROKEN bij seq 41: kop-ontbreekt`);
    expect(deleted.out).toContain("  FOUT: de database klopt niet met wat na het checkpoint is ondertekend (zie hierboven)");
    expect(deleted.out).toContain("RESULTAAT: database en ankerbestand bevatten de toestand van het checkpoint NIET.");

    // Root puts the database back a run and leaves the file.
    await restoreCopy(env, oldDb, { inPlace: true });
    const rolledBack = await run(["verify", ...base(), "--checkpoint", older]);
    expect(rolledBack.code).toBe(1);
    expect(rolledBack.out).toContain("ANKERBESTAND: database-teruggezet");
    expect(rolledBack.out).toContain("RESULTAAT: database en ankerbestand bevatten de toestand van het checkpoint NIET.");
  });

  test("an installation checkpoint that is not validly signed cannot be checked (exit 2)", async () => {
    await signed();
    const mailed = (await mailedCheckpoint())!;
    const r = await run(["verify", ...base(), "--checkpoint", "-"], { stdin: mailed.replace(/\n\d+\n/, "\n999\n") });
    expect(r.code).toBe(2);
    expect(r.err).toContain("niet geldig ondertekend");
  });
});

describe("nachtwacht key", () => {
  test("prints a signing key for the env file and its public key; both parse and belong together", async () => {
    await fresh();
    const r = await run(["key", "--naam", "nachtwacht.voorbeeld/a1"]);
    expect(r.code).toBe(0);
    const secret = /^AUDIT_ANKER_SLEUTEL=(PRIVATE\+KEY\+\S+)$/m.exec(r.out)![1]!;
    const pub = /^# publieke sleutel.*: (\S+)$/m.exec(r.out)![1]!;
    expect(parseSignerKey(secret).verifierKey).toBe(pub);
    expect(parseVerifierKey(pub).name).toBe("nachtwacht.voorbeeld/a1");
    const other = await run(["key"]);
    expect(other.out).toMatch(/^AUDIT_ANKER_SLEUTEL=PRIVATE\+KEY\+nachtwacht\.[^/\s]+\/[0-9a-f]{8}\+/m);
    expect((await run(["key", "--naam", "met spatie"])).code).toBe(2);
  });
});

describe("standard output that cannot be written (/dev/full: every write fails with ENOSPC)", () => {
  test("key and export exit 2 naming it on stderr, never 0 with a missing or truncated output", async () => {
    const { a } = await signed();
    const key = await run(["key"], { stdoutTo: "/dev/full" });
    expect(key).toEqual({ code: 2, out: "", err: "nachtwacht key: standaarduitvoer niet geschreven (ENOSPC): de uitvoer is onvolledig\n" });
    const bundle = await run(["export", ...base(), "--tenant", String(a)], { stdoutTo: "/dev/full" });
    expect(bundle).toEqual({ code: 2, out: "", err: "nachtwacht export: standaarduitvoer niet geschreven (ENOSPC): de uitvoer is onvolledig\n" });
    // the same outside the audit commands: the entry point's own output
    const help = await run(["--help"], { stdoutTo: "/dev/full" });
    expect(help).toEqual({ code: 2, out: "", err: "nachtwacht: standaarduitvoer niet geschreven (ENOSPC): de uitvoer is onvolledig\n" });
    expect((await run(["crontab"], { stdoutTo: "/dev/full" })).code).toBe(2);
    // and to a file that takes it, all of it
    const file = join(env.dir, "bundel-via-stdout.jsonl");
    expect((await run(["export", ...base(), "--tenant", String(a)], { stdoutTo: file })).code).toBe(0);
    expect(readFileSync(file, "utf8").trimEnd().split("\n")).toHaveLength(1 + 37);
  });
});
