// The real mailer: nodemailer over SMTP_URL, or .eml files in an outbox folder when
// no SMTP_URL is set (the start-up log and the job responses then say so).
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import nodemailer from "nodemailer";
import type { Mailer, MailMessage } from "./mailer.ts";

export function createMailer(opts: { smtpUrl: string | null; from: string; outboxDir: string }): Mailer {
  if (opts.smtpUrl) {
    const transport = nodemailer.createTransport(opts.smtpUrl);
    return {
      bezorging: "smtp",
      async send(m: MailMessage) {
        const info = await transport.sendMail({ from: opts.from, to: m.to, subject: m.subject, html: m.html, text: m.text });
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
      const info = await stream.sendMail({ from: opts.from, to: m.to, subject: m.subject, html: m.html, text: m.text });
      mkdirSync(opts.outboxDir, { recursive: true });
      const name = `${new Date().toISOString().replace(/[:.]/g, "-")}-${process.pid}-${++counter}.eml`;
      writeFileSync(join(opts.outboxDir, name), info.message as Buffer);
      return { messageId: info.messageId };
    },
    async close() {},
  };
}
