// GET /metrics (src/http/metrics.ts): the values against seeded job runs, verification
// state, backups and the write API's counters; the text against promtool's linter; who
// may read it (loopback, METRICS_SECRET; never CRON_SECRET or APP_SECRET from elsewhere);
// and that reading it stays a handful of indexed lookups.
// promtool is Debian's package `prometheus` (.ci/run installs it): without it this FAILS.
// On both stores (test/dialect.ts); the cost test reads each store's own query plans.
import { afterEach, describe, expect, test } from "bun:test";
import { networkInterfaces } from "node:os";
import { createAlarmSink, type AlarmChannel } from "../src/alarms/sink.ts";
import { newIngestCounters } from "../src/ingest/counters.ts";
import { newLeaseHolder } from "../src/job-lease.ts";
import { runTakenControle } from "../src/jobs/taken-controle.ts";
import { collectMetrics, isLoopback, METRICS_CONTENT_TYPE, metricsAccess, renderMetrics, type MetricsSnapshot } from "../src/http/metrics.ts";
import { RunningJobs } from "../src/running-jobs.ts";
import { JOB_NAMES } from "../src/schedule.ts";
import { JOB_STATUSES } from "../src/schedule-due.ts";
import { insertBackupRow, stateZegel, call, NOW, SECRET, TEST_SEAL, eindzegel, zegel } from "./helpers.ts";
import { addTenant, makeEnv, type Env } from "./dialect.ts";
import { APP_SECRET, auditEntry } from "./ingest-fixtures.ts";

const METRICS_SECRET = "metrics-secret-0123456789abcdef0123456789abcdef";
const WRONG = "wrong-secret-0123456789abcdef0123456789abcdef";
const H = 3600_000;
const at = (msBeforeNow: number) => new Date(NOW.getTime() - msBeforeNow).toISOString();
const secs = (iso: string) => Date.parse(iso) / 1000;

let env: Env | undefined;
afterEach(async () => {
  await env?.cleanup();
  env = undefined;
});

/** The path of a tool from Debian's package `prometheus`; a missing one fails the test, naming the package. */
function prometheusTool(name: "promtool" | "prometheus"): string {
  const path = Bun.which(name);
  if (!path) throw new Error(`${name} not found: this test needs Debian's package \`prometheus\` (apt-get install -y prometheus; .ci/run does)`);
  return path;
}

type Sample = { name: string; labels: Record<string, string>; value: number };

/** The samples of an exposition text (the subset of the format /metrics writes). */
function parse(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`not a sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!;
    out.push({ name: m[1]!, labels, value: m[3] === "NaN" ? NaN : Number(m[3]) });
  }
  return out;
}

function value(samples: Sample[], name: string, labels: Record<string, string> = {}): number | undefined {
  const hits = samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  if (hits.length > 1) throw new Error(`${name} ${JSON.stringify(labels)} matches ${hits.length} samples`);
  return hits[0]?.value;
}

async function scrape(e: Env, token: string | null = METRICS_SECRET) {
  return call(e.app, "/metrics", { method: "GET", token });
}

async function insertRun(e: Env, job: string, gestart: string, beeindigd: string | null, uitkomst: string): Promise<number> {
  const row = await e.db.get<{ id: number }>(
    "INSERT INTO job_runs (job, gestart, beeindigd, uitkomst, http_status, zegel, eindzegel) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
    job,
    gestart,
    beeindigd,
    uitkomst,
    beeindigd === null ? null : 200,
    zegel(job, gestart),
    eindzegel({ job, gestart, beeindigd, uitkomst, httpStatus: beeindigd === null ? null : 200 }),
  );
  return row!.id;
}

/** A report as backup-status stores it: sealed (src/row-seal.ts). */
async function insertBackup(e: Env, ontvangen: string, exitCode: number) {
  await insertBackupRow(e.db, { ontvangen, exitCode, gelukt: exitCode === 0, bestandsnaam: "b.db.gz", grootte: 10, foutmelding: null, bron: "host-cron" });
}

async function insertVerification(e: Env, tenantId: number, gecontroleerd: string, intact: boolean) {
  await e.db.run(
    "INSERT INTO audit_verification_state (tenant_id, gecontroleerd, intact, aantal_entries, fout_seq, fout_entry_id, fout_reden, zegel) VALUES (?, ?, ?, 5, ?, NULL, ?, ?)",
    tenantId,
    gecontroleerd,
    intact,
    intact ? null : 3,
    intact ? null : "hash-afwijkend",
    stateZegel({ tenantId, gecontroleerd, intact, aantalEntries: 5, foutSeq: intact ? null : 3, foutReden: intact ? null : "hash-afwijkend" }),
  );
}

/** This host as a lease holder writes it (hostname, PID namespace). */
const HERE = newLeaseHolder();

/** A lease on `runId` as another live process on this host holds it (this test's own pid, another instance id), valid until `verloopt`. */
async function insertLease(e: Env, job: string, runId: number, verloopt: Date) {
  await e.db.run(
    "INSERT INTO job_leases (job, pid, instantie, host, pid_ns, run_id, verkregen, vernieuwd, verloopt, zegel) VALUES (?, ?, 'ander-proces-id', ?, ?, ?, ?, ?, ?, ?)",
    job,
    process.pid,
    HERE.host,
    HERE.pidNs,
    runId,
    at(H),
    at(0),
    verloopt.toISOString(),
    TEST_SEAL.sealLease({ job, pid: process.pid, instantie: "ander-proces-id", host: HERE.host, pidNs: HERE.pidNs, runId, verloopt: verloopt.toISOString() }),
  );
}

/** A non-loopback address of this machine to listen on, if it has one. */
function otherLocalAddress(): string | undefined {
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) if (!a.internal && a.family === "IPv4") return a.address;
  }
  return undefined;
}

describe("the values", () => {
  test("per job: start, end, duration, outcome, running, overdue; overdue is exactly taken-controle's gemist", async () => {
    const running = new RunningJobs();
    env = await makeEnv({ METRICS_SECRET }, { running });
    // NOW is Thursday 2026-07-23 12:00 UTC; the service was installed a year before.
    const dag = { start: at(6 * H - 1000), end: at(6 * H - 3500) }; // 06:00:01, took 2.5 s
    await insertRun(env, "dagrapport", at(30 * H), at(30 * H - 1000), "fout"); // an older run, not the newest
    await insertRun(env, "dagrapport", dag.start, dag.end, "ok");
    await insertRun(env, "db-onderhoud", at(4 * 24 * H - 8 * H), at(4 * 24 * H - 8 * H - 61_000), "fout"); // Sunday 04:00, 61 s
    await insertRun(env, "beveiligingslog-analyse", at(0), at(-200), "afwijking"); // 12:00:00.000 → .200
    await insertRun(env, "backup-controle", at(45 * 60_000), at(45 * 60_000 - 100), "ok"); // 11:15
    const anker = await insertRun(env, "audit-anker", at(10 * 60_000), null, "bezig"); // still running, 10 min
    await insertRun(env, "audit-verificatie", at(35 * H), null, "bezig"); // yesterday 01:00, never ended
    running.tryStart("audit-anker");
    running.setRun("audit-anker", anker, at(10 * 60_000));

    const r = await scrape(env);
    expect(r.status).toBe(200);
    expect(r.headers.get("content-type")).toBe(METRICS_CONTENT_TYPE);
    const m = parse(r.text);
    for (const name of ["job_last_start_timestamp_seconds", "job_last_end_timestamp_seconds", "job_last_duration_seconds", "job_running", "job_overdue", "job_scheduled"]) {
      expect(m.filter((s) => s.name === `nachtwacht_${name}`).map((s) => s.labels.job)).toEqual([...JOB_NAMES]);
    }
    expect(m.filter((s) => s.name === "nachtwacht_job_last_outcome")).toHaveLength(JOB_NAMES.length * 4);

    const job = (name: string, j: string) => value(m, `nachtwacht_job_${name}`, { job: j });
    const outcome = (j: string) => m.filter((s) => s.name === "nachtwacht_job_last_outcome" && s.labels.job === j && s.value === 1).map((s) => s.labels.outcome);

    expect(job("last_start_timestamp_seconds", "dagrapport")).toBe(secs(dag.start));
    expect(job("last_end_timestamp_seconds", "dagrapport")).toBe(secs(dag.end));
    expect(job("last_duration_seconds", "dagrapport")).toBe(2.5);
    expect(outcome("dagrapport")).toEqual(["ok"]);
    expect(job("last_duration_seconds", "db-onderhoud")).toBe(61);
    expect(outcome("db-onderhoud")).toEqual(["fout"]);
    expect(job("last_duration_seconds", "beveiligingslog-analyse")).toBe(0.2);
    expect(outcome("beveiligingslog-analyse")).toEqual(["afwijking"]);
    // a run without an end: end 0, duration so far
    expect(job("last_end_timestamp_seconds", "audit-anker")).toBe(0);
    expect(job("last_duration_seconds", "audit-anker")).toBe(600);
    expect(outcome("audit-anker")).toEqual(["bezig"]);
    expect(job("running", "audit-anker")).toBe(1);
    // never ran: zeros, no outcome
    expect(job("last_start_timestamp_seconds", "weekrapport")).toBe(0);
    expect(job("last_duration_seconds", "weekrapport")).toBe(0);
    expect(outcome("weekrapport")).toEqual([]);
    for (const j of JOB_NAMES) if (j !== "audit-anker") expect(job("running", j)).toBe(0);
    expect(job("scheduled", "backup-status")).toBe(0);
    expect(job("scheduled", "dagrapport")).toBe(1);
    expect(value(m, "nachtwacht_job_grace_seconds")).toBe(30 * 60);

    const overdue = () => JOB_NAMES.filter((j) => job("overdue", j) === 1);
    // Never ran since installed a year ago: overdue. Ran since their last due time: not.
    expect(overdue()).toEqual(["weekrapport", "audit-retentie", "beveiligingslog-retentie", "audit-verificatie", "taken-controle"]);
    const controle = (await runTakenControle(env.deps, NOW, { running: running.runs(), unrecorded: [] })).body;
    expect(overdue()).toEqual(controle.gemist as typeof JOB_NAMES[number][]);
    // nachtwacht_job_status: one series per status, 1 for taken-controle's; none for backup-status (no schedule).
    const statusOf = (j: string) => m.filter((s) => s.name === "nachtwacht_job_status" && s.labels.job === j && s.value === 1).map((s) => s.labels.status);
    expect(m.filter((s) => s.name === "nachtwacht_job_status")).toHaveLength(JOB_NAMES.length * JOB_STATUSES.length);
    for (const t of controle.taken) expect(statusOf(t.job)).toEqual([t.status]);
    expect(statusOf("backup-status")).toEqual([]);
    expect(statusOf("audit-anker")).toEqual(["loopt"]);

    // audit-verificatie's newest run started 35 h ago: overdue, unless this process still runs it (as taken-controle).
    running.tryStart("audit-verificatie");
    running.setRun("audit-verificatie", 0, at(35 * H));
    const m2 = parse((await scrape(env)).text);
    expect(value(m2, "nachtwacht_job_overdue", { job: "audit-verificatie" })).toBe(0);
    expect(value(m2, "nachtwacht_job_running", { job: "audit-verificatie" })).toBe(1);
    expect((await runTakenControle(env.deps, NOW, { running: running.runs(), unrecorded: [] })).body.gemist).not.toContain("audit-verificatie");

    // A completed run whose end could not be written yet counts as it ended, not as 'bezig'.
    running.finish("audit-anker");
    running.keepEnd({ job: "audit-anker", runId: anker, gestart: at(10 * 60_000), end: new Date(NOW.getTime() - 60_000), result: { uitkomst: "ok", httpStatus: 200 } });
    const m3 = parse((await scrape(env)).text);
    expect(value(m3, "nachtwacht_job_last_outcome", { job: "audit-anker", outcome: "ok" })).toBe(1);
    expect(value(m3, "nachtwacht_job_last_outcome", { job: "audit-anker", outcome: "bezig" })).toBe(0);
    expect(value(m3, "nachtwacht_job_last_duration_seconds", { job: "audit-anker" })).toBe(540);
    expect(value(m3, "nachtwacht_job_running", { job: "audit-anker" })).toBe(0);
  });

  test("a job alive in another process (a live holder's lease on its newest run) is not overdue, as taken-controle says; without the lease it is", async () => {
    env = await makeEnv({ METRICS_SECRET });
    // audit-verificatie fires at 01:00 (grace 30 min, maximum run time 60 min). Its newest
    // run started at 00:59, before that fire time, and has no end; at 01:40 the grace has passed.
    const now = new Date("2026-07-23T01:40:00.000Z");
    env.setNow(now);
    const runId = await insertRun(env, "audit-verificatie", "2026-07-23T00:59:00.000Z", null, "bezig");
    const overdue = async () => value(parse((await scrape(env!)).text), "nachtwacht_job_overdue", { job: "audit-verificatie" });
    const controle = async () => (await runTakenControle(env!.deps, now, { running: [], unrecorded: [] })).body;

    // nachtwacht_job_status of the job: the one series at 1.
    const status = async () =>
      parse((await scrape(env!)).text)
        .filter((s) => s.name === "nachtwacht_job_status" && s.labels.job === "audit-verificatie" && s.value === 1)
        .map((s) => s.labels.status);

    // Nothing keeps the run alive: its process died, and no run started since 01:00.
    expect(await overdue()).toBe(1);
    expect((await controle()).gemist).toContain("audit-verificatie");
    expect(await status()).toEqual(["gemist"]);

    // Another process on this host holds its lease (alive: this test's pid, another instance).
    // This instance does not run it (job_running 0), yet the status is loopt: not interrupted.
    await insertLease(env, "audit-verificatie", runId, new Date(now.getTime() + 60_000));
    expect(await overdue()).toBe(0);
    const body = await controle();
    expect(body.gemist).not.toContain("audit-verificatie");
    expect(body.taken.find((t) => t.job === "audit-verificatie")).toMatchObject({ status: "loopt", levend: "ander-proces", houder: { pid: process.pid } });
    expect(await status()).toEqual(["loopt"]);
    expect(value(parse((await scrape(env)).text), "nachtwacht_job_running", { job: "audit-verificatie" })).toBe(0);

    // Still under that lease past its maximum run time (60 minutes from 00:59): hangt.
    const hung = new Date("2026-07-23T02:00:00.000Z");
    env.setNow(hung);
    await env.db.run("DELETE FROM job_leases WHERE job = 'audit-verificatie'");
    await insertLease(env, "audit-verificatie", runId, new Date("2026-07-23T02:01:00.000Z"));
    expect(await status()).toEqual(["hangt"]);
    expect((await runTakenControle(env.deps, hung, { running: [], unrecorded: [] })).body.hangend).toEqual(["audit-verificatie"]);
    env.setNow(now);
    await env.db.run("DELETE FROM job_leases WHERE job = 'audit-verificatie'");
    await insertLease(env, "audit-verificatie", runId, new Date(now.getTime() + 60_000));

    // Once the lease has expired the run is dead again: overdue, and gemist in taken-controle.
    const later = new Date(now.getTime() + 60_000);
    env.setNow(later);
    expect(await overdue()).toBe(1);
    expect((await runTakenControle(env.deps, later, { running: [], unrecorded: [] })).body.gemist).toContain("audit-verificatie");
  });

  test("audit chains: tenants checked and broken, time of the newest verification", async () => {
    env = await makeEnv({ METRICS_SECRET });
    let m = parse((await scrape(env)).text);
    expect([value(m, "nachtwacht_audit_tenants_checked"), value(m, "nachtwacht_audit_tenants_broken"), value(m, "nachtwacht_audit_last_verification_timestamp_seconds")]).toEqual([0, 0, 0]);
    const ids = [await addTenant(env.db, "A"), await addTenant(env.db, "B"), await addTenant(env.db, "C"), await addTenant(env.db, "D")];
    await insertVerification(env, ids[0]!, at(11 * H), true);
    await insertVerification(env, ids[1]!, at(11 * H), false);
    await insertVerification(env, ids[2]!, at(59 * H), false);
    await insertVerification(env, ids[3]!, at(11 * H - 5000), true);
    m = parse((await scrape(env)).text);
    expect(value(m, "nachtwacht_audit_tenants_checked")).toBe(4);
    expect(value(m, "nachtwacht_audit_tenants_broken")).toBe(2);
    expect(value(m, "nachtwacht_audit_last_verification_timestamp_seconds")).toBe(secs(at(11 * H - 5000)));
  });

  test("backup: none, newest failed and too old, newest succeeded and recent", async () => {
    env = await makeEnv({ METRICS_SECRET, BACKUP_MAX_UREN: "26" });
    let m = parse((await scrape(env)).text);
    expect(value(m, "nachtwacht_backup_last_success")).toBe(0);
    expect(value(m, "nachtwacht_backup_overdue")).toBe(1);
    expect(value(m, "nachtwacht_backup_last_age_seconds")).toBeUndefined();
    expect(value(m, "nachtwacht_backup_max_age_seconds")).toBe(26 * 3600);

    await insertBackup(env, at(50 * H), 0);
    await insertBackup(env, at(30 * H), 74);
    m = parse((await scrape(env)).text);
    expect(value(m, "nachtwacht_backup_last_success")).toBe(0);
    expect(value(m, "nachtwacht_backup_last_age_seconds")).toBe(30 * 3600);
    expect(value(m, "nachtwacht_backup_last_timestamp_seconds")).toBe(secs(at(30 * H)));
    expect(value(m, "nachtwacht_backup_overdue")).toBe(1);

    await insertBackup(env, at(2 * H + 1500), 0);
    m = parse((await scrape(env)).text);
    expect(value(m, "nachtwacht_backup_last_success")).toBe(1);
    expect(value(m, "nachtwacht_backup_last_age_seconds")).toBe(7201.5);
    expect(value(m, "nachtwacht_backup_overdue")).toBe(0);

    // exactly BACKUP_MAX_UREN old is already too old (backupOverdue)
    env.setNow(new Date(NOW.getTime() - 2 * H - 1500 + 26 * H));
    m = parse((await scrape(env)).text);
    expect(value(m, "nachtwacht_backup_last_age_seconds")).toBe(26 * 3600);
    expect(value(m, "nachtwacht_backup_overdue")).toBe(1);
  });

  test("the write API's counters, driven through the write API itself", async () => {
    env = await makeEnv({ METRICS_SECRET, APP_SECRET });
    const send = (path: string, body: unknown, token: string | null = APP_SECRET, method = "POST") =>
      call(env!.app, path, { token, method, body: typeof body === "string" ? body : JSON.stringify(body) });
    let m = parse((await scrape(env)).text);
    for (const endpoint of ["audit", "inlogpogingen", "tenants", "beheerders"]) expect(value(m, "nachtwacht_ingest_requests_accepted_total", { endpoint })).toBe(0);
    for (const status of ["400", "401", "403", "409", "413", "422", "503"]) expect(value(m, "nachtwacht_ingest_requests_rejected_total", { status })).toBe(0);

    expect((await send("/api/tenants/1", { naam: "Eén", actief: true }, APP_SECRET, "PUT")).status).toBe(201);
    expect((await send("/api/tenants/1/beheerders", { beheerders: [{ naam: "Ans", email: "ans@example.nl", actief: true }] }, APP_SECRET, "PUT")).status).toBe(200);
    const batch = { entries: [auditEntry(1, 0, { sleutel: "k0" }), auditEntry(1, 1, { sleutel: "k1" }), auditEntry(1, 2)] };
    expect((await send("/api/audit", batch)).status).toBe(200);
    expect((await send("/api/audit", { entries: [auditEntry(1, 0, { sleutel: "k0" }), auditEntry(1, 3, { sleutel: "k3" })] })).status).toBe(200);
    const pogingen = [1, 2, 3, 4, 5].map((i) => ({ account: `a${i}@example.nl`, ip: "192.0.2.1", gelukt: i % 2 === 0 }));
    expect((await send("/api/inlogpogingen", { pogingen })).status).toBe(200);
    expect((await send("/api/audit", batch, WRONG)).status).toBe(401);
    expect((await send("/api/audit", batch, null)).status).toBe(401);
    expect((await send("/api/audit", batch, SECRET)).status).toBe(403);
    expect((await send("/api/audit", "{niet json")).status).toBe(400);
    expect((await send("/api/audit", { entries: [auditEntry(99, 0)] })).status).toBe(422);
    expect((await send("/api/audit", { entries: [auditEntry(1, 9, { sleutel: "k0" })] })).status).toBe(409);

    m = parse((await scrape(env)).text);
    const accepted = (endpoint: string) => value(m, "nachtwacht_ingest_requests_accepted_total", { endpoint });
    expect([accepted("audit"), accepted("inlogpogingen"), accepted("tenants"), accepted("beheerders")]).toEqual([2, 1, 1, 1]);
    expect(value(m, "nachtwacht_ingest_rows_stored_total", { endpoint: "audit" })).toBe(4);
    expect(value(m, "nachtwacht_ingest_rows_stored_total", { endpoint: "inlogpogingen" })).toBe(5);
    expect(value(m, "nachtwacht_ingest_audit_entries_replayed_total")).toBe(1);
    // One after the other: on SQLite a committed transaction each for the five stored (the 409 and 422 rolled theirs back), none on PostgreSQL.
    const writes = env.dialect === "sqlite" ? 5 : 0;
    expect([value(m, "nachtwacht_ingest_sqlite_transactions_total"), value(m, "nachtwacht_ingest_sqlite_grouped_requests_total")]).toEqual([writes, writes]);
    const rejected = (status: string) => value(m, "nachtwacht_ingest_requests_rejected_total", { status });
    expect([rejected("400"), rejected("401"), rejected("403"), rejected("409"), rejected("422"), rejected("413"), rejected("503")]).toEqual([1, 2, 1, 1, 1, 0, 0]);
    // the same numbers as the counters themselves
    expect(await env.db.get("SELECT count(*) AS n FROM audit_entries")).toEqual({ n: 4 });
  });

  test("a status outside the usual ones gets its own series; the counters are the ones passed to the app", async () => {
    const counters = newIngestCounters();
    env = await makeEnv({ METRICS_SECRET }, { counters });
    counters.rejected["418"] = 3;
    counters.accepted.tenants = 7;
    const m = parse((await scrape(env)).text);
    expect(value(m, "nachtwacht_ingest_requests_rejected_total", { status: "418" })).toBe(3);
    expect(value(m, "nachtwacht_ingest_requests_accepted_total", { endpoint: "tenants" })).toBe(7);
  });

  test("build info, and a database that cannot be read: database_up 0, the in-process part still shown, no alarm", async () => {
    const running = new RunningJobs();
    env = await makeEnv({ METRICS_SECRET }, { running });
    let m = parse((await scrape(env)).text);
    expect(value(m, "nachtwacht_build_info", { version: (await Bun.file(`${import.meta.dir}/../package.json`).json()).version })).toBe(1);
    expect(value(m, "nachtwacht_database_up")).toBe(1);
    // PostgreSQL: its server's clock against this host's, measured at the scrape (one machine here: well within a second); SQLite has none.
    if (env.store.kind === "pg") expect(Math.abs(value(m, "nachtwacht_database_clock_offset_seconds")!)).toBeLessThan(1);
    else expect(value(m, "nachtwacht_database_clock_offset_seconds")).toBeUndefined();
    running.tryStart("dagrapport");
    await env.db.run("DROP TABLE job_runs");
    const r = await scrape(env);
    expect(r.status).toBe(200);
    m = parse(r.text);
    expect(value(m, "nachtwacht_database_up")).toBe(0);
    expect(value(m, "nachtwacht_database_clock_offset_seconds")).toBeUndefined();
    expect(value(m, "nachtwacht_job_running", { job: "dagrapport" })).toBe(1);
    expect(value(m, "nachtwacht_job_overdue", { job: "dagrapport" })).toBeUndefined();
    expect(value(m, "nachtwacht_ingest_audit_entries_replayed_total")).toBe(0);
    expect(env.alarms.raised).toEqual([]);
    await checkWithPromtool(r.text);
  });
});

/** Pipes the text into `promtool check metrics`; its lint findings fail the test. */
async function checkWithPromtool(text: string) {
  const p = Bun.spawn([prometheusTool("promtool"), "check", "metrics"], { stdin: new Blob([text]), stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  expect({ code, out, err }).toEqual({ code: 0, out: "", err: "" });
}

describe("the format", () => {
  test("promtool check metrics accepts what the running service answers, with every family seeded", async () => {
    const counters = newIngestCounters();
    env = await makeEnv({ METRICS_SECRET }, { counters });
    const t = await addTenant(env.db, "A");
    await insertVerification(env, t, at(H), false);
    await insertBackup(env, at(H), 0);
    await insertRun(env, "dagrapport", at(H), at(H - 1), "ok");
    counters.rejected["401"] = 2;
    // the real alarm sink, with a mail channel that fails once
    const refused: AlarmChannel = { name: "e-mail", raise: () => Promise.reject(new Error("550 mailbox unavailable")) };
    env.deps.alarms = createAlarmSink({ sentryDsn: null, clock: env.deps.clock, channels: [refused], writeLine: () => {} });
    const originalWrite = process.stderr.write;
    process.stderr.write = (() => true) as typeof process.stderr.write; // its "alarm channel failed" line
    try {
      await env.deps.alarms.raise({ type: "backup-failure", message: "x" });
    } finally {
      process.stderr.write = originalWrite;
    }
    const server = env.app.listen({ port: 0, hostname: "127.0.0.1" });
    try {
      const r = await fetch(`http://127.0.0.1:${server.server!.port}/metrics`);
      expect(r.status).toBe(200);
      const text = await r.text();
      expect(text).toContain("# TYPE nachtwacht_ingest_requests_rejected_total counter");
      expect(text).toContain('\nnachtwacht_alarms_undelivered_total{channel="e-mail"} 1\n');
      expect(text).toContain("# TYPE nachtwacht_job_overdue gauge");
      await checkWithPromtool(text);
      // and promtool does fail on a bad exposition, so the check above means something
      const bad = Bun.spawn([prometheusTool("promtool"), "check", "metrics"], { stdin: new Blob(["# TYPE x_count counter\nx_count 1\n"]), stdout: "pipe", stderr: "pipe" });
      expect(await bad.exited).not.toBe(0);
    } finally {
      await server.stop(true);
    }
  });

  test("renderMetrics is a plain function of its snapshot: HELP and TYPE once per family, special values spelt as Prometheus reads them", () => {
    const snapshot: MetricsSnapshot = {
      now: NOW,
      version: "9.9.9",
      backupMaxAgeSeconds: 3600,
      takenMargeSeconds: 60,
      runningJobs: [],
      database: null,
      counters: newIngestCounters(),
      alarmsUndelivered: {},
      disks: [],
      minFreeRatio: 0.1,
      databaseClockOffsetSeconds: null,
      walCheckpointerFallback: false,
    };
    const text = renderMetrics(snapshot);
    expect(text.endsWith("\n")).toBe(true);
    const types = text.split("\n").filter((l) => l.startsWith("# TYPE ")).map((l) => l.split(" ")[2]);
    expect(new Set(types).size).toBe(types.length);
    expect(text.split("\n").filter((l) => l.startsWith("# HELP ")).length).toBe(types.length);
    expect(text).toContain('nachtwacht_build_info{version="9.9.9"} 1\n');
    expect(text).toContain("nachtwacht_database_up 0\n");
    // one of the values written the same way for every input
    expect(renderMetrics({ ...snapshot, takenMargeSeconds: NaN })).toContain("nachtwacht_job_grace_seconds NaN\n");
    expect(renderMetrics({ ...snapshot, takenMargeSeconds: Infinity })).toContain("nachtwacht_job_grace_seconds +Inf\n");
  });
});

describe("access", () => {
  test("loopback without a token: 200 from 127.0.0.1, and from ::1 when the host has IPv6 loopback", async () => {
    env = await makeEnv();
    const v4 = env.app.listen({ port: 0, hostname: "127.0.0.1" });
    try {
      const r = await fetch(`http://127.0.0.1:${v4.server!.port}/metrics`);
      expect(r.status).toBe(200);
      expect(r.headers.get("content-type")).toBe(METRICS_CONTENT_TYPE);
      expect(await r.text()).toContain("nachtwacht_job_overdue");
      // behind a proxy on this machine the peer is loopback, but the client is not
      for (const [h, v] of [["x-forwarded-for", "127.0.0.1"], ["forwarded", "for=127.0.0.1"], ["x-real-ip", "127.0.0.1"]]) {
        const p = await fetch(`http://127.0.0.1:${v4.server!.port}/metrics`, { headers: { [h!]: v! } });
        expect({ h, status: p.status }).toEqual({ h, status: 403 });
      }
    } finally {
      await v4.stop(true);
    }
    const hasV6 = Object.values(networkInterfaces()).some((l) => l?.some((a) => a.internal && a.address === "::1"));
    if (hasV6) {
      const other = await makeEnv();
      const v6 = other.app.listen({ port: 0, hostname: "::1" });
      try {
        expect((await fetch(`http://[::1]:${v6.server!.port}/metrics`)).status).toBe(200);
      } finally {
        await v6.stop(true);
        await other.cleanup();
      }
    }
  });

  test("no peer address (app.handle): counts as remote; METRICS_SECRET 200, wrong or none 401, CRON_SECRET and APP_SECRET 403", async () => {
    env = await makeEnv({ METRICS_SECRET, APP_SECRET });
    expect((await scrape(env, METRICS_SECRET)).status).toBe(200);
    expect((await call(env.app, "/metrics", { method: "GET", token: null, headers: { authorization: `bearer   ${METRICS_SECRET}` } })).status).toBe(200);
    for (const [token, status] of [
      [null, 401],
      [WRONG, 401],
      [METRICS_SECRET + "x", 401],
      [SECRET, 403],
      [APP_SECRET, 403],
    ] as const) {
      const r = await scrape(env, token);
      expect({ token, status: r.status }).toEqual({ token, status });
      expect(r.json.error).toBeString();
      expect(r.text).not.toContain("nachtwacht_");
      if (status === 401) expect(r.headers.get("www-authenticate")).toBe("Bearer");
    }
    // X-Forwarded-For naming loopback opens nothing
    expect((await call(env.app, "/metrics", { method: "GET", token: null, headers: { "x-forwarded-for": "127.0.0.1" } })).status).toBe(401);
    // a token in the query string is never read
    expect((await call(env.app, `/metrics?access_token=${METRICS_SECRET}`, { method: "GET", token: null })).status).toBe(401);
  });

  test("rotation: METRICS_SECRET_VORIG opens /metrics from elsewhere beside the new METRICS_SECRET; APP_SECRET_VORIG is 403 there; once removed, the old value is 401", async () => {
    const NEW = "metrics-secret-nieuw-0123456789abcdef0123456789abcdef";
    const APP_OLD = "app-secret-oud-0123456789abcdef0123456789abcdef";
    env = await makeEnv({ METRICS_SECRET: NEW, METRICS_SECRET_VORIG: METRICS_SECRET, APP_SECRET, APP_SECRET_VORIG: APP_OLD });
    expect((await scrape(env, METRICS_SECRET)).status).toBe(200);
    expect((await scrape(env, NEW)).status).toBe(200);
    expect((await scrape(env, APP_OLD)).status).toBe(403);
    expect((await scrape(env, WRONG)).status).toBe(401);
    await env.cleanup();
    env = await makeEnv({ METRICS_SECRET: NEW });
    expect((await scrape(env, METRICS_SECRET)).status).toBe(401);
    expect((await scrape(env, NEW)).status).toBe(200);
  });

  test("without METRICS_SECRET only loopback reads it: every token 403 from elsewhere", async () => {
    env = await makeEnv({ APP_SECRET });
    for (const token of [null, WRONG, SECRET, APP_SECRET]) {
      const r = await scrape(env, token);
      expect({ token, status: r.status }).toEqual({ token, status: 403 });
      expect(r.json.error).toContain("METRICS_SECRET");
    }
  });

  test("from a non-loopback address of this machine (a real socket): token needed, CRON_SECRET and APP_SECRET refused", async () => {
    env = await makeEnv({ METRICS_SECRET, APP_SECRET });
    const address = otherLocalAddress();
    if (address === undefined) {
      // No other address to listen on here: the decision is checked with a peer address argument instead.
      console.warn("test/metrics.test.ts: no non-loopback address on this machine; checking metricsAccess with 192.0.2.10 as peer");
      const decide = metricsAccess({ metrics: METRICS_SECRET, cron: SECRET, app: APP_SECRET });
      const h = (token: string | null) => new Headers(token === null ? {} : { authorization: `Bearer ${token}` });
      expect([null, WRONG, SECRET, APP_SECRET, METRICS_SECRET].map((t) => decide("192.0.2.10", h(t)))).toEqual([
        { allowed: false, status: 401 },
        { allowed: false, status: 401 },
        expect.objectContaining({ allowed: false, status: 403 }),
        expect.objectContaining({ allowed: false, status: 403 }),
        { allowed: true },
      ]);
      return;
    }
    const server = env.app.listen({ port: 0, hostname: address });
    try {
      const url = `http://${address}:${server.server!.port}/metrics`;
      const get = (token: string | null) => fetch(url, { headers: token === null ? {} : { authorization: `Bearer ${token}` } });
      for (const [token, status] of [
        [null, 401],
        [WRONG, 401],
        [SECRET, 403],
        [APP_SECRET, 403],
        [METRICS_SECRET, 200],
      ] as const) {
        const r = await get(token);
        const body = await r.text();
        expect({ token, status: r.status }).toEqual({ token, status });
        if (status !== 200) expect(JSON.parse(body).error).toBeString();
        else expect(body).toContain("nachtwacht_job_last_outcome");
      }
      // a loopback address in X-Forwarded-For does not make a remote peer local
      expect((await fetch(url, { headers: { "x-forwarded-for": "127.0.0.1" } })).status).toBe(401);
    } finally {
      await server.stop(true);
    }
  });

  test("the decision function: which peer addresses count as loopback", () => {
    for (const a of ["127.0.0.1", "::1", "::ffff:127.0.0.1", "::FFFF:127.0.0.1"]) expect({ a, loop: isLoopback(a) }).toEqual({ a, loop: true });
    for (const a of ["127.0.0.2", "10.0.0.1", "192.0.2.2", "::ffff:10.0.0.1", "fd00::2", "0.0.0.0", "::", "", null, undefined]) {
      expect({ a, loop: isLoopback(a) }).toEqual({ a, loop: false });
    }
    const decide = metricsAccess({ metrics: METRICS_SECRET, cron: SECRET, app: APP_SECRET });
    const none = new Headers();
    expect(decide("::1", none)).toEqual({ allowed: true });
    expect(decide("::ffff:127.0.0.1", new Headers({ authorization: `Bearer ${WRONG}` }))).toEqual({ allowed: true });
    expect(decide("127.0.0.1", new Headers({ forwarded: "for=192.0.2.9" }))).toEqual({ allowed: false, status: 401 });
    expect(decide("198.51.100.7", new Headers({ authorization: `Bearer ${SECRET}`, "x-forwarded-for": "127.0.0.1" }))).toMatchObject({ allowed: false, status: 403 });
    expect(decide(null, new Headers({ authorization: `Bearer ${METRICS_SECRET}` }))).toEqual({ allowed: true });
  });
});

describe("cost", () => {
  test("a scrape is a handful of indexed lookups: no table scanned but the one-row-per-tenant ones (tenants, verification state: each result's seal is checked) and the job leases (one row per job at most)", async () => {
    env = await makeEnv({ METRICS_SECRET });
    const t = await addTenant(env.db, "A");
    await insertVerification(env, t, at(H), true);
    await insertBackup(env, at(H), 0);
    await insertRun(env, "dagrapport", at(H), at(H - 1), "ok");
    await insertLease(env, "audit-anker", await insertRun(env, "audit-anker", at(60_000), null, "bezig"), new Date(NOW.getTime() + 60_000));
    const running = new RunningJobs();
    const collect = () => collectMetrics({ deps: env!.deps, running, counters: newIngestCounters() }, NOW);
    if (env.store.kind === "sqlite") {
      const seen: string[] = [];
      const sqlite = env.store.sqlite;
      const prepare = sqlite.prepare.bind(sqlite);
      (sqlite as { prepare: typeof prepare }).prepare = ((q: string, ...rest: []) => {
        seen.push(q);
        return prepare(q, ...rest);
      }) as typeof prepare;
      const query = sqlite.query.bind(sqlite);
      (sqlite as { query: typeof query }).query = ((q: string) => {
        seen.push(q);
        return query(q);
      }) as typeof query;
      await collect();
      (sqlite as { prepare: typeof prepare }).prepare = prepare;
      (sqlite as { query: typeof query }).query = query;

      const distinct = [...new Set(seen)];
      expect(distinct.length).toBeGreaterThan(0);
      // 9: a job's runs and the backup reports dated after the clock are a second index range each (lastRun, newestBackup: they do not count, and are reported);
      // one service_meta row by its key (the postponed late logins, src/jobs/late-postponed.ts).
      expect(distinct.length).toBeLessThanOrEqual(9);
      for (const q of distinct) {
        expect(q).not.toContain("audit_entries");
        const params = (q.match(/\?/g) ?? []).map(() => "x");
        const plan = (query(`EXPLAIN QUERY PLAN ${q}`).all(...params) as { detail: string }[]).map((r) => r.detail);
        const scans = plan.filter((d) => /^SCAN /.test(d) && !/USING (COVERING )?INDEX/.test(d));
        // job_leases has the job as its primary key: one row per job at most, so scanning it is bounded.
        expect({ q, scans }).toEqual({ q, scans: scans.filter((d) => /^SCAN (audit_verification_state|tenants|job_leases)\b/.test(d)) });
        expect(plan.some((d) => d.includes("USE TEMP B-TREE"))).toBe(false);
      }
    } else {
      // PostgreSQL: every statement the scrape sends through the pool (Drizzle's bun-sql
      // driver sends each as sql.unsafe(text, params)), with the parameters it sent.
      const { sql } = env.store;
      const seen = new Map<string, unknown[]>();
      const unsafe = sql.unsafe;
      (sql as { unsafe: typeof unsafe }).unsafe = ((q: string, params?: unknown[]) => {
        if (!seen.has(q)) seen.set(q, params ?? []);
        return unsafe.call(sql, q, params as any[]);
      }) as typeof unsafe;
      try {
        await collect();
      } finally {
        (sql as { unsafe: typeof unsafe }).unsafe = unsafe;
      }

      expect(seen.size).toBeGreaterThan(0);
      expect(seen.size).toBeLessThanOrEqual(9);
      for (const [q, params] of seen) {
        expect(q).not.toContain("audit_entries");
        // With sequential scans priced out, a table still read whole has no index the
        // query can use (SQLite's SCAN without an index); a Sort node is SQLite's temp B-tree.
        const plan = await sql.begin(async (tx) => {
          await tx.unsafe("SET LOCAL enable_seqscan = off");
          const [row] = await tx.unsafe(`EXPLAIN (FORMAT JSON) ${q}`, params as any[]);
          return (row as { "QUERY PLAN": unknown })["QUERY PLAN"];
        });
        const nodes: { "Node Type": string; "Relation Name"?: string }[] = [];
        const walk = (n: any) => {
          nodes.push(n);
          for (const c of n.Plans ?? []) walk(c);
        };
        walk((plan as any[])[0].Plan);
        const scans = nodes.filter((n) => n["Node Type"] === "Seq Scan").map((n) => `SCAN ${n["Relation Name"]}`);
        // job_leases has the job as its primary key: one row per job at most, so scanning it is bounded.
        expect({ q, scans }).toEqual({ q, scans: scans.filter((d) => d === "SCAN audit_verification_state" || d === "SCAN tenants" || d === "SCAN job_leases") });
        // SQLite's indexes end in the rowid, so (ontvangen) also orders by id; PostgreSQL's do
        // not, and it sorts only the rows tied on the indexed column (Incremental Sort), or the
        // rows of one index range (a Sort right over an Index Scan with its Index Cond: one
        // job's runs), never the table.
        const unbounded = nodes.filter(
          (n: any) => n["Node Type"] === "Sort" && !(n.Plans?.length === 1 && /Index (Only )?Scan/.test(n.Plans[0]["Node Type"]) && n.Plans[0]["Index Cond"]),
        );
        expect({ q, sorts: unbounded.length }).toEqual({ q, sorts: 0 });
      }
    }
  });
});
