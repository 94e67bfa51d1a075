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

/**
 * Whether a rejection of Mailer.send means the message certainly did not arrive, so that
 * sending it again cannot make a duplicate: the transport says so (MailNotSent: the whole
 * message never went to the server, src/mail/transport.ts; the outbox could not write it;
 * its only recipient was refused), or the server answered with an SMTP error code (after
 * the final ".", a refusal of the message). Anything else — the connection dropped or
 * timed out after the whole message went out, while waiting for the server's "250" — may
 * have delivered it: a server that has the whole message delivers it even when its reply
 * is lost. So may an .eml file the outbox renamed into its folder when only the folder's
 * fsync failed afterwards: it is in the outbox.
 */
export function surelyNotDelivered(e: unknown): boolean {
  if (e instanceof MailNotSent) return true;
  return typeof e === "object" && e !== null && typeof (e as { responseCode?: unknown }).responseCode === "number";
}
