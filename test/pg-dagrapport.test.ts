// dagrapport on PostgreSQL (src/pg/daily.ts) against a real server (test/pg.ts): one
// scenario built on SQLite and copied row for row into PostgreSQL gives the same answer
// and the same mail through the job route on both, except the database section. That
// one differs by design: SQLite counts pages plus its -wal file, PostgreSQL reports
// pg_database_size and walBytes 0 (the server's WAL belongs to no single database); it
// is tested on its own here.
import { afterEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { copyFileSync, existsSync } from "node:fs";
import * as sqliteSchema from "../db/schema.ts";
import * as pgSchema from "../db/schema-pg.ts";
import { appendAuditEntry, recordLoginAttempt } from "../src/audit/chain.ts";
import { runAuditCommand } from "../src/cli/audit.ts";
import { formatSize, getal } from "../src/format.ts";
import { runDagrapport } from "../src/jobs/dagrapport.ts";
import type { MailMessage } from "../src/mail/mailer.ts";
import { operatorRecordsPg } from "../src/pg/daily.ts";
import type { DailyReport } from "../src/reports/daily.ts";
import { backupReportRow, stateZegel, addTenant, call, makePgTestEnv, makeTestEnv, NOW, TEST_SEAL, TEST_SIGNING_KEY, backupZegel, eindzegel, zegel, type PgTestEnv, type TestEnv } from "./helpers.ts";
import { useTestCluster } from "./pg.ts";

setDefaultTimeout(120_000);

const HOUR = 3600 * 1000;
const DAY = 24 * HOUR;
const MAIL = { DAGRAPPORT_EMAIL: "ops@example.test" };

const cluster = useTestCluster();

const toClean: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const f of toClean.splice(0).reverse()) await f();
});

function sqliteEnv(env: Record<string, string> = MAIL): TestEnv {
  const e = makeTestEnv(env);
  toClean.push(() => e.cleanup());
  return e;
}

/**
 * A PostgreSQL environment on a database with a linguistic collation (ICU nl-NL), where
 * text order is not byte order unless a query says so: SQLite's order is byte order.
 */
async function pgEnv(env: Record<string, string> = MAIL): Promise<PgTestEnv> {
  const e = await makePgTestEnv({ createDatabase: () => cluster.createDatabase(undefined, { icuLocale: "nl-NL" }) }, env);
  toClean.push(() => e.cleanup());
  return e;
}

/** The tables the daily report reads, parents first (foreign keys). */
const COPIED = ["tenants", "auditAnchorLog", "loginAttempts", "backupStatuses", "jobRuns", "auditVerificationState"] as const;

/**
 * Copies what the report reads from SQLite into PostgreSQL, row for row through both
 * schemas' Drizzle tables, and the install time; sequences continue after the copied
 * ids, so the job route's own run gets a fresh one.
 */
async function copyToPg(from: TestEnv, to: PgTestEnv): Promise<void> {
  for (const name of COPIED) {
    const rows = from.store.db.select().from(sqliteSchema[name] as typeof sqliteSchema.tenants).all();
    if (rows.length > 0) await to.store.db.insert(pgSchema[name] as typeof pgSchema.tenants).values(rows);
  }
  for (const row of from.store.db.select().from(sqliteSchema.serviceMeta).all()) {
    await to.store.db.insert(pgSchema.serviceMeta).values(row).onConflictDoUpdate({ target: pgSchema.serviceMeta.key, set: { value: row.value, zegel: row.zegel } });
  }
  await to.store.sql`SELECT setval(pg_get_serial_sequence('job_runs', 'id'), (SELECT max(id) FROM job_runs)) WHERE EXISTS (SELECT 1 FROM job_runs)`;
  // The anchor file with its copy: the mailed checkpoint is read from the file (installationWitness).
  if (existsSync(from.config.auditAnkerBestand)) copyFileSync(from.config.auditAnkerBestand, to.config.auditAnkerBestand);
}

/** A report as backup-status stores it: sealed (src/row-seal.ts). */
function addBackup(env: TestEnv, b: { ontvangen: Date; exitCode: number; grootte?: number | null; bestandsnaam?: string; foutmelding?: string }) {
  const row = backupReportRow(b);
  env.store.sqlite
    .query("INSERT INTO backup_statuses (ontvangen, exit_code, gelukt, bestandsnaam, grootte, foutmelding, bron, zegel) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
    .run(row.ontvangen, row.exitCode, row.gelukt ? 1 : 0, row.bestandsnaam, row.grootte, row.foutmelding, row.bron, backupZegel(row));
}

function addRun(env: TestEnv, job: string, gestart: string, ms: number | null, uitkomst = "ok") {
  const beeindigd = ms === null ? null : new Date(Date.parse(gestart) + ms).toISOString();
  env.store.sqlite
    .query("INSERT INTO job_runs (job, gestart, beeindigd, uitkomst, http_status, zegel, eindzegel) VALUES (?, ?, ?, ?, 200, ?, ?)")
    .run(job, gestart, beeindigd, uitkomst, zegel(job, gestart), eindzegel({ job, gestart, beeindigd, uitkomst, httpStatus: 200 }));
}

/**
 * An installation that has lived: a failed newest backup after a good one, login
 * attempts in and out of the window (two failing IPs tied, whose byte order and nl-NL
 * order differ), an intact, a broken and an unchecked chain, a chain the operator
 * adopted beside a forged adoption, signed installation checkpoints, and job runs: some
 * failed, one still going, one overdue, durations for the usual one.
 */
async function livedInstallation(env: TestEnv): Promise<void> {
  const s = env.store.sqlite;
  addBackup(env, { ontvangen: new Date(NOW.getTime() - 30 * HOUR), exitCode: 0, grootte: Math.round(23.4 * 1024 * 1024), bestandsnaam: "nachtwacht.db.zst" });
  addBackup(env, { ontvangen: new Date(NOW.getTime() - 3 * HOUR), exitCode: 3, grootte: 1023, foutmelding: "schijf vol" });

  const at = (h: number) => new Date(NOW.getTime() - h * HOUR);
  for (let i = 0; i < 4; i++) recordLoginAttempt(s, { account: "a", ip: "10.0.0.1", gelukt: true, tijdstip: at(i + 1) });
  for (let i = 0; i < 3; i++) recordLoginAttempt(s, { account: "b", ip: "203.0.113.9", gelukt: false, tijdstip: at(i + 1) });
  for (let i = 0; i < 2; i++) recordLoginAttempt(s, { account: "c", ip: "::1", gelukt: false, tijdstip: at(i + 2) });
  for (let i = 0; i < 2; i++) recordLoginAttempt(s, { account: "c", ip: "10.0.0.2", gelukt: false, tijdstip: at(i + 3) });
  recordLoginAttempt(s, { account: "d", ip: "198.51.100.7", gelukt: false, tijdstip: at(23) });
  recordLoginAttempt(s, { account: "d", ip: "198.51.100.8", gelukt: false, tijdstip: at(25) }); // outside the 24 h
  recordLoginAttempt(s, { account: "d", ip: "198.51.100.9", gelukt: false, tijdstip: NOW }); // the window's end is exclusive

  const alfa = addTenant(env.store, "Alfa BV");
  const beta = addTenant(env.store, "Beta BV");
  addTenant(env.store, "Nieuw BV");
  const q = s.query("INSERT INTO audit_verification_state (tenant_id, gecontroleerd, intact, aantal_entries, fout_seq, fout_entry_id, fout_reden, zegel) VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
  const alfaState = { tenantId: alfa, gecontroleerd: "2026-07-23T01:00:03.000Z", intact: true, aantalEntries: 10 };
  const betaState = { tenantId: beta, gecontroleerd: "2026-07-23T01:00:04.000Z", intact: false, aantalEntries: 10, foutSeq: 7, foutEntryId: 77, foutReden: "volgnummer-gat" };
  q.run(alfa, alfaState.gecontroleerd, 1, 10, null, null, null, stateZegel(alfaState));
  q.run(beta, betaState.gecontroleerd, 0, 10, 7, 77, "volgnummer-gat", stateZegel(betaState));

  // A chain of an earlier version that deleted 1–25 under an unsigned anchor, adopted by the operator.
  const oud = addTenant(env.store, "Oud BV");
  for (let i = 0; i < 40; i++) appendAuditEntry(s, { tenantId: oud, actor: `u${i}`, action: "x", subject: "s", details: { i }, createdAt: new Date(NOW.getTime() - (900 - i) * DAY) });
  const h25 = (s.query("SELECT hash FROM audit_entries WHERE tenant_id = ? AND seq = 25").get(oud) as { hash: string }).hash;
  s.query("DELETE FROM audit_entries WHERE tenant_id = ? AND seq <= 25").run(oud);
  s.query("INSERT INTO audit_retention_anchors (tenant_id, seq, hash, bijgewerkt) VALUES (?, 25, ?, '2025-01-01T02:00:00.000Z')").run(oud, h25);
  const args = ["adopt", "--tenant", String(oud), "--db", env.config.databasePath, "--bestand", env.config.auditAnkerBestand, "--ja"];
  expect(await runAuditCommand(args, { AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY }, () => {}, () => {})).toBe(0);
  for (let i = 0; i < 3; i++) appendAuditEntry(s, { tenantId: alfa, actor: "anna@example.nl", action: "dossier.gewijzigd", subject: `dossier/${i}`, details: { i }, createdAt: new Date(NOW.getTime() - 2 * HOUR) });
  env.setNow(new Date(NOW.getTime() - 10 * HOUR));
  expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
  appendAuditEntry(s, { tenantId: alfa, actor: "anna@example.nl", action: "dossier.gewijzigd", subject: "dossier/9", details: {}, createdAt: new Date(NOW.getTime() - HOUR) });
  env.setNow(new Date(NOW.getTime() - 5 * HOUR));
  expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
  env.setNow(NOW);
  // A second adoption row signed by someone else: named by neither store.
  const adoption = s.query("SELECT positie, tenant_id AS tenantId, grootte, note FROM audit_anchor_log WHERE soort = 'adoptie'").get() as { positie: number; tenantId: number; grootte: number; note: string };
  s.query("INSERT INTO audit_anchor_log (positie, soort, tenant_id, grootte, note) VALUES (?, 'adoptie', ?, ?, ?)").run(
    adoption.positie + 1000,
    beta,
    adoption.grootte,
    adoption.note.replace(/\n\u2014 .*\n$/, "\n\u2014 iemand AAAAAAAA\n"),
  );

  // Durations: audit-verificatie's last ten of twelve successful nights, then a failure.
  const nights = [600_000, 500_000, 12_000, 14_000, 13_000, 15_000, 11_000, 16_000, 13_500, 12_500, 14_500, 13_800];
  nights.forEach((ms, i) => addRun(env, "audit-verificatie", new Date(Date.parse("2026-07-11T01:00:00.000Z") + i * DAY).toISOString(), ms));
  addRun(env, "audit-verificatie", "2026-07-23T01:00:00.000Z", 95_000, "fout");
  [200, 180, 260, 190].forEach((ms, i) => addRun(env, "dagrapport", `2026-07-${String(18 + i).padStart(2, "0")}T06:00:00.000Z`, ms));
  addRun(env, "dagrapport", "2026-07-22T06:00:00.000Z", 3_725_000, "afwijking");
  addRun(env, "taken-controle", "2026-07-23T11:45:00.000Z", null, "bezig");
  // backup-controle (:15) last ran 10:15: overdue at 12:00 with 30 minutes of grace.
  addRun(env, "backup-controle", "2026-07-23T10:15:01.000Z", 1000);
  addRun(env, "beveiligingslog-analyse", "2026-07-23T11:30:00.000Z", 1000, "fout");
  // A run started after the report's `now` is no last run, but does count as started.
  addRun(env, "weekrapport", new Date(NOW.getTime() + 60_000).toISOString(), 1000);
}

/** `mail` with the database section's figures of `from` replaced by those of `to`; each must occur exactly once. */
function withDatabase(mail: string, from: DailyReport["database"], to: DailyReport["database"]): string {
  const swap = (text: string, a: string, b: string) => {
    expect(text.split(a).length - 1).toBe(1);
    return text.replace(a, b);
  };
  const size = swap(mail, `${from.grootte} (${getal(from.bytes)} bytes)`, `${to.grootte} (${getal(to.bytes)} bytes)`);
  return swap(size, `${getal(from.walBytes)} bytes`, `${getal(to.walBytes)} bytes`);
}

/**
 * `mail` without its disk section (from its heading to the line after it), which must be
 * there, with each of `disks`' free space in it. The free space changes between two
 * reports, and on PostgreSQL the database is not on this host.
 */
function withoutDisks(mail: string, disks: DailyReport["schijf"]): string {
  // The text part writes headings in capitals.
  const from = mail.toLowerCase().indexOf("schijfruimte");
  const to = mail.indexOf("Gemaakt op", from);
  expect(from).toBeGreaterThan(0);
  expect(to).toBeGreaterThan(from);
  for (const fs of disks) expect(mail.slice(from, to)).toContain(`${fs.vrij} (${fs.vrijProcent} %)`);
  return mail.slice(0, from) + mail.slice(to);
}

/** Runs dagrapport through the job route on both stores; the answers and mails, checked equal but for the database and disk sections. */
async function sameOnBoth(sq: TestEnv, pg: PgTestEnv) {
  await copyToPg(sq, pg);
  const a = await call(sq.app, "/api/cron/dagrapport");
  const b = await call(pg.app, "/api/cron/dagrapport");
  expect(b.status).toBe(a.status);
  const { database: dbA, schijf: diskA, ...restA } = a.json;
  const { database: dbB, schijf: diskB, ...restB } = b.json;
  expect(restB).toEqual(restA);
  // The database is on this host's disk only on SQLite.
  expect(diskA.flatMap((fs: DailyReport["schijf"][number]) => fs.bestanden)).toContain("database");
  expect(diskB.flatMap((fs: DailyReport["schijf"][number]) => fs.bestanden)).not.toContain("database");
  expect(sq.mailer.sent).toHaveLength(1);
  expect(pg.mailer.sent).toHaveLength(1);
  const [ma, mb] = [sq.mailer.sent[0]!, pg.mailer.sent[0]!] as [MailMessage, MailMessage];
  expect(mb.to).toBe(ma.to);
  expect(mb.subject).toBe(ma.subject);
  expect(withoutDisks(mb.text, diskB)).toBe(withoutDisks(withDatabase(ma.text, dbA, dbB), diskA));
  expect(withoutDisks(mb.html, diskB)).toBe(withoutDisks(withDatabase(ma.html, dbA, dbB), diskA));
  return { sqlite: a.json, pg: b.json };
}

describe("dagrapport on PostgreSQL: the same report as on SQLite", () => {
  test("a lived installation: the same answer through the job route and the same mail on both, but for the database size", async () => {
    const sq = sqliteEnv();
    const pg = await pgEnv();
    await livedInstallation(sq);
    const { pg: body } = await sameOnBoth(sq, pg);

    // Not an empty agreement: every section has something in it.
    expect(body).toMatchObject({ ok: true, verzonden: true, ontvanger: "ops@example.test" });
    expect(body.status.niveau).toBe("actie");
    expect(body.backup).toEqual({ resultaat: "FOUT", gelukt: false, datum: "23/07/2026 11:00", grootte: "1023 B", bron: "host-cron" });
    expect(body.inlogpogingen).toMatchObject({ totaal: 12, gelukt: 4, mislukt: 8, mislukteIps: 4 });
    // Ties in byte order, as SQLite orders them ('1' before ':'); nl-NL would put "::1" first.
    expect(body.inlogpogingen.topMislukteIps).toEqual([
      { ip: "203.0.113.9", aantal: 3 },
      { ip: "10.0.0.2", aantal: 2 },
      { ip: "::1", aantal: 2 },
      { ip: "198.51.100.7", aantal: 1 },
    ]);
    const [{ first }] = await pg.store.sql`SELECT ip AS first FROM login_attempts WHERE ip IN ('10.0.0.2', '::1') ORDER BY ip LIMIT 1`;
    expect(first).toBe("::1");
    expect(body.verificatie).toMatchObject({ gecontroleerd: 2, nietGecontroleerd: 2, aantalGebroken: 1, tijdstip: "23/07/2026 03:00" });
    expect(body.verificatie.gebroken.map((g: { tenant: string }) => g.tenant)).toEqual(["Beta BV"]);
    expect(body.anker.installatieCheckpoint).toStartWith("nachtwacht.test/sleutel/installatie\n");
    expect(body.anker.checkpointProbleem).toBeNull();
    expect(body.anker.waarschuwingen).toHaveLength(1);
    expect(body.anker.waarschuwingen[0]).toContain("geadopteerd vanaf seq 26");
    const byJob = Object.fromEntries(body.taken.map((t: { job: string }) => [t.job, t]));
    expect(byJob["audit-verificatie"]).toMatchObject({ uitkomst: "fout", laatsteDuurMs: 95_000, gebruikelijkeDuurMs: 13_650, gebruikelijkOver: 10 });
    expect(byJob["dagrapport"]).toMatchObject({ uitkomst: "afwijking", gebruikelijkeDuurMs: 195, gebruikelijkOver: 4 });
    expect(byJob["taken-controle"]).toMatchObject({ uitkomst: "bezig", laatsteDuurMs: null, achterstallig: false });
    expect(byJob["backup-controle"]).toMatchObject({ laatstVerwacht: "23/07/2026 13:15", achterstallig: true });
    expect(byJob["weekrapport"]).toMatchObject({ uitkomst: "nooit", laatsteStart: "-" });
    expect(body.status.punten).toContain("De laatste run van beveiligingslog-analyse (23/07/2026 13:30) is mislukt.");

    // The job route recorded its own run on PostgreSQL.
    const runs = await pg.store.sql`SELECT uitkomst, http_status FROM job_runs WHERE job = 'dagrapport' AND gestart = ${NOW.toISOString()}`;
    expect(runs).toEqual([{ uitkomst: "ok", http_status: 200 }]);
  });

  test("a new installation with nothing in it yet: the same report on both (no backup, no verification, no checkpoint)", async () => {
    const sq = sqliteEnv();
    const pg = await pgEnv();
    const { pg: body } = await sameOnBoth(sq, pg);
    expect(body.backup).toEqual({ resultaat: "FOUT", gelukt: false, datum: "-", grootte: "-", bron: "-" });
    expect(body.inlogpogingen).toMatchObject({ totaal: 0, gelukt: 0, mislukt: 0, mislukteIps: 0, topMislukteIps: [] });
    expect(body.verificatie).toEqual({ tijdstip: "-", gecontroleerd: 0, nietGecontroleerd: 0, aantalGebroken: 0, gebroken: [] });
    expect(body.anker).toMatchObject({ installatieCheckpoint: null, waarschuwingen: [] });
  });

  test("installed five minutes ago: no job is overdue on either store", async () => {
    const sq = sqliteEnv();
    const pg = await pgEnv();
    const installed = new Date(NOW.getTime() - 5 * 60_000).toISOString();
    sq.store.sqlite.query("UPDATE service_meta SET value = ?, zegel = ? WHERE key = 'geinstalleerd'").run(installed, TEST_SEAL.sealInstalled(installed));
    const { pg: body } = await sameOnBoth(sq, pg);
    expect(body.taken.filter((t: { achterstallig: boolean }) => t.achterstallig)).toEqual([]);
  });

  test("a refused send on PostgreSQL: 502 with the report, a mail-failure alarm, and the run recorded as failed", async () => {
    const pg = await pgEnv();
    pg.mailer.refuse.add("ops@example.test");
    const res = await call(pg.app, "/api/cron/dagrapport");
    expect(res.status).toBe(502);
    expect(res.json).toMatchObject({ ok: false, verzonden: false, ontvanger: "ops@example.test" });
    expect(res.json.taken).toHaveLength(10);
    expect(pg.alarms.raised.map((a) => a.type)).toEqual(["mail-failure"]);
    const runs = await pg.store.sql`SELECT uitkomst, http_status FROM job_runs WHERE job = 'dagrapport'`;
    expect(runs).toEqual([{ uitkomst: "fout", http_status: 502 }]);
  });
});

describe("dagrapport on PostgreSQL: what differs", () => {
  test("the database size is this database's pg_database_size, and walBytes 0: the server's WAL is no one database's", async () => {
    const pg = await pgEnv({});
    const size = async () => Number((await pg.store.sql`SELECT pg_database_size(current_database())::float8 AS n`)[0].n);
    const before = await size();
    const first = (await runDagrapport(pg.deps, NOW)).body.database;
    const after = await size();
    // Bracketed: nothing here deletes, so the files only grow (autovacuum may add a map fork).
    expect(first.bytes).toBeGreaterThanOrEqual(before);
    expect(first.bytes).toBeLessThanOrEqual(after);
    expect(first.walBytes).toBe(0);
    expect(first.grootte).toBe(formatSize(first.bytes));
    // It is this database's size, not a constant: 50,000 login attempts make it larger.
    await pg.store.sql`INSERT INTO login_attempts (tijdstip, account, ip, gelukt) SELECT ${NOW.toISOString()}, 'x' || i, '10.0.0.' || (i % 250), i % 2 = 0 FROM generate_series(1, 50000) AS i`;
    const second = (await runDagrapport(pg.deps, NOW)).body.database;
    expect(second.bytes).toBeGreaterThan(first.bytes + 1024 * 1024);
  });

  test("the operator's records can be read through their partial index on PostgreSQL too", async () => {
    const pg = await pgEnv({});
    const { sql: text, params } = operatorRecordsPg(pg.store.db).toSQL();
    expect(params).toEqual([]);
    // Sequential scans off: the plan then shows whether the partial index's predicate is provable from the query.
    const plan = await pg.store.sql.begin(async (tx) => {
      await tx`SET LOCAL enable_seqscan = off`;
      return ((await tx.unsafe(`EXPLAIN ${text}`)) as { "QUERY PLAN": string }[]).map((r) => r["QUERY PLAN"]).join("\n");
    });
    expect(plan).toContain("audit_anchor_log_operator_idx");
  });
});
