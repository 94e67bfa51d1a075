// The compiled binary as a real process: built with the `npm run build` flags, started
// from an empty temp dir on a free port, called with real fetch. Size and start time
// are printed (bench/startup.ts measures them properly); nothing here asserts timings.
// On both stores: on PostgreSQL the binary serves a fresh, empty database of the run's
// cluster (DATABASE_URL), which it migrates at start, and the test reads that database.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { appendAuditEntry, canonicalJson } from "../src/audit/chain.ts";
import { buildBinary, startBinary, type RunningBinary } from "./binary.ts";
import { appendInputs, DIALECT, openServiceDb, testCluster } from "./dialect.ts";

const SECRET = "e2e-" + "9f".repeat(30); // 64 characters, unique enough to grep for

let bin: string;
let app: RunningBinary & { dir: string };
/** PostgreSQL run: the database the binary serves. */
let databaseUrl: string | null = null;

beforeAll(async () => {
  const b = await buildBinary();
  bin = b.path;
  // DATABASE_PATH left unset: the default ./data/nachtwacht.db is relative to the cwd.
  // No SMTP_URL: mail goes to the outbox folder beside the database.
  if (DIALECT === "pg") databaseUrl = await (await testCluster()).createDatabase();
  app = await startBinary(bin, { CRON_SECRET: SECRET, DAGRAPPORT_EMAIL: "ops@example.com", ...(databaseUrl ? { DATABASE_URL: databaseUrl } : {}) });
  const mb = (statSync(bin).size / 1024 / 1024).toFixed(1);
  console.log(`binary: ${mb} MB, built in ${(b.ms / 1000).toFixed(1)} s, start → first /health answer ${app.startMs.toFixed(0)} ms`);
}, 180_000);

afterAll(async () => {
  await app?.stop();
});

/**
 * The binary's database opened beside it, as another process (openServiceDb), and an
 * append to a chain there as the host application makes it.
 */
async function openData(o: { readonly?: boolean } = {}) {
  const d = await openServiceDb({ path: join(app.dir, "data", "nachtwacht.db"), url: databaseUrl, readonly: o.readonly });
  const { store } = d;
  const append = async (tenantId: number, subject: string): Promise<void> => {
    if (store.kind === "sqlite") return void appendAuditEntry(store.sqlite, { tenantId, actor: "a@example.com", action: "login", subject });
    // what appendAuditEntry stores on SQLite: details {}, created now
    await appendInputs(store, [{ tenantId, actor: "a@example.com", action: "login", subject, details: canonicalJson({}), createdAt: new Date().toISOString() }]);
  };
  return { ...d, append };
}

async function post(path: string, init: { token?: string | null; body?: string } = {}) {
  const headers: Record<string, string> = {};
  const token = init.token === undefined ? SECRET : init.token;
  if (token !== null) headers.authorization = `Bearer ${token}`;
  if (init.body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(`${app.url}${path}`, { method: "POST", headers, body: init.body });
  return { status: res.status, type: res.headers.get("content-type") ?? "", text: await res.text(), res };
}

describe("the compiled binary", () => {
  test("started in an empty directory it creates and migrates its database there and answers /health", async () => {
    const res = await fetch(`${app.url}/health`);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ status: "ok" });
    const dbPath = join(app.dir, "data", "nachtwacht.db");
    // With DATABASE_URL the data lives in PostgreSQL: no SQLite file is made (DATABASE_PATH only places the outbox).
    expect(existsSync(dbPath)).toBe(DIALECT === "sqlite");
    const { db, close } = await openData({ readonly: true });
    try {
      const tables = (
        await db.all<{ name: string }>(
          DIALECT === "sqlite"
            ? "SELECT name FROM sqlite_master WHERE type = 'table'"
            : "SELECT table_name AS name FROM information_schema.tables WHERE table_schema IN ('public', 'drizzle') AND table_type = 'BASE TABLE'",
        )
      ).map((r) => r.name);
      expect(tables).toEqual(expect.arrayContaining(["backup_statuses", "job_runs", "audit_entries", "__drizzle_migrations"]));
    } finally {
      await close();
    }
  });

  test("a job without a token or with a wrong one is 401 with WWW-Authenticate: Bearer", async () => {
    for (const token of [null, "wrong", SECRET.slice(0, -1)]) {
      const r = await post("/api/cron/audit-verificatie", { token });
      expect(r.status).toBe(401);
      expect(r.res.headers.get("www-authenticate")).toBe("Bearer");
      expect(JSON.parse(r.text).error).toEqual(expect.any(String));
    }
  });

  test("backup-status with the token stores the report and answers 200 JSON", async () => {
    const r = await post("/api/cron/backup-status", { body: JSON.stringify({ exitCode: 0, bestandsnaam: "e2e.db.gz", grootte: 1234 }) });
    expect(r.status).toBe(200);
    expect(r.type).toContain("application/json");
    expect(JSON.parse(r.text)).toEqual({ ok: true, gelukt: true });
    const { db, close } = await openData({ readonly: true });
    try {
      const row = await db.get("SELECT exit_code, bestandsnaam, grootte, bron FROM backup_statuses ORDER BY id DESC LIMIT 1");
      expect(row).toEqual({ exit_code: 0, bestandsnaam: "e2e.db.gz", grootte: 1234, bron: "host-cron" });
    } finally {
      await close();
    }
  });

  test("audit-verificatie in the binary: 200 for intact chains, 409 naming the tampered entry", async () => {
    const { db, append, close } = await openData();
    try {
      for (const naam of ["Alfa BV", "Beta BV"]) {
        const { id } = (await db.get<{ id: number }>("INSERT INTO tenants (naam, actief, aangemaakt) VALUES (?, ?, ?) RETURNING id", naam, true, new Date().toISOString()))!;
        for (let i = 0; i < 5; i++) await append(id, `s${i}`);
      }
      const ok = await post("/api/cron/audit-verificatie");
      expect(ok.status).toBe(200);
      expect(JSON.parse(ok.text)).toMatchObject({ gecontroleerd: 2, aantalGebroken: 0 });

      await db.run("UPDATE audit_entries SET subject = 'vervalst' WHERE seq = 3 AND tenant_id = (SELECT id FROM tenants WHERE naam = 'Beta BV')");
      const broken = await post("/api/cron/audit-verificatie");
      expect(broken.status).toBe(409);
      const body = JSON.parse(broken.text) as { aantalGebroken: number; resultaten: { tenant: string; intact: boolean; fout?: { seq: number; reden: string } }[] };
      expect(body.aantalGebroken).toBe(1);
      expect(body.resultaten.find((r) => r.tenant === "Beta BV")).toMatchObject({ intact: false, fout: { seq: 3, reden: "hash-afwijkend" } });
      expect(app.output()).toContain("audit-chain-broken");
    } finally {
      await close();
    }
  });

  test("a log past 200,000 ids is verified on worker threads inside the binary, with the same verdicts", async () => {
    const { db, close } = await openData();
    try {
      // The id is not part of the hashed text: a high one makes verificationWorkers start threads.
      await db.run("UPDATE audit_entries SET id = 300000 WHERE id = (SELECT max(id) FROM audit_entries)");
    } finally {
      await close();
    }
    const r = await post("/api/cron/audit-verificatie");
    expect(r.status).toBe(409);
    const body = JSON.parse(r.text) as { gecontroleerd: number; aantalGebroken: number; resultaten: { tenant: string; intact: boolean; fout?: { seq: number; reden: string } }[] };
    expect(body).toMatchObject({ gecontroleerd: 2, aantalGebroken: 1 });
    expect(body.resultaten.find((x) => x.tenant === "Alfa BV")).toMatchObject({ intact: true });
    expect(body.resultaten.find((x) => x.tenant === "Beta BV")).toMatchObject({ intact: false, fout: { seq: 3, reden: "hash-afwijkend" } });
    expect(app.output()).not.toContain("ModuleNotFound");
  });

  test("db-onderhoud in the binary: on SQLite its quick_check runs on a worker thread, which the binary must carry", async () => {
    const r = await post("/api/cron/db-onderhoud");
    expect(r.status).toBe(200);
    const body = JSON.parse(r.text) as { ok: boolean; integriteit: unknown };
    expect(body.ok).toBe(true);
    // SQLite: "ok" from quick_check; PostgreSQL: amcheck's answer (src/pg/maintenance.ts).
    expect(DIALECT === "sqlite" ? body.integriteit : typeof body.integriteit).toEqual(DIALECT === "sqlite" ? "ok" : "object");
    expect(app.output()).not.toContain("ModuleNotFound");
  });

  test("dagrapport renders its e-mail template inside the binary and writes it to the outbox", async () => {
    const r = await post("/api/cron/dagrapport");
    expect(r.status).toBe(200);
    expect(JSON.parse(r.text)).toMatchObject({ ok: true, verzonden: true, bezorging: "outbox", ontvanger: "ops@example.com" });
    const outbox = join(app.dir, "data", "outbox");
    const mails = readdirSync(outbox).filter((f) => f.endsWith(".eml"));
    const texts = mails.map((f) => readFileSync(join(outbox, f), "utf8"));
    const daily = texts.filter((t) => /^To: ops@example\.com/m.test(t) && /Content-Type: text\/html/i.test(t) && /Content-Type: text\/plain/i.test(t));
    expect(daily.length).toBeGreaterThanOrEqual(1);
    for (const t of texts) expect(t).not.toContain(SECRET);
  });

  test("unknown paths are 404 JSON and GET on a job path does not run it", async () => {
    const unknown = await post("/api/cron/bestaat-niet");
    expect(unknown.status).toBe(404);
    const get = await fetch(`${app.url}/api/cron/backup-status`, { headers: { authorization: `Bearer ${SECRET}` } });
    expect([404, 405]).toContain(get.status);
  });

  test("the Swagger UI, its assets and the spec are served by the binary itself", async () => {
    const page = await fetch(`${app.url}/docs`);
    expect(page.status).toBe(200);
    const html = await page.text();
    expect(html).toContain('src="/docs/assets/swagger-ui-bundle.js"');
    expect(html).not.toMatch(/https?:\/\//);
    for (const asset of ["/docs/assets/swagger-ui-bundle.js", "/docs/assets/swagger-ui.css"]) {
      const r = await fetch(`${app.url}${asset}`);
      expect(r.status).toBe(200);
      expect((await r.arrayBuffer()).byteLength).toBeGreaterThan(100_000);
    }
    const spec = (await (await fetch(`${app.url}/docs/json`)).json()) as {
      paths: Record<string, { post?: { security?: unknown; requestBody?: unknown; responses: Record<string, { content?: unknown }> } }>;
      components: { securitySchemes: unknown };
    };
    // The three schemes, one per secret's side, as the committed docs/openapi.json documents them.
    const documented = JSON.parse(readFileSync(join(import.meta.dir, "..", "docs", "openapi.json"), "utf8")).components.securitySchemes;
    expect(Object.keys(documented).sort()).toEqual(["appAuth", "bearerAuth", "metricsAuth"]);
    expect(spec.components.securitySchemes).toEqual(documented);
    expect(JSON.stringify(spec.components.securitySchemes)).toContain("CRON_SECRET: opent alleen de taken.");
    const jobs = Object.keys(spec.paths).filter((p) => p.startsWith("/api/cron/"));
    expect(jobs).toHaveLength(11);
    // every job: bearer auth, a 401, and the schema of its 200 body; backup-status its request body
    for (const path of jobs) {
      const op = spec.paths[path]!.post!;
      expect(op.security).toEqual([{ bearerAuth: [] }]);
      expect(Object.keys(op.responses)).toEqual(expect.arrayContaining(["200", "401"]));
      expect(op.responses["200"]!.content).toBeDefined();
      expect(op.requestBody !== undefined).toBe(path === "/api/cron/backup-status");
    }
  });

  test("the secret appears neither on the process's command line nor in anything it wrote", async () => {
    const cmdline = readFileSync(`/proc/${app.pid}/cmdline`, "utf8");
    expect(cmdline).not.toContain(SECRET);
    // a 401 and a success were logged by now; the secret must be in neither
    expect(app.output().length).toBeGreaterThan(0);
    expect(app.output()).not.toContain(SECRET);
  });

  test("without CRON_SECRET the binary refuses to start, naming the variable", async () => {
    const p = Bun.spawn([bin], { cwd: app.dir, env: { PATH: process.env.PATH ?? "/usr/bin:/bin", PORT: "0" }, stdout: "pipe", stderr: "pipe" });
    const [code, stderr] = await Promise.all([p.exited, new Response(p.stderr).text()]);
    expect(code).toBe(2);
    expect(stderr).toContain("CRON_SECRET");
  });
});
