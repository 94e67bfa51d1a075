// The alarm sink against a real HTTP endpoint standing in for Sentry: a Bun.serve on
// port 0 that records every envelope POSTed to /api/<project>/envelope/.
import { afterEach, describe, expect, test } from "bun:test";
import { gunzipSync } from "node:zlib";
import type { Alarm } from "../src/alarms/alarm.ts";
import { alarmEmailProps } from "../src/alarms/mail-channel.ts";
import { createAlarmSink, type AlarmChannel } from "../src/alarms/sink.ts";
import { canonicalJson } from "../src/audit/chain.ts";
import { call, makeTestEnv, NOW, SECRET } from "./helpers.ts";
import { addAdmin, addTenant, appendInputs, makeEnv, type Env } from "./dialect.ts";
import { APP_SECRET } from "./ingest-fixtures.ts";

interface Envelope {
  path: string;
  header: Record<string, unknown>;
  items: { header: Record<string, unknown>; payload: any }[];
  raw: string;
}

/** A stand-in for Sentry's ingest endpoint. */
function startSink(respond: "ok" | "never" = "ok") {
  const envelopes: Envelope[] = [];
  const waiting: (() => void)[] = [];
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(req) {
      if (respond === "never") return new Promise<Response>(() => {});
      const buf = Buffer.from(await req.arrayBuffer());
      const raw = (req.headers.get("content-encoding") === "gzip" ? gunzipSync(buf) : buf).toString("utf8");
      const lines = raw.split("\n").filter((l) => l.trim() !== "");
      const items: Envelope["items"] = [];
      for (let i = 1; i + 1 < lines.length; i += 2) items.push({ header: JSON.parse(lines[i]!), payload: JSON.parse(lines[i + 1]!) });
      envelopes.push({ path: new URL(req.url).pathname, header: JSON.parse(lines[0]!), items, raw });
      waiting.splice(0).forEach((w) => w());
      return Response.json({ id: "x" });
    },
  });
  return {
    envelopes,
    dsn: `http://public@127.0.0.1:${server.port}/1`,
    events: () => envelopes.flatMap((e) => e.items.filter((i) => i.header.type === "event").map((i) => i.payload)),
    stop: () => server.stop(true),
  };
}

let env: Env | undefined;
let sink: ReturnType<typeof startSink> | undefined;
afterEach(async () => {
  await env?.cleanup();
  env = undefined;
  sink?.stop();
  sink = undefined;
});

/** The test env with the real alarm sink in place of the recording one. */
async function envWithRealSink(dsn: string | null, lines: string[], vars: Record<string, string> = {}): Promise<Env> {
  const e = await makeEnv({ ...vars, ...(dsn ? { SENTRY_DSN: dsn } : {}) });
  e.deps.alarms = createAlarmSink({
    sentryDsn: e.config.sentryDsn,
    clock: e.deps.clock,
    secrets: [e.config.cronSecret],
    writeLine: (l) => lines.push(l),
  });
  return e;
}

describe("alarm sink", () => {
  test("backup-status with exitCode ≠ 0 sends an error event with tag type=backup-failure to the DSN's endpoint", async () => {
    sink = startSink();
    const lines: string[] = [];
    env = await envWithRealSink(sink.dsn, lines);
    const r = await call(env.app, "/api/cron/backup-status", {
      body: JSON.stringify({ exitCode: 12, bestandsnaam: "nachtwacht.db.gz", grootte: 1024, foutmelding: "rsync: connection refused" }),
    });
    expect(r.json).toEqual({ ok: true, gelukt: false });
    // the job answered only after the event was flushed
    expect(sink.envelopes).toHaveLength(1);
    expect(sink.envelopes[0]!.path).toBe("/api/1/envelope/");
    const [event] = sink.events();
    expect(event.level).toBe("error");
    expect(event.message).toBe("rsync: connection refused");
    expect(event.tags).toEqual({ type: "backup-failure" });
    expect(event.contexts.alarm).toEqual({ exitCode: 12, bestandsnaam: "nachtwacht.db.gz", grootte: 1024, foutmelding: "rsync: connection refused" });
    expect(event.extra).toMatchObject({ exitCode: 12, foutmelding: "rsync: connection refused" });
    // and the structured line on stderr, always
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0]!)).toEqual({
      time: NOW.toISOString(),
      level: "error",
      alarm: "backup-failure",
      message: "rsync: connection refused",
      context: { exitCode: 12, bestandsnaam: "nachtwacht.db.gz", grootte: 1024, foutmelding: "rsync: connection refused" },
    });
    // the secret is nowhere in what was sent
    expect(sink.envelopes[0]!.raw).not.toContain(SECRET);
  });

  test("a broken chain sends one event with tag type=audit-chain-broken", async () => {
    sink = startSink();
    const lines: string[] = [];
    env = await envWithRealSink(sink.dsn, lines);
    const t = await addTenant(env.db, "Gemeente Utrecht");
    for (let i = 0; i < 3; i++) await appendInputs(env.store, [{ tenantId: t, actor: "a", action: "b", subject: "c", details: canonicalJson({}), createdAt: NOW.toISOString() }]);
    await env.db.run("UPDATE audit_entries SET subject = 'x' WHERE seq = 2");
    const r = await call(env.app, "/api/cron/audit-verificatie");
    expect(r.status).toBe(409);
    const events = sink.events();
    expect(events).toHaveLength(1);
    expect(events[0].tags).toEqual({ type: "audit-chain-broken" });
    expect(events[0].level).toBe("error");
    expect(events[0].message).toContain("Gemeente Utrecht");
    expect(events[0].contexts.alarm.gebroken[0]).toMatchObject({ tenantId: t, tenant: "Gemeente Utrecht", fout: { seq: 2, reden: "hash-afwijkend" } });
    expect(lines.map((l) => JSON.parse(l).alarm)).toEqual(["audit-chain-broken"]);
  });

  test("without a DSN nothing is sent; the stderr line is still written", async () => {
    sink = startSink();
    const lines: string[] = [];
    env = await envWithRealSink(null, lines);
    const r = await call(env.app, "/api/cron/backup-status", { body: '{"exitCode":1,"foutmelding":"disk full"}' });
    expect(r.json).toEqual({ ok: true, gelukt: false });
    // raise() has returned with the call (it awaits its bounded flush when a DSN is set).
    expect(sink.envelopes).toEqual([]);
    expect(JSON.parse(lines[0]!)).toMatchObject({ level: "error", alarm: "backup-failure", message: "disk full" });
  });

  test("the configured secret is scrubbed from the event and the log line", async () => {
    sink = startSink();
    const lines: string[] = [];
    const alarms = createAlarmSink({ sentryDsn: sink.dsn, clock: () => NOW, secrets: [SECRET], writeLine: (l) => lines.push(l) });
    await alarms.raise({ type: "internal-error", message: `failed with Bearer ${SECRET}`, context: { header: `Bearer ${SECRET}`, nested: [{ s: SECRET }] } });
    expect(sink.envelopes).toHaveLength(1);
    expect(sink.envelopes[0]!.raw).not.toContain(SECRET);
    expect(sink.events()[0].message).toBe("failed with Bearer [verwijderd]");
    expect(lines.join("")).not.toContain(SECRET);
    expect(JSON.parse(lines[0]!).context).toEqual({ header: "Bearer [verwijderd]", nested: [{ s: "[verwijderd]" }] });
  });

  test("an alarm raised per request while a fault lasts: one stderr line and one event per minute and message; the next says how many were held back", async () => {
    sink = startSink();
    const lines: string[] = [];
    let now = NOW.getTime();
    const alarms = createAlarmSink({ sentryDsn: sink.dsn, clock: () => new Date(now), writeLine: (l) => lines.push(l) });
    for (let i = 0; i < 200; i++) await alarms.raise({ type: "storage-unwritable", message: "Database niet beschikbaar (SQLITE_FULL)" });
    expect(lines).toHaveLength(1);
    expect(sink.events()).toHaveLength(1);
    // Another message, or another type, is its own alarm; other types are never held back.
    await alarms.raise({ type: "storage-unwritable", message: "Database niet beschikbaar (53100)" });
    await alarms.raise({ type: "internal-error", message: "Database niet beschikbaar (SQLITE_FULL)" });
    await alarms.raise({ type: "backup-failure", message: "disk full" });
    await alarms.raise({ type: "backup-failure", message: "disk full" });
    expect(lines.map((l) => JSON.parse(l).alarm)).toEqual(["storage-unwritable", "storage-unwritable", "internal-error", "backup-failure", "backup-failure"]);
    // A minute later the next goes out, saying how many were held back.
    now += 59_999;
    await alarms.raise({ type: "storage-unwritable", message: "Database niet beschikbaar (SQLITE_FULL)" });
    expect(lines).toHaveLength(5);
    now += 1;
    await alarms.raise({ type: "storage-unwritable", message: "Database niet beschikbaar (SQLITE_FULL)" });
    expect(JSON.parse(lines.at(-1)!)).toMatchObject({ alarm: "storage-unwritable", context: { herhaaldSindsVorige: 200 } });
    expect(sink.events()).toHaveLength(6);
    // A clock put back opens a new window at once.
    now -= 3_600_000;
    await alarms.raise({ type: "storage-unwritable", message: "Database niet beschikbaar (SQLITE_FULL)" });
    expect(lines).toHaveLength(7);
  });

  test("a per-request alarm held back, and the fault stops: at the window's end one stderr line says how many, scrubbed, the channels untouched; nothing when none was held", async () => {
    const lines: string[] = [];
    const got: Alarm[] = [];
    const timers: { run: () => void; ms: number }[] = [];
    let now = NOW.getTime();
    const alarms = createAlarmSink({
      sentryDsn: null,
      clock: () => new Date(now),
      secrets: [SECRET],
      channels: [{ raise: async (a) => void got.push(a) }],
      writeLine: (l) => lines.push(l),
      schedule: (run, ms) => (timers.push({ run, ms }), () => {}),
    });
    // Once, nothing held: no timer.
    await alarms.raise({ type: "internal-error", message: "Onverwachte fout in de service" });
    expect(timers).toEqual([]);
    const full = { type: "storage-unwritable" as const, message: "Database niet beschikbaar (SQLITE_FULL)" };
    await alarms.raise(full);
    now += 10_000;
    for (let i = 0; i < 7; i++) await alarms.raise({ ...full, context: { error: `Bearer ${SECRET} ${i}` } });
    expect(lines).toHaveLength(2);
    expect(timers.map((t) => t.ms)).toEqual([50_000]);
    // The window ends with no further raise: one line for the seven held.
    now += 50_000;
    timers[0]!.run();
    expect(lines).toHaveLength(3);
    expect(JSON.parse(lines[2]!)).toEqual({
      time: new Date(now).toISOString(),
      level: "error",
      alarm: "storage-unwritable",
      message: "Database niet beschikbaar (SQLITE_FULL)",
      context: { error: "Bearer [verwijderd] 6", herhaaldSindsVorige: 7 },
    });
    // Only the stderr line: the channels had each alarm that went out, once.
    expect(got.map((a) => a.type)).toEqual(["internal-error", "storage-unwritable"]);
    // Reset: the next raise goes out without a count.
    await alarms.raise(full);
    expect(lines).toHaveLength(4);
    expect(JSON.parse(lines[3]!).context).toBeUndefined();
  });

  test("at shutdown (flushHeld) the counts held back go out at once and their timers are cancelled; a second flush writes nothing", async () => {
    const lines: string[] = [];
    const cancelled: number[] = [];
    let armed = 0;
    const alarms = createAlarmSink({
      sentryDsn: null,
      clock: () => NOW,
      writeLine: (l) => lines.push(l),
      schedule: () => {
        const n = armed++;
        return () => void cancelled.push(n);
      },
    });
    const full = { type: "storage-unwritable" as const, message: "Database niet beschikbaar (SQLITE_FULL)" };
    const error = { type: "internal-error" as const, message: "Onverwachte fout in de service" };
    for (let i = 0; i < 4; i++) await alarms.raise(full);
    for (let i = 0; i < 2; i++) await alarms.raise(error);
    expect(lines).toHaveLength(2);
    alarms.flushHeld!();
    expect(cancelled.sort()).toEqual([0, 1]);
    expect(lines.slice(2).map((l) => [JSON.parse(l).alarm, JSON.parse(l).context.herhaaldSindsVorige])).toEqual([
      ["storage-unwritable", 3],
      ["internal-error", 1],
    ]);
    alarms.flushHeld!();
    expect(lines).toHaveLength(4);
  });

  test("a SQLite database that takes no writes: a thousand failing write-API calls write a single alarm line", async () => {
    const lines: string[] = [];
    const testEnv = makeTestEnv({ APP_SECRET });
    try {
      testEnv.deps.alarms = createAlarmSink({ sentryDsn: null, clock: () => NOW, writeLine: (l) => lines.push(l) });
      expect((await call(testEnv.app, "/api/tenants/1", { token: APP_SECRET, method: "PUT", body: JSON.stringify({ naam: "T", actief: true }) })).status).toBe(201);
      // The file may not grow: every insert that needs a page fails with SQLITE_FULL, as on a full disk.
      const { page_count } = testEnv.store.sqlite.query("PRAGMA page_count").get() as { page_count: number };
      testEnv.store.sqlite.run(`PRAGMA max_page_count = ${page_count}`);
      const statuses = new Map<number, number>();
      for (let i = 0; i < 1000; i++) {
        const body = JSON.stringify({ entries: [{ tenantId: 1, actor: "a", action: "b", subject: "x".repeat(900), details: { pad: "y".repeat(60_000) }, sleutel: `k${i}` }] });
        const r = await call(testEnv.app, "/api/audit", { token: APP_SECRET, body });
        statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
      }
      expect([...statuses]).toEqual([[503, 1000]]);
      expect(lines).toHaveLength(1);
      expect(JSON.parse(lines[0]!)).toMatchObject({ alarm: "storage-unwritable" });
    } finally {
      testEnv.cleanup();
    }
  });

  test("two sinks with different DSNs do not share a client", async () => {
    sink = startSink();
    const other = startSink();
    try {
      const a = createAlarmSink({ sentryDsn: sink.dsn, clock: () => NOW, writeLine: () => {} });
      const b = createAlarmSink({ sentryDsn: other.dsn, clock: () => NOW, writeLine: () => {} });
      await a.raise({ type: "job-missed", message: "a" });
      await b.raise({ type: "db-integrity", message: "b" });
      expect(sink.events().map((e) => e.tags.type)).toEqual(["job-missed"]);
      expect(other.events().map((e) => e.tags.type)).toEqual(["db-integrity"]);
    } finally {
      other.stop();
    }
  });

  test("a dead endpoint does not make raise() hang: it returns after the bounded flush", async () => {
    sink = startSink("never");
    const alarms = createAlarmSink({ sentryDsn: sink.dsn, clock: () => NOW, sentryFlushTimeoutMs: 300, writeLine: () => {} });
    const t0 = performance.now();
    await alarms.raise({ type: "backup-failure", message: "x" });
    const ms = performance.now() - t0;
    expect(ms).toBeLessThan(2000);
  });

  test("an unreachable endpoint (nothing listening) does not throw", async () => {
    const s = startSink();
    const dsn = s.dsn;
    s.stop();
    const lines: string[] = [];
    const alarms = createAlarmSink({ sentryDsn: dsn, clock: () => NOW, sentryFlushTimeoutMs: 500, writeLine: (l) => lines.push(l) });
    await alarms.raise({ type: "backup-failure", message: "x" });
    expect(lines).toHaveLength(1);
  });

  test("extra channels each get the alarm; a failing channel is logged and does not stop the others", async () => {
    const got: Alarm[] = [];
    const failing: AlarmChannel = {
      name: "e-mail",
      async raise() {
        throw new Error("550 mailbox unavailable");
      },
    };
    const recording: AlarmChannel = {
      async raise(a) {
        got.push(a);
      },
    };
    const alarms = createAlarmSink({ sentryDsn: null, clock: () => NOW, channels: [failing, recording], writeLine: () => {} });
    const logged = await errorLines(() => alarms.raise({ type: "mail-failure", message: "m" }));
    expect(got).toEqual([{ type: "mail-failure", message: "m" }]);
    const failure = logged.find((l) => l.message === "alarm channel failed");
    expect(failure).toMatchObject({ level: "error", channel: "e-mail", alarm: "mail-failure", error: "Error: 550 mailbox unavailable" });
  });
});

describe("personal data reaches the operator's channels, never the error tracker", () => {
  const MIN = 60_000;
  const post = (e: Env, pogingen: object[]) => call(e.app, "/api/inlogpogingen", { token: APP_SECRET, method: "POST", body: JSON.stringify({ pogingen }) });

  test("login-bruteforce: the event names no account nor IP that was posted, in the last hour nor late; the stderr line names the offenders", async () => {
    sink = startSink();
    const lines: string[] = [];
    env = await envWithRealSink(sink.dsn, lines, { APP_SECRET });
    await addTenant(env.db);
    // The last hour: one IP over its threshold (20), two accounts over theirs (10).
    const lastHour = [
      ...Array.from({ length: 20 }, (_, i) => ({ account: "jan.jansen@voorbeeld.nl", ip: "203.0.113.7", gelukt: false, tijdstip: new Date(NOW.getTime() - i * MIN).toISOString() })),
      ...Array.from({ length: 10 }, (_, i) => ({ account: "piet.pieters@voorbeeld.nl", ip: "198.51.100.23", gelukt: false, tijdstip: new Date(NOW.getTime() - i * MIN).toISOString() })),
    ];
    expect((await post(env, lastHour)).status).toBe(200);
    expect((await call(env.app, "/api/cron/beveiligingslog-analyse")).status).toBe(409);

    // A burst delivered 80 minutes late: judged as late by the next run.
    const late = Array.from({ length: 30 }, (_, i) => ({ account: "klaas.klaassen@voorbeeld.nl", ip: "192.0.2.44", gelukt: false, tijdstip: new Date(NOW.getTime() + (i + 1) * 1000).toISOString() }));
    env.setNow(new Date(NOW.getTime() + 80 * MIN));
    expect((await post(env, late)).status).toBe(200);
    env.setNow(new Date(NOW.getTime() + 90 * MIN));
    const second = await call(env.app, "/api/cron/beveiligingslog-analyse");
    expect(second.status).toBe(409);
    expect(second.json.laat.aantalVerdacht).toEqual({ ip: 1, account: 1 });

    // Still raised and grouped in the tracker, with the counts and the window.
    const events = sink.events();
    expect(events.map((e) => e.tags.type)).toEqual(["login-bruteforce", "login-bruteforce"]);
    expect(events[0].message).toBe("Mogelijke brute-force-aanval: 1 IP-adres(sen) en 2 account(s) boven de drempel van mislukte inlogpogingen in het afgelopen uur.");
    expect(events[0].contexts.alarm).toMatchObject({ aantalVerdacht: { ip: 1, account: 2 }, drempels: { ip: 20, account: 10 } });
    expect(events[1].message).toContain("1 IP-adres(sen) en 1 account(s) boven de drempel in pogingen die te laat binnenkwamen");
    const posted = [...new Set([...lastHour, ...late].flatMap((p) => [p.account, p.ip]))];
    for (const raw of sink.envelopes.map((e) => e.raw)) for (const p of posted) expect(raw).not.toContain(p);

    // The journal names them: the message's top and the context.
    const [first, again] = lines.map((l) => JSON.parse(l));
    for (const p of ["203.0.113.7", "jan.jansen@voorbeeld.nl", "piet.pieters@voorbeeld.nl"]) expect(first.message).toContain(p);
    expect(first.context.verdacht.map((v: { waarde: string }) => v.waarde)).toEqual(["203.0.113.7", "jan.jansen@voorbeeld.nl", "piet.pieters@voorbeeld.nl"]);
    expect(again.message).toContain("te laat binnengekomen: ip 192.0.2.44 (30×), account klaas.klaassen@voorbeeld.nl (30×)");
    expect(again.context.laatVerdacht.map((v: { waarde: string }) => v.waarde)).toEqual(["192.0.2.44", "klaas.klaassen@voorbeeld.nl"]);
  });

  test("mail-failure: the event names no recipient address of the weekly nor the daily report; the stderr line does", async () => {
    sink = startSink();
    const lines: string[] = [];
    env = await envWithRealSink(sink.dsn, lines, { DAGRAPPORT_EMAIL: "ops.persoon@voorbeeld.nl" });
    const t = await addTenant(env.db);
    await addAdmin(env.db, t, "anna@alfa.test");
    await addAdmin(env.db, t, "weg@alfa.test");
    const mailer = env.mailer as unknown as { refuse: Set<string> };
    mailer.refuse.add("weg@alfa.test");
    mailer.refuse.add("ops.persoon@voorbeeld.nl");
    expect((await call(env.app, "/api/cron/weekrapport")).status).toBe(502);
    expect((await call(env.app, "/api/cron/dagrapport")).status).toBe(502);

    const events = sink.events();
    expect(events.map((e) => e.tags.type)).toEqual(["mail-failure", "mail-failure"]);
    expect(events[0].contexts.alarm).toMatchObject({ verstuurd: 1, fouten: 1 });
    expect(events[1].message).toBe("Het dagrapport kon niet worden verstuurd.");
    for (const raw of sink.envelopes.map((e) => e.raw)) for (const a of ["anna@alfa.test", "weg@alfa.test", "ops.persoon@voorbeeld.nl"]) expect(raw).not.toContain(a);

    const [week, dag] = lines.map((l) => JSON.parse(l));
    expect(week.context.mislukt).toEqual([{ adres: "weg@alfa.test", tenantId: t, fout: expect.stringContaining("550") }]);
    expect(dag.message).toBe("Het dagrapport kon niet worden verstuurd. Ontvanger: ops.persoon@voorbeeld.nl.");
    expect(dag.context).toMatchObject({ ontvanger: "ops.persoon@voorbeeld.nl", fout: expect.stringContaining("550") });
  });

  test("the alarm e-mail shows the personal part: in the message and as context rows", () => {
    const props = alarmEmailProps(
      { type: "db-integrity", message: "Iets klopt niet.", context: { aantal: 1 }, personal: { message: "Account: jan@voorbeeld.nl.", context: { account: "jan@voorbeeld.nl" } } },
      NOW,
      "Europe/Amsterdam",
    );
    expect(props?.message).toBe("Iets klopt niet. Account: jan@voorbeeld.nl.");
    expect(props?.context).toEqual([
      { sleutel: "aantal", waarde: "1" },
      { sleutel: "account", waarde: "jan@voorbeeld.nl" },
    ]);
  });
});

/** The error-level log lines written while `f` runs (the logger writes them to stderr). */
async function errorLines(f: () => Promise<void>): Promise<Record<string, unknown>[]> {
  const originalWrite = process.stderr.write.bind(process.stderr);
  const logged: string[] = [];
  process.stderr.write = ((chunk: string) => {
    logged.push(String(chunk));
    return true;
  }) as typeof process.stderr.write;
  try {
    await f();
  } finally {
    process.stderr.write = originalWrite;
  }
  return logged.map((l) => JSON.parse(l)).filter((l) => l.level === "error");
}

describe("an alarm the error tracker did not take is logged and counted", () => {
  let server: ReturnType<typeof Bun.serve> | undefined;
  afterEach(() => {
    server?.stop(true);
    server = undefined;
  });

  /** An endpoint answering every request with `status` (and `headers`); counts the requests. */
  function answering(status: number, headers: Record<string, string> = {}) {
    const seen = { hits: 0 };
    server = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => (seen.hits++, new Response("nee", { status, headers })) });
    return { dsn: `http://public@127.0.0.1:${server.port}/1`, seen };
  }

  for (const [status, why] of [
    [401, "a revoked DSN"],
    [429, "the quota is used up"],
    [500, "the endpoint fails"],
  ] as const) {
    test(`HTTP ${status} (${why}): "alarm channel failed" at error level, nachtwacht_alarms_undelivered_total{channel="sentry"} 1`, async () => {
      const { dsn, seen } = answering(status);
      const alarms = createAlarmSink({ sentryDsn: dsn, clock: () => NOW, sentryFlushTimeoutMs: 1500, writeLine: () => {} });
      expect(alarms.undelivered).toEqual({ sentry: 0 });
      const errors = await errorLines(() => alarms.raise({ type: "audit-chain-broken", message: "keten gebroken" }));
      expect(seen.hits).toBe(1);
      expect(errors).toEqual([
        expect.objectContaining({ message: "alarm channel failed", channel: "sentry", alarm: "audit-chain-broken", error: `Error: the Sentry endpoint refused the event with HTTP ${status}` }),
      ]);
      expect(alarms.undelivered).toEqual({ sentry: 1 });
    });
  }

  test("after a 429 with Retry-After the SDK drops the next event without sending it: that one is logged and counted too", async () => {
    const { dsn, seen } = answering(429, { "retry-after": "60" });
    const alarms = createAlarmSink({ sentryDsn: dsn, clock: () => NOW, sentryFlushTimeoutMs: 1500, writeLine: () => {} });
    await errorLines(() => alarms.raise({ type: "backup-failure", message: "een" }));
    const errors = await errorLines(() => alarms.raise({ type: "backup-failure", message: "twee" }));
    expect(seen.hits).toBe(1);
    expect(errors).toEqual([expect.objectContaining({ message: "alarm channel failed", channel: "sentry", error: expect.stringContaining("event not sent") })]);
    expect(alarms.undelivered).toEqual({ sentry: 2 });
  });

  test("nothing listening on the endpoint's port (connection refused): logged and counted", async () => {
    const { dsn } = answering(200);
    server!.stop(true);
    const alarms = createAlarmSink({ sentryDsn: dsn, clock: () => NOW, sentryFlushTimeoutMs: 1500, writeLine: () => {} });
    const errors = await errorLines(() => alarms.raise({ type: "db-integrity", message: "schade" }));
    expect(errors).toEqual([expect.objectContaining({ message: "alarm channel failed", channel: "sentry", alarm: "db-integrity", error: expect.stringContaining("event not sent") })]);
    expect(alarms.undelivered).toEqual({ sentry: 1 });
  });

  test("no answer within the bound: logged and counted as well", async () => {
    const hanging = startSink("never");
    try {
      const alarms = createAlarmSink({ sentryDsn: hanging.dsn, clock: () => NOW, sentryFlushTimeoutMs: 300, writeLine: () => {} });
      const errors = await errorLines(() => alarms.raise({ type: "backup-failure", message: "x" }));
      expect(errors).toEqual([expect.objectContaining({ message: "alarm channel failed", channel: "sentry", error: expect.stringContaining("within 300 ms") })]);
      expect(alarms.undelivered).toEqual({ sentry: 1 });
    } finally {
      hanging.stop();
    }
  });

  test("a 200 is delivered: nothing logged, nothing counted; a failing e-mail channel is counted under its own name", async () => {
    const ok = startSink();
    try {
      const failing: AlarmChannel = { name: "e-mail", raise: async () => Promise.reject(new Error("550 mailbox unavailable")) };
      const alarms = createAlarmSink({ sentryDsn: ok.dsn, clock: () => NOW, channels: [failing], writeLine: () => {} });
      const errors = await errorLines(() => alarms.raise({ type: "backup-failure", message: "x" }));
      expect(ok.events()).toHaveLength(1);
      expect(errors.map((e) => e.channel)).toEqual(["e-mail"]);
      expect(alarms.undelivered).toEqual({ sentry: 0, "e-mail": 1 });
    } finally {
      ok.stop();
    }
  });
});
