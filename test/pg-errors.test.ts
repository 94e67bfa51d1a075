// Which PostgreSQL failures the service answers with 503 ("not now", Retry-After) rather
// than 500 (src/http/errors.ts unavailableCode): real errors from a real server, raw from
// Bun's client and wrapped by Drizzle as the jobs meet them.
import { expect, setDefaultTimeout, test } from "bun:test";
import { SQL } from "bun";
import { drizzle } from "drizzle-orm/bun-sql";
import { sql as raw } from "drizzle-orm";
import { storageUnwritableCode, unavailableCode, unexpectedAlarmType, unexpectedStatus } from "../src/http/errors.ts";
import { errorText } from "../src/logger.ts";
import { freePort } from "./binary.ts";
import { useTestCluster } from "./pg.ts";

setDefaultTimeout(60_000);
const cluster = useTestCluster();

async function failure(run: () => Promise<unknown>): Promise<unknown> {
  try {
    await run();
  } catch (e) {
    return e;
  }
  throw new Error("no error");
}

test("no server listening: Bun's connection error, raw and wrapped by Drizzle, is unavailable (503)", async () => {
  const client = new SQL(`postgres://nw@127.0.0.1:${freePort()}/x`, { max: 1, connectionTimeout: 5 });
  const rawError = await failure(() => client`SELECT 1`);
  expect(unavailableCode(rawError)).toStartWith("ERR_POSTGRES_CONNECTION");
  const wrapped = await failure(() => drizzle({ client }).execute(raw`SELECT 1`));
  expect(unavailableCode(wrapped)).toStartWith("ERR_POSTGRES_CONNECTION");
  expect(unexpectedStatus(wrapped)).toBe(503);
  await client.close();
});

test("a read-only server (25006) and a lock wait given up (55P03) are unavailable; a constraint violation is a 500", async () => {
  const client = new SQL(await cluster.createDatabase(), { max: 2 });
  const db = drizzle({ client });
  await client`CREATE TABLE t (id int PRIMARY KEY)`;
  await client`INSERT INTO t VALUES (1)`;
  const readOnly = await failure(() => client.begin(async (tx) => {
    await tx`SET TRANSACTION READ ONLY`;
    await tx`INSERT INTO t VALUES (2)`;
  }));
  expect(unavailableCode(readOnly)).toBe("25006");
  const lock = await client.reserve();
  await lock`BEGIN`;
  await lock`SELECT * FROM t WHERE id = 1 FOR UPDATE`;
  const timedOut = await failure(() => db.transaction(async (tx) => {
    await tx.execute(raw`SET LOCAL lock_timeout = '50ms'`);
    await tx.execute(raw`SELECT * FROM t WHERE id = 1 FOR UPDATE`);
  }));
  expect(unavailableCode(timedOut)).toBe("55P03");
  await lock`ROLLBACK`;
  lock.release();
  const duplicate = await failure(() => db.execute(raw`INSERT INTO t VALUES (1)`));
  expect(unavailableCode(duplicate)).toBeUndefined();
  expect(unexpectedStatus(duplicate)).toBe(500);
  await client.close();
});

test("a database set read-only (default_transaction_read_only, as a standby after a failover answers): a write's 25006 is storage that takes no writes, alarmed storage-unwritable (mailed), 503", async () => {
  const url = await cluster.createDatabase();
  const admin = new SQL(url, { max: 1 });
  await admin`CREATE TABLE t (id int)`;
  await admin.unsafe(`ALTER DATABASE "${new URL(url).pathname.slice(1)}" SET default_transaction_read_only = on`);
  await admin.close();
  // A new session gets the setting, as the pool's do after a failover.
  const client = new SQL(url, { max: 1 });
  expect((await client`SHOW default_transaction_read_only`)[0].default_transaction_read_only).toBe("on");
  const refused = await failure(() => drizzle({ client }).execute(raw`INSERT INTO t VALUES (1)`));
  expect(errorText(refused)).toContain("cannot execute INSERT in a read-only transaction");
  expect(unavailableCode(refused)).toBe("25006");
  expect(storageUnwritableCode(refused)).toBe("25006");
  expect(unexpectedAlarmType(refused)).toBe("storage-unwritable");
  expect(unexpectedStatus(refused)).toBe(503);
  await client.close();
});

test("what an alarm and job_runs say of a failed query: the driver's message and the statement, never its parameters (addresses, account names)", async () => {
  const client = new SQL(await cluster.createDatabase(), { max: 1 });
  const db = drizzle({ client });
  await client`CREATE TABLE p (email text PRIMARY KEY)`;
  await client`INSERT INTO p VALUES ('geheim@example.nl')`;
  const e = await failure(() => db.execute(raw`INSERT INTO p VALUES (${"geheim@example.nl"})`));
  expect(String((e as Error).message)).toContain("geheim@example.nl"); // what Drizzle's own message carries
  const text = errorText(e);
  expect(text).not.toContain("geheim@example.nl");
  expect(text).toContain("duplicate key");
  expect(text).toContain("INSERT INTO p VALUES ($1)");
  await client.close();
});
