// `nachtwacht backup`'s report to backup-status (report in src/cli/backup.ts) against the
// real service on a SQLite file: while another process holds the database's write lock
// past the service's wait, backup-status answers 503 with Retry-After, and the report is
// tried again after the pause it asks for (REPORT_RETRY), so the backup is not reported
// lost. The pause itself is the test's: it frees the lock instead of waiting 60 s.
import { Database } from "bun:sqlite";
import { afterEach, expect, test } from "bun:test";
import { join } from "node:path";
import { report, REPORT_RETRY } from "../src/cli/backup.ts";
import { openStore } from "../src/db.ts";
import { SECRET, tempDir, TEST_SIGNING_KEY } from "./helpers.ts";
import { startService, type ServiceProcess } from "./fixtures/hardening.ts";
import { holdWriteLock } from "./ingest-fixtures.ts";

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function service(): Promise<{ path: string; app: ServiceProcess; env: Record<string, string>; anchors: string }> {
  const { dir, cleanup } = tempDir("nachtwacht-report-");
  cleanups.push(cleanup);
  const path = join(dir, "data", "nachtwacht.db");
  openStore(path).close();
  const app = await startService({ CRON_SECRET: SECRET, AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY, DATABASE_PATH: path, AUDIT_ANKER_BESTAND: join(dir, "ankers.jsonl"), HOME: dir });
  cleanups.push(async () => {
    app.proc.kill("SIGKILL");
    await app.exited;
  });
  return { path, app, env: { CRON_SECRET: SECRET, HOST: "127.0.0.1", PORT: new URL(app.url).port }, anchors: join(dir, "ankers.jsonl") };
}

const reports = (path: string) => {
  const db = new Database(path, { readonly: true });
  try {
    return db.query("SELECT exit_code, bestandsnaam FROM backup_statuses").all();
  } finally {
    db.close();
  }
};

test("a 503 (the database's write lock held past the wait) is tried again after Retry-After: the report is stored, 200", async () => {
  const { path, env, anchors } = await service();
  const lock = await holdWriteLock(path);
  cleanups.push(() => lock.release().catch(() => {}));
  const said: string[] = [];
  const pauses: number[] = [];
  const r = await report(env, anchors, { exitCode: 0, bestandsnaam: "nachtwacht-x.db.gz", grootte: 1 }, (s) => said.push(s), async (ms) => {
    pauses.push(ms);
    if (pauses.length === 1) await lock.release();
  });
  expect(r.status).toBe(200);
  expect(JSON.parse(r.text)).toEqual({ ok: true, gelukt: true });
  expect(pauses).toEqual([60_000]);
  expect(said).toHaveLength(1);
  expect(said[0]).toStartWith("backup-status: HTTP 503 ");
  expect(said[0]).toEndWith("; opnieuw over 60 s (poging 2 van 5)");
  expect(reports(path)).toEqual([{ exit_code: 0, bestandsnaam: "nachtwacht-x.db.gz" }]);
}, 60_000);

test("a 503 that lasts: pauses of at most REPORT_RETRY.budgetMs in all, then the 503 is the answer (nachtwacht backup exits 75)", async () => {
  const { path, env, anchors } = await service();
  const lock = await holdWriteLock(path);
  cleanups.push(() => lock.release().catch(() => {}));
  const pauses: number[] = [];
  const r = await report(env, anchors, { exitCode: 0 }, () => {}, async (ms) => void pauses.push(ms));
  expect(r.status).toBe(503);
  // Retry-After 60 twice fits the 2 minutes; a third pause would not.
  expect(pauses).toEqual([60_000, 60_000]);
  expect(pauses.reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(REPORT_RETRY.budgetMs);
}, 60_000);
