// Entry point: parse the configuration, wire the real dependencies, serve.
import { ConfigError, parseConfig } from "./config.ts";
import { startServer } from "./server.ts";

try {
  startServer(parseConfig(process.env));
} catch (e) {
  if (e instanceof ConfigError) {
    process.stderr.write(`nachtwacht: configuration error: ${e.message}\n`);
    process.exit(2);
  }
  throw e;
}
