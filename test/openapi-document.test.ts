// docs/openapi.json is the OpenAPI document the service serves, committed so that the
// repository documents itself without running it. It must be current.
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { OPENAPI_FILE, openapiDocument, openapiText } from "../src/cli/openapi.ts";
import { JOB_NAMES } from "../src/schedule.ts";
import { call, makeTestEnv } from "./helpers.ts";

describe("docs/openapi.json", () => {
  test("equals the document generated from the route declarations (run `npm run openapi` after changing a route)", async () => {
    const generated = openapiText(await openapiDocument());
    expect(readFileSync(OPENAPI_FILE, "utf8")).toBe(generated);
  });

  test("is what the running service serves at /docs/json, and names every job's path", async () => {
    const env = makeTestEnv();
    try {
      const served = await call(env.app, "/docs/json", { method: "GET", token: null });
      expect(served.status).toBe(200);
      const committed = JSON.parse(readFileSync(OPENAPI_FILE, "utf8"));
      expect(served.json.paths).toEqual(committed.paths);
      for (const job of JOB_NAMES) expect(Object.keys(committed.paths)).toContain(`/api/cron/${job}`);
    } finally {
      await env.cleanup();
    }
  });
});
