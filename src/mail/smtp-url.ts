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

function decodePart(value: string, what: "de gebruikersnaam" | "het wachtwoord"): string {
  try {
    return decodeURIComponent(value);
  } catch {
    throw new SmtpUrlError(
      `${what} is geen geldige procentcodering: elke % moet een UTF-8-escape beginnen, zoals %40 voor @; schrijf een letterlijke % als %25`,
    );
  }
}

export function parseSmtpUrl(smtpUrl: string): SmtpUrlParts {
  let u: URL;
  try {
    u = new URL(smtpUrl);
  } catch {
    throw new SmtpUrlError(
      "is geen URL (verwacht: smtp://host:port of smtps://user:pass@host:port; codeer @ : / # ? % in gebruikersnaam en wachtwoord als procentcodering, een poort is 1-65535)",
    );
  }
  if (u.protocol !== "smtp:" && u.protocol !== "smtps:") {
    throw new SmtpUrlError(`moet beginnen met smtp:// of smtps://, niet ${u.protocol}//`);
  }
  const host = u.hostname.replace(/^\[|\]$/g, "");
  if (!host) throw new SmtpUrlError("heeft geen host");
  // The URL parser already refuses a port above 65535; 0 would reach nodemailer as a port.
  const port = u.port === "" ? undefined : Number(u.port);
  if (port !== undefined && !(Number.isInteger(port) && port >= 1 && port <= 65535)) {
    throw new SmtpUrlError("heeft poort 0; laat de poort weg voor de standaard (587 voor smtp, 465 voor smtps) of geef 1-65535");
  }
  const user = decodePart(u.username, "de gebruikersnaam");
  const pass = decodePart(u.password, "het wachtwoord");
  // Without a user name nodemailer does not authenticate at all: the password would be ignored.
  if (user === "" && pass !== "") throw new SmtpUrlError("heeft een wachtwoord maar geen gebruikersnaam");
  return { secure: u.protocol === "smtps:", host, ...(port !== undefined ? { port } : {}), user, pass };
}
