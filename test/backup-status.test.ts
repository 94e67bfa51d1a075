import { afterEach, describe, expect, test } from "bun:test";
import { backupZegel, call, NOW, SECRET } from "./helpers.ts";
import { makeEnv, type Env } from "./dialect.ts";

const PATH = "/api/cron/backup-status";
let env: Env;
afterEach(() => env?.cleanup());

function rows(e: Env) {
  return e.db.all<Record<string, unknown>>("SELECT * FROM backup_statuses ORDER BY id");
}

const JSON_CT = { "content-type": "application/json" };

describe("backup-status", () => {
  test("a successful run is stored with receive time and bron host-cron, without an alarm", async () => {
    env = await makeEnv();
    const r = await call(env.app, PATH, {
      headers: JSON_CT,
      body: JSON.stringify({ exitCode: 0, bestandsnaam: "nachtwacht-2026-07-23.db.gz", grootte: 183500800, foutmelding: "" }),
    });
    expect(r.status).toBe(200);
    expect(r.json).toEqual({ ok: true, gelukt: true });
    expect(await rows(env)).toEqual([
      {
        id: 1,
        ontvangen: NOW.toISOString(),
        exit_code: 0,
        gelukt: 1,
        bestandsnaam: "nachtwacht-2026-07-23.db.gz",
        grootte: 183500800,
        foutmelding: "",
        bron: "host-cron",
        // Sealed with the anchor key over the report as stored (src/row-seal.ts).
        zegel: backupZegel({ ontvangen: NOW.toISOString(), exitCode: 0, gelukt: true, bestandsnaam: "nachtwacht-2026-07-23.db.gz", grootte: 183500800, foutmelding: "", bron: "host-cron" }),
      },
    ]);
    expect(env.alarms.raised).toEqual([]);
  });

  test("a JSON body without a content type is accepted", async () => {
    env = await makeEnv();
    const r = await call(env.app, PATH, { body: '{"exitCode":0}' });
    expect(r.status).toBe(200);
    expect(r.json).toEqual({ ok: true, gelukt: true });
    // and with a form content type, as `curl -d` sends by default
    const r2 = await call(env.app, PATH, { headers: { "content-type": "application/x-www-form-urlencoded" }, body: '{"exitCode":0}' });
    expect(r2.status).toBe(200);
    expect(await rows(env)).toHaveLength(2);
    expect((await rows(env))[0]).toMatchObject({ bestandsnaam: null, grootte: null, foutmelding: null });
  });

  test("exitCode ≠ 0 is stored as failed and raises backup-failure with foutmelding as message and the fields as context", async () => {
    env = await makeEnv();
    const r = await call(env.app, PATH, {
      headers: JSON_CT,
      body: JSON.stringify({ exitCode: 2, bestandsnaam: "nachtwacht.db.gz", grootte: 0, foutmelding: "gzip: No space left on device" }),
    });
    expect(r.status).toBe(200);
    expect(r.json).toEqual({ ok: true, gelukt: false });
    expect((await rows(env))[0]).toMatchObject({ exit_code: 2, gelukt: 0, foutmelding: "gzip: No space left on device", bron: "host-cron" });
    expect(env.alarms.raised).toEqual([
      {
        type: "backup-failure",
        message: "gzip: No space left on device",
        context: { exitCode: 2, bestandsnaam: "nachtwacht.db.gz", grootte: 0, foutmelding: "gzip: No space left on device" },
        // backup-controle's "mislukt" about this report is the same condition: mailed once.
        condition: { about: "backup", state: `mislukt ${NOW.toISOString()}` },
      },
    ]);
  });

  test("a report that echoes a secret is stored without it: the daily report, its e-mail and backup-controle show the stored text", async () => {
    env = await makeEnv();
    const r = await call(env.app, PATH, {
      body: JSON.stringify({ exitCode: 1, bestandsnaam: `backup-${SECRET}.gz`, foutmelding: `curl: (22) 401 with Authorization: Bearer ${SECRET} (x${SECRET}x)` }),
    });
    expect(r.json).toEqual({ ok: true, gelukt: false });
    const [row] = await rows(env);
    expect(row).toMatchObject({ bestandsnaam: "backup-[verwijderd].gz", foutmelding: "curl: (22) 401 with Authorization: Bearer [verwijderd] (x[verwijderd]x)" });
    const controle = await call(env.app, "/api/cron/backup-controle");
    expect(controle.text).toContain("[verwijderd]");
    expect(controle.text).not.toContain(SECRET);
  });

  test("a failure without foutmelding raises the alarm with a Dutch default message", async () => {
    env = await makeEnv();
    const r = await call(env.app, PATH, { body: '{"exitCode": -1, "foutmelding": ""}' });
    expect(r.json).toEqual({ ok: true, gelukt: false });
    expect(env.alarms.raised).toHaveLength(1);
    expect(env.alarms.raised[0]!.message).toBe("De backup is mislukt (exitcode -1) zonder foutmelding.");
  });

  const cases: [string, string, RegExp][] = [
    ["malformed JSON", '{"exitCode": 0', /geen geldige JSON/],
    ["an empty body", "", /leeg/],
    ["an array", "[0]", /JSON-object/],
    ["null", "null", /JSON-object/],
    ["a number", "0", /JSON-object/],
    ["a string", '"ok"', /JSON-object/],
    ["a missing exitCode", '{"bestandsnaam":"x"}', /exitCode ontbreekt/],
    ["exitCode null", '{"exitCode":null}', /exitCode mag niet null zijn/],
    ["exitCode as a string", '{"exitCode":"0"}', /exitCode moet een geheel getal/],
    ["exitCode a fraction", '{"exitCode":1.5}', /exitCode moet een geheel getal/],
    ["exitCode beyond safe integers", '{"exitCode":9007199254740993}', /exitCode moet een geheel getal/],
    ["exitCode beyond a 32-bit integer (PostgreSQL's integer: a 500 before)", '{"exitCode":2147483648}', /exitCode/],
    ["exitCode below a 32-bit integer", '{"exitCode":-2147483649}', /exitCode/],
    ["exitCode a boolean", '{"exitCode":false}', /exitCode moet een geheel getal/],
    ["grootte negative", '{"exitCode":0,"grootte":-1}', /grootte/],
    ["grootte a fraction", '{"exitCode":0,"grootte":1.5}', /grootte/],
    ["grootte as a string", '{"exitCode":0,"grootte":"12"}', /grootte/],
    ["bestandsnaam a number", '{"exitCode":0,"bestandsnaam":12}', /bestandsnaam/],
    ["foutmelding an object", '{"exitCode":1,"foutmelding":{"a":1}}', /foutmelding/],
    ["exitCode twice (a failure, then a success: JSON.parse would store the success)", '{"exitCode":1,"exitCode":0}', /de naam "exitCode" staat twee keer/],
    ["exitCode twice beside an unknown field nested deeper than the quick count goes", `{"exitCode":1,"exitCode":0,"x":${"[".repeat(66)}${"]".repeat(66)}}`, /de naam "exitCode" staat twee keer/],
  ];
  for (const [what, body, message] of cases) {
    test(`400 naming the problem for ${what}; nothing stored, no alarm`, async () => {
      env = await makeEnv();
      const r = await call(env.app, PATH, { headers: JSON_CT, body });
      expect(r.status).toBe(400);
      expect(typeof r.json.error).toBe("string");
      expect(r.json.error).toMatch(message);
      expect(await rows(env)).toEqual([]);
      expect(env.alarms.raised).toEqual([]);
    });
  }

  test("400 for a body that is not UTF-8", async () => {
    env = await makeEnv();
    const res = await env.app.handle(
      new Request(`http://localhost${PATH}`, {
        method: "POST",
        headers: { authorization: `Bearer ${SECRET}` },
        body: new Uint8Array([0x7b, 0xff, 0xfe, 0x7d]),
      }),
    );
    expect(res.status).toBe(400);
    expect((await res.json()).error).toMatch(/UTF-8/);
    expect(await rows(env)).toEqual([]);
  });

  test("optional fields may be null; unknown fields are ignored", async () => {
    env = await makeEnv();
    const r = await call(env.app, PATH, { body: '{"exitCode":0,"grootte":null,"bestandsnaam":null,"extra":true}' });
    expect(r.status).toBe(200);
    expect((await rows(env))[0]).toMatchObject({ grootte: null, bestandsnaam: null });
  });

  test("long strings are cut, not refused: bestandsnaam to 1024, foutmelding to 8192 characters", async () => {
    env = await makeEnv();
    const r = await call(env.app, PATH, {
      body: JSON.stringify({ exitCode: 1, bestandsnaam: "b".repeat(5000), foutmelding: "f".repeat(20000) }),
    });
    expect(r.status).toBe(200);
    const row = (await rows(env))[0]!;
    expect((row.bestandsnaam as string).length).toBe(1024);
    expect((row.foutmelding as string).length).toBe(8192);
    expect((row.foutmelding as string).endsWith("…")).toBe(true);
    expect(env.alarms.raised[0]!.message.length).toBe(8192);
  });

  test("a body of exactly 64 KiB is read; one byte more is 413 by content-length", async () => {
    env = await makeEnv();
    const base = '{"exitCode":0,"foutmelding":""}';
    const exact = '{"exitCode":0,"foutmelding":"' + "x".repeat(65536 - base.length) + '"}';
    expect(new TextEncoder().encode(exact).length).toBe(65536);
    const ok = await call(env.app, PATH, { body: exact });
    expect(ok.status).toBe(200);
    const over = await call(env.app, PATH, { body: exact + " " });
    expect(over.status).toBe(413);
    expect(over.json.error).toMatch(/64|65536/);
    expect(await rows(env)).toHaveLength(1);
  });

  test("a declared content-length over 64 KiB is 413 before the body is read", async () => {
    env = await makeEnv();
    let pulled = 0;
    const body = new ReadableStream<Uint8Array>({
      pull(c) {
        pulled++;
        c.enqueue(new TextEncoder().encode('{"exitCode":0}'));
        c.close();
      },
    }, { highWaterMark: 0 });
    const res = await env.app.handle(
      new Request(`http://localhost${PATH}`, {
        method: "POST",
        headers: { authorization: `Bearer ${SECRET}`, "content-length": "70000" },
        body,
        duplex: "half",
      } as RequestInit),
    );
    expect(res.status).toBe(413);
    expect(pulled).toBe(0);
    expect(await rows(env)).toEqual([]);
  });

  test("a chunked body without content-length is cut off at 64 KiB + 1 byte with 413", async () => {
    env = await makeEnv();
    const chunk = new TextEncoder().encode(" ".repeat(16 * 1024));
    let sent = 0;
    const body = new ReadableStream<Uint8Array>({
      pull(c) {
        // an endless body: only the cap stops it
        if (sent === 0) c.enqueue(new TextEncoder().encode('{"exitCode":0'));
        c.enqueue(chunk);
        sent++;
      },
    });
    const res = await env.app.handle(
      new Request(`http://localhost${PATH}`, {
        method: "POST",
        headers: { authorization: `Bearer ${SECRET}` },
        body,
        duplex: "half",
      } as RequestInit),
    );
    expect(res.status).toBe(413);
    expect(sent).toBeLessThan(10);
    expect(await rows(env)).toEqual([]);
  });

  test("a chunked body over a real socket is refused with 413 too", async () => {
    env = await makeEnv();
    const server = env.app.listen({ port: 0, hostname: "127.0.0.1" });
    try {
      const port = server.server!.port;
      const big = new TextEncoder().encode('{"exitCode":0,"foutmelding":"' + "x".repeat(100_000) + '"}');
      const body = new ReadableStream<Uint8Array>({
        start(c) {
          for (let i = 0; i < big.length; i += 8192) c.enqueue(big.subarray(i, i + 8192));
          c.close();
        },
      });
      const res = await fetch(`http://127.0.0.1:${port}${PATH}`, {
        method: "POST",
        headers: { authorization: `Bearer ${SECRET}` },
        body,
        duplex: "half",
      } as RequestInit);
      expect(res.status).toBe(413);
      expect(await rows(env)).toEqual([]);
    } finally {
      await server.stop(true);
    }
  });

  test("a wrong token with a malformed body is 401, and nothing is stored", async () => {
    env = await makeEnv();
    const r = await call(env.app, PATH, { token: "wrong-token-wrong-token-wrong-token-xx", body: "{not json" });
    expect(r.status).toBe(401);
    expect(r.headers.get("www-authenticate")).toBe("Bearer");
    const r2 = await call(env.app, PATH, { token: null, body: "x".repeat(70_000) });
    expect(r2.status).toBe(401);
    expect(await rows(env)).toEqual([]);
  });

  test("a rejected body leaves no job run; an accepted one does", async () => {
    env = await makeEnv();
    await call(env.app, PATH, { body: "[]" });
    expect((await env.db.get<{ n: number }>("SELECT count(*) AS n FROM job_runs"))!.n).toBe(0);
    await call(env.app, PATH, { body: '{"exitCode":3}' });
    const run = await env.db.get("SELECT job, uitkomst, http_status FROM job_runs");
    expect(run).toEqual({ job: "backup-status", uitkomst: "ok", http_status: 200 });
  });
});
