// A real SMTP server in-process for the mail tests: listens on 127.0.0.1 on a free
// port, parses every message with mailparser, can refuse chosen recipients with 550,
// and can be stopped to simulate an outage.
import { dirname, join } from "node:path";
import { simpleParser } from "mailparser";
import { SMTPServer } from "smtp-server";
import type { Config } from "../src/config.ts";
import type { Mailer } from "../src/mail/mailer.ts";
import { createMailer } from "../src/mail/transport.ts";
import { makeEnv, type Env } from "./dialect.ts";

export interface ReceivedMail {
  /** Envelope recipients (RCPT TO). */
  to: string[];
  from: string;
  subject: string;
  html: string;
  text: string;
  /** The user that authenticated, if any. */
  user: string | null;
}

export interface TestSmtp {
  port: number;
  /** `smtp://127.0.0.1:<port>` */
  url: string;
  received: ReceivedMail[];
  /** Recipients answered with 550 at RCPT TO. */
  refuse: Set<string>;
  stop(): Promise<void>;
}

/** `starttls`: offer STARTTLS with smtp-server's built-in self-signed certificate. */
export async function startSmtp(o: { refuse?: Iterable<string>; starttls?: boolean } = {}): Promise<TestSmtp> {
  const received: ReceivedMail[] = [];
  const refuse = new Set<string>(o.refuse ?? []);
  const server = new SMTPServer({
    authOptional: true,
    // Accept AUTH without TLS: the test server has no certificate a client would trust.
    allowInsecureAuth: true,
    hideSTARTTLS: !o.starttls,
    // Without this each connection waits on a reverse DNS lookup.
    disableReverseLookup: true,
    closeTimeout: 200,
    logger: false,
    onAuth(auth, _session, callback) {
      callback(null, { user: auth.username });
    },
    onRcptTo(address, _session, callback) {
      if (refuse.has(address.address)) {
        const err = Object.assign(new Error(`Mailbox unavailable: ${address.address}`), { responseCode: 550 });
        return callback(err);
      }
      callback();
    },
    onData(stream, session, callback) {
      simpleParser(stream)
        .then((mail) => {
          received.push({
            to: session.envelope.rcptTo.map((r) => r.address),
            from: session.envelope.mailFrom ? session.envelope.mailFrom.address : "",
            subject: mail.subject ?? "",
            html: typeof mail.html === "string" ? mail.html : "",
            text: mail.text ?? "",
            user: typeof session.user === "string" ? session.user : null,
          });
          callback();
        })
        .catch((e) => callback(e));
    },
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const address = server.server.address();
  if (address === null || typeof address === "string") throw new Error("smtp server has no port");
  const port = address.port;
  let stopped = false;
  return {
    port,
    url: `smtp://127.0.0.1:${port}`,
    received,
    refuse,
    stop() {
      if (stopped) return Promise.resolve();
      stopped = true;
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

/** A port on 127.0.0.1 nothing listens on (opened and closed again). */
export async function closedPort(): Promise<number> {
  const s = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = s.port;
  s.stop(true);
  return port;
}

/** What makeMailEnv needs of an installation: its configuration, the mailer its jobs read, its cleanup. */
interface MailableEnv {
  config: Config;
  deps: { mailer: Mailer };
  cleanup(): Promise<void>;
}

/** An installation whose jobs use the real mailer (deps.mailer); `outboxDir`: the folder it writes without SMTP_URL. */
export type MailEnv<E extends MailableEnv> = E & { outboxDir: string };

/**
 * A test installation with the REAL mailer of src/mail/transport.ts in place of the
 * recording one: over SMTP when `env.SMTP_URL` is set (point it at startSmtp()), else the
 * outbox folder beside the database. The installation is test/dialect.ts makeEnv's (the
 * run's store), or `make`'s (helpers.ts makeTestEnv for a file on SQLite only); its own
 * `mailer` stays the recording one, unused. Its cleanup closes the real mailer first.
 * Not cleaned up by itself: the caller does.
 */
export function makeMailEnv(env?: Record<string, string>): Promise<MailEnv<Env>>;
export function makeMailEnv<E extends MailableEnv>(env: Record<string, string>, make: (env: Record<string, string>) => E | Promise<E>): Promise<MailEnv<E>>;
export async function makeMailEnv(
  env: Record<string, string> = {},
  make: (env: Record<string, string>) => MailableEnv | Promise<MailableEnv> = makeEnv,
): Promise<MailEnv<MailableEnv>> {
  const e = await make({ MAIL_FROM: "nachtwacht <nachtwacht@example.test>", ...env });
  const outboxDir = join(dirname(e.config.databasePath), "outbox");
  const mailer = createMailer({
    smtpUrl: e.config.smtpUrl,
    from: e.config.mailFrom,
    outboxDir,
    // Short timeouts: a test against a closed port must fail fast, not after 15 s.
    timeouts: { connection: 2000, greeting: 2000, socket: 5000 },
  });
  // The app's jobs read deps.mailer when they run.
  e.deps.mailer = mailer;
  const cleanup = e.cleanup;
  return Object.assign(e, {
    outboxDir,
    async cleanup() {
      await mailer.close();
      await cleanup();
    },
  });
}
