import { afterEach, describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { simpleParser } from "mailparser";
import { forOperator } from "../src/alarms/alarm.ts";
import { mailAlarmChannel } from "../src/alarms/mail-channel.ts";
import { createAlarmSink } from "../src/alarms/sink.ts";
import { parseConfig } from "../src/config.ts";
import { createMailer, smtpOptions } from "../src/mail/transport.ts";
import { wireDeps } from "../src/server.ts";
import { addAdmin, addTenant, call, makeTestEnv, NOW, SECRET, tempDir, TEST_SIGNING_KEY } from "./helpers.ts";
import { makeMailEnv, startSmtp } from "./smtp.ts";

const toClean: (() => unknown)[] = [];
afterEach(async () => {
  for (const f of toClean.splice(0).reverse()) await f();
});

describe("mail transport", () => {
  test("smtp:// delivers a message with an HTML and a text part from MAIL_FROM", async () => {
    const smtp = await startSmtp();
    const { dir, cleanup } = tempDir();
    const mailer = createMailer({ smtpUrl: smtp.url, from: "Nachtwacht <nw@example.test>", outboxDir: join(dir, "outbox") });
    toClean.push(cleanup, () => smtp.stop(), () => mailer.close());
    expect(mailer.bezorging).toBe("smtp");
    await mailer.send({ to: "ops@example.test", subject: "Proef é", html: "<p>Hallo <b>wereld</b></p>", text: "Hallo wereld" });
    expect(smtp.received).toHaveLength(1);
    expect(smtp.received[0]).toMatchObject({ to: ["ops@example.test"], from: "nw@example.test", subject: "Proef é", text: "Hallo wereld" });
    expect(smtp.received[0]!.html).toContain("<b>wereld</b>");
    expect(existsSync(join(dir, "outbox"))).toBe(false);
  });

  test("user and password in SMTP_URL are used to authenticate, percent-decoded", async () => {
    const smtp = await startSmtp();
    const { dir, cleanup } = tempDir();
    const url = `smtp://mailer%40example.test:p%40ss%3Aword@127.0.0.1:${smtp.port}`;
    const mailer = createMailer({ smtpUrl: url, from: "nw@example.test", outboxDir: join(dir, "outbox") });
    toClean.push(cleanup, () => smtp.stop(), () => mailer.close());
    await mailer.send({ to: "ops@example.test", subject: "x", html: "<p>x</p>", text: "x" });
    expect(smtp.received[0]!.user).toBe("mailer@example.test");
    expect(smtpOptions(url).auth).toEqual({ user: "mailer@example.test", pass: "p@ss:word" });
  });

  test("SMTP_URL options: smtps:// is TLS from the start, smtp:// leaves STARTTLS on; pooled, with timeouts", () => {
    const plain = smtpOptions("smtp://mail.example.test:587");
    expect(plain).toMatchObject({ host: "mail.example.test", port: 587, secure: false, pool: true, maxConnections: 5 });
    // nodemailer upgrades a non-secure connection whenever the server offers STARTTLS
    // unless ignoreTLS is set; we never set it.
    expect((plain as { ignoreTLS?: boolean }).ignoreTLS).toBeUndefined();
    expect(plain.auth).toBeUndefined();
    expect(plain.connectionTimeout).toBeGreaterThanOrEqual(10_000);
    expect(plain.greetingTimeout).toBeGreaterThanOrEqual(10_000);
    expect(plain.socketTimeout).toBeLessThanOrEqual(30_000);
    expect(smtpOptions("smtps://u:p@mail.example.test")).toMatchObject({ secure: true, auth: { user: "u", pass: "p" } });
    expect(smtpOptions("smtps://mail.example.test").port).toBeUndefined(); // nodemailer's default, 465
  });

  test("smtp:// switches to STARTTLS when the server offers it, and verifies the certificate", async () => {
    // smtp-server offers STARTTLS with a self-signed certificate: the client upgrades
    // and then refuses the untrusted certificate instead of sending in plain text.
    const smtp = await startSmtp({ starttls: true });
    const { dir, cleanup } = tempDir();
    const mailer = createMailer({ smtpUrl: smtp.url, from: "nw@example.test", outboxDir: join(dir, "outbox") });
    toClean.push(cleanup, () => smtp.stop(), () => mailer.close());
    await expect(mailer.send({ to: "ops@example.test", subject: "x", html: "x", text: "x" })).rejects.toThrow(/certificate/i);
    expect(smtp.received).toEqual([]);
  });

  test("a recipient refused with 550 rejects the send", async () => {
    const smtp = await startSmtp({ refuse: ["weg@example.test"] });
    const { dir, cleanup } = tempDir();
    const mailer = createMailer({ smtpUrl: smtp.url, from: "nw@example.test", outboxDir: join(dir, "outbox") });
    toClean.push(cleanup, () => smtp.stop(), () => mailer.close());
    await expect(mailer.send({ to: "weg@example.test", subject: "x", html: "x", text: "x" })).rejects.toThrow(/550/);
    await mailer.send({ to: "ok@example.test", subject: "y", html: "y", text: "y" });
    expect(smtp.received.map((m) => m.to[0])).toEqual(["ok@example.test"]);
  });
});

describe("outbox when no SMTP_URL is set", () => {
  test("the weekly report is written as .eml files beside the database and the response says bezorging outbox", async () => {
    const env = await makeMailEnv({}, makeTestEnv);
    toClean.push(() => env.cleanup());
    expect(env.deps.mailer.bezorging).toBe("outbox");
    const t = addTenant(env.store, "Alfa BV");
    addAdmin(env.store, t, "anna@alfa.test");
    addAdmin(env.store, t, "piet@alfa.test");

    // Called on Thursday 2026-07-23 (NOW): the report of the week up to the Sunday before, 2026-W29.
    const res = await call(env.app, "/api/cron/weekrapport");
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ verstuurd: 2, fouten: 0, overgeslagen: 0, bezorging: "outbox", week: "2026-W29" });

    expect(env.outboxDir).toBe(join(env.dir, "data", "outbox"));
    const files = readdirSync(env.outboxDir).sort();
    expect(files).toHaveLength(2);
    expect(files.every((f) => f.endsWith(".eml"))).toBe(true);
    const parsed = await Promise.all(files.map((f) => simpleParser(readFileSync(join(env.outboxDir, f)))));
    const to = parsed.map((p) => (Array.isArray(p.to) ? p.to[0] : p.to)?.text).sort();
    expect(to).toEqual(["anna@alfa.test", "piet@alfa.test"]);
    expect(parsed[0]!.subject).toMatch(/^Weekrapport week 29: .* — Alfa BV$/);
    expect(parsed[0]!.text).toContain("Audit-gebeurtenissen: 0");
    expect(parsed[0]!.html).toContain("Alfa BV");
  });

  test("an outbox that cannot be written: the message is a fout (it is certainly not there), and the rerun writes it", async () => {
    const env = await makeMailEnv({}, makeTestEnv);
    toClean.push(() => env.cleanup());
    addAdmin(env.store, addTenant(env.store, "Alfa BV"), "anna@alfa.test");
    // A file where the folder should be: the message cannot be written.
    writeFileSync(env.outboxDir, "geen map");
    const during = await call(env.app, "/api/cron/weekrapport");
    expect(during.status).toBe(502);
    expect(during.json).toMatchObject({ verstuurd: 0, fouten: 1, overgeslagen: 0, bezorging: "outbox" });
    expect(during.json.onzeker).toBeUndefined();
    expect((forOperator(env.alarms.raised[0]!).context as { mislukt: { fout: string }[] }).mislukt[0]!.fout).toStartWith("outbox: ");

    rmSync(env.outboxDir);
    const rerun = await call(env.app, "/api/cron/weekrapport");
    expect(rerun.status).toBe(200);
    expect(rerun.json).toMatchObject({ verstuurd: 1, fouten: 0, overgeslagen: 0 });
    expect(readdirSync(env.outboxDir).filter((f) => f.endsWith(".eml"))).toHaveLength(1);
  });

  test("the daily report goes to the outbox too", async () => {
    const env = await makeMailEnv({ DAGRAPPORT_EMAIL: "ops@example.test" }, makeTestEnv);
    toClean.push(() => env.cleanup());
    const res = await call(env.app, "/api/cron/dagrapport");
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ ok: true, verzonden: true, bezorging: "outbox", ontvanger: "ops@example.test" });
    expect(readdirSync(env.outboxDir).filter((f) => f.endsWith(".eml"))).toHaveLength(1);
  });
});

describe("alarm e-mail", () => {
  test("a broken chain is mailed to the daily-report recipient with the facts and what to do", async () => {
    const smtp = await startSmtp();
    const { dir, cleanup } = tempDir();
    const mailer = createMailer({ smtpUrl: smtp.url, from: "nw@example.test", outboxDir: join(dir, "outbox") });
    toClean.push(cleanup, () => smtp.stop(), () => mailer.close());
    const channel = mailAlarmChannel({ mailer, recipient: "ops@example.test", tijdzone: "Europe/Amsterdam", clock: () => NOW });
    await channel.raise({
      type: "audit-chain-broken",
      message: "De auditketen van 1 tenant is gebroken.",
      context: { gecontroleerd: 3, aantalGebroken: 1, gebroken: [{ tenantId: 2, tenant: "Beta BV", seq: 7, reden: "hash-afwijkend" }] },
    });
    expect(smtp.received).toHaveLength(1);
    const m = smtp.received[0]!;
    expect(m.to).toEqual(["ops@example.test"]);
    expect(m.subject).toBe("ALARM Auditketen gebroken: De auditketen van 1 tenant is gebroken.");
    for (const part of [m.text, m.html]) {
      expect(part).toContain("audit-chain-broken");
      expect(part).toContain("23/07/2026 14:00");
      expect(part).toContain("Beta BV");
      expect(part).toMatch(/wat te doen/i);
    }
    expect(m.text).toMatch(/aantalGebroken\s+1/);
    expect(m.text).toMatch(/gebroken\s+tenantId: 2, tenant: Beta BV, seq: 7, reden: hash-afwijkend/);
  });

  test("only broken chains, backup failures, missing backups, database integrity and unwritable storage are mailed", async () => {
    const sent: string[] = [];
    const mailer = {
      bezorging: "smtp" as const,
      async send(m: { subject: string }) {
        sent.push(m.subject);
        return { messageId: "x" };
      },
      async close() {},
    };
    const channel = mailAlarmChannel({ mailer, recipient: "ops@example.test", tijdzone: "Europe/Amsterdam", clock: () => NOW });
    for (const type of ["job-missed", "login-bruteforce", "mail-failure", "internal-error"] as const) {
      await channel.raise({ type, message: type });
    }
    expect(sent).toEqual([]);
    for (const type of ["audit-chain-broken", "backup-failure", "backup-missing", "db-integrity", "storage-unwritable"] as const) {
      await channel.raise({ type, message: `m-${type}` });
    }
    expect(sent).toEqual([
      "ALARM Auditketen gebroken: m-audit-chain-broken",
      "ALARM Back-up mislukt: m-backup-failure",
      "ALARM Back-up ontbreekt of is te oud: m-backup-missing",
      "ALARM Database-integriteit aangetast: m-db-integrity",
      "ALARM Opslag niet schrijfbaar (schijf vol of alleen-lezen): m-storage-unwritable",
    ]);
  });

  test("through the alarm sink: a failed backup reaches the mailbox, a failing mail server does not stop the sink", async () => {
    const smtp = await startSmtp();
    const { dir, cleanup } = tempDir();
    const mailer = createMailer({ smtpUrl: smtp.url, from: "nw@example.test", outboxDir: join(dir, "outbox") });
    toClean.push(cleanup, () => smtp.stop(), () => mailer.close());
    const lines: string[] = [];
    const sink = createAlarmSink({
      sentryDsn: null,
      clock: () => NOW,
      writeLine: (l) => lines.push(l),
      channels: [mailAlarmChannel({ mailer, recipient: "ops@example.test", tijdzone: "Europe/Amsterdam", clock: () => NOW })],
    });
    await sink.raise({ type: "backup-failure", message: "Back-up mislukt: schijf vol", context: { exitCode: 3, bestandsnaam: "db.zst", grootte: 0 } });
    expect(smtp.received).toHaveLength(1);
    expect(smtp.received[0]!.text).toMatch(/exitCode\s+3/);
    expect(lines).toHaveLength(1);

    smtp.refuse.add("ops@example.test");
    await sink.raise({ type: "backup-failure", message: "nog een keer" });
    expect(smtp.received).toHaveLength(1);
    expect(lines).toHaveLength(2);
  });

  test("the service's own wiring mails serious alarms to DAGRAPPORT_EMAIL, and not without one", async () => {
    const smtp = await startSmtp();
    const { dir, cleanup } = tempDir();
    toClean.push(cleanup, () => smtp.stop());
    const base = { CRON_SECRET: SECRET, AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY, SMTP_URL: smtp.url, AUDIT_ANKER_BESTAND: join(dir, "a.jsonl") };
    const withRecipient = wireDeps(parseConfig({ ...base, DATABASE_PATH: join(dir, "a", "n.db"), DAGRAPPORT_EMAIL: "ops@example.test" }));
    const without = wireDeps(parseConfig({ ...base, DATABASE_PATH: join(dir, "b", "n.db") }));
    toClean.push(
      () => withRecipient.mailer.close(),
      () => withRecipient.store.close(),
      () => without.mailer.close(),
      () => without.store.close(),
    );
    const stderr = process.stderr.write;
    process.stderr.write = (() => true) as typeof process.stderr.write; // the sink's JSON lines
    try {
      await withRecipient.alarms.raise({ type: "db-integrity", message: "quick_check faalt", context: { fouten: ["row 5 missing from index x"] } });
      await withRecipient.alarms.raise({ type: "job-missed", message: "dagrapport niet gestart" });
      await without.alarms.raise({ type: "audit-chain-broken", message: "keten gebroken" });
    } finally {
      process.stderr.write = stderr;
    }
    expect(smtp.received.map((m) => [m.to[0], m.subject])).toEqual([["ops@example.test", "ALARM Database-integriteit aangetast: quick_check faalt"]]);
  });
});
