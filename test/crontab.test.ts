// The crontab generated from the schedule table, and the call wrapper every line runs,
// exercised with real curl against a real HTTP server.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Cron } from "croner";
import { crontab } from "../src/cli/crontab.ts";
import { buildBinary, ROOT, startBinary, type RunningBinary } from "./binary.ts";

// The schedule as the README documents it (The jobs), copied here on purpose: the
// generator reads src/schedule.ts, this test checks it against the documented table.
const DOCUMENTED: Record<string, string> = {
  weekrapport: "0 18 * * 0",
  "audit-retentie": "0 2 1 1 *",
  "beveiligingslog-retentie": "0 3 * * *",
  "audit-verificatie": "0 1 * * *",
  dagrapport: "0 6 * * *",
  "audit-anker": "30 1 * * *",
  "backup-controle": "15 * * * *",
  "taken-controle": "45 * * * *",
  "beveiligingslog-analyse": "*/15 * * * *",
  "db-onderhoud": "0 4 * * 0",
};

const CALL = join(ROOT, "ops", "nachtwacht-call.sh");
const SECRET = "c0ffee" + "ab".repeat(29); // 64 hex characters, easy to grep for

describe("generated crontab", () => {
  const text = crontab();
  const jobLines = text.split("\n").filter((l) => /^[0-9*]/.test(l));

  test("ops/nachtwacht.cron is exactly what `bun run crontab` prints", () => {
    expect(readFileSync(join(ROOT, "ops", "nachtwacht.cron"), "utf8")).toBe(text);
  });

  test("has one root line per scheduled job with the documented expression, calling the wrapper with a max-time, marked as the scheduled call", () => {
    for (const [job, expr] of Object.entries(DOCUMENTED)) {
      const lines = jobLines.filter((l) => l.includes(` ${job} `));
      expect(lines).toHaveLength(1);
      const m = /^(\S+ \S+ \S+ \S+ \S+) root NACHTWACHT_GEPLAND=1 \/usr\/local\/lib\/nachtwacht\/nachtwacht-call\.sh (\S+) (\d+)$/.exec(lines[0]!);
      expect(m).not.toBeNull();
      expect(m![1]).toBe(expr);
      expect(m![2]).toBe(job);
      expect(Number(m![3])).toBeGreaterThanOrEqual(30);
      expect(() => new Cron(m![1]!, { timezone: "UTC" })).not.toThrow();
    }
  });

  test("backup-status is not scheduled; the backup script that reports to it is", () => {
    expect(jobLines.some((l) => l.includes("backup-status"))).toBe(false);
    expect(jobLines).toContain("30 2 * * * root /usr/local/lib/nachtwacht/backup.sh");
    expect(jobLines).toHaveLength(Object.keys(DOCUMENTED).length + 1);
  });

  test("runs under bash (printf is then a builtin) and holds no secret, header or token", () => {
    expect(text).toContain("SHELL=/bin/bash\n");
    const saved = process.env.CRON_SECRET;
    process.env.CRON_SECRET = SECRET;
    try {
      const again = crontab();
      expect(again).not.toContain(SECRET);
    } finally {
      if (saved === undefined) delete process.env.CRON_SECRET;
      else process.env.CRON_SECRET = saved;
    }
    expect(text).not.toMatch(/CRON_SECRET=|Bearer|Authorization|[0-9a-f]{32}/i);
  });
});

describe("nachtwacht-call.sh", () => {
  let dir: string;
  let server: ReturnType<typeof Bun.serve>;
  const seen: { path: string; authorization: string | null; body: string; type: string | null; scheduled: string | null }[] = [];

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "nachtwacht-call-"));
    // A curl that writes its own argv to a file, then runs the real one: what `ps` would show.
    const realCurl = Bun.which("curl") ?? "/usr/bin/curl";
    writeFileSync(join(dir, "curl"), `#!/bin/bash\nprintf '%s\\n' "$@" >> "${dir}/curl-argv"\nexec ${realCurl} "$@"\n`);
    chmodSync(join(dir, "curl"), 0o755);
    server = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      async fetch(req) {
        const path = new URL(req.url).pathname;
        seen.push({ path, authorization: req.headers.get("authorization"), body: await req.text(), type: req.headers.get("content-type"), scheduled: req.headers.get("x-nachtwacht-gepland") });
        if (req.method !== "POST") return new Response("method", { status: 405 });
        if (req.headers.get("authorization") !== `Bearer ${SECRET}`) return Response.json({ error: "Niet geautoriseerd." }, { status: 401 });
        if (path === "/api/cron/taken-controle") return Response.json({ ok: false, gemist: ["dagrapport"] }, { status: 409 });
        if (path === "/api/cron/audit-anker") return new Response(null, { status: 204, headers: { "x-nachtwacht-overgeslagen": "De taak audit-anker is voor de geplande tijd al uitgevoerd (run 7)." } });
        if (path === "/api/cron/traag") {
          await Bun.sleep(3000);
          return Response.json({ ok: true });
        }
        return Response.json({ ok: true, pad: path });
      },
    });
  });

  afterAll(() => {
    server.stop(true);
    rmSync(dir, { recursive: true, force: true });
  });

  function envFile(lines: string): string {
    const f = join(dir, `env-${seen.length}-${Math.random().toString(36).slice(2)}`);
    writeFileSync(f, lines, { mode: 0o600 });
    return f;
  }

  async function run(args: string[], env: Record<string, string>) {
    const p = Bun.spawn(["bash", CALL, ...args], {
      env: { PATH: `${dir}:/usr/local/bin:/usr/bin:/bin`, NACHTWACHT_LOG: "stdout", ...env },
      stdout: "pipe",
      stderr: "pipe",
    });
    const [code, out, err] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
    return { code, out: out + err };
  }

  const serverEnv = () => envFile(`# nachtwacht\nCRON_SECRET="${SECRET}"\nPORT=${server.port}\nHOST=127.0.0.1\nSMTP_URL=smtp://u:p&x@h:25\n`);

  test("a 2xx answer exits 0; the header arrives from stdin and the secret is not in curl's argv", async () => {
    rmSync(join(dir, "curl-argv"), { force: true });
    const r = await run(["dagrapport", "120"], { NACHTWACHT_ENV: serverEnv() });
    expect(r.code).toBe(0);
    expect(r.out).toContain('"pad":"/api/cron/dagrapport"');
    expect(r.out).toContain("HTTP 200");
    expect(seen.at(-1)).toMatchObject({ path: "/api/cron/dagrapport", authorization: `Bearer ${SECRET}` });
    const argv = readFileSync(join(dir, "curl-argv"), "utf8");
    expect(argv).toContain("@-");
    expect(argv).toContain("--fail-with-body");
    expect(argv).toContain("120");
    expect(argv).not.toContain(SECRET);
    expect(r.out).not.toContain(SECRET);
  });

  test("NACHTWACHT_GEPLAND=1 (the crontab's calls) marks the call as the scheduled one; by hand it is not marked", async () => {
    expect((await run(["dagrapport", "120"], { NACHTWACHT_ENV: serverEnv(), NACHTWACHT_GEPLAND: "1" })).code).toBe(0);
    expect(seen.at(-1)).toMatchObject({ path: "/api/cron/dagrapport", scheduled: "1" });
    expect((await run(["dagrapport", "120"], { NACHTWACHT_ENV: serverEnv() })).code).toBe(0);
    expect(seen.at(-1)).toMatchObject({ path: "/api/cron/dagrapport", scheduled: null });
  });

  test("a scheduled call that was not needed (204) exits 0 and logs the service's reason", async () => {
    const r = await run(["audit-anker", "120"], { NACHTWACHT_ENV: serverEnv(), NACHTWACHT_GEPLAND: "1" });
    expect(r.code).toBe(0);
    expect(r.out).toContain("(HTTP 204,");
    expect(r.out).toContain("al uitgevoerd (run 7)");
  });

  test("a non-2xx answer exits non-zero and still logs the body", async () => {
    const r = await run(["taken-controle", "60"], { NACHTWACHT_ENV: serverEnv() });
    expect(r.code).toBe(22);
    expect(r.out).toContain('"gemist":["dagrapport"]');
    expect(r.out).toContain("taken-controle failed (curl exit 22)");
  });

  test("a JSON body is sent as application/json", async () => {
    const r = await run(["backup-status", "30", '{"exitCode":0}'], { NACHTWACHT_ENV: serverEnv() });
    expect(r.code).toBe(0);
    expect(seen.at(-1)).toMatchObject({ path: "/api/cron/backup-status", body: '{"exitCode":0}', type: "application/json" });
  });

  test("a call that outlives --max-time exits 28", async () => {
    const r = await run(["traag", "1"], { NACHTWACHT_ENV: serverEnv() });
    expect(r.code).toBe(28);
  });

  test("a missing environment file or secret stops the call before curl runs", async () => {
    const before = seen.length;
    expect((await run(["dagrapport", "60"], { NACHTWACHT_ENV: join(dir, "absent.env") })).code).toBe(78);
    expect((await run(["dagrapport", "60"], { NACHTWACHT_ENV: envFile(`PORT=${server.port}\n`) })).code).toBe(78);
    expect((await run(["../x", "60"], { NACHTWACHT_ENV: serverEnv() })).code).toBe(64);
    expect(seen.length).toBe(before);
  });

  test("printf, the one command that sees the secret, is a bash builtin (no process, no argv)", async () => {
    const p = Bun.spawn(["bash", "-c", "type -t printf"], { stdout: "pipe" });
    expect((await new Response(p.stdout).text()).trim()).toBe("builtin");
    const script = readFileSync(CALL, "utf8");
    // the secret variable is used in exactly one place, the printf into curl's stdin
    const uses = script.split("\n").filter((l) => l.includes("$CRON_SECRET") && !l.trimStart().startsWith("#"));
    expect(uses).toEqual([expect.stringMatching(/if \[ -z "\$CRON_SECRET" \]/), expect.stringMatching(/^printf 'Authorization: Bearer %s\\n' "\$CRON_SECRET" \| curl /)]);
  });
});

describe("nachtwacht-call.sh against the compiled binary", () => {
  let app: RunningBinary;
  let dir: string;

  beforeAll(async () => {
    const { path } = await buildBinary();
    app = await startBinary(path, { CRON_SECRET: SECRET });
    dir = mkdtempSync(join(tmpdir(), "nachtwacht-call-bin-"));
  }, 180_000);

  afterAll(async () => {
    await app?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  async function run(secret: string, args: string[]) {
    const port = new URL(app.url).port;
    const env = join(dir, "nachtwacht.env");
    writeFileSync(env, `CRON_SECRET=${secret}\nPORT=${port}\nHOST=0.0.0.0\n`, { mode: 0o600 });
    const p = Bun.spawn(["bash", CALL, ...args], { env: { PATH: "/usr/bin:/bin", NACHTWACHT_LOG: "stdout", NACHTWACHT_ENV: env }, stdout: "pipe" });
    const [code, out] = await Promise.all([p.exited, new Response(p.stdout).text()]);
    return { code, out };
  }

  test("the right secret reaches a job (HOST=0.0.0.0 is called on loopback)", async () => {
    const r = await run(SECRET, ["backup-status", "30", '{"exitCode":0,"bestandsnaam":"x.gz","grootte":1}']);
    expect(r.out).toContain('{"ok":true,"gelukt":true}');
    expect(r.code).toBe(0);
  });

  test("a wrong secret is a 401 and a non-zero exit", async () => {
    const r = await run("wrong-" + SECRET, ["backup-controle", "60"]);
    expect(r.code).toBe(22);
    expect(r.out).toContain("HTTP 401");
    expect(app.output()).not.toContain(SECRET);
  });
});
