// ops/backup.sh, the thin caller of `nachtwacht backup`, with the compiled binary against
// the running service: a real online copy while the database is in use, the report to
// backup-status, and forced failures. No sqlite3 CLI is needed.
import { Database } from "bun:sqlite";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { buildBinary, ROOT, startBinary, type RunningBinary } from "./binary.ts";

const SCRIPT = join(ROOT, "ops", "backup.sh");
const SECRET = "backup-" + "5a".repeat(30);

interface Row {
  exit_code: number;
  gelukt: number;
  bestandsnaam: string | null;
  grootte: number | null;
  foutmelding: string | null;
  bron: string;
}

describe("ops/backup.sh → nachtwacht backup", () => {
  let bin: string;
  let app: RunningBinary & { dir: string };
  let work: string;
  let envFile: string;
  let dbPath: string;

  beforeAll(async () => {
    const { path } = await buildBinary();
    bin = path;
    app = await startBinary(path, { CRON_SECRET: SECRET });
    dbPath = join(app.dir, "data", "nachtwacht.db");
    work = mkdtempSync(join(tmpdir(), "nachtwacht-backup-"));
    envFile = join(work, "nachtwacht.env");
    writeFileSync(envFile, `CRON_SECRET=${SECRET}\nPORT=${new URL(app.url).port}\nHOST=127.0.0.1\n`, { mode: 0o600 });
    const db = new Database(dbPath);
    const insert = db.query("INSERT INTO tenants (naam, actief, aangemaakt) VALUES (?, 1, ?)");
    db.transaction(() => {
      for (let i = 0; i < 500; i++) insert.run(`Tenant ${i}`, new Date().toISOString());
    })();
    db.close();
  }, 180_000);

  afterAll(async () => {
    await app?.stop();
    rmSync(work, { recursive: true, force: true });
  });

  async function runBackup(env: Record<string, string>) {
    const p = Bun.spawn(["bash", SCRIPT], {
      env: {
        PATH: "/usr/bin:/bin", // no sqlite3 needed: nothing but the binary
        NACHTWACHT_BIN: bin,
        NACHTWACHT_ENV: envFile,
        NACHTWACHT_LOG: "stdout",
        NACHTWACHT_DB: dbPath,
        NACHTWACHT_ANCHORS: join(work, "absent-ankers.jsonl"),
        ...env,
      },
      stdout: "pipe",
      stderr: "pipe",
    });
    const [code, out, err] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
    return { code, out: out + err };
  }

  function newestStatus(): Row {
    const db = new Database(dbPath, { readonly: true });
    try {
      return db.query("SELECT exit_code, gelukt, bestandsnaam, grootte, foutmelding, bron FROM backup_statuses ORDER BY id DESC LIMIT 1").get() as Row;
    } finally {
      db.close();
    }
  }

  test("makes a consistent gzip copy while the service writes, and reports its name and size", async () => {
    const dir = join(work, "ok");
    // A writer on the live database during the copy, as the service's own writers would be.
    const writer = new Database(dbPath);
    writer.run("PRAGMA busy_timeout = 5000"); // as the service's own connection has
    const insert = writer.query("INSERT INTO tenants (naam, actief, aangemaakt) VALUES ('tijdens', 1, ?)");
    let writing = true;
    const writes = (async () => {
      while (writing) {
        insert.run(new Date().toISOString());
        await Bun.sleep(1);
      }
    })();
    const r = await runBackup({ NACHTWACHT_BACKUP_DIR: dir, NACHTWACHT_ANCHORS: (() => {
      const f = join(work, "ankers.jsonl");
      writeFileSync(f, '{"tenantId":1,"seq":3}\n');
      return f;
    })() });
    writing = false;
    await writes;
    writer.close();
    expect(r.code).toBe(0);

    const files = readdirSync(dir).sort();
    const backups = files.filter((f) => /^nachtwacht-\d{8}T\d{6}Z\.db\.gz$/.test(f));
    expect(backups).toHaveLength(1);
    expect(files.filter((f) => f.startsWith("."))).toEqual([]); // no temp copy left behind
    expect(files.some((f) => /^audit-ankers-.*\.jsonl\.gz$/.test(f))).toBe(true);
    const name = backups[0]!;
    const size = statSync(join(dir, name)).size;

    const restored = join(work, "restored.db");
    writeFileSync(restored, Bun.gunzipSync(readFileSync(join(dir, name))));
    const copy = new Database(restored, { readonly: true });
    try {
      expect(copy.query("PRAGMA integrity_check").get()).toEqual({ integrity_check: "ok" });
      const { n } = copy.query("SELECT count(*) AS n FROM tenants").get() as { n: number };
      expect(n).toBeGreaterThanOrEqual(500);
    } finally {
      copy.close();
    }

    expect(newestStatus()).toEqual({ exit_code: 0, gelukt: 1, bestandsnaam: name, grootte: size, foutmelding: null, bron: "host-cron" });
    expect(r.out).toContain(`backup ok: ${join(dir, name)}`);
    expect(r.out).toContain('{"ok":true,"gelukt":true}');
    expect(r.out).not.toContain(SECRET);
  }, 30_000);

  test("without NACHTWACHT_DB and NACHTWACHT_ANCHORS the paths come from the env file's DATABASE_PATH and AUDIT_ANKER_BESTAND", async () => {
    const dir = join(work, "from-env");
    const anchors = join(work, "env-ankers.jsonl");
    writeFileSync(anchors, '{"tenantId":2,"seq":7}\n');
    const ownEnv = join(work, "own.env");
    writeFileSync(ownEnv, `${readFileSync(envFile, "utf8")}DATABASE_PATH=${dbPath}\nAUDIT_ANKER_BESTAND=${anchors}\n`, { mode: 0o600 });
    const r = await runBackup({ NACHTWACHT_BACKUP_DIR: dir, NACHTWACHT_ENV: ownEnv, NACHTWACHT_DB: "", NACHTWACHT_ANCHORS: "" });
    expect(r.code).toBe(0);
    const files = readdirSync(dir);
    const copied = files.find((f) => /^audit-ankers-.*\.jsonl\.gz$/.test(f))!;
    expect(Buffer.from(Bun.gunzipSync(readFileSync(join(dir, copied)))).toString("utf8")).toBe('{"tenantId":2,"seq":7}\n');
    expect(newestStatus().bestandsnaam).toBe(files.find((f) => f.endsWith(".db.gz"))!);
  }, 30_000);

  test("a missing database is reported with a non-zero exit code and the reason, and the script fails", async () => {
    const r = await runBackup({ NACHTWACHT_BACKUP_DIR: join(work, "missing"), NACHTWACHT_DB: join(work, "geen.db") });
    expect(r.code).toBe(66);
    const row = newestStatus();
    expect(row).toMatchObject({ exit_code: 66, gelukt: 0, bron: "host-cron" });
    expect(row.foutmelding).toContain("geen.db bestaat niet");
    expect(r.out).toContain('{"ok":true,"gelukt":false}');
  });

  test("a failing step is reported with its exit code and the error it got", async () => {
    // The backup "directory" is a file: mkdir fails, even for root.
    const notADir = join(work, "blocker");
    writeFileSync(notADir, "x");
    const r = await runBackup({ NACHTWACHT_BACKUP_DIR: join(notADir, "sub") });
    expect(r.code).toBe(73);
    const row = newestStatus();
    expect(row).toMatchObject({ exit_code: 73, gelukt: 0 });
    expect(row.foutmelding).toContain("aanmaken van de back-upmap");
    expect(row.foutmelding).toMatch(/ENOTDIR|not a directory/i);
  });

  test("a backup made but not reported (service unreachable): exit 75, the backup is kept", async () => {
    const dir = join(work, "onbereikbaar");
    const env2 = join(work, "dicht.env");
    writeFileSync(env2, `CRON_SECRET=${SECRET}\nPORT=1\nHOST=127.0.0.1\n`, { mode: 0o600 });
    const r = await runBackup({ NACHTWACHT_BACKUP_DIR: dir, NACHTWACHT_ENV: env2 });
    expect(r.code).toBe(75);
    expect(r.out).toContain("backup-status niet bereikt");
    expect(readdirSync(dir).filter((f) => f.endsWith(".db.gz"))).toHaveLength(1);
  });

  test("a corrupt database is not passed off as a backup", async () => {
    const bad = join(work, "kapot.db");
    writeFileSync(bad, Buffer.concat([Buffer.from("SQLite format 3\0"), Buffer.alloc(8192, 0xab)]));
    const dir = join(work, "kapot");
    mkdirSync(dir);
    const r = await runBackup({ NACHTWACHT_BACKUP_DIR: dir, NACHTWACHT_DB: bad });
    expect(r.code).not.toBe(0);
    expect(readdirSync(dir).filter((f) => f.endsWith(".gz"))).toEqual([]);
    const row = newestStatus();
    expect(row.exit_code).toBe(r.code);
    expect(row.foutmelding).toContain("online kopie");
  });

  test("the failures raised backup-failure alarms and nothing logged the secret", () => {
    expect(app.output()).toContain("backup-failure");
    expect(app.output()).not.toContain(SECRET);
  });
});
