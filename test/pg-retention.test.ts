// beveiligingslog-retentie's deletion on PostgreSQL (src/pg/retention.ts) against a real
// server (test/pg.ts): the same boundary as on SQLite, batches, and two deleters at once.
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { deleteOldLoginAttemptsPg } from "../src/pg/retention.ts";
import { openPgStore, type PgStore } from "../src/pg/store.ts";
import { useTestCluster } from "./pg.ts";

setDefaultTimeout(120_000);

const cluster = useTestCluster();

const GRENS = "2026-04-24T12:00:00.000Z";
const iso = (ms: number) => new Date(ms).toISOString();

async function withStore(run: (s: PgStore, url: string) => Promise<void>): Promise<void> {
  const url = await cluster.createDatabase();
  const store = await openPgStore(url);
  try {
    await run(store, url);
  } finally {
    await store.close();
  }
}

/** `count` attempts, one a millisecond from `from`, in one statement. */
async function addAttempts(store: PgStore, from: number, count: number, account = "anna@example.nl"): Promise<void> {
  await store.sql`
    INSERT INTO login_attempts (tijdstip, account, ip, gelukt, reden)
    SELECT to_char((to_timestamp(${from / 1000}) + make_interval(secs => i / 1000.0)) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
           ${account}, '203.0.113.7', false, 'wachtwoord-onjuist'
    FROM generate_series(0, ${count - 1}) AS i`;
}

async function remaining(store: PgStore): Promise<string[]> {
  return ((await store.sql`SELECT tijdstip FROM login_attempts ORDER BY tijdstip`) as { tijdstip: string }[]).map((r) => r.tijdstip);
}

describe("beveiligingslog-retentie on PostgreSQL", () => {
  test("deletes what is strictly older than grens, keeps one exactly at grens and everything after", async () => {
    await withStore(async (store) => {
      await addAttempts(store, Date.parse("2025-01-01T00:00:00.000Z"), 3);
      await addAttempts(store, Date.parse(GRENS) - 1, 1);
      await addAttempts(store, Date.parse(GRENS), 1);
      await addAttempts(store, Date.parse("2026-07-22T12:00:00.000Z"), 1);
      expect((await remaining(store))[3]).toBe("2026-04-24T11:59:59.999Z");
      expect(await deleteOldLoginAttemptsPg(store.sql, GRENS)).toBe(4);
      expect(await remaining(store)).toEqual([GRENS, "2026-07-22T12:00:00.000Z"]);
      // Nothing older left: a second run deletes nothing.
      expect(await deleteOldLoginAttemptsPg(store.sql, GRENS)).toBe(0);
    });
  });

  test("in batches of the given size, each its own transaction, counting every row", async () => {
    await withStore(async (store) => {
      await addAttempts(store, Date.parse("2026-01-01T00:00:00.000Z"), 2_500);
      await addAttempts(store, Date.parse("2026-07-01T00:00:00.000Z"), 10);
      const after: number[] = [];
      const n = await deleteOldLoginAttemptsPg(store.sql, GRENS, { batchSize: 1_000, afterBatch: (k) => after.push(k) });
      expect(n).toBe(2_500);
      expect(after).toEqual([1_000, 2_000, 2_500]);
      expect(await remaining(store)).toHaveLength(10);
    });
  });

  test("rows sharing a tijdstip across a batch's edge all go in that batch, none is counted twice", async () => {
    await withStore(async (store) => {
      // 10 moments, 250 attempts each: every batch edge falls inside a run of equal values.
      for (let k = 0; k < 10; k++) {
        await store.sql`
          INSERT INTO login_attempts (tijdstip, account, ip, gelukt)
          SELECT ${iso(Date.parse("2026-02-01T00:00:00.000Z") + k * 1000)}, 'c' || i || '@example.nl', '198.51.100.1', false
          FROM generate_series(1, 250) AS i`;
      }
      await addAttempts(store, Date.parse(GRENS), 3);
      const sizes: number[] = [];
      const n = await deleteOldLoginAttemptsPg(store.sql, GRENS, { batchSize: 600, onBatch: (b) => sizes.push(b.rows) });
      expect(n).toBe(2_500);
      // 600 reaches into the third moment: the whole of it goes (750), and so on.
      expect(sizes).toEqual([750, 750, 750, 250, 0]);
      expect(await remaining(store)).toEqual([GRENS, iso(Date.parse(GRENS) + 1), iso(Date.parse(GRENS) + 2)]);
    });
  });

  test("sized by the clock when no size is given: batches grow while they take less than their target", async () => {
    await withStore(async (store) => {
      await addAttempts(store, Date.parse("2026-01-01T00:00:00.000Z"), 60_000);
      // Every batch "takes" 5 ms by this clock (it is read twice a batch), far below the
      // 100 ms target: each next batch is 1.5× as big, the most it may grow.
      let t = 0;
      const clock = () => (t += 5);
      const sizes: number[] = [];
      const n = await deleteOldLoginAttemptsPg(store.sql, GRENS, { clock, onBatch: (b) => sizes.push(b.rows) });
      expect(n).toBe(60_000);
      expect(sizes.slice(0, 4)).toEqual([5_000, 7_500, 11_250, 16_875]);
      expect(await remaining(store)).toHaveLength(0);
    });
  });

  test("two deleters at once (two instances) delete every old row exactly once between them", async () => {
    await withStore(async (store, url) => {
      await addAttempts(store, Date.parse("2026-01-01T00:00:00.000Z"), 20_000);
      await addAttempts(store, Date.parse("2026-07-01T00:00:00.000Z"), 5);
      const other = await openPgStore(url);
      try {
        const [a, b] = await Promise.all([
          deleteOldLoginAttemptsPg(store.sql, GRENS, { batchSize: 700 }),
          deleteOldLoginAttemptsPg(other.sql, GRENS, { batchSize: 700 }),
        ]);
        // Each row counted by exactly one of them; what one skipped (locked) the other deleted.
        expect(a + b).toBe(20_000);
        expect(await remaining(store)).toHaveLength(5);
      } finally {
        await other.close();
      }
    });
  });

  test("the host application's inserts during the deletion are all kept", async () => {
    await withStore(async (store, url) => {
      await addAttempts(store, Date.parse("2026-01-01T00:00:00.000Z"), 30_000);
      const writer = await openPgStore(url);
      try {
        let stop = false;
        let written = 0;
        const writing = (async () => {
          while (!stop) {
            await writer.sql`INSERT INTO login_attempts (tijdstip, account, ip, gelukt) VALUES (${iso(Date.parse("2026-07-23T00:00:00.000Z") + written)}, 'b@example.nl', '192.0.2.1', true)`;
            written++;
          }
        })();
        const n = await deleteOldLoginAttemptsPg(store.sql, GRENS, { batchSize: 1_000 });
        stop = true;
        await writing;
        expect(n).toBe(30_000);
        expect(written).toBeGreaterThan(0);
        expect(await remaining(store)).toHaveLength(written);
      } finally {
        await writer.close();
      }
    });
  });
});
