import { describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { join } from "node:path";
import { openStore } from "../src/db.ts";
import { lastRun, startRun } from "../src/job-runs.ts";
import { reserveDelivery, weekRecipients } from "../src/reports/weekly.ts";
import { NOW, tempDir, TEST_SEAL } from "./helpers.ts";

describe("store.db and store.sqlite are one connection", () => {
  test("Drizzle statements take part in a transaction opened on the raw connection", () => {
    const { dir, cleanup } = tempDir();
    const path = join(dir, "tx.db");
    const store = openStore(path);
    const other = new Database(path);
    try {
      store.sqlite.run("INSERT INTO tenants (naam, actief, aangemaakt) VALUES ('A', 1, 'x')");
      store.sqlite.run("INSERT INTO administrators (tenant_id, naam, email, actief) VALUES (1, 'B', 'b@example.nl', 1)");
      const [admin] = weekRecipients(store.db, "2026-W30", 10);

      store.sqlite.run("BEGIN IMMEDIATE");
      startRun(store.db, "dagrapport", NOW, TEST_SEAL);
      reserveDelivery(store.db, admin!, "2026-W30");
      // Seen inside the transaction, not outside it.
      expect(lastRun(store.db, "dagrapport", TEST_SEAL, NOW).run).toMatchObject({ uitkomst: "bezig" });
      expect(other.query("SELECT count(*) AS n FROM job_runs").get()).toEqual({ n: 0 });
      store.sqlite.run("ROLLBACK");

      expect(lastRun(store.db, "dagrapport", TEST_SEAL, NOW).run).toBeNull();
      expect(weekRecipients(store.db, "2026-W30", 10)).toEqual([{ ...admin!, alVerstuurd: false }]);
    } finally {
      other.close();
      store.close();
      cleanup();
    }
  });
});

test("the service's connection commits durably: WAL, synchronous FULL (an fsync per COMMIT, so a write answered 200 survives a power loss)", () => {
  const { dir, cleanup } = tempDir();
  const store = openStore(join(dir, "durable.db"));
  try {
    expect(store.sqlite.query("PRAGMA journal_mode").get()).toEqual({ journal_mode: "wal" });
    expect(store.sqlite.query("PRAGMA synchronous").get()).toEqual({ synchronous: 2 });
  } finally {
    store.close();
    cleanup();
  }
});

describe("opening the store while another process holds the database for a moment", () => {
  test("openStore waits for the lock (busy_timeout is set before its first read) instead of failing with SQLITE_BUSY", async () => {
    const { dir, cleanup } = tempDir();
    try {
      const path = join(dir, "busy.db");
      // Created in another process: a connection of this one, even closed, stays open until
      // its last prepared statement is collected (sqlite3_close_v2) and keeps a shared lock
      // that the holder's EXCLUSIVE lock would wait for (with Bun.gc here instead, the holder
      // timed out in CI and on a busy machine).
      const created = Bun.spawnSync([process.execPath, join(import.meta.dir, "fixtures", "create-store.ts"), path], { stderr: "pipe" });
      expect(created.stderr.toString()).toBe("");
      expect(created.exitCode).toBe(0);
      const holder = Bun.spawn([process.execPath, join(import.meta.dir, "fixtures", "hold-exclusive-lock.ts"), path, "400"], { stdout: "pipe", stderr: "inherit" });
      const reader = holder.stdout.getReader();
      let seen = "";
      while (!seen.includes("locked")) {
        const r = await reader.read();
        if (r.done) throw new Error("the lock holder exited early");
        seen += new TextDecoder().decode(r.value);
      }
      // The holder is inside its exclusive transaction now: opening must wait, then succeed.
      const store = openStore(path);
      try {
        expect(store.sqlite.query("SELECT value FROM service_meta WHERE key = 'lock-holder'").get()).toEqual({ value: "x" });
      } finally {
        store.close();
      }
      expect(await holder.exited).toBe(0);
    } finally {
      cleanup();
    }
  });
});
