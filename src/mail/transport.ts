// The real mailer: nodemailer over SMTP_URL, or .eml files in an outbox folder when
// no SMTP_URL is set (the start-up log and the job responses then say so).
import { mkdirSync } from "node:fs";
import { basename, join } from "node:path";
import nodemailer, { type Mail } from "nodemailer";
import type SMTPPool from "nodemailer/lib/smtp-pool";
import { FolderNotSynced, writeFileDurably } from "../durable-file.ts";
import { MailNotSent, type Mailer, type MailMessage } from "./mailer.ts";
import { parseSmtpUrl } from "./smtp-url.ts";

export interface MailerOptions {
  smtpUrl: string | null;
  from: string;
  outboxDir: string;
  /** Parallel SMTP connections of the pool (the weekly batch uses them). */
  maxConnections?: number;
  /** Milliseconds; see smtpOptions. */
  timeouts?: { connection?: number; greeting?: number; socket?: number };
}

/** Connections the pool opens at most; the weekly report keeps about as many messages in flight. */
export const POOL_CONNECTIONS = 5;

/**
 * nodemailer options for an SMTP_URL. `smtp://` connects in plain text and upgrades
 * with STARTTLS whenever the server offers it (nodemailer's default; the certificate is
 * verified); `smtps://` is TLS from the first byte. User and password come from the
 * URL, percent-decoded. Without a port nodemailer uses 587 (smtp) or 465 (smtps).
 * parseSmtpUrl is the same check parseConfig ran at start, so this does not throw for
 * a configured SMTP_URL.
 */
export function smtpOptions(smtpUrl: string, o: Pick<MailerOptions, "maxConnections" | "timeouts"> = {}): SMTPPool.Options {
  const { secure, host, port, user, pass } = parseSmtpUrl(smtpUrl);
  return {
    pool: true,
    maxConnections: o.maxConnections ?? POOL_CONNECTIONS,
    maxMessages: 100,
    host,
    ...(port !== undefined ? { port } : {}),
    secure,
    ...(user ? { auth: { user, pass } } : {}),
    // A mail server that does not answer must not hold a job for minutes: fail the
    // message and let the job count it (and a rerun deliver it).
    connectionTimeout: o.timeouts?.connection ?? 15_000,
    greetingTimeout: o.timeouts?.greeting ?? 15_000,
    socketTimeout: o.timeouts?.socket ?? 30_000,
  };
}

/** The option of sendMail that carries a send's MessageOut (nodemailer copies every option of a message into mail.data). */
const MESSAGE_OUT = "nachtwachtMessageOut";

/** Whether the whole message went to the connection: only then can the server have it all, and deliver it. */
interface MessageOut {
  whole: boolean;
}

/**
 * Tells, per send, whether the whole message left: smtp-connection reads the message's
 * stream only after the server took the envelope and answered DATA (354), and that stream
 * ends only once it has read the last byte (the final "." follows it). So the flag is set
 * on the stream smtp-connection itself reads, at its end: the stages inside the message
 * (MimeNode's pipeline) read ahead into their buffers as soon as the stream exists, so a
 * flag there would be set before MAIL FROM for a small message. A send that fails before
 * the end certainly delivered nothing: MailNotSent, whatever the error (a connection
 * dropped or timed out at EHLO, MAIL FROM, RCPT TO or DATA reads the same as one dropped
 * after the final "." otherwise). A processFunc of DKIM signing, or nodemailer's
 * `newline` option, would read ahead again: neither is used.
 */
function trackMessageOut(transport: Mail<SMTPPool.SentMessageInfo>): void {
  transport.use("stream", (mail, done) => {
    const out = (mail.data as Record<string, unknown>)[MESSAGE_OUT] as MessageOut | undefined;
    if (out) {
      mail.message.processFunc((input) => {
        input.once("end", () => {
          out.whole = true;
        });
        return input;
      });
    }
    done();
  });
}

export function createMailer(opts: MailerOptions): Mailer {
  if (opts.smtpUrl) {
    const transport = nodemailer.createTransport(smtpOptions(opts.smtpUrl, opts));
    trackMessageOut(transport);
    return {
      bezorging: "smtp",
      async send(m: MailMessage) {
        const out: MessageOut = { whole: false };
        let info: SMTPPool.SentMessageInfo;
        try {
          info = await transport.sendMail({ from: opts.from, to: m.to, subject: m.subject, html: m.html, text: m.text, [MESSAGE_OUT]: out } as Mail.Options);
        } catch (e) {
          if (out.whole) throw e;
          throw new MailNotSent(e instanceof Error ? e.message : String(e), { cause: e });
        }
        // A server may accept the message but refuse its only recipient.
        if (info.rejected.length > 0 && info.accepted.length === 0) {
          throw new MailNotSent(`ontvanger geweigerd: ${info.rejected.join(", ")} (${info.response})`);
        }
        return { messageId: info.messageId };
      },
      async close() {
        transport.close();
      },
    };
  }
  const stream = nodemailer.createTransport({ streamTransport: true, buffer: true, newline: "unix" });
  let counter = 0;
  return {
    bezorging: "outbox",
    async send(m: MailMessage) {
      try {
        const info = await stream.sendMail({ from: opts.from, to: m.to, subject: m.subject, html: m.html, text: m.text });
        mkdirSync(opts.outboxDir, { recursive: true });
        const name = `${new Date().toISOString().replace(/[:.]/g, "-")}-${process.pid}-${++counter}.eml`;
        // Whole or not at all, and on disk before the send counts as done (a weekly report
        // is then recorded as sent): written under a hidden temporary name, fsynced, renamed,
        // the folder fsynced; a failed write leaves no temporary file. Owner-only, as the
        // unit's UMask=0077 makes every file of the service: only the service's user reads it.
        writeFileDurably(join(opts.outboxDir, name), info.message as Buffer, 0o600);
        return { messageId: info.messageId };
      } catch (e) {
        const reason = e instanceof Error ? e.message : String(e);
        // Renamed into the folder, only the folder's fsync failed: the message is in the
        // outbox (perhaps delivered, surelyNotDelivered false), so it must not be written again.
        if (e instanceof FolderNotSynced) throw new Error(`outbox: ${basename(e.path)} staat in de outbox, maar de map kon niet worden gesynchroniseerd (fsync): ${reason}`, { cause: e });
        // Not renamed into the folder: nobody will find it there.
        throw new MailNotSent(`outbox: ${reason}`, { cause: e });
      }
    },
    async close() {},
  };
}
