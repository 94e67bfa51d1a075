// backup-controle (contract §4): the watchdog of the host backup. backup-status only
// hears from a backup job that still runs; one that silently stopped calling is the
// failure nobody sees, so this job checks the newest status on its own schedule.
import type { Deps } from "../deps.ts";
import { defineJob, type JobResult } from "./job.ts";

export interface NewestBackup {
  ontvangen: string;
  exitCode: number;
  gelukt: boolean;
  bestandsnaam: string | null;
  grootte: number | null;
  foutmelding: string | null;
  bron: string;
}

export type BackupReden = "geen-backup" | "mislukt" | "te-oud";

export interface BackupControleBody {
  ok: boolean;
  reden?: BackupReden;
  laatsteBackup: NewestBackup | null;
  /** Age of the newest status in hours, one decimal; null when there is none. */
  leeftijdUren: number | null;
  maxUren: number;
}

/**
 * The one rule for "too old", used here and by the daily report: a backup must be
 * younger than BACKUP_MAX_UREN, so one exactly that old is already overdue. Compared on
 * the exact age in milliseconds, not the rounded hours shown.
 */
export function backupOverdue(ageMs: number, maxUren: number): boolean {
  return ageMs >= maxUren * 3_600_000;
}

export async function runBackupControle(deps: Deps, now: Date): Promise<JobResult<BackupControleBody>> {
  const maxUren = deps.config.backupMaxUren;
  const row = deps.store.sqlite
    .query(
      `SELECT ontvangen, exit_code AS exitCode, gelukt, bestandsnaam, grootte, foutmelding, bron
       FROM backup_statuses ORDER BY ontvangen DESC, id DESC LIMIT 1`,
    )
    .get() as (Omit<NewestBackup, "gelukt"> & { gelukt: number }) | null;

  const laatsteBackup: NewestBackup | null = row ? { ...row, gelukt: row.gelukt === 1 } : null;
  const ageMs = laatsteBackup ? now.getTime() - new Date(laatsteBackup.ontvangen).getTime() : null;
  const leeftijdUren = ageMs === null ? null : Math.round(ageMs / 360_000) / 10;

  let reden: BackupReden | undefined;
  if (!laatsteBackup) reden = "geen-backup";
  else if (!laatsteBackup.gelukt) reden = "mislukt";
  else if (backupOverdue(ageMs!, maxUren)) reden = "te-oud";

  if (!reden) return { status: 200, body: { ok: true, laatsteBackup, leeftijdUren, maxUren } };

  const body: BackupControleBody = { ok: false, reden, laatsteBackup, leeftijdUren, maxUren };
  const message =
    reden === "geen-backup"
      ? "Er is nog nooit een backup gemeld: controleer of de backup-taak op de host draait en backup-status aanroept."
      : reden === "mislukt"
        ? `De laatste backup (${laatsteBackup!.ontvangen}) is mislukt met exitcode ${laatsteBackup!.exitCode}.`
        : `De laatste geslaagde backup is ${leeftijdUren} uur oud (maximaal ${maxUren} uur): de backup-taak meldt zich niet meer.`;
  await deps.alarms.raise({
    type: "backup-missing",
    message,
    context: {
      reden,
      leeftijdUren,
      maxUren,
      ontvangen: laatsteBackup?.ontvangen ?? null,
      exitCode: laatsteBackup?.exitCode ?? null,
      bestandsnaam: laatsteBackup?.bestandsnaam ?? null,
      foutmelding: laatsteBackup?.foutmelding ?? null,
    },
  });
  return { status: 409, body };
}

const newestSchema = {
  type: ["object", "null"],
  properties: {
    ontvangen: { type: "string", format: "date-time" },
    exitCode: { type: "integer" },
    gelukt: { type: "boolean" },
    bestandsnaam: { type: ["string", "null"] },
    grootte: { type: ["integer", "null"] },
    foutmelding: { type: ["string", "null"] },
    bron: { type: "string" },
  },
};

const bodySchema = (withReason: boolean) => ({
  type: "object",
  required: ["ok", "laatsteBackup", "leeftijdUren", "maxUren", ...(withReason ? ["reden"] : [])],
  properties: {
    ok: { type: "boolean" },
    ...(withReason ? { reden: { type: "string", enum: ["geen-backup", "mislukt", "te-oud"] } } : {}),
    laatsteBackup: newestSchema,
    leeftijdUren: { type: ["number", "null"], description: "Leeftijd van de nieuwste status in uren, één decimaal." },
    maxUren: { type: "integer" },
  },
});

export const backupControleJob = defineJob({
  name: "backup-controle",
  summary: "Controleert of de nieuwste backup geslaagd en recent is",
  description:
    "200 wanneer de nieuwste BackupStatus geslaagd is en jonger dan BACKUP_MAX_UREN. Anders 409 met `reden` " +
    "(`geen-backup`, `mislukt`, `te-oud`), de nieuwste status en haar leeftijd in uren, en een alarm (`type` = `backup-missing`).",
  run: (deps, now) => runBackupControle(deps, now),
  openapi: {
    responses: {
      200: { description: "De nieuwste backup is geslaagd en recent.", schema: bodySchema(false) },
      409: { description: "Geen backup, de nieuwste is mislukt of te oud; alarm verstuurd.", schema: bodySchema(true) },
    },
  },
});
