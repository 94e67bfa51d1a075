// The witness files beside the anchor file (laatste-backupmelding, laatste-verificatie)
// on a full disk while the database is fine. Found by a review on a real tmpfs:
// backup-status and audit-verificatie answered 200 with their run `ok` and only logged
// that the file was not written, so the checks it serves (a deleted newest backup report,
// verification results replaced by older ones) went blind without anyone told. Now each
// raises storage-unwritable (mailed); the answers stay the job's own.
import { afterEach, expect, test } from "bun:test";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { backupWitnessFile, verificationWitnessFile } from "../src/row-seal.ts";
import { call, fillUntilFree, mountTmpfs } from "./helpers.ts";
import { makeEnv, type Env } from "./dialect.ts";

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** An installation whose anchor file's folder is a real tmpfs, filled to the last byte; the database is elsewhere. */
async function fullAnchorDisk(): Promise<Env> {
  const fs = mountTmpfs("1m");
  cleanups.push(fs.cleanup);
  const env = await makeEnv({ AUDIT_ANKER_BESTAND: join(fs.dir, "ankers.jsonl") });
  cleanups.push(() => env.cleanup());
  fillUntilFree(fs.dir, 0);
  return env;
}

test("backup-status with the anchor file's disk full: the report is stored and answered 200, and storage-unwritable says the witness was not written", async () => {
  const env = await fullAnchorDisk();
  const r = await call(env.app, "/api/cron/backup-status", { body: JSON.stringify({ exitCode: 0, bestandsnaam: "n.db.zst", grootte: 10 }) });
  expect(r.status).toBe(200);
  expect(await env.db.all("SELECT exit_code FROM backup_statuses")).toHaveLength(1);
  const path = backupWitnessFile(env.config);
  expect(existsSync(path)).toBe(false);
  expect(env.alarms.raised.map((a) => a.type)).toEqual(["storage-unwritable"]);
  expect(env.alarms.raised[0]!.message).toStartWith(`${path} kon niet worden geschreven (ENOSPC); backup-controle merkt niet op`);
  expect(env.alarms.raised[0]!.context).toMatchObject({ bestand: path });
});

test("audit-verificatie with the anchor file's disk full: its results are stored and answered as found, and storage-unwritable says the witness was not written", async () => {
  const env = await fullAnchorDisk();
  const r = await call(env.app, "/api/cron/audit-verificatie");
  expect(r.status).toBe(200);
  const path = verificationWitnessFile(env.config);
  expect(existsSync(path)).toBe(false);
  expect(env.alarms.raised.map((a) => a.type)).toEqual(["storage-unwritable"]);
  expect(env.alarms.raised[0]!.message).toStartWith(`${path} kon niet worden geschreven (ENOSPC); de rapporten merken niet op`);
});
