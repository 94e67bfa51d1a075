// The restore of docs/operations.md, from a real backup file: `nachtwacht backup`'s copy
// (makeBackup: a gzipped SQLite copy; makeBackupPg: pg_dump's archive) put back the way
// the docs say (gunzip over the database file; pg_restore --no-owner --exit-on-error into
// a new, empty database: test/dialect.ts restoreBackup), with the anchor file kept as it
// is. On both stores. What must hold afterwards: every chain verifies against the anchor
// file, the service writes on where the backup left off (seq, ids, new tenants: the
// sequences came back too), audit-anker signs on, and the offline verifier agrees. A
// restore older than what was anchored since is named for what it lost.
import { afterEach, expect, setDefaultTimeout, test } from "bun:test";
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { makeBackup, stampOf, type BackupDone } from "../src/cli/backup.ts";
import { makeBackupPg } from "../src/pg/backup.ts";
import { BUN, ROOT } from "./binary.ts";
import { call, DAY_MS, eindzegel, NOW, TEST_VERIFIER_KEY, zegel } from "./helpers.ts";
import { generateKeyPair } from "../src/audit/note.ts";
import { sealKeyMarker } from "../src/row-seal.ts";
import type { Config } from "../src/config.ts";
import { APP_SECRET, auditEntry } from "./ingest-fixtures.ts";
import { addTenant, fillChain, makeEnv, restartService, restoreBackup, type Env } from "./dialect.ts";

setDefaultTimeout(60_000);

let env: Env;
let dir: string;
afterEach(async () => {
  await env?.cleanup();
  rmSync(dir, { recursive: true, force: true });
});

const fill = (tenantId: number, n: number, label: string) => fillChain(env.store, tenantId, n, { label, at: (i) => new Date(NOW.getTime() - 30 * DAY_MS + i * 1000) });
const job = (name: string) => call(env.app, `/api/cron/${name}`);
const app = (path: string, body: unknown, method = "POST") => call(env.app, path, { token: APP_SECRET, method, body: JSON.stringify(body) });
const tenantResult = (body: any, tenantId: number) => body.resultaten.find((r: any) => r.tenantId === tenantId);

/** Three tenants with signed chains, and a backup of that state: the file's path. */
async function backedUp(): Promise<{ tenants: number[]; file: string }> {
  env = await makeEnv({ APP_SECRET });
  dir = mkdtempSync(join(tmpdir(), "nachtwacht-backups-"));
  const tenants = [await addTenant(env.db, "Gemeente Delft"), await addTenant(env.db, "Stichting Leiden"), await addTenant(env.db, "Zorg Noord")];
  for (const t of tenants) await fill(t, 40, "eerst");
  expect((await job("audit-anker")).status).toBe(200);
  const o = { dir, anchors: env.config.auditAnkerBestand, keepDays: 30, now: NOW };
  const done = env.store.kind === "sqlite" ? await makeBackup({ ...o, db: env.config.databasePath }) : await makeBackupPg({ ...o, url: env.store.url });
  expect(done.anchorsCopied).toBe(true);
  return { tenants, file: done.path };
}

/** `nachtwacht verify` as a process, with the public key only. */
async function offlineVerify() {
  const where = env.store.kind === "sqlite" ? { args: ["--db", env.config.databasePath], env: {} } : { args: [], env: { DATABASE_URL: env.store.url } };
  const p = Bun.spawn([BUN, join(ROOT, "src/index.ts"), "verify", ...where.args, "--bestand", env.config.auditAnkerBestand, "--sleutel", TEST_VERIFIER_KEY], {
    env: { PATH: Bun.env.PATH ?? "/usr/bin:/bin", HOME: dir, ...where.env },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [code, out, err] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
  return { code, out, err };
}

test("the newest backup restored as the docs say: every chain verifies (200), the application writes on where it left off, audit-anker signs on, and verify offline agrees", async () => {
  const { tenants, file } = await backedUp();
  await restoreBackup(env, file);

  const after = await job("audit-verificatie");
  expect({ status: after.status, ankerbestand: after.json.ankerbestand }).toMatchObject({ status: 200, ankerbestand: { intact: true } });
  for (const t of tenants) expect(tenantResult(after.json, t)).toMatchObject({ intact: true, aantalEntries: 40 });

  // Writing on: the chain's next seq, fresh ids, and a new tenant after the restored ones.
  const appended = await app("/api/audit", { entries: [auditEntry(tenants[0]!, 1), auditEntry(tenants[0]!, 2)] });
  expect({ status: appended.status, body: appended.json, alarms: env.alarms.raised }).toMatchObject({ status: 200 });
  expect(appended.json.ontvangstbewijzen.map((r: { seq: number }) => r.seq)).toEqual([41, 42]);
  const maxId = (await env.db.get<{ n: number }>("SELECT max(id) AS n FROM audit_entries"))!.n;
  expect(appended.json.ontvangstbewijzen.map((r: { id: number }) => r.id)).toEqual([maxId - 1, maxId]);
  const newTenant = tenants.at(-1)! + 1;
  expect((await app(`/api/tenants/${newTenant}`, { naam: "Nieuw", actief: true }, "PUT")).status).toBe(201);
  expect(await addTenant(env.db, "Door de applicatie")).toBe(newTenant + 1);

  expect((await job("audit-anker")).status).toBe(200);
  const again = await job("audit-verificatie");
  expect(again.status).toBe(200);
  expect(tenantResult(again.json, tenants[0]!)).toMatchObject({ intact: true, aantalEntries: 42 });
  const offline = await offlineVerify();
  expect({ code: offline.code, err: offline.err }).toEqual({ code: 0, err: "" });
});

test("a backup older than what audit-anker signed since: 409 database-teruggezet, naming the tenant and the seq its signed entries end at; the others verify", async () => {
  const { tenants, file } = await backedUp();
  await fill(tenants[1]!, 5, "later");
  expect((await job("audit-anker")).status).toBe(200);
  await restoreBackup(env, file);

  const r = await job("audit-verificatie");
  expect(r.status).toBe(409);
  expect(r.json.ankerbestand).toMatchObject({ intact: false, reden: "database-teruggezet" });
  expect(tenantResult(r.json, tenants[1]!).fout).toMatchObject({ seq: 45, reden: "kop-ontbreekt" });
  for (const t of [tenants[0]!, tenants[2]!]) expect(tenantResult(r.json, t)).toMatchObject({ intact: true, aantalEntries: 40 });
  const offline = await offlineVerify();
  expect(offline.code).toBe(1);
});

/**
 * A backup folder with `days` earlier backups of each kind (database copy, anchor file,
 * seal key marker), one a day, the newest a day and a half before `real`; then a backup made at `now`.
 */
async function backupWithHistory(days: number, real: number, now: Date): Promise<{ done: BackupDone; left: string[] }> {
  env = await makeEnv({ APP_SECRET });
  dir = mkdtempSync(join(tmpdir(), "nachtwacht-backups-"));
  await restartService(env, env.config, new Date(real)); // the marker zegelsleutel, as the service's start writes it
  await fill(await addTenant(env.db, "Gemeente Delft"), 3, "eerst");
  expect((await job("audit-anker")).status).toBe(200);
  const ext = env.store.kind === "sqlite" ? "db.gz" : "pgdump";
  for (let i = 1; i <= days; i++) {
    const at = new Date(real - i * DAY_MS - DAY_MS / 2);
    for (const f of [`nachtwacht-${stampOf(at)}.${ext}`, `audit-ankers-${stampOf(at)}.jsonl.gz`, `zegelsleutel-${stampOf(at)}.txt`]) {
      writeFileSync(join(dir, f), "x");
      utimesSync(join(dir, f), at, at);
    }
  }
  const o = { dir, anchors: env.config.auditAnkerBestand, keepDays: 30, now };
  const done = env.store.kind === "sqlite" ? await makeBackup({ ...o, db: env.config.databasePath }) : await makeBackupPg({ ...o, url: env.store.url });
  expect(done.anchorsCopied).toBe(true);
  expect(done.sealKeyCopied).toBe(true);
  return { done, left: readdirSync(dir) };
}

test("a backup with the host clock a year ahead prunes nothing: the newest 30 of each kind are kept whatever their age (found by a review: all 30 days were deleted)", async () => {
  const real = Date.now();
  const { done, left } = await backupWithHistory(30, real, new Date(real + 365 * DAY_MS));
  expect(done.pruned).toEqual([]);
  expect(left.length).toBe(93);
  expect(left).toContain(done.name);
});

test("with the clock right, backups older than 30 days are pruned as before", async () => {
  const real = Date.now();
  const { done, left } = await backupWithHistory(40, real, new Date(real));
  // Kept per kind: the new one and the 30 newest earlier ones (1.5 to 30.5 days old); 31.5 to 40.5 days old go.
  expect(done.pruned.length).toBe(30);
  expect(done.pruned).toContain(`audit-ankers-${stampOf(new Date(real - 31 * DAY_MS - DAY_MS / 2))}.jsonl.gz`);
  expect(done.pruned).toContain(`zegelsleutel-${stampOf(new Date(real - 31 * DAY_MS - DAY_MS / 2))}.txt`);
  expect(left.length).toBe(93);
  expect(left).toContain(done.name);
});

test("a backup made before a key change, restored after it: nachtwacht backup copies zegelsleutel beside it, and written back into the marker it re-seals the backup's history, not a forgery with the key rotated out before it", async () => {
  env = await makeEnv({ APP_SECRET });
  dir = mkdtempSync(join(tmpdir(), "nachtwacht-backups-"));
  const keys = (signer: string, trusted: string[]): Config => ({ ...env.config, auditAnkerSleutel: signer, auditVertrouwdeSleutels: trusted });
  const k1 = generateKeyPair("nachtwacht.test/k1");
  const k2 = generateKeyPair("nachtwacht.test/k2");
  await restartService(env, env.config, NOW); // K0, the test key
  await restartService(env, keys(k1.signerKey, [TEST_VERIFIER_KEY]), NOW); // K0 → K1
  // The thief of K0 forges a run after that rotation: it does not count, and never may.
  const forged = { job: "audit-verificatie", gestart: "2026-07-23T01:00:01.000Z", beeindigd: "2026-07-23T01:00:02.000Z", uitkomst: "ok", httpStatus: 200 };
  await env.db.run("INSERT INTO job_runs (job, gestart, beeindigd, uitkomst, http_status, zegel, eindzegel) VALUES (?, ?, ?, 'ok', 200, ?, ?)", forged.job, forged.gestart, forged.beeindigd, zegel(forged.job, forged.gestart), eindzegel(forged));
  const o = { dir, anchors: env.config.auditAnkerBestand, keepDays: 30, now: NOW };
  const done = env.store.kind === "sqlite" ? await makeBackup({ ...o, db: env.config.databasePath }) : await makeBackupPg({ ...o, url: env.store.url });
  expect(done.sealKeyCopied).toBe(true);
  const copy = join(dir, `zegelsleutel-${stampOf(NOW)}.txt`);
  expect(readFileSync(copy, "utf8")).toBe(`${k1.verifierKey}\n`);

  const current = keys(k2.signerKey, [TEST_VERIFIER_KEY, k1.verifierKey]);
  await restartService(env, current, NOW); // K1 → K2
  await restoreBackup(env, done.path);
  // As docs/operations.md says: the backup's zegelsleutel written into the marker before the start.
  copyFileSync(copy, sealKeyMarker(env.config));
  await restartService(env, current, NOW);
  expect(readFileSync(sealKeyMarker(env.config), "utf8")).toBe(`${k2.verifierKey}\n`);
  const installed = await env.db.get<{ zegel: string }>("SELECT zegel FROM service_meta WHERE key = 'geinstalleerd'");
  expect(installed!.zegel).toStartWith("\u2014 nachtwacht.test/k2 ");
  const row = await env.db.get<{ zegel: string }>("SELECT zegel FROM job_runs WHERE gestart = ?", forged.gestart);
  expect(row!.zegel).toStartWith("\u2014 nachtwacht.test/sleutel ");
});
