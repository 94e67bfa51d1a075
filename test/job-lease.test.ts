// The "already running" guard across processes (src/job-lease.ts): the service started
// twice from source on one database file, as two REAL processes. dagrapport is made to
// run as long as the test wants by a real SMTP server that holds its reply to the DATA
// command until the test releases it. Then: the second instance refuses the job with
// 409 while the first runs it; a SIGKILLed holder's lease is taken over at once (its
// pid is gone from this host); a holder that lives but stopped renewing (SIGSTOP)
// keeps the job until its lease expires, and then loses it. While another process holds
// the database's write lock, a job call waits for it without stalling the service
// (/health answers meanwhile), and past the wait it is answered 503 and recorded. Below,
// the lease functions themselves on one database, also under a held write lock.
// On both stores (test/dialect.ts): on the PostgreSQL run the instances share a fresh
// database of the run's cluster (DATABASE_URL), and what another process holds is the
// run's job_runs row where SQLite has its write lock; the tests of a lease take waiting
// for SQLite's write lock are defined on the SQLite run only (PostgreSQL has no such lock).
import { Database } from "bun:sqlite";
import { afterAll, afterEach, beforeAll, describe, expect, spyOn, test } from "bun:test";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { SMTPServer } from "smtp-server";
import { holderGone, leaseTiming, liveLeases, newLeaseHolder, releaseLease, renewLease, startLeasedRun, startRenewing, type JobLease, type LeaseHolder } from "../src/job-lease.ts";
import { openStore } from "../src/db.ts";
import type { AnyStore } from "../src/deps.ts";
import { liveLeasesPg } from "../src/pg/job-lease.ts";
import { openPgStore } from "../src/pg/store.ts";
import { TEST_SEAL, call, NOW, SECRET, tempDir, TEST_SIGNING_KEY, until } from "./helpers.ts";
import { DIALECT, makeEnv, sqliteOnly, testCluster, testDb } from "./dialect.ts";
import { defineJob } from "../src/jobs/job.ts";
import { createApp } from "../src/app.ts";
import { startService } from "./fixtures/hardening.ts";
import { RETURNED } from "./fixtures/server-marked-end.ts";
import { holdLeaseLock, holdRunEnd, holdWriteLock } from "./ingest-fixtures.ts";

const ROOT = resolve(import.meta.dir, "..");
const RECIPIENT = "ops@example.test";


// ---------------------------------------------------------------- an SMTP server that holds its reply

interface HoldingSmtp {
  url: string;
  /** Messages whose DATA reply is being held. */
  held: number;
  /** Messages accepted (answered 250). */
  accepted: number;
  /** From now on, hold the reply to every message until release(). */
  hold(): void;
  release(): void;
  stop(): Promise<void>;
}

async function holdingSmtp(): Promise<HoldingSmtp> {
  let holding = false;
  let open: () => void = () => {};
  let gate = Promise.resolve();
  const state = {
    url: "",
    held: 0,
    accepted: 0,
    hold() {
      holding = true;
      gate = new Promise<void>((r) => (open = r));
    },
    release() {
      holding = false;
      open();
    },
    stop: () => new Promise<void>((r) => server.close(() => r())),
  };
  const server = new SMTPServer({
    authOptional: true,
    disableReverseLookup: true,
    hideSTARTTLS: true,
    closeTimeout: 100,
    logger: false,
    onData(stream, _session, callback) {
      stream.on("data", () => {});
      stream.on("end", async () => {
        if (holding) {
          state.held++;
          await gate;
        }
        state.accepted++;
        callback();
      });
    },
  });
  // A client killed mid-conversation resets its connection: expected here.
  server.on("error", () => {});
  await new Promise<void>((res, rej) => {
    server.once("error", rej);
    server.listen(0, "127.0.0.1", () => res());
  });
  state.url = `smtp://127.0.0.1:${(server.server.address() as { port: number }).port}`;
  return state;
}

// ---------------------------------------------------------------- the service as a process

interface Instance {
  url: string;
  pid: number;
  proc: ReturnType<typeof Bun.spawn>;
  output(): string;
  exited: Promise<number | null>;
}

const children: Instance[] = [];

async function startInstance(env: Record<string, string>, entry?: string): Promise<Instance> {
  const instance = await startService(env, entry);
  children.push(instance);
  return instance;
}

async function post(i: Instance, job: string, body?: object): Promise<{ status: number; json: any }> {
  const r = await fetch(`${i.url}/api/cron/${job}`, { method: "POST", headers: { authorization: `Bearer ${SECRET}` }, body: body ? JSON.stringify(body) : undefined });
  return { status: r.status, json: await r.json() };
}

let smtp: HoldingSmtp;
const dirs: (() => unknown)[] = [];

beforeAll(async () => {
  smtp = await holdingSmtp();
});

afterEach(async () => {
  smtp.release();
  for (const c of children.splice(0)) {
    if (c.proc.exitCode === null && c.proc.signalCode === null) {
      c.proc.kill("SIGKILL");
    }
    await c.exited;
  }
  for (const d of dirs.splice(0)) await d();
});

afterAll(async () => {
  await smtp.stop();
});

/** The database the instances share, and the test's own access to it (plain SQL, `?` placeholders, as test/dialect.ts's TestDb). */
interface SharedDatabase {
  /** The SQLite file (also set on PostgreSQL, where the service ignores it for its data). */
  path: string;
  /** The PostgreSQL database's URL (DATABASE_URL); undefined on SQLite. */
  url?: string;
  env: Record<string, string>;
  all<T>(sql: string, ...params: (string | number)[]): Promise<T[]>;
  run(sql: string, ...params: (string | number)[]): Promise<void>;
}

/**
 * A database installed just now (so taken-controle expects nothing yet) and the
 * environment of an instance on it: a SQLite file, or on the PostgreSQL run a new
 * database of the run's cluster (DATABASE_URL; each instance marks it installed at its
 * start). On SQLite every read opens the file read-only and closes it again, so the test
 * holds no connection between its steps.
 */
async function sharedDatabase(): Promise<SharedDatabase> {
  const { dir, cleanup } = tempDir("nachtwacht-lease-");
  dirs.push(cleanup);
  const path = join(dir, "data", "nachtwacht.db");
  const env: Record<string, string> = {
    CRON_SECRET: SECRET,
    AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY,
    DATABASE_PATH: path,
    AUDIT_ANKER_BESTAND: join(dir, "ankers.jsonl"),
    SMTP_URL: smtp.url,
    DAGRAPPORT_EMAIL: RECIPIENT,
    HOME: dir,
  };
  if (DIALECT === "sqlite") {
    openStore(path).close();
    return {
      path,
      env,
      async all<T>(sql: string, ...params: (string | number)[]) {
        const s = new Database(path, { readonly: true });
        try {
          return s.query(sql).all(...params) as T[];
        } finally {
          s.close();
        }
      },
      async run(sql: string, ...params: (string | number)[]) {
        const w = new Database(path);
        try {
          w.run("PRAGMA busy_timeout = 5000");
          w.query(sql).run(...params);
        } finally {
          w.close();
        }
      },
    };
  }
  const url = await (await testCluster()).createDatabase();
  // Migrated here, as openStore does on SQLite: the instances then start on the same schema at once.
  const store = await openPgStore(url, { max: 1 });
  dirs.push(() => store.close());
  const db = testDb(store);
  return { path, url, env: { ...env, DATABASE_URL: url }, all: (sql, ...params) => db.all(sql, ...params), run: (sql, ...params) => db.run(sql, ...params) };
}

const leaseOf = async (db: SharedDatabase, job: string) =>
  (await db.all<{ pid: number; instantie: string; run_id: number; verloopt: string }>("SELECT pid, instantie, run_id, verloopt FROM job_leases WHERE job = ?", job))[0];
const runsOf = (db: SharedDatabase, job: string) =>
  db.all<{ id: number; uitkomst: string; beeindigd: string | null }>("SELECT id, uitkomst, beeindigd FROM job_runs WHERE job = ? ORDER BY id", job);
const dagrapportOf = (body: { taken: { job: string }[] }) => body.taken.find((t) => t.job === "dagrapport") as any;

/** Starts dagrapport on `i` with the SMTP reply held; resolves once its message is held (the job is mid-run), with its answer to come. */
async function holdDagrapport(i: Instance): Promise<{ answer: Promise<{ status: number; json: any }> }> {
  smtp.hold();
  const heldBefore = smtp.held;
  const answer = post(i, "dagrapport");
  answer.catch(() => {}); // a killed holder never answers; the tests that care await it
  await until("dagrapport's message to be held", () => smtp.held > heldBefore);
  return { answer };
}

describe("the lease across two real processes on one database", () => {
  test("a job running in instance A is refused in instance B with 409 {error} naming A; once A finished (200) B runs it", async () => {
    const db = await sharedDatabase();
    const a = await startInstance(db.env);
    const b = await startInstance(db.env);

    const { answer: first } = await holdDagrapport(a);
    const lease = (await leaseOf(db, "dagrapport"))!;
    expect(lease.pid).toBe(a.pid);

    const refused = await post(b, "dagrapport");
    expect(refused.status).toBe(409);
    expect(Object.keys(refused.json)).toEqual(["error"]);
    expect(refused.json.error).toStartWith("De taak dagrapport loopt al in een ander proces");
    expect(refused.json.error).toContain(`pid ${a.pid}`);
    // The refused call left no run: only A's, still going.
    expect(await runsOf(db, "dagrapport")).toEqual([{ id: lease.run_id, uitkomst: "bezig", beeindigd: null }]);

    // B's taken-controle sees A's run alive through the lease.
    const tc = await post(b, "taken-controle");
    expect(tc.status).toBe(200);
    expect(dagrapportOf(tc.json)).toMatchObject({ status: "loopt", levend: "ander-proces", houder: { pid: a.pid } });

    smtp.release();
    const done = await first;
    expect(done.status).toBe(200);
    expect(done.json).toMatchObject({ ok: true, verzonden: true, ontvanger: RECIPIENT });
    expect(await leaseOf(db, "dagrapport")).toBeUndefined();

    const second = await post(b, "dagrapport");
    expect(second.status).toBe(200);
    expect((await runsOf(db, "dagrapport")).map((r) => r.uitkomst)).toEqual(["ok", "ok"]);
    expect(await leaseOf(db, "dagrapport")).toBeUndefined();

    for (const i of [a, b]) {
      i.proc.kill("SIGTERM");
      expect(await i.exited).toBe(0);
    }
  }, 60_000);

  test("a SIGKILLed holder: its run is onderbroken and its lease is taken over at once (its pid is gone); a holder that stopped renewing (SIGSTOP) keeps the job until its lease expires; neither's report is sent twice", async () => {
    const db = await sharedDatabase();
    const a = await startInstance(db.env);
    const b = await startInstance(db.env);

    // A dies in the middle of the job; its lease row stays behind, not yet expired.
    const killedAnswer = (await holdDagrapport(a)).answer.catch(() => "killed" as const);
    const left = (await leaseOf(db, "dagrapport"))!;
    a.proc.kill("SIGKILL");
    await a.exited;
    expect(await killedAnswer).toBe("killed");
    expect(await leaseOf(db, "dagrapport")).toEqual(left);
    expect(left.verloopt > new Date().toISOString()).toBe(true);
    // The server has A's whole report and takes it once its reply is released: it arrives.
    const acceptedBefore = smtp.accepted;
    smtp.release();
    await until("A's report to be accepted", () => smtp.accepted === acceptedBefore + 1);

    const tc = await post(b, "taken-controle");
    expect(tc.status).toBe(409);
    expect(dagrapportOf(tc.json)).toMatchObject({ status: "onderbroken" });
    expect(tc.json.onderbroken).toEqual(["dagrapport"]);
    expect(b.output()).toContain('"alarm":"job-interrupted"');

    // B takes the job over; A stopped while its report went out (its send mark), so B does
    // not send a second copy: 409, perhaps delivered.
    const taken = await post(b, "dagrapport");
    expect(taken.status).toBe(409);
    expect(taken.json).toMatchObject({ verzonden: false, mogelijkAfgeleverd: true });
    expect(taken.json.error).toContain(`run ${left.run_id}`);
    expect(smtp.accepted).toBe(acceptedBefore + 1);
    expect(b.output()).toContain('"reden":"proces-weg"');
    expect((await runsOf(db, "dagrapport")).map((r) => r.uitkomst)).toEqual(["bezig", "afwijking"]);
    expect(await leaseOf(db, "dagrapport")).toBeUndefined();

    // C holds the job and is stopped: alive, but no longer renewing.
    const c = await startInstance(db.env);
    await holdDagrapport(c);
    const held = (await leaseOf(db, "dagrapport"))!;
    expect(held.pid).toBe(c.pid);
    c.proc.kill("SIGSTOP");
    const acceptedBeforeC = smtp.accepted;
    smtp.release();
    await until("C's report to be accepted", () => smtp.accepted === acceptedBeforeC + 1);
    const refused = await post(b, "dagrapport");
    expect(refused.status).toBe(409);
    expect(refused.json.error).toContain(`pid ${c.pid}`);
    expect(dagrapportOf((await post(b, "taken-controle")).json)).toMatchObject({ status: "loopt", levend: "ander-proces", houder: { pid: c.pid } });

    // Its expiry passes without a renewal (written, sealed as the holder would, instead of waiting the 90 seconds).
    const [lease] = await db.all<{ pid: number; instantie: string; host: string; pid_ns: string | null; run_id: number }>("SELECT pid, instantie, host, pid_ns, run_id FROM job_leases WHERE job = 'dagrapport'");
    const past = new Date(Date.now() - 1000).toISOString();
    const resealed = TEST_SEAL.sealLease({ job: "dagrapport", pid: lease!.pid, instantie: lease!.instantie, host: lease!.host, pidNs: lease!.pid_ns, runId: lease!.run_id, verloopt: past });
    await db.run("UPDATE job_leases SET verloopt = ?, zegel = ? WHERE job = 'dagrapport'", past, resealed);
    expect(dagrapportOf((await post(b, "taken-controle")).json)).toMatchObject({ status: "onderbroken" });
    // C's report went out while C was frozen: B's takeover does not send it again either.
    const after = await post(b, "dagrapport");
    expect(after.status).toBe(409);
    expect(after.json).toMatchObject({ mogelijkAfgeleverd: true });
    expect(smtp.accepted).toBe(acceptedBeforeC + 1);
    expect(b.output()).toContain('"reden":"verlopen"');
    expect((await runsOf(db, "dagrapport")).map((r) => r.uitkomst)).toEqual(["bezig", "afwijking", "bezig", "afwijking"]);
    expect(await leaseOf(db, "dagrapport")).toBeUndefined();

    c.proc.kill("SIGKILL");
    await c.exited;
    b.proc.kill("SIGTERM");
    expect(await b.exited).toBe(0);
  }, 60_000);
});

describe("a job that is not exclusive (backup-status) across two real processes on one database", () => {
  test("two hosts' backup reports at the same moment are both stored: while A's failure report waits for its alarm mail, B's success (and a second one in A) are answered 200, not 409; each call its own run, no lease, the witness holds the newest", async () => {
    const db = await sharedDatabase();
    const a = await startInstance(db.env);
    const b = await startInstance(db.env);

    // A's failure report holds its call (and, before, would have held the job) while its alarm mail waits for the server.
    smtp.hold();
    const heldBefore = smtp.held;
    const first = post(a, "backup-status", { exitCode: 74, foutmelding: "host A: schijf vol" });
    await until("A's alarm mail to be held", () => smtp.held > heldBefore);
    expect((await runsOf(db, "backup-status")).map((r) => r.uitkomst)).toEqual(["bezig"]);

    const second = await post(b, "backup-status", { exitCode: 0, bestandsnaam: "nachtwacht-hostB.pgdump", grootte: 123 });
    expect(second).toEqual({ status: 200, json: { ok: true, gelukt: true } });
    // In the same process too.
    const third = await post(a, "backup-status", { exitCode: 0, bestandsnaam: "nachtwacht-hostA.pgdump", grootte: 456 });
    expect(third).toEqual({ status: 200, json: { ok: true, gelukt: true } });
    expect(await leaseOf(db, "backup-status")).toBeUndefined();

    smtp.release();
    expect(await first).toEqual({ status: 200, json: { ok: true, gelukt: false } });
    const reports = await db.all<{ exit_code: number; bestandsnaam: string | null; ontvangen: string }>("SELECT exit_code, bestandsnaam, ontvangen FROM backup_statuses ORDER BY id");
    expect(reports.map((r) => [r.exit_code, r.bestandsnaam])).toEqual([
      [74, null],
      [0, "nachtwacht-hostB.pgdump"],
      [0, "nachtwacht-hostA.pgdump"],
    ]);
    expect((await runsOf(db, "backup-status")).map((r) => r.uitkomst)).toEqual(["ok", "ok", "ok"]);
    // Of the reports this host's processes received, the newest is witnessed beside the anchor file.
    const newest = reports.map((r) => r.ontvangen).sort().at(-1)!;
    expect(readFileSync(join(dirname(db.env.AUDIT_ANKER_BESTAND!), "laatste-backupmelding"), "utf8").trim()).toBe(newest);
    // The one error logged is the alarm itself.
    const errors = (a.output() + b.output()).split("\n").filter((l) => l.includes('"level":"error"'));
    expect(errors.map((l) => JSON.parse(l).alarm)).toEqual(["backup-failure"]);
  }, 60_000);
});

describe("another process holding the database's write lock (the host application, a backup)", () => {
  // SQLite's database-wide write lock, taken by another process: PostgreSQL has none (it
  // locks rows), so these are defined on the SQLite run only.
  sqliteOnly("a job call waits for the lock without stalling the service: /health is answered while it waits; once the lock is free the job runs (200), one run, no lease left", async () => {
    const db = await sharedDatabase();
    const s = await startInstance(db.env);
    const lock = await holdWriteLock(db.path);
    const order: string[] = [];
    const job = post(s, "taken-controle").then((r) => (order.push("job"), r));
    job.catch(() => {});
    try {
      // /health lists the job once its call is in the job wrapper; it can only do so while
      // that call waits for the lock if the wait leaves the event loop free.
      const health = await until("/health to list taken-controle as running", async () => {
        if (order.includes("job")) throw new Error(`the job call was answered before /health could list it (the lock wait stalled the service): ${JSON.stringify(await job)}`);
        const h = await fetch(`${s.url}/health`);
        const body = (await h.json()) as { status: string; database: string; lopendeTaken: string[] };
        return h.status === 200 && body.lopendeTaken.includes("taken-controle") ? body : undefined;
      });
      order.push("health");
      expect(health).toEqual({ status: "ok", database: "bereikbaar", lopendeTaken: ["taken-controle"] });
      // Still waiting: nothing of the run is written yet.
      expect(await runsOf(db, "taken-controle")).toEqual([]);
      expect(await leaseOf(db, "taken-controle")).toBeUndefined();
    } finally {
      await lock.release();
    }
    order.push("released");
    const r = await job;
    expect(order).toEqual(["health", "released", "job"]);
    expect(r.status).toBe(200);
    expect(r.json.ok).toBe(true);
    expect(await runsOf(db, "taken-controle")).toEqual([{ id: 1, uitkomst: "ok", beeindigd: expect.any(String) }]);
    expect(await leaseOf(db, "taken-controle")).toBeUndefined();
    expect(s.output()).not.toContain('"alarm"');
    s.proc.kill("SIGTERM");
    expect(await s.exited).toBe(0);
  }, 60_000);

  test("a lock held past the wait (5 s): on SQLite (the write lock) 503 {error} naming SQLITE_BUSY with Retry-After, a warning and no alarm, the call recorded as fout/503; on PostgreSQL (the lease's lock, which only a hung instance holds that long) onError's 503 with an alarm; no lease", async () => {
    const db = await sharedDatabase();
    const s = await startInstance(db.env);
    const lock = await holdLeaseLock(db);
    let r: Response;
    let body: { error: string };
    try {
      // The lock is held until the answer has come: past the wait, whatever it takes.
      r = await fetch(`${s.url}/api/cron/taken-controle`, { method: "POST", headers: { authorization: `Bearer ${SECRET}` } });
      body = (await r.json()) as { error: string };
      // Not recorded while the lock is taken.
      expect(await runsOf(db, "taken-controle")).toEqual([]);
    } finally {
      await lock.release();
    }
    expect(r.status).toBe(503);
    expect(r.headers.get("retry-after")).toBe("60");
    expect(Object.keys(body)).toEqual(["error"]);
    if (DIALECT === "sqlite") {
      expect(body.error).toStartWith("De database is bezet (SQLITE_BUSY");
      expect(body.error).toContain("taken-controle is niet gestart");
      const recorded = await until("the refused call to be recorded", async () => {
        const rows = await db.all<{ uitkomst: string; http_status: number; fout: string; beeindigd: string | null }>(
          "SELECT uitkomst, http_status, fout, beeindigd FROM job_runs WHERE job = 'taken-controle'",
        );
        return rows.length > 0 && rows;
      });
      expect(recorded).toEqual([{ uitkomst: "fout", http_status: 503, fout: body.error, beeindigd: expect.any(String) }]);
      // Written before the answer, but read from a pipe: wait for it rather than race it.
      await until("the refusal's log line", () => s.output().includes("the database write lock stayed taken by another process; the job was not started and answered 503"));
      expect(s.output()).not.toContain('"alarm"');
    } else {
      expect(body.error).toBe("De database is tijdelijk niet beschikbaar (55P03); probeer het later opnieuw.");
      await until("the alarm", () => s.output().includes('"alarm":"internal-error"'));
      // No run was started: nothing to record, nothing written after the answer.
      expect(await runsOf(db, "taken-controle")).toEqual([]);
    }
    expect(await leaseOf(db, "taken-controle")).toBeUndefined();

    // The lock is free: the next call runs.
    expect((await post(s, "taken-controle")).status).toBe(200);
    expect((await runsOf(db, "taken-controle")).map((x) => x.uitkomst)).toEqual(DIALECT === "sqlite" ? ["fout", "ok"] : ["ok"]);
    expect(await leaseOf(db, "taken-controle")).toBeUndefined();
    s.proc.kill("SIGTERM");
    expect(await s.exited).toBe(0);
  }, 60_000);
});

describe("a job that ends while another process holds the database's write lock (on PostgreSQL: the run's row)", () => {
  // PostgreSQL has no database-wide write lock: there the run's end waits for its job_runs
  // row, held FOR UPDATE by another connection's transaction (holdRunEnd), and past the
  // wait it is kept as an end that "did not get through in time" (src/http/job-route.ts
  // writeEnd), as SQLite keeps one that met SQLITE_BUSY.
  // dagrapport (real, its SMTP reply held) prints RETURNED the moment its run returned:
  // from then on the job wrapper is writing the run's end.
  const MARKED_SQLITE = join(ROOT, "test/fixtures/server-marked-end.ts");
  /**
   * The entry to start: test/fixtures/server-marked-end.ts on SQLite. That fixture starts
   * startServer (SQLite) only; on PostgreSQL the same marked dagrapport is served by
   * startPgServer from a copy written beside the test's database (made here, so that no
   * shared fixture changes).
   */
  function marked(db: SharedDatabase): string {
    if (db.url === undefined) return MARKED_SQLITE;
    const entry = join(dirname(db.path), "server-marked-end-pg.ts");
    const src = (f: string) => JSON.stringify(join(ROOT, f));
    mkdirSync(dirname(entry), { recursive: true });
    writeFileSync(
      entry,
      `import { parseConfig } from ${src("src/config.ts")};
import { ALL_JOBS } from ${src("src/jobs/index.ts")};
import { dagrapportJob } from ${src("src/jobs/dagrapport.ts")};
import { defineJob } from ${src("src/jobs/job.ts")};
import { startPgServer } from ${src("src/server.ts")};
import { RETURNED } from ${JSON.stringify(MARKED_SQLITE)};
const marked = defineJob({
  ...dagrapportJob,
  run: async (deps, now, input, context) => {
    const result = await dagrapportJob.run(deps, now, input, context);
    process.stdout.write(\`\${RETURNED}\n\`);
    return result;
  },
});
const config = parseConfig(process.env);
await startPgServer(config, config.databaseUrl!, { jobs: [...ALL_JOBS.filter((j) => j.name !== "dagrapport"), marked] });
`,
    );
    return entry;
  }
  const errorLines = (i: Instance) => i.output().split("\n").filter((l) => l.includes('"level":"error"'));

  /** dagrapport on `s`, mid-run (its mail held), the lock taken by another process, then the mail let through: resolves once the job's run returned. */
  async function endUnderLock(s: Instance, db: SharedDatabase) {
    const { answer } = await holdDagrapport(s);
    const lock = await holdRunEnd(db, "dagrapport");
    const order: string[] = [];
    void answer.then(() => order.push("job"), () => {});
    smtp.release();
    await until("dagrapport's run to return", () => s.output().includes(RETURNED));
    return { answer, lock, order };
  }

  test("/health is answered while the run's end waits for the lock; once the lock is free the job answers 200, its run is ok with its end, no lease is left, nothing logged as an error", async () => {
    const db = await sharedDatabase();
    const s = await startInstance(db.env, marked(db));
    const { answer, lock, order } = await endUnderLock(s, db);
    try {
      // The job's run has returned: its wrapper now waits for the lock to write the end.
      // /health can only answer now if that wait leaves the event loop free.
      const h = await fetch(`${s.url}/health`);
      order.push("health");
      expect(h.status).toBe(200);
      expect(await h.json()).toEqual({ status: "ok", database: "bereikbaar", lopendeTaken: ["dagrapport"] });
      // Still waiting (not given up): nothing written, nothing logged as an error.
      expect(errorLines(s)).toEqual([]);
      expect(await runsOf(db, "dagrapport")).toEqual([{ id: 1, uitkomst: "bezig", beeindigd: null }]);
      expect(await leaseOf(db, "dagrapport")).toMatchObject({ pid: s.pid, run_id: 1 });
    } finally {
      // Before the release: the answer can only follow it.
      order.push("releasing");
      await lock.release();
    }
    const r = await answer;
    expect(order).toEqual(["health", "releasing", "job"]);
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ ok: true, verzonden: true, ontvanger: RECIPIENT });
    expect(await runsOf(db, "dagrapport")).toEqual([{ id: 1, uitkomst: "ok", beeindigd: expect.any(String) }]);
    expect(await leaseOf(db, "dagrapport")).toBeUndefined();
    expect(errorLines(s)).toEqual([]);
    expect(s.output()).not.toContain('"alarm"');
    s.proc.kill("SIGTERM");
    expect(await s.exited).toBe(0);
  }, 60_000);

  test("a lock held past the end's wait (5 s): the job's 200 goes out while it is held (a warning, no error); the end and the lease's release follow once it is free", async () => {
    const db = await sharedDatabase();
    const s = await startInstance(db.env, marked(db));
    const { answer, lock, order } = await endUnderLock(s, db);
    let r: { status: number; json: any };
    try {
      // The lock is held until the answer has come: past the wait, whatever it takes.
      r = await answer;
      order.push("answered");
      // The run's end is kept: this process's taken-controle would judge the run by it,
      // and its lease stays until the end is written.
      expect(await runsOf(db, "dagrapport")).toEqual([{ id: 1, uitkomst: "bezig", beeindigd: null }]);
      expect(await leaseOf(db, "dagrapport")).toMatchObject({ pid: s.pid, run_id: 1 });
      // Each store's warning for a kept end (src/http/job-route.ts writeEnd): SQLITE_BUSY past the wait, or PostgreSQL's deadline passed.
      const deferred =
        db.url === undefined
          ? "the database write lock stayed taken by another process; the run's end is recorded once it is free, after the answer"
          : "the run's end did not get through to the database in time; it is recorded after the answer";
      await until("the deferred end's log line", () => s.output().includes(deferred));
      expect(errorLines(s)).toEqual([]);
    } finally {
      order.push("releasing");
      await lock.release();
    }
    expect(order).toEqual(["job", "answered", "releasing"]);
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ ok: true, verzonden: true, ontvanger: RECIPIENT });
    await until("the end and the release after the lock", async () => (await runsOf(db, "dagrapport"))[0]!.uitkomst === "ok" && (await leaseOf(db, "dagrapport")) === undefined);
    expect(await runsOf(db, "dagrapport")).toEqual([{ id: 1, uitkomst: "ok", beeindigd: expect.any(String) }]);
    const row = (await db.all<{ http_status: number; samenvatting: string }>("SELECT http_status, samenvatting FROM job_runs WHERE id = 1"))[0]!;
    expect(row.http_status).toBe(200);
    // The answer as the run's summary, cut off at its bound (4,000 characters) when longer.
    expect(row.samenvatting.length).toBeLessThanOrEqual(4000);
    expect(JSON.stringify(r.json).startsWith(row.samenvatting.replace(/…$/, ""))).toBe(true);
    // The log line is written before the lease is released, but reaches us through a pipe: wait for it.
    await until("the late end's log line", () => s.output().includes("the end of a run was recorded once the database write lock was free"));
    expect(errorLines(s)).toEqual([]);
    expect(s.output()).not.toContain('"alarm"');
    s.proc.kill("SIGTERM");
    expect(await s.exited).toBe(0);
  }, 60_000);

  test("SIGTERM while the end waits after the answer: shutdown waits for it; the lock freed meanwhile, the run is ok and its lease gone before the process exits 0", async () => {
    const db = await sharedDatabase();
    const s = await startInstance(db.env, marked(db));
    const { answer, lock } = await endUnderLock(s, db);
    try {
      expect((await answer).status).toBe(200);
      s.proc.kill("SIGTERM");
      await until("the shutdown to start", () => s.output().includes('"message":"shutting down"'));
      expect((await runsOf(db, "dagrapport"))[0]!.uitkomst).toBe("bezig");
    } finally {
      await lock.release();
    }
    expect(await s.exited).toBe(0);
    expect(await runsOf(db, "dagrapport")).toEqual([{ id: 1, uitkomst: "ok", beeindigd: expect.any(String) }]);
    expect(await leaseOf(db, "dagrapport")).toBeUndefined();
    expect(errorLines(s)).toEqual([]);
  }, 60_000);
  test("SIGTERM while the end waits after the answer and the lock stays held past the shutdown's wait: the lost end and release are logged as errors; exit 0", async () => {
    const db = await sharedDatabase();
    const s = await startInstance(db.env, marked(db));
    const { answer, lock } = await endUnderLock(s, db);
    try {
      expect((await answer).status).toBe(200);
      s.proc.kill("SIGTERM");
      expect(await s.exited).toBe(0);
      // Visibly unfinished once the process has gone.
      expect(await runsOf(db, "dagrapport")).toEqual([{ id: 1, uitkomst: "bezig", beeindigd: null }]);
    } finally {
      await lock.release();
    }
    const errors = errorLines(s).map((l) => JSON.parse(l) as { message: string; writes?: unknown; runs?: unknown });
    expect(errors.map((e) => e.message)).toEqual([
      "writes of the job wrapper still waiting for the database write lock were given up at shutdown",
      "the end of a run could not be recorded before shutdown",
    ]);
    expect(errors[0]!.writes).toEqual([{ what: "lease", job: "dagrapport", runId: 1 }]);
    expect(errors[1]!.runs).toEqual([{ job: "dagrapport", runId: 1, uitkomst: "ok", httpStatus: 200 }]);
    // The lease expires by itself (its holder's pid is gone: taken over at once).
    // Still unfinished after the lock: nothing of the gone process writes any more (on
    // PostgreSQL the end's UPDATE waits in a transaction whose COMMIT never comes).
    expect(await runsOf(db, "dagrapport")).toEqual([{ id: 1, uitkomst: "bezig", beeindigd: null }]);
  }, 60_000);
});

describe("the lease functions on one database", () => {
  const other = (): LeaseHolder => ({ ...newLeaseHolder(), host: "elders.example" });
  /** liveLeases on either store. */
  const live = async (store: AnyStore, now: Date): Promise<Map<string, JobLease>> => (store.kind === "sqlite" ? liveLeases(store.db, now, TEST_SEAL) : liveLeasesPg(store.db, now, TEST_SEAL));

  test("taken in one transaction with the run's row; refused while another holder's lease is valid, taken over once it expired", async () => {
    const env = await makeEnv();
    try {
      const store = env.store;
      const a = other();
      const mine = newLeaseHolder();
      const first = await startLeasedRun(store, TEST_SEAL, "weekrapport", a, NOW, 90_000);
      expect(first).toMatchObject({ ok: true, overgenomen: null });
      const refused = await startLeasedRun(store, TEST_SEAL, "weekrapport", mine, new Date(NOW.getTime() + 89_999), 90_000);
      expect(refused.ok).toBe(false);
      expect(!refused.ok && refused.houder).toMatchObject({ pid: a.pid, instantie: a.instantie, host: "elders.example" });
      // Nothing was written for the refused call.
      expect((await env.db.get<{ n: number }>("SELECT count(*) AS n FROM job_runs"))!.n).toBe(1);

      const later = new Date(NOW.getTime() + 90_000);
      const taken = await startLeasedRun(store, TEST_SEAL, "weekrapport", mine, later, 90_000);
      expect(taken.ok && taken.overgenomen).toMatchObject({ instantie: a.instantie, reden: "verlopen" });
      expect((await live(store, later)).get("weekrapport")).toMatchObject({ instantie: mine.instantie, runId: taken.ok ? taken.runId : -1 });
    } finally {
      await env.cleanup();
    }
  });

  test("a holder never renews or releases another's lease, even with the same pid; its own it does", async () => {
    const env = await makeEnv();
    try {
      const store = env.store;
      const a = newLeaseHolder();
      const b = newLeaseHolder(); // same pid and host, another instance
      expect(b.pid).toBe(a.pid);
      const r = await startLeasedRun(store, TEST_SEAL, "audit-anker", a, NOW, 90_000);
      if (!r.ok) throw new Error("not taken");
      expect((await startLeasedRun(store, TEST_SEAL, "audit-anker", b, NOW, 90_000)).ok).toBe(false);
      expect(holderGone({ pid: a.pid, host: a.host, pidNs: a.pidNs })).toBe(false);
      expect(await renewLease(store, TEST_SEAL, "audit-anker", b, r.runId, NOW, 90_000)).toBe(false);
      expect(await releaseLease(store, "audit-anker", b, r.runId)).toBe(false);
      expect(await releaseLease(store, "audit-anker", a, r.runId + 1)).toBe(false);
      expect(await renewLease(store, TEST_SEAL, "audit-anker", a, r.runId, new Date(NOW.getTime() + 30_000), 90_000)).toBe(true);
      expect((await live(store, new Date(NOW.getTime() + 119_999))).has("audit-anker")).toBe(true);
      expect(await releaseLease(store, "audit-anker", a, r.runId)).toBe(true);
      expect((await live(store, NOW)).size).toBe(0);
    } finally {
      await env.cleanup();
    }
  });

  test("a lease whose holder's pid is gone from this host is taken over before it expires; one from another host is not", async () => {
    const env = await makeEnv();
    try {
      const store = env.store;
      const deadPid = Bun.spawnSync(["true"]).pid;
      const here = { ...newLeaseHolder(), pid: deadPid };
      const elsewhere = { ...other(), pid: deadPid };
      expect(holderGone(here)).toBe(true);
      expect(holderGone(elsewhere)).toBe(false);
      expect((await startLeasedRun(store, TEST_SEAL, "dagrapport", here, NOW, 90_000)).ok).toBe(true);
      expect((await live(store, NOW)).has("dagrapport")).toBe(false);
      const taken = await startLeasedRun(store, TEST_SEAL, "dagrapport", newLeaseHolder(), NOW, 90_000);
      expect(taken.ok && taken.overgenomen).toMatchObject({ pid: deadPid, reden: "proces-weg" });

      expect((await startLeasedRun(store, TEST_SEAL, "weekrapport", elsewhere, NOW, 90_000)).ok).toBe(true);
      expect((await startLeasedRun(store, TEST_SEAL, "weekrapport", newLeaseHolder(), NOW, 90_000)).ok).toBe(false);
    } finally {
      await env.cleanup();
    }
  });

  // A review found a lease written while the clock ran a year ahead (its process gone with
  // an earlier boot, so not provably gone) blocked its job for that year once the clock was
  // put right: 204 to the crontab, 409 by hand. SQLite: the lease's times are the host's
  // (on PostgreSQL the server's, test/pg-lease-skewed.ts).
  sqliteOnly("a lease renewed with the clock ahead is taken over once the clock is right, unless its holder provably runs here; /metrics and taken-controle no longer count it live", async () => {
    const env = await makeEnv();
    try {
      const store = env.store;
      const ahead = new Date(NOW.getTime() + 365 * 24 * 3600_000);
      const earlierBoot: LeaseHolder = { ...newLeaseHolder(), pid: 999_999, instantie: "earlier-boot", pidNs: "pid:[4026531836] boot:00000000-0000-0000-0000-000000000000" };
      expect((await startLeasedRun(store, TEST_SEAL, "audit-verificatie", earlierBoot, ahead, 90_000)).ok).toBe(true);
      // Clock right again: the lease is not live, and the job is taken, naming why.
      if (store.kind !== "sqlite") throw new Error("SQLite only");
      expect(liveLeases(store.db, NOW, TEST_SEAL).has("audit-verificatie")).toBe(false);
      const taken = await startLeasedRun(store, TEST_SEAL, "audit-verificatie", newLeaseHolder(), NOW, 90_000);
      expect(taken.ok && taken.overgenomen).toMatchObject({ instantie: "earlier-boot", reden: "toekomst" });
      // A holder that provably runs here (this process) keeps a lease renewed ahead: it
      // renews it by the corrected clock within 30 s.
      const here = newLeaseHolder();
      expect((await startLeasedRun(store, TEST_SEAL, "weekrapport", here, ahead, 90_000)).ok).toBe(true);
      expect(liveLeases(store.db, NOW, TEST_SEAL).has("weekrapport")).toBe(true);
      expect((await startLeasedRun(store, TEST_SEAL, "weekrapport", newLeaseHolder(), NOW, 90_000)).ok).toBe(false);
      // Within the margin (5 minutes ahead) a lease holds as before.
      const nearly = new Date(NOW.getTime() + 4 * 60_000);
      expect((await startLeasedRun(store, TEST_SEAL, "dagrapport", earlierBoot, nearly, 90_000)).ok).toBe(true);
      expect((await startLeasedRun(store, TEST_SEAL, "dagrapport", newLeaseHolder(), NOW, 90_000)).ok).toBe(false);
      // Over HTTP, by hand: the job runs (it answered 409 until the wrong date).
      const again = new Date(NOW.getTime() + 10 * 60_000);
      expect((await startLeasedRun(store, TEST_SEAL, "audit-anker", earlierBoot, ahead, 90_000)).ok).toBe(true);
      env.setNow(again);
      expect((await call(env.app, "/api/cron/audit-anker")).status).toBe(200);
    } finally {
      await env.cleanup();
    }
  });

  test("renewal every min(maxRuntime / 4, 30 s), expiry three renewals ahead; the renewer moves the expiry on until stopped", async () => {
    expect(leaseTiming("dagrapport")).toEqual({ renewMs: 30_000, ttlMs: 90_000 });
    expect(leaseTiming("backup-status")).toEqual({ renewMs: 30_000, ttlMs: 90_000 });
    const env = await makeEnv();
    try {
      const store = env.store;
      const h = newLeaseHolder();
      let now = NOW.getTime();
      const clock = () => new Date(now);
      const r = await startLeasedRun(store, TEST_SEAL, "taken-controle", h, clock(), 60);
      if (!r.ok) throw new Error("not taken");
      const verloopt = async () => (await env.db.get<{ verloopt: string }>("SELECT verloopt FROM job_leases WHERE job = 'taken-controle'"))!.verloopt;
      expect(await verloopt()).toBe(new Date(NOW.getTime() + 60).toISOString());
      // On PostgreSQL a renewal gets renewMs to get through (startRenewing): 10 ms would
      // make a round trip on a loaded machine a failed renewal, and the lease lapsed.
      const renewMs = env.dialect === "sqlite" ? 10 : 500;
      const renewer = startRenewing(store, TEST_SEAL, clock, "taken-controle", h, r.runId, { renewMs, ttlMs: 60 }, r.verloopt);
      let state;
      try {
        now += 1000;
        await until("a renewal", async () => (await verloopt()) === new Date(NOW.getTime() + 1060).toISOString());
      } finally {
        state = await renewer.stop();
      }
      expect(state).toEqual({ lost: false, lapsed: false, verloopt: new Date(NOW.getTime() + 1060) });
      // Nothing renews after stop() resolved.
      now += 1000;
      const after = await verloopt();
      await Bun.sleep(3 * renewMs);
      expect(await verloopt()).toBe(after);
    } finally {
      await env.cleanup();
    }
  }, 15_000);

  // SQLite's write lock and busy handler; PostgreSQL's renewer under failing renewals is in pg-job-lease.
  sqliteOnly("under another process's write lock: taking and releasing wait without blocking and give up after their deadline (SQLITE_BUSY, nothing written); the renewer keeps trying, logs the lapse, renews once the lock is free", async () => {
    const env = await makeEnv();
    if (env.store.kind !== "sqlite") throw new Error("SQLite only");
    const lines: string[] = [];
    const spy = spyOn(process.stderr, "write").mockImplementation(((chunk: unknown) => {
      lines.push(String(chunk));
      return true;
    }) as typeof process.stderr.write);
    let lock: Awaited<ReturnType<typeof holdWriteLock>> | null = null;
    try {
      const store = env.store;
      const h = newLeaseHolder();
      const r = await startLeasedRun(store, TEST_SEAL, "audit-anker", h, NOW, 60);
      if (!r.ok) throw new Error("not taken");
      lock = await holdWriteLock(env.config.databasePath);

      const busy = (p: Promise<unknown>) => p.then(() => "resolved", (e) => (e as { code?: string }).code);
      expect(await busy(startLeasedRun(store, TEST_SEAL, "dagrapport", h, NOW, 60, 20))).toStartWith("SQLITE_BUSY");
      expect(await busy(releaseLease(store, "audit-anker", h, r.runId, 20))).toStartWith("SQLITE_BUSY");
      // SQLite's own busy wait is back for everything else on the connection.
      expect(store.sqlite.query("PRAGMA busy_timeout").get()).toEqual({ timeout: 5000 });

      // The renewer meets the lock; the clock passes the expiry (NOW + 60 ms) meanwhile.
      let now = NOW.getTime() + 1000;
      const renewer = startRenewing(store, TEST_SEAL, () => new Date(now), "audit-anker", h, r.runId, { renewMs: 10, ttlMs: 60 }, r.verloopt);
      const logged = (text: string) => lines.some((l) => l.includes(text));
      await until("the lapse to be logged", () => logged("a running job's lease expired"));
      // Logged while the lock is still held: nothing could renew it meanwhile.
      const lease = () => store.sqlite.query("SELECT verloopt FROM job_leases WHERE job = 'audit-anker'").get() as { verloopt: string };
      expect(lease().verloopt).toBe(r.verloopt.toISOString());

      await lock.release();
      lock = null;
      await until("the renewal after the lock", () => lease().verloopt === new Date(now + 60).toISOString());
      now += 1000;
      const state = await renewer.stop();
      expect(state.lost).toBe(false);
      expect(state.lapsed).toBe(true);
      expect(await releaseLease(store, "audit-anker", h, r.runId)).toBe(true);
      expect((await live(store, NOW)).size).toBe(0);
    } finally {
      spy.mockRestore();
      await lock?.release();
      await env.cleanup();
    }
  }, 30_000);

  test("a renewer whose lease was taken over while the lock was held says so (lost) and stops writing", async () => {
    const env = await makeEnv();
    const spy = spyOn(process.stderr, "write").mockImplementation((() => true) as typeof process.stderr.write);
    try {
      const store = env.store;
      const h = newLeaseHolder();
      const r = await startLeasedRun(store, TEST_SEAL, "weekrapport", h, NOW, 60);
      if (!r.ok) throw new Error("not taken");
      let now = NOW.getTime();
      const renewer = startRenewing(store, TEST_SEAL, () => new Date(now), "weekrapport", h, r.runId, { renewMs: 10, ttlMs: 60 }, r.verloopt);
      // Another process took the expired lease over.
      const taken = await startLeasedRun(store, TEST_SEAL, "weekrapport", other(), new Date(NOW.getTime() + 60), 90_000);
      expect(taken.ok).toBe(true);
      now += 1000;
      const holderOf = async () => (await env.db.get<{ instantie: string }>("SELECT instantie FROM job_leases WHERE job = 'weekrapport'"))!.instantie;
      const otherInstance = await holderOf();
      const state = await until("the renewer to find the take-over", async () => {
        const logged = (spy.mock.calls as unknown[][]).some((c) => String(c[0]).includes("was taken over by another process"));
        return logged && (await renewer.stop());
      });
      expect(state).toMatchObject({ lost: true });
      expect(await holderOf()).toBe(otherInstance);
    } finally {
      spy.mockRestore();
      await env.cleanup();
    }
  });

  test("in-process: two service instances on one database (same pid): the second refuses with 409 naming the other process", async () => {
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    let started!: () => void;
    const running = new Promise<void>((r) => (started = r));
    const job = defineJob({ name: "db-onderhoud", summary: "t", description: "t", run: async () => (started(), await gate, { status: 200, body: { ok: true } }) });
    const env = await makeEnv({}, { jobs: [job] });
    try {
      const second = createApp(env.deps, { jobs: [job] });
      const first = call(env.app, "/api/cron/db-onderhoud");
      await running;
      const r = await call(second, "/api/cron/db-onderhoud");
      expect(r.status).toBe(409);
      expect(r.json.error).toContain(`loopt al in een ander proces (pid ${process.pid}`);
      open();
      expect((await first).status).toBe(200);
      expect((await call(second, "/api/cron/db-onderhoud")).status).toBe(200);
    } finally {
      open();
      await env.cleanup();
    }
  });
});
