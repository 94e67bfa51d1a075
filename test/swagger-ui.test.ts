// Swagger UI in real headless Chromium, served by the compiled binary: authorize with
// the secret, run backup-status with its example body, see the 200 in the page, and
// check that the page asked nothing of any other origin (hosts are often offline).
// On both stores (test/dialect.ts): on the PostgreSQL run the binary gets DATABASE_URL,
// a fresh database of the run's cluster.
import { SQL } from "bun";
import { Database } from "bun:sqlite";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { chromium, type Browser } from "playwright-core";
import { buildBinary, ROOT, startBinary, type RunningBinary } from "./binary.ts";
import { DIALECT, testCluster } from "./dialect.ts";

const CHROMIUM = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].find((p) => existsSync(p));
if (!CHROMIUM) console.warn("SKIPPED test/swagger-ui.test.ts: Debian's chromium is not installed (apt-get install -y chromium)");

const SECRET = "swagger-" + "7e".repeat(30);
const SCREENSHOT = join(ROOT, "out", "swagger.png");

describe.skipIf(!CHROMIUM)("Swagger UI from the binary in headless Chromium", () => {
  let app: RunningBinary & { dir: string };
  let browser: Browser;
  /** The PostgreSQL run's database (DATABASE_URL), null on SQLite. */
  let pgUrl: string | null = null;

  /** The newest stored backup report, read from the store the binary wrote to. */
  async function newestBackupStatus(): Promise<unknown> {
    const q = "SELECT exit_code, bestandsnaam, bron FROM backup_statuses ORDER BY id DESC LIMIT 1";
    if (pgUrl !== null) {
      const sql = new SQL(pgUrl, { max: 1 });
      try {
        return (await sql.unsafe(q))[0] ?? null;
      } finally {
        await sql.close();
      }
    }
    const db = new Database(join(app.dir, "data", "nachtwacht.db"), { readonly: true });
    try {
      return db.query(q).get();
    } finally {
      db.close();
    }
  }

  beforeAll(async () => {
    const { path } = await buildBinary();
    if (DIALECT === "pg") pgUrl = await (await testCluster()).createDatabase();
    app = await startBinary(path, { CRON_SECRET: SECRET, ...(pgUrl === null ? {} : { DATABASE_URL: pgUrl }) });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      // playwright gives the browser a fresh temporary profile of its own
      args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"],
    });
  }, 180_000);

  afterAll(async () => {
    await browser?.close();
    await app?.stop();
  });

  test("authorize, run backup-status with its example body, see 200; every request stays on the service", async () => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    page.setDefaultTimeout(10_000);
    const requests: string[] = [];
    page.on("request", (r) => requests.push(r.url()));

    await page.goto(`${app.url}/docs`);
    await page.locator(".swagger-ui .info .title").filter({ hasText: "nachtwacht" }).waitFor({ timeout: 20_000 });

    // Authorize: two schemes, bearerAuth (CRON_SECRET, the jobs) and appAuth (APP_SECRET,
    // the write API); each asks for its token alone. The jobs need bearerAuth.
    await page.locator(".auth-wrapper button.authorize").click();
    const modal = page.locator(".dialog-ux .modal-ux");
    const cronForm = modal.locator("form").filter({ hasText: "bearerAuth" });
    await cronForm.locator("input").fill(SECRET);
    await cronForm.locator("button.authorize").click();
    await modal.locator("button.btn-done").first().click();
    mkdirSync(join(ROOT, "out"), { recursive: true });
    await page.screenshot({ path: join(ROOT, "out", "swagger-overview.png") });

    const op = page.locator("#operations-cron-postApiCronBackup-status");
    await op.locator(".opblock-summary").click();
    await op.locator("button.try-out__btn").click();
    const body = op.locator("textarea.body-param__text");
    expect(JSON.parse(await body.inputValue())).toMatchObject({ exitCode: 0, bestandsnaam: "nachtwacht-2026-07-23.db.gz" });
    await op.locator("button.execute").click();

    const live = op.locator(".live-responses-table .response");
    await live.locator(".response-col_status").filter({ hasText: "200" }).waitFor({ timeout: 20_000 });
    const shown = await live.locator(".response-col_description").innerText();
    expect(shown).toContain('"gelukt": true');
    // The curl line Swagger UI offers carries the token; the service's stylesheet hides it.
    expect(await op.locator(".curl-command").isVisible()).toBe(false);
    expect(await page.locator("body").innerText()).not.toContain(SECRET);
    await live.scrollIntoViewIfNeeded();
    await page.evaluate(() => window.scrollBy(0, 300));
    await page.screenshot({ path: SCREENSHOT });
    await context.close();

    // The click really ran the job: the report is stored.
    expect(await newestBackupStatus()).toEqual({
      exit_code: 0,
      bestandsnaam: "nachtwacht-2026-07-23.db.gz",
      bron: "host-cron",
    });

    const origin = new URL(app.url).origin;
    expect(requests.length).toBeGreaterThanOrEqual(4); // page, css, bundle, spec, the call
    expect(requests.filter((u) => !u.startsWith("data:") && new URL(u).origin !== origin)).toEqual([]);
    expect(requests).toContain(`${origin}/docs/json`);
    expect(requests).toContain(`${origin}/api/cron/backup-status`);
  }, 60_000);
});
