// /metrics against the real thing: a Prometheus server (Debian's package `prometheus`)
// scrapes the running service over loopback with the scrape job of docs/operations.md,
// its HTTP API returns the seeded values, and it evaluates ops/nachtwacht-alerts.yml on
// them; promtool checks and unit-tests those rules (ops/nachtwacht-alerts.test.yml).
// Without prometheus/promtool these tests FAIL, naming the package; .ci/run installs it.
import { afterEach, describe, expect, test } from "bun:test";
import { createServer } from "node:net";
import { writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { newIngestCounters } from "../src/ingest/counters.ts";
import { JOB_NAMES } from "../src/schedule.ts";
import { stateZegel, call, NOW, tempDir, backupZegel, eindzegel, zegel } from "./helpers.ts";
import { addTenant, makeEnv, type Env } from "./dialect.ts";
import { APP_SECRET, auditEntry } from "./ingest-fixtures.ts";

const OPS = resolve(import.meta.dir, "..", "ops");
const RULES = join(OPS, "nachtwacht-alerts.yml");
const RULE_TESTS = join(OPS, "nachtwacht-alerts.test.yml");
const H = 3600_000;
const at = (msBeforeNow: number) => new Date(NOW.getTime() - msBeforeNow).toISOString();
/** The alert names in the rules file, in order. */
const alertNames = async () => [...(await Bun.file(RULES).text()).matchAll(/- alert: (\w+)/g)].map((m) => m[1]!);

function prometheusTool(name: "promtool" | "prometheus"): string {
  const path = Bun.which(name);
  if (!path) throw new Error(`${name} not found: this test needs Debian's package \`prometheus\` (apt-get install -y prometheus; .ci/run does)`);
  return path;
}

async function run(cmd: string[], cwd?: string) {
  const p = Bun.spawn(cmd, { cwd, stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  return { code, out, err };
}

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  // last in, first out: Prometheus before the service it scrapes, the temp dir last
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A port nobody listens on right now (the kernel's pick, released again). */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((ok, fail) => server.once("error", fail).listen(0, "127.0.0.1", ok));
  const { port } = server.address() as { port: number };
  await new Promise<void>((ok) => server.close(() => ok()));
  return port;
}

describe("alert rules (ops/nachtwacht-alerts.yml)", () => {
  test("promtool check rules accepts them", async () => {
    const r = await run([prometheusTool("promtool"), "check", "rules", RULES]);
    expect(r).toMatchObject({ code: 0, err: "" });
    expect(r.out).toContain(`SUCCESS: ${(await alertNames()).length} rules found`);
  });

  test("promtool test rules: every alert fires when it should and not before (ops/nachtwacht-alerts.test.yml)", async () => {
    const r = await run([prometheusTool("promtool"), "test", "rules", RULE_TESTS], OPS);
    expect({ code: r.code, out: r.out, err: r.err }).toEqual({ code: 0, out: expect.stringContaining("SUCCESS"), err: "" });
    // every rule in the file has a test that expects it to fire
    const rules = await alertNames();
    const tested = new Set([...(await Bun.file(RULE_TESTS).text()).matchAll(/alertname: (\w+)\n\s+exp_alerts:\n\s+- exp_labels/g)].map((m) => m[1]));
    expect(rules.filter((r) => !tested.has(r))).toEqual([]);
  });
});

describe("a real Prometheus server scraping the service", () => {
  test("reads the seeded values through its HTTP API and fires the alerts they call for", async () => {
    const prometheus = prometheusTool("prometheus");
    const counters = newIngestCounters();
    const env: Env = await makeEnv({ APP_SECRET }, { counters });
    cleanups.push(() => env.cleanup());

    // Seed: a failed dagrapport, one broken chain out of two, a recent good backup, write API traffic.
    const dagStart = at(6 * H);
    await env.db.run(
      "INSERT INTO job_runs (job, gestart, beeindigd, uitkomst, http_status, zegel, eindzegel) VALUES ('dagrapport', ?, ?, 'fout', 500, ?, ?)",
      dagStart,
      at(6 * H - 4000),
      zegel("dagrapport", dagStart),
      eindzegel({ job: "dagrapport", gestart: dagStart, beeindigd: at(6 * H - 4000), uitkomst: "fout", httpStatus: 500 }),
    );
    for (const [naam, intact] of [["A", true], ["B", false]] as const) {
      const id = await addTenant(env.db, naam);
      await env.db.run(
        "INSERT INTO audit_verification_state (tenant_id, gecontroleerd, intact, aantal_entries, fout_seq, fout_entry_id, fout_reden, zegel) VALUES (?, ?, ?, 3, NULL, NULL, NULL, ?)",
        id,
        at(11 * H),
        intact,
        stateZegel({ tenantId: id, gecontroleerd: at(11 * H), intact, aantalEntries: 3 }),
      );
    }
    const backup = { ontvangen: at(3 * H), exitCode: 0, gelukt: true, bestandsnaam: "b.db.gz", grootte: 10, foutmelding: null, bron: "host-cron" };
    await env.db.run(
      "INSERT INTO backup_statuses (ontvangen, exit_code, gelukt, bestandsnaam, grootte, foutmelding, bron, zegel) VALUES (?, 0, ?, 'b.db.gz', 10, NULL, 'host-cron', ?)",
      backup.ontvangen,
      true,
      backupZegel(backup),
    );
    const audit = (token: string) => call(env.app, "/api/audit", { token, body: JSON.stringify({ entries: [auditEntry(1, 0), auditEntry(1, 1)] }) });
    expect((await audit(APP_SECRET)).status).toBe(200);
    expect((await audit("wrong-secret-0123456789abcdef0123456789abcdef")).status).toBe(401);

    const service = env.app.listen({ port: 0, hostname: "127.0.0.1" });
    cleanups.push(async () => {
      await service.stop(true);
    });
    const target = `127.0.0.1:${service.server!.port}`;

    const tmp = tempDir("nachtwacht-prometheus-");
    cleanups.push(() => tmp.cleanup());
    // The scrape job of docs/operations.md, scraping every second.
    const config = join(tmp.dir, "prometheus.yml");
    writeFileSync(
      config,
      [
        "global:",
        "  scrape_interval: 1s",
        "  scrape_timeout: 1s",
        "  evaluation_interval: 1s",
        "rule_files:",
        `  - ${JSON.stringify(RULES)}`,
        "scrape_configs:",
        "  - job_name: nachtwacht",
        "    honor_labels: true",
        "    metrics_path: /metrics",
        "    static_configs:",
        `      - targets: [${JSON.stringify(target)}]`,
        "",
      ].join("\n"),
    );
    const check = await run([prometheusTool("promtool"), "check", "config", config]);
    expect({ code: check.code, err: check.err }).toEqual({ code: 0, err: "" });

    const port = await freePort();
    const logFile = join(tmp.dir, "prometheus.log");
    const proc = Bun.spawn(
      [prometheus, `--config.file=${config}`, `--storage.tsdb.path=${join(tmp.dir, "data")}`, `--web.listen-address=127.0.0.1:${port}`],
      { stdout: Bun.file(logFile), stderr: Bun.file(join(tmp.dir, "prometheus.err")), stdin: "ignore" },
    );
    cleanups.push(async () => {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      proc.kill("SIGTERM");
      const stopped = await Promise.race([proc.exited.then(() => true), Bun.sleep(15_000).then(() => false)]);
      if (!stopped) {
        proc.kill("SIGKILL");
        await proc.exited;
      }
    });
    const api = `http://127.0.0.1:${port}/api/v1`;

    /** Polls `probe` until it returns a value, for at most `ms`; fails with the last thing seen and Prometheus's log. */
    async function until<T>(what: string, probe: () => Promise<T | undefined>, ms = 30_000): Promise<T> {
      const deadline = Date.now() + ms;
      let last: unknown;
      for (;;) {
        try {
          const v = await probe();
          if (v !== undefined) return v;
        } catch (e) {
          last = e instanceof Error ? e.message : e;
        }
        const log = async () => (await Bun.file(join(tmp.dir, "prometheus.err")).text()).slice(-3000);
        if (proc.exitCode !== null) throw new Error(`prometheus exited with ${proc.exitCode} while waiting for ${what}:\n${await log()}`);
        if (Date.now() > deadline) throw new Error(`no ${what} within ${ms} ms (last: ${JSON.stringify(last)}):\n${await log()}`);
        await Bun.sleep(100); // the poll interval, bounded by the deadline above
      }
    }

    async function query(promql: string): Promise<{ metric: Record<string, string>; value: [number, string] }[]> {
      const r = await fetch(`${api}/query?query=${encodeURIComponent(promql)}`);
      const body = (await r.json()) as { status: string; data: { result: { metric: Record<string, string>; value: [number, string] }[] }; error?: string };
      if (body.status !== "success") throw new Error(`${promql}: ${body.error}`);
      return body.data.result;
    }

    /** Waits until the query returns exactly one sample equal to `expected`; returns its labels. */
    async function sampleIs(promql: string, expected: number) {
      let seen: unknown;
      return until(`${promql} == ${expected}`, async () => {
        const result = await query(promql);
        seen = result;
        if (result.length === 1 && Number(result[0]!.value[1]) === expected) return result[0]!.metric;
        throw new Error(JSON.stringify(seen));
      });
    }

    expect(await sampleIs('up{job="nachtwacht"}', 1)).toMatchObject({ job: "nachtwacht", instance: target });
    const start = await sampleIs('nachtwacht_job_last_start_timestamp_seconds{job="dagrapport"}', Date.parse(dagStart) / 1000);
    // honor_labels keeps the job's own name in `job` (no exported_job), with the target's instance
    expect(start).toEqual({ __name__: "nachtwacht_job_last_start_timestamp_seconds", job: "dagrapport", instance: target });
    await sampleIs('nachtwacht_job_last_duration_seconds{job="dagrapport"}', 4);
    await sampleIs('nachtwacht_job_last_outcome{job="dagrapport", outcome="fout"}', 1);
    await sampleIs("count(nachtwacht_job_running)", JOB_NAMES.length);
    expect(await query('{exported_job!=""}')).toEqual([]);
    await sampleIs("nachtwacht_audit_tenants_checked", 2);
    await sampleIs("nachtwacht_audit_tenants_broken", 1);
    await sampleIs("nachtwacht_backup_last_age_seconds", 3 * 3600);
    await sampleIs("nachtwacht_backup_last_success", 1);
    await sampleIs('nachtwacht_ingest_requests_accepted_total{endpoint="audit"}', 1);
    await sampleIs('nachtwacht_ingest_rows_stored_total{endpoint="audit"}', 2);
    await sampleIs('nachtwacht_ingest_requests_rejected_total{status="401"}', 1);

    // A live change shows up at a following scrape.
    expect((await audit(APP_SECRET)).status).toBe(200);
    await sampleIs('nachtwacht_ingest_rows_stored_total{endpoint="audit"}', 4);

    // The rules load and evaluate without error on real data, and those with nothing to wait for fire.
    const names = await alertNames();
    await until("every rule evaluated with health ok", async () => {
      const r = (await (await fetch(`${api}/rules`)).json()) as { data: { groups: { rules: { name: string; health: string; lastError?: string }[] }[] } };
      const rules = r.data.groups.flatMap((g) => g.rules);
      if (rules.length === names.length && rules.every((x) => x.health === "ok")) return rules;
      throw new Error(JSON.stringify(rules.map((x) => [x.name, x.health, x.lastError])));
    });
    const firing = await until("NachtwachtJobFailed and NachtwachtAuditChainBroken firing", async () => {
      const r = (await (await fetch(`${api}/alerts`)).json()) as { data: { alerts: { labels: Record<string, string>; state: string }[] } };
      const names = r.data.alerts.filter((a) => a.state === "firing").map((a) => `${a.labels.alertname}/${a.labels.job}`);
      if (names.includes("NachtwachtJobFailed/dagrapport") && names.includes("NachtwachtAuditChainBroken/nachtwacht")) return names.sort();
      throw new Error(JSON.stringify(r.data.alerts.map((a) => [a.labels.alertname, a.labels.job, a.state])));
    });
    // nothing fires that the seeded state does not call for (the alerts with `for:` are still pending at most)
    expect(firing).toEqual(["NachtwachtAuditChainBroken/nachtwacht", "NachtwachtJobFailed/dagrapport"]);
  }, 90_000);
});
