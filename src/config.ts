// Configuration (README, Configuration; every variable in ops/nachtwacht.env.example):
// parsed once at start. A missing secret, or any value that is set but invalid, stops
// the start with a message naming the variable; no value silently falls back to its
// default.
import { isIP } from "node:net";
import { isPostgresUrl, redactUrl, urlPasswords } from "./pg/url.ts";
import { keyList } from "./audit/keys.ts";
import { NoteKeyError, parseSignerKey, parseVerifierKey } from "./audit/note.ts";
import { isEmailAddress } from "./mail/address.ts";
import { parseSmtpUrl, SmtpUrlError } from "./mail/smtp-url.ts";

export interface Config {
  /** Opens the job endpoints (/api/cron/…) and nothing else. */
  cronSecret: string;
  /** APP_SECRET: opens the write API (/api/audit, /api/inlogpogingen, /api/tenants/…) and nothing else; unset, that API is closed. */
  appSecret: string | null;
  /** APP_SECRET_VORIG: the previous APP_SECRET during a rotation; opens exactly what APP_SECRET opens, so writes made while instances and the application switch are not refused. */
  appSecretVorig: string | null;
  /** METRICS_SECRET: opens /metrics from other hosts than loopback; unset, /metrics answers loopback only. */
  metricsSecret: string | null;
  /** METRICS_SECRET_VORIG: the previous METRICS_SECRET during a rotation; opens /metrics as METRICS_SECRET does. */
  metricsSecretVorig: string | null;
  auditRetentieDagen: number;
  beveiligingslogRetentieDagen: number;
  /** DAGRAPPORT_EMAIL, else SUPPORT_EMAIL, else null: daily report and alarm mails. */
  dagrapportEmail: string | null;
  databasePath: string;
  /** DATABASE_URL: serve from PostgreSQL instead of the SQLite file (docs/postgresql.md); null for SQLite. */
  databaseUrl: string | null;
  port: number;
  host: string;
  smtpUrl: string | null;
  mailFrom: string;
  sentryDsn: string | null;
  rapportTijdzone: string;
  backupMaxUren: number;
  /** Ed25519 signing key in note format (PRIVATE+KEY+…): signs checkpoints and retention records. */
  auditAnkerSleutel: string;
  /** Public verifier keys trusted besides the signing key's own (earlier keys, after a key change). */
  auditVertrouwdeSleutels: string[];
  auditAnkerBestand: string;
  takenMargeMinuten: number;
  inlogDrempelIp: number;
  inlogDrempelAccount: number;
  /**
   * TENANTS_MAX: the write API creates no tenant beyond this many (PUT /api/tenants/{id}
   * answers 422). Each tenant with new entries costs a signed line in the anchor file and
   * a row in audit_anchor_log every night, never deleted (the evidence), and each run
   * compares the whole file: the default is the size docs/operations.md plans the years for.
   */
  tenantsMax: number;
  /** WEEKRAPPORT_MAX_BERICHTEN: at most this many weekly-report messages per ISO week; more recipients are left out and alarmed. */
  weekrapportMaxBerichten: number;
  /** SCHIJF_MIN_VRIJ_PROCENT: a file system nachtwacht writes to with less free is named in the daily report (let-op; actie below half); 0 never. */
  schijfMinVrijProcent: number;
}

export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    message: string,
  ) {
    super(`${variable}: ${message}`);
    this.name = "ConfigError";
  }
}

export const SECRET_HINT =
  "maak er een met: openssl rand -hex 32  (of: node -e \"console.log(require('crypto').randomBytes(32).toString('hex'))\")";

export const KEY_HINT = "maak een sleutelpaar met: nachtwacht key  (of: bun run key)";

type Env = Record<string, string | undefined>;

/** A set variable is its trimmed value; unset and empty both count as not set. */
function read(env: Env, name: string): string | undefined {
  const v = env[name];
  if (v === undefined) return undefined;
  const t = v.trim();
  return t === "" ? undefined : t;
}

function positiveInt(env: Env, name: string, fallback: number, max = 1_000_000): number {
  const v = read(env, name);
  if (v === undefined) return fallback;
  if (!/^[0-9]+$/.test(v)) throw new ConfigError(name, `moet een positief geheel getal zijn, niet ${JSON.stringify(v)}`);
  const n = Number(v);
  if (n < 1 || n > max) throw new ConfigError(name, `moet tussen 1 en ${max} liggen, niet ${v}`);
  return n;
}

function wholeNumber(env: Env, name: string, fallback: number, min: number, max: number): number {
  const v = read(env, name);
  if (v === undefined) return fallback;
  if (!/^[0-9]+$/.test(v)) throw new ConfigError(name, `moet een geheel getal zijn, niet ${JSON.stringify(v)}`);
  const n = Number(v);
  if (n < min || n > max) throw new ConfigError(name, `moet tussen ${min} en ${max} liggen, niet ${v}`);
  return n;
}

function email(env: Env, name: string): string | undefined {
  const v = read(env, name);
  if (v === undefined) return undefined;
  if (!isEmailAddress(v)) {
    throw new ConfigError(name, `is geen e-mailadres: ${JSON.stringify(v)}`);
  }
  return v;
}

function timeZone(env: Env, name: string, fallback: string): string {
  const v = read(env, name) ?? fallback;
  try {
    new Intl.DateTimeFormat("en-GB", { timeZone: v });
  } catch {
    throw new ConfigError(name, `is geen bekende tijdzone: ${JSON.stringify(v)}`);
  }
  return v;
}

/** The longest secret: the auth gate refuses longer Authorization headers without hashing them (src/http/auth.ts). */
/**
 * The values no output may carry: the bearer secrets (the previous ones of a rotation too), the anchor key and the passwords in
 * SMTP_URL and DATABASE_URL (urlPasswords: as written and decoded, in the user info or the query string). Alarms are scrubbed of them (src/alarms/sink.ts), and so is
 * what a caller sends that is stored and shown again (a backup report's texts).
 */
export function secretValues(
  config: Pick<Config, "cronSecret" | "appSecret" | "appSecretVorig" | "metricsSecret" | "metricsSecretVorig" | "auditAnkerSleutel" | "smtpUrl" | "databaseUrl">,
): string[] {
  return [
    config.cronSecret,
    config.appSecret ?? "",
    config.appSecretVorig ?? "",
    config.metricsSecret ?? "",
    config.metricsSecretVorig ?? "",
    config.auditAnkerSleutel,
    // Short ones would show themselves by where they were cut out of every text ("mail",
    // "1234"): scrubSecrets removes any password from a URL by its place instead.
    ...[config.smtpUrl, config.databaseUrl].flatMap((url) => urlPasswords(url ?? "")).filter((p) => p.length >= MIN_LISTED_URL_PASSWORD),
  ].filter((s) => s.length > 0);
}

/** The shortest SMTP or database password that secretValues lists (scrubbed wherever it occurs). */
export const MIN_LISTED_URL_PASSWORD = 8;

export const MAX_SECRET_LENGTH = 1024;

/** A shared secret: unset is undefined; set, it is 32 to MAX_SECRET_LENGTH printable ASCII characters. */
function secret(env: Env, name: string): string | undefined {
  const v = env[name];
  if (v === undefined || v === "") return undefined;
  // Never echo the value, not even in these messages.
  if (v.length < 32) throw new ConfigError(name, `is korter dan 32 tekens; ${SECRET_HINT}`);
  if (v.length > MAX_SECRET_LENGTH) throw new ConfigError(name, `is langer dan ${MAX_SECRET_LENGTH} tekens; ${SECRET_HINT}`);
  if (!/^[\x21-\x7e]+$/.test(v)) throw new ConfigError(name, `mag alleen afdrukbare ASCII-tekens bevatten, zonder spaties; ${SECRET_HINT}`);
  return v;
}

/**
 * The previous value of a secret during a rotation (APP_SECRET_VORIG, METRICS_SECRET_VORIG):
 * the same rules as the secret itself, and only beside it: alone it would keep open, under
 * a name that says "old", what the operator believes closed.
 */
function previousSecret(env: Env, name: string, primaryName: string, primary: string | null): string | null {
  const v = secret(env, name) ?? null;
  if (v === null) return null;
  if (primary === null) throw new ConfigError(name, `is gezet zonder ${primaryName}: het is de vorige waarde tijdens een rotatie, naast de nieuwe in ${primaryName}; zet ${primaryName} of verwijder ${name}`);
  if (v === primary) throw new ConfigError(name, `is gelijk aan ${primaryName}: tijdens een rotatie heeft ${primaryName} de nieuwe waarde en ${name} de oude; verwijder ${name} na de rotatie`);
  return v;
}

/**
 * One secret per scope: were two the same, a token for one scope would open the other.
 * Each set secret must differ from every one before it; the later one is named.
 */
function distinctSecrets(secrets: [name: string, value: string | null][]): void {
  secrets.forEach(([name, value], i) => {
    if (value === null) return;
    const same = secrets.slice(0, i).filter(([, v]) => v === value).map(([n]) => n);
    if (same.length > 0) throw new ConfigError(name, `moet verschillen van ${same.join(" en ")}: elk geheim opent alleen zijn eigen endpoints`);
  });
}

/**
 * HOST: an IP address (IPv4 dotted, IPv6 without brackets) or a host name (letters,
 * digits, hyphens, dots). Anything else would pass here and fail only at the listen.
 */
function listenHost(env: Env): string {
  const host = read(env, "HOST");
  if (host === undefined) return "127.0.0.1";
  const name = /^(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;
  // A name of digits and dots only would be read as an IPv4 address (256.1.1.1).
  if (isIP(host) !== 0 || (name.test(host) && !/^[0-9.]+$/.test(host))) return host;
  throw new ConfigError("HOST", `moet een IP-adres (127.0.0.1, 0.0.0.0, ::1, ::) of een hostnaam zijn, niet ${JSON.stringify(host.slice(0, 100))}`);
}

export function parseConfig(env: Env): Config {
  const cronSecret = secret(env, "CRON_SECRET");
  if (cronSecret === undefined) throw new ConfigError("CRON_SECRET", `is verplicht; ${SECRET_HINT}`);
  // Never ignored and never half read: a service that ran on the SQLite file while the
  // operator believed it wrote to PostgreSQL would split the audit log in two.
  const databaseUrl = read(env, "DATABASE_URL") ?? null;
  if (databaseUrl !== null && !(isPostgresUrl(databaseUrl) && URL.canParse(databaseUrl))) {
    // Never echoed: it may carry a password.
    throw new ConfigError("DATABASE_URL", "moet een PostgreSQL-URL zijn (postgres://user@host:5432/database); laat DATABASE_URL weg om vanuit het SQLite-bestand (DATABASE_PATH) te draaien");
  }
  if (databaseUrl !== null) {
    // The driver decodes them later, and a bad %-escape would stop the service with a stack trace.
    const u = new URL(databaseUrl);
    try {
      decodeURIComponent(u.username);
      decodeURIComponent(u.password);
    } catch {
      throw new ConfigError("DATABASE_URL", "heeft een gebruikersnaam of wachtwoord met een ongeldige %-escape (schrijf % zelf als %25)");
    }
  }
  const appSecret = secret(env, "APP_SECRET") ?? null;
  const appSecretVorig = previousSecret(env, "APP_SECRET_VORIG", "APP_SECRET", appSecret);
  const metricsSecret = secret(env, "METRICS_SECRET") ?? null;
  const metricsSecretVorig = previousSecret(env, "METRICS_SECRET_VORIG", "METRICS_SECRET", metricsSecret);
  distinctSecrets([
    ["CRON_SECRET", cronSecret],
    ["APP_SECRET", appSecret],
    ["APP_SECRET_VORIG", appSecretVorig],
    ["METRICS_SECRET", metricsSecret],
    ["METRICS_SECRET_VORIG", metricsSecretVorig],
  ]);

  const smtpUrl = read(env, "SMTP_URL");
  if (smtpUrl !== undefined) {
    // Everything the mailer (and the alarm sink's secret list) later takes from the URL
    // is checked here, by the same code: host, port, and the percent-decoding of user
    // and password. The messages never contain the URL, so never the password.
    try {
      parseSmtpUrl(smtpUrl);
    } catch (e) {
      if (e instanceof SmtpUrlError) throw new ConfigError("SMTP_URL", e.message);
      throw new ConfigError("SMTP_URL", "kon niet worden gelezen");
    }
  }

  const sentryDsn = read(env, "SENTRY_DSN");
  if (sentryDsn !== undefined) {
    let ok = false;
    try {
      const u = new URL(sentryDsn);
      ok = (u.protocol === "http:" || u.protocol === "https:") && u.username !== "" && /\/\d+$/.test(u.pathname);
    } catch {}
    if (!ok) throw new ConfigError("SENTRY_DSN", "is geen DSN (verwacht: https://<sleutel>@<host>/<project-id>)");
  }

  const port = read(env, "PORT");
  let portNumber = 3000;
  if (port !== undefined) {
    if (!/^[0-9]+$/.test(port) || Number(port) > 65535) {
      throw new ConfigError("PORT", `moet een poortnummer 0-65535 zijn, niet ${JSON.stringify(port)}`);
    }
    portNumber = Number(port);
  }

  const ankerSleutel = read(env, "AUDIT_ANKER_SLEUTEL");
  if (ankerSleutel === undefined) {
    throw new ConfigError("AUDIT_ANKER_SLEUTEL", `is verplicht: de Ed25519-sleutel die de audit-checkpoints ondertekent; ${KEY_HINT}`);
  }
  if (!ankerSleutel.startsWith("PRIVATE+KEY+")) {
    // Never echo the value: it may be an old HMAC secret.
    throw new ConfigError("AUDIT_ANKER_SLEUTEL", `is geen Ed25519-ondertekeningssleutel (PRIVATE+KEY+…); een HMAC-sleutel van een eerdere versie wordt niet meer gebruikt; ${KEY_HINT}`);
  }
  try {
    parseSignerKey(ankerSleutel);
  } catch (e) {
    throw new ConfigError("AUDIT_ANKER_SLEUTEL", `${e instanceof NoteKeyError ? e.message : "is geen geldige ondertekeningssleutel"}; ${KEY_HINT}`);
  }
  const vertrouwd = keyList(read(env, "AUDIT_VERTROUWDE_SLEUTELS"));
  for (const [i, k] of vertrouwd.entries()) {
    try {
      parseVerifierKey(k);
    } catch (e) {
      throw new ConfigError("AUDIT_VERTROUWDE_SLEUTELS", `sleutel ${i + 1} ${e instanceof NoteKeyError ? e.message : "is geen publieke sleutel"}`);
    }
  }

  const dagrapportEmail = email(env, "DAGRAPPORT_EMAIL");
  const supportEmail = email(env, "SUPPORT_EMAIL");
  const mailFrom = read(env, "MAIL_FROM");
  if (mailFrom !== undefined) {
    const addr = /^[^<>]*<([^<>]+)>$/.exec(mailFrom)?.[1] ?? mailFrom;
    email({ MAIL_FROM: addr }, "MAIL_FROM");
  }

  return {
    cronSecret,
    appSecret,
    appSecretVorig,
    metricsSecret,
    metricsSecretVorig,
    auditRetentieDagen: positiveInt(env, "AUDIT_RETENTIE_DAGEN", 2555, 100_000),
    beveiligingslogRetentieDagen: positiveInt(env, "BEVEILIGINGSLOG_RETENTIE_DAGEN", 90, 100_000),
    dagrapportEmail: dagrapportEmail ?? supportEmail ?? null,
    databasePath: read(env, "DATABASE_PATH") ?? "./data/nachtwacht.db",
    databaseUrl,
    port: portNumber,
    host: listenHost(env),
    smtpUrl: smtpUrl ?? null,
    mailFrom: mailFrom ?? "nachtwacht <nachtwacht@localhost.localdomain>",
    sentryDsn: sentryDsn ?? null,
    rapportTijdzone: timeZone(env, "RAPPORT_TIJDZONE", "Europe/Amsterdam"),
    backupMaxUren: positiveInt(env, "BACKUP_MAX_UREN", 26, 24 * 366),
    auditAnkerSleutel: ankerSleutel,
    auditVertrouwdeSleutels: vertrouwd,
    auditAnkerBestand: read(env, "AUDIT_ANKER_BESTAND") ?? "./data/audit-ankers.jsonl",
    takenMargeMinuten: positiveInt(env, "TAKEN_MARGE_MINUTEN", 30, 24 * 60),
    inlogDrempelIp: positiveInt(env, "INLOG_DREMPEL_IP", 20),
    inlogDrempelAccount: positiveInt(env, "INLOG_DREMPEL_ACCOUNT", 10),
    schijfMinVrijProcent: wholeNumber(env, "SCHIJF_MIN_VRIJ_PROCENT", 10, 0, 50),
    weekrapportMaxBerichten: positiveInt(env, "WEEKRAPPORT_MAX_BERICHTEN", 10_000),
    tenantsMax: positiveInt(env, "TENANTS_MAX", 5_000, 10_000_000),
  };
}

/** The config as it may be logged: every secret replaced. */
export function redactedConfig(c: Config): Record<string, unknown> {
  return {
    ...c,
    cronSecret: "***",
    appSecret: c.appSecret ? "***" : null,
    appSecretVorig: c.appSecretVorig ? "***" : null,
    metricsSecret: c.metricsSecret ? "***" : null,
    metricsSecretVorig: c.metricsSecretVorig ? "***" : null,
    auditAnkerSleutel: "***",
    smtpUrl: c.smtpUrl ? redactUrl(c.smtpUrl) : null,
    databaseUrl: c.databaseUrl ? redactUrl(c.databaseUrl) : null,
    sentryDsn: c.sentryDsn ? "(set)" : null,
  };
}
