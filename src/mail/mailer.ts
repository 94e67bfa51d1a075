// The one mailer interface: the real transport (SMTP or the outbox folder) and the
// tests' recorder are swapped at createApp.

export interface MailMessage {
  to: string;
  subject: string;
  html: string;
  text: string;
}

export interface Mailer {
  /** 'smtp' when messages leave the host, 'outbox' when they are written to files. */
  readonly bezorging: "smtp" | "outbox";
  /** Resolves when the transport accepted the message; rejects when it did not. */
  send(message: MailMessage): Promise<{ messageId: string }>;
  close(): Promise<void>;
}
