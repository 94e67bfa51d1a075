import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import fc from "fast-check";
import { ConfigError, parseConfig, redactedConfig, secretValues } from "../src/config.ts";
import { runConfigCheck } from "../src/cli/config-check.ts";
import { smtpOptions } from "../src/mail/transport.ts";
import { scrubSecrets } from "../src/alarms/sentry.ts";
import { TEST_SIGNING_KEY, TEST_VERIFIER_KEY } from "./helpers.ts";

const SECRET = "x".repeat(64);
const REQUIRED = { CRON_SECRET: SECRET, AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY };
const ok = (env: Record<string, string> = {}) => parseConfig({ ...REQUIRED, ...env });
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
  test("DATABASE_URL: a PostgreSQL URL is taken (and redacted where the config is logged); anything else is refused without echoing it", () => {
    const url = "postgres://nw:wachtwoord-123@db.example/nachtwacht";
    const c = ok({ DATABASE_URL: url });
    expect(c.databaseUrl).toBe(url);
    expect(JSON.stringify(redactedConfig(c))).not.toContain("wachtwoord-123");
    expect(redactedConfig(c).databaseUrl).toBe("postgres://nw:***@db.example/nachtwacht");
    const e = failure({ ...REQUIRED, DATABASE_URL: "mysql://nw:wachtwoord-123@db.example/nachtwacht" });
    expect(e.message).toContain("DATABASE_URL");
    expect(e.message).not.toContain("wachtwoord-123");
    expect(ok().databaseUrl).toBeNull();
    // A bad %-escape in the password: refused here, not a stack trace from the driver at start.
    const bad = failure({ ...REQUIRED, DATABASE_URL: "postgres://nw:geheim%zz@db.example/nachtwacht" });
    expect(bad.message).toContain("ongeldige %-escape");
    expect(bad.message).not.toContain("geheim");
    expect(ok({ DATABASE_URL: "postgres://nw:geheim%25zz@db.example/nachtwacht" }).databaseUrl).toContain("%25");
  });

  test("defaults are as documented (README, Configuration)", () => {
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
      auditAnkerSleutel: TEST_SIGNING_KEY,
      auditVertrouwdeSleutels: [],
      auditAnkerBestand: "./data/audit-ankers.jsonl",
      takenMargeMinuten: 30,
      inlogDrempelIp: 20,
      inlogDrempelAccount: 10,
      schijfMinVrijProcent: 10,
      weekrapportMaxBerichten: 10_000,
      tenantsMax: 5_000,
    });
    // 0 is allowed: never name a disk.
    expect(ok({ SCHIJF_MIN_VRIJ_PROCENT: "0" }).schijfMinVrijProcent).toBe(0);
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

  test("a secret longer than the gate reads (1,024 characters) is refused at start, not with a 401 on every call", () => {
    const long = "s".repeat(1025);
    for (const variable of ["CRON_SECRET", "APP_SECRET"]) {
      const e = failure({ ...REQUIRED, [variable]: long });
      expect(e.variable).toBe(variable);
      expect(e.message).toContain("1024");
      expect(e.message).not.toContain(long);
    }
  });

  test("a CRON_SECRET of exactly 32 characters is accepted", () => {
    expect(ok({ CRON_SECRET: "y".repeat(32) }).cronSecret).toBe("y".repeat(32));
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
    ["SCHIJF_MIN_VRIJ_PROCENT", "51"],
    ["WEEKRAPPORT_MAX_BERICHTEN", "0"],
    ["TENANTS_MAX", "10000001"],
    ["SCHIJF_MIN_VRIJ_PROCENT", "-1"],
    ["SCHIJF_MIN_VRIJ_PROCENT", "7.5"],
    ["PORT", "70000"],
    ["PORT", "http"],
    ["HOST", "not an addr"],
    ["HOST", "256.1.1.1"],
    ["HOST", "http://127.0.0.1"],
    ["HOST", "[::1]"],
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
      const e = failure({ ...REQUIRED, [name]: value });
      expect(e.variable).toBe(name);
      expect(e.message.startsWith(`${name}:`)).toBe(true);
    });
  }

  test("HOST: an IP address or a host name", () => {
    for (const host of ["127.0.0.1", "0.0.0.0", "::", "::1", "fe80::1", "localhost", "nachtwacht.example.nl"]) expect(ok({ HOST: host }).host).toBe(host);
    expect(ok({}).host).toBe("127.0.0.1");
  });

  test("a missing AUDIT_ANKER_SLEUTEL stops the start and says how to make one", () => {
    const e = failure({ CRON_SECRET: SECRET });
    expect(e.variable).toBe("AUDIT_ANKER_SLEUTEL");
    expect(e.message).toContain("nachtwacht key");
  });

  test("an HMAC key of an earlier version is refused without echoing it", () => {
    const hmac = "oude-hmac-sleutel-0123456789abcdef0123456789abcdef";
    const e = failure({ ...REQUIRED, AUDIT_ANKER_SLEUTEL: hmac });
    expect(e.variable).toBe("AUDIT_ANKER_SLEUTEL");
    expect(e.message).toContain("HMAC");
    expect(e.message).not.toContain(hmac);
  });

  test("a signing key with a spoilt key byte is refused without echoing it", () => {
    const spoilt = TEST_SIGNING_KEY.slice(0, -4) + (TEST_SIGNING_KEY.endsWith("AAAA") ? "BBBB" : "AAAA");
    const e = failure({ ...REQUIRED, AUDIT_ANKER_SLEUTEL: spoilt });
    expect(e.variable).toBe("AUDIT_ANKER_SLEUTEL");
    expect(e.message).not.toContain(spoilt.slice(spoilt.lastIndexOf("+") + 1));
  });

  test("AUDIT_VERTROUWDE_SLEUTELS: verifier keys separated by commas or spaces; a bad one is named by its place", () => {
    expect(ok({ AUDIT_VERTROUWDE_SLEUTELS: ` ${TEST_VERIFIER_KEY},  ` }).auditVertrouwdeSleutels).toEqual([TEST_VERIFIER_KEY]);
    const e = failure({ ...REQUIRED, AUDIT_VERTROUWDE_SLEUTELS: `${TEST_VERIFIER_KEY} nachtwacht.oud/sleutel+00000000+AAAA` });
    expect(e.variable).toBe("AUDIT_VERTROUWDE_SLEUTELS");
    expect(e.message).toContain("sleutel 2");
    // A signing key there by mistake is refused too: it would publish the private key as "trusted".
    expect(failure({ ...REQUIRED, AUDIT_VERTROUWDE_SLEUTELS: TEST_SIGNING_KEY }).variable).toBe("AUDIT_VERTROUWDE_SLEUTELS");
  });

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

  test("APP_SECRET and METRICS_SECRET: optional, each at least 32 printable characters and different from the others", () => {
    expect(ok()).toMatchObject({ appSecret: null, metricsSecret: null });
    const app = "a".repeat(40);
    const metrics = "m".repeat(40);
    expect(ok({ APP_SECRET: app, METRICS_SECRET: metrics })).toMatchObject({ appSecret: app, metricsSecret: metrics });
    for (const name of ["APP_SECRET", "METRICS_SECRET"]) {
      const short = failure({ ...REQUIRED, [name]: "kort-geheim-1234" });
      expect(short.variable).toBe(name);
      expect(short.message).not.toContain("kort-geheim-1234");
      expect(failure({ ...REQUIRED, [name]: "a b".repeat(20) }).variable).toBe(name);
    }
    const same = failure({ ...REQUIRED, APP_SECRET: SECRET });
    expect(same.variable).toBe("APP_SECRET");
    expect(same.message).not.toContain(SECRET);
    expect(failure({ ...REQUIRED, METRICS_SECRET: SECRET }).variable).toBe("METRICS_SECRET");
    expect(failure({ ...REQUIRED, APP_SECRET: app, METRICS_SECRET: app }).variable).toBe("METRICS_SECRET");
  });

  test("APP_SECRET_VORIG and METRICS_SECRET_VORIG: the previous value during a rotation, with the rules of their primary, only beside it, and different from every secret", () => {
    const app = "a".repeat(40);
    const appOld = "o".repeat(40);
    const metrics = "m".repeat(40);
    const metricsOld = "p".repeat(40);
    expect(ok()).toMatchObject({ appSecretVorig: null, metricsSecretVorig: null });
    expect(ok({ APP_SECRET: app, APP_SECRET_VORIG: appOld, METRICS_SECRET: metrics, METRICS_SECRET_VORIG: metricsOld })).toMatchObject({
      appSecret: app,
      appSecretVorig: appOld,
      metricsSecret: metrics,
      metricsSecretVorig: metricsOld,
    });
    for (const [name, primary] of [["APP_SECRET_VORIG", { APP_SECRET: app }], ["METRICS_SECRET_VORIG", { METRICS_SECRET: metrics }]] as const) {
      const short = failure({ ...REQUIRED, ...primary, [name]: "kort-geheim-1234" });
      expect(short.variable).toBe(name);
      expect(short.message).not.toContain("kort-geheim-1234");
      const primaryName = name.replace("_VORIG", "");
      const same = failure({ ...REQUIRED, ...primary, [name]: primary[primaryName as keyof typeof primary] });
      expect(same.variable).toBe(name);
      expect(same.message).toContain(`gelijk aan ${primaryName}`);
      expect(same.message).not.toContain(app);
      expect(same.message).not.toContain(metrics);
      const cron = failure({ ...REQUIRED, ...primary, [name]: SECRET });
      expect(cron.variable).toBe(name);
      expect(cron.message).toContain("CRON_SECRET");
      expect(cron.message).not.toContain(SECRET);
      const alone = failure({ ...REQUIRED, [name]: appOld });
      expect(alone.variable).toBe(name);
      expect(alone.message).toContain(`zonder ${primaryName}`);
    }
    // Across scopes too: an old app secret must not open /metrics, nor an old metrics secret the write API.
    expect(failure({ ...REQUIRED, APP_SECRET: app, APP_SECRET_VORIG: appOld, METRICS_SECRET: appOld }).variable).toBe("METRICS_SECRET");
    expect(failure({ ...REQUIRED, APP_SECRET: app, METRICS_SECRET: metrics, METRICS_SECRET_VORIG: app }).variable).toBe("METRICS_SECRET_VORIG");
  });

  test("config check names the _VORIG errors and never prints a secret's value", () => {
    const app = "a".repeat(40);
    const lines: string[] = [];
    const env = { ...REQUIRED, APP_SECRET: app, APP_SECRET_VORIG: app, METRICS_SECRET_VORIG: "m".repeat(40) };
    expect(runConfigCheck([], env, (s) => lines.push(s), (s) => lines.push(s))).toBe(1);
    const out = lines.join("\n");
    expect(out).toContain("APP_SECRET_VORIG: is gelijk aan APP_SECRET");
    expect(out).toContain("METRICS_SECRET_VORIG: is gezet zonder METRICS_SECRET");
    for (const v of [app, "m".repeat(40), SECRET]) expect(out).not.toContain(v);
    lines.length = 0;
    expect(runConfigCheck([], { ...REQUIRED, APP_SECRET: app, APP_SECRET_VORIG: "o".repeat(40) }, (s) => lines.push(s), (s) => lines.push(s))).toBe(0);
    expect(lines.join("\n")).not.toContain("o".repeat(40));
  });

  test("config check: an invalid APP_SECRET or METRICS_SECRET is the only error named, not also its _VORIG as 'set without' it", () => {
    const lines: string[] = [];
    const env = {
      ...REQUIRED,
      APP_SECRET: "kort-app-geheim",
      APP_SECRET_VORIG: "o".repeat(40),
      METRICS_SECRET: "kort-metrics-geheim",
      METRICS_SECRET_VORIG: "p".repeat(40),
    };
    expect(runConfigCheck([], env, (s) => lines.push(s), (s) => lines.push(s))).toBe(1);
    const out = lines.join("\n");
    expect(out).toContain("APP_SECRET: is korter dan 32 tekens");
    expect(out).toContain("METRICS_SECRET: is korter dan 32 tekens");
    expect(out).not.toContain("_VORIG");
    expect(out).toContain("2 fouten in de omgeving");
    // A _VORIG with its own fault is still named beside its invalid primary.
    lines.length = 0;
    expect(runConfigCheck([], { ...env, APP_SECRET_VORIG: "kort-oud-geheim" }, (s) => lines.push(s), (s) => lines.push(s))).toBe(1);
    expect(lines.join("\n")).toContain("APP_SECRET_VORIG: is korter dan 32 tekens");
  });

  test("the passwords of SMTP_URL and DATABASE_URL are secret values as written and as decoded, in the user info and in the query string", () => {
    const c = ok({
      SMTP_URL: "smtps://mailer:p%40ss%2Fword-smtp@smtp.example.nl:465",
      DATABASE_URL: "postgres://nw@db.example.nl/nachtwacht?sslmode=require&password=Pg%2BSecret%20In-Query",
    });
    const values = secretValues(c);
    for (const p of ["p%40ss%2Fword-smtp", "p@ss/word-smtp", "Pg%2BSecret%20In-Query", "Pg+Secret In-Query"]) expect(values).toContain(p);
    // Neither the host nor another parameter is taken for a password.
    expect(values.some((v) => v.includes("require") || v.includes("db.example.nl"))).toBe(false);
    const text = JSON.stringify(redactedConfig(c));
    for (const p of ["p%40ss%2Fword-smtp", "Pg%2BSecret"]) expect(text).not.toContain(p);
    // Written partly raw, partly encoded: URL re-encodes it (`^` as %5E), an echo shows it as written.
    const mixed = ok({ DATABASE_URL: 'postgres://nw:ab^cd%40ef@db.example.nl/nachtwacht?password=a"b%41cdef' });
    for (const p of ["ab^cd%40ef", 'a"b%41cdef']) expect(secretValues(mixed)).toContain(p);
  });

  test("a short SMTP or database password is not listed (cut out of every text it would show itself), and is scrubbed from a URL by its place; so is any password in a URL", () => {
    const c = ok({ SMTP_URL: "smtp://mailer:mail@mail.example.nl:587", DATABASE_URL: "postgres://nw@db.example.nl/nachtwacht?password=1234" });
    const values = secretValues(c);
    for (const p of ["mail", "1234"]) expect(values).not.toContain(p);
    const said = {
      message: "smtp://mailer:mail@mail.example.nl:587 weigerde; mail niet verstuurd",
      context: { url: "postgres://nw@db.example.nl/nachtwacht?sslmode=require&password=1234", poort: "poort 1234", other: "https://gebruiker:een-heel-ander-wachtwoord@example.nl/pad?sslpassword=x&y=1" },
    };
    expect(scrubSecrets(said, values)).toEqual({
      message: "smtp://mailer:[verwijderd]@mail.example.nl:587 weigerde; mail niet verstuurd",
      context: { url: "postgres://nw@db.example.nl/nachtwacht?sslmode=require&password=[verwijderd]", poort: "poort 1234", other: "https://gebruiker:[verwijderd]@example.nl/pad?sslpassword=[verwijderd]&y=1" },
    });
    // A raw @ in the password (new URL takes it), JSON's escaped slashes, libpq's key=value form, other parameter names.
    expect(scrubSecrets("postgres://u:p@ss@db.example.nl/x", values)).toBe("postgres://u:[verwijderd]@db.example.nl/x");
    expect(scrubSecrets('{"url":"postgres:\\/\\/u:pw12@db.example.nl\\/x"}', values)).toBe('{"url":"postgres:\\/\\/u:[verwijderd]@db.example.nl\\/x"}');
    expect(scrubSecrets("host=db.example.nl password=pw12 dbname=x", values)).toBe("host=db.example.nl password=[verwijderd] dbname=x");
    expect(scrubSecrets("?password2=a&ssl-password=b&user=c", values)).toBe("?password2=[verwijderd]&ssl-password=[verwijderd]&user=c");
    // A port or a path is no password: nothing cut out.
    expect(scrubSecrets("http://host.example.nl:8080/a@b en smtp://relay:25", values)).toBe("http://host.example.nl:8080/a@b en smtp://relay:25");
    // A long one is still listed, and scrubbed wherever it occurs.
    expect(secretValues(ok({ SMTP_URL: "smtp://mailer:lang-genoeg@mail.example.nl" }))).toContain("lang-genoeg");
  });

  test("the redacted config hides the secrets, the anchor key and the SMTP password", () => {
    const c = ok({
      SMTP_URL: "smtp://user:hunter2hunter2@mail.example.nl:587",
      APP_SECRET: "a".repeat(40),
      APP_SECRET_VORIG: "o".repeat(40),
      METRICS_SECRET: "m".repeat(40),
      METRICS_SECRET_VORIG: "p".repeat(40),
    });
    const text = JSON.stringify(redactedConfig(c));
    expect(text).not.toContain("o".repeat(40));
    expect(text).not.toContain("p".repeat(40));
    expect(redactedConfig(c)).toMatchObject({ appSecretVorig: "***", metricsSecretVorig: "***" });
    expect(secretValues(c)).toEqual(expect.arrayContaining(["o".repeat(40), "p".repeat(40)]));
    expect(text).not.toContain(SECRET);
    expect(text).not.toContain("a".repeat(40));
    expect(text).not.toContain("m".repeat(40));
    expect(text).not.toContain("hunter2hunter2");
    expect(text).not.toContain(TEST_SIGNING_KEY.slice(TEST_SIGNING_KEY.lastIndexOf("+") + 1));
  });

  test("the entry point refuses to start with a bad variable and names it", async () => {
    const proc = Bun.spawn([process.execPath, join(import.meta.dir, "..", "src", "index.ts")], {
      env: { PATH: process.env.PATH ?? "", ...REQUIRED, AUDIT_RETENTIE_DAGEN: "zeven" },
      stdout: "pipe",
      stderr: "pipe",
    });
    expect(await proc.exited).toBe(2);
    const err = await new Response(proc.stderr).text();
    expect(err).toContain("AUDIT_RETENTIE_DAGEN");
    expect(err).not.toContain(SECRET);
  });
});

// SMTP_URL is taken apart again when the mailer is built (src/mail/transport.ts) and
// when the alarm sink learns which values to scrub (src/server.ts): whatever those
// parse must already have been checked at start, with a ConfigError naming SMTP_URL.
describe("SMTP_URL: everything the mailer parses later is checked at start", () => {
  const base = { CRON_SECRET: SECRET, AUDIT_ANKER_SLEUTEL: TEST_SIGNING_KEY };
  const smtpFailure = (url: string) => failure({ ...base, SMTP_URL: url });

  const refused: [string, string, string][] = [
    // [why, url, the secret part that must not be echoed]
    ["a bare % in the password", "smtps://u:50%off@mail.example.nl", "50%off"],
    ["a % not followed by two hex digits at the end of the password", "smtp://u:geheim-wachtwoord%2@mail.example.nl:587", "geheim-wachtwoord"],
    ["a percent-encoded byte that is no UTF-8", "smtp://u:geheim%ffwachtwoord@mail.example.nl", "geheim%ffwachtwoord"],
    ["a bare % in the user name", "smtp://100%zeker:geheimwachtwoord@mail.example.nl", "geheimwachtwoord"],
    ["a password without a user name (the mailer would drop it)", "smtp://:geheimwachtwoord@mail.example.nl", "geheimwachtwoord"],
    ["port 0", "smtp://u:geheimwachtwoord@mail.example.nl:0", "geheimwachtwoord"],
    ["a port out of range", "smtp://u:geheimwachtwoord@mail.example.nl:70000", "geheimwachtwoord"],
  ];
  for (const [why, url, secretPart] of refused) {
    test(`${why} is refused naming SMTP_URL, without echoing the password`, () => {
      const e = smtpFailure(url);
      expect(e.variable).toBe("SMTP_URL");
      expect(e.message.startsWith("SMTP_URL:")).toBe(true);
      expect(e.message).not.toContain(secretPart);
      expect(e.message).not.toContain(url);
    });
  }

  test("an accepted SMTP_URL builds the mailer options: user and password percent-decoded, port a number", () => {
    const c = parseConfig({ ...base, SMTP_URL: "smtps://mail%40example.nl:50%25off%2Fp%C3%A9@[::1]:465" });
    const o = smtpOptions(c.smtpUrl!);
    expect(o).toMatchObject({ host: "::1", port: 465, secure: true, auth: { user: "mail@example.nl", pass: "50%off/pé" } });
    expect(smtpOptions(parseConfig({ ...base, SMTP_URL: "smtp://mail.example.nl" }).smtpUrl!)).not.toHaveProperty("port");
  });

  // Mostly the characters that matter in a URL's user info, now and then any code point.
  const urlChar = fc.oneof(
    { weight: 3, arbitrary: fc.constantFrom("%", "%", "2", "5", "f", "F", "0", "c", "3", "@", ":", "/", "#", "?", "[", "]", " ", "é", "\\") },
    { weight: 1, arbitrary: fc.string({ unit: "binary", minLength: 1, maxLength: 1 }) },
  );

  test("any password written into the URL: either a ConfigError naming SMTP_URL that does not echo it, or options the mailer can use", () => {
    fc.assert(
      fc.property(fc.string({ unit: urlChar, maxLength: 24 }), fc.string({ unit: urlChar, maxLength: 12 }), (pw, user) => {
        const password = `Wachtwoord-${pw}`;
        const url = `smtps://${user}:${password}@mail.example.nl:465`;
        let c;
        try {
          c = parseConfig({ ...base, SMTP_URL: url });
        } catch (e) {
          expect(e).toBeInstanceOf(ConfigError);
          expect((e as ConfigError).variable).toBe("SMTP_URL");
          expect((e as ConfigError).message).not.toContain(password);
          return;
        }
        if (c.smtpUrl === null) return; // only white space: not set
        const o = smtpOptions(c.smtpUrl);
        expect(typeof o.host).toBe("string");
        redactedConfig(c);
      }),
      { numRuns: 2000 },
    );
  });

  test("the entry point stops with exit code 2 and a line naming SMTP_URL, no stack trace and no password", async () => {
    const proc = Bun.spawn([process.execPath, join(import.meta.dir, "..", "src", "index.ts")], {
      env: { PATH: process.env.PATH ?? "", ...base, SMTP_URL: "smtps://u:50%off@mail.example.nl", DATABASE_PATH: ":memory:" },
      stdout: "pipe",
      stderr: "pipe",
    });
    const [code, err] = await Promise.all([proc.exited, new Response(proc.stderr).text()]);
    expect(err).toContain("SMTP_URL");
    expect(err).not.toContain("50%off");
    expect(err).not.toContain("URIError");
    expect(err).not.toMatch(/\n\s+at /);
    expect(code).toBe(2);
  });
});
