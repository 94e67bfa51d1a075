// The request body of a job that takes one (JobInput in src/jobs/job.ts). Elysia never
// parses it (the routes have `parse: "none"`): the auth gate has decided before any of
// it is read, and only here is it read, with the job's cap. It is JSON whatever the
// content type says (`curl -d` sends a form type), and it is checked against the job's
// TypeBox schema, the same declaration the OpenAPI document shows. A body that does
// not match throws Elysia's ValidationError, which the one onError (src/app.ts) turns
// into 400 naming the field.
import type { Static, TSchema } from "@sinclair/typebox";
import { TypeCompiler } from "@sinclair/typebox/compiler";
import { ValidationError } from "elysia";
import type { JobInput } from "../jobs/job.ts";
import type { JobName } from "../schedule.ts";
import { expectation, HttpError } from "./errors.ts";

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
      const { done, value } = await reader.read();
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
 * `tooLarge` above), UTF-8, JSON, then the schema; a mismatch throws Elysia's
 * ValidationError, which onError turns into 400 naming the field.
 */
export function jsonBodyReader<T extends TSchema>(schema: T, maxBytes: number, tooLarge: string): (request: Request) => Promise<Static<T>> {
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
      value = JSON.parse(text);
    } catch {
      throw new HttpError(400, "Ongeldige body: geen geldige JSON.");
    }
    if (!check.Check(value)) throw new ValidationError("body", schema, value, false, check.Errors(value));
    return value;
  };
}

/** The reader of one job's body: compiled once, when the route is mounted. */
export function bodyReader(job: JobName, input: JobInput): (request: Request) => Promise<unknown> {
  return jsonBodyReader(input.schema, input.maxBytes, `Body te groot: ${job} accepteert hoogstens ${input.maxBytes} bytes.`);
}
