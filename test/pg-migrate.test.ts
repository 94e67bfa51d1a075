// Moving an installation to PostgreSQL (`nachtwacht migrate-to`), against a real
// PostgreSQL server started for this file (test/pg.ts): the copy carries chains,
// signed checkpoints, retention records and history, proves itself before it says
// done, and refuses a source that does not verify or a target that is not empty.
import { afterEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { SQL } from "bun";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { appendAuditEntry, canonicalJson, entryHash, type EntryRow } from "../src/audit/chain.ts";
import { parseVerifierKey } from "../src/audit/note.ts";
import { compareWithFile } from "../src/audit/anchor-check.ts";
import { anchorRecords } from "../src/reports/daily.ts";
import { verifyTenantChain } from "../src/audit/verify.ts";
import { dumpHasRows, libpqEnv } from "../src/pg/backup.ts";
import { appendEntriesPg, copyRows, verifyTenantChainPg, verifyTenantsPg } from "../src/pg/chain.ts";
import { verifyInstallationPg } from "../src/pg/offline.ts";
import { compareTable, copyText, COPIED_TABLES, foreignTables, migrateToPostgres, MOVE_BEGUN_KEY, PROVED_KEY, tableShape } from "../src/pg/migrate-to.ts";
import { openPgStore } from "../src/pg/store.ts";
import { UnprovedCopy } from "../src/db.ts";
import { pastSealedMarker, rowSealOf } from "../src/row-seal.ts";
import { startPgServer } from "../src/server.ts";
import { startFailureMessage } from "../src/start-failure.ts";
import { runAuditCommand } from "../src/cli/audit.ts";
import { runMigrateTo } from "../src/cli/migrate-to.ts";
import { fillDemoData } from "../src/cli/demo-data.ts";
import { addAdmin, addTenant, call, makePgTestEnv, makeTestEnv, NOW, TEST_SIGNING_KEY, TEST_VERIFIER_KEY, type TestEnv } from "./helpers.ts";
import { useTestCluster } from "./pg.ts";
import { buildBinary } from "./binary.ts";

setDefaultTimeout(60_000);
const DAY = 24 * 3600 * 1000;
const VERIFIERS = [parseVerifierKey(TEST_VERIFIER_KEY)];

const cluster = useTestCluster();
let env: TestEnv | undefined;
const clients: SQL[] = [];
afterEach(async () => {
  env?.cleanup();
  env = undefined;
  for (const c of clients.splice(0)) await c.close();
});
const client = (url: string) => {
  const c = new SQL(url, { max: 2 });
  clients.push(c);
  return c;
};

/** An installation that has lived: old entries deleted under a signed record, checkpoints, history, odd characters. */
async function livedInstallation() {
  env = makeTestEnv();
  const a = addTenant(env.store, "Alfa");
  const b = addTenant(env.store, "Beta\tmet tab");
  const c = addTenant(env.store, "Leeg", false);
  addAdmin(env.store, a, "beheer@alfa.nl");
  for (let i = 0; i < 40; i++) {
    // The first ten are past the retention period (2555 days) and will be deleted.
    const age = i < 10 ? 3000 - i : 400 - i;
    appendAuditEntry(env.store.sqlite, { tenantId: a, actor: i === 12 ? "tab\there\nnewline\\backslash\r vt\v bs\b ff\f" : `u${i}@alfa.nl`, action: "dossier.gewijzigd", subject: `dossier/${i} é 😀`, details: { i, tekst: "a\tb" }, createdAt: new Date(NOW.getTime() - age * DAY) });
  }
  for (let i = 0; i < 25; i++) appendAuditEntry(env.store.sqlite, { tenantId: b, actor: `u${i}@beta.nl`, action: "inlog", subject: "s", details: {}, createdAt: new Date(NOW.getTime() - (100 - i) * DAY) });
  env.store.sqlite.query("INSERT INTO login_attempts (tijdstip, account, ip, gelukt, reden, tenant_id) VALUES (?, 'x@alfa.nl', '10.0.0.1', 0, 'wachtwoord', ?), (?, 'y', '::1', 1, NULL, NULL)").run(new Date(NOW.getTime() - DAY).toISOString(), a, NOW.toISOString());
  expect((await call(env.app, "/api/cron/backup-status", { body: JSON.stringify({ exitCode: 0, bestandsnaam: "db.gz", grootte: 1234 }), headers: { "content-type": "application/json" } })).status).toBe(200);
  expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
  expect((await call(env.app, "/api/cron/audit-retentie")).status).toBe(200);
  for (let i = 40; i < 45; i++) appendAuditEntry(env.store.sqlite, { tenantId: a, actor: `u${i}@alfa.nl`, action: "nieuw", subject: "s", details: { i }, createdAt: new Date(NOW.getTime() - DAY) });
  expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
  expect((await call(env.app, "/api/cron/audit-verificatie")).status).toBe(200);
  return { a, b, c };
}

const migrate = (url: string) =>
  migrateToPostgres({ dbPath: env!.config.databasePath, anchorPath: env!.config.auditAnkerBestand, url, verifiers: VERIFIERS, log: () => {} });

/** migrate-to refuses the source (bron-niet-in-orde, saying `why`) and creates nothing in a fresh target. */
async function expectSourceRefused(why: string, uitkomst: "bron-niet-in-orde" | "bron-andere-versie" = "bron-niet-in-orde"): Promise<void> {
  const url = await cluster.createDatabase();
  const r = await migrate(url);
  expect(r.uitkomst).toBe(uitkomst);
  if (r.uitkomst === uitkomst) expect(r.toelichting).toContain(why);
  const [{ exists }] = await client(url)`SELECT EXISTS (SELECT 1 FROM pg_tables WHERE tablename = 'tenants') AS exists`;
  expect(exists).toBe(false);
}

const count = (table: string) => (env!.store.sqlite.query(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n;

describe("migrate-to", () => {
  test("copies every table, then proves the copy: rows equal and every chain verifying on PostgreSQL", async () => {
    const { a, b } = await livedInstallation();
    // The retention run really deleted a prefix: tenant a's chain starts at a signed record.
    expect((env!.store.sqlite.query("SELECT min(seq) AS s FROM audit_entries WHERE tenant_id = ?").get(a) as { s: number }).s).toBe(11);
    const url = await cluster.createDatabase();
    const r = await migrate(url);
    expect(r.uitkomst).toBe("klaar");
    if (r.uitkomst !== "klaar") return;
    for (const { tabel, rijen } of r.tabellen) expect([tabel, rijen]).toEqual([tabel, count(tabel)]);
    expect((await client(url)`SELECT key FROM service_meta WHERE key = ${PROVED_KEY}`).length).toBe(1);
    expect(r.entries).toBe(count("audit_entries"));
    expect(r.ketens).toBe(3);

    const pg = client(url);
    const checkpoints = (await compareWithFile(env!.config.databasePath, env!.config.auditAnkerBestand, VERIFIERS)).checkpoints;
    // Same verdict as on SQLite, from the retention record on, reaching the signed checkpoint.
    for (const t of [a, b]) {
      const opts = { checkpoint: checkpoints.get(t) ?? null, verifiers: VERIFIERS };
      expect(opts.checkpoint).not.toBeNull();
      const onPg = await verifyTenantChainPg(pg, t, opts);
      expect(onPg).toEqual(verifyTenantChain(env!.store.sqlite, t, opts));
      expect(onPg.intact).toBe(true);
    }
    // The odd characters survived COPY's text format byte for byte.
    const [row] = await pg`SELECT actor, details FROM audit_entries WHERE tenant_id = ${a} AND seq = 13`;
    expect(row.actor).toBe("tab\there\nnewline\\backslash\r vt\v bs\b ff\f");
    expect(row.details).toBe(canonicalJson({ i: 12, tekst: "a\tb" }));
    // Ids and sequences continue after the copied ones: a new append links to the head.
    const [{ m }] = await pg`SELECT max(id) AS m FROM audit_entries`;
    const [appended] = await pg.begin((tx) => appendEntriesPg(tx, [{ tenantId: a, createdAt: NOW.toISOString(), actor: "na", action: "verhuisd", subject: "s", details: "{}" }]));
    expect(appended!.id).toBe(Number(m) + 1);
    expect(appended!.seq).toBe(46);
    expect((await verifyTenantChainPg(pg, a, { checkpoint: checkpoints.get(a)!, verifiers: VERIFIERS })).intact).toBe(true);
    const [{ id: newTenant }] = await pg`INSERT INTO tenants (naam, aangemaakt) VALUES ('Nieuw', ${NOW.toISOString()}) RETURNING id`;
    expect(newTenant).toBe(4);
  });

  test("ids SQLite gave out and then deleted (login attempts past retention) are not given out again on PostgreSQL: its sequences start after SQLite's AUTOINCREMENT counters", async () => {
    await livedInstallation();
    const used = (env!.store.sqlite.query("SELECT seq FROM sqlite_sequence WHERE name = 'login_attempts'").get() as { seq: number }).seq;
    expect(used).toBe(2);
    env!.store.sqlite.run("DELETE FROM login_attempts");
    const url = await cluster.createDatabase();
    expect((await migrate(url)).uitkomst).toBe("klaar");
    const [{ id }] = await client(url)`INSERT INTO login_attempts (tijdstip, account, ip, gelukt) VALUES (${NOW.toISOString()}, 'z', '10.0.0.9', false) RETURNING id`;
    // SQLite's own next id, not 1 again.
    const onSqlite = env!.store.sqlite.query("INSERT INTO login_attempts (tijdstip, account, ip, gelukt) VALUES (?, 'z', '10.0.0.9', 0) RETURNING id").get(NOW.toISOString()) as { id: number };
    expect([Number(id), onSqlite.id]).toEqual([used + 1, used + 1]);
  });

  test("a changed, deleted or swapped entry in the copy is found by the PostgreSQL verifier, with SQLite's reden", async () => {
    const { a } = await livedInstallation();
    const url = await cluster.createDatabase();
    expect((await migrate(url)).uitkomst).toBe("klaar");
    const pg = client(url);
    const checkpoint = (await compareWithFile(env!.config.databasePath, env!.config.auditAnkerBestand, VERIFIERS)).checkpoints.get(a)!;
    const opts = { checkpoint, verifiers: VERIFIERS };
    const cases: [string, (sql: SQL) => Promise<unknown>, (s: typeof env) => void][] = [
      ["veld gewijzigd", (s) => s`UPDATE audit_entries SET actor = 'x' WHERE tenant_id = ${a} AND seq = 20`, (e) => e!.store.sqlite.query("UPDATE audit_entries SET actor = 'x' WHERE tenant_id = ? AND seq = 20").run(a)],
      ["middelste verwijderd", (s) => s`DELETE FROM audit_entries WHERE tenant_id = ${a} AND seq = 25`, (e) => e!.store.sqlite.query("DELETE FROM audit_entries WHERE tenant_id = ? AND seq = 25").run(a)],
      ["nieuwste afgeknipt", (s) => s`DELETE FROM audit_entries WHERE tenant_id = ${a} AND seq > 43`, (e) => e!.store.sqlite.query("DELETE FROM audit_entries WHERE tenant_id = ? AND seq > 43").run(a)],
    ];
    for (const [name, onPg, onSqlite] of cases) {
      await pg.begin(async (tx) => {
        await onPg(tx);
        onSqlite(env);
        const expected = verifyTenantChain(env!.store.sqlite, a, opts);
        expect([name, expected.intact]).toEqual([name, false]);
        expect([name, await verifyTenantChainPg(tx, a, opts)]).toEqual([name, expected]);
        // Undo both for the next case.
        throw new Rollback();
      }).catch((e) => {
        if (!(e instanceof Rollback)) throw e;
      });
      // SQLite: re-copy the original rows back from PostgreSQL's untouched state.
      const rows = (await pg`SELECT seq, id, created_at, actor, action, subject, details, prev_hash, hash FROM audit_entries WHERE tenant_id = ${a} ORDER BY seq`) as EntryRow[];
      env!.store.sqlite.query("DELETE FROM audit_entries WHERE tenant_id = ?").run(a);
      const ins = env!.store.sqlite.query("INSERT INTO audit_entries (tenant_id, seq, id, created_at, actor, action, subject, details, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
      for (const r of rows) ins.run(a, Number(r.seq), Number(r.id), r.created_at, r.actor, r.action, r.subject, r.details, r.prev_hash, r.hash);
      expect(verifyTenantChain(env!.store.sqlite, a, opts).intact).toBe(true);
    }
    // Two entries swapped (their seqs exchanged) on PostgreSQL.
    await pg.begin(async (tx) => {
      await tx`UPDATE audit_entries SET seq = -1 WHERE tenant_id = ${a} AND seq = 30`;
      await tx`UPDATE audit_entries SET seq = 30 WHERE tenant_id = ${a} AND seq = 31`;
      await tx`UPDATE audit_entries SET seq = 31 WHERE tenant_id = ${a} AND seq = -1`;
    });
    const swapped = await verifyTenantChainPg(pg, a, opts);
    expect(swapped.intact).toBe(false);
    expect(swapped.fout?.seq).toBe(30);
  });

  test("verification in worker threads gives the verdicts of verification in this thread, a broken chain included", async () => {
    const { a, b } = await livedInstallation();
    const url = await cluster.createDatabase();
    expect((await migrate(url)).uitkomst).toBe("klaar");
    const pg = client(url);
    await pg`UPDATE audit_entries SET subject = 'vervalst' WHERE tenant_id = ${b} AND seq = 9`;
    const checkpoints = (await compareWithFile(env!.config.databasePath, env!.config.auditAnkerBestand, VERIFIERS)).checkpoints;
    const tasks = [a, b, 3].map((tenantId) => ({ tenantId, checkpoint: checkpoints.get(tenantId) ?? null }));
    const inThread = await verifyTenantsPg(pg, tasks, { parallel: 1, verifiers: VERIFIERS });
    const onWorkers = await verifyTenantsPg(pg, tasks, { parallel: 2, verifiers: VERIFIERS, workers: { url, count: 2 } });
    expect([...onWorkers].sort()).toEqual([...inThread].sort());
    expect(onWorkers.get(a)).toEqual({ intact: true, aantalEntries: 35 });
    expect(onWorkers.get(b)?.fout).toEqual({ seq: 9, entryId: expect.any(Number), reden: "hash-afwijkend" });
  });

  test("into a database whose text collation is linguistic (ICU), keys that sort otherwise than bytewise still compare row by row", async () => {
    env = makeTestEnv();
    const a = addTenant(env.store, "A");
    for (const [i, sleutel] of ["ab", "B", "a-b", "a"].entries()) {
      appendAuditEntry(env.store.sqlite, { tenantId: a, actor: "u", action: "x", subject: `s${i}`, details: { i }, createdAt: new Date(NOW.getTime() - DAY) });
      env.store.sqlite.query("UPDATE audit_entries SET sleutel = ?, inhoud = 'i' WHERE tenant_id = ? AND seq = ?").run(sleutel, a, i + 1);
    }
    // Keys that sort otherwise: bytewise "Zeta" comes first, linguistically last.
    env.store.sqlite.query("INSERT INTO service_meta (key, value) VALUES ('Zeta', '1'), ('alpha', '2'), ('a-b', '3')").run();
    const url = await cluster.createDatabase(undefined, { icuLocale: "en-US" });
    const r = await migrate(url);
    expect(r.uitkomst).toBe("klaar");
  });

  test("a copy that differs from its source is named by table and key", async () => {
    const { b } = await livedInstallation();
    const url = await cluster.createDatabase();
    expect((await migrate(url)).uitkomst).toBe("klaar");
    const pg = client(url);
    const shape = tableShape(COPIED_TABLES.find((t) => tableShape(t).name === "audit_entries")!);
    expect((await compareTable(env!.store.sqlite, pg, shape)).verschil).toBeNull();
    await pg`UPDATE audit_entries SET subject = 'anders' WHERE tenant_id = ${b} AND seq = 7`;
    expect((await compareTable(env!.store.sqlite, pg, shape)).verschil).toEqual({ tabel: "audit_entries", sleutel: [b, 7], toelichting: "rij verschilt" });
    await pg`DELETE FROM audit_entries WHERE tenant_id = ${b} AND seq = 25`;
    await pg`UPDATE audit_entries SET subject = 's' WHERE tenant_id = ${b} AND seq = 7`;
    expect((await compareTable(env!.store.sqlite, pg, shape)).verschil).toEqual({ tabel: "audit_entries", sleutel: [b, 25], toelichting: "rij ontbreekt in PostgreSQL" });
  });

  test("refuses a target that already holds rows, and changes nothing there", async () => {
    await livedInstallation();
    const url = await cluster.createDatabase();
    expect((await migrate(url)).uitkomst).toBe("klaar");
    const pg = client(url);
    // The tenant checks it switched off for the copy are on again.
    const triggers = await pg`SELECT tgname, tgenabled FROM pg_trigger WHERE tgname IN ('audit_entries_have_tenant', 'audit_entries_moved_have_tenant') ORDER BY tgname`;
    expect(triggers).toEqual([{ tgname: "audit_entries_have_tenant", tgenabled: "O" }, { tgname: "audit_entries_moved_have_tenant", tgenabled: "O" }]);
    const [{ n }] = await pg`SELECT count(*) AS n FROM audit_entries`;
    const again = await migrate(url);
    expect(again.uitkomst).toBe("doel-niet-leeg");
    if (again.uitkomst === "doel-niet-leeg") expect(again.toelichting).toContain("bevat al een bewezen kopie");
    expect((await pg`SELECT count(*) AS n FROM audit_entries`)[0].n).toBe(n);
    // Without the proof's row (a run stopped after its COMMIT, or whose proof failed) the
    // copy is not taken for a proved one, and the way out is named.
    await pg`DELETE FROM service_meta WHERE key = ${PROVED_KEY}`;
    const unproved = await migrate(url);
    expect(unproved.uitkomst).toBe("doel-niet-leeg");
    if (unproved.uitkomst === "doel-niet-leeg") expect(unproved.toelichting).toContain("zonder bewezen kopie");
    if (unproved.uitkomst === "doel-niet-leeg") expect(unproved.toelichting).toContain("verwijder die database");
  });

  test("a write into the source during the copy: not done, not proved, and the operator told to stop the service and rerun into a new empty database (exit 1)", async () => {
    const { a } = await livedInstallation();
    const url = await cluster.createDatabase();
    const before = count("audit_entries");
    const out: string[] = [];
    const err: string[] = [];
    // The service still running: an entry committed to the SQLite file as the copy starts
    // (after the snapshot's first read), on the line the command prints then.
    const code = await runMigrateTo(
      ["--database-url", url, "--db", env!.config.databasePath, "--bestand", env!.config.auditAnkerBestand, "--sleutel", TEST_VERIFIER_KEY],
      {},
      (line) => {
        out.push(line);
        if (line.startsWith("kopiëren naar")) appendAuditEntry(env!.store.sqlite, { tenantId: a, actor: "nog@alfa.nl", action: "tijdens", subject: "s", details: {}, createdAt: NOW });
      },
      (line) => err.push(line),
    );
    expect(count("audit_entries")).toBe(before + 1);
    expect(code).toBe(1);
    expect(out.join("\n")).not.toContain("KLAAR");
    expect(err.join("\n")).toContain("bron-gewijzigd");
    expect(err.join("\n")).toContain("stop de service");
    expect(err.join("\n")).toContain("nieuwe, lege database");
    // The copy is the snapshot's (the entry is not in it), and never marked proved.
    const pg = client(url);
    expect(Number((await pg`SELECT count(*) AS n FROM audit_entries`)[0].n)).toBe(before);
    expect((await pg`SELECT key FROM service_meta WHERE key = ${PROVED_KEY}`).length).toBe(0);

    // Nothing uses it: the service started on it anyway (DATABASE_URL set regardless of the
    // exit) gave the entry's seq out again with another hash and called the chain intact.
    // It now stops at its start with the line the entry point prints (exit 2), before it
    // writes anything; verify and adopt refuse it too (exit 2).
    const meta = async () => ((await pg`SELECT key FROM service_meta ORDER BY key`) as { key: string }[]).map((r) => r.key);
    const metaBefore = await meta();
    expect(metaBefore).toContain(MOVE_BEGUN_KEY);
    let failure: unknown;
    try {
      const server = await startPgServer({ ...env!.config, port: 0 }, url);
      server.app.server?.stop(true);
      await server.deps.store.close();
    } catch (e) {
      failure = e;
    }
    expect(failure).toBeInstanceOf(UnprovedCopy);
    expect(startFailureMessage(failure, env!.config)).toContain("DATABASE_URL bevat een kopie van nachtwacht migrate-to die nooit is bewezen");
    expect(await meta()).toEqual(metaBefore);
    expect(Number((await pg`SELECT count(*) AS n FROM audit_entries`)[0].n)).toBe(before);
    for (const args of [
      ["verify", "--bestand", env!.config.auditAnkerBestand, "--sleutel", TEST_VERIFIER_KEY],
      ["adopt", "--tenant", String(a), "--bestand", env!.config.auditAnkerBestand, "--ja"],
    ]) {
      const lines: string[] = [];
      const code = await runAuditCommand(args, { DATABASE_URL: url, AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY }, (l) => lines.push(l), (l) => lines.push(l));
      expect([args[0], code]).toEqual([args[0], 2]);
      expect(lines.join("\n")).toContain("kopie van nachtwacht migrate-to die nooit is bewezen");
    }
    expect(await meta()).toEqual(metaBefore);
  });

  test("a proved copy's first start beside an anchor file without zegels-sinds seals nothing it copied: a row a database writer forged on SQLite stays forged on PostgreSQL", async () => {
    await livedInstallation();
    // The writer's backup report, unsealed and newer than the sealed one: backup-controle
    // on SQLite counts it as forged.
    const later = new Date(NOW.getTime() + 3600_000);
    env!.setNow(later);
    env!.store.sqlite
      .query("INSERT INTO backup_statuses (ontvangen, exit_code, gelukt, bestandsnaam, grootte, foutmelding, bron) VALUES (?, 0, 1, 'vals.gz', 999, NULL, 'backup.sh')")
      .run(new Date(later.getTime() - 60_000).toISOString());
    const onSqlite = await call(env!.app, "/api/cron/backup-controle");
    expect(onSqlite.json.vervalst).toBe(1);
    const url = await cluster.createDatabase();
    expect((await migrate(url)).uitkomst).toBe("klaar");
    // The service on the new host: the anchor file carried over, zegels-sinds not.
    const moved = makeTestEnv();
    try {
      writeFileSync(moved.config.auditAnkerBestand, readFileSync(env!.config.auditAnkerBestand));
      expect(existsSync(pastSealedMarker(moved.config))).toBe(false);
      const store = await openPgStore(url, { seal: rowSealOf(moved.config), pastMarker: pastSealedMarker(moved.config), now: later });
      await store.close();
      const pg = client(url);
      expect(await pg`SELECT bestandsnaam, zegel IS NOT NULL AS sealed FROM backup_statuses WHERE bestandsnaam = 'vals.gz'`).toEqual([{ bestandsnaam: "vals.gz", sealed: false }]);
      // The rows sealed on SQLite still count; the marker is written for the next start.
      expect((await pg`SELECT count(*) AS n FROM backup_statuses WHERE zegel IS NOT NULL`)[0].n).toBe("1");
      expect(existsSync(pastSealedMarker(moved.config))).toBe(true);
      // And backup-controle there says so, as it did on SQLite.
      const onPg = await makePgTestEnv({ createDatabase: async () => url });
      try {
        onPg.setNow(later);
        const r = await call(onPg.app, "/api/cron/backup-controle");
        expect(r.json.vervalst).toBe(1);
        expect(r.status).not.toBe(200);
      } finally {
        await onPg.cleanup();
      }
    } finally {
      moved.cleanup();
    }
  });

  test("refuses a target where another application keeps its tables, before migrating: nothing of nachtwacht's is created there (exit 2)", async () => {
    await livedInstallation();
    const url = await cluster.createDatabase();
    const pg = client(url);
    await pg`CREATE TABLE klanten (id integer PRIMARY KEY, naam text)`;
    await pg`INSERT INTO klanten VALUES (1, 'Jansen'), (2, 'De Vries')`;
    const r = await migrate(url);
    expect(r.uitkomst).toBe("doel-heeft-andere-tabellen");
    if (r.uitkomst === "doel-heeft-andere-tabellen") expect(r.toelichting).toContain("klanten");
    const tables = (await pg`SELECT table_schema || '.' || table_name AS t FROM information_schema.tables WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1`).map((t: { t: string }) => t.t);
    expect(tables).toEqual(["public.klanten"]);
    expect(Number((await pg`SELECT count(*) AS n FROM klanten`)[0].n)).toBe(2);
    // The command: exit 2, the table named.
    const err: string[] = [];
    const code = await runMigrateTo(["--database-url", url, "--db", env!.config.databasePath, "--bestand", env!.config.auditAnkerBestand, "--sleutel", TEST_VERIFIER_KEY], {}, () => {}, (s) => err.push(s));
    expect(code).toBe(2);
    expect(err.join("\n")).toContain("klanten");
  });

  test("an extension's own relations in public (pg_stat_statements) are no other application's tables: the copy goes ahead", async () => {
    await livedInstallation();
    const url = await cluster.createDatabase();
    const pg = client(url);
    await pg`CREATE EXTENSION pg_stat_statements`;
    expect(await foreignTables(url)).toEqual([]);
    expect((await migrate(url)).uitkomst).toBe("klaar");
  });

  test("another application's tables in a schema of its own count too, named with their schema", async () => {
    await livedInstallation();
    const url = await cluster.createDatabase();
    const pg = client(url);
    await pg`CREATE SCHEMA crm`;
    await pg`CREATE TABLE crm.klanten (id integer PRIMARY KEY)`;
    expect(await foreignTables(url)).toEqual(["crm.klanten"]);
    const r = await migrate(url);
    expect(r.uitkomst).toBe("doel-heeft-andere-tabellen");
    expect((await pg`SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = 'public'`)[0].n).toBe(0);
  });

  test("refuses a source that does not verify, and copies nothing", async () => {
    const { b } = await livedInstallation();
    env!.store.sqlite.query("UPDATE audit_entries SET action = 'vervalst' WHERE tenant_id = ? AND seq = 3").run(b);
    await expectSourceRefused("hash-afwijkend");
  });

  test("refuses a source with audit entries of a tenant that is not there (written with foreign keys off), and copies nothing", async () => {
    await livedInstallation();
    // A tenant whose row was deleted by a connection without foreign keys: its chain
    // still verifies (from its entries), but PostgreSQL would take its rows without a word.
    const w = env!.store.sqlite;
    const d = addTenant(env!.store, "Weg");
    for (let i = 0; i < 3; i++) appendAuditEntry(w, { tenantId: d, actor: "u@weg.nl", action: "inlog", subject: "s", details: {}, createdAt: new Date(NOW.getTime() - DAY) });
    w.run("PRAGMA foreign_keys = OFF");
    w.query("DELETE FROM tenants WHERE id = ?").run(d);
    w.run("PRAGMA foreign_keys = ON");
    await expectSourceRefused(`tenant ${d} heeft audit-entries maar staat niet in tenants`);
  });

  test("refuses a source with a NUL in copied text (an audit entry that verifies and is signed, a login attempt, a tenant), naming table, row and column, and copies nothing (exit 1)", async () => {
    const { a, c } = await livedInstallation();
    const w = env!.store.sqlite;
    // The first such row in the tables' order, by its id.
    const { id } = w.query("INSERT INTO login_attempts (tijdstip, account, ip, gelukt, reden, tenant_id) VALUES (?, 'x@alfa.nl', '10.0.0.9', 0, 'ww' || char(0), NULL) RETURNING id").get(NOW.toISOString()) as { id: number };
    await expectSourceRefused(`login_attempts (id ${id}) heeft in kolom reden een NUL-teken`);
    w.query("UPDATE tenants SET naam = 'Leeg' || char(0) WHERE id = ?").run(c);
    await expectSourceRefused(`tenants (id ${c}) heeft in kolom naam een NUL-teken`);
    w.query("UPDATE tenants SET naam = 'Leeg' WHERE id = ?").run(c);
    w.query("DELETE FROM login_attempts WHERE id = ?").run(id);

    // As appendAuditEntry stored it before it refused a NUL: linked and hashed as written,
    // so the chain verifies; an anchor run then signs it (and it can no longer be taken out).
    const head = w.query("SELECT seq, hash FROM audit_entries WHERE tenant_id = ? ORDER BY seq DESC LIMIT 1").get(a) as { seq: number; hash: string };
    const fields = { tenantId: a, seq: head.seq + 1, createdAt: NOW.toISOString(), actor: "a\u0000b", action: "x", subject: "s", details: "{}", prevHash: head.hash };
    w.query("INSERT INTO audit_entries (tenant_id, seq, id, created_at, actor, action, subject, details, prev_hash, hash) VALUES (?, ?, (SELECT max(id) + 1 FROM audit_entries), ?, ?, ?, ?, ?, ?, ?)").run(
      a, fields.seq, fields.createdAt, fields.actor, fields.action, fields.subject, fields.details, fields.prevHash, entryHash(fields),
    );
    expect((await call(env!.app, "/api/cron/audit-anker")).status).toBe(200);
    expect((await compareWithFile(env!.config.databasePath, env!.config.auditAnkerBestand, VERIFIERS)).checkpoints.get(a)?.size).toBe(fields.seq);
    await expectSourceRefused(`audit_entries (tenant_id ${a}, seq ${fields.seq}) heeft in kolom actor een NUL-teken (U+0000), dat PostgreSQL niet kan opslaan; eerst uitzoeken, niets gekopieerd`);
    // The command: exit 1, as for a source that does not verify; no driver error.
    const err: string[] = [];
    const code = await runMigrateTo(["--database-url", await cluster.createDatabase(), "--db", env!.config.databasePath, "--bestand", env!.config.auditAnkerBestand, "--sleutel", TEST_VERIFIER_KEY], {}, () => {}, (s) => err.push(s));
    expect(code).toBe(1);
    expect(err.join("\n")).toContain(`nachtwacht migrate-to: bron-niet-in-orde: audit_entries (tenant_id ${a}, seq ${fields.seq}) heeft in kolom actor een NUL-teken`);
    expect(err.join("\n")).not.toContain("PostgresError");
  });

  test("refuses a source another version left (fewer or more migrations than this one's), saying what to do, and copies nothing", async () => {
    await livedInstallation();
    const w = env!.store.sqlite;
    const rows = w.query("SELECT rowid, * FROM __drizzle_migrations ORDER BY rowid").all() as Record<string, unknown>[];
    const n = rows.length;
    // As an earlier version left it: its last migration not yet applied.
    w.run("DELETE FROM __drizzle_migrations WHERE rowid = (SELECT max(rowid) FROM __drizzle_migrations)");
    await expectSourceRefused(`de database is van een eerdere versie (${n - 1} van ${n} migraties toegepast): start de service eenmaal met deze versie`, "bron-andere-versie");
    // As a later version left it: one more than this version knows.
    const last = rows.at(-1)!;
    w.query("INSERT INTO __drizzle_migrations (hash, created_at) VALUES (?, ?), ('later', 9999999999999)").run(last.hash as string, last.created_at as number);
    await expectSourceRefused(`de database is van een nieuwere versie (${n + 1} migraties, deze versie kent er ${n})`, "bron-andere-versie");
    // Not damage (exit 1, as bron-niet-in-orde reads) but a version to use: exit 2, the version named.
    const err: string[] = [];
    const code = await runMigrateTo(["--database-url", await cluster.createDatabase(), "--db", env!.config.databasePath, "--bestand", env!.config.auditAnkerBestand, "--sleutel", TEST_VERIFIER_KEY], {}, () => {}, (s) => err.push(s));
    expect(code).toBe(2);
    expect(err.join("\n")).toContain(`de database is van een nieuwere versie (${n + 1} migraties`);
  });

  test("a chain adopted from the earlier version (its start an adoption record, not genesis) moves and verifies on PostgreSQL as on SQLite", async () => {
    env = makeTestEnv();
    const a = addTenant(env.store, "Oud");
    for (let i = 0; i < 60; i++) appendAuditEntry(env.store.sqlite, { tenantId: a, actor: `u${i}`, action: "x", subject: "s", details: { i }, createdAt: new Date(NOW.getTime() - (900 - i) * DAY) });
    // What the earlier version left: entries 1–30 deleted with only an unsigned anchor.
    const s = env.store.sqlite;
    const h30 = (s.query("SELECT hash FROM audit_entries WHERE tenant_id = ? AND seq = 30").get(a) as { hash: string }).hash;
    s.query("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= 30").run(a);
    s.query("INSERT INTO audit_retention_anchors (tenant_id, seq, hash, bijgewerkt) VALUES (?, 30, ?, '2025-01-01T02:00:00.000Z')").run(a, h30);
    const adopt = await runAuditCommand(["adopt", "--tenant", String(a), "--db", env.config.databasePath, "--bestand", env.config.auditAnkerBestand, "--ja"], { AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY }, () => {}, () => {});
    expect(adopt).toBe(0);
    expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    const url = await cluster.createDatabase();
    expect((await migrate(url)).uitkomst).toBe("klaar");
    const checkpoint = (await compareWithFile(env.config.databasePath, env.config.auditAnkerBestand, VERIFIERS)).checkpoints.get(a)!;
    const opts = { checkpoint, verifiers: VERIFIERS };
    const pg = client(url);
    const onPg = await verifyTenantChainPg(pg, a, opts);
    expect(onPg).toEqual({ intact: true, aantalEntries: 30 });
    expect(onPg).toEqual(verifyTenantChain(env.store.sqlite, a, opts));
    // Without its adoption record the chain has no start on PostgreSQL either.
    await pg`DELETE FROM audit_anchor_log WHERE tenant_id = ${a} AND soort = 'adoptie'`;
    expect((await verifyTenantChainPg(pg, a, opts)).fout?.reden).toBe("retentie-ontbreekt");
  });
});

class Rollback extends Error {}

describe("COPY text format", () => {
  test("escapes backslash, backspace, form feed, newline, carriage return, tab and vertical tab as PostgreSQL's COPY TO does; \\N for null; booleans t/f", async () => {
    expect(copyText("a\\b\nc\rd\te", false)).toBe("a\\\\b\\nc\\rd\\te");
    // What the server itself writes for every control character, a backslash and DEL: copyText must write the same.
    const every = String.fromCharCode(...Array.from({ length: 31 }, (_, i) => i + 1)) + "\\\x7f";
    const sql = client(await cluster.createDatabase());
    await sql`CREATE TABLE t (v text)`;
    await sql`INSERT INTO t VALUES (${every})`;
    let fromServer = "";
    for await (const rows of copyRows(sql, "SELECT v FROM t")) fromServer += rows[0]![0];
    expect(fromServer).toContain("\\v");
    expect(copyText(every, false)).toBe(fromServer);
    expect(copyText(null, false)).toBe("\\N");
    expect(copyText(1, true)).toBe("t");
    expect(copyText(0, true)).toBe("f");
    expect(copyText(42, false)).toBe("42");
    expect(copyText("é😀", false)).toBe("é😀");
  });
});

describe("nachtwacht migrate-to (the compiled binary)", () => {
  /** The binary with no secret in its environment: only PATH, HOME and what is given. */
  /** The binary as a process in the test's directory, with no secret in its environment. */
  async function spawnBinary(args: string[], stdin?: string) {
    const { path } = await buildBinary();
    return Bun.spawn([path, ...args], {
      cwd: env!.dir,
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: env!.dir },
      stdin: stdin === undefined ? "ignore" : new Blob([stdin]),
      stdout: "pipe",
      stderr: "pipe",
    });
  }
  async function binary(args: string[], stdin?: string) {
    const p = await spawnBinary(args, stdin);
    const [code, out, err] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
    return { code, out, err };
  }
  const run = (args: string[], o: { stdin?: string } = {}) => binary(["migrate-to", ...args], o.stdin);
  const files = () => ["--db", env!.config.databasePath, "--bestand", env!.config.auditAnkerBestand, "--sleutel", TEST_VERIFIER_KEY];

  test("copies with the URL on standard input (exit 0), refuses a second run into the same database (exit 2)", async () => {
    await livedInstallation();
    const url = await cluster.createDatabase();
    const ok = await run(["--database-url", "-", ...files()], { stdin: `${url}\n` });
    expect([ok.code, ok.err]).toEqual([0, ""]);
    expect(ok.out).toContain("KLAAR:");
    expect(ok.out).toContain(`${count("audit_entries")} entries`);
    const again = await run(["--database-url", "-", ...files()], { stdin: url });
    expect(again.code).toBe(2);
    expect(again.err).toContain("bevat al een bewezen kopie");
  });

  test("SIGKILL during the copy leaves nothing, during the proof an unproved copy a rerun names; neither is ever taken for a proved one", async () => {
    // A source big enough that the copy and the proof take a while: the kill lands on the
    // line the command prints as each phase starts (no timing involved).
    env = makeTestEnv();
    fillDemoData(env.store.sqlite, { tenants: 20, admins: 20, audit: 120_000, logins: 1_000, backups: 3 }, NOW);
    const killAt = async (url: string, marker: string) => {
      const p = await spawnBinary(["migrate-to", "--database-url", "-", ...files()], url);
      const reader = p.stdout.getReader();
      let seen = "";
      while (!seen.includes(marker)) {
        const r = await reader.read();
        if (r.done) break;
        seen += new TextDecoder().decode(r.value);
      }
      p.kill("SIGKILL");
      await p.exited;
      return seen.includes(marker);
    };
    const rows = async (url: string) => Number((await client(url)`SELECT count(*) AS n FROM audit_entries`)[0].n);
    const proved = async (url: string) => (await client(url)`SELECT 1 FROM service_meta WHERE key = ${PROVED_KEY}`).length > 0;

    // During the copy: one transaction, so all of it or nothing (the kill lands long
    // before the commit, so nothing), and never proved; a rerun then completes.
    const a = await cluster.createDatabase();
    expect(await killAt(a, "kopiëren naar")).toBe(true);
    expect(await proved(a)).toBe(false);
    const left = await rows(a);
    expect([0, 120_000]).toContain(left);
    if (left === 0) {
      const done = await run(["--database-url", "-", ...files()], { stdin: a });
      expect([done.code, done.err]).toEqual([0, ""]);
      expect(await rows(a)).toBe(120_000);
      expect(await proved(a)).toBe(true);
    }

    // During the proof: the copy is committed but not proved; a rerun says so and asks for a new database.
    const b = await cluster.createDatabase();
    expect(await killAt(b, "kopie controleren")).toBe(true);
    expect(await rows(b)).toBe(120_000);
    const wasProved = await proved(b);
    const again = await run(["--database-url", "-", ...files()], { stdin: b });
    expect(again.code).toBe(2);
    expect(again.err).toContain(wasProved ? "bevat al een bewezen kopie" : "zonder bewezen kopie");
  });

  test("nachtwacht verify --database-url: the moved installation against its anchor file, with the public key alone; a changed entry, a forged row and a cut file are each found", async () => {
    const { b } = await livedInstallation();
    const url = await cluster.createDatabase();
    expect((await migrate(url)).uitkomst).toBe("klaar");
    const verify = () => binary(["verify", "--database-url", "-", "--bestand", env!.config.auditAnkerBestand, "--sleutel", TEST_VERIFIER_KEY], url);
    const ok = await verify();
    expect([ok.code, ok.err]).toEqual([0, ""]);
    expect(ok.out).toContain("RESULTAAT: de database klopt met het ankerbestand.");
    expect(ok.out).toContain(`tenant ${b}: in orde (25 entries)`);

    const pg = client(url);
    await pg`UPDATE audit_entries SET actor = 'x' WHERE tenant_id = ${b} AND seq = 4`;
    const changed = await verify();
    expect(changed.code).toBe(1);
    expect(changed.out).toContain(`tenant ${b}: GEBROKEN bij seq 4: hash-afwijkend`);
    await pg`UPDATE audit_entries SET actor = 'u3@beta.nl' WHERE tenant_id = ${b} AND seq = 4`;
    expect((await verify()).code).toBe(0);

    // A database writer rewrites a checkpoint row (its own note): not in the file.
    const [row] = await pg`SELECT positie, note FROM audit_anchor_log WHERE tenant_id = ${b} AND soort = 'checkpoint' ORDER BY positie DESC LIMIT 1`;
    await pg`UPDATE audit_anchor_log SET note = ${row.note.replace("\n\n", "\n\nx")} WHERE positie = ${row.positie}`;
    const forged = await verify();
    expect(forged.code).toBe(1);
    expect(forged.out).toContain("checkpoint-niet-in-bestand");
    await pg`UPDATE audit_anchor_log SET note = ${row.note} WHERE positie = ${row.positie}`;

    // The anchor file cut short: the database refers past its end.
    const text = readFileSync(env!.config.auditAnkerBestand, "utf8");
    writeFileSync(env!.config.auditAnkerBestand, text.slice(0, text.lastIndexOf("\n", text.length - 2) + 1));
    const cut = await verify();
    expect(cut.code).toBe(1);
    expect(cut.out).toContain("bestand-ingekort");
  });

  test("nachtwacht verify --database-url --checkpoint: the e-mailed installation checkpoint holds for the moved installation; after the file and the database are both cut back, it does not", async () => {
    await livedInstallation();
    const url = await cluster.createDatabase();
    expect((await migrate(url)).uitkomst).toBe("klaar");
    const note = anchorRecords(env!.store.sqlite, env!.config).installatie.checkpoint!;
    const cpFile = join(env!.dir, "checkpoint.txt");
    writeFileSync(cpFile, `\n  ${note}\n`); // as pasted from an e-mail
    const witness = () => binary(["verify", "--database-url", "-", "--checkpoint", cpFile, "--bestand", env!.config.auditAnkerBestand, "--sleutel", TEST_VERIFIER_KEY], url);
    const ok = await witness();
    expect([ok.code, ok.err]).toEqual([0, ""]);
    expect(ok.out).toContain("RESULTAAT: database en ankerbestand bevatten de ondertekende toestand van het checkpoint.");

    // Root rewrites both: the file cut back to its first run, the database's copy of it too.
    const text = readFileSync(env!.config.auditAnkerBestand, "utf8");
    const firstRunEnd = text.indexOf("\n", text.indexOf('"soort":"installatie"')) + 1;
    writeFileSync(env!.config.auditAnkerBestand, text.slice(0, firstRunEnd));
    await client(url)`DELETE FROM audit_anchor_log WHERE positie >= ${firstRunEnd}`;
    const cut = await witness();
    expect(cut.code).toBe(1);
    expect(cut.out).toContain("het bestand is ingekort of teruggezet");
  });

  test("nachtwacht backup --database-url: pg_dump, checked, the anchor file beside it; restored into a new database the installation verifies; an unknown database is exit 66", async () => {
    await livedInstallation();
    const url = await cluster.createDatabase();
    expect((await migrate(url)).uitkomst).toBe("klaar");
    const dir = join(env!.dir, "backups");
    const backup = (target: string) => binary(["backup", "--database-url", "-", "--map", dir, "--ankers", env!.config.auditAnkerBestand, "--geen-melding"], target);
    const ok = await backup(url);
    expect([ok.code, ok.err]).toEqual([0, ""]);
    const files = readdirSync(dir).sort();
    expect(files).toHaveLength(2);
    expect(files[0]).toMatch(/^audit-ankers-\d{8}T\d{6}Z\.jsonl\.gz$/);
    expect(files[1]).toMatch(/^nachtwacht-\d{8}T\d{6}Z\.pgdump$/);

    // The dump restores into an empty database, and that database verifies against the anchor file.
    const restored = await cluster.createDatabase();
    const r = Bun.spawnSync(["pg_restore", "--no-owner", "--exit-on-error", "--dbname", libpqEnv(restored).PGDATABASE!, join(dir, files[1]!)], { env: { PATH: process.env.PATH ?? "/usr/bin:/bin", ...libpqEnv(restored) }, stderr: "pipe" });
    expect([r.exitCode, r.stderr.toString()]).toEqual([0, ""]);
    const v = await verifyInstallationPg(restored, env!.config.auditAnkerBestand, VERIFIERS, { workers: 0 });
    expect(v.probleem).toBeUndefined();
    expect(v.tenants.every((t) => t.intact)).toBe(true);
    expect(v.tenants.reduce((n, t) => n + t.aantalEntries, 0)).toBe(count("audit_entries"));

    // The anchor file not where it was said to be, while the database has anchors: 66, named.
    const absent = join(env!.dir, "elders.jsonl");
    const noAnchors = await binary(["backup", "--database-url", "-", "--map", dir, "--ankers", absent, "--geen-melding"], url);
    expect(noAnchors.code).toBe(66);
    expect(noAnchors.err).toContain(`het ankerbestand ${absent} ontbreekt`);

    const missing = await backup(url.replace(/\/[^/]+$/, "/bestaat_niet"));
    expect(missing.code).toBe(66);
    expect(missing.err).toContain("pg_dump");
    expect(readdirSync(dir).filter((f) => f.startsWith("."))).toEqual([]);
  });

  test("dumpHasRows reads a table's first row from a dump and stops there: rows, none, no such table, not a dump", async () => {
    const url = await cluster.createDatabase();
    const pg = client(url);
    await pg`CREATE TABLE vol (x text)`;
    await pg`INSERT INTO vol SELECT repeat('r', 500) || i FROM generate_series(1, 20000) AS i`;
    await pg`CREATE TABLE leeg (x text)`;
    env = makeTestEnv();
    const file = join(env.dir, "d.pgdump");
    const dump = Bun.spawnSync(["pg_dump", "--format=custom", `--file=${file}`], { env: { PATH: process.env.PATH ?? "/usr/bin:/bin", ...libpqEnv(url) }, stderr: "pipe" });
    expect([dump.exitCode, dump.stderr.toString()]).toEqual([0, ""]);
    expect(await dumpHasRows(file, "vol")).toBe(true);
    expect(await dumpHasRows(file, "leeg")).toBe(false);
    expect(await dumpHasRows(file, "bestaat_niet")).toBe(false);
    // A table of the same name in another schema, empty and sorted first, is not nachtwacht's.
    await pg`CREATE SCHEMA archief`;
    await pg`CREATE TABLE archief.vol (x text)`;
    const again = Bun.spawnSync(["pg_dump", "--format=custom", `--file=${file}`], { env: { PATH: process.env.PATH ?? "/usr/bin:/bin", ...libpqEnv(url) }, stderr: "pipe" });
    expect(again.exitCode).toBe(0);
    expect(await dumpHasRows(file, "vol")).toBe(true);
    const garbage = join(env.dir, "geen.pgdump");
    writeFileSync(garbage, "geen dump");
    await expect(dumpHasRows(garbage, "vol")).rejects.toThrow("pg_restore");
  });

  test("libpqEnv: the URL's parts go to pg_dump's environment, the password too, so nothing secret is on its command line", () => {
    expect(libpqEnv("postgres://nw:ge%40heim@db.example:5433/nacht%20wacht?sslmode=require")).toEqual({
      PGHOST: "db.example",
      PGPORT: "5433",
      PGUSER: "nw",
      PGPASSWORD: "ge@heim",
      PGDATABASE: "nacht wacht",
      PGSSLMODE: "require",
    });
    expect(libpqEnv("postgres://nw@[::1]/x?password=p").PGPASSWORD).toBe("p");
    // sslpassword is not the password (libpq has no variable for it): refused, naming it, never its value.
    expect(libpqEnv("postgres://nw:pw@h/x?sslmode=verify-full&sslrootcert=/etc/ca.pem")).toMatchObject({ PGPASSWORD: "pw", PGSSLMODE: "verify-full", PGSSLROOTCERT: "/etc/ca.pem" });
    expect(() => libpqEnv("postgres://nw:pw@h/x?sslpassword=keypass")).toThrow(/de parameter "sslpassword" kan niet/);
    expect(() => libpqEnv("postgres://nw:pw@h/x?sslpassword=keypass")).not.toThrow(/keypass/);
    expect(libpqEnv("postgres://h/x?service=nachtwacht&require_auth=scram-sha-256&sslnegotiation=direct")).toMatchObject({ PGSERVICE: "nachtwacht", PGREQUIREAUTH: "scram-sha-256", PGSSLNEGOTIATION: "direct" });
  });

  test("nachtwacht export --database-url writes the same bundle, byte for byte, as export from the SQLite original; verify --bundel accepts it", async () => {
    const { a } = await livedInstallation();
    const url = await cluster.createDatabase();
    expect((await migrate(url)).uitkomst).toBe("klaar");
    const keys = ["--bestand", env!.config.auditAnkerBestand, "--sleutel", TEST_VERIFIER_KEY];
    // Tenant a's chain starts at a signed retention record (seq 11), so no inclusion proof: a bundle of the rest.
    const fromPg = await binary(["export", "--tenant", String(a), "--database-url", "-", ...keys], url);
    const fromSqlite = await binary(["export", "--tenant", String(a), "--db", env!.config.databasePath, ...keys]);
    expect([fromPg.code, fromSqlite.code]).toEqual([0, 0]);
    expect(fromPg.out).toBe(fromSqlite.out);
    expect(fromPg.out.trimEnd().split("\n").length).toBe(1 + 35);
    const bundle = join(env!.dir, "bundel.jsonl");
    writeFileSync(bundle, fromPg.out + "\n");
    const checked = await binary(["verify", "--bundel", bundle, "--sleutel", TEST_VERIFIER_KEY]);
    expect(checked.code).toBe(0);
    expect(checked.out).toContain("RESULTAAT: de bundel van tenant");
  });

  test("a password on the command line is refused before anything connects, and never echoed", async () => {
    await livedInstallation();
    const r = await run(["--database-url", `postgres://nw:geheim-wachtwoord@127.0.0.1:${cluster.port}/postgres`, ...files()]);
    expect(r.code).toBe(2);
    expect(r.err).toContain("standaardinvoer");
    expect(r.out + r.err).not.toContain("geheim-wachtwoord");
  });

  test("a source that does not verify: exit 1, naming the reden", async () => {
    const { a } = await livedInstallation();
    env!.store.sqlite.query("DELETE FROM audit_entries WHERE tenant_id = ? AND seq = 30").run(a);
    const url = await cluster.createDatabase();
    const r = await run(["--database-url", "-", ...files()], { stdin: url });
    expect(r.code).toBe(1);
    expect(r.err).toContain("bron-niet-in-orde");
    expect(r.err).toContain("volgnummer-gat");
  });
});
