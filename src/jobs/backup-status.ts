// backup-status: the host backup job reports each run here. The body is
// read by the job wrapper after auth, at most 64 KiB (a chunked body has no
// content-length to check), and checked against BackupReport, so a 400 names the field.
//
// Long strings are cut, not refused: bestandsnaam to 1024 and foutmelding to 8192
// characters. A failed backup must be recorded and alarmed even when its error text is
// long; a 400 would lose exactly the report that matters.
import { t, type Static } from "elysia";
import { backupStatuses } from "../../db/schema.ts";
import { ALARM_CONDITIONS } from "../alarms/alarm.ts";
import { scrubSecrets } from "../alarms/sentry.ts";
import { secretValues } from "../config.ts";
import type { Deps } from "../deps.ts";
import { recordBackupStatusPg, withBackupWitnessLockPg } from "../pg/status.ts";
import { writeTransaction } from "../db.ts";
import { storableText } from "../format.ts";
import { backupWitnessFile, rowSealOf, witnessMoment } from "../row-seal.ts";
import { alarmWitnessNotWritten } from "./witness-alarm.ts";
import { defineJob, type JobResult } from "./job.ts";
import { integer, nullable } from "./schema.ts";

export const MAX_BODY_BYTES = 64 * 1024;
export const MAX_BESTANDSNAAM = 1024;
export const MAX_FOUTMELDING = 8192;

/**
 * The report. Optional fields may be absent or null (a shell script writing
 * `"grootte": ${SIZE:-null}` means "unknown"); unknown fields are ignored. The texts
 * have no maximum length here: longer ones are cut by the job, not refused.
 */
export const BackupReport = t.Object(
  {
    // A 32-bit integer, as both stores keep it (PostgreSQL's integer): a shell's $? is 0-255.
    exitCode: integer({ minimum: -2147483648, maximum: 2147483647, description: "0 = gelukt." }),
    bestandsnaam: t.Optional(nullable(t.String(), { description: `Naam van het backupbestand; langer dan ${MAX_BESTANDSNAAM} tekens wordt ingekort.` })),
    grootte: t.Optional(nullable(integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER }), { description: "Grootte in bytes." })),
    foutmelding: t.Optional(nullable(t.String(), { description: `Foutmelding (mag leeg zijn); langer dan ${MAX_FOUTMELDING} tekens wordt ingekort.` })),
  },
  { example: { exitCode: 0, bestandsnaam: "nachtwacht-2026-07-23.db.gz", grootte: 183500800, foutmelding: "" } },
);
export type BackupReport = Static<typeof BackupReport>;

export const BackupStatusBody = t.Object({
  ok: t.Literal(true),
  gelukt: t.Boolean({ description: "exitCode === 0" }),
});
export type BackupStatusBody = Static<typeof BackupStatusBody>;

/**
 * A text of the report as stored: without the service's secrets (a backup tool's stderr
 * may echo a connection string or an environment; the text goes on to the daily report,
 * its e-mail and backup-controle's answers, which the crontab's wrapper logs), at most
 * `max` characters, as the stores keep it (storableText: a NUL, which PostgreSQL's text
 * cannot hold, or half a character becomes U+FFFD; the report's seal is over this), as
 * these fields are shortened rather than refused.
 */
function cut(s: string | null | undefined, max: number, secrets: readonly string[]): string | null {
  if (s === undefined || s === null) return null;
  return storableText(scrubSecrets(s, secrets), max);
}

/**
 * Records a stored report's time in the witness file (witnessMoment: never moved back).
 * Reports run side by side (the job is not exclusive), here and in another instance
 * that shares the anchor file's folder: the file's read and write happen under the
 * database's write lock (SQLite; on PostgreSQL an advisory lock), so another process's
 * older time cannot overwrite a newer one read before it was written. In this process
 * the read and write are synchronous and cannot interleave anyway.
 */
async function witnessReport(deps: Deps, at: string): Promise<void> {
  const write = () => witnessMoment(backupWitnessFile(deps.config), at);
  const { store } = deps;
  if (store.kind === "pg") await withBackupWitnessLockPg(store.db, write);
  else await writeTransaction(store.sqlite, write);
}

export async function runBackupStatus(deps: Deps, now: Date, input: BackupReport): Promise<JobResult<BackupStatusBody>> {
  const secrets = secretValues(deps.config);
  const report = {
    exitCode: input.exitCode,
    bestandsnaam: cut(input.bestandsnaam, MAX_BESTANDSNAAM, secrets),
    grootte: input.grootte ?? null,
    foutmelding: cut(input.foutmelding, MAX_FOUTMELDING, secrets),
  };
  const gelukt = report.exitCode === 0;
  const received = { ontvangen: now.toISOString(), ...report, gelukt, bron: "host-cron" };
  // Sealed as stored: only a sealed report counts for backup-controle (src/row-seal.ts).
  const row = { ...received, zegel: rowSealOf(deps.config).sealBackup(received) };
  const { store } = deps;
  if (store.kind === "pg") await recordBackupStatusPg(store.db, row);
  else store.db.insert(backupStatuses).values(row).run();
  // Out of a database writer's reach: backup-controle notices when this report is gone.
  // The report is stored either way; a file that cannot be written is an alarm, not a 500
  // (which would make the backup script send the stored report again).
  try {
    await witnessReport(deps, row.ontvangen);
  } catch (e) {
    await alarmWitnessNotWritten(
      deps,
      backupWitnessFile(deps.config),
      e,
      "backup-controle merkt niet op wanneer deze melding uit de database verdwijnt (verwijderd, of een oudere database teruggezet), tot een volgende melding het bestand schrijft.",
      "could not record the newest backup report beside the anchor file; backup-controle cannot notice it if it is deleted",
    );
  }
  if (!gelukt) {
    const melding = report.foutmelding?.trim();
    await deps.alarms.raise({
      type: "backup-failure",
      message: melding ? melding : `De backup is mislukt (exitcode ${report.exitCode}) zonder foutmelding.`,
      context: { exitCode: report.exitCode, bestandsnaam: report.bestandsnaam, grootte: report.grootte, foutmelding: report.foutmelding },
      // backup-controle's "mislukt" about this report is the same condition: mailed once.
      condition: ALARM_CONDITIONS.backup("mislukt", row.ontvangen),
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
    "Opgeslagen met ontvangsttijd en bron `host-cron`, verzegeld met de ankersleutel. exitCode ≠ 0 geeft een alarm (`backup-failure`). " +
    "Elke melding wordt opgeslagen, ook als er tegelijk een andere binnenkomt (twee hosts die op hetzelfde moment een back-up maken): geen 409 omdat de taak al loopt.",
  input: { schema: BackupReport, maxBytes: MAX_BODY_BYTES },
  // Every call is a report of its own, stored as a row of its own: refusing one while
  // another is handled (a failure report waits for its alarm mail) would lose it.
  exclusive: false,
  run: (deps, now, input) => runBackupStatus(deps, now, input),
  responses: {
    200: { description: "Opgeslagen.", schema: BackupStatusBody },
  },
});
