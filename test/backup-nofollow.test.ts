// `nachtwacht backup` runs as root on files in a folder the service's user writes
// (/var/lib/nachtwacht): each is opened once, without following a symlink and without
// blocking on a FIFO, and read through that descriptor (openRegularFile), so a symlink
// swapped in after a check cannot have root copy another file. The race itself cannot be
// made deterministic: these tests pin the helper's open-once behaviour and the backup's
// refusals. And the backup does not spend the blocks reserved for root on the service
// user's data: less than twice the database free on the backup folder's file system is
// refused (74) before anything is written there (a real tmpfs, filled).
import { Database } from "bun:sqlite";
import { afterEach, describe, expect, test } from "bun:test";
import { closeSync, mkdirSync, readdirSync, readFileSync, renameSync, statfsSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { basename, join } from "node:path";
import { BackupError, makeBackup, NotARegularFile, openRegularFile } from "../src/cli/backup.ts";
import { openStore } from "../src/db.ts";
import { fillUntilFree, mountTmpfs, tempDir } from "./helpers.ts";

const cleanups: (() => unknown)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0).reverse()) c();
});

function folder(): string {
  const { dir, cleanup } = tempDir("nachtwacht-nofollow-");
  cleanups.push(cleanup);
  return dir;
}

function mkfifo(path: string): void {
  const r = Bun.spawnSync(["mkfifo", path], { stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`mkfifo: ${r.stderr.toString()}`);
}

/** What `f` throws (or null). */
function thrown(f: () => unknown): unknown {
  try {
    f();
    return null;
  } catch (e) {
    return e;
  }
}

async function rejection(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
    return null;
  } catch (e) {
    return e;
  }
}

/** A service folder with a real database (and an anchor file beside it), as /var/lib/nachtwacht. */
function serviceFolder(): { dir: string; db: string; anchors: string; backups: string } {
  const dir = folder();
  const db = join(dir, "nachtwacht.db");
  openStore(db).close();
  const anchors = join(dir, "audit-ankers.jsonl");
  writeFileSync(anchors, '{"anker":1}\n');
  return { dir, db, anchors, backups: join(dir, "backups") };
}

describe("openRegularFile: one open, no symlink followed, no FIFO waited on", () => {
  test("a symlink at the path is refused at the open (ELOOP), not followed to what it points at", () => {
    const dir = folder();
    const secret = join(dir, "nachtwacht.env");
    writeFileSync(secret, "CRON_SECRET=geheim\n");
    const link = join(dir, "zegelsleutel");
    symlinkSync(secret, link);
    const e = thrown(() => openRegularFile(link));
    expect(e).toBeInstanceOf(NotARegularFile);
    expect((e as NotARegularFile).symlink).toBe(true);
    expect((e as Error).message).toContain("symbolische koppeling");
  });

  test("a FIFO at the path is refused at once: no writer needed, nothing blocks", () => {
    const dir = folder();
    const fifo = join(dir, "audit-ankers.jsonl");
    mkfifo(fifo);
    const e = thrown(() => openRegularFile(fifo));
    expect(e).toBeInstanceOf(NotARegularFile);
    expect((e as NotARegularFile).symlink).toBe(false);
    expect((e as Error).message).toContain("geen gewoon bestand");
  });

  test("what it reads is the file it opened, also when another is renamed over the path after the open", () => {
    const dir = folder();
    const path = join(dir, "zegelsleutel");
    writeFileSync(path, "sleutel-a\n");
    const other = join(dir, "ander");
    writeFileSync(other, "CRON_SECRET=geheim\n");
    const { fd, size } = openRegularFile(path);
    try {
      renameSync(other, path);
      expect(readFileSync(path, "utf8")).toBe("CRON_SECRET=geheim\n");
      expect(readFileSync(fd, "utf8")).toBe("sleutel-a\n");
      expect(size).toBe("sleutel-a\n".length);
    } finally {
      closeSync(fd);
    }
  });

  test("a missing file is the open's own error (ENOENT), not a refusal", () => {
    const e = thrown(() => openRegularFile(join(folder(), "geen")));
    expect((e as NodeJS.ErrnoException).code).toBe("ENOENT");
  });
});

describe("nachtwacht backup on a service folder with symlinks and FIFOs", () => {
  const now = new Date("2026-11-25T02:30:00Z");

  test("the database as a symlink: 66 with the reason, nothing copied", async () => {
    const s = serviceFolder();
    const link = join(s.dir, "link.db");
    symlinkSync(s.db, link);
    const e = await rejection(makeBackup({ db: link, dir: s.backups, anchors: s.anchors, keepDays: 30, now }));
    expect(e).toBeInstanceOf(BackupError);
    expect((e as BackupError).exitCode).toBe(66);
    expect((e as Error).message).toContain(`database ${link} is een symbolische koppeling; die volgt backup niet`);
  });

  test("a folder on the way that is a symlink (root's: /var/lib/nachtwacht linked to a larger disk) is followed; only the file itself must not be one", async () => {
    const s = serviceFolder();
    const linked = join(folder(), "state");
    symlinkSync(s.dir, linked);
    const done = await makeBackup({ db: join(linked, "nachtwacht.db"), dir: s.backups, anchors: join(linked, "audit-ankers.jsonl"), keepDays: 30, now });
    expect(readdirSync(s.backups)).toContain(basename(done.path));
  });

  test("the database as a FIFO: 66 at once", async () => {
    const s = serviceFolder();
    const fifo = join(s.dir, "fifo.db");
    mkfifo(fifo);
    const e = await rejection(makeBackup({ db: fifo, dir: s.backups, anchors: s.anchors, keepDays: 30, now }));
    expect((e as BackupError).exitCode).toBe(66);
  });

  test("the anchor file as a symlink: 66 naming it, what it points at not copied", async () => {
    const s = serviceFolder();
    const secret = join(s.dir, "nachtwacht.env");
    writeFileSync(secret, "CRON_SECRET=geheim\n");
    const link = join(s.dir, "ankers-link.jsonl");
    symlinkSync(secret, link);
    const e = await rejection(makeBackup({ db: s.db, dir: s.backups, anchors: link, keepDays: 30, now }));
    expect((e as BackupError).exitCode).toBe(66);
    expect((e as Error).message).toContain(`kopiëren van het ankerbestand ${link}`);
    expect((e as Error).message).toContain("geen gewoon bestand");
    expect(readdirSync(s.backups).filter((f) => f.startsWith("audit-ankers-"))).toEqual([]);
  });

  test("the marker zegelsleutel as a symlink to the environment file: 66, and no zegelsleutel-<stamp>.txt holds it", async () => {
    const s = serviceFolder();
    const secret = join(s.dir, "nachtwacht.env");
    writeFileSync(secret, "CRON_SECRET=geheim\n");
    symlinkSync(secret, join(s.dir, "zegelsleutel"));
    const e = await rejection(makeBackup({ db: s.db, dir: s.backups, anchors: s.anchors, keepDays: 30, now }));
    expect((e as BackupError).exitCode).toBe(66);
    expect((e as Error).message).toContain("symbolische koppeling");
    expect(readdirSync(s.backups).filter((f) => f.startsWith("zegelsleutel-"))).toEqual([]);
  });

  test("the marker zegelsleutel as a FIFO: 66 at once (a blocking read would hold the folder's lock forever)", async () => {
    const s = serviceFolder();
    mkfifo(join(s.dir, "zegelsleutel"));
    const e = await rejection(makeBackup({ db: s.db, dir: s.backups, anchors: s.anchors, keepDays: 30, now }));
    expect((e as BackupError).exitCode).toBe(66);
    expect((e as Error).message).toContain("geen gewoon bestand");
  });

  test("regular files are copied as before: the database, the anchor file and the marker", async () => {
    const s = serviceFolder();
    writeFileSync(join(s.dir, "zegelsleutel"), "sleutel-a\n");
    const done = await makeBackup({ db: s.db, dir: s.backups, anchors: s.anchors, keepDays: 30, now });
    expect(done).toMatchObject({ anchorsCopied: true, sealKeyCopied: true });
    expect(readFileSync(join(s.backups, "zegelsleutel-20261125T023000Z.txt"), "utf8")).toBe("sleutel-a\n");
    expect(Buffer.from(Bun.gunzipSync(readFileSync(join(s.backups, "audit-ankers-20261125T023000Z.jsonl.gz")))).toString()).toBe('{"anker":1}\n');
  });
});

describe("free space in the backup folder", () => {
  test("less than twice the database free for an unprivileged writer: 74 naming both figures, nothing written (a real tmpfs, filled)", async () => {
    const s = serviceFolder();
    // A database of about 1 MiB: random data, so its copy is as large and its gzip hardly smaller.
    const db = new Database(s.db);
    db.run("CREATE TABLE ballast (b BLOB)");
    db.query("INSERT INTO ballast VALUES (?)").run(randomBytes(1024 * 1024));
    db.run("PRAGMA wal_checkpoint(TRUNCATE)"); // into the file, whose size the check measures
    db.close();
    const size = statSync(s.db).size;
    expect(size).toBeGreaterThan(1024 * 1024);
    const disk = mountTmpfs("8m");
    cleanups.push(disk.cleanup);
    mkdirSync(join(disk.dir, "backups"));
    // Room for one copy and a half: enough for VACUUM INTO and the gzip before, so a backup then succeeded.
    fillUntilFree(disk.dir, Math.ceil(size * 1.5));
    const free = statfsSync(disk.dir).bavail * statfsSync(disk.dir).bsize;
    expect(free).toBeLessThan(2 * size);
    expect(free).toBeGreaterThan(size);
    const backups = join(disk.dir, "backups");
    const e = await rejection(makeBackup({ db: s.db, dir: backups, anchors: s.anchors, keepDays: 30, now: new Date() }));
    expect(e).toBeInstanceOf(BackupError);
    expect((e as BackupError).exitCode).toBe(74);
    expect((e as Error).message).toContain(`controleren van de vrije ruimte in ${backups}`);
    expect((e as Error).message).toContain(`${free} bytes vrij, ${2 * size} bytes nodig`);
    expect(readdirSync(backups)).toEqual([]);
  });
});
