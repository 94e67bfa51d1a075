// The request body of a job that takes one (JobInput in src/jobs/job.ts). Elysia never
// parses it (the routes have `parse: "none"`): the auth gate has decided before any of
// it is read, and only here is it read, with the job's cap. It is JSON whatever the
// content type says (`curl -d` sends a form type), and it is checked against the job's
// TypeBox schema, the same declaration the OpenAPI document shows. A body that does
// not match is a 400 naming its first wrong field (validationMessage).
import type { Static, TSchema } from "@sinclair/typebox";
import { TypeCompiler } from "@sinclair/typebox/compiler";
import type { JobInput } from "../jobs/job.ts";
import type { JobName } from "../schedule.ts";
import { expectation, HttpError, validationMessage } from "./errors.ts";

/** Reads at most `max` bytes; one byte more is 413, whatever content-length said. */
export async function readCappedBody(request: Request, max: number, tooLarge: string): Promise<Uint8Array> {
  const declared = request.headers.get("content-length");
  if (declared !== null && /^\d+$/.test(declared.trim()) && Number(declared) > max) throw new HttpError(413, tooLarge);
  if (request.body === null) return new Uint8Array(0);
  const reader = request.body.getReader();
  const parts: Uint8Array[] = [];
  let total = 0;
  try {
    for (;;) {
      let chunk: Awaited<ReturnType<typeof reader.read>>;
      try {
        chunk = await reader.read();
      } catch {
        // The client went away mid-body (its timeout, a broken connection): nobody is
        // there to answer, and nothing of it is stored. A 4xx, so no alarm.
        throw new HttpError(400, "Body onvolledig: de verbinding werd verbroken voordat de body binnen was; niets opgeslagen.");
      }
      const { done, value } = chunk;
      if (done) break;
      total += value.byteLength;
      if (total > max) throw new HttpError(413, tooLarge);
      parts.push(value);
    }
  } finally {
    if (total > max) void reader.cancel().catch(() => {});
    else reader.releaseLock();
  }
  const out = new Uint8Array(total);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.byteLength;
  }
  return out;
}

/**
 * A reader of JSON bodies of one schema, compiled once: at most `maxBytes` (413 with
 * `tooLarge` above), UTF-8, JSON (`parse`: POST /api/audit's keeps numbers' source
 * text, parseAuditBody), then the schema; a mismatch is a 400 naming the field.
 */
export function jsonBodyReader<T extends TSchema>(schema: T, maxBytes: number, tooLarge: string, parse: (text: string) => unknown = JSON.parse): (request: Request) => Promise<Static<T>> {
  const check = TypeCompiler.Compile(schema);
  const expected = expectation(schema);
  return async (request) => {
    const bytes = await readCappedBody(request, maxBytes, tooLarge);
    let text: string;
    try {
      text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
    } catch {
      throw new HttpError(400, "Ongeldige body: geen geldige UTF-8.");
    }
    if (text.trim() === "") throw new HttpError(400, `Ongeldige body: leeg; verwacht ${expected}.`);
    let value: unknown;
    try {
      value = parse(text);
    } catch {
      throw new HttpError(400, "Ongeldige body: geen geldige JSON.");
    }
    const twice = repeatedMember(text, value);
    if (twice !== null) {
      throw new HttpError(400, `Ongeldige body: de naam ${JSON.stringify(twice.length > 40 ? `${twice.slice(0, 40)}…` : twice)} staat twee keer in hetzelfde object; welke waarde geldt, verschilt per JSON-lezer: stuur hem één keer.`);
    }
    // The first error only, by field: Elysia's ValidationError would render the whole
    // value into its message (a 40 KB body of deep arrays: 800 MB, and a stack overflow deeper).
    if (!check.Check(value)) throw new HttpError(400, validationMessage({ valueError: check.Errors(value).First() }));
    return value;
  };
}

/**
 * A member name that occurs twice in one object of `text` (JSON that `value` was parsed
 * from), or null. JSON.parse keeps the last one silently, where another reader (a proxy,
 * a log) may take the first: what is chained and signed must be what was sent, once.
 * Cheap first: every member name ends in a quote before a colon, so a text with no more
 * of those than `value` has members has no repeat (~0.2 µs a write-API entry); only
 * otherwise (a repeat, or a string holding `\":`) is the text scanned.
 */
export function repeatedMember(text: string, value: unknown): string | null {
  const members = memberCount(value);
  // Too deep to count: scanned (firstRepeat keeps its own stack), as a body some schema lets through may be.
  return members !== null && nameEnds(text) === members ? null : firstRepeat(text);
}

/** At least the number of member names in a JSON text: each ":" whose nearest character before it, white space skipped, is a quote. */
function nameEnds(text: string): number {
  let n = 0;
  for (let i = text.indexOf(":"); i >= 0; i = text.indexOf(":", i + 1)) {
    let j = i - 1;
    let c = text.charCodeAt(j);
    while (c === 32 || c === 9 || c === 10 || c === 13) c = text.charCodeAt(--j);
    if (c === 34) n++;
  }
  return n;
}

/** Nesting beyond which memberCount does not count (the text is scanned instead): deeper than any write-API body may be (details: MAX_DETAILS_DEPTH). */
const MAX_COUNTED_DEPTH = 64;

/** The members of every object in a parsed value; null when it is nested deeper than MAX_COUNTED_DEPTH. */
function memberCount(value: unknown): number | null {
  let n = 0;
  const stack: [unknown, number][] = [[value, 0]];
  for (let top = stack.pop(); top !== undefined; top = stack.pop()) {
    const [v, depth] = top;
    if (v === null || typeof v !== "object") continue;
    if (depth > MAX_COUNTED_DEPTH) return null;
    if (Array.isArray(v)) {
      for (const x of v) if (x !== null && typeof x === "object") stack.push([x, depth + 1]);
      continue;
    }
    for (const k in v) {
      n++;
      const x = (v as Record<string, unknown>)[k];
      if (x !== null && typeof x === "object") stack.push([x, depth + 1]);
    }
  }
  return n;
}

/** The first member name repeated within one object of a valid JSON text (names compared decoded: "a" and "\u0061" are one). */
function firstRepeat(text: string): string | null {
  const open: (Set<string> | null)[] = [];
  let atName = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 34) {
      let j = i + 1;
      let escaped = false;
      for (let d = text.charCodeAt(j); d !== 34; d = text.charCodeAt(j)) {
        if (d === 92) escaped = true;
        j += d === 92 ? 2 : 1;
      }
      if (atName) {
        const name = escaped ? (JSON.parse(text.slice(i, j + 1)) as string) : text.slice(i + 1, j);
        const names = open[open.length - 1]!;
        if (names.has(name)) return name;
        names.add(name);
        atName = false;
      }
      i = j;
    } else if (c === 123) {
      open.push(new Set());
      atName = true;
    } else if (c === 91) {
      open.push(null);
    } else if (c === 125 || c === 93) {
      open.pop();
    } else if (c === 44) {
      atName = open.length > 0 && open[open.length - 1] !== null;
    }
  }
  return null;
}

/** The reader of one job's body: compiled once, when the route is mounted. */
export function bodyReader(job: JobName, input: JobInput): (request: Request) => Promise<unknown> {
  return jsonBodyReader(input.schema, input.maxBytes, `Body te groot: ${job} accepteert hoogstens ${input.maxBytes} bytes.`);
}
