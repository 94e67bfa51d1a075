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
    // The first error only, by field: Elysia's ValidationError would render the whole
    // value into its message (a 40 KB body of deep arrays: 800 MB, and a stack overflow deeper).
    if (!check.Check(value)) throw new HttpError(400, validationMessage({ valueError: check.Errors(value).First() }));
    return value;
  };
}

/** The reader of one job's body: compiled once, when the route is mounted. */
export function bodyReader(job: JobName, input: JobInput): (request: Request) => Promise<unknown> {
  return jsonBodyReader(input.schema, input.maxBytes, `Body te groot: ${job} accepteert hoogstens ${input.maxBytes} bytes.`);
}
