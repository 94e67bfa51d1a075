// The WAL checkpointer (src/checkpointer.ts): the service's connection commits without
// checkpointing, a worker thread checkpoints; the WAL stays bounded, and when the worker
// is stopped the connection's automatic checkpoints are back.
import { afterEach, expect, test } from "bun:test";
import { readFileSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { Database } from "bun:sqlite";
import { deleteOldLoginAttempts, pinCacheSize } from "../src/audit/retention.ts";
import { checkpointDue, startCheckpointer, WAL_LIMITS, walProbe, walStep, type CheckpointResult } from "../src/checkpointer.ts";
import { collectMetrics, renderMetrics } from "../src/http/metrics.ts";
import { newIngestCounters } from "../src/ingest/counters.ts";
import { RunningJobs } from "../src/running-jobs.ts";
import { serviceDeps } from "../src/server.ts";
import { addTenant, fillUntilFree, makeTestEnv, mountTmpfs, NOW, until, type TestEnv } from "./helpers.ts";

let env: TestEnv;
const cleanups: (() => void)[] = [];
afterEach(async () => {
  await env?.cleanup();
  for (const c of cleanups.splice(0).reverse()) c();
});

const autocheckpoint = () => (env.store.sqlite.query("PRAGMA wal_autocheckpoint").get() as { wal_autocheckpoint: number }).wal_autocheckpoint;

/** Writes about 2 MB in one transaction (some 500 WAL pages). */
function writeBatch(tenantId: number, round: number) {
  const insert = env.store.sqlite.query("INSERT INTO login_attempts (tijdstip, account, ip, gelukt, tenant_id) VALUES (?, ?, '192.0.2.1', 0, ?)");
  env.store.sqlite.transaction(() => {
    for (let i = 0; i < 2000; i++) insert.run(new Date(Date.UTC(2026, 0, 1, 0, 0, round, i % 1000)).toISOString(), `${round}-${i}-${"x".repeat(900)}`, tenantId);
  })();
}

test("the worker checkpoints what the connection commits; the WAL is reused instead of growing; stop() brings automatic checkpoints back", async () => {
  env = makeTestEnv();
  const tenantId = addTenant(env.store);
  const results: CheckpointResult[] = [];
  let wake: (() => void) | null = null;
  const checkpointer = startCheckpointer(env.store.sqlite, env.store.path, {
    intervalMs: 5,
    onCheckpoint: (r) => {
      results.push(r);
      wake?.();
    },
  });
  expect(autocheckpoint()).toBe(0);
  const walSizes: number[] = [];
  for (let round = 0; round < 6; round++) {
    writeBatch(tenantId, round);
    // Wait (with a deadline) until the worker reports a WAL holding at least this batch
    // (some 1,100 pages) copied back entirely. Reports from ticks before the batch are smaller.
    const done = () => results.some((r) => r.log >= 1000 && r.checkpointed === r.log);
    const deadline = performance.now() + 10_000;
    while (!done() && performance.now() < deadline) {
      await new Promise<void>((r) => {
        wake = r;
        setTimeout(r, 100);
      });
    }
    expect(done()).toBe(true);
    walSizes.push(statSync(env.store.path + "-wal").size);
    results.length = 0;
  }
  // A checkpointed WAL is written again from its start: six rounds of ~2 MB, one round's size.
  expect(Math.max(...walSizes)).toBeLessThan(walSizes[0]! * 1.5);
  await checkpointer.stop();
  expect(autocheckpoint()).toBe(1000);
});

test("now() checkpoints at once, whatever the interval; the retention jobs call it after each batch's COMMIT", async () => {
  env = makeTestEnv();
  const tenantId = addTenant(env.store);
  const results: CheckpointResult[] = [];
  let wake: (() => void) | null = null;
  // An interval no test waits for: only now() can cause the checkpoint below.
  const checkpointer = startCheckpointer(env.store.sqlite, env.store.path, {
    intervalMs: 3_600_000,
    onCheckpoint: (r) => {
      results.push(r);
      wake?.();
    },
  });
  try {
    writeBatch(tenantId, 0);
    const copied = new Promise<void>((r) => (wake = r));
    checkpointer.now();
    await copied;
    expect(results.at(-1)!.log).toBeGreaterThanOrEqual(1000);
    expect(results.at(-1)!.checkpointed).toBe(results.at(-1)!.log);

    // deleteOldLoginAttempts hands each COMMIT to afterCommit: one call per batch.
    let commits = 0;
    const n = await deleteOldLoginAttempts(env.store.sqlite, "2027-01-01T00:00:00.000Z", { batchSize: 500, pause: async () => {}, afterCommit: () => commits++ });
    expect(n).toBe(2000);
    expect(commits).toBe(5); // four full batches, then the one that finds nothing left
  } finally {
    await checkpointer.stop();
  }
});

test("afterCommit is told whether another connection (another process) committed since the batch before; this connection's own writes and the thread's checkpoints do not count", async () => {
  env = makeTestEnv();
  const tenantId = addTenant(env.store);
  const insert = env.store.sqlite.query("INSERT INTO login_attempts (tijdstip, account, ip, gelukt, tenant_id) VALUES (?, 'a', '10.0.0.1', 0, ?)");
  env.store.sqlite.transaction(() => {
    for (let i = 0; i < 2000; i++) insert.run("2026-01-01T00:00:00.000Z", tenantId);
  })();
  const other = new Database(env.store.path);
  const checkpointer = startCheckpointer(env.store.sqlite, env.store.path, { intervalMs: 3_600_000 });
  try {
    const told: boolean[] = [];
    let pauses = 0;
    await deleteOldLoginAttempts(env.store.sqlite, "2027-01-01T00:00:00.000Z", {
      batchSize: 500,
      afterCommit: (c) => void told.push(c.othersWrote),
      pause: async () => {
        pauses++;
        // After the first batch: a write of another connection. After the second: this connection's own, and a checkpoint of the thread.
        if (pauses === 1) other.run("INSERT INTO login_attempts (tijdstip, account, ip, gelukt, tenant_id) VALUES ('2030-01-01T00:00:00.000Z', 'b', '10.0.0.2', 0, NULL)");
        if (pauses === 2) {
          insert.run("2030-01-01T00:00:00.000Z", tenantId);
          checkpointer.now();
        }
      },
    });
    expect(told).toEqual([false, true, false, false, false]);
  } finally {
    other.close();
    await checkpointer.stop();
  }
});

test("a worker that fails switches the connection's automatic checkpoints back on", async () => {
  env = makeTestEnv();
  const checkpointer = startCheckpointer(env.store.sqlite, "/nonexistent/nachtwacht/x.db", { intervalMs: 5 });
  const deadline = performance.now() + 10_000;
  while (autocheckpoint() !== 1000 && performance.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  expect(autocheckpoint()).toBe(1000);
  await checkpointer.stop();
});

test("a full disk fails the thread's checkpoint only for a while: checkpoints fall back to the service's connection (nachtwacht_wal_checkpointer_fallback 1), and the thread's first checkpoint after space is freed takes them off the commit path again", async () => {
  const fs = mountTmpfs("8m");
  cleanups.push(fs.cleanup);
  env = makeTestEnv({ DATABASE_PATH: join(fs.dir, "n.db"), AUDIT_ANKER_BESTAND: join(fs.dir, "a.jsonl") });
  const tenantId = addTenant(env.store);
  const results: CheckpointResult[] = [];
  const checkpointer = startCheckpointer(env.store.sqlite, env.store.path, { intervalMs: 5, onCheckpoint: (r) => results.push(r) });
  const deps = serviceDeps(env.deps, checkpointer);
  const gauge = async () => Number(/^nachtwacht_wal_checkpointer_fallback (\S+)$/m.exec(renderMetrics(await collectMetrics({ deps, running: new RunningJobs(), counters: newIngestCounters() }, NOW)))?.[1]);
  const insert = env.store.sqlite.query("INSERT INTO login_attempts (tijdstip, account, ip, gelukt, tenant_id) VALUES (?, ?, '192.0.2.1', 0, ?)");
  const batch = (n: number, round: number) =>
    env.store.sqlite.transaction(() => {
      for (let i = 0; i < n; i++) insert.run(new Date(Date.UTC(2026, 0, 1, 0, 0, round, i % 1000)).toISOString(), `${round}-${i}-${"x".repeat(900)}`, tenantId);
    })();
  try {
    // A WAL of some 1 MB, copied back entirely: the next commit writes over it from its start.
    batch(1000, 0);
    await until("the first batch checkpointed", () => results.some((r) => r.log > 200 && r.checkpointed === r.log));
    expect([autocheckpoint(), await gauge()]).toEqual([0, 0]);
    // The disk fills (logs, a backup, another process). The commit fits in the reused WAL,
    // but copying it back needs the database file to grow: the thread's checkpoint meets SQLITE_FULL.
    fillUntilFree(fs.dir, 0);
    batch(300, 1);
    await until("the fallback", () => checkpointer.fallenBack());
    expect([autocheckpoint(), await gauge()]).toEqual([1000, 1]);
    // Space is freed: the thread, trying again each tick, copies the WAL back.
    rmSync(join(fs.dir, "ballast"));
    results.length = 0;
    await until("a checkpoint after space was freed", () => results.some((r) => r.checkpointed === r.log));
    expect([checkpointer.fallenBack(), autocheckpoint(), await gauge()]).toEqual([false, 0, 0]);
    // and now() reaches the thread again (it was a no-op during the fallback)
    batch(300, 2);
    results.length = 0;
    checkpointer.now();
    await until("now() after the re-arm", () => results.some((r) => r.checkpointed === r.log));
  } finally {
    await checkpointer.stop();
  }
}, 30_000);

test("a retention run does not switch automatic checkpoints off again after the checkpoint thread fell back", async () => {
  env = makeTestEnv();
  const tenantId = addTenant(env.store);
  writeBatch(tenantId, 0);
  env.store.sqlite.run("PRAGMA wal_autocheckpoint = 0"); // as while the checkpoint thread runs
  const deleted = await deleteOldLoginAttempts(env.store.sqlite, "2027-01-01T00:00:00.000Z", {
    batchSize: 500,
    // Between two batches the thread fails and its fallback switches them back on.
    pause: async () => {
      env.store.sqlite.run("PRAGMA wal_autocheckpoint = 1000");
    },
  });
  expect(deleted).toBe(2000);
  expect(autocheckpoint()).toBe(1000);
});

test("walStep: a copied, quiet WAL past rewindPages is rewound; past growLimitPages it is rewound while writers write, unless a reader holds much of it; else nothing", () => {
  const limits = { ...WAL_LIMITS, rewindPages: 100, growLimitPages: 1000 };
  const quiet = () => true;
  const busy = () => false;
  expect(walStep({ log: 500, checkpointed: 500 }, quiet, limits)).toBe("restart");
  expect(walStep({ log: 50, checkpointed: 50 }, quiet, limits)).toBe("none");
  // Written to since, or frames left: not below the growth limit (RESTART would hold the write lock while it copies).
  expect(walStep({ log: 500, checkpointed: 500 }, busy, limits)).toBe("none");
  expect(walStep({ log: 500, checkpointed: 300 }, quiet, limits)).toBe("none");
  // Writers back to back are never quiet: past the limit, rewound all the same.
  expect(walStep({ log: 1500, checkpointed: 1200 }, busy, limits)).toBe("restart");
  expect(walStep({ log: 1500, checkpointed: 1500 }, busy, limits)).toBe("restart");
  // Unless a reader holds more than restartLagPages in the WAL: RESTART could not rewind it, only take the write lock.
  expect(walStep({ log: 1500 + WAL_LIMITS.restartLagPages + 1, checkpointed: 1500 }, busy, limits)).toBe("none");
  // The service's limits: 16 MB quiet, 64 MB under load.
  expect([WAL_LIMITS.rewindPages, WAL_LIMITS.growLimitPages]).toEqual([4096, 16384]);
});

test("checkpointDue: a trickle waits until trickleWaitMs after the last checkpoint; many pages pending do not wait", () => {
  const limits = { ...WAL_LIMITS, trickleWaitMs: 500 };
  expect(checkpointDue({ manyPending: false, agoMs: 60 }, limits)).toBe(false);
  expect(checkpointDue({ manyPending: false, agoMs: 499 }, limits)).toBe(false);
  expect(checkpointDue({ manyPending: false, agoMs: 500 }, limits)).toBe(true);
  expect(checkpointDue({ manyPending: true, agoMs: 0 }, limits)).toBe(true);
  // The first checkpoint of a worker.
  expect(checkpointDue({ manyPending: false, agoMs: Number.POSITIVE_INFINITY }, limits)).toBe(true);
});

test("walProbe reads the -wal file of a real database: whether n pages were written since a frame of a WAL, all of them once it was rewound (other salts)", () => {
  env = makeTestEnv();
  const tenantId = addTenant(env.store);
  const path = env.store.path + "-wal";
  const read = (offset: number, length: number) => {
    const b = readFileSync(path);
    return b.subarray(offset, offset + length);
  };
  env.store.sqlite.run("PRAGMA wal_autocheckpoint = 0");
  env.store.sqlite.query("PRAGMA wal_checkpoint(TRUNCATE)").get();
  expect(walProbe(read, { salts: "", frame: 0 }, 1)).toBeNull(); // an empty WAL file: no header
  writeBatch(tenantId, 0);
  const { log } = env.store.sqlite.query("PRAGMA wal_checkpoint(PASSIVE)").get() as { log: number };
  expect(log).toBeGreaterThan(400);
  const first = walProbe(read, { salts: "", frame: 0 }, log)!;
  expect(first.manyPending).toBe(true);
  expect(walProbe(read, { salts: first.salts, frame: 0 }, log + 1)!.manyPending).toBe(false);
  expect(walProbe(read, { salts: first.salts, frame: log - 10 }, 10)!.manyPending).toBe(true);
  expect(walProbe(read, { salts: first.salts, frame: log - 10 }, 11)!.manyPending).toBe(false);
  // Copied back entirely: the next writer rewinds the WAL (new salts) and writes over the old frames.
  env.store.sqlite.query("INSERT INTO login_attempts (tijdstip, account, ip, gelukt, tenant_id) VALUES ('2026-01-02T00:00:00.000Z', 'a', '192.0.2.1', 0, ?)").run(tenantId);
  const rewound = walProbe(read, { salts: first.salts, frame: log }, 1)!;
  expect(rewound.salts).not.toBe(first.salts);
  expect(rewound.manyPending).toBe(true); // counted from the start of the rewound WAL
  // The old frames further on still hold the old salts: not pending.
  expect(walProbe(read, { salts: rewound.salts, frame: 0 }, 100)!.manyPending).toBe(false);
});

test("the checkpoint thread drops none of this process's SQLite locks (closing any descriptor of a file drops every POSIX lock the process holds on it)", async () => {
  env = makeTestEnv();
  const tenantId = addTenant(env.store);
  const seen: CheckpointResult[] = [];
  // Another connection of this process reads: it holds a read lock in the -shm file.
  const reader = new Database(env.store.path, { readonly: true });
  const locks = () => {
    const inodes = [env.store.path, env.store.path + "-shm"].map((f) => statSync(f).ino);
    return readFileSync("/proc/locks", "utf8")
      .split("\n")
      .filter((l) => l.includes(` ${process.pid} `) && inodes.some((ino) => l.includes(`:${ino} `))).length;
  };
  let checkpointer: ReturnType<typeof startCheckpointer> | undefined;
  try {
    reader.run("BEGIN");
    reader.query("SELECT count(*) FROM login_attempts").get();
    // The service's and the reader's locks, counted while no thread runs: the thread's own come and go with its ticks.
    const before = locks();
    expect(before).toBeGreaterThan(0);
    checkpointer = startCheckpointer(env.store.sqlite, env.store.path, { intervalMs: 5, limits: { ...WAL_LIMITS, trickleWaitMs: 20 }, onCheckpoint: (r) => seen.push(r) });
    // Trickles and a burst: the thread probes the WAL and checkpoints, many ticks.
    for (let i = 0; i < 5; i++) {
      const from = seen.length;
      if (i === 4) writeBatch(tenantId, 9);
      else env.store.sqlite.query("INSERT INTO login_attempts (tijdstip, account, ip, gelukt, tenant_id) VALUES (?, 'a', '192.0.2.1', 0, ?)").run(`2026-01-03T00:00:0${i}.000Z`, tenantId);
      await until(`checkpoint ${i}`, () => seen.length > from);
    }
    // Its connection closed, the thread holds nothing: the others' locks must all be there still.
    await checkpointer.stop();
    checkpointer = undefined;
    expect(locks()).toBe(before);
    reader.run("COMMIT");
  } finally {
    reader.close();
    await checkpointer?.stop();
  }
});

test("a burst committed right after a trickle is copied back without waiting trickleWaitMs", async () => {
  env = makeTestEnv();
  const tenantId = addTenant(env.store);
  const insert = env.store.sqlite.query("INSERT INTO login_attempts (tijdstip, account, ip, gelukt, tenant_id) VALUES (?, ?, '192.0.2.1', 0, ?)");
  const seen: CheckpointResult[] = [];
  // An hour's wait for a trickle: only the burst's size can bring its checkpoint within the test's deadline.
  const limits = { ...WAL_LIMITS, tricklePages: 256, trickleWaitMs: 3_600_000 };
  const checkpointer = startCheckpointer(env.store.sqlite, env.store.path, { intervalMs: 5, limits, onCheckpoint: (r) => seen.push(r) });
  try {
    insert.run(new Date(Date.UTC(2026, 0, 1)).toISOString(), "eerste", tenantId);
    checkpointer.now();
    await until("the trickle copied back", () => seen.some((r) => r.log > 0 && r.checkpointed === r.log));
    const from = seen.length;
    writeBatch(tenantId, 2); // some 500 pages
    await until("the burst copied back", () => seen.slice(from).some((r) => r.log > limits.tricklePages && r.checkpointed === r.log));
  } finally {
    await checkpointer.stop();
  }
});

test("a trickle of small commits is copied back after trickleWaitMs; now() does not wait for it", async () => {
  env = makeTestEnv();
  const tenantId = addTenant(env.store);
  const login = env.store.sqlite.query("INSERT INTO login_attempts (tenant_id, tijdstip, ip, account, gelukt) VALUES (?, ?, '192.0.2.1', 'a', 0)");
  const copied = (seen: CheckpointResult[], from: number) => seen.slice(from).some((r) => r.log > 0 && r.checkpointed === r.log);
  for (const trickleWaitMs of [20, 3_600_000]) {
    const seen: CheckpointResult[] = [];
    const checkpointer = startCheckpointer(env.store.sqlite, env.store.path, { intervalMs: 5, limits: { ...WAL_LIMITS, trickleWaitMs }, onCheckpoint: (r) => seen.push(r) });
    try {
      for (let i = 0; i < 3; i++) {
        const from = seen.length;
        login.run(tenantId, new Date(Date.UTC(2026, 0, 1, 0, 0, i)).toISOString()); // a page or two: a trickle
        // An hour's wait: only now() brings the checkpoint within the test's deadline.
        if (trickleWaitMs > 60_000) checkpointer.now();
        await until(`trickle ${i} copied back (trickleWaitMs ${trickleWaitMs})`, () => copied(seen, from));
      }
    } finally {
      await checkpointer.stop();
    }
  }
  expect((env.store.sqlite.query("SELECT count(*) AS n FROM login_attempts").get() as { n: number }).n).toBe(6);
});

test("a WAL file a burst left larger than shrinkBytes is truncated once nothing was committed for shrinkAfterMs", async () => {
  env = makeTestEnv();
  const tenantId = addTenant(env.store);
  const wal = () => statSync(env.store.path + "-wal").size;
  const checkpointer = startCheckpointer(env.store.sqlite, env.store.path, { intervalMs: 5, limits: { ...WAL_LIMITS, shrinkBytes: 1024 * 1024, shrinkAfterMs: 50 } });
  try {
    writeBatch(tenantId, 0); // about 2 MB
    expect(wal()).toBeGreaterThan(1024 * 1024);
    await until("the WAL file truncated", () => wal() === 0);
    // Nothing lost: the rows are in the database file.
    expect((env.store.sqlite.query("SELECT count(*) AS n FROM login_attempts").get() as { n: number }).n).toBe(2000);
  } finally {
    await checkpointer.stop();
  }
});

test("page-cache pins on one connection (audit and login retention may overlap): each release leaves the newest pin in force, the last one the size before the first, in either order", () => {
  const db = new Database(":memory:");
  const size = () => (db.query("PRAGMA cache_size").get() as { cache_size: number }).cache_size;
  db.run("PRAGMA cache_size = -65536"); // as the service's connection
  for (const firstEndsFirst of [true, false]) {
    const audit = pinCacheSize(db, 2048);
    expect(size()).toBe(-2048);
    const login = pinCacheSize(db, 65536 * 2);
    expect(size()).toBe(-131072);
    if (firstEndsFirst) {
      audit();
      expect(size()).toBe(-131072);
      login();
    } else {
      login();
      expect(size()).toBe(-2048);
      audit();
    }
    expect(size()).toBe(-65536);
    audit(); // a second call changes nothing
    expect(size()).toBe(-65536);
  }
  db.close();
});
