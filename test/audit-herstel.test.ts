// `nachtwacht accept-restore`: a database deliberately restored from an older copy is
// 409 database-teruggezet for good, until the operator accepts the loss with the signing
// key. A restore as a backup restore does it, the nightly jobs over HTTP, the command
// through its function and as a process.
//
// On both stores (test/dialect.ts). A backup is on SQLite a copy of the .db file
// (VACUUM INTO) put back over it (restoreDatabase); on PostgreSQL a database made with
// the service's as its template (CREATE DATABASE … TEMPLATE, nobody connected meanwhile),
// put back as a new database made from that copy, which the service then uses. On the
// PostgreSQL run `accept-restore` works on PostgreSQL itself (DATABASE_URL), and the
// service's environment may still name the SQLite file it was moved from. Both ways are
// test/dialect.ts copyDatabase and restoreCopy.
import { afterEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { copyFileSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { generateKeyPair, openNote, parseSignerKey, parseVerifierKey } from "../src/audit/note.ts";
import { signRestoreRecord } from "../src/audit/records.ts";
import { entryHash } from "../src/audit/chain.ts";
import { runAuditCommand } from "../src/cli/audit.ts";
import { migrateToPostgres } from "../src/pg/migrate-to.ts";
import { BUN, ROOT } from "./binary.ts";
import { anchorFileLines, call, DAY_MS, makePgTestEnv, makeTestEnv, NOW, TEST_SIGNING_KEY, TEST_VERIFIER_KEY } from "./helpers.ts";
import { addTenant, anchorRowCount, chainRoot, copyDatabase, fillChain, makeEnv, pgOnly, restoreCopy, testCluster, testDb, type Env } from "./dialect.ts";

let env: Env;
/** Cleanups of installations a test keeps beside env (the SQLite one moved from). */
const others: (() => unknown)[] = [];
afterEach(async () => {
  await env?.cleanup();
  for (const c of others.splice(0)) await c();
});
setDefaultTimeout(60_000);

/** Entries `n` of a tenant, made a second apart 30 days before NOW; `label` tells fills apart. */
const fill = (tenantId: number, n: number, label: string) =>
  fillChain(env.store, tenantId, n, { label, at: (i) => new Date(NOW.getTime() - 30 * DAY_MS + i * 1000) });

/**
 * Tenants a (40 entries) and b (25) signed; a copy of the database taken; then `runs`
 * more days of entries for a, each signed by audit-anker; then the copy put back as a
 * restore from a backup does it.
 */
async function restored(runs = 2): Promise<{ a: number; b: number; copy: string }> {
  env = await makeEnv();
  const a = await addTenant(env.db, "Gemeente Delft");
  const b = await addTenant(env.db, "Stichting Leiden");
  await fill(a, 40, "eerst");
  await fill(b, 25, "eerst");
  expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
  const copy = await copyDatabase(env, "oud.db");
  for (let day = 0; day < runs; day++) {
    await fill(a, 5, `dag${day}`);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
  }
  await restoreCopy(env, copy);
  return { a, b, copy };
}

/**
 * Tenant a with 20 entries, signed at 10 and 20; then, as a database writer, from seq 3 on
 * another actor with every hash and link recomputed: only the checkpoints tell.
 */
async function rewrittenFrom3(): Promise<number> {
    env = await makeEnv();
    const a = await addTenant(env.db, "Gemeente Delft");
    await fill(a, 10, "eerst");
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200); // checkpoint at 10
    await fill(a, 10, "dag0");
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200); // checkpoint at 20
    let prev = (await env.db.get<{ hash: string }>("SELECT hash FROM audit_entries WHERE tenant_id = ? AND seq = 2", a))!.hash;
    for (const r of await env.db.all<Record<string, any>>("SELECT * FROM audit_entries WHERE tenant_id = ? AND seq >= 3 ORDER BY seq", a)) {
      const hash = entryHash({ tenantId: a, seq: r.seq, createdAt: r.created_at, actor: "mallory", action: r.action, subject: r.subject, details: r.details, prevHash: prev });
      await env.db.run("UPDATE audit_entries SET actor = 'mallory', prev_hash = ?, hash = ? WHERE tenant_id = ? AND seq = ?", prev, hash, a, r.seq);
      prev = hash;
    }
    return a;
}

const verify = () => call(env.app, "/api/cron/audit-verificatie");
const tenantResult = (body: any, tenantId: number) => body.resultaten.find((r: any) => r.tenantId === tenantId);

/** `nachtwacht accept-restore` through its function, with the signing key and the database in the environment as the service has them. */
async function acceptRestore(o: { ja?: boolean; vervang?: boolean; key?: string | null } = {}) {
  const lines: string[] = [];
  const errs: string[] = [];
  const where = databaseOf();
  const args = ["accept-restore", ...where.args, "--bestand", env.config.auditAnkerBestand, ...(o.ja ? ["--ja"] : []), ...(o.vervang ? ["--vervang-keten"] : [])];
  const cliEnv: Record<string, string> = { ...where.env, ...(o.key === null ? {} : { AUDIT_ANKER_SLEUTEL: o.key ?? TEST_SIGNING_KEY }) };
  const code = await runAuditCommand(args, cliEnv, (s) => lines.push(s), (s) => errs.push(s));
  return { code, out: lines.join("\n"), err: errs.join("\n") };
}

/** Where the commands read the installation: `--db FILE`, or DATABASE_URL in their environment (PostgreSQL). */
function databaseOf(): { args: string[]; env: Record<string, string> } {
  return env.store.kind === "sqlite" ? { args: ["--db", env.config.databasePath], env: {} } : { args: [], env: { DATABASE_URL: env.store.url } };
}

/** A command as a separate process with only PATH and HOME in its environment (no secret), and `extra`. */
async function spawn(args: string[], extra: Record<string, string> = {}) {
  const p = Bun.spawn([BUN, join(ROOT, "src/index.ts"), ...args], { env: { PATH: Bun.env.PATH ?? "/usr/bin:/bin", HOME: env.dir, ...extra }, stdout: "pipe", stderr: "pipe" });
  const [code, out, err] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
  return { code, out, err };
}
const offline = () => {
  const where = databaseOf();
  return spawn(["verify", ...where.args, "--bestand", env.config.auditAnkerBestand, "--sleutel", TEST_VERIFIER_KEY], where.env);
};

const fileText = () => readFileSync(env.config.auditAnkerBestand, "utf8");
const rowCount = () => anchorRowCount(env.db);
const fileLines = () => anchorFileLines(env.config.auditAnkerBestand);
/** The RFC 6962 root over the tenant's entries as they are now. */
const root = (tenantId: number) => chainRoot(env.db, tenantId);

const VERIFIER = parseVerifierKey(TEST_VERIFIER_KEY);

describe("accepting a deliberate restore", () => {
  test("409 database-teruggezet; without the key exit 2 and nothing appended; without --ja only the report; with --ja 200 with the warning, audit-anker signs again, and an older-still rollback is 409 again", async () => {
    const { a, b, copy } = await restored(2);
    const before = await verify();
    expect(before.status).toBe(409);
    expect(before.json.ankerbestand).toMatchObject({ intact: false, reden: "database-teruggezet" });
    expect(tenantResult(before.json, a).fout).toMatchObject({ seq: 50, reden: "kop-ontbreekt" });

    const text = fileText();
    const rows = await rowCount();
    const noKey = await acceptRestore({ ja: true, key: null });
    expect(noKey.code).toBe(2);
    expect(noKey.err).toContain("nachtwacht accept-restore: niet mogelijk: AUDIT_ANKER_SLEUTEL staat niet in de omgeving");
    // The same through the binary's entry point, with no secret in its environment.
    const where = databaseOf();
    const proc = await spawn(["accept-restore", "--ja", ...where.args, "--bestand", env.config.auditAnkerBestand], where.env);
    expect(proc.code).toBe(2);
    expect(fileText()).toBe(text);
    expect(await rowCount()).toBe(rows);

    const dry = await acceptRestore();
    expect(dry.code).toBe(0);
    expect(dry.out).toContain("4 regel(s) van het ankerbestand ontbreken in de database; worden teruggezet");
    expect(dry.out).toContain(`tenant ${a}: van seq 50 terug naar 40: de ondertekende entries 41 t/m 50 zijn verloren; root bij 40: ${await root(a)}`);
    expect(dry.out).not.toContain(`tenant ${b}:`);
    expect(dry.out).toContain("RESULTAAT: er is niets geschreven. Met --ja: 1 herstelrecord(s) ondertekenen");
    expect(fileText()).toBe(text);
    expect(await rowCount()).toBe(rows);
    expect((await verify()).status).toBe(409);

    const done = await acceptRestore({ ja: true });
    expect(done.code).toBe(0);
    expect(done.out).toContain("RESULTAAT: 1 herstelrecord(s) ondertekend");
    const added = fileLines().slice(-2);
    expect(added.map((l) => [l.soort, l.tenantId])).toEqual([["herstel", a], ["installatie", undefined]]);
    const opened = openNote(added[0]!.note, [VERIFIER]);
    expect(opened.ok && opened.text).toMatch(
      new RegExp(`^nachtwacht\\.test/sleutel/tenant/${a}/herstel\\nvan 50\\nvan-root \\S{44}\\nnaar 40\\nroot ${(await root(a)).replace(/[+/]/g, "\\$&")}\\ntijdstip \\S+Z\\n$`),
    );
    // Every line of the file has its row again (the four the copy lacked, the two new ones).
    expect(await rowCount()).toBe(rows + 4 + 2);
    // The accepted state, as a backup would copy it (the rollback below puts it back).
    const accepted = await copyDatabase(env, "geaccepteerd.db");

    const after = await verify();
    expect(after.status).toBe(200);
    expect(after.json.ankerbestand).toMatchObject({ intact: true });
    expect(tenantResult(after.json, a)).toMatchObject({ intact: true, aantalEntries: 40 });
    const tijdstip = /tijdstip (\S+)/.exec(opened.ok ? opened.text : "")![1]!;
    expect(after.json.ankerbestand.waarschuwingen).toEqual([
      expect.stringContaining(`tenant ${a}: op ${tijdstip} is een teruggezette database geaccepteerd; de keten ging terug van seq 50 naar 40; de ondertekende entries 41 t/m 50 zijn verloren (herstelrecord op positie `),
    ]);

    // The host application goes on; audit-anker signs the new entries on top of the accepted state.
    await fill(a, 3, "na");
    const anker = await call(env.app, "/api/cron/audit-anker");
    expect(anker.status).toBe(200);
    expect(anker.json.checkpoints).toEqual([{ tenantId: a, grootte: 43, root: await root(a) }]);
    expect((await verify()).status).toBe(200);
    expect(((await verify()).json.ankerbestand.waarschuwingen as string[]).join(" ")).toContain("van seq 50 naar 40");

    // A database writer rolls back again, to the copy from before the acceptance: nothing
    // it can do makes that acceptable (it has no key), so it is the alarm again.
    await restoreCopy(env, copy);
    const again = await verify();
    expect(again.status).toBe(409);
    expect(again.json.ankerbestand).toMatchObject({ reden: "database-teruggezet" });
    // And to the copy the operator accepted, now a run behind whose tenant lost signed entries.
    await restoreCopy(env, accepted);
    expect((await verify()).status).toBe(409);
  });

  test("the application wrote more entries to the restored copy than were lost (another chain under the signed numbers): checkpoint-afwijkend, not with --ja alone, accepted from 50 to 55 with --vervang-keten", async () => {
    const { a } = await restored(2);
    await fill(a, 15, "na-terugzetten");
    const before = await verify();
    expect(before.status).toBe(409);
    expect(tenantResult(before.json, a).fout).toMatchObject({ seq: 50, reden: "checkpoint-afwijkend" });
    const dry = await acceptRestore();
    expect(dry.code).toBe(1);
    expect(dry.out).toContain(`tenant ${a}: van seq 50 terug naar 55: de database heeft onder de ondertekende seqs 41 t/m 50 een andere keten dan ondertekend (checkpoint-afwijkend); die worden vervangen`);
    // The checkpoint at 40 (the copy's) still holds, the one at 45 not: what the operator accepts unproven.
    expect(dry.out).toContain("entries 41 t/m 55 zijn tegen geen checkpoint van het ankerbestand te bewijzen en worden zo aanvaard");
    const size = fileText().length;
    const rows = await rowCount();
    const jaAlone = await acceptRestore({ ja: true });
    expect(jaAlone.code).toBe(1);
    expect(jaAlone.out).toContain(`tenant ${a}: NIET geaccepteerd zonder --vervang-keten`);
    expect([fileText().length, await rowCount()]).toEqual([size, rows]);
    expect((await acceptRestore({ ja: true, vervang: true })).code).toBe(0);
    const after = await verify();
    expect(after.status).toBe(200);
    expect(after.json.ankerbestand.waarschuwingen.join(" ")).toContain("de ondertekende keten tot seq 50 is vervangen door die uit de database");
  });

  test("a chain broken in itself is not accepted: exit 1, that tenant stays 409, the others are accepted", async () => {
    const { a, b } = await restored(2);
    await env.db.run("UPDATE audit_entries SET actor = 'iemand-anders' WHERE tenant_id = ? AND seq = 12", b);
    const r = await acceptRestore({ ja: true });
    expect(r.code).toBe(1);
    expect(r.out).toContain(`tenant ${b}: NIET te accepteren: hash-afwijkend bij seq 12`);
    expect(r.out).toContain("1 herstelrecord(s) ondertekend en in het ankerbestand gezet; 1 tenant(s) niet geaccepteerd");
    const v = await verify();
    expect(v.status).toBe(409);
    expect(v.json.ankerbestand).toMatchObject({ intact: true });
    expect(tenantResult(v.json, a)).toMatchObject({ intact: true });
    expect(tenantResult(v.json, b).fout).toMatchObject({ seq: 12, reden: "hash-afwijkend" });
  });

  test("a chain rewritten in the database (no restore) is not accepted: it misses the checkpoint the database held itself before the newest run", async () => {
    const a = await rewrittenFrom3();
    const before = readFileSync(env.config.auditAnkerBestand, "utf8");
    const r = await acceptRestore({ ja: true });
    expect(r.code).toBe(1);
    expect(r.out).toContain(`tenant ${a}: NIET te accepteren: checkpoint-afwijkend (de keten haalt het checkpoint bij seq 10 niet, dat de database zelf al had`);
    expect(readFileSync(env.config.auditAnkerBestand, "utf8")).toBe(before);
    const v = await verify();
    expect(v.status).toBe(409);
    expect(tenantResult(v.json, a).fout).toMatchObject({ reden: "checkpoint-afwijkend" });
  });

  test("the same rewrite with the database's copy of the anchor file emptied and the newest entries cut (so it reads as a restore): still not accepted, by the file's checkpoints", async () => {
    const a = await rewrittenFrom3();
    await env.db.run("DELETE FROM audit_entries WHERE tenant_id = ? AND seq > 17", a);
    // The rows that named the checkpoint at 10 as the database's own: gone (before the fix, accepted).
    await env.db.run("DELETE FROM audit_anchor_log");
    expect((await verify()).json.ankerbestand).toMatchObject({ reden: "database-teruggezet" });
    const before = readFileSync(env.config.auditAnkerBestand, "utf8");
    const r = await acceptRestore({ ja: true });
    expect(r.code).toBe(1);
    expect(r.out).toContain(`tenant ${a}: NIET te accepteren: checkpoint-afwijkend (de keten haalt geen enkel checkpoint van het ankerbestand waar ze lang genoeg voor is, ook dat bij seq 10 niet`);
    expect(readFileSync(env.config.auditAnkerBestand, "utf8")).toBe(before);
    expect((await verify()).status).toBe(409);
  });

  test("a rewrite of what the last three runs signed, their rows deleted from audit_anchor_log: --ja alone signs nothing (exit 1, the tenant and --vervang-keten named); --ja --vervang-keten signs it", async () => {
    env = await makeEnv();
    const a = await addTenant(env.db, "Gemeente Delft");
    await fill(a, 10, "eerst");
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    const keep = (await env.db.get<{ m: number }>("SELECT max(positie) AS m FROM audit_anchor_log"))!.m;
    for (const d of ["d1", "d2", "d3"]) {
      await fill(a, 5, d);
      expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    }
    let prev = (await env.db.get<{ hash: string }>("SELECT hash FROM audit_entries WHERE tenant_id = ? AND seq = 10", a))!.hash;
    for (const r of await env.db.all<Record<string, any>>("SELECT * FROM audit_entries WHERE tenant_id = ? AND seq >= 11 ORDER BY seq", a)) {
      const hash = entryHash({ tenantId: a, seq: r.seq, createdAt: r.created_at, actor: "mallory", action: r.action, subject: r.subject, details: r.details, prevHash: prev });
      await env.db.run("UPDATE audit_entries SET actor = 'mallory', prev_hash = ?, hash = ? WHERE tenant_id = ? AND seq = ?", prev, hash, a, r.seq);
      prev = hash;
    }
    await env.db.run("DELETE FROM audit_anchor_log WHERE positie > ?", keep);
    expect((await verify()).status).toBe(409);
    const size = fileText().length;
    const rows = await rowCount();
    const r = await acceptRestore({ ja: true });
    expect(r.code).toBe(1);
    expect(r.out).toContain(`tenant ${a}: van seq 25 terug naar 25: de database heeft onder de ondertekende seqs 11 t/m 25 een andere keten dan ondertekend`);
    expect(r.out).toContain(`tenant ${a}: NIET geaccepteerd zonder --vervang-keten`);
    expect(r.out).toContain(`RESULTAAT: er is niets geschreven: tenant(s) ${a} vervangen ondertekende entries`);
    expect([fileText().length, await rowCount()]).toEqual([size, rows]);
    expect((await verify()).status).toBe(409);
    // The operator, having compared with a backup, decides explicitly.
    const replaced = await acceptRestore({ ja: true, vervang: true });
    expect(replaced.code).toBe(0);
    expect(replaced.out).toContain("1 herstelrecord(s) ondertekend");
    expect((await verify()).status).toBe(200);
  });

  test("after audit-retentie: a checkpoint at or below the retention point (its entries gone) is not asked of the restored chain; accepted", async () => {
    env = await makeEnv({ AUDIT_RETENTIE_DAGEN: "10" });
    const a = await addTenant(env.db, "Gemeente Delft");
    await fill(a, 10, "oud"); // 30 days old: past retention
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200); // checkpoint at 10
    await fillChain(env.store, a, 10, { label: "recent", at: (i) => new Date(NOW.getTime() - DAY_MS + i * 1000) });
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200); // checkpoint at 20
    expect((await call(env.app, "/api/cron/audit-retentie")).json.verwijderd).toBe(10); // up to the checkpoint at 10
    const copy = await copyDatabase(env, "oud.db");
    await fillChain(env.store, a, 5, { label: "later", at: (i) => new Date(NOW.getTime() - 1000 + i) });
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200); // checkpoint at 25
    await restoreCopy(env, copy);
    const r = await acceptRestore({ ja: true });
    expect({ code: r.code, out: r.out, err: r.err }).toMatchObject({ code: 0 });
    expect(r.out).toContain(`tenant ${a}: van seq 25 terug naar 20: de ondertekende entries 21 t/m 25 zijn verloren`);
    expect((await verify()).status).toBe(200);
  });

  test("a restore exactly one run old, after audit-anker copied that run back (kop-ontbreekt for good): accepted too", async () => {
    const { a } = await restored(1);
    const anker = await call(env.app, "/api/cron/audit-anker");
    expect(anker.json).toMatchObject({ hersteld: 2, geweigerd: [{ tenantId: a, seq: 45, reden: "kop-ontbreekt" }] });
    expect(tenantResult((await verify()).json, a).fout).toMatchObject({ seq: 45, reden: "kop-ontbreekt" });
    const r = await acceptRestore({ ja: true });
    expect(r.code).toBe(0);
    expect(r.out).toContain("0 regel(s) van het ankerbestand ontbreken in de database");
    expect(r.out).toContain(`tenant ${a}: van seq 45 terug naar 40`);
    expect((await verify()).status).toBe(200);
    // Nothing left to accept: a second run signs nothing.
    const size = fileText().length;
    const again = await acceptRestore({ ja: true });
    expect(again.code).toBe(0);
    expect(again.out).toContain("RESULTAAT: niets te accepteren");
    expect(fileText().length).toBe(size);
  });

  test("a crash after the acceptance's fsync, before its COMMIT: still 409; a rerun copies the lines in and signs nothing new; then 200", async () => {
    const { a } = await restored(2);
    const { end } = (await env.db.get<{ end: number }>("SELECT max(positie) AS end FROM audit_anchor_log"))!;
    expect((await acceptRestore({ ja: true })).code).toBe(0);
    // What the crash leaves: the lines in the file, none of the transaction's rows.
    await env.db.run("DELETE FROM audit_anchor_log WHERE positie > ?", end);
    expect((await verify()).status).toBe(409);
    const size = fileText().length;
    const rerun = await acceptRestore({ ja: true });
    expect(rerun.code).toBe(0);
    expect(rerun.out).toContain("RESULTAAT: 6 regel(s) in de database teruggezet; geen nieuw herstelrecord nodig.");
    expect(fileText().length).toBe(size);
    const v = await verify();
    expect(v.status).toBe(200);
    expect(v.json.ankerbestand.waarschuwingen).toEqual([expect.stringContaining(`tenant ${a}: op `)]);
  });

  test("a database writer cannot accept: a restore acceptance signed with its own key (same name) and inserted is 409, and accept-restore refuses rows that do not match the file", async () => {
    const { a } = await restored(1);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(409); // copies the run back, refuses a
    const own = parseSignerKey(generateKeyPair("nachtwacht.test/sleutel").signerKey);
    const rootA = Buffer.from(await root(a), "base64");
    const note = signRestoreRecord(own, { tenantId: a, basis: 0, van: 45, vanRoot: rootA, naar: 40, root: rootA, tijdstip: NOW.toISOString() });
    await env.db.run("INSERT INTO audit_anchor_log (positie, soort, tenant_id, grootte, note) VALUES (999999, 'herstel', ?, 40, ?)", a, note);
    const v = await verify();
    expect(v.status).toBe(409);
    expect(tenantResult(v.json, a).fout).toMatchObject({ seq: 45, reden: "kop-ontbreekt" });
    expect(v.json.ankerbestand.waarschuwingen.join(" ")).not.toContain("geaccepteerd");
    const r = await acceptRestore({ ja: true });
    expect(r.code).toBe(1);
    expect(r.out).toContain(`RESULTAAT: GEWEIGERD: rijen in audit_anchor_log kloppen niet met het ankerbestand (tenant ${a}: checkpoint-niet-in-bestand`);
  });

  test("a restore acceptance altered in the anchor file (root): 409 bestand-gewijzigd", async () => {
    await restored(2);
    expect((await acceptRestore({ ja: true })).code).toBe(0);
    writeFileSync(env.config.auditAnkerBestand, fileText().replace("\\nnaar 40\\n", "\\nnaar 39\\n"));
    const v = await verify();
    expect(v.status).toBe(409);
    expect(v.json.ankerbestand).toMatchObject({ intact: false, reden: "bestand-gewijzigd" });
  });

  test("nachtwacht verify (a process, public key only) agrees: exit 1 before, exit 0 with the warning after; verify --checkpoint with the new installation checkpoint and verify --bundel hold", async () => {
    const { a } = await restored(2);
    const before = await offline();
    expect(before.code).toBe(1);
    expect(before.out).toContain("ANKERBESTAND: database-teruggezet");
    expect(before.out).toContain(`tenant ${a}: GEBROKEN bij seq 50: kop-ontbreekt`);
    expect((await acceptRestore({ ja: true })).code).toBe(0);
    const after = await offline();
    expect(after.code).toBe(0);
    expect(after.out).toContain(`LET OP: tenant ${a}: op `);
    expect(after.out).toContain(`tenant ${a}: in orde (40 entries)`);

    const where = databaseOf();
    const cp = join(env.dir, "checkpoint.txt");
    writeFileSync(cp, fileLines().at(-1)!.note);
    const witness = await spawn(["verify", ...where.args, "--bestand", env.config.auditAnkerBestand, "--sleutel", TEST_VERIFIER_KEY, "--checkpoint", cp], where.env);
    expect(witness.code).toBe(0);

    const bundle = join(env.dir, "bundel.jsonl");
    expect((await spawn(["export", "--tenant", String(a), "--bewijs", "7", "--uit", bundle, ...where.args, "--bestand", env.config.auditAnkerBestand, "--sleutel", TEST_VERIFIER_KEY], where.env)).code).toBe(0);
    const checked = await spawn(["verify", "--bundel", bundle, "--sleutel", TEST_VERIFIER_KEY]);
    expect(checked.code).toBe(0);
    expect(checked.out).toContain("LET OP: het checkpoint is een herstelrecord: de keten ging na een teruggezette database terug van seq 50 naar 40.");
    expect(checked.out).toContain("(40 entries, inclusiebewijs klopt)");

    await env.db.run("UPDATE audit_entries SET subject = 'x' WHERE tenant_id = ? AND seq = 33", a);
    const tampered = await offline();
    expect(tampered.code).toBe(1);
    expect(tampered.out).toContain(`tenant ${a}: GEBROKEN bij seq 33: hash-afwijkend`);
    expect((await verify()).status).toBe(409);
  });
});

describe("an installation moved to PostgreSQL", () => {
  pgOnly("the service's environment names PostgreSQL (DATABASE_URL) and still the old SQLite file (DATABASE_PATH): accept-restore looks at PostgreSQL, finds nothing to accept, exit 0, nothing signed", async () => {
    // On SQLite first: signed, then moved with migrate-to; the old file stays, as docs/postgresql.md says.
    const old = makeTestEnv();
    others.push(() => old.cleanup());
    const a = await addTenant(testDb(old.store), "Gemeente Delft");
    await fillChain(old.store, a, 40, { label: "eerst", at: (i) => new Date(NOW.getTime() - 30 * DAY_MS + i * 1000) });
    expect((await call(old.app, "/api/cron/audit-anker")).status).toBe(200);
    const url = await (await testCluster()).createDatabase();
    const moved = await migrateToPostgres({ dbPath: old.config.databasePath, anchorPath: old.config.auditAnkerBestand, url, verifiers: [VERIFIER], log: () => {} });
    expect(moved.uitkomst).toBe("klaar");
    const e = await makePgTestEnv({ createDatabase: async () => url });
    copyFileSync(old.config.auditAnkerBestand, e.config.auditAnkerBestand);
    env = Object.assign(e, { db: testDb(e.store), dialect: "pg" as const });
    // Two nights on PostgreSQL: the old SQLite file is now two runs behind the anchor file.
    for (let day = 0; day < 2; day++) {
      await fill(a, 5, `dag${day}`);
      expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    }
    expect((await verify()).status).toBe(200);

    const text = fileText();
    const rows = await rowCount();
    const service = { DATABASE_URL: url, DATABASE_PATH: old.config.databasePath, AUDIT_ANKER_BESTAND: env.config.auditAnkerBestand, AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY };
    for (const ja of [[], ["--ja"]]) {
      const r = await spawn(["accept-restore", ...ja], service);
      expect(r).toMatchObject({ code: 0, err: "" });
      expect(r.out).toContain(`database:     ${url}`);
      expect(r.out).toContain("0 regel(s) van het ankerbestand ontbreken in de database");
      expect(r.out).toContain("RESULTAAT: niets te accepteren: de database mist niets van het ankerbestand.");
      expect(r.out).not.toContain("verloren");
    }
    expect(fileText()).toBe(text);
    expect(await rowCount()).toBe(rows);
    const v = await verify();
    expect(v.status).toBe(200);
    expect(v.json.ankerbestand.waarschuwingen).toEqual([]);
  });
});
