// SMTP_URL taken apart once: the start-up check (src/config.ts) and the mailer
// (src/mail/transport.ts) both use this, so a URL that passes the check is one the
// mailer can use. No message ever contains the URL, the user name or the password.

export interface SmtpUrlParts {
  /** smtps://: TLS from the first byte; smtp://: plain, upgraded with STARTTLS when offered. */
  secure: boolean;
  /** Without the brackets of an IPv6 literal. */
  host: string;
  /** Absent: nodemailer's default (587 for smtp, 465 for smtps). */
  port?: number;
  /** Percent-decoded; empty: no authentication. */
  user: string;
  /** Percent-decoded. */
  pass: string;
}

/** What is wrong with an SMTP_URL, in words that never repeat its secret parts. */
export class SmtpUrlError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SmtpUrlError";
  }
}

function decodePart(value: string, what: "user name" | "password"): string {
  try {
    return decodeURIComponent(value);
  } catch {
    throw new SmtpUrlError(
      `the ${what} is not valid percent-encoding: every % must start a UTF-8 escape such as %40 for @; write a literal % as %25`,
    );
  }
}

export function parseSmtpUrl(smtpUrl: string): SmtpUrlParts {
  let u: URL;
  try {
    u = new URL(smtpUrl);
  } catch {
    throw new SmtpUrlError(
      "is not a URL (expected smtp://host:port or smtps://user:pass@host:port; percent-encode @ : / # ? % in user name and password, a port is 1-65535)",
    );
  }
  if (u.protocol !== "smtp:" && u.protocol !== "smtps:") {
    throw new SmtpUrlError(`must start with smtp:// or smtps://, got ${u.protocol}//`);
  }
  const host = u.hostname.replace(/^\[|\]$/g, "");
  if (!host) throw new SmtpUrlError("has no host");
  // The URL parser already refuses a port above 65535; 0 would reach nodemailer as a port.
  const port = u.port === "" ? undefined : Number(u.port);
  if (port !== undefined && !(Number.isInteger(port) && port >= 1 && port <= 65535)) {
    throw new SmtpUrlError("has port 0; leave the port out for the default (587 for smtp, 465 for smtps) or give 1-65535");
  }
  const user = decodePart(u.username, "user name");
  const pass = decodePart(u.password, "password");
  // Without a user name nodemailer does not authenticate at all: the password would be ignored.
  if (user === "" && pass !== "") throw new SmtpUrlError("has a password but no user name");
  return { secure: u.protocol === "smtps:", host, ...(port !== undefined ? { port } : {}), user, pass };
}
