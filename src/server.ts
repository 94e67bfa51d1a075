// Wiring the real dependencies and starting the HTTP server; used by the entry point
// and the demo. Nothing here is imported by the app or the jobs.
import { dirname, join, resolve } from "node:path";
import { mailAlarmChannel } from "./alarms/mail-channel.ts";
import { createAlarmSink } from "./alarms/sink.ts";
import { createApp } from "./app.ts";
import { redactedConfig, type Config } from "./config.ts";
import { openStore } from "./db.ts";
import type { Deps } from "./deps.ts";
import { RunningJobs } from "./job-runs.ts";
import { log } from "./logger.ts";
import { createMailer } from "./mail/transport.ts";

export function wireDeps(config: Config): Deps {
  const store = openStore(config.databasePath);
  const dataDir = dirname(resolve(config.databasePath));
  const mailer = createMailer({ smtpUrl: config.smtpUrl, from: config.mailFrom, outboxDir: join(dataDir, "outbox") });
  const clock = () => new Date();
  // Values no alarm may carry: the secret, the anchor key, the SMTP password.
  const secrets = [config.cronSecret, config.auditAnkerSleutel ?? "", config.smtpUrl ? decodeURIComponent(new URL(config.smtpUrl).password) : ""];
  // Serious alarms (broken chain, backup, database integrity) are also mailed to the
  // daily-report recipient when there is one.
  const channels = config.dagrapportEmail
    ? [mailAlarmChannel({ mailer, recipient: config.dagrapportEmail, tijdzone: config.rapportTijdzone, clock })]
    : [];
  const alarms = createAlarmSink({ sentryDsn: config.sentryDsn, clock, secrets, channels });
  return { store, mailer, alarms, clock, config };
}

export function startServer(config: Config) {
  const deps = wireDeps(config);
  const running = new RunningJobs();
  const app = createApp(deps, { running }).listen({ port: config.port, hostname: config.host });
  const url = `http://${config.host}:${app.server?.port}`;
  log("info", "nachtwacht listening", { url, config: redactedConfig(config) });
  if (deps.mailer.bezorging === "outbox") {
    log("warn", "SMTP_URL is not set: e-mail is NOT delivered, it is written as .eml files to the outbox folder", {
      outbox: join(dirname(resolve(config.databasePath)), "outbox"),
    });
  }
  if (!config.sentryDsn) log("warn", "SENTRY_DSN is not set: alarms go to the log on stderr only");

  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log("info", "shutting down", { signal, running: running.names() });
    // Stop accepting new requests, let running jobs finish, then close the database.
    void app.server?.stop(false);
    await running.whenIdle();
    await deps.mailer.close();
    deps.store.close();
    log("info", "stopped", { signal });
    process.exit(0);
  };
  process.on("SIGTERM", () => void shutdown("SIGTERM"));
  process.on("SIGINT", () => void shutdown("SIGINT"));
  return { app, deps, url, running };
}
