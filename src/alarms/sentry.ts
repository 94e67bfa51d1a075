// The error-tracking channel: one Sentry event per alarm. Each sink gets its own
// client and scope instead of the global `Sentry.init()`, so nothing leaks between
// sinks (or tests) and no default integration patches console, fetch or process
// handlers. Events go out through Bun's fetch; every raise waits for them at most
// `flushTimeoutMs`, so a slow or dead endpoint never makes a job hang.
import * as Sentry from "@sentry/bun";
import type { Alarm } from "./alarm.ts";

export interface SentryChannelOptions {
  dsn: string;
  /** Strings that must never leave the service (the CRON_SECRET); scrubbed from every event. */
  secrets?: string[];
  /** Longest wait for the event to be delivered; default 2000 ms. */
  flushTimeoutMs?: number;
  /** Told when an event could not be delivered in time. */
  onUndelivered?: (alarm: Alarm) => void;
}

export interface SentryChannel {
  raise(alarm: Alarm): Promise<void>;
}

const REDACTED = "[verwijderd]";

/** Replaces every occurrence of a secret in every string of a value (objects, arrays). */
export function scrubSecrets<T>(value: T, secrets: readonly string[]): T {
  const live = secrets.filter((s) => s.length > 0);
  if (live.length === 0) return value;
  const walk = (v: unknown, depth: number): unknown => {
    if (typeof v === "string") {
      let s = v;
      for (const secret of live) if (s.includes(secret)) s = s.split(secret).join(REDACTED);
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

  return {
    async raise(alarm) {
      const scope = new Sentry.Scope();
      scope.setClient(client);
      scope.setLevel("error");
      scope.setTag("type", alarm.type);
      if (alarm.context) {
        scope.setContext("alarm", alarm.context);
        scope.setExtras(alarm.context);
      }
      scope.captureMessage(alarm.message, "error");
      const delivered = await client.flush(flushTimeoutMs);
      if (!delivered) o.onUndelivered?.(alarm);
    },
  };
}
