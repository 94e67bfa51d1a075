// `npm run openapi`: writes docs/openapi.json, the OpenAPI document the service serves
// at /docs/json, generated from the route declarations. test/openapi-document.test.ts
// fails when the committed file is not current.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { createApp } from "../app.ts";
import { generateKeyPair } from "../audit/note.ts";
import { parseConfig } from "../config.ts";
import { openStore } from "../db.ts";
import type { Deps } from "../deps.ts";

/** The document as the service serves it; no job runs, so nothing is sent or raised. */
export async function openapiDocument(): Promise<unknown> {
  const store = openStore(":memory:");
  try {
    const config = parseConfig({ CRON_SECRET: "0".repeat(64), AUDIT_ANKER_SLEUTEL: generateKeyPair("openapi.document").signerKey });
    const unused = (what: string) => () => Promise.reject(new Error(`${what} is not used while generating the document`));
    const deps: Deps = {
      store,
      mailer: { bezorging: "outbox", send: unused("mailer"), close: async () => {} },
      alarms: { raise: unused("alarms") },
      clock: () => new Date(0),
      config,
    };
    const r = await createApp(deps).handle(new Request("http://localhost/docs/json"));
    if (r.status !== 200) throw new Error(`/docs/json answered ${r.status}`);
    return await r.json();
  } finally {
    store.close();
  }
}

export const openapiText = (doc: unknown) => `${JSON.stringify(doc, null, 2)}\n`;
export const OPENAPI_FILE = join(import.meta.dir, "..", "..", "docs", "openapi.json");

if (import.meta.main) {
  writeFileSync(OPENAPI_FILE, openapiText(await openapiDocument()));
  console.log(`geschreven: ${OPENAPI_FILE}`);
}
