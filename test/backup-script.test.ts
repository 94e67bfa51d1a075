// ops/backup.sh, the thin caller of `nachtwacht backup`, with the compiled binary against
// the running service: a real online copy while the database is in use, the report to
// backup-status, and forced failures. No sqlite3 CLI is needed.
// On both stores: on PostgreSQL the service serves a fresh database of the run's cluster
// (DATABASE_URL; it migrates it at start) and the backup is pg_dump's custom-format
// archive (src/pg/backup.ts), checked here the way a restore uses it: restored with
// pg_restore into another fresh database and read back.
import { Database } from "bun:sqlite";
import { SQL } from "bun";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { libpqEnv } from "../src/pg/backup.ts";
import { openPgStore } from "../src/pg/store.ts";
import { buildBinary, ROOT, startBinary, type RunningBinary } from "./binary.ts";
import { DIALECT, openServiceDb, pgOnly, sqliteOnly, testCluster } from "./dialect.ts";

const SCRIPT = join(ROOT, "ops", "backup.sh");
const SECRET = "backup-" + "5a".repeat(30);
/** The backup file's name: a gzipped SQLite copy, or pg_dump's archive on PostgreSQL (by design, src/pg/backup.ts). */
const BACKUP_NAME = DIALECT === "sqlite" ? /^nachtwacht-\d{8}T\d{6}Z\.db\.gz$/ : /^nachtwacht-\d{8}T\d{6}Z\.pgdump$/;
const isBackup = (f: string) => f.endsWith(DIALECT === "sqlite" ? ".db.gz" : ".pgdump");

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
  /** The pages in use of the service's database (what VACUUM INTO copies), in bytes. */
  const usedBytes = () => {
    const db = new Database(dbPath, { readonly: true });
    try {
      const pragma = (name: string) => Number((db.query(`PRAGMA ${name}`).values() as [number][])[0]![0]);
      return (pragma("page_count") - pragma("freelist_count")) * pragma("page_size");
    } finally {
      db.close();
    }
  };
  /** PostgreSQL run: the database the service serves. */
  let url: string | null = null;

  beforeAll(async () => {
    const { path } = await buildBinary();
    bin = path;
    if (DIALECT === "pg") url = await (await testCluster()).createDatabase();
    app = await startBinary(path, { CRON_SECRET: SECRET, ...(url ? { DATABASE_URL: url } : {}) });
    dbPath = join(app.dir, "data", "nachtwacht.db");
    work = mkdtempSync(join(tmpdir(), "nachtwacht-backup-"));
    envFile = join(work, "nachtwacht.env");
    writeFileSync(envFile, `CRON_SECRET=${SECRET}\nPORT=${new URL(app.url).port}\nHOST=127.0.0.1\n`, { mode: 0o600 });
    const { db, close } = await openServiceDb({ path: dbPath, url });
    try {
      // 500 tenants in one statement (one transaction).
      const rows = Array.from({ length: 500 }, (_, i) => [`Tenant ${i}`, true, new Date().toISOString()]);
      await db.run(`INSERT INTO tenants (naam, actief, aangemaakt) VALUES ${rows.map(() => "(?, ?, ?)").join(", ")}`, ...rows.flat());
    } finally {
      await close();
    }
  }, 180_000);

  afterAll(async () => {
    await app?.stop();
    rmSync(work, { recursive: true, force: true });
  });

  /**
   * The script as cron runs it. The database: NACHTWACHT_DB (SQLite), or DATABASE_URL in
   * its environment (PostgreSQL: backup.sh has no setting of its own for it; the
   * installed layout has it in the env file, as the second test shows). A value of
   * undefined leaves that variable out.
   */
  async function runBackup(env: Record<string, string | undefined>, fileSizeLimitKb?: number, cwd?: string) {
    const all: Record<string, string | undefined> = {
      PATH: "/usr/bin:/bin", // no sqlite3 needed: nothing but the binary (and on PostgreSQL pg_dump, from the client package)
      NACHTWACHT_BIN: bin,
      NACHTWACHT_ENV: envFile,
      NACHTWACHT_LOG: "stdout",
      NACHTWACHT_STATE_DIR: work, // the service's working directory (/var/lib/nachtwacht on a host)
      ...(url === null ? { NACHTWACHT_DB: dbPath } : { DATABASE_URL: url }),
      NACHTWACHT_ANCHORS: join(work, "absent-ankers.jsonl"),
      ...env,
    };
    // A file size limit stands in for a full disk: a write past it fails (EFBIG; SIGXFSZ ignored).
    const cmd = fileSizeLimitKb === undefined ? ["bash", SCRIPT] : ["bash", "-c", `trap '' XFSZ; ulimit -f ${fileSizeLimitKb}; exec bash "$0"`, SCRIPT];
    const p = Bun.spawn(cmd, {
      cwd,
      env: Object.fromEntries(Object.entries(all).filter((e): e is [string, string] => e[1] !== undefined)),
      stdout: "pipe",
      stderr: "pipe",
    });
    const [code, out, err] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
    return { code, out: out + err };
  }

  async function newestStatus(): Promise<Row> {
    const { db, close } = await openServiceDb({ path: dbPath, url, readonly: true });
    try {
      return (await db.get<Row>("SELECT exit_code, gelukt, bestandsnaam, grootte, foutmelding, bron FROM backup_statuses ORDER BY id DESC LIMIT 1"))!;
    } finally {
      await close();
    }
  }

  /** PostgreSQL: a URL to another database of the run's cluster. */
  const otherDatabase = (name: string) => url!.replace(/\/[^/]+$/, `/${name}`);

  /** The number of tenants in the restored backup, after checking it restores soundly. */
  async function restoredTenants(file: string): Promise<number> {
    if (DIALECT === "sqlite") {
      const restored = join(work, "restored.db");
      writeFileSync(restored, Bun.gunzipSync(readFileSync(file)));
      const copy = new Database(restored, { readonly: true });
      try {
        expect(copy.query("PRAGMA integrity_check").get()).toEqual({ integrity_check: "ok" });
        return (copy.query("SELECT count(*) AS n FROM tenants").get() as { n: number }).n;
      } finally {
        copy.close();
      }
    }
    // As a restore does: pg_restore into an empty database, every statement succeeding.
    const restored = await (await testCluster()).createDatabase();
    const pgEnv = libpqEnv(restored);
    const r = Bun.spawnSync(["pg_restore", "--no-owner", "--exit-on-error", "--dbname", pgEnv.PGDATABASE!, file], { env: { PATH: "/usr/bin:/bin", ...pgEnv }, stdout: "pipe", stderr: "pipe" });
    expect([r.exitCode, r.stderr.toString()]).toEqual([0, ""]);
    const sql = new SQL(restored, { max: 1 });
    try {
      const [{ n }] = await sql`SELECT count(*)::int AS n FROM tenants`;
      return n;
    } finally {
      await sql.close();
    }
  }

  test("makes a consistent gzip copy while the service writes, and reports its name and size", async () => {
    const dir = join(work, "ok");
    // A writer on the live database during the copy, as the service's own writers would be.
    const { db: writer, close } = await openServiceDb({ path: dbPath, url });
    let writing = true;
    const writes = (async () => {
      while (writing) {
        await writer.run("INSERT INTO tenants (naam, actief, aangemaakt) VALUES ('tijdens', ?, ?)", true, new Date().toISOString());
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
    await close();
    expect(r.code).toBe(0);

    const files = readdirSync(dir).sort();
    const backups = files.filter((f) => BACKUP_NAME.test(f));
    expect(backups).toHaveLength(1);
    expect(files.filter((f) => f.startsWith("."))).toEqual([]); // no temp copy left behind
    expect(files.some((f) => /^audit-ankers-.*\.jsonl\.gz$/.test(f))).toBe(true);
    const name = backups[0]!;
    const size = statSync(join(dir, name)).size;

    expect(await restoredTenants(join(dir, name))).toBeGreaterThanOrEqual(500);

    expect(await newestStatus()).toEqual({ exit_code: 0, gelukt: 1, bestandsnaam: name, grootte: size, foutmelding: null, bron: "host-cron" });
    expect(r.out).toContain(`backup ok: ${join(dir, name)}`);
    expect(r.out).toContain('{"ok":true,"gelukt":true}');
    expect(r.out).not.toContain(SECRET);
  }, 30_000);

  test("without NACHTWACHT_DB and NACHTWACHT_ANCHORS the paths come from the env file's DATABASE_PATH and AUDIT_ANKER_BESTAND", async () => {
    const dir = join(work, "from-env");
    const anchors = join(work, "env-ankers.jsonl");
    writeFileSync(anchors, '{"tenantId":2,"seq":7}\n');
    const ownEnv = join(work, "own.env");
    // PostgreSQL: the database is the env file's DATABASE_URL (the installed layout, docs/operations.md), none in the environment.
    const database = url === null ? `DATABASE_PATH=${dbPath}` : `DATABASE_URL=${url}`;
    writeFileSync(ownEnv, `${readFileSync(envFile, "utf8")}${database}\nAUDIT_ANKER_BESTAND=${anchors}\n`, { mode: 0o600 });
    const r = await runBackup({ NACHTWACHT_BACKUP_DIR: dir, NACHTWACHT_ENV: ownEnv, NACHTWACHT_DB: "", NACHTWACHT_ANCHORS: "", DATABASE_URL: undefined });
    expect(r.code).toBe(0);
    const files = readdirSync(dir);
    const copied = files.find((f) => /^audit-ankers-.*\.jsonl\.gz$/.test(f))!;
    expect(Buffer.from(Bun.gunzipSync(readFileSync(join(dir, copied)))).toString("utf8")).toBe('{"tenantId":2,"seq":7}\n');
    expect((await newestStatus()).bestandsnaam).toBe(files.find((f) => BACKUP_NAME.test(f))!);
  }, 30_000);

  test("relative DATABASE_PATH and AUDIT_ANKER_BESTAND in the env file are the service's files (its working directory, NACHTWACHT_STATE_DIR), wherever cron runs it", async () => {
    const dir = join(work, "relatief");
    const state = join(app.dir, "data"); // the service's data folder, as /var/lib/nachtwacht under the unit
    writeFileSync(join(state, "rel-ankers.jsonl"), '{"tenantId":3,"seq":9}\n');
    const elsewhere = join(work, "elders");
    mkdirSync(elsewhere);
    const relEnv = join(work, "relatief.env");
    const database = url === null ? "DATABASE_PATH=nachtwacht.db" : `DATABASE_URL=${url}`;
    writeFileSync(relEnv, `${readFileSync(envFile, "utf8")}${database}\nAUDIT_ANKER_BESTAND=rel-ankers.jsonl\n`, { mode: 0o600 });
    const r = await runBackup(
      { NACHTWACHT_BACKUP_DIR: dir, NACHTWACHT_ENV: relEnv, NACHTWACHT_STATE_DIR: state, NACHTWACHT_DB: "", NACHTWACHT_ANCHORS: "", DATABASE_URL: undefined },
      undefined,
      elsewhere,
    );
    expect({ code: r.code, out: r.out }).toMatchObject({ code: 0 });
    const files = readdirSync(dir);
    const copied = files.find((f) => /^audit-ankers-.*\.jsonl\.gz$/.test(f))!;
    expect(Buffer.from(Bun.gunzipSync(readFileSync(join(dir, copied)))).toString("utf8")).toBe('{"tenantId":3,"seq":9}\n');
    expect(await restoredTenants(join(dir, files.find((f) => BACKUP_NAME.test(f))!))).toBeGreaterThanOrEqual(500);
    expect(readdirSync(elsewhere)).toEqual([]);
  }, 30_000);

  test("a NACHTWACHT_STATE_DIR that cannot be entered: no backup, exit 66 with the reason", async () => {
    const r = await runBackup({ NACHTWACHT_BACKUP_DIR: join(work, "geen-staat"), NACHTWACHT_STATE_DIR: join(work, "bestaat-niet") });
    expect(r.code).toBe(66);
    expect(r.out).toContain("cannot enter");
  });

  // A backup killed between its copy and the rename left `.nachtwacht-<stamp>.db.tmp` (the
  // whole database, uncompressed) for good: no later backup removed it. Now the next one
  // does, under the folder's lock; backups and other files stay.
  test("what a killed backup left half-made is removed by the next backup; the backups and other files stay", async () => {
    const dir = join(work, "restanten");
    mkdirSync(dir);
    const leftovers = [".nachtwacht-20260101T010203Z.db.tmp", ".nachtwacht-20260101T010203Z.db.tmp.gz", ".nachtwacht-20260101T010203Z.pgdump.tmp", "audit-ankers-20260101T010203Z.jsonl.gz.tmp"];
    const kept = ["nachtwacht-20260101T010203Z.db.gz", "audit-ankers-20260101T010203Z.jsonl.gz", ".nachtwacht-notities", "eigen.tmp"];
    for (const f of [...leftovers, ...kept]) writeFileSync(join(dir, f), "x".repeat(100));
    const r = await runBackup({ NACHTWACHT_BACKUP_DIR: dir });
    expect(r.code).toBe(0);
    for (const f of leftovers) expect(r.out).toContain(`overblijfsel van een afgebroken back-up verwijderd: ${f}`);
    const files = readdirSync(dir);
    for (const f of leftovers) expect(files).not.toContain(f);
    for (const f of kept) expect(files).toContain(f);
    expect(files.filter((f) => BACKUP_NAME.test(f)).length).toBeGreaterThanOrEqual(1);
  }, 30_000);

  test("a second backup into the same folder while one runs is refused at once: 69, nothing written or reported", async () => {
    const dir = join(work, "bezet");
    mkdirSync(dir);
    // Another backup holds the folder's lock: flock(1) on the folder, as nachtwacht backup takes it.
    // The holder is bash itself (read is a builtin), so killing it releases the lock.
    const holder = Bun.spawn(["bash", "-c", 'exec 9<"$1" && flock --exclusive 9 && echo held && read -r _', "bash", dir], { stdin: "pipe", stdout: "pipe", stderr: "ignore" });
    try {
      const reader = holder.stdout.getReader();
      expect(new TextDecoder().decode((await reader.read()).value)).toBe("held\n");
      const before = await newestStatus();
      const r = await runBackup({ NACHTWACHT_BACKUP_DIR: dir });
      expect(r.code).toBe(69);
      expect(r.out).toContain(`er loopt al een back-up in ${dir}`);
      expect(readdirSync(dir)).toEqual([]);
      expect(await newestStatus()).toEqual(before);
    } finally {
      holder.kill();
      await holder.exited;
    }
    // Released (the holder gone): the next one runs.
    expect((await runBackup({ NACHTWACHT_BACKUP_DIR: dir })).code).toBe(0);
  }, 30_000);

  test("two backups started together into one folder: one makes a sound backup, the other is refused (69) or runs after it; never a false 65 or 74", async () => {
    const dir = join(work, "samen");
    for (let round = 0; round < 3; round++) {
      const codes = (await Promise.all([runBackup({ NACHTWACHT_BACKUP_DIR: dir }), runBackup({ NACHTWACHT_BACKUP_DIR: dir })])).map((r) => r.code).sort();
      expect(codes[0]).toBe(0);
      expect([0, 69]).toContain(codes[1]!);
    }
    const files = readdirSync(dir);
    expect(files.filter((f) => f.startsWith("."))).toEqual([]);
    for (const f of files.filter((f) => BACKUP_NAME.test(f))) expect(await restoredTenants(join(dir, f))).toBeGreaterThanOrEqual(500);
  }, 60_000);

  test("an anchor file that is a symbolic link is not followed: 66 with the reason, and what it points at is not copied", async () => {
    const secret = join(work, "alleen-root.txt");
    writeFileSync(secret, "root:geheim\n", { mode: 0o600 });
    const link = join(work, "ankers-link.jsonl");
    symlinkSync(secret, link);
    const dir = join(work, "symlink-backups");
    const r = await runBackup({ NACHTWACHT_BACKUP_DIR: dir, NACHTWACHT_ANCHORS: link });
    expect(r.code).toBe(66);
    expect((await newestStatus()).foutmelding).toContain("geen gewoon bestand");
    expect(readdirSync(dir).filter((f) => f.startsWith("audit-ankers-"))).toEqual([]);
  });

  test("whatever the caller's umask, everything the backup writes is readable by its owner only", async () => {
    const dir = join(work, "umask-backups");
    const where = url === null ? ["--db", dbPath] : ["--database-url", url];
    const p = Bun.spawn(["sh", "-c", 'umask 022 && exec "$@"', "sh", bin, "backup", "--env", envFile, "--map", dir, "--geen-melding", ...where], {
      env: { PATH: "/usr/bin:/bin" },
      stdout: "pipe",
      stderr: "pipe",
    });
    const [code, out, err] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
    expect({ code, out: out + err }).toMatchObject({ code: 0 });
    const files = readdirSync(dir);
    expect(files.length).toBeGreaterThan(0);
    for (const f of files) expect({ f, mode: (statSync(join(dir, f)).mode & 0o777).toString(8) }).toEqual({ f, mode: "600" });
  });

  test("a missing database is reported with a non-zero exit code and the reason, and the script fails", async () => {
    // PostgreSQL: a database of that name does not exist on the server.
    const r = await runBackup({ NACHTWACHT_BACKUP_DIR: join(work, "missing"), ...(url === null ? { NACHTWACHT_DB: join(work, "geen.db") } : { DATABASE_URL: otherDatabase("geen") }) });
    expect(r.code).toBe(66);
    const row = await newestStatus();
    expect(row).toMatchObject({ exit_code: 66, gelukt: 0, bron: "host-cron" });
    // The reason in the store's own words: the missing file, or pg_dump's answer (src/pg/backup.ts passes it on).
    expect(row.foutmelding).toContain(url === null ? "geen.db bestaat niet" : 'database "geen" does not exist');
    expect(r.out).toContain('{"ok":true,"gelukt":false}');
  });

  pgOnly("an unreachable PostgreSQL server is reported as no database (66), with libpq's reason (psql's, asking the size before pg_dump), and the script fails", async () => {
    const dir = join(work, "geen-server");
    const r = await runBackup({ NACHTWACHT_BACKUP_DIR: dir, DATABASE_URL: "postgres://nw@127.0.0.1:1/nachtwacht" });
    expect(r.code).toBe(66);
    const row = await newestStatus();
    expect(row).toMatchObject({ exit_code: 66, gelukt: 0, bron: "host-cron" });
    // The first to reach for the server is psql, asking the database's size for the free-space check before pg_dump.
    expect(row.foutmelding).toContain("grootte van de database (psql, vóór pg_dump)");
    expect(row.foutmelding).toContain('"127.0.0.1", port 1 failed');
    expect(readdirSync(dir)).toEqual([]);
    expect(r.out).toContain('{"ok":true,"gelukt":false}');
  });

  test("a failing step is reported with its exit code and the error it got", async () => {
    // The backup "directory" is a file: mkdir fails, even for root.
    const notADir = join(work, "blocker");
    writeFileSync(notADir, "x");
    const r = await runBackup({ NACHTWACHT_BACKUP_DIR: join(notADir, "sub") });
    expect(r.code).toBe(73);
    const row = await newestStatus();
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
    expect(readdirSync(dir).filter(isBackup)).toHaveLength(1);
  });

  test("a backup folder on a full disk (a tmpfs of 16 KiB) is an I/O error, 74, reported with the step; no partial file is left", async () => {
    const dir = join(work, "vol");
    mkdirSync(dir);
    // A real full file system where we may mount one (root, as in CI). Else, on SQLite only,
    // a file size limit: pg_dump dies of SIGXFSZ under one instead of saying it is out of space.
    const mounted = Bun.spawnSync(["mount", "-t", "tmpfs", "-o", "size=16k,mode=700", "tmpfs", dir], { stderr: "pipe" }).exitCode === 0;
    if (!mounted && url !== null) throw new Error("this test needs root to mount a tmpfs (as .ci/run runs it)");
    try {
      const r = await runBackup({ NACHTWACHT_BACKUP_DIR: dir }, mounted ? undefined : 4);
      expect(r.code).toBe(74);
      expect(readdirSync(dir)).toEqual([]);
      const row = await newestStatus();
      expect(row).toMatchObject({ exit_code: 74, gelukt: 0 });
      // A full disk is refused before the copy or pg_dump (checkBackupRoom); under the file size limit (SQLite) the copy fails.
      expect(row.foutmelding).toContain(mounted ? "controleren van de vrije ruimte" : "online kopie (VACUUM INTO)");
      if (mounted) expect(row.foutmelding).toMatch(/te weinig vrije ruimte/);
    } finally {
      if (mounted) Bun.spawnSync(["umount", "-l", dir]);
    }
  });

  sqliteOnly("room for the copy but not for twice the database (a tmpfs of 1.5 times its size): refused with 74 before the copy, reported as failed, nothing left; the blocks reserved for root are not spent", async () => {
    const dir = join(work, "krap");
    mkdirSync(dir);
    const room = Math.ceil((usedBytes() * 1.5) / 4096) * 4096;
    const mounted = Bun.spawnSync(["mount", "-t", "tmpfs", "-o", `size=${room},mode=700`, "tmpfs", dir], { stderr: "pipe" });
    if (mounted.exitCode !== 0) throw new Error(`this test needs root to mount a tmpfs (as .ci/run runs it): ${mounted.stderr.toString().trim()}`);
    try {
      const r = await runBackup({ NACHTWACHT_BACKUP_DIR: dir });
      expect(r.code).toBe(74);
      expect(readdirSync(dir)).toEqual([]);
      const row = await newestStatus();
      expect(row).toMatchObject({ exit_code: 74, gelukt: 0, bron: "host-cron" });
      expect(row.foutmelding).toContain(`controleren van de vrije ruimte in ${dir}`);
      expect(row.foutmelding).toMatch(/te weinig vrije ruimte: \d+ bytes vrij, \d+ bytes nodig \(twee keer de \d+ bytes in gebruik in de database/);
      expect(r.out).toContain('{"ok":true,"gelukt":false}');
    } finally {
      Bun.spawnSync(["umount", "-l", dir]);
    }
  });

  sqliteOnly("the room is measured against the pages in use, not the file: a database that is mostly free pages (a retention run's, until db-onderhoud) is backed up where twice its file would not fit", async () => {
    const dir = join(work, "vrije-paginas");
    mkdirSync(dir);
    const db = new Database(dbPath);
    try {
      db.run("CREATE TABLE vulling (b BLOB)");
      for (let i = 0; i < 200; i++) db.run("INSERT INTO vulling VALUES (randomblob(65536))");
      db.run("DROP TABLE vulling");
      db.run("PRAGMA wal_checkpoint(TRUNCATE)");
    } finally {
      db.close();
    }
    const used = usedBytes();
    const size = statSync(dbPath).size;
    const room = Math.ceil((3 * used + (1 << 20)) / 4096) * 4096;
    // The file is mostly free pages: twice it would not fit in the room.
    expect(2 * size).toBeGreaterThan(room);
    const mounted = Bun.spawnSync(["mount", "-t", "tmpfs", "-o", `size=${room},mode=700`, "tmpfs", dir], { stderr: "pipe" });
    if (mounted.exitCode !== 0) throw new Error(`this test needs root to mount a tmpfs (as .ci/run runs it): ${mounted.stderr.toString().trim()}`);
    try {
      const r = await runBackup({ NACHTWACHT_BACKUP_DIR: dir });
      expect(r.code).toBe(0);
      expect(readdirSync(dir).filter((f) => f.endsWith(".db.gz"))).toHaveLength(1);
    } finally {
      Bun.spawnSync(["umount", "-l", dir]);
    }
  });

  test("a corrupt database is not passed off as a backup", async () => {
    const dir = join(work, "kapot");
    mkdirSync(dir);
    let target: Record<string, string>;
    if (url === null) {
      const bad = join(work, "kapot.db");
      writeFileSync(bad, Buffer.concat([Buffer.from("SQLite format 3\0"), Buffer.alloc(8192, 0xab)]));
      target = { NACHTWACHT_DB: bad };
    } else {
      // A database whose tenants data file is lost: the catalog points it at a file that is not there.
      const bad = await (await testCluster()).createDatabase();
      const store = await openPgStore(bad, { max: 1 });
      try {
        await store.sql`INSERT INTO tenants (naam, actief, aangemaakt) VALUES ('kapot', true, ${new Date().toISOString()})`;
        await store.sql`UPDATE pg_class SET relfilenode = 999999999 WHERE oid = 'tenants'::regclass`;
      } finally {
        await store.close();
      }
      target = { DATABASE_URL: bad };
    }
    const r = await runBackup({ NACHTWACHT_BACKUP_DIR: dir, ...target });
    expect(r.code).not.toBe(0);
    expect(readdirSync(dir).filter((f) => f.endsWith(".gz") || f.includes(".pgdump"))).toEqual([]);
    const row = await newestStatus();
    expect(row.exit_code).toBe(r.code);
    // The step that refuses it: SQLite's online copy, or pg_dump reading the table (src/pg/backup.ts).
    expect(row.foutmelding).toContain(url === null ? "online kopie" : "pg_dump");
  });

  pgOnly("a database without the data of one of nachtwacht's tables is not passed off as a backup (pg_restore --list check)", async () => {
    const dir = join(work, "onvolledig");
    const partial = await (await testCluster()).createDatabase();
    const store = await openPgStore(partial, { max: 1 });
    try {
      await store.sql`DROP TABLE login_attempts`;
    } finally {
      await store.close();
    }
    const r = await runBackup({ NACHTWACHT_BACKUP_DIR: dir, DATABASE_URL: partial });
    expect(r.code).toBe(65);
    expect(readdirSync(dir)).toEqual([]);
    const row = await newestStatus();
    expect(row).toMatchObject({ exit_code: 65, gelukt: 0 });
    expect(row.foutmelding).toContain("controle van de dump");
    expect(row.foutmelding).toContain("de dump mist de gegevens van: login_attempts");
  });

  test("the failures raised backup-failure alarms and nothing logged the secret", () => {
    expect(app.output()).toContain("backup-failure");
    expect(app.output()).not.toContain(SECRET);
  });
});
