// `npm run demo`: the service on the embedded default database with demo data, for a
// first look. It generates a secret for this run only and prints it with a curl line;
// production gets its secret from the root-only environment file (docs/operations.md).
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { generateKeyPair, parseSignerKey } from "./audit/note.ts";
import { parseConfig } from "./config.ts";
import { openStore } from "./db.ts";
import { rowSealOf } from "./row-seal.ts";
import { DEMO_DEFAULT, fillDemoData } from "./cli/demo-data.ts";
import { startServer } from "./server.ts";
import { startFailureMessage } from "./start-failure.ts";

const env = { ...process.env };
env.DATABASE_PATH ??= "./data/demo.db";
// In a folder of its own: the files beside the anchor file (zegelsleutel, zegels-sinds,
// the witnesses) are the demo's, not those of a service started in ./data with another key.
env.AUDIT_ANKER_BESTAND ??= "./data/demo/audit-ankers.jsonl";
// The demo's signing key lives beside its database, so its checkpoints stay verifiable
// from one start to the next (production keeps it in the root-only env file).
const KEY_FILE = "./data/demo-audit-sleutel";
if (!env.AUDIT_ANKER_SLEUTEL) {
  if (!existsSync(KEY_FILE)) {
    mkdirSync(dirname(KEY_FILE), { recursive: true });
    writeFileSync(KEY_FILE, generateKeyPair("nachtwacht.demo/sleutel").signerKey + "\n", { mode: 0o600 });
  }
  env.AUDIT_ANKER_SLEUTEL = readFileSync(KEY_FILE, "utf8").trim();
}
const generated = !env.CRON_SECRET;
if (generated) env.CRON_SECRET = randomBytes(32).toString("hex");
const appGenerated = !env.APP_SECRET;
if (appGenerated) env.APP_SECRET = randomBytes(32).toString("hex");
const config = parseConfig(env);

if (!existsSync(config.databasePath)) {
  const store = openStore(config.databasePath, new Date(), rowSealOf(config));
  fillDemoData(store.sqlite, DEMO_DEFAULT, new Date(), 42, rowSealOf(config));
  store.close();
}

let url: string;
try {
  ({ url } = startServer(config));
} catch (e) {
  // The same one line as the service's start (src/index.ts), not a stack trace.
  const message = startFailureMessage(e, config);
  if (message === null) throw e;
  process.stderr.write(`nachtwacht: kan niet starten: ${message}\n`);
  process.exit(2);
}
const secretLine = generated ? config.cronSecret : "(de CRON_SECRET uit je omgeving)";
const appSecretLine = appGenerated ? config.appSecret : "(de APP_SECRET uit je omgeving)";
process.stdout.write(`
  nachtwacht-demo draait op ${config.databasePath}

  Swagger UI: ${url}/docs
  Publieke sleutel (audit-checkpoints): ${parseSignerKey(config.auditAnkerSleutel).verifierKey}
  Gezondheid: ${url}/health
  Geheimen van deze demo-run (bij elke start nieuw):
    taken (CRON_SECRET):      ${secretLine}
    schrijf-API (APP_SECRET): ${appSecretLine}

  Start een taak (de header gaat via stdin, zodat het geheim niet op de opdrachtregel van curl staat):
    printf 'Authorization: Bearer %s' '${secretLine}' | curl -sS -H @- -X POST ${url}/api/cron/audit-verificatie

  Schrijf een auditregel voor tenant 1 (docs/integration.md):
    printf 'Authorization: Bearer %s' '${appSecretLine}' | curl -sS -H @- ${url}/api/audit \\
      -d '{"entries":[{"tenantId":1,"actor":"demo","action":"demo.geprobeerd","subject":"","sleutel":"demo-1"}]}'

`);
