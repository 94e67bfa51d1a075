// backup-status (contract §3): the host backup job reports each run here. The body is
// read by this job itself, after auth, with a hard cap of 64 KiB (a chunked body has
// no content-length to check), and validated field by field so a 400 names the field.
//
// Long strings are cut, not refused: bestandsnaam to 1024 and foutmelding to 8192
// characters. A failed backup must be recorded and alarmed even when its error text is
// long; a 400 would lose exactly the report that matters.
import type { Deps } from "../deps.ts";
import { HttpError } from "../http/errors.ts";
import { defineJob, type JobResult } from "./job.ts";

export const MAX_BODY_BYTES = 64 * 1024;
export const MAX_BESTANDSNAAM = 1024;
export const MAX_FOUTMELDING = 8192;

export type BackupReport = {
  exitCode: number;
  bestandsnaam: string | null;
  grootte: number | null;
  foutmelding: string | null;
};

const TOO_LARGE = `Body te groot: backup-status accepteert hoogstens ${MAX_BODY_BYTES} bytes.`;

/** Reads at most MAX_BODY_BYTES; one byte more is 413, whatever content-length said. */
export async function readCappedBody(request: Request, max = MAX_BODY_BYTES): Promise<Uint8Array> {
  const declared = request.headers.get("content-length");
  if (declared !== null && /^\d+$/.test(declared.trim()) && Number(declared) > max) throw new HttpError(413, TOO_LARGE);
  if (request.body === null) return new Uint8Array(0);
  const reader = request.body.getReader();
  const parts: Uint8Array[] = [];
  let total = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      total += value.byteLength;
      if (total > max) throw new HttpError(413, TOO_LARGE);
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

function bad(message: string): HttpError {
  return new HttpError(400, message);
}

function cut(s: string, max: number): string {
  return s.length > max ? s.slice(0, max - 1) + "…" : s;
}

/**
 * Validates the parsed JSON. Optional fields may be absent or null (a shell script
 * writing `"grootte": ${SIZE:-null}` means "unknown"); unknown fields are ignored.
 */
export function parseBackupReport(value: unknown): BackupReport {
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw bad("Ongeldige body: verwacht een JSON-object met ten minste exitCode.");
  }
  const o = value as Record<string, unknown>;
  if (!("exitCode" in o) || o.exitCode === null || o.exitCode === undefined) throw bad("Veld exitCode ontbreekt (verplicht, geheel getal).");
  if (typeof o.exitCode !== "number" || !Number.isSafeInteger(o.exitCode)) throw bad("Veld exitCode moet een geheel getal zijn.");
  let grootte: number | null = null;
  if (o.grootte !== undefined && o.grootte !== null) {
    if (typeof o.grootte !== "number" || !Number.isSafeInteger(o.grootte) || o.grootte < 0) {
      throw bad("Veld grootte moet een geheel getal ≥ 0 zijn (bytes).");
    }
    grootte = o.grootte;
  }
  const text = (name: "bestandsnaam" | "foutmelding", max: number): string | null => {
    const v = o[name];
    if (v === undefined || v === null) return null;
    if (typeof v !== "string") throw bad(`Veld ${name} moet een tekst (string) zijn.`);
    return cut(v, max);
  };
  return {
    exitCode: o.exitCode,
    bestandsnaam: text("bestandsnaam", MAX_BESTANDSNAAM),
    grootte,
    foutmelding: text("foutmelding", MAX_FOUTMELDING),
  };
}

/** The job's input: the body, read and validated after the auth gate let it through. */
export async function readBackupReport(request: Request): Promise<BackupReport> {
  const bytes = await readCappedBody(request);
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw bad("Ongeldige body: geen geldige UTF-8.");
  }
  if (text.trim() === "") throw bad("Ongeldige body: leeg; verwacht een JSON-object met ten minste exitCode.");
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw bad("Ongeldige body: geen geldige JSON.");
  }
  return parseBackupReport(value);
}

export async function runBackupStatus(deps: Deps, now: Date, report: BackupReport): Promise<JobResult<{ ok: true; gelukt: boolean }>> {
  const gelukt = report.exitCode === 0;
  deps.store.sqlite
    .query(
      `INSERT INTO backup_statuses (ontvangen, exit_code, gelukt, bestandsnaam, grootte, foutmelding, bron)
       VALUES (?, ?, ?, ?, ?, ?, 'host-cron')`,
    )
    .run(now.toISOString(), report.exitCode, gelukt ? 1 : 0, report.bestandsnaam, report.grootte, report.foutmelding);
  if (!gelukt) {
    const melding = report.foutmelding?.trim();
    await deps.alarms.raise({
      type: "backup-failure",
      message: melding ? melding : `De backup is mislukt (exitcode ${report.exitCode}) zonder foutmelding.`,
      context: { exitCode: report.exitCode, bestandsnaam: report.bestandsnaam, grootte: report.grootte, foutmelding: report.foutmelding },
    });
  }
  return { status: 200, body: { ok: true, gelukt } };
}

export const backupStatusJob = defineJob<BackupReport>({
  name: "backup-status",
  summary: "Slaat het resultaat van een host-backup op",
  description:
    "Aangeroepen door de backup-taak van de host na elke run. JSON-body, met of zonder JSON content-type, hoogstens 64 KiB (anders 413). " +
    "400 met de naam van het veld bij ongeldige JSON, een ontbrekende of niet-gehele `exitCode`, of een verkeerd type. " +
    "Optionele velden mogen ontbreken of null zijn; `bestandsnaam` wordt ingekort tot 1024 en `foutmelding` tot 8192 tekens. " +
    "Opgeslagen met ontvangsttijd en bron `host-cron`. exitCode ≠ 0 geeft een alarm (`backup-failure`).",
  input: readBackupReport,
  run: runBackupStatus,
  openapi: {
    requestBody: {
      type: "object",
      required: ["exitCode"],
      properties: {
        exitCode: { type: "integer", description: "0 = gelukt." },
        bestandsnaam: { type: ["string", "null"], maxLength: MAX_BESTANDSNAAM, description: "Naam van het backupbestand." },
        grootte: { type: ["integer", "null"], minimum: 0, description: "Grootte in bytes." },
        foutmelding: { type: ["string", "null"], description: "Foutmelding (mag leeg zijn)." },
      },
      example: { exitCode: 0, bestandsnaam: "nachtwacht-2026-07-23.db.gz", grootte: 183500800, foutmelding: "" },
    },
    responses: {
      200: {
        description: "Opgeslagen.",
        schema: {
          type: "object",
          required: ["ok", "gelukt"],
          properties: { ok: { type: "boolean", const: true }, gelukt: { type: "boolean", description: "exitCode === 0" } },
        },
      },
      400: { description: "Ongeldige body; de melding noemt het veld." },
      413: { description: "Body groter dan 64 KiB." },
    },
  },
});
