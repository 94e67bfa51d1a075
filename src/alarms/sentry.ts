// The error-tracking channel: one Sentry event per alarm. Each sink gets its own
// client and scope instead of the global `Sentry.init()`, so nothing leaks between
// sinks (or tests) and no default integration patches console, fetch or process
// handlers. Events go out through Bun's fetch; every raise waits for its own event's
// answer at most `flushTimeoutMs`, so a slow or dead endpoint never makes a job hang,
// and rejects when the event was not taken (the sink logs and counts that).
import * as Sentry from "@sentry/bun";
import type { Alarm } from "./alarm.ts";

export interface SentryChannelOptions {
  dsn: string;
  /** Strings that must never leave the service (the CRON_SECRET); scrubbed from every event. */
  secrets?: string[];
  /** Longest wait for the endpoint's answer to the event; default 2000 ms. */
  flushTimeoutMs?: number;
}

export interface SentryChannel {
  raise(alarm: Alarm): Promise<void>;
}

const REDACTED = "[verwijderd]";

/**
 * A password in a URL or connection string in a text, whatever its value: the user info's
 * (`scheme://user:PW@`, up to the last `@` of the authority; also with JSON's escaped
 * slashes `:\/\/`) and a parameter named like password (`?password=PW`, `&sslpassword=PW`,
 * libpq's `password=PW` among key=value pairs). Short URL passwords are not in the secrets
 * list (secretValues: scrubbed wherever they occur, "mail" or "1234" would show themselves
 * by where they were cut out); in a URL, where a connection string shows them, they go by
 * this rule. Every repeat is bounded: a long hostile text costs linear time.
 */
const URL_USERINFO_PASSWORD = /(\b[a-z][a-z0-9+.-]{0,31}:\\?\/\\?\/[^\s:@/?#\\]{0,256}:)[^\s/?#\\]{0,1024}@/gi;
const PASSWORD_PARAMETER = /((?:^|[\s?&;])[\w.-]{0,64}password\w{0,16}=)[^\s&#"';]{0,1024}/gi;

/** Replaces every occurrence of a secret, and every password in a URL, in every string of a value (objects, arrays). */
export function scrubSecrets<T>(value: T, secrets: readonly string[]): T {
  const live = secrets.filter((s) => s.length > 0);
  const walk = (v: unknown, depth: number): unknown => {
    if (typeof v === "string") {
      let s = v;
      for (const secret of live) if (s.includes(secret)) s = s.split(secret).join(REDACTED);
      if (/:\\?\/\\?\//.test(s)) s = s.replace(URL_USERINFO_PASSWORD, `$1${REDACTED}@`);
      if (/password\w{0,16}=/i.test(s)) s = s.replace(PASSWORD_PARAMETER, `$1${REDACTED}`);
      return s;
    }
    if (depth > 20 || v === null || typeof v !== "object") return v;
    if (Array.isArray(v)) return v.map((x) => walk(x, depth + 1));
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v as Record<string, unknown>)) out[walk(k, depth + 1) as string] = walk(x, depth + 1);
    return out;
  };
  return walk(value, 0) as T;
}

export function createSentryChannel(o: SentryChannelOptions): SentryChannel {
  const secrets = o.secrets ?? [];
  const flushTimeoutMs = o.flushTimeoutMs ?? 2000;
  const client = new Sentry.NodeClient({
    dsn: o.dsn,
    integrations: [],
    transport: Sentry.makeFetchTransport,
    stackParser: Sentry.defaultStackParser,
    // An alarm is a message, not an exception: no synthetic stack trace of the sink.
    attachStacktrace: false,
    // Alarm contexts nest (gebroken[].fout): the default depth of 3 would flatten them.
    normalizeDepth: 8,
    // Last line of defence: whatever ends up in the event, the secret does not.
    beforeSend: (event) => scrubSecrets(event, secrets),
  });
  client.init();

  // The SDK tells the outcome of each event only here: the endpoint's answer, or `{}`
  // when no answer came (network error, or dropped by the SDK itself: after a 429 it
  // skips events until the quota's retry-after has passed, and when its queue is full).
  // client.flush() says nothing of it: it is true once the queue is empty, sent or not.
  const waiting = new Map<string, (statusCode: number | undefined) => void>();
  client.on("afterSendEvent", (event, response) => {
    if (event.event_id) waiting.get(event.event_id)?.(response?.statusCode);
  });

  return {
    async raise(alarm) {
      // message and context only: alarm.personal never leaves for the tracker (src/alarms/alarm.ts).
      const scope = new Sentry.Scope();
      scope.setClient(client);
      scope.setLevel("error");
      scope.setTag("type", alarm.type);
      if (alarm.context) {
        scope.setContext("alarm", alarm.context);
        scope.setExtras(alarm.context);
      }
      // The event is prepared and sent asynchronously: its waiter is in place before any answer.
      const eventId = scope.captureMessage(alarm.message, "error");
      let timer: ReturnType<typeof setTimeout> | undefined;
      const statusCode = await new Promise<number | undefined | "timeout">((resolve) => {
        waiting.set(eventId, resolve);
        timer = setTimeout(() => resolve("timeout"), flushTimeoutMs);
      }).finally(() => {
        clearTimeout(timer);
        waiting.delete(eventId);
      });
      if (statusCode === "timeout") throw new Error(`no answer from the Sentry endpoint within ${flushTimeoutMs} ms: delivery not confirmed`);
      if (statusCode === undefined) throw new Error("event not sent: the Sentry endpoint is unreachable, or the SDK dropped it (rate limited after a 429, or its queue is full)");
      if (statusCode < 200 || statusCode >= 300) throw new Error(`the Sentry endpoint refused the event with HTTP ${statusCode}`);
    },
  };
}
