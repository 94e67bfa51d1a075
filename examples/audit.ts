// Sends one batch of audit entries to nachtwacht (POST /api/audit) and prints the
// answer, with a receipt per entry, on stdout. Plain fetch, no imports: copy it into
// any TypeScript project. (Inside this repository, or with src/client.ts vendored,
// NachtwachtClient does the same with the server's own types.) docs/integration.md
// explains it.
//
//   NACHTWACHT_URL=https://nachtwacht.intern.example APP_SECRET=… bun examples/audit.ts batch.json
//   … | bun examples/audit.ts                       # the batch on stdin
//   node --experimental-strip-types examples/audit.ts batch.json   (Node ≥ 22.6; Node 20: compile first)
//
// Give every entry a `sleutel` (your own event id): a batch sent twice is then stored
// once, and the second time answered with the same receipts. A batch with an entry
// without one is sent again only when the failed attempt certainly stored nothing (the
// name did not resolve or the connection was refused, or nachtwacht's own 503 says so in
// its `nachtwacht-opgeslagen: nee` header); after any other failure it may have been
// stored, and is not repeated.
//
// Environment: NACHTWACHT_URL and APP_SECRET (required); NACHTWACHT_MAX_ATTEMPTS (5),
// NACHTWACHT_BACKOFF_MS (500: the first wait, doubled each time, with jitter),
// NACHTWACHT_MAX_DELAY_MS (60000: a Retry-After above it ends the retries).
//
// Exit: 0 stored (or already stored); 1 refused (a 3xx, or a 4xx other than 408/429: fix
// the batch or the URL; the server's message is on stderr); 2 usage; 3 perhaps stored
// (entries without a sleutel, no certain answer): do not send it again as it is; 75 gave
// up for now (no answer, 408, 429, 5xx, an answer that is not nachtwacht's): send the
// same batch again later. The secret comes from the environment and only goes into a
// request header, never onto a command line.
import { readFileSync } from "node:fs";

export interface AuditEntry {
  tenantId: number;
  actor: string;
  action: string;
  subject: string;
  details?: Record<string, unknown>;
  /** ISO 8601 with a zone; default: when nachtwacht receives it. */
  tijdstip?: string;
  /** Idempotency key, unique per tenant: your own event id. */
  sleutel?: string;
}

export interface Receipt {
  tenantId: number;
  seq: number;
  id: number;
  hash: string;
}

export interface AuditAnswer {
  opgeslagen: number;
  alBekend: number;
  ontvangstbewijzen: Receipt[];
}

/** A final answer (a 3xx, or a 4xx other than 408/429): sending the same batch again will not help. */
export class Refused extends Error {
  readonly status: number;
  /** False when this client refused the batch itself, before sending (over MAX_BATCH_BYTES): no answer came. */
  readonly sent: boolean;
  constructor(status: number, error: string, sent = true) {
    super(sent ? `HTTP ${status}: ${error}` : `by this client, before sending (${status}, no answer from the service): ${error}`);
    this.status = status;
    this.sent = sent;
  }
}

/** No success after the allowed attempts, or the server asks to wait longer than allowed. */
export class GaveUp extends Error {}

/** No certain answer for a batch with entries without a sleutel: it may have been stored, so it is not sent again. */
export class MaybeStored extends Error {}

export interface SendOptions {
  maxAttempts?: number;
  backoffMs?: number;
  maxDelayMs?: number;
  timeoutMs?: number;
  log?: (message: string) => void;
}

/** A refusal that sending the same batch again will not change: a redirect, or a 4xx other than 408/429. */
const isFinal = (status: number) => status >= 300 && status < 500 && status !== 408 && status !== 429;
/** nachtwacht's own 503 carries it when nothing of the request was stored (a proxy's 503 does not). */
const NOTHING_STORED = ["nachtwacht-opgeslagen", "nee"] as const;
/**
 * The largest batch POST /api/audit takes, in bytes: the service's MAX_BATCH_BYTES
 * (src/ingest/audit.ts). A larger one is refused before sending: the service would close
 * the connection on it unread, which looks like a lost answer, not like the 413 it is.
 */
const MAX_BATCH_BYTES = 1048576;
/** What the service takes as a secret (src/config.ts): a line break would otherwise end up in fetch's error text. */
const SECRET = /^[\x21-\x7e]{32,1024}$/;
export const SECRET_RULE = "APP_SECRET must be 32 to 1024 printable ASCII characters, without spaces or line breaks (as the service requires)";

/** The name did not resolve or the connection was refused: the request never left this machine (Bun: e.code; Node: e.cause.code). */
function neverSent(e: unknown): boolean {
  const code = (x: unknown) => (x as { code?: unknown } | null)?.code;
  return [code(e), code((e as { cause?: unknown } | null)?.cause)].some((c) => c === "ECONNREFUSED" || c === "ENOTFOUND" || c === "EAI_AGAIN");
}

function retryAfterMs(value: string | null): number | null {
  if (value === null) return null;
  if (/^\s*\d+\s*$/.test(value)) return Number(value) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, at - Date.now());
}

/** nachtwacht's answer (it has the receipts), or null. */
function answerOf(text: string): AuditAnswer | null {
  try {
    const a = JSON.parse(text) as AuditAnswer | null;
    return Array.isArray(a?.ontvangstbewijzen) ? a : null;
  } catch {
    return null;
  }
}

function errorOf(text: string, status: number): string {
  try {
    const e = (JSON.parse(text) as { error?: unknown }).error;
    if (typeof e === "string") return e;
  } catch {
    // not JSON
  }
  return text.trim().slice(0, 300) || `HTTP ${status} without a body`;
}

/**
 * POSTs the entries as one batch and returns the answer. Retries (the same bytes, so
 * the same sleutels) after a connection error, a timeout, 408, 429, 5xx and an answer
 * that is not nachtwacht's, waiting
 * 2^(attempt−1) × backoffMs with jitter, or the server's Retry-After plus a random part
 * of that; a batch with an entry without a sleutel only when nothing was stored. Throws
 * TypeError for a secret the service would not take, Refused for a final answer (a batch
 * over MAX_BATCH_BYTES: 413 without sending), MaybeStored when a batch without sleutels may have been stored, GaveUp
 * otherwise.
 */
export async function sendAudit(baseUrl: string, secret: string, entries: AuditEntry[], o: SendOptions = {}): Promise<AuditAnswer> {
  const maxAttempts = o.maxAttempts ?? 5;
  const backoffMs = o.backoffMs ?? 500;
  const maxDelayMs = o.maxDelayMs ?? 60_000;
  if (typeof secret !== "string" || !SECRET.test(secret)) throw new TypeError(SECRET_RULE); // never the value itself
  const keyed = entries.every((e) => typeof e?.sleutel === "string");
  const body = JSON.stringify({ entries });
  const bytes = new TextEncoder().encode(body).byteLength;
  if (bytes > MAX_BATCH_BYTES) throw new Refused(413, `the batch is ${bytes} bytes, more than the ${MAX_BATCH_BYTES} bytes the service takes; nothing sent, nothing stored: split it`, false);
  const url = `${baseUrl.replace(/\/+$/, "")}/api/audit`;
  for (let attempt = 1; ; attempt++) {
    let reason: string;
    let wait: number | null = null;
    let nothingStored = false;
    try {
      const res = await fetch(url, {
        method: "POST",
        headers: { authorization: `Bearer ${secret}`, "content-type": "application/json", accept: "application/json" },
        body,
        // The service never redirects; following one could take the header elsewhere.
        redirect: "manual",
        signal: AbortSignal.timeout(o.timeoutMs ?? 60_000),
      });
      const text = await res.text();
      if (isFinal(res.status)) throw new Refused(res.status, errorOf(text, res.status));
      const answer = res.ok ? answerOf(text) : null;
      if (answer !== null) return answer;
      if (res.ok) {
        // A 2xx from something in between (a login page): nothing certain was stored.
        reason = `HTTP ${res.status}, but not nachtwacht's answer: ${text.trim().slice(0, 300)}`;
      } else {
        reason = `HTTP ${res.status}: ${errorOf(text, res.status)}`;
        wait = retryAfterMs(res.headers.get("retry-after"));
        nothingStored = res.status === 503 && res.headers.get(NOTHING_STORED[0])?.trim() === NOTHING_STORED[1];
      }
    } catch (e) {
      if (e instanceof Refused) throw e;
      reason = `no answer: ${e instanceof Error ? e.message : String(e)}`;
      nothingStored = neverSent(e);
    }
    if (!keyed && !nothingStored) throw new MaybeStored(`${reason}; perhaps stored, and entries without a sleutel are not sent again (they could be stored twice)`);
    if (attempt >= maxAttempts) throw new GaveUp(`gave up after ${attempt} attempts: ${reason}`);
    if (wait !== null && wait > maxDelayMs) throw new GaveUp(`${reason}; the server asks to wait ${wait / 1000} s (Retry-After), more than maxDelayMs`);
    const backoff = Math.min(maxDelayMs, backoffMs * 2 ** (attempt - 1));
    // After a Retry-After: that plus a random part of the backoff, so clients refused at once do not all return at once.
    const delay = Math.round(wait === null ? backoff / 2 + (Math.random() * backoff) / 2 : Math.max(wait, Math.min(maxDelayMs, wait + Math.random() * backoff)));
    o.log?.(`attempt ${attempt}: ${reason}; again in ${delay} ms`);
    await new Promise((resolve) => setTimeout(resolve, delay));
  }
}

async function main(args: string[]): Promise<number> {
  const say = (m: string) => console.error(`audit.ts: ${m}`);
  const baseUrl = process.env.NACHTWACHT_URL;
  const secret = process.env.APP_SECRET;
  if (!baseUrl || !secret) {
    say("NACHTWACHT_URL and APP_SECRET must be set (in the environment, never as arguments)");
    return 2;
  }
  if (args.length > 1) {
    say("usage: audit.ts [BATCH.json | -]");
    return 2;
  }
  let entries: AuditEntry[];
  let options: SendOptions;
  const num = (name: string) => {
    const v = process.env[name];
    if (v === undefined || v === "") return undefined;
    if (!/^\d{1,9}$/.test(v)) throw new Error(`${name} takes a whole number`);
    return Number(v);
  };
  if (!SECRET.test(secret)) {
    say(SECRET_RULE);
    return 2;
  }
  if (!/^https?:\/\//i.test(baseUrl)) {
    say("NACHTWACHT_URL must start with http:// or https://");
    return 2;
  }
  try {
    options = { maxAttempts: num("NACHTWACHT_MAX_ATTEMPTS"), backoffMs: num("NACHTWACHT_BACKOFF_MS"), maxDelayMs: num("NACHTWACHT_MAX_DELAY_MS"), log: say };
    if ((options.maxAttempts ?? 1) < 1) throw new Error("NACHTWACHT_MAX_ATTEMPTS must be at least 1");
    const text = args.length === 0 || args[0] === "-" ? readFileSync(0, "utf8") : readFileSync(args[0]!, "utf8");
    entries = (JSON.parse(text) as { entries: AuditEntry[] }).entries;
    if (!Array.isArray(entries)) throw new Error("no entries array");
  } catch (e) {
    say(`cannot read the batch or the settings: ${e instanceof Error ? e.message : String(e)}`);
    return 2;
  }
  try {
    console.log(JSON.stringify(await sendAudit(baseUrl, secret, entries, options)));
    return 0;
  } catch (e) {
    if (e instanceof Refused) {
      say(`refused, ${e.message}`);
      return 1;
    }
    if (e instanceof MaybeStored) {
      say(`${e.message}; check before sending it again, and give every entry a sleutel`);
      return 3;
    }
    if (e instanceof GaveUp) {
      say(`${e.message}; send the same batch again later`);
      return 75;
    }
    throw e;
  }
}

// Run as a script (not when imported).
if (import.meta.main ?? process.argv[1]?.endsWith("audit.ts")) process.exitCode = await main(process.argv.slice(2));
