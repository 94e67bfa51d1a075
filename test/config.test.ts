import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { ConfigError, parseConfig, redactedConfig } from "../src/config.ts";

const SECRET = "x".repeat(64);
const ok = (env: Record<string, string> = {}) => parseConfig({ CRON_SECRET: SECRET, ...env });
const failure = (env: Record<string, string | undefined>) => {
  try {
    parseConfig(env);
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return e as ConfigError;
  }
  throw new Error("parseConfig accepted invalid configuration");
};

describe("configuration", () => {
  test("defaults follow the contract", () => {
    const c = ok();
    expect(c).toMatchObject({
      auditRetentieDagen: 2555,
      beveiligingslogRetentieDagen: 90,
      dagrapportEmail: null,
      databasePath: "./data/nachtwacht.db",
      port: 3000,
      host: "127.0.0.1",
      smtpUrl: null,
      sentryDsn: null,
      rapportTijdzone: "Europe/Amsterdam",
      backupMaxUren: 26,
      auditAnkerSleutel: null,
      auditAnkerBestand: "./data/audit-ankers.jsonl",
      takenMargeMinuten: 30,
      inlogDrempelIp: 20,
      inlogDrempelAccount: 10,
    });
  });

  test("a missing CRON_SECRET stops the start and says how to make one", () => {
    const e = failure({});
    expect(e.variable).toBe("CRON_SECRET");
    expect(e.message).toContain("openssl rand -hex 32");
  });

  test("an empty CRON_SECRET counts as missing", () => {
    expect(failure({ CRON_SECRET: "" }).variable).toBe("CRON_SECRET");
  });

  test("a CRON_SECRET shorter than 32 characters is refused without echoing it", () => {
    const short = "abc123-secret-value-31-chars-xx";
    expect(short.length).toBe(31);
    const e = failure({ CRON_SECRET: short });
    expect(e.variable).toBe("CRON_SECRET");
    expect(e.message).toContain("32");
    expect(e.message).not.toContain(short);
  });

  test("a CRON_SECRET of exactly 32 characters is accepted", () => {
    expect(parseConfig({ CRON_SECRET: "y".repeat(32) }).cronSecret).toBe("y".repeat(32));
  });

  test("a CRON_SECRET with spaces or control characters is refused", () => {
    expect(failure({ CRON_SECRET: "y".repeat(20) + " " + "y".repeat(20) }).variable).toBe("CRON_SECRET");
  });

  const invalid: [string, string][] = [
    ["AUDIT_RETENTIE_DAGEN", "0"],
    ["AUDIT_RETENTIE_DAGEN", "-5"],
    ["AUDIT_RETENTIE_DAGEN", "7 jaar"],
    ["AUDIT_RETENTIE_DAGEN", "2555.5"],
    ["BEVEILIGINGSLOG_RETENTIE_DAGEN", "abc"],
    ["BEVEILIGINGSLOG_RETENTIE_DAGEN", "0"],
    ["BACKUP_MAX_UREN", "1e3"],
    ["TAKEN_MARGE_MINUTEN", "-1"],
    ["INLOG_DREMPEL_IP", "twintig"],
    ["INLOG_DREMPEL_ACCOUNT", "0"],
    ["PORT", "70000"],
    ["PORT", "http"],
    ["DAGRAPPORT_EMAIL", "beheer-at-example.nl"],
    ["SUPPORT_EMAIL", "support@"],
    ["MAIL_FROM", "nachtwacht"],
    ["SMTP_URL", "mail.example.nl:25"],
    ["SMTP_URL", "http://mail.example.nl"],
    ["SENTRY_DSN", "not a dsn"],
    ["RAPPORT_TIJDZONE", "Europe/Atlantis"],
    ["AUDIT_ANKER_SLEUTEL", "short"],
  ];
  for (const [name, value] of invalid) {
    test(`${name}=${JSON.stringify(value)} stops the start naming ${name}`, () => {
      const e = failure({ CRON_SECRET: SECRET, [name]: value });
      expect(e.variable).toBe(name);
      expect(e.message.startsWith(`${name}:`)).toBe(true);
    });
  }

  test("DAGRAPPORT_EMAIL wins over SUPPORT_EMAIL, which is the fallback", () => {
    expect(ok({ DAGRAPPORT_EMAIL: "dag@example.nl", SUPPORT_EMAIL: "support@example.nl" }).dagrapportEmail).toBe("dag@example.nl");
    expect(ok({ SUPPORT_EMAIL: "support@example.nl" }).dagrapportEmail).toBe("support@example.nl");
  });

  test("valid values are taken", () => {
    const c = ok({
      AUDIT_RETENTIE_DAGEN: "365",
      SMTP_URL: "smtps://user:pw@mail.example.nl:465",
      MAIL_FROM: "Nachtwacht <nw@example.nl>",
      SENTRY_DSN: "https://abc@sentry.example.nl/3",
      RAPPORT_TIJDZONE: "UTC",
      PORT: "0",
    });
    expect(c).toMatchObject({ auditRetentieDagen: 365, smtpUrl: "smtps://user:pw@mail.example.nl:465", rapportTijdzone: "UTC", port: 0 });
  });

  test("the redacted config hides the secret, the anchor key and the SMTP password", () => {
    const c = ok({ SMTP_URL: "smtp://user:hunter2hunter2@mail.example.nl:587", AUDIT_ANKER_SLEUTEL: "k".repeat(40) });
    const text = JSON.stringify(redactedConfig(c));
    expect(text).not.toContain(SECRET);
    expect(text).not.toContain("hunter2hunter2");
    expect(text).not.toContain("k".repeat(40));
  });

  test("the entry point refuses to start with a bad variable and names it", async () => {
    const proc = Bun.spawn([process.execPath, join(import.meta.dir, "..", "src", "index.ts")], {
      env: { PATH: process.env.PATH ?? "", CRON_SECRET: SECRET, AUDIT_RETENTIE_DAGEN: "zeven" },
      stdout: "pipe",
      stderr: "pipe",
    });
    expect(await proc.exited).toBe(2);
    const err = await new Response(proc.stderr).text();
    expect(err).toContain("AUDIT_RETENTIE_DAGEN");
    expect(err).not.toContain(SECRET);
  });
});
