// Entry point of the binary and of `npm start`. With no argument (or `serve`) it parses
// the configuration, wires the real dependencies and serves. The operator's commands:
// `key`, `verify`, `export` (src/cli/audit.ts, no configuration needed), `adopt` and
// `accept-restore` (src/cli/audit.ts, the signing key from the environment),
// `db-convert` (src/cli/db-convert.ts), `migrate-to` (src/cli/migrate-to.ts), `config
// check` (src/cli/config-check.ts), `backup` (src/cli/backup.ts), `crontab`
// (src/cli/crontab.ts) and `demo` (src/demo.ts). Each branch imports only what it needs:
// a command starts without loading the server.

import { StdoutFailed, writeStdout } from "./cli/stdout.ts";

const USAGE = `gebruik: nachtwacht [opdracht] [--help]
  serve                 de service starten (standaard), geconfigureerd door de omgeving
  key                   een nieuw Ed25519-sleutelpaar voor AUDIT_ANKER_SLEUTEL
  verify                database en ankerbestand offline controleren met publieke sleutels
  export                de keten van één tenant als bundel voor een auditor
  adopt                 een keten die een eerdere versie inkortte ondertekend overnemen (met AUDIT_ANKER_SLEUTEL)
  accept-restore        een bewust teruggezette database accepteren, verlies per tenant ondertekend (met AUDIT_ANKER_SLEUTEL)
  config check          de configuratie controleren zonder te starten
  backup                online kopie van de database, gecontroleerd en gecomprimeerd, gemeld aan backup-status
  crontab               /etc/cron.d/nachtwacht uit de planning afdrukken
  db-convert            eenmalige omzetting naar incrementele auto-vacuum
  migrate-to            de SQLite-database naar een lege PostgreSQL-database kopiëren en de kopie bewijzen
  demo                  de service op een demodatabase in ./data
Exitcodes: 0 gelukt, 1 gevonden wat niet klopt, 2 kon niet (gebruik, configuratie, bestand, uitvoer);
backup gebruikt sysexits-codes (64–78, zie nachtwacht backup --help).`;

const AUDIT_COMMANDS = new Set(["key", "verify", "export", "adopt", "accept-restore"]);
const [command, ...rest] = Bun.argv.slice(2);
// Standard output through write(2), which throws when it fails (src/cli/stdout.ts): a
// command whose output did not get out never exits 0. One that escapes a command ends
// the process below with exit 2; backup turns it into its own 74.
const out = (s: string) => writeStdout(s + "\n");
const err = (s: string) => console.error(s);
const wantsHelp = rest.includes("--help") || rest.includes("-h");

/** A command that takes no options but --help: anything else exits 2 naming it; true for --help. */
async function noOptions(name: string): Promise<boolean> {
  const { OptionError, parseOptions } = await import("./cli/options.ts");
  try {
    return parseOptions(`nachtwacht ${name}`, rest, { help: { type: "boolean", short: "h" } }).help === true;
  } catch (e) {
    if (!(e instanceof OptionError)) throw e;
    err(`${e.message}\ngebruik: nachtwacht ${name} [--help]`);
    process.exit(2);
  }
}

try {
  if (command === "help" || command === "--help" || command === "-h") {
    // As every command: a stray argument is refused (2), not passed over.
    if (rest.length > 0) {
      err(`nachtwacht ${command} neemt geen argument ${JSON.stringify(rest[0])}\ngebruik: nachtwacht help`);
      process.exit(2);
    }
    out(USAGE);
    process.exit(0);
  } else if (command !== undefined && AUDIT_COMMANDS.has(command)) {
    const { runAuditCommand } = await import("./cli/audit.ts");
    process.exit(await runAuditCommand([command, ...rest], process.env, out, err));
  } else if (command === "migrate-to") {
    const { runMigrateTo } = await import("./cli/migrate-to.ts");
    process.exit(await runMigrateTo(rest, process.env, out, err));
  } else if (command === "db-convert") {
    const { runDbConvert } = await import("./cli/db-convert.ts");
    process.exit(runDbConvert(rest, process.env, out, err));
  } else if (command === "config") {
    const { runConfigCheck } = await import("./cli/config-check.ts");
    if (rest[0] !== "check") {
      err("gebruik: nachtwacht config check [--env BESTAND]");
      process.exit(2);
    }
    process.exit(runConfigCheck(rest.slice(1), process.env, out, err));
  } else if (command === "backup") {
    const { runBackup } = await import("./cli/backup.ts");
    process.exit(await runBackup(rest, process.env, out, err));
  } else if (command === "crontab") {
    if (await noOptions("crontab")) {
      out("gebruik: nachtwacht crontab\n  Drukt /etc/cron.d/nachtwacht af, gegenereerd uit de planning (src/schedule.ts); gelijk aan ops/nachtwacht.cron, dat install.sh installeert.");
      process.exit(0);
    }
    const { crontab } = await import("./cli/crontab.ts");
    writeStdout(crontab());
  } else if (command === "demo") {
    if (await noOptions("demo")) {
      out("gebruik: nachtwacht demo\n  Start de service op ./data/demo.db met demodata (eenmalig gevuld), mail als .eml in ./data/outbox.");
      process.exit(0);
    }
    await import("./demo.ts");
  } else if (command !== undefined && command !== "serve") {
    err(`nachtwacht: onbekende opdracht ${JSON.stringify(command)}\n${USAGE}`);
    process.exit(2);
  } else if (wantsHelp) {
    out("gebruik: nachtwacht [serve]\n  Start de service; alle instellingen komen uit de omgeving (docs/operations.md, ops/nachtwacht.env.example).\n  Controleer ze vooraf met: nachtwacht config check --env /etc/nachtwacht/nachtwacht.env");
    process.exit(0);
  } else {
    const { ConfigError, parseConfig } = await import("./config.ts");
    const { startPgServer, startServer } = await import("./server.ts");
    const { startFailureMessage } = await import("./start-failure.ts");
    let config: import("./config.ts").Config;
    try {
      config = parseConfig(process.env);
    } catch (e) {
      if (!(e instanceof ConfigError)) throw e;
      process.stderr.write(`nachtwacht: configuratiefout: ${e.message}\n`);
      process.exit(2);
    }
    try {
      if (config.databaseUrl !== null) await startPgServer(config, config.databaseUrl);
      else startServer(config);
    } catch (e) {
      const message = startFailureMessage(e, config);
      if (message === null) throw e;
      process.stderr.write(`nachtwacht: kan niet starten: ${message}\n`);
      process.exit(2);
    }
  }
} catch (e) {
  if (!(e instanceof StdoutFailed)) throw e;
  err(`nachtwacht: ${e.message}`);
  process.exit(2);
}
