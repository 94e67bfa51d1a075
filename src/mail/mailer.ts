// The one mailer interface: the real transport (SMTP or the outbox folder) and the
// tests' recorder are swapped at createApp. And the one rule for what a failed send
// means (surelyNotDelivered): refused for certain, or perhaps delivered after all.

export interface MailMessage {
  to: string;
  subject: string;
  html: string;
  text: string;
}

export interface Mailer {
  /** 'smtp' when messages leave the host, 'outbox' when they are written to files. */
  readonly bezorging: "smtp" | "outbox";
  /**
   * Resolves when the transport accepted the message; rejects when it did not, or when
   * it is not known whether it did (surelyNotDelivered tells the two apart).
   */
  send(message: MailMessage): Promise<{ messageId: string }>;
  close(): Promise<void>;
}

/** A send that certainly did not deliver, where the transport's own error does not say so itself (surelyNotDelivered). */
export class MailNotSent extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "MailNotSent";
  }
}

/** The fields of nodemailer's errors that tell how far a send came (nodemailer's smtp-connection and smtp-pool). */
interface SendErrorFields {
  /** The SMTP reply code, when the server answered with an error. */
  responseCode?: unknown;
  /** nodemailer's kind of failure: EDNS, ETLS, EAUTH, ETIMEDOUT, ESOCKET, ECONNECTION, … */
  code?: unknown;
  /** The SMTP command in flight: "CONN" (the connection itself, at any stage), "API" (refused before anything was written), "AUTH …", … */
  command?: unknown;
  /** With ETIMEDOUT: which timer ran out. */
  timeoutType?: unknown;
  /** With ESOCKET: the system's code (ECONNREFUSED, …). */
  originalCode?: unknown;
}

/** Timers that run out before the message could be sent: connecting, the greeting, the STARTTLS handshake. */
const SETUP_TIMEOUTS = new Set(["CONNECT_TIMEOUT", "GREETING_TIMEOUT", "UPGRADE_TIMEOUT"]);
/** Failures while connecting or logging in, before MAIL FROM: a name not resolved, TLS, authentication. */
const SETUP_CODES = new Set(["EDNS", "ETLS", "EAUTH", "ENOAUTH"]);
/** System errors that only opening a connection gives: refused, a name not found. */
const CONNECT_ERRORS = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN"]);

/**
 * Whether a rejection of Mailer.send means the message certainly did not arrive, so that
 * sending it again cannot make a duplicate: the server answered with an SMTP error code,
 * or the send failed before any of the message could have been written (nodemailer
 * refused it itself, the connection was refused or timed out before the greeting, DNS,
 * TLS or the login failed, the pool gave up on a message no connection took), or the
 * transport says so (MailNotSent: the outbox, a refused recipient). Anything else — the
 * connection dropped or timed out while the message was under way or waiting for the
 * server's "250" — may have delivered it: a server that has the whole message delivers
 * it even when its reply is lost.
 */
export function surelyNotDelivered(e: unknown): boolean {
  if (e instanceof MailNotSent) return true;
  if (typeof e !== "object" || e === null) return false;
  const { responseCode, code, command, timeoutType, originalCode } = e as SendErrorFields;
  if (typeof responseCode === "number") return true;
  if (command === "API") return true;
  if (typeof code === "string" && SETUP_CODES.has(code)) return true;
  if (code === "ETIMEDOUT" && typeof timeoutType === "string" && SETUP_TIMEOUTS.has(timeoutType)) return true;
  if (command === "CONN" && typeof originalCode === "string" && CONNECT_ERRORS.has(originalCode)) return true;
  // smtp-pool's own: a message requeued each time its connection closed before taking it,
  // or sent to a pool already closed. Every error of a connection names its command.
  if (code === "ECONNECTION" && command === undefined) return true;
  return false;
}
