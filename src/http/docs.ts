// Swagger UI for triggering jobs by hand, served entirely by the service: hosts are
// often offline, so the bundle and stylesheet of swagger-ui-dist are embedded (in the
// compiled binary too) and served from /docs/assets/, never from a CDN. The docs are
// public and live outside /api/, so the auth gate lets them through; the jobs they
// call still need the token, which the Authorize button sends as a bearer header.
import { openapi } from "@elysiajs/openapi";
import { Elysia } from "elysia";
// `type: "file"` embeds the file in `bun build --compile`; the import is its path.
import bundlePath from "swagger-ui-dist/swagger-ui-bundle.js" with { type: "file" };
import cssPath from "swagger-ui-dist/swagger-ui.css" with { type: "file" };

export const DOCS_PATH = "/docs";
export const SPEC_PATH = "/docs/json";
const BUNDLE_URL = "/docs/assets/swagger-ui-bundle.js";
const CSS_URL = "/docs/assets/swagger-ui.css";
/** Every path the docs are served on: open to anyone (src/app.ts). */
export const DOCS_PATHS = [DOCS_PATH, SPEC_PATH, BUNDLE_URL, CSS_URL];

/**
 * Swagger UI shows, under every response, a ready-made curl command with the bearer
 * token in it. Pasted into a shell it puts the secret on a command line and in the
 * shell history; pasted into a ticket it leaks it. The block is hidden.
 */
const EXTRA_CSS = "\n/* nachtwacht: no curl line with the secret in it */\n.swagger-ui .curl-command { display: none; }\n";

// The files change only with a new binary; a day of caching spares reloads.
const CACHE = "public, max-age=86400";
let css: string | undefined;

function bundle() {
  return new Response(Bun.file(bundlePath), { headers: { "content-type": "text/javascript; charset=utf-8", "cache-control": CACHE } });
}

async function stylesheet() {
  css ??= (await Bun.file(cssPath).text()) + EXTRA_CSS;
  return new Response(css, { headers: { "content-type": "text/css; charset=utf-8", "cache-control": CACHE } });
}

export function docs() {
  return new Elysia({ name: "nachtwacht-docs" })
    .get(BUNDLE_URL, bundle, { detail: { hide: true } })
    .get(CSS_URL, stylesheet, { detail: { hide: true } })
    .use(
      openapi({
        path: DOCS_PATH,
        specPath: SPEC_PATH,
        provider: "swagger-ui",
        documentation: {
          info: {
            title: "nachtwacht",
            version: "1",
            description:
              "Nachtelijke taken van de service: retentie, verificatie van de audit-keten, rapporten, back-upstatus en controles. " +
              "Klik op Authorize en vul het CRON_SECRET in (zonder 'Bearer ') om een taak met de hand te starten.",
          },
          tags: [
            { name: "cron", description: "De taken die de crontab van de host aanroept (planning: src/schedule.ts). Token: CRON_SECRET." },
            { name: "schrijf-API", description: "Waarmee de applicatie audit-entries, inlogpogingen, tenants en beheerders aanlevert (docs/integration.md). Token: APP_SECRET." },
            { name: "metrics", description: "Voor Prometheus: vanaf loopback zonder token, van elders met METRICS_SECRET (docs/operations.md, Metrics)." },
          ],
          components: {
            securitySchemes: {
              bearerAuth: { type: "http", scheme: "bearer", description: "CRON_SECRET: opent alleen de taken." },
              appAuth: { type: "http", scheme: "bearer", description: "APP_SECRET (tijdens een wissel ook het vorige, APP_SECRET_VORIG): opent alleen de schrijf-API." },
              metricsAuth: { type: "http", scheme: "bearer", description: "METRICS_SECRET (tijdens een wissel ook METRICS_SECRET_VORIG): opent alleen /metrics (van buiten loopback)." },
            },
          },
        },
        swagger: {
          cdn: BUNDLE_URL,
          theme: CSS_URL,
          // Without an absolute spec URL the page at /docs/ resolves it relatively and fails.
          url: SPEC_PATH,
          // The default validator badge would fetch from validator.swagger.io.
          validatorUrl: null,
          persistAuthorization: false,
          tryItOutEnabled: false,
        } as Record<string, unknown>,
      }),
    );
}
