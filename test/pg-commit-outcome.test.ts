// The write API on PostgreSQL when the connection breaks at the end of a transaction,
// cut by a TCP proxy between the service and a real server (test/pg-proxy.ts). Over a
// network a COMMIT can be carried out by the server while its answer is lost: the
// service must then neither answer "nothing stored" (503; a client retries a batch
// without keys and it is stored twice) nor lose the receipts. It asks the server what
// became of the transaction and answers with the truth: 200 with what was stored, 503
// when nothing was, and 500 with an alarm when it cannot find out.
import { afterEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { SQL } from "bun";
import { NOTHING_STORED_HEADER, NOTHING_STORED_VALUE } from "../src/client.ts";
import { beginCertain, commitStatus, type Xact } from "../src/pg/commit.ts";
import { openPgStore } from "../src/pg/store.ts";
import { call, makePgTestEnv, type PgTestEnv } from "./helpers.ts";
import { APP_SECRET, auditEntry } from "./ingest-fixtures.ts";
import { startCluster, useTestCluster, type TestCluster } from "./pg.ts";
import { startPgProxy, type PgProxy } from "./pg-proxy.ts";

setDefaultTimeout(60_000);

const cluster = useTestCluster();
let env: PgTestEnv | undefined;
let proxy: PgProxy | undefined;
let direct: SQL | undefined;
let dbUrl = "";
let second: TestCluster | undefined;
afterEach(async () => {
  await env?.cleanup();
  await direct?.close();
  await proxy?.close();
  await second?.stop();
  env = proxy = direct = second = undefined;
});

/** The service on a database reached through the proxy, tenant 1 created; `direct` bypasses the proxy. */
async function proxiedEnv(): Promise<PgTestEnv> {
  env = await makePgTestEnv({
    createDatabase: async () => {
      const url = (dbUrl = await cluster.createDatabase());
      direct = new SQL(url, { max: 1 });
      proxy = await startPgProxy(url);
      return proxy.url;
    },
  }, { APP_SECRET });
  expect((await send("/api/tenants/1", { naam: "Een", actief: true }, "PUT")).status).toBe(201);
  return env;
}

const send = (path: string, body: unknown, method = "POST") => call(env!.app, path, { token: APP_SECRET, method, body: JSON.stringify(body) });
const attempts = (n: number) => ({ pogingen: Array.from({ length: n }, (_, i) => ({ tenantId: 1, account: `a${i}@example.nl`, ip: "192.0.2.1", gelukt: false })) });
const rows = async (table: string) => Number(((await direct!.unsafe(`SELECT count(*) AS n FROM ${table}`)) as { n: string }[])[0]!.n);

describe("a connection cut at COMMIT (PostgreSQL)", () => {
  test("cut after the server committed: the service finds the transaction committed and answers 200 with the ids stored, once", async () => {
    await proxiedEnv();
    const cut = proxy!.cutNextCommit("after");
    const r = await send("/api/inlogpogingen", attempts(3));
    await cut;
    expect(r.status).toBe(200);
    expect(r.json.opgeslagen).toBe(3);
    const ids = ((await direct!`SELECT id FROM login_attempts ORDER BY id`) as { id: number }[]).map((x) => Number(x.id));
    expect(ids).toEqual(r.json.ids);
    expect(env!.alarms.raised).toEqual([]);
  });

  test("cut after the server committed an audit batch: 200 with the receipts of the rows stored; a retry with the same sleutels stores nothing twice", async () => {
    await proxiedEnv();
    const body = { entries: [auditEntry(1, 0, { sleutel: "k0" }), auditEntry(1, 1, { sleutel: "k1" })] };
    const cut = proxy!.cutNextCommit("after");
    const r = await send("/api/audit", body);
    await cut;
    expect(r.status).toBe(200);
    const stored = (await direct!`SELECT seq, id, hash FROM audit_entries WHERE tenant_id = 1 ORDER BY seq`) as { seq: string; id: string; hash: string }[];
    expect(r.json.ontvangstbewijzen).toEqual(stored.map((s) => ({ tenantId: 1, seq: Number(s.seq), id: Number(s.id), hash: s.hash })));
    const again = await send("/api/audit", body);
    expect(again.status).toBe(200);
    expect(again.json.ontvangstbewijzen).toEqual(r.json.ontvangstbewijzen);
    expect(await rows("audit_entries")).toBe(2);
  });

  test("cut before the COMMIT reached the server: it rolled back, and the answer is the 503 that says nothing was stored; the retry stores the batch once", async () => {
    await proxiedEnv();
    const cut = proxy!.cutNextCommit("before");
    const r = await send("/api/inlogpogingen", attempts(2));
    await cut;
    expect(r.status).toBe(503);
    expect(r.headers.get(NOTHING_STORED_HEADER)).toBe(NOTHING_STORED_VALUE);
    expect(await rows("login_attempts")).toBe(0);
    expect((await send("/api/inlogpogingen", attempts(2))).status).toBe(200);
    expect(await rows("login_attempts")).toBe(2);
  });

  test("cut after the COMMIT and the server unreachable since: not 503 (it was stored) but 500 saying the outcome is unknown, with an alarm", async () => {
    await proxiedEnv();
    const cut = proxy!.cutNextCommit("after", { down: true });
    const r = await send("/api/inlogpogingen", attempts(2));
    await cut;
    expect(r.status).toBe(500);
    expect(r.headers.get(NOTHING_STORED_HEADER)).toBeNull();
    expect(r.json.error).toStartWith("Onbekend of de schrijfactie is opgeslagen");
    expect(await rows("login_attempts")).toBe(2);
    expect(env!.alarms.raised.map((a) => a.type)).toEqual(["internal-error"]);
    proxy!.up();
  });

  test("cut after the COMMIT, and the host name then leads to another server (a failover) that gave the same transaction id to a transaction of its own: 500 unknown, not 200 for rows that server does not have", async () => {
    await proxiedEnv();
    // The other server: the service's database under the same name, and transaction ids
    // used and committed well past the one the service's transaction will get here.
    second = await startCluster();
    const name = new URL(dbUrl).pathname.slice(1);
    const other = new SQL(await second.createDatabase(name), { max: 1 });
    try {
      const next = Number(((await direct!`SELECT pg_current_xact_id()::text AS x`) as { x: string }[])[0]!.x) + 1;
      const at = Number(((await other`SELECT pg_current_xact_id()::text AS x`) as { x: string }[])[0]!.x);
      const burn = Math.max(0, next - at) + 200;
      await other.unsafe(`DO $$ BEGIN FOR i IN 1..${burn} LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END $$`);
      // The old answer would be "committed": that id is a committed transaction there.
      const service = ((await direct!`SELECT pg_current_xact_id()::text AS x`) as { x: string }[])[0]!.x;
      expect(((await other`SELECT pg_xact_status((${Number(service) + 1}::text)::xid8) AS s`) as { s: string }[])[0]!.s).toBe("committed");

      const cut = proxy!.cutNextCommit("after", { down: true });
      const pending = send("/api/inlogpogingen", attempts(2));
      await cut;
      proxy!.retarget(second.url);
      proxy!.up();
      const r = await pending;
      expect(r.status).toBe(500);
      // It did ask the other server (and did not take its answer).
      expect(proxy!.connectionsTo(second.url)).toBeGreaterThan(0);
      expect(r.headers.get(NOTHING_STORED_HEADER)).toBeNull();
      expect(r.json.error).toStartWith("Onbekend of de schrijfactie is opgeslagen");
      expect(r.json.ids).toBeUndefined();
      expect(await rows("login_attempts")).toBe(2); // on the server that committed them
      expect(env!.alarms.raised.map((a) => a.type)).toEqual(["internal-error"]);
    } finally {
      await other.close();
    }
  });

  test("a crash recovery that lost the transaction gives its id out again, to a transaction that commits: without the transaction's marker that 'committed' is not its own, and the answer is aborted (before: committed, a 200 for rows that are gone)", async () => {
    // A server of its own whose WAL only a COMMIT flushes (no autovacuum, the WAL writer
    // asleep for 10 s): a crash right after the transaction's writes loses them.
    second = await startCluster({ settings: { autovacuum: "off", wal_writer_delay: "10s", checkpoint_timeout: "1h" } });
    const url = await second.createDatabase();
    await (await openPgStore(url)).close(); // migrated
    const client = new SQL(url, { max: 1 });
    const run = async () => ((await client`SELECT extract(epoch FROM pg_postmaster_start_time())::text AS s`) as { s: string }[])[0]!.s;
    let asker: SQL | undefined;
    try {
      const startedAt = await run();
      // The crash recovery ends with a checkpoint of its own (none other comes: checkpoint_timeout 1h).
      const checkpointLsn = async (db: SQL) => ((await db`SELECT (pg_control_checkpoint()).checkpoint_lsn::text AS t`) as { t: string }[])[0]!.t;
      const checkpointBefore = await checkpointLsn(client);
      let xact: Xact | undefined;
      // The transaction: its marker and a row written, then its server process killed before any COMMIT.
      await client
        .begin(async (tx) => {
          xact = await beginCertain(tx);
          await tx`INSERT INTO login_attempts (tijdstip, account, ip, gelukt) VALUES ('2026-11-24T12:00:00.000Z', 'a@example.nl', '192.0.2.1', false)`;
          const pid = ((await tx`SELECT pg_backend_pid() AS pid`) as { pid: number }[])[0]!.pid;
          process.kill(pid, "SIGKILL");
          await tx`SELECT 1`; // the connection is gone
        })
        .catch(() => {});
      expect(xact).toBeDefined();
      // The server recovers from the crash without restarting (the same run, the same start time).
      // Until the recovery's own checkpoint is there: a connection made before the postmaster
      // noticed the killed process answers once, then is ended with every other (seen in CI).
      for (let tries = 0; ; tries++) {
        asker = new SQL(url, { max: 2 });
        try {
          if ((await checkpointLsn(asker)) !== checkpointBefore) break;
        } catch (e) {
          if (tries > 300) throw e;
        }
        await asker.close().catch(() => {});
        if (tries > 300) throw new Error("the server did not finish its crash recovery");
        await Bun.sleep(50); // polling a recovering server: a bound, not a synchronisation of the test's own work
      }
      expect(((await asker`SELECT extract(epoch FROM pg_postmaster_start_time())::text AS s`) as { s: string }[])[0]!.s).toBe(startedAt);
      // Transactions after the recovery get its id again, and commit.
      await asker.unsafe("DO $$ BEGIN FOR i IN 1..300 LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END $$");
      expect(((await asker`SELECT pg_xact_status(${xact!.xid}::xid8) AS s`) as { s: string }[])[0]!.s).toBe("committed");
      expect(((await asker`SELECT count(*)::int AS n FROM login_attempts`) as { n: number }[])[0]!.n).toBe(0);
      // What the write API would be told: nothing stored (503), not a 200 for the lost row.
      expect(await commitStatus(asker, xact!)).toBe("aborted");
    } finally {
      await client.close().catch(() => {});
      await asker?.close();
    }
  });

  test("a certain transaction's first statement writes its marker and deletes the two oldest markers past ten minutes; newer ones stay; the lookup finds it committed", async () => {
    const store = await openPgStore(await cluster.createDatabase());
    try {
      const { sql } = store;
      await sql`INSERT INTO commit_markers (token, at) VALUES
        ('oud-1', now() - interval '11 minutes'), ('oud-2', now() - interval '12 minutes'),
        ('oud-3', now() - interval '13 minutes'), ('nieuw', now() - interval '9 minutes')`;
      const xact = await sql.begin((tx) => beginCertain(tx));
      const tokens = ((await sql`SELECT token FROM commit_markers ORDER BY token`) as { token: string }[]).map((r) => r.token);
      expect(tokens).toEqual(["nieuw", "oud-1", xact.token].sort());
      expect(await commitStatus(sql, xact)).toBe("committed");
    } finally {
      await store.close();
    }
  });
});
