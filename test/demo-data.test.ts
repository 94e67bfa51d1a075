import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { verifyTenantChain } from "../src/audit/verify.ts";
import { fillDemoData } from "../src/cli/demo-data.ts";
import { openStore } from "../src/db.ts";
import { NOW, tempDir } from "./helpers.ts";

describe("demo data", () => {
  test("fills every table with the requested sizes and valid chains", () => {
    const { dir, cleanup } = tempDir();
    const store = openStore(join(dir, "demo.db"));
    fillDemoData(store.sqlite, { tenants: 10, admins: 40, audit: 2003, logins: 1000, backups: 14 }, NOW);
    const count = (t: string, where = "1") => (store.sqlite.query(`SELECT count(*) AS n FROM ${t} WHERE ${where}`).get() as { n: number }).n;
    expect(count("tenants")).toBe(10);
    expect(count("tenants", "actief = 0")).toBe(1);
    expect(count("administrators")).toBe(40);
    expect(count("administrators", "actief = 0")).toBe(2);
    expect(count("audit_entries")).toBe(2003);
    expect(count("login_attempts")).toBe(1000);
    expect(count("login_attempts", "gelukt = 0")).toBeGreaterThan(100);
    expect(count("backup_statuses")).toBe(14);
    expect(count("backup_statuses", "gelukt = 0")).toBe(1);
    for (const { id } of store.sqlite.query("SELECT id FROM tenants").all() as { id: number }[]) {
      expect(verifyTenantChain(store.sqlite, id, { checkpoint: null, verifiers: [] }).intact).toBe(true);
    }
    // spread: about a third of the audit entries older than 7 years, about half of the
    // login attempts older than 90 days, nothing in the future
    const grensAudit = new Date(NOW.getTime() - 2555 * 86400_000).toISOString();
    const old = count("audit_entries", `created_at < '${grensAudit}'`) / 2003;
    expect(old).toBeGreaterThan(0.25);
    expect(old).toBeLessThan(0.4);
    const grensLogin = new Date(NOW.getTime() - 90 * 86400_000).toISOString();
    const oldLogins = count("login_attempts", `tijdstip < '${grensLogin}'`) / 1000;
    expect(oldLogins).toBeGreaterThan(0.45);
    expect(oldLogins).toBeLessThan(0.55);
    expect(count("audit_entries", `created_at > '${NOW.toISOString()}'`)).toBe(0);
    store.close();
    cleanup();
  });

  test("is deterministic for a seed", () => {
    const { dir, cleanup } = tempDir();
    const hashes = [1, 2].map((i) => {
      const store = openStore(join(dir, `d${i}.db`));
      fillDemoData(store.sqlite, { tenants: 3, admins: 5, audit: 50, logins: 10, backups: 2 }, NOW, 7);
      const h = store.sqlite.query("SELECT hash FROM audit_entries ORDER BY tenant_id DESC, seq DESC LIMIT 1").get();
      store.close();
      return h;
    });
    expect(hashes[0]).toEqual(hashes[1]);
    cleanup();
  });
});
