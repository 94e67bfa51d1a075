import { describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { join } from "node:path";
import { openStore } from "../src/db.ts";
import { lastRun, startRun } from "../src/job-runs.ts";
import { reserveDelivery, weekRecipients } from "../src/reports/weekly.ts";
import { NOW, tempDir } from "./helpers.ts";

describe("store.db and store.sqlite are one connection", () => {
  test("Drizzle statements take part in a transaction opened on the raw connection", () => {
    const { dir, cleanup } = tempDir();
    const path = join(dir, "tx.db");
    const store = openStore(path);
    const other = new Database(path);
    try {
      store.sqlite.run("INSERT INTO tenants (naam, actief, aangemaakt) VALUES ('A', 1, 'x')");
      store.sqlite.run("INSERT INTO administrators (tenant_id, naam, email, actief) VALUES (1, 'B', 'b@example.nl', 1)");
      const [admin] = weekRecipients(store.db, "2026-W30");

      store.sqlite.run("BEGIN IMMEDIATE");
      startRun(store.db, "dagrapport", NOW);
      reserveDelivery(store.db, admin!, "2026-W30");
      // Seen inside the transaction, not outside it.
      expect(lastRun(store.db, "dagrapport")).toMatchObject({ uitkomst: "bezig" });
      expect(other.query("SELECT count(*) AS n FROM job_runs").get()).toEqual({ n: 0 });
      store.sqlite.run("ROLLBACK");

      expect(lastRun(store.db, "dagrapport")).toBeNull();
      expect(weekRecipients(store.db, "2026-W30")).toEqual([{ ...admin!, alVerstuurd: false, onzeker: false }]);
    } finally {
      other.close();
      store.close();
      cleanup();
    }
  });
});
