// Entry point of the binary and of `npm start`: with no argument (or `serve`) it parses
// the configuration, wires the real dependencies and serves; `key`, `verify` and
// `export` are the audit commands of src/cli/audit.ts, which need no configuration;
// `db-convert` is the one-time auto-vacuum conversion (src/cli/db-convert.ts).
// Each branch imports only what it needs: a command starts without loading the server.

export {};

const AUDIT_COMMANDS = new Set(["key", "verify", "export"]);
const [command, ...rest] = Bun.argv.slice(2);

if (command !== undefined && AUDIT_COMMANDS.has(command)) {
  const { runAuditCommand } = await import("./cli/audit.ts");
  const code = await runAuditCommand([command, ...rest], process.env, (s) => console.log(s), (s) => console.error(s));
  process.exit(code);
} else if (command === "db-convert") {
  const { runDbConvert } = await import("./cli/db-convert.ts");
  process.exit(runDbConvert(rest, process.env, (s) => console.log(s), (s) => console.error(s)));
} else if (command !== undefined && command !== "serve") {
  process.stderr.write(`nachtwacht: unknown command ${JSON.stringify(command)}; commands: serve (default), key, verify, export, db-convert (each with --help)\n`);
  process.exit(2);
} else {
  const { ConfigError, parseConfig } = await import("./config.ts");
  const { startServer } = await import("./server.ts");
  try {
    startServer(parseConfig(process.env));
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`nachtwacht: configuration error: ${e.message}\n`);
      process.exit(2);
    }
    throw e;
  }
}
