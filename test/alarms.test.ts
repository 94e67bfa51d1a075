// The alarm sink against a real HTTP endpoint standing in for Sentry: a Bun.serve on
// port 0 that records every envelope POSTed to /api/<project>/envelope/.
import { afterEach, describe, expect, test } from "bun:test";
import { gunzipSync } from "node:zlib";
import type { Alarm } from "../src/alarms/alarm.ts";
import { createAlarmSink, type AlarmChannel } from "../src/alarms/sink.ts";
import { canonicalJson } from "../src/audit/chain.ts";
import { call, NOW, SECRET } from "./helpers.ts";
import { addTenant, appendInputs, makeEnv, type Env } from "./dialect.ts";

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
async function envWithRealSink(dsn: string | null, lines: string[]): Promise<Env> {
  const e = await makeEnv(dsn ? { SENTRY_DSN: dsn } : {});
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
    const originalWrite = process.stderr.write.bind(process.stderr);
    const logged: string[] = [];
    process.stderr.write = ((chunk: string) => {
      logged.push(String(chunk));
      return true;
    }) as typeof process.stderr.write;
    try {
      await alarms.raise({ type: "mail-failure", message: "m" });
    } finally {
      process.stderr.write = originalWrite;
    }
    expect(got).toEqual([{ type: "mail-failure", message: "m" }]);
    const failure = logged.map((l) => JSON.parse(l)).find((l) => l.message === "alarm channel failed");
    expect(failure).toMatchObject({ level: "error", channel: "e-mail", alarm: "mail-failure", error: "Error: 550 mailbox unavailable" });
  });
});
