// Concurrency (issue 8, part 5), against the service as a real process:
// - the host application appending audit entries from other processes while
//   audit-retentie and audit-verificatie run: every chain verifies afterwards, the
//   verification found nothing broken, and no append waited long for the lock;
// - two calls of the same job at once: the second is 409 {error} and the job runs once
//   (test/job-wrapper.test.ts shows the same in-process);
// - a manual trigger (as Swagger UI's "Try it out" sends it) while the crontab's call
//   runs, and the other way round.
import { Database } from "bun:sqlite";
import { afterEach, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { bulkChain, testDatabase, waitForRow, waitForRun, BUN, flakySmtp, ROOT, startService, verifyAll, type ServiceProcess } from "./fixtures/hardening.ts";
import { SECRET } from "./helpers.ts";

const DAY = 24 * 3600 * 1000;
const now = Date.now();
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const f of cleanups.splice(0).reverse()) await f();
});

const database = (fill: (s: Database) => void) => testDatabase(cleanups, new Date(now - 730 * DAY), fill);

async function service(env: Record<string, string>): Promise<ServiceProcess> {
  const svc = await startService(env);
  cleanups.push(async () => {
    svc.proc.kill("SIGTERM");
    await svc.exited;
  });
  return svc;
}

const post = (svc: ServiceProcess, job: string, headers: Record<string, string> = {}) =>
  fetch(`${svc.url}/api/cron/${job}`, { method: "POST", headers: { authorization: `Bearer ${SECRET}`, ...headers } });

function runsOf(path: string, job: string) {
  const s = new Database(path, { readonly: true });
  try {
    return s.query("SELECT uitkomst, http_status AS httpStatus FROM job_runs WHERE job = ? ORDER BY id").all(job);
  } finally {
    s.close();
  }
}

describe("the host application writing while the jobs run", () => {
  test("three appender processes during audit-retentie and audit-verificatie: all chains verify, nothing reported broken, no append waited long", async () => {
    const db = database((s) => {
      for (let t = 1; t <= 4; t++) {
        s.query("INSERT INTO tenants (id, naam, actief, aangemaakt) VALUES (?, ?, 1, ?)").run(t, `T${t}`, new Date(now - 4000 * DAY).toISOString());
        bulkChain(s, t, 6000, now - 3400 * DAY, now - 2700 * DAY); // to be deleted: 3 batches per tenant
        bulkChain(s, t, 500, now - 30 * DAY, now - DAY);
      }
    });
    const svc = await service(db.env);
    const appenders = [1, 2, 3].map((t) =>
      Bun.spawn([BUN, join(ROOT, "test/fixtures/append-timed.ts"), db.path, String(t), "1500", `app${t}`], { stdout: "pipe", stderr: "inherit" }),
    );
    // Every appender is writing before the jobs start; verification starts once retention runs.
    for (const t of [1, 2, 3]) await waitForRow(db.path, "SELECT 1 FROM audit_entries WHERE actor = ?", `app${t}`);
    const [retentie, verificatie] = await Promise.all([post(svc, "audit-retentie"), waitForRow(db.path, "SELECT 1 FROM job_runs WHERE job = 'audit-retentie'").then(() => post(svc, "audit-verificatie"))]);
    expect(retentie.status).toBe(200);
    expect(((await retentie.json()) as { verwijderd: number }).verwijderd).toBe(4 * 6000);
    expect(verificatie.status).toBe(200);
    const v = (await verificatie.json()) as { aantalGebroken: number; resultaten: { intact: boolean }[] };
    expect(v.aantalGebroken).toBe(0);
    expect(v.resultaten.every((r) => r.intact)).toBe(true);

    const reports = await Promise.all(
      appenders.map(async (p) => {
        expect(await p.exited).toBe(0);
        return JSON.parse(await new Response(p.stdout as ReadableStream).text()) as { appended: number; maxMs: number; p99Ms: number; busy: number; from: string; to: string };
      }),
    );
    console.log(`appends during the jobs: ${JSON.stringify(reports.map(({ from, to, ...r }) => r))}`);
    // The appenders were really at work while both jobs ran.
    const history = new Database(db.path, { readonly: true });
    const runs = history.query("SELECT job, gestart, beeindigd FROM job_runs ORDER BY id").all() as { gestart: string; beeindigd: string }[];
    history.close();
    expect(runs).toHaveLength(2);
    for (const run of runs) for (const r of reports) expect(r.from < run.beeindigd && run.gestart < r.to).toBe(true);
    for (const r of reports) {
      expect(r.busy).toBe(0);
      expect(r.appended).toBe(1500);
      // Retention writes in small batches with pauses: an append never waits long.
      expect(r.maxMs).toBeLessThan(1000);
    }
    // Verified again after everything settled, and once more by the service itself.
    const s = new Database(db.path, { readonly: true });
    try {
      for (const c of verifyAll(s, db.env.AUDIT_ANKER_BESTAND)) {
        expect(c.intact).toBe(true);
        expect(c.ankerSeq).toBe(6000);
        expect(c.retentieSeq).toBe(6000);
        expect(c.aantalEntries).toBe(c.tenantId <= 3 ? 2000 : 500);
      }
    } finally {
      s.close();
    }
    const again = await post(svc, "audit-verificatie");
    expect(again.status).toBe(200);
  }, 60_000);
});

describe("the same job twice at once, over HTTP", () => {
  async function slowWeekrapport() {
    const log: string[] = [];
    // Every message takes 150 ms at the server: the run lasts about a second.
    const smtp = await flakySmtp({ delayMs: 150, log });
    cleanups.push(() => smtp.stop());
    const db = database((s) => {
      s.query("INSERT INTO tenants (id, naam, actief, aangemaakt) VALUES (1, 'Alfa', 1, ?)").run(new Date(now - DAY).toISOString());
      for (let a = 0; a < 30; a++) s.query("INSERT INTO administrators (tenant_id, naam, email, actief) VALUES (1, ?, ?, 1)").run(`a${a}`, `a${a}@alfa.test`);
    });
    const svc = await service({ ...db.env, SMTP_URL: smtp.url });
    return { db, svc, log };
  }

  test("two clients: the second gets 409 {error} at once, the job runs once and every report goes out once", async () => {
    const { db, svc, log } = await slowWeekrapport();
    const first = post(svc, "weekrapport");
    await waitForRun(db.path, "weekrapport");
    const t0 = performance.now();
    const second = await post(svc, "weekrapport");
    expect(second.status).toBe(409);
    expect(Object.keys((await second.json()) as object)).toEqual(["error"]);
    expect(performance.now() - t0).toBeLessThan(500);
    const r = await first;
    expect(r.status).toBe(200);
    expect(((await r.json()) as { verstuurd: number }).verstuurd).toBe(30);
    expect(log).toHaveLength(30);
    // The refused call is not a run: one row, finished.
    expect(runsOf(db.path, "weekrapport")).toEqual([{ uitkomst: "ok", httpStatus: 200 }]);
  }, 30_000);

  test("a manual trigger from Swagger UI during the crontab's call gets 409; a crontab call during a manual run gets 409 and curl exits 22", async () => {
    const { db, svc, log } = await slowWeekrapport();
    const envFile = join(db.dir, "nachtwacht.env");
    writeFileSync(envFile, `CRON_SECRET=${SECRET}\nPORT=${new URL(svc.url).port}\n`, { mode: 0o600 });
    const cron = () =>
      Bun.spawn(["bash", join(ROOT, "ops/nachtwacht-call.sh"), "weekrapport", "60"], {
        env: { PATH: process.env.PATH!, NACHTWACHT_ENV: envFile, NACHTWACHT_LOG: "stdout" },
        stdout: "pipe",
        stderr: "pipe",
      });
    // What Swagger UI's "Try it out" sends: the bearer token from Authorize, accept JSON.
    const swagger = () => post(svc, "weekrapport", { accept: "application/json", origin: svc.url, referer: `${svc.url}/docs` });

    // 1. The scheduled call is running; someone presses "Execute" in Swagger UI.
    const scheduled = cron();
    await waitForRun(db.path, "weekrapport");
    const manual = await swagger();
    expect(manual.status).toBe(409);
    expect(((await manual.json()) as { error: string }).error).toContain("loopt al");
    expect(await scheduled.exited).toBe(0);
    expect(await new Response(scheduled.stdout as ReadableStream).text()).toContain("(HTTP 200");

    // 2. Next week's run started by hand; the crontab fires meanwhile.
    const s = new Database(db.path);
    s.run("DELETE FROM weekly_report_deliveries"); // as if a new week: all owed again
    s.close();
    const manual2 = swagger();
    await waitForRun(db.path, "weekrapport");
    const scheduled2 = cron();
    expect(await scheduled2.exited).toBe(22);
    const out = await new Response(scheduled2.stdout as ReadableStream).text();
    expect(out).toContain("(HTTP 409");
    expect(out).not.toContain(SECRET);
    expect((await manual2).status).toBe(200);

    expect(log).toHaveLength(60);
    expect(runsOf(db.path, "weekrapport")).toEqual([
      { uitkomst: "ok", httpStatus: 200 },
      { uitkomst: "ok", httpStatus: 200 },
    ]);
  }, 30_000);
});
