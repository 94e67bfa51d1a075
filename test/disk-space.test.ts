// The free space of the disks nachtwacht writes to, on real file systems of a known
// size: tmpfs mounts (root, as .ci/run runs the tests), filled with a ballast file.
// The daily report names a disk below SCHIJF_MIN_VRIJ_PROCENT (let-op; actie below
// half of it); /metrics exports each disk's free and total bytes and the threshold.
import { afterEach, describe, expect, test } from "bun:test";
import { mkdirSync, rmSync, statfsSync } from "node:fs";
import { join } from "node:path";
import { diskLevel, fileSystemSpace, watchedPaths } from "../src/disk-space.ts";
import { parseConfig } from "../src/config.ts";
import { call, fillUntilFree, mountTmpfs, SECRET, TEST_SIGNING_KEY } from "./helpers.ts";
import { DIALECT, makeEnv, type Env } from "./dialect.ts";

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const MIB = 1024 * 1024;
const METRICS_SECRET = "metrics-secret-0123456789abcdef0123456789abcdef";

/** A fresh tmpfs of `mib` MiB at a new folder (mountTmpfs). */
function tmpfs(mib: number): string {
  const { dir, cleanup } = mountTmpfs(`${mib}m`);
  cleanups.push(cleanup);
  return dir;
}

/** Fills `dir`'s file system with a ballast file until `percent` of it is free (for an unprivileged writer). */
function fillTo(dir: string, percent: number): void {
  const s = statfsSync(dir);
  fillUntilFree(dir, Math.floor((s.blocks * s.bsize * percent) / 100), `ballast-${percent}`);
}

describe("the disks nachtwacht writes to", () => {
  test("each file system once, with what is on it, measured where a file not made yet will be", () => {
    const a = tmpfs(4);
    const b = tmpfs(2);
    const config = parseConfig({ CRON_SECRET: SECRET, AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY, DATABASE_PATH: join(a, "data", "n.db"), AUDIT_ANKER_BESTAND: join(b, "ankers", "a.jsonl") });
    // Nothing made yet: the database's folder and the anchor file's do not exist.
    const disks = fileSystemSpace(watchedPaths(config, config.databasePath));
    expect(disks).toEqual([
      { bestanden: ["database", "outbox"], map: a, vrijBytes: 4 * MIB, totaalBytes: 4 * MIB },
      { bestanden: ["ankerbestand"], map: b, vrijBytes: 2 * MIB, totaalBytes: 2 * MIB },
    ]);
    // On PostgreSQL the database is not on this host; with SMTP_URL there is no outbox.
    const smtp = parseConfig({ CRON_SECRET: SECRET, AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY, DATABASE_PATH: join(a, "n.db"), AUDIT_ANKER_BESTAND: join(a, "a.jsonl"), SMTP_URL: "smtp://127.0.0.1:25" });
    expect(fileSystemSpace(watchedPaths(smtp, null))).toEqual([{ bestanden: ["ankerbestand"], map: a, vrijBytes: 4 * MIB, totaalBytes: 4 * MIB }]);
    mkdirSync(join(a, "data"));
    fillTo(a, 25);
    const [filled] = fileSystemSpace(watchedPaths(config, config.databasePath));
    expect(filled!.map).toBe(join(a, "data"));
    expect(filled!.vrijBytes).toBe(MIB);
  });

  test("the level: let-op below SCHIJF_MIN_VRIJ_PROCENT, actie below half of it; 0 never", () => {
    const at = (vrij: number) => diskLevel({ vrijBytes: vrij, totaalBytes: 1000 }, 10);
    expect([at(1000), at(100), at(99), at(50), at(49), at(0)]).toEqual(["ok", "ok", "let-op", "let-op", "actie", "actie"]);
    expect(diskLevel({ vrijBytes: 0, totaalBytes: 1000 }, 0)).toBe("ok");
  });
});

describe("dagrapport and /metrics on a disk that fills up", () => {
  let env: Env;
  afterEach(() => env?.cleanup());

  test("GET /health answers 503 schijf-vol once the SQLite database's disk has less than 1 MiB free (it answered 200 while every write failed with SQLITE_FULL); on PostgreSQL this disk is not the database's", async () => {
    const disk = tmpfs(8);
    env = await makeEnv({ DATABASE_PATH: join(disk, "data", "nachtwacht.db"), AUDIT_ANKER_BESTAND: join(disk, "ankers.jsonl") });
    const health = async () => {
      const r = await call(env.app, "/health", { method: "GET", token: null });
      return [r.status, r.json.database];
    };
    expect(await health()).toEqual([200, "bereikbaar"]);
    fillUntilFree(disk, 2 * MIB, "ballast-2m");
    expect(await health()).toEqual([200, "bereikbaar"]);
    fillUntilFree(disk, 0, "ballast-0");
    expect(await health()).toEqual(DIALECT === "sqlite" ? [503, "schijf-vol"] : [200, "bereikbaar"]);
    rmSync(join(disk, "ballast-0"));
    expect(await health()).toEqual([200, "bereikbaar"]);
  });

  test("the report's disk section, its status (let-op at 7 % free, actie at 3 %) and /metrics's figures", async () => {
    const disk = tmpfs(16);
    env = await makeEnv({ DATABASE_PATH: join(disk, "data", "nachtwacht.db"), AUDIT_ANKER_BESTAND: join(disk, "ankers.jsonl"), SCHIJF_MIN_VRIJ_PROCENT: "10", DAGRAPPORT_EMAIL: "ops@example.test", METRICS_SECRET });
    const bestanden = DIALECT === "sqlite" ? ["database", "ankerbestand", "outbox"] : ["ankerbestand", "outbox"];
    const map = DIALECT === "sqlite" ? join(disk, "data") : disk;

    const roomy = await call(env.app, "/api/cron/dagrapport");
    expect(roomy.status).toBe(200);
    expect(roomy.json.schijf).toHaveLength(1);
    expect(roomy.json.schijf[0]).toMatchObject({ bestanden, map, totaalBytes: 16 * MIB, totaal: "16.0 MB", niveau: "ok" });
    expect(roomy.json.schijf[0].vrijProcent).toBeGreaterThan(90);
    expect(roomy.json.status.punten.filter((p: string) => p.includes("schijf"))).toEqual([]);

    fillTo(disk, 7);
    const low = await call(env.app, "/api/cron/dagrapport");
    expect(low.status).toBe(200);
    const [fs] = low.json.schijf;
    expect(fs).toMatchObject({ bestanden, map, niveau: "let-op" });
    expect(fs.vrijProcent).toBeGreaterThanOrEqual(5);
    expect(fs.vrijProcent).toBeLessThan(10);
    const wat = DIALECT === "sqlite" ? "database, ankerbestand en outbox" : "ankerbestand en outbox";
    // Among the report's other points (a new installation: no backup yet, jobs not started).
    expect(low.json.status.punten).toContain(
      `De schijf raakt vol: nog ${fs.vrij} vrij (${fs.vrijProcent} %) op de schijf van ${wat} (${map}). Maak ruimte of vergroot de schijf voordat schrijven mislukt.`,
    );

    const scrape = await call(env.app, "/metrics", { method: "GET", token: METRICS_SECRET });
    expect(scrape.status).toBe(200);
    const metrics = scrape.text;
    for (const b of bestanden) {
      const free = new RegExp(`^nachtwacht_filesystem_avail_bytes\\{bestand="${b}"\\} (\\d+)$`, "m").exec(metrics);
      const size = new RegExp(`^nachtwacht_filesystem_size_bytes\\{bestand="${b}"\\} (\\d+)$`, "m").exec(metrics);
      expect(Number(size?.[1])).toBe(16 * MIB);
      expect(Number(free?.[1]) / (16 * MIB)).toBeLessThan(0.1);
    }
    expect(metrics).toMatch(/^nachtwacht_filesystem_min_free_ratio 0\.1$/m);

    fillTo(disk, 3);
    const full = await call(env.app, "/api/cron/dagrapport");
    expect(full.status).toBe(200);
    expect(full.json.schijf[0].niveau).toBe("actie");
    expect(full.json.status.niveau).toBe("actie");
    expect(full.json.status.punten.filter((p: string) => p.includes("schijf"))).toEqual([
      `De schijf is bijna vol: nog ${full.json.schijf[0].vrij} vrij (${full.json.schijf[0].vrijProcent} %) op de schijf van ${wat} (${map}). Maak ruimte of vergroot de schijf voordat schrijven mislukt.`,
    ]);
    // The mail says it too.
    const mail = env.mailer.sent.at(-1)!;
    expect(mail.text).toContain(`${full.json.schijf[0].vrij} (${full.json.schijf[0].vrijProcent} %)`);
    expect(mail.text).toContain("De schijf is bijna vol");
  });
});
