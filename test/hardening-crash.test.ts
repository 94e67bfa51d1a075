// Crashes (issue 8, part 4). The service runs as a real process (`bun src/index.ts`)
// and is killed with SIGKILL at seeded random points in the middle of a job — several
// times on the same database — then restarted. After every kill: the database is
// sound, every chain verifies, nothing was deleted beyond its signed retention record,
// and the job-run history shows the interrupted run as not finished. After
// the last kill a rerun completes the work; for the weekly report, across all kills
// and the rerun, no administrator gets a report twice.
//
// On both stores (test/dialect.ts): on the PostgreSQL run the service serves from a
// fresh database of the run's cluster (DATABASE_URL), which holds the same data, moved
// there as an installation moves (migrate-to); the host application's appender is a
// PostgreSQL client (appendEntriesPg) beside test/fixtures/append-worker.ts.
//
// Fixed seed (CRASH_SEED=<n> tries others) and a bounded number of rounds: 14 in all.
import { Database } from "bun:sqlite";
import { SQL } from "bun";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { parseConfig } from "../src/config.ts";
import { applyPragmas, openStore } from "../src/db.ts";
import { runTakenControle } from "../src/jobs/taken-controle.ts";
import { parseVerifierKey } from "../src/audit/note.ts";
import { openRetentionRecord } from "../src/audit/records.ts";
import { verifyTenantChain, type TenantChainResult, type VerifyOptions } from "../src/audit/verify.ts";
import { verifyTenantChainPg } from "../src/pg/chain.ts";
import { integrityCheckPg } from "../src/pg/maintenance.ts";
import { migrateToPostgres } from "../src/pg/migrate-to.ts";
import { openPgStore } from "../src/pg/store.ts";
import { DIALECT, sqliteTestDb, testCluster, testDb, type TestDb } from "./dialect.ts";
import { bulkChain, BUN, deletedEntriesOn, flakySmtp, prng, ROOT, startService, tempDir, verifyAllOn, type FlakySmtp, type ServiceProcess } from "./fixtures/hardening.ts";
import { RecordingAlarms, RecordingMailer, SECRET, TEST_SEAL, TEST_SIGNING_KEY, TEST_VERIFIER_KEY } from "./helpers.ts";

const SEED = Number(process.env.CRASH_SEED ?? 8);
const rand = prng(SEED);
const DAY = 24 * 3600 * 1000;
/** The service uses the wall clock; the data is placed far from every boundary. */
const now = Date.now();

const TENANTS = 6;
const OLD_PER_TENANT = 4000; // several audit-retentie batches (paced by the clock)
const NEW_PER_TENANT = 200;
const OLD_LOGINS = 200_000; // several beveiligingslog-retentie batches (each up to 100 ms of deleting)
const NEW_LOGINS = 3000;
const ADMINS_PER_TENANT = 8;
const VERIFIERS = [parseVerifierKey(TEST_VERIFIER_KEY)];

const dirs: (() => void)[] = [];
const databases: string[] = [];
let smtp: FlakySmtp;
const delivered: string[] = [];
afterAll(async () => {
  await smtp?.stop();
  for (const d of dirs) d();
  if (databases.length > 0) {
    const cluster = await testCluster();
    for (const url of databases) await cluster.dropDatabase(new URL(url).pathname.slice(1));
  }
});

/**
 * An installation for the crash tests: on SQLite the file at `path`; on PostgreSQL the
 * database at `url` (the service's DATABASE_PATH then only places its outbox).
 */
interface Installation {
  dir: string;
  path: string;
  url: string | null;
  hashes: Map<string, string>;
}

/** A fresh database with the crash tests' data; the service counts as installed two years ago. */
async function makeDatabase(): Promise<Installation> {
  const { dir, cleanup } = tempDir();
  dirs.push(cleanup);
  const path = join(dir, "data", "nachtwacht.db");
  // On PostgreSQL the same data is written to a SQLite file first and moved over with
  // migrate-to (which proves the copy row by row and every chain on PostgreSQL).
  const source = DIALECT === "pg" ? join(dir, "bron.db") : path;
  const store = openStore(source, new Date(now - 730 * DAY), TEST_SEAL);
  const s = store.sqlite;
  for (let t = 1; t <= TENANTS; t++) {
    s.query("INSERT INTO tenants (id, naam, actief, aangemaakt) VALUES (?, ?, 1, ?)").run(t, `Tenant ${t}`, new Date(now - 4000 * DAY).toISOString());
    for (let a = 0; a < ADMINS_PER_TENANT; a++) {
      s.query("INSERT INTO administrators (tenant_id, naam, email, actief) VALUES (?, ?, ?, 1)").run(t, `admin ${a}`, `admin${a}@tenant${t}.test`);
    }
    bulkChain(s, t, OLD_PER_TENANT, now - 3400 * DAY, now - 2700 * DAY);
    bulkChain(s, t, NEW_PER_TENANT, now - 20 * DAY, now - DAY);
  }
  const ins = s.prepare("INSERT INTO login_attempts (tijdstip, account, ip, gelukt, tenant_id) VALUES (?, 'a', '10.0.0.1', ?, 1)");
  s.transaction(() => {
    for (let i = 0; i < OLD_LOGINS; i++) ins.run(new Date(now - 200 * DAY + i * 1000).toISOString(), i % 5 === 0 ? 0 : 1);
    for (let i = 0; i < NEW_LOGINS; i++) ins.run(new Date(now - 30 * DAY + i * 1000).toISOString(), 1);
  })();
  // The hash of every entry a retention anchor may point at (batches are paced by the
  // clock, so any seq can end one), to check anchors against.
  const hashes = new Map<string, string>();
  for (const r of s.query("SELECT tenant_id AS t, seq, hash FROM audit_entries").all() as { t: number; seq: number; hash: string }[]) {
    hashes.set(`${r.t}/${r.seq}`, r.hash);
  }
  store.close();
  if (DIALECT === "sqlite") return { dir, path, url: null, hashes };
  const url = await (await testCluster()).createDatabase();
  databases.push(url);
  const moved = await migrateToPostgres({ dbPath: source, anchorPath: join(dir, "ankers.jsonl"), url, verifiers: VERIFIERS, log: () => {} });
  expect(moved.uitkomst).toBe("klaar");
  // For inspect's integrity check (amcheck); the test cluster's user may install it.
  const sql = new SQL(url, { max: 1 });
  await sql`CREATE EXTENSION amcheck`;
  await sql.close();
  return { dir, path, url, hashes };
}

function env(db: Installation, extra: Record<string, string> = {}) {
  return {
    CRON_SECRET: SECRET,
    AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY,
    DATABASE_PATH: db.path,
    AUDIT_ANKER_BESTAND: join(db.dir, "ankers.jsonl"),
    ...(db.url === null ? {} : { DATABASE_URL: db.url }),
    ...extra,
  };
}

/** The installation's database opened beside the service: plain SQL (env.db's facade), its chain verifier and its integrity check. */
interface Handle {
  db: TestDb;
  verify(tenantId: number, o: VerifyOptions): Promise<TenantChainResult>;
  /** "ok", or what is wrong: PRAGMA integrity_check on SQLite, amcheck's bt_index_check of every index on PostgreSQL. */
  integrity(): Promise<string>;
  /**
   * After a SIGKILL of the service: returns once nothing the killed process started can
   * still change the database. On SQLite at once (its transaction died with it). On
   * PostgreSQL a statement the service had sent runs on in its server process, and one
   * outside a transaction (a login retention batch, a delivery's record) still commits:
   * this waits until every server process of a connection opened before now, other than
   * this handle's own (one connection: see open), has ended.
   */
  settle(): Promise<void>;
  close(): Promise<void>;
}

/** `readonly`: a probe beside the running service (on SQLite without the pragmas, as before; on PostgreSQL one connection, for settle). */
async function open(db: Installation, o: { readonly?: boolean } = {}): Promise<Handle> {
  if (db.url === null) {
    const s = o.readonly ? new Database(db.path, { readonly: true }) : new Database(db.path, { strict: true });
    if (!o.readonly) applyPragmas(s);
    return {
      db: sqliteTestDb(s),
      verify: async (t, v) => verifyTenantChain(s, t, v),
      integrity: async () => (s.query("PRAGMA integrity_check").get() as { integrity_check: string }).integrity_check,
      settle: async () => {},
      close: async () => s.close(),
    };
  }
  const store = await openPgStore(db.url, { max: o.readonly ? 1 : 2 });
  return {
    db: testDb(store),
    verify: (t, v) => verifyTenantChainPg(store.sql, t, v),
    integrity: async () => {
      const r = await integrityCheckPg(store.sql);
      return r.status === "ok" ? "ok" : JSON.stringify(r);
    },
    settle: async () => {
      const [{ at }] = (await store.sql`SELECT clock_timestamp()::text AS at`) as [{ at: string }];
      for (let i = 0; i < 10_000; i++) {
        const [{ n }] = (await store.sql`
          SELECT count(*)::int AS n FROM pg_stat_activity
          WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid() AND backend_start < ${at}::timestamptz`) as [{ n: number }];
        if (n === 0) return;
        await Bun.sleep(1);
      }
      throw new Error("the killed service's server processes did not end");
    },
    close: () => store.close(),
  };
}

/**
 * Starts the job over HTTP and SIGKILLs the service once `progress()` reaches `target`
 * (plus 0–3 ms); returns once `probe` has seen the kill's effects settle. With
 * `mayFinish`, the batch that crossed the target may have been the job's last, and the
 * kill land after its answer (200): the caller then checks the finished state.
 */
async function killDuring(
  svc: ServiceProcess,
  job: string,
  progress: () => Promise<number>,
  target: number,
  probe: Handle,
  o: { mayFinish?: boolean } = {},
): Promise<{ reached: number; answered: boolean }> {
  const answer = fetch(`${svc.url}/api/cron/${job}`, { method: "POST", headers: { authorization: `Bearer ${SECRET}` } }).then(
    (r) => r.status,
    () => "killed" as const,
  );
  const t0 = performance.now();
  let reached = await progress();
  while (reached < target) {
    if (performance.now() - t0 > 20_000) throw new Error(`${job} made no progress to ${target} (at ${reached})`);
    await Bun.sleep(1);
    reached = await progress();
  }
  const extra = Math.floor(rand() * 4);
  if (extra > 0) await Bun.sleep(extra);
  svc.proc.kill("SIGKILL");
  expect(await svc.exited).toBe(-1);
  await probe.settle();
  // The job had not answered: the kill came in the middle of it (or, with mayFinish, after its last batch).
  const status = await answer;
  if (o.mayFinish && status === 200) return { reached, answered: true };
  expect(status).toBe("killed");
  return { reached, answered: false };
}

/** Opens the killed service's database the way a restart does (on SQLite: WAL recovery) and checks it. */
async function inspect(db: Installation, check: (h: Handle) => Promise<void>) {
  const h = await open(db);
  try {
    expect(await h.integrity()).toBe("ok");
    await check(h);
  } finally {
    await h.close();
  }
}

async function lastRun(db: TestDb, job: string) {
  return (await db.get<{ uitkomst: string; beeindigd: string | null }>("SELECT uitkomst, beeindigd FROM job_runs WHERE job = ? ORDER BY id DESC LIMIT 1", job))!;
}

/** taken-controle on this database, 31 minutes from now (past the grace of 30). */
async function takenControle(db: Installation) {
  const store = db.url === null ? openStore(db.path) : await openPgStore(db.url, { max: 2 });
  try {
    const deps = { store, mailer: new RecordingMailer(), alarms: new RecordingAlarms(), clock: () => new Date(now + 31 * 60_000), config: parseConfig(env(db)) };
    const r = await runTakenControle(deps, new Date(Date.now() + 31 * 60_000));
    return { ...r, alarms: deps.alarms.raised };
  } finally {
    await store.close();
  }
}

/**
 * The host application appending to a tenant's chain, one entry per transaction, as its
 * own process: test/fixtures/append-worker.ts on SQLite; on PostgreSQL its counterpart
 * through appendEntriesPg (run with `bun -e`).
 */
const PG_APPEND_WORKER = `
import { SQL } from "bun";
import { canonicalJson } from ${JSON.stringify(`${ROOT}/src/audit/chain.ts`)};
import { appendEntriesPg } from ${JSON.stringify(`${ROOT}/src/pg/chain.ts`)};
const { URL: url, TENANT, COUNT, ACTOR: actor } = process.env;
const sql = new SQL(url, { max: 1 });
for (let i = 0; i < Number(COUNT); i++) {
  const input = { tenantId: Number(TENANT), createdAt: new Date().toISOString(), actor, action: "race.append", subject: actor + "/" + i, details: canonicalJson({ i }) };
  await sql.begin((tx) => appendEntriesPg(tx, [input]));
  // a breath after each commit, as append-worker.ts takes
  await Bun.sleep(1);
}
await sql.close();
`;

function appenderCommand(db: Installation, tenant: number, count: number, actor: string): { cmd: string[]; env?: Record<string, string> } {
  if (db.url === null) return { cmd: [BUN, join(ROOT, "test/fixtures/append-worker.ts"), db.path, String(tenant), String(count), actor] };
  return { cmd: [BUN, "-e", PG_APPEND_WORKER], env: { PATH: process.env.PATH ?? "/usr/bin:/bin", URL: db.url, TENANT: String(tenant), COUNT: String(count), ACTOR: actor } };
}

beforeAll(async () => {
  smtp = await flakySmtp({ log: delivered });
});

describe("SIGKILL in the middle of a job, again and again, then a rerun", () => {
  test("audit-retentie (4 kills): chains verify, nothing is deleted beyond its signed retention record, interrupted runs stay 'bezig'; taken-controle says onderbroken; the rerun finishes and audit-verificatie is 200", async () => {
    const db = await makeDatabase();
    const anchorFile = join(db.dir, "ankers.jsonl");
    const total = TENANTS * (OLD_PER_TENANT + NEW_PER_TENANT);
    const probe = await open(db, { readonly: true });
    // Entries deleted so far (deletion is a prefix from seq 1; the records are signed before it starts).
    const deleted = () => deletedEntriesOn(probe.db);
    // The kill can land after the run wrote its end, when the batch that crossed the
    // target took the rest of the old entries (batches are paced by the clock, so their
    // size depends on the machine): that round then checks the finished state, and the
    // rounds stop, as beveiligingslog-retentie's below do.
    let rounds = 0;
    let finished = false;
    // A kill after the last old entry went but before the end was written leaves nothing to kill during either.
    for (; rounds < 4 && !finished && (await deleted()) < TENANTS * OLD_PER_TENANT; rounds++) {
      const svc = await startService(env(db));
      const before = await deleted();
      const target = before + 1 + Math.floor(rand() * (TENANTS * OLD_PER_TENANT - before) * 0.5);
      const { answered } = await killDuring(svc, "audit-retentie", deleted, target, probe, { mayFinish: true });
      await inspect(db, async (h) => {
        const chains = await verifyAllOn(h.db, h.verify, anchorFile);
        const remaining = (await h.db.get<{ n: number }>("SELECT count(*) AS n FROM audit_entries"))!.n;
        let gone = 0;
        for (const c of chains) {
          expect(c.intact).toBe(true);
          // Every deleted entry is covered by a signed record; the record covers the whole old
          // prefix (signed before any deletion), and the anchor was moved with it.
          expect(c.eersteSeq! - 1).toBeLessThanOrEqual(c.retentieSeq);
          expect([0, OLD_PER_TENANT]).toContain(c.retentieSeq);
          expect(c.ankerSeq).toBe(c.retentieSeq);
          if (c.retentieSeq > 0) {
            const row = (await h.db.get<{ note: string }>("SELECT note FROM audit_anchor_log WHERE tenant_id = ? AND soort = 'retentie' ORDER BY positie DESC LIMIT 1", c.tenantId))!;
            const o = openRetentionRecord(row.note, c.tenantId, VERIFIERS);
            expect(o.ok && o.record.hash).toBe(db.hashes.get(`${c.tenantId}/${c.retentieSeq}`)!);
            const a = (await h.db.get<{ hash: string }>("SELECT hash FROM audit_retention_anchors WHERE tenant_id = ?", c.tenantId))!;
            expect(a.hash).toBe(db.hashes.get(`${c.tenantId}/${c.retentieSeq}`)!);
          }
          // No hole: what is left is exactly the chain after the deleted prefix.
          expect(c.aantalEntries).toBe(OLD_PER_TENANT + NEW_PER_TENANT - (c.eersteSeq! - 1));
          gone += c.eersteSeq! - 1;
        }
        expect(gone + remaining).toBe(total);
        expect(gone).toBeGreaterThanOrEqual(before);
        const run = await lastRun(h.db, "audit-retentie");
        if (run.uitkomst === "ok" && gone === TENANTS * OLD_PER_TENANT) finished = true;
        else expect(run).toEqual({ uitkomst: "bezig", beeindigd: null });
        // A job that answered had finished: its end written, every old entry gone.
        if (answered) expect(finished).toBe(true);
      });
    }
    await probe.close();
    await inspect(db, async (h) => {
      // A COMMIT that reached the WAL but not its index when the kill came is seen only once
      // every connection has closed and the next one rebuilds the index from the WAL (the
      // probe stayed open through the rounds): the last run's end can appear only now. The
      // run then did finish, every old entry gone, as a run that answered.
      const last = await lastRun(h.db, "audit-retentie");
      if (!finished && last.uitkomst === "ok") {
        expect(await deletedEntriesOn(h.db)).toBe(TENANTS * OLD_PER_TENANT);
        finished = true;
      }
      const runs = await h.db.all("SELECT uitkomst, count(*) AS n FROM job_runs WHERE job = 'audit-retentie' GROUP BY uitkomst ORDER BY uitkomst");
      const interrupted = finished ? rounds - 1 : rounds;
      expect(runs).toEqual([...(interrupted > 0 ? [{ uitkomst: "bezig", n: interrupted }] : []), ...(finished ? [{ uitkomst: "ok", n: 1 }] : [])]);
    });
    if (!finished) {
      const tc = await takenControle(db);
      expect(tc.status).toBe(409);
      expect(tc.body.taken.find((t) => t.job === "audit-retentie")?.status).toBe("onderbroken");
      expect(tc.body.falend).toContain("audit-retentie");
      expect(tc.alarms.map((a) => a.type)).toEqual(["job-missed", "job-interrupted"]);
    }

    const svc = await startService(env(db));
    const r = await fetch(`${svc.url}/api/cron/audit-retentie`, { method: "POST", headers: { authorization: `Bearer ${SECRET}` } });
    expect(r.status).toBe(200);
    const body = (await r.json()) as { verwijderd: number };
    // The whole installation as the service checks it: the anchor file and its copy agree, every chain verifies.
    const v = await fetch(`${svc.url}/api/cron/audit-verificatie`, { method: "POST", headers: { authorization: `Bearer ${SECRET}` } });
    expect(v.status).toBe(200);
    svc.proc.kill("SIGTERM");
    expect(await svc.exited).toBe(0);
    await inspect(db, async (h) => {
      for (const c of await verifyAllOn(h.db, h.verify, anchorFile)) {
        expect(c).toMatchObject({ intact: true, ankerSeq: OLD_PER_TENANT, retentieSeq: OLD_PER_TENANT, eersteSeq: OLD_PER_TENANT + 1, aantalEntries: NEW_PER_TENANT });
      }
      // One signed record per tenant: the reruns found their prefixes covered already.
      const records = (await h.db.get<{ n: number }>("SELECT count(*) AS n FROM audit_anchor_log WHERE soort = 'retentie'"))!;
      expect(records.n).toBe(TENANTS);
      expect((await lastRun(h.db, "audit-retentie")).uitkomst).toBe("ok");
      const deletedBefore = TENANTS * OLD_PER_TENANT - body.verwijderd;
      expect(deletedBefore).toBeGreaterThan(0);
    });
    const after = await takenControle(db);
    expect(after.body.taken.find((t) => t.job === "audit-retentie")?.status).toBe("ok");
  }, 60_000);

  test("beveiligingslog-retentie (3 kills): whole batches only, recent attempts untouched; the rerun deletes exactly the rest", async () => {
    const db = await makeDatabase();
    const probe = await open(db, { readonly: true });
    const left = async () => (await probe.db.get<{ n: number }>("SELECT count(*) AS n FROM login_attempts"))!.n;
    const deleted = async () => OLD_LOGINS + NEW_LOGINS - (await left());
    // A batch may take many rows on a fast machine: once a kill came after the last old
    // row went (before the run's end was written), there is nothing left to kill during.
    // Nor when the kill lands after the run wrote its end: that round checks the finished state.
    let finished = false;
    for (let round = 0; round < 3 && !finished && (await deleted()) < OLD_LOGINS; round++) {
      const svc = await startService(env(db));
      const before = await deleted();
      const { answered } = await killDuring(svc, "beveiligingslog-retentie", deleted, before + 1 + Math.floor(rand() * (OLD_LOGINS - before) * 0.5), probe, { mayFinish: true });
      await inspect(db, async (h) => {
        const n = (await h.db.get<{ n: number }>("SELECT count(*) AS n FROM login_attempts"))!.n;
        const recent = (await h.db.get<{ n: number }>("SELECT count(*) AS n FROM login_attempts WHERE tijdstip >= ?", new Date(now - 31 * DAY).toISOString()))!.n;
        expect(recent).toBe(NEW_LOGINS);
        // A batch is all or nothing and the oldest go first: what is left of the old
        // ones is exactly a suffix in time, whatever size the batches had (none left: the
        // oldest is the first recent one).
        const oldest = (await h.db.get<{ m: string }>("SELECT min(tijdstip) AS m FROM login_attempts"))!;
        const firstLeft = n > NEW_LOGINS ? now - 200 * DAY + (OLD_LOGINS + NEW_LOGINS - n) * 1000 : now - 30 * DAY;
        expect(oldest.m).toBe(new Date(firstLeft).toISOString());
        const run = await lastRun(h.db, "beveiligingslog-retentie");
        if (run.uitkomst === "ok" && n === NEW_LOGINS) finished = true;
        else expect(run).toEqual({ uitkomst: "bezig", beeindigd: null });
        // A job that answered had finished: its end written, every old attempt gone.
        if (answered) expect(finished).toBe(true);
      });
    }
    const gone = await deleted();
    await probe.close();
    const svc = await startService(env(db));
    const r = await fetch(`${svc.url}/api/cron/beveiligingslog-retentie`, { method: "POST", headers: { authorization: `Bearer ${SECRET}` } });
    expect(r.status).toBe(200);
    expect(((await r.json()) as { verwijderd: number }).verwijderd).toBe(OLD_LOGINS - gone);
    svc.proc.kill("SIGTERM");
    expect(await svc.exited).toBe(0);
    await inspect(db, async (h) => expect((await h.db.get<{ n: number }>("SELECT count(*) AS n FROM login_attempts"))!.n).toBe(NEW_LOGINS));
  }, 60_000);

  test("weekrapport to a real SMTP server (4 kills): nobody gets a report twice; whatever did not surely arrive is named (onzeker + alarm), nothing silently lost", async () => {
    const db = await makeDatabase();
    const all = TENANTS * ADMINS_PER_TENANT;
    delivered.length = 0;
    const probe = await open(db, { readonly: true });
    const recorded = async () => (await probe.db.get<{ n: number }>("SELECT count(*) AS n FROM weekly_report_deliveries WHERE verstuurd <> 'verzenden'"))!.n;
    /** Per kill: messages the server had accepted that the service had not yet recorded. */
    const unrecorded: number[] = [];
    for (let round = 0; round < 4; round++) {
      const svc = await startService(env(db, { SMTP_URL: smtp.url }));
      const before = delivered.length;
      // Kill right after the server accepted a random number more of this run's
      // messages: the worst moment, with the newest one accepted but not yet recorded.
      await killDuring(svc, "weekrapport", async () => delivered.length, Math.min(all - 1, before + 1 + Math.floor(rand() * (all - before) * 0.4)), probe);
      unrecorded.push(delivered.length - (await recorded()));
      await inspect(db, async (h) => expect(await lastRun(h.db, "weekrapport")).toEqual({ uitkomst: "bezig", beeindigd: null }));
    }
    const svc = await startService(env(db, { SMTP_URL: smtp.url }));
    const r = await fetch(`${svc.url}/api/cron/weekrapport`, { method: "POST", headers: { authorization: `Bearer ${SECRET}` } });
    const body = (await r.json()) as { verstuurd: number; fouten: number; overgeslagen: number; onzeker?: number };
    // Messages a killed run left uncertain make the rerun an afwijking (409), never a fout: none of them is sent again.
    expect(r.status).toBe(body.onzeker ? 409 : 200);
    svc.proc.kill("SIGTERM");
    expect(await svc.exited).toBe(0);
    await probe.close();

    const perRecipient = new Map<string, number>();
    for (const to of delivered) perRecipient.set(to, (perRecipient.get(to) ?? 0) + 1);
    const twice = [...perRecipient].filter(([, n]) => n > 1);
    let uncertain: string[] = [];
    await inspect(db, async (h) => {
      uncertain = (
        await h.db.all<{ email: string }>("SELECT a.email FROM weekly_report_deliveries d JOIN administrators a ON a.id = d.administrator_id WHERE d.verstuurd = 'verzenden'")
      ).map((r) => r.email);
      expect((await lastRun(h.db, "weekrapport")).uitkomst).toBe(uncertain.length > 0 ? "afwijking" : "ok");
    });
    console.log(
      `weekrapport (seed ${SEED}, ${DIALECT}): ${delivered.length} messages for ${all} administrators; accepted but unrecorded at each kill: ${unrecorded.join(", ")}; ` +
        `uncertain after the rerun: ${uncertain.length} (of which arrived: ${uncertain.filter((e) => perRecipient.has(e)).length}); sent twice: ${twice.length}`,
    );
    expect(twice).toEqual([]);
    expect(body.fouten).toBe(0);
    expect(body.verstuurd + body.overgeslagen).toBe(all);
    expect(body.onzeker ?? 0).toBe(uncertain.length);
    // Everyone either has the report or is named as uncertain: nothing silently lost.
    const missing = Array.from({ length: TENANTS }, (_, t) => Array.from({ length: ADMINS_PER_TENANT }, (_, a) => `admin${a}@tenant${t + 1}.test`))
      .flat()
      .filter((e) => !perRecipient.has(e));
    expect(missing.filter((e) => !uncertain.includes(e))).toEqual([]);
    // At most the messages in flight at each kill are uncertain.
    expect(uncertain.length).toBeLessThanOrEqual(4 * 5);
    if (uncertain.length > 0) {
      const alarm = svc.output().split("\n").find((l) => l.includes('"alarm":"mail-failure"'));
      expect(alarm).toContain("niet bekend of ze aankwamen");
    }
  }, 60_000);

  test("an append burst from the host application (3 kills of the appender, the service running audit-verificatie meanwhile): every chain verifies, no gap, appends continue", async () => {
    const db = await makeDatabase();
    const svc = await startService(env(db));
    const probe = await open(db, { readonly: true });
    const head = async () => (await probe.db.get<{ m: number }>("SELECT max(seq) AS m FROM audit_entries WHERE tenant_id = 2"))!.m;
    const start = await head();
    for (let round = 0; round < 3; round++) {
      const a = appenderCommand(db, 2, 100_000, `burst${round}`);
      const appender = Bun.spawn(a.cmd, { cwd: ROOT, ...(a.env ? { env: a.env } : {}), stdout: "ignore", stderr: "pipe" });
      const before = await head();
      const target = before + 20 + Math.floor(rand() * 400);
      const verification = fetch(`${svc.url}/api/cron/audit-verificatie`, { method: "POST", headers: { authorization: `Bearer ${SECRET}` } });
      for (let i = 0; (await head()) < target && i < 10_000; i++) await Bun.sleep(1);
      appender.kill("SIGKILL");
      await appender.exited;
      expect(appender.signalCode).toBe("SIGKILL");
      const v = await verification;
      expect(v.status).toBe(200);
      expect(((await v.json()) as { aantalGebroken: number }).aantalGebroken).toBe(0);
      await inspect(db, async (h) => {
        for (const c of await verifyAllOn(h.db, h.verify)) expect(c.intact).toBe(true);
        const seqs = (await h.db.get<{ n: number; m: number }>("SELECT count(*) AS n, max(seq) AS m FROM audit_entries WHERE tenant_id = 2"))!;
        expect(seqs.n).toBe(seqs.m); // 1..m without a gap
      });
    }
    expect(await head()).toBeGreaterThan(start);
    await probe.close();
    // After the kills the chain simply goes on.
    const a = appenderCommand(db, 2, 50, "after");
    const more = Bun.spawnSync(a.cmd, { cwd: ROOT, ...(a.env ? { env: a.env } : {}) });
    expect(more.exitCode).toBe(0);
    const v = await fetch(`${svc.url}/api/cron/audit-verificatie`, { method: "POST", headers: { authorization: `Bearer ${SECRET}` } });
    expect(v.status).toBe(200);
    svc.proc.kill("SIGTERM");
    expect(await svc.exited).toBe(0);
  }, 60_000);
});
