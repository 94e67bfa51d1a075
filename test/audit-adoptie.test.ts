// `nachtwacht adopt`: a chain the earlier version shortened (its oldest entries deleted,
// only an unsigned row in audit_retention_anchors left) is `retentie-ontbreekt` for
// good, until the operator adopts it with the signing key. Real databases, the
// nightly jobs over HTTP, the command through its function (and once as a process).
//
// On both stores (test/dialect.ts): on the PostgreSQL run `adopt` works on PostgreSQL
// itself, as the service's environment names it (DATABASE_URL), and so do the jobs,
// verify, export and tampering after it.
import { afterEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { generateKeyPair, openNote, parseSignerKey, parseVerifierKey } from "../src/audit/note.ts";
import { signAdoptionRecord } from "../src/audit/records.ts";
import { runAuditCommand } from "../src/cli/audit.ts";
import { BUN, ROOT } from "./binary.ts";
import { anchorFileLines, call, NOW, TEST_SIGNING_KEY, TEST_VERIFIER_KEY } from "./helpers.ts";
import { addTenant, anchorRowCount, chainRoot, fillChain, makeEnv, type Env } from "./dialect.ts";

let env: Env;
afterEach(() => env?.cleanup());
setDefaultTimeout(60_000);

/**
 * What the earlier version left: tenant `a` with 80 entries of which it deleted 1–50
 * (keeping only the unsigned audit_retention_anchors row for 50), tenant `b` whole.
 * Then the upgrade's first audit-anker: b signed, a refused (retentie-ontbreekt).
 */
async function shortenedTheOldWay(extra: Record<string, string> = {}): Promise<{ a: number; b: number; h50: string }> {
  env = await makeEnv(extra);
  const a = await addTenant(env.db, "Gemeente Delft");
  const b = await addTenant(env.db, "Stichting Leiden");
  await fillChain(env.store, a, 80);
  await fillChain(env.store, b, 20);
  const h50 = (await env.db.get<{ hash: string }>("SELECT hash FROM audit_entries WHERE tenant_id = ? AND seq = 50", a))!.hash;
  await env.db.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= 50", a);
  await env.db.run("INSERT INTO audit_retention_anchors (tenant_id, seq, hash, bijgewerkt) VALUES (?, 50, ?, ?)", a, h50, "2025-01-01T02:00:00.000Z");
  const anker = await call(env.app, "/api/cron/audit-anker");
  expect(anker.status).toBe(409);
  expect(anker.json.geweigerd).toEqual([{ tenantId: a, seq: 51, reden: "retentie-ontbreekt" }]);
  return { a, b, h50 };
}

async function verify() {
  return call(env.app, "/api/cron/audit-verificatie");
}

const tenantResult = (body: any, tenantId: number) => body.resultaten.find((r: any) => r.tenantId === tenantId);

/** `nachtwacht adopt` through its function, with the signing key and the database in the environment as the service has them. */
async function adopt(tenantId: number, o: { ja?: boolean; key?: string | null } = {}) {
  const lines: string[] = [];
  const errs: string[] = [];
  const where = databaseOf();
  const args = ["adopt", "--tenant", String(tenantId), ...where.args, "--bestand", env.config.auditAnkerBestand, ...(o.ja ? ["--ja"] : [])];
  const cliEnv: Record<string, string> = { ...where.env, ...(o.key === null ? {} : { AUDIT_ANKER_SLEUTEL: o.key ?? TEST_SIGNING_KEY }) };
  const code = await runAuditCommand(args, cliEnv, (s) => lines.push(s), (s) => errs.push(s));
  return { code, out: lines.join("\n"), err: errs.join("\n") };
}

/** Where the commands read the installation: `--db FILE`, or DATABASE_URL in their environment (PostgreSQL). */
function databaseOf(): { args: string[]; env: Record<string, string> } {
  return env.store.kind === "sqlite" ? { args: ["--db", env.config.databasePath], env: {} } : { args: [], env: { DATABASE_URL: env.store.url } };
}

const fileText = () => readFileSync(env.config.auditAnkerBestand, "utf8");
const rowCount = () => anchorRowCount(env.db);
const fileLines = () => anchorFileLines(env.config.auditAnkerBestand);
/** The RFC 6962 root over the tenant's entries with seq > from, as they are now. */
const rootFrom = (tenantId: number, from: number) => chainRoot(env.db, tenantId, from);

const VERIFIER = parseVerifierKey(TEST_VERIFIER_KEY);

describe("adopting a chain the earlier version shortened", () => {
  test("409 retentie-ontbreekt; adopt without --ja writes nothing; with --ja the adoption and the first checkpoint of the tree from seq 51 are signed, and audit-verificatie is 200 with a warning naming the tenant, seq and date", async () => {
    const { a, b, h50 } = await shortenedTheOldWay();
    const before = await verify();
    expect(before.status).toBe(409);
    expect(tenantResult(before.json, a).fout).toMatchObject({ seq: 51, reden: "retentie-ontbreekt" });

    const text = fileText();
    const rows = await rowCount();
    const dry = await adopt(a);
    expect(dry.code).toBe(0);
    // The database the service uses: on the PostgreSQL run DATABASE_URL's.
    expect(dry.out).toContain(`database:     ${env.store.kind === "sqlite" ? env.config.databasePath : env.store.url}`);
    expect(dry.out).toContain(`adoptie bij seq 50 met hash ${h50}`);
    expect(dry.out).toContain("audit_retention_anchors (niet ondertekend, alleen ter vergelijking): seq 50 — komt overeen");
    expect(dry.out).toContain("RESULTAAT: adoptie mogelijk; er is niets geschreven.");
    expect(fileText()).toBe(text);
    expect(await rowCount()).toBe(rows);
    expect((await verify()).status).toBe(409);

    const done = await adopt(a, { ja: true });
    expect(done).toMatchObject({ code: 0, err: "" });
    expect(done.out).toContain(`RESULTAAT: tenant ${a} is geadopteerd vanaf seq 51`);
    // Appended as one run: the adoption, the adopted tree's checkpoint, an installation checkpoint.
    const added = fileLines().slice(-3);
    expect(added.map((l) => [l.soort, l.tenantId])).toEqual([["adoptie", a], ["checkpoint", a], ["installatie", undefined]]);
    const adoption = openNote(added[0]!.note, [VERIFIER]);
    expect(adoption.ok && adoption.text).toMatch(
      new RegExp(`^nachtwacht\\.test/sleutel/tenant/${a}/adoptie\\nseq 50\\nhash ${h50}\\ntijdstip \\d{4}-\\d\\d-\\d\\dT[0-9:.]+Z\\nreden eerdere-versie-zonder-retentierecord\\n$`),
    );
    const cp = openNote(added[1]!.note, [VERIFIER]);
    expect(cp.ok && cp.text).toBe(`nachtwacht.test/sleutel/tenant/${a}/adoptie/50\n30\n${await rootFrom(a, 50)}\n`);
    expect(await rowCount()).toBe(rows + 3);

    const r = await verify();
    expect(r.status).toBe(200);
    expect(tenantResult(r.json, a)).toMatchObject({ intact: true, aantalEntries: 30 });
    expect(tenantResult(r.json, b)).toMatchObject({ intact: true, aantalEntries: 20 });
    const tijdstip = /tijdstip (\S+)/.exec(adoption.ok ? adoption.text : "")![1]!;
    expect(r.json.ankerbestand.waarschuwingen).toEqual([expect.stringContaining(`tenant ${a} is op ${tijdstip} geadopteerd vanaf seq 51: de entries 1 t/m 50`)]);
  });

  test("audit-anker then extends the adopted tree (its own origin, root over entries 51 on); a field changed later is still 409 hash-afwijkend", async () => {
    const { a } = await shortenedTheOldWay();
    expect((await adopt(a, { ja: true })).code).toBe(0);
    await fillChain(env.store, a, 7, { from: 80 });
    const anker = await call(env.app, "/api/cron/audit-anker");
    expect(anker.status).toBe(200);
    expect(anker.json.checkpoints).toEqual([{ tenantId: a, grootte: 87, root: await rootFrom(a, 50) }]);
    const last = fileLines().filter((l) => l.soort === "checkpoint" && l.tenantId === a).at(-1)!;
    const opened = openNote(last.note, [VERIFIER]);
    expect(opened.ok && opened.text).toBe(`nachtwacht.test/sleutel/tenant/${a}/adoptie/50\n37\n${await rootFrom(a, 50)}\n`);
    expect((await verify()).status).toBe(200);

    await env.db.run("UPDATE audit_entries SET actor = 'iemand-anders' WHERE tenant_id = ? AND seq = 60", a);
    const r = await verify();
    expect(r.status).toBe(409);
    expect(tenantResult(r.json, a).fout).toMatchObject({ seq: 60, reden: "hash-afwijkend" });
  });

  test("a crash after the adoption's fsync, before its COMMIT: the run is the file's tail, the next audit-anker copies it in (hersteld 3), then 200", async () => {
    const { a } = await shortenedTheOldWay();
    const { end } = (await env.db.get<{ end: number }>("SELECT max(positie) AS end FROM audit_anchor_log"))!;
    expect((await adopt(a, { ja: true })).code).toBe(0);
    // What the crash leaves: the run in the file, none of its rows.
    await env.db.run("DELETE FROM audit_anchor_log WHERE positie > ?", end);
    const crashed = await verify();
    expect(crashed.status).toBe(409);
    expect(crashed.json.ankerbestand).toMatchObject({ intact: true }); // one run in the tail: a crash, not a rollback
    expect(tenantResult(crashed.json, a).fout).toMatchObject({ reden: "retentie-ontbreekt" });
    const anker = await call(env.app, "/api/cron/audit-anker");
    expect(anker.status).toBe(200);
    expect(anker.json).toMatchObject({ hersteld: 3, aantal: 0 });
    expect((await verify()).status).toBe(200);
  });

  test("entries cut from the adopted chain's start afterwards are missing again: 409 retentie-ontbreekt", async () => {
    const { a } = await shortenedTheOldWay();
    expect((await adopt(a, { ja: true })).code).toBe(0);
    await env.db.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= 55", a);
    const r = await verify();
    expect(r.status).toBe(409);
    expect(tenantResult(r.json, a).fout).toMatchObject({ seq: 56, reden: "retentie-ontbreekt" });
  });

  test("the adoption record altered in the database: 409 retentie-ongeldig (the chain has no valid start), the row not in the file", async () => {
    const { a } = await shortenedTheOldWay();
    expect((await adopt(a, { ja: true })).code).toBe(0);
    const row = (await env.db.get<{ positie: number; note: string }>("SELECT positie, note FROM audit_anchor_log WHERE soort = 'adoptie'"))!;
    // Moved to adopt from seq 49 (its row still says 50): the signature no longer holds.
    await env.db.run("UPDATE audit_anchor_log SET note = ? WHERE positie = ?", row.note.replace("\nseq 50\n", "\nseq 49\n"), row.positie);
    const r = await verify();
    expect(r.status).toBe(409);
    expect(tenantResult(r.json, a).fout).toMatchObject({ seq: 51, reden: "retentie-ongeldig" });
    expect(r.json.ankerbestand.waarschuwingen.join(" ")).toContain(`tenant ${a} is op`); // the file's adoption is still named
  });

  test("the adoption record altered in the anchor file (root): 409 bestand-gewijzigd", async () => {
    const { a } = await shortenedTheOldWay();
    expect((await adopt(a, { ja: true })).code).toBe(0);
    writeFileSync(env.config.auditAnkerBestand, fileText().replace("\\nseq 50\\n", "\\nseq 49\\n"));
    const r = await verify();
    expect(r.status).toBe(409);
    expect(r.json.ankerbestand).toMatchObject({ intact: false, reden: "bestand-gewijzigd" });
    expect(r.json.ankerbestand.waarschuwingen.join(" ")).not.toContain("geadopteerd");
  });

  test("an adoption a database writer signs with a key of its own (same name) and inserts: 409 retentie-ongeldig, the row not in the file; audit-anker still refuses", async () => {
    const { a, h50 } = await shortenedTheOldWay();
    const own = parseSignerKey(generateKeyPair("nachtwacht.test/sleutel").signerKey);
    const note = signAdoptionRecord(own, { tenantId: a, seq: 50, hash: h50, tijdstip: NOW.toISOString() });
    await env.db.run("INSERT INTO audit_anchor_log (positie, soort, tenant_id, grootte, note) VALUES (999999, 'adoptie', ?, 50, ?)", a, note);
    const r = await verify();
    expect(r.status).toBe(409);
    expect(tenantResult(r.json, a).fout).toMatchObject({ seq: 51, reden: "retentie-ongeldig" });
    expect(r.json.ankerbestand.waarschuwingen.join(" ")).not.toContain("geadopteerd");
    const anker = await call(env.app, "/api/cron/audit-anker");
    expect(anker.status).toBe(409);
    expect(anker.json.geweigerd).toEqual([expect.objectContaining({ tenantId: a })]);
  });

  test("a genuine adoption's row copied to another shortened tenant does not start that chain (its origin names the first)", async () => {
    const { a } = await shortenedTheOldWay();
    const c = await addTenant(env.db, "Derde");
    await fillChain(env.store, c, 60);
    await env.db.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= 50", c);
    expect((await adopt(a, { ja: true })).code).toBe(0);
    const row = (await env.db.get<{ note: string }>("SELECT note FROM audit_anchor_log WHERE soort = 'adoptie'"))!;
    await env.db.run("INSERT INTO audit_anchor_log (positie, soort, tenant_id, grootte, note) VALUES (999999, 'adoptie', ?, 50, ?)", c, row.note);
    const r = await verify();
    expect(r.status).toBe(409);
    expect(tenantResult(r.json, c).fout).toMatchObject({ seq: 51, reden: "retentie-ongeldig" });
    expect(tenantResult(r.json, a)).toMatchObject({ intact: true });
  });
});

describe("what adopt refuses (exit 1, nothing written) or cannot do (exit 2)", () => {
  test("a chain that starts at seq 1; a tenant without entries; a chain broken from its oldest entry on; a second adoption", async () => {
    const { a, b } = await shortenedTheOldWay();
    const empty = await addTenant(env.db, "Leeg");
    const text = fileText();
    const one = await adopt(b, { ja: true });
    expect(one.code).toBe(1);
    expect(one.out).toContain(`RESULTAAT: GEWEIGERD: de keten van tenant ${b} begint bij seq 1`);
    expect((await adopt(empty, { ja: true })).out).toContain("heeft geen audit-entries");

    await env.db.run("UPDATE audit_entries SET details = '{\"i\":0}' WHERE tenant_id = ? AND seq = 64", a);
    const broken = await adopt(a, { ja: true });
    expect(broken.code).toBe(1);
    expect(broken.out).toContain("klopt niet vanaf seq 51: hash-afwijkend bij seq 64");
    expect(fileText()).toBe(text);

    await env.db.run("UPDATE audit_entries SET details = '{\"i\":63}' WHERE tenant_id = ? AND seq = 64", a);
    expect((await adopt(a, { ja: true })).code).toBe(0);
    const again = await adopt(a, { ja: true });
    expect(again.code).toBe(1);
    expect(again.out).toContain(`de keten van tenant ${a} begint al bij een geldig adoptierecord (seq 50)`);
  });

  test("a chain nachtwacht signed from seq 1 whose oldest entries a writer deleted later is not adopted: that is no earlier version's doing", async () => {
    env = await makeEnv();
    const a = await addTenant(env.db, "A");
    await fillChain(env.store, a, 40);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    await env.db.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= 15", a);
    expect(tenantResult((await verify()).json, a).fout).toMatchObject({ reden: "retentie-ontbreekt" });
    const text = fileText();
    const r = await adopt(a, { ja: true });
    expect(r.code).toBe(1);
    expect(r.out).toContain("nachtwacht heeft deze keten al ondertekend");
    expect(fileText()).toBe(text);
  });

  test("a chain with a valid retention record is not adopted; neither while the anchor file does not match the database", async () => {
    env = await makeEnv({ AUDIT_RETENTIE_DAGEN: "900" });
    const a = await addTenant(env.db, "A");
    await fillChain(env.store, a, 60); // 1000 to 941 days old: 1–60 past 900 days
    await fillChain(env.store, a, 10, { from: 200 });
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    expect((await call(env.app, "/api/cron/audit-retentie")).json.verwijderd).toBe(60);
    expect((await adopt(a, { ja: true })).code).toBe(1);

    const b = await addTenant(env.db, "B");
    await fillChain(env.store, b, 20);
    await env.db.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= 5", b);
    writeFileSync(env.config.auditAnkerBestand, fileText().replace("\\n70\\n", "\\n71\\n"));
    const r = await adopt(b, { ja: true });
    expect(r.code).toBe(1);
    expect(r.out).toContain("het ankerbestand klopt niet met de database (bestand-gewijzigd");
  });

  test("without the signing key nothing is signed: exit 2 (also through the binary's entry point, with no secret in its environment)", async () => {
    const { a } = await shortenedTheOldWay();
    const text = fileText();
    const r = await adopt(a, { ja: true, key: null });
    expect(r.code).toBe(2);
    expect(r.err).toContain("AUDIT_ANKER_SLEUTEL staat niet in de omgeving");
    const where = databaseOf();
    const p = Bun.spawn([BUN, join(ROOT, "src/index.ts"), "adopt", "--tenant", String(a), "--ja", ...where.args, "--bestand", env.config.auditAnkerBestand], {
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: env.dir, ...where.env },
      stdout: "pipe",
      stderr: "pipe",
    });
    expect(await p.exited).toBe(2);
    expect(await new Response(p.stderr).text()).toContain("nachtwacht adopt: niet mogelijk: AUDIT_ANKER_SLEUTEL");
    expect(fileText()).toBe(text);
    expect((await adopt(a, { ja: true, key: "geen-sleutel" })).code).toBe(2);
    expect((await runAuditCommand(["adopt", "--ja"], { AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY }, () => {}, () => {}))).toBe(2);
    expect(fileText()).toBe(text);
  });

  test("--db beside DATABASE_URL (or --database-url) names two databases: adopt and accept-restore refuse to choose, exit 2, nothing written", async () => {
    const { a } = await shortenedTheOldWay();
    const text = fileText();
    const rows = await rowCount();
    // On the SQLite run a PostgreSQL URL nothing listens on: the refusal comes before any connection.
    const url = env.store.kind === "pg" ? env.store.url : "postgres://nw@127.0.0.1:1/nachtwacht";
    const run = async (args: string[], extra: Record<string, string>) => {
      const errs: string[] = [];
      const code = await runAuditCommand(args, { AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY, ...extra }, () => {}, (s) => errs.push(s));
      return { code, err: errs.join("\n") };
    };
    const base = ["--db", env.config.databasePath, "--bestand", env.config.auditAnkerBestand, "--ja"];
    for (const cmd of [["adopt", "--tenant", String(a)], ["accept-restore"]]) {
      const both = await run([...cmd, ...base], { DATABASE_URL: url });
      expect(both.code).toBe(2);
      expect(both.err).toContain(`--db ${env.config.databasePath} en DATABASE_URL in de omgeving noemen elk een database: onduidelijk welke bedoeld is.`);
      const given = await run([...cmd, ...base, "--database-url", url], {});
      expect(given.code).toBe(2);
      expect(given.err).toContain("en --database-url noemen elk een database");
    }
    expect(fileText()).toBe(text);
    expect(await rowCount()).toBe(rows);
  });
});

describe("an adopted chain in the rest of the system", () => {
  test("nachtwacht verify (a process, public key only) agrees with audit-verificatie before and after, and after a tamper", async () => {
    const { a } = await shortenedTheOldWay();
    const run = async () => {
      const where = databaseOf();
      const p = Bun.spawn([BUN, join(ROOT, "src/index.ts"), "verify", ...where.args, "--bestand", env.config.auditAnkerBestand, "--sleutel", TEST_VERIFIER_KEY], {
        env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: env.dir, ...where.env },
        stdout: "pipe",
        stderr: "pipe",
      });
      return { code: await p.exited, out: await new Response(p.stdout).text() };
    };
    const before = await run();
    expect(before.code).toBe(1);
    expect(before.out).toContain(`tenant ${a}: GEBROKEN bij seq 51: retentie-ontbreekt`);
    expect((await adopt(a, { ja: true })).code).toBe(0);
    const after = await run();
    expect(after.code).toBe(0);
    expect(after.out).toContain(`LET OP: tenant ${a} is op `);
    expect(after.out).toContain(`tenant ${a}: in orde (30 entries)`);
    await env.db.run("UPDATE audit_entries SET subject = 'x' WHERE tenant_id = ? AND seq = 70", a);
    const tampered = await run();
    expect(tampered.code).toBe(1);
    expect(tampered.out).toContain(`tenant ${a}: GEBROKEN bij seq 70: hash-afwijkend`);
    expect((await verify()).status).toBe(409);
  });

  test("export and verify --bundel: the bundle carries the adoption and an inclusion proof in the adopted tree; without the adoption it does not verify", async () => {
    const { a } = await shortenedTheOldWay();
    expect((await adopt(a, { ja: true })).code).toBe(0);
    const file = join(env.dir, "bundel.jsonl");
    const out: string[] = [];
    const where = databaseOf();
    const ex = await runAuditCommand(["export", "--tenant", String(a), "--bewijs", "64", "--uit", file, ...where.args, "--bestand", env.config.auditAnkerBestand, "--sleutel", TEST_VERIFIER_KEY], where.env, (s) => out.push(s), (s) => out.push(s));
    expect(ex).toBe(0);
    const lines = readFileSync(file, "utf8").trimEnd().split("\n");
    expect(lines).toHaveLength(1 + 30);
    const header = JSON.parse(lines[0]!);
    expect(header).toMatchObject({ retentie: null, adoptie: expect.stringContaining(`/tenant/${a}/adoptie\nseq 50\n`), bewijs: { seq: 64, index: 13, grootte: 30 } });
    const check = async () => {
      const o: string[] = [];
      const code = await runAuditCommand(["verify", "--bundel", file, "--sleutel", TEST_VERIFIER_KEY], {}, (s) => o.push(s), (s) => o.push(s));
      return { code, out: o.join("\n") };
    };
    const ok = await check();
    expect(ok.code).toBe(0);
    expect(ok.out).toContain("inclusiebewijs klopt");
    expect(ok.out).toContain("LET OP: de keten is op ");
    writeFileSync(file, [JSON.stringify({ ...header, adoptie: null }), ...lines.slice(1)].join("\n"));
    const without = await check();
    expect(without.code).toBe(1);
    expect(without.out).toContain("geadopteerd");
  });

  test("audit-retentie deletes the adopted chain's old entries under a record in the adopted tree; verification stays 200 and keeps the warning", async () => {
    const { a } = await shortenedTheOldWay({ AUDIT_RETENTIE_DAGEN: "935" });
    expect((await adopt(a, { ja: true })).code).toBe(0);
    // Entries 51–65 are 950 to 936 days old: past 935 days.
    const ret = await call(env.app, "/api/cron/audit-retentie");
    expect(ret.status).toBe(200);
    expect(ret.json.verwijderd).toBe(15 + 20); // and the whole of b, 981 days and older
    const record = fileLines().filter((l) => l.soort === "retentie" && l.tenantId === a).at(-1)!;
    const opened = openNote(record.note, [VERIFIER]);
    expect(opened.ok && opened.text).toStartWith(`nachtwacht.test/sleutel/tenant/${a}/adoptie/50/retentie\nseq 65\n`);
    const r = await verify();
    expect(r.status).toBe(200);
    expect(tenantResult(r.json, a)).toMatchObject({ intact: true, aantalEntries: 15 });
    expect(r.json.ankerbestand.waarschuwingen.join(" ")).toContain(`tenant ${a} is op`);
    await fillChain(env.store, a, 3, { from: 80 });
    expect((await call(env.app, "/api/cron/audit-anker")).json.checkpoints).toEqual([{ tenantId: a, grootte: 83, root: expect.any(String) }]);
    expect((await verify()).status).toBe(200);
  });
});
