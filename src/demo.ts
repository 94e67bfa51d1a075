// `npm run demo`: the service on the embedded default database with demo data, for a
// first look. It generates a secret for this run only and prints it with a curl line;
// production gets its secret from the root-only environment file (docs/operations.md).
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { parseConfig } from "./config.ts";
import { openStore } from "./db.ts";
import { DEMO_DEFAULT, fillDemoData } from "./cli/demo-data.ts";
import { startServer } from "./server.ts";

const env = { ...process.env };
env.DATABASE_PATH ??= "./data/demo.db";
env.AUDIT_ANKER_BESTAND ??= "./data/demo-audit-ankers.jsonl";
const generated = !env.CRON_SECRET;
if (generated) env.CRON_SECRET = randomBytes(32).toString("hex");
const config = parseConfig(env);

if (!existsSync(config.databasePath)) {
  const store = openStore(config.databasePath);
  fillDemoData(store.sqlite, DEMO_DEFAULT, new Date());
  store.close();
}

const { url } = startServer(config);
const secretLine = generated ? config.cronSecret : "(the CRON_SECRET from your environment)";
process.stdout.write(`
  nachtwacht demo is running on ${config.databasePath}

  Swagger UI:  ${url}/docs
  Health:      ${url}/health
  Secret for this demo run (new every start):
    ${secretLine}

  Try a job (the header goes through stdin, so the secret is not on curl's command line):
    printf 'Authorization: Bearer %s' '${secretLine}' | curl -sS -H @- -X POST ${url}/api/cron/audit-verificatie

`);
