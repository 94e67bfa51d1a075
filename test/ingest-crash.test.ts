// The write API under SIGKILL. The real service runs as a process (`bun src/index.ts
// serve`); several clients send batches of audit entries (1–200 entries over several
// tenants, every entry with its own sleutel) and, at a seeded random moment, the
// service is killed with SIGKILL and restarted on the same database and anchor file.
// Every client retries each batch it got no answer for, with the same content and
// sleutels, until it gets 200. Checked:
//  - after every kill, before any retry: the database is sound, every chain links, and
//    every batch sent so far is stored whole or not at all (all or none of its sleutels
//    in audit_entries); a batch that was answered is stored whole;
//  - a retry answers from what is stored: all entries `alBekend` when the kill came
//    after the commit (the answer was lost), all `opgeslagen` when before;
//  - at the end: each sleutel's entry is stored exactly once, the number of entries is
//    the number of distinct sleutels sent, every receipt (first answer or retry) equals
//    the stored row (seq, id, hash), and audit-anker then audit-verificatie answer 200
//    with aantalGebroken 0.
//
// Seeded: INGEST_CRASH_SEED=<n> tries another seed (printed with the result);
// INGEST_CRASH_ROUNDS=<n> another number of kills. The seed fixes each client's batches
// and the kill schedule (after n answers in the round, plus 0–15 ms); which requests
// are in flight at that moment is up to timing. About 15 s on 2 cores (SQLite; PostgreSQL about 45 s).
//
// On both stores (test/dialect.ts): on the PostgreSQL run the service gets DATABASE_URL,
// a fresh database of the run's cluster, and the checks read that database; "sound" is
// then the service's own integrity check there (amcheck on every B-tree index,
// integrityCheckPg) instead of PRAGMA integrity_check.
import { Database } from "bun:sqlite";
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseVerifierKey } from "../src/audit/note.ts";
import { applyPragmas } from "../src/db.ts";
import { verifyRangePg } from "../src/pg/chain.ts";
import { integrityCheckPg } from "../src/pg/maintenance.ts";
import { openPgStore } from "../src/pg/store.ts";
import { DIALECT, sqliteTestDb, testCluster, testDb, type TestDb } from "./dialect.ts";
import { fileCheckpoints, prng, startService, verifyAll } from "./fixtures/hardening.ts";
import { SECRET, TEST_SIGNING_KEY, TEST_VERIFIER_KEY } from "./helpers.ts";
import { APP_SECRET } from "./ingest-fixtures.ts";

const SEED = Number(process.env.INGEST_CRASH_SEED ?? 20261124);
const ROUNDS = Number(process.env.INGEST_CRASH_ROUNDS ?? 20);
const CLIENTS = 4;
const TENANTS = 5;
const MAX_BATCH = 200;
// Separate streams, so timing (how many batches a client sends before a kill) does not
// change the kill schedule or another client's batches: the seed fixes both.
const killRand = prng(SEED);
const clientRand = Array.from({ length: CLIENTS }, (_, c) => prng(SEED + 7919 * (c + 1)));
const between = (rand: () => number, lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1));

const dir = mkdtempSync(join(tmpdir(), "nachtwacht-ingest-crash-"));
/** The service running now, if any: stopped and awaited when a check fails half way. */
let current: Service | null = null;
afterAll(async () => {
  if (current && current.proc.exitCode === null && current.proc.signalCode === null) {
    current.proc.kill("SIGKILL");
    await current.exited;
  }
  rmSync(dir, { recursive: true, force: true });
});
const databasePath = join(dir, "data", "nachtwacht.db");
const anchorFile = join(dir, "ankers.jsonl");
/** The PostgreSQL run's database (DATABASE_URL of every start), made by the test. */
let pgUrl: string | null = null;

// ------------------------------------------------------------------ the service

interface Service {
  url: string;
  proc: ReturnType<typeof Bun.spawn>;
  /** Exit code, or -1 when killed by a signal; resolves after its output is drained. */
  exited: Promise<number>;
  output(): string;
}

/** Starts the service on the shared files (startService: a real process, /health polled with a deadline). */
async function start(): Promise<Service> {
  const svc = await startService({
    HOME: dir,
    CRON_SECRET: SECRET,
    APP_SECRET,
    AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY,
    DATABASE_PATH: databasePath,
    AUDIT_ANKER_BESTAND: anchorFile,
    ...(pgUrl === null ? {} : { DATABASE_URL: pgUrl }),
  });
  return (current = svc);
}

const cron = (svc: Service, job: string) => fetch(`${svc.url}/api/cron/${job}`, { method: "POST", headers: { authorization: `Bearer ${SECRET}` } });

// ------------------------------------------------------------------ batches and clients

interface Entry {
  tenantId: number;
  actor: string;
  action: string;
  subject: string;
  details: Record<string, unknown>;
  tijdstip?: string;
  sleutel: string;
}
interface Receipt {
  tenantId: number;
  seq: number;
  id: number;
  hash: string;
}
interface Batch {
  name: string;
  body: string;
  entries: Entry[];
  /** Requests that got no answer (the service was killed, or the connection was stale). */
  unanswered: number;
  /**
   * Whether the last check after a kill found it stored (all of it): false before any
   * check; undefined when a request went unanswered while the service lived (unknown).
   */
  storedAtCheck: boolean | undefined;
  receipts?: Receipt[];
  /** On its 200: how many entries were already stored (a retry after a lost answer). */
  alBekend?: number;
}

const batches: Batch[] = [];
const epoch = Date.now() - 3600_000;
const batchNo = Array.from({ length: CLIENTS }, () => 0);

function newBatch(client: number): Batch {
  const rand = clientRand[client]!;
  const int = (lo: number, hi: number) => between(rand, lo, hi);
  const n = int(1, MAX_BATCH);
  const name = `c${client}-b${batchNo[client]!++}`;
  const entries: Entry[] = [];
  for (let i = 0; i < n; i++) {
    const e: Entry = {
      tenantId: int(1, TENANTS),
      actor: `user${int(1, 50)}@example.nl`,
      action: ["dossier.bekeken", "factuur.verwijderd", "gebruiker.ingelogd"][int(0, 2)]!,
      subject: `${name}/${i}`,
      details: { i, r: int(0, 1e6), nested: { z: 1, a: [name, i] } },
      sleutel: `${name}-e${i}`,
    };
    // Half with an explicit time (in the past), half stored at the first arrival's time.
    if (rand() < 0.5) e.tijdstip = new Date(epoch + int(0, 3_000_000)).toISOString();
    entries.push(e);
  }
  const b: Batch = { name, body: JSON.stringify({ entries }), entries, unanswered: 0, storedAtCheck: false };
  batches.push(b);
  return b;
}

/** One client's work: the batches it owes a retry first, then new ones. */
class Client {
  readonly pending: Batch[] = [];
  constructor(readonly index: number) {}

  /**
   * Sends batches until `stop()` says so (then only owed retries, when `flush`) or a
   * request gets no answer while the service is dead. Returns when nothing is in flight.
   */
  async run(svc: Service, o: { dead: () => boolean; stop: () => boolean; flush: boolean; answered: () => void }): Promise<void> {
    for (;;) {
      if (o.dead()) return;
      let b = this.pending[0];
      if (!b) {
        if (o.stop() || o.flush) return;
        b = newBatch(this.index);
        this.pending.push(b);
      }
      let r: Response;
      let text: string;
      try {
        r = await fetch(`${svc.url}/api/audit`, { method: "POST", headers: { authorization: `Bearer ${APP_SECRET}`, "content-type": "application/json" }, body: b.body });
        text = await r.text();
      } catch {
        b.unanswered++;
        // Killed: the retry comes after the restart. A stale connection while alive: retry now (bounded).
        if (!o.dead()) b.storedAtCheck = undefined;
        if (b.unanswered > 50) throw new Error(`batch ${b.name}: no answer 50 times`);
        continue;
      }
      if (r.status === 503) continue; // the database was busy: same batch again
      if (r.status !== 200) throw new Error(`batch ${b.name}: HTTP ${r.status} ${text}`);
      const body = JSON.parse(text) as { opgeslagen: number; alBekend: number; ontvangstbewijzen: Receipt[] };
      const n = b.entries.length;
      // All or nothing: a retry finds the whole batch stored (answer lost) or none of it,
      // as the check after the kill found it.
      const expected = b.storedAtCheck === undefined ? (body.alBekend === n ? n : 0) : b.storedAtCheck ? n : 0;
      expect({ batch: b.name, opgeslagen: body.opgeslagen, alBekend: body.alBekend }).toEqual({ batch: b.name, opgeslagen: n - expected, alBekend: expected });
      expect(body.ontvangstbewijzen.length).toBe(n);
      b.receipts = body.ontvangstbewijzen;
      b.alBekend = body.alBekend;
      this.pending.shift();
      o.answered();
    }
  }
}

// ------------------------------------------------------------------ checks on the store

/** The store as the checks read it: plain SQL, its integrity check, every tenant's chain. */
interface Checked {
  db: TestDb;
  /** Asserts the store is sound: PRAGMA integrity_check on SQLite, amcheck on PostgreSQL. */
  sound(): Promise<void>;
  /** Every tenant's chain verified as audit-verificatie does, up to its newest checkpoint in the anchor file. */
  chains(): Promise<{ tenantId: number; intact: boolean; fout?: unknown }[]>;
}

const VERIFIERS = [parseVerifierKey(TEST_VERIFIER_KEY)];

async function withDatabase<T>(fn: (c: Checked) => Promise<T>): Promise<T> {
  if (DIALECT === "sqlite") {
    // Opened as a restart opens it: WAL recovery of what the killed process left.
    const s = new Database(databasePath, { strict: true });
    applyPragmas(s);
    try {
      return await fn({
        db: sqliteTestDb(s),
        sound: async () => expect((s.query("PRAGMA integrity_check").get() as { integrity_check: string }).integrity_check).toBe("ok"),
        chains: async () => verifyAll(s, anchorFile),
      });
    } finally {
      s.close();
    }
  }
  const store = await openPgStore(pgUrl!, { max: 1 });
  try {
    // The killed process's connections first end: PostgreSQL finishes a COMMIT the
    // service had sent before it died (its client is gone, not the transaction), so what
    // the kill left is settled only once no other session is on this database. Polled
    // with a deadline, on that state.
    const deadline = performance.now() + 30_000;
    for (;;) {
      const [{ n }] = (await store.sql`
        SELECT count(*)::int AS n FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`) as [{ n: number }];
      if (n === 0) break;
      if (performance.now() > deadline) throw new Error(`${n} sessions of the killed service still on the database after 30 s`);
      await Bun.sleep(10);
    }
    // The test cluster's role is a superuser: it installs amcheck for the integrity check (the service never does).
    await store.sql`CREATE EXTENSION IF NOT EXISTS amcheck`;
    return await fn({
      db: testDb(store),
      sound: async () => {
        const r = await integrityCheckPg(store.sql);
        expect(r.status === "ok" ? "ok" : JSON.stringify(r)).toBe("ok");
      },
      chains: async () => {
        const checkpoints = fileCheckpoints(anchorFile);
        const ids = (await store.sql`SELECT id FROM tenants ORDER BY id`) as { id: number }[];
        // One snapshot for all tenants, as verifyAll reads a closed file.
        const results = await verifyRangePg(
          store.sql,
          ids.map(({ id }) => ({ tenantId: id, checkpoint: checkpoints.get(id) ?? null })),
          VERIFIERS,
        );
        return ids.map(({ id }) => ({ tenantId: id, ...results.get(id)! }));
      },
    });
  } finally {
    await store.close();
  }
}

/** After a kill, before any retry: sound store, linked chains, every batch whole or absent. */
function checkAfterKill(round: number): Promise<{ stored: number; absent: number; inFlight: number }> {
  return withDatabase(async (s) => {
    await s.sound();
    for (const c of await s.chains()) expect({ round, tenant: c.tenantId, intact: c.intact, fout: c.fout }).toEqual({ round, tenant: c.tenantId, intact: true, fout: undefined });
    const keys = new Set((await s.db.all<{ tenant_id: number; sleutel: string }>("SELECT tenant_id, sleutel FROM audit_entries WHERE sleutel IS NOT NULL")).map((r) => `${r.tenant_id}\u0000${r.sleutel}`));
    const entries = (await s.db.get<{ n: number }>("SELECT count(*) AS n FROM audit_entries"))!.n;
    expect(entries).toBe(keys.size);
    let stored = 0;
    let absent = 0;
    let inFlight = 0;
    for (const b of batches) {
      const present = b.entries.filter((e) => keys.has(`${e.tenantId}\u0000${e.sleutel}`)).length;
      expect({ round, batch: b.name, present: present === 0 || present === b.entries.length }).toEqual({ round, batch: b.name, present: true });
      if (b.receipts) expect({ round, batch: b.name, present }).toEqual({ round, batch: b.name, present: b.entries.length });
      else {
        inFlight++;
        b.storedAtCheck = present > 0;
        if (present > 0) stored++;
        else absent++;
      }
    }
    return { stored, absent, inFlight };
  });
}

// ------------------------------------------------------------------ the test

test(`SIGKILL while ${CLIENTS} clients send audit batches, ${ROUNDS} times: every batch stored whole or not at all, once, with the receipts it got; every chain verifies`, async () => {
  const clients = Array.from({ length: CLIENTS }, (_, i) => new Client(i));
  const kills: { round: number; after: number; extraMs: number; inFlight: number; committedUnanswered: number }[] = [];

  // The PostgreSQL run's service starts on an empty database of the run's cluster and migrates it.
  if (DIALECT === "pg") pgUrl = await (await testCluster()).createDatabase();
  let svc = await start();
  for (let t = 1; t <= TENANTS; t++) {
    const r = await fetch(`${svc.url}/api/tenants/${t}`, {
      method: "PUT",
      headers: { authorization: `Bearer ${APP_SECRET}`, "content-type": "application/json" },
      body: JSON.stringify({ naam: `Tenant ${t}`, actief: true }),
    });
    expect(r.status).toBe(201);
  }

  for (let round = 0; round < ROUNDS; round++) {
    // Now and then a checkpoint, so later verification also checks chains that grew past one.
    if (round % 4 === 2) expect((await cron(svc, "audit-anker")).status).toBe(200);
    // The kill comes after `after` answers in this round, plus 0–15 ms: at a random point in some request.
    const after = between(killRand, 1, 40);
    const extraMs = between(killRand, 0, 15);
    let answered = 0;
    let dead = false;
    let reached!: () => void;
    const reachedTarget = new Promise<void>((res) => (reached = res));
    const runs = clients.map((c) =>
      c.run(svc, {
        dead: () => dead,
        stop: () => false,
        flush: false,
        answered: () => {
          if (++answered === after) reached();
        },
      }),
    );
    // A client that throws fails the round at once instead of waiting for the target.
    await Promise.race([reachedTarget, Promise.all(runs)]);
    if (extraMs > 0) await Bun.sleep(extraMs); // choosing the moment of the kill, not waiting for a state
    dead = true;
    svc.proc.kill("SIGKILL");
    expect(await svc.exited).toBe(-1);
    await Promise.all(runs);
    const c = await checkAfterKill(round);
    kills.push({ round, after, extraMs, inFlight: c.inFlight, committedUnanswered: c.stored });
    svc = await start();
  }

  // The last run: every client retries what it is owed until it gets 200, with no kill.
  await Promise.all(clients.map((c) => c.run(svc, { dead: () => false, stop: () => true, flush: true, answered: () => {} })));
  for (const c of clients) expect(c.pending).toEqual([]);

  const anker = await cron(svc, "audit-anker");
  expect(anker.status).toBe(200);
  const v = await cron(svc, "audit-verificatie");
  const verdict = (await v.json()) as { aantalGebroken: number; gecontroleerd: number; resultaten: { aantalEntries: number }[] };
  expect(v.status).toBe(200);
  expect(verdict.aantalGebroken).toBe(0);
  expect(verdict.gecontroleerd).toBe(TENANTS);
  svc.proc.kill("SIGTERM");
  expect(await svc.exited).toBe(0);

  const sent = batches.flatMap((b) => b.entries);
  const distinct = new Set(sent.map((e) => `${e.tenantId}\u0000${e.sleutel}`));
  expect(distinct.size).toBe(sent.length);
  expect(verdict.resultaten.reduce((n, r) => n + r.aantalEntries, 0)).toBe(distinct.size);
  await withDatabase(async (s) => {
    await s.sound();
    const total = (await s.db.get<{ n: number }>("SELECT count(*) AS n FROM audit_entries"))!.n;
    expect(total).toBe(distinct.size);
    // Per (tenant, sleutel): exactly one entry, at the place its receipt names, with the content sent.
    const rows = await s.db.all<{ tenantId: number; sleutel: string; seq: number; id: number; hash: string; subject: string; actor: string; createdAt: string }>(
      `SELECT tenant_id AS "tenantId", sleutel, seq, id, hash, subject, actor, created_at AS "createdAt" FROM audit_entries WHERE sleutel IS NOT NULL`,
    );
    expect(rows.length).toBe(distinct.size);
    const byKey = new Map(rows.map((r) => [`${r.tenantId}\u0000${r.sleutel}`, r]));
    let retriedAnswers = 0;
    let lostAnswers = 0;
    for (const b of batches) {
      expect(b.receipts?.length).toBe(b.entries.length);
      if (b.unanswered > 0) retriedAnswers++;
      if (b.alBekend! > 0) lostAnswers++;
      b.entries.forEach((e, i) => {
        const r = byKey.get(`${e.tenantId}\u0000${e.sleutel}`);
        expect(r).toBeDefined();
        expect({ sleutel: e.sleutel, subject: r!.subject, actor: r!.actor }).toEqual({ sleutel: e.sleutel, subject: e.subject, actor: e.actor });
        if (e.tijdstip !== undefined) expect(r!.createdAt).toBe(e.tijdstip);
        expect({ sleutel: e.sleutel, ...b.receipts![i]! }).toEqual({ sleutel: e.sleutel, tenantId: e.tenantId, seq: r!.seq, id: r!.id, hash: r!.hash });
      });
    }
    // No entry without a key of its own: entries = keys = distinct sleutels sent.
    expect((await s.db.get<{ n: number }>("SELECT count(*) AS n FROM audit_entries WHERE sleutel IS NOT NULL"))!.n).toBe(total);
    for (const c of await s.chains()) expect(c.intact).toBe(true);
    console.log(
      `ingest crash (seed ${SEED}, INGEST_CRASH_SEED to change): ${ROUNDS} kills, ${batches.length} batches, ${sent.length} entries over ${TENANTS} tenants; ` +
        `${retriedAnswers} batches retried after a kill, of which ${lostAnswers} were committed before it (answer lost, retry got alBekend). ` +
        `Kills (after n answers + ms → in flight / committed unanswered): ${kills.map((k) => `${k.after}+${k.extraMs}→${k.inFlight}/${k.committedUnanswered}`).join(", ")}`,
    );
  });
  // PostgreSQL's run also starts the run's cluster, and each restart connects to it and
  // each check reads through the server: about twice SQLite's time on a shared machine.
}, DIALECT === "pg" ? 180_000 : 60_000);
