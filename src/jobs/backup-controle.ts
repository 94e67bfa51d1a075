// backup-controle: the watchdog of the host backup. backup-status only
// hears from a backup job that still runs; one that silently stopped calling is the
// failure nobody sees, so this job checks the newest status on its own schedule.
import { desc, gt, lte, type AnyColumn } from "drizzle-orm";
import { t, type Static } from "elysia";
import { backupStatuses } from "../../db/schema.ts";
import type { Db } from "../db.ts";
import { ALARM_CONDITIONS } from "../alarms/alarm.ts";
import type { Deps } from "../deps.ts";
import { backupUitkomst } from "../format.ts";
import { latestCountingStart } from "../time.ts";
import { newestBackupPg } from "../pg/status.ts";
import { backupWitnessFile, NEWEST_ROWS, newestSealedBackup, rowSealOf, sealedBackupColumns, witnessedMoment, type RowSeal, type SealedBackup } from "../row-seal.ts";
import { defineJob, type JobResult } from "./job.ts";
import { dateTime, integer, nullable, enumOf } from "./schema.ts";

export const NewestBackup = t.Object(
  {
    ontvangen: dateTime(),
    exitCode: integer(),
    gelukt: t.Boolean(),
    bestandsnaam: nullable(t.String()),
    grootte: nullable(integer({ minimum: 0 })),
    foutmelding: nullable(t.String()),
    bron: t.String(),
  },
  { description: "De nieuwste status die backup-status ontving en verzegelde (ondertekend met de ankersleutel)." },
);
export type NewestBackup = Static<typeof NewestBackup>;

const state = {
  laatsteBackup: nullable(NewestBackup),
  leeftijdUren: nullable(t.Number(), { description: "Leeftijd van de nieuwste status in uren, één decimaal; null zonder status." }),
  maxUren: integer(),
  ontbreekt: nullable(dateTime(), {
    description:
      "Ontvangsttijd van een nieuwere melding die deze instantie opsloeg maar die niet (verzegeld) in de database staat: verwijderd of vervangen door iemand die de database kan wijzigen, of een oudere database teruggezet. Niet null is een afwijking (alarm `db-integrity`).",
  }),
  vervalst: integer({
    minimum: 0,
    description:
      "Rijen in backup_statuses, nieuwer dan `laatsteBackup`, zonder geldig zegel: niet door nachtwacht geschreven maar door iemand die de database kan wijzigen. Ze tellen niet; meer dan 0 is een afwijking (alarm `db-integrity`).",
  }),
  toekomst: nullable(dateTime(), {
    description:
      "Ontvangsttijd van de nieuwste verzegelde melding die meer dan 5 minuten na nu geregistreerd staat: opgeslagen terwijl de klok van de server voorliep. Ze telt niet (anders zou ze elke latere melding verbergen tot de echte tijd haar inhaalt). Niet null is een afwijking (alarm `backup-missing`).",
  }),
};

/** 200: the newest sealed backup succeeded and is recent, and no newer row is unsealed. */
export const BackupControleOk = t.Object({ ok: t.Literal(true), ...state, ontbreekt: t.Null(), vervalst: t.Literal(0), toekomst: t.Null() });

/** 409: none, the newest failed, it is too old, a newer one is dated in the future ('toekomst'), or newer rows are forged ('vervalst' when that is all). */
export const BackupControleAfwijking = t.Object({ ok: t.Literal(false), reden: enumOf(["geen-backup", "mislukt", "te-oud", "toekomst", "vervalst", "ontbreekt"]), ...state });

export type BackupReden = Static<typeof BackupControleAfwijking>["reden"];
export type BackupControleBody = Static<typeof BackupControleOk> | Static<typeof BackupControleAfwijking>;

/**
 * The one rule for "too old", used here and by the daily report: a backup must be
 * younger than BACKUP_MAX_UREN, so one exactly that old is already overdue. Compared on
 * the exact age in milliseconds, not the rounded hours shown.
 */
export function backupOverdue(ageMs: number, maxUren: number): boolean {
  return ageMs >= maxUren * 3_600_000;
}

/**
 * The reports whose arrival counts at `now`, of either dialect's backup_statuses: received
 * by latestCountingStart(now), the margin job runs have (FUTURE_START_MARGIN_MS); `future`:
 * those dated later, stored while the host clock ran ahead.
 */
export const receivedBy = (t: { ontvangen: AnyColumn }, now: Date, future = false) =>
  future ? gt(t.ontvangen, latestCountingStart(now)) : lte(t.ontvangen, latestCountingStart(now));

/** The newest sealed status backup-status received that counts at `now`, read here, by the daily report and /metrics (newestBackupPg on PostgreSQL): by arrival, then id. */
export function newestBackup(db: Db, seal: RowSeal, now: Date): SealedBackup<NewestBackup> {
  const b = backupStatuses;
  const rows = (future: boolean) => db.select(sealedBackupColumns(b)).from(b).where(receivedBy(b, now, future)).orderBy(desc(b.ontvangen), desc(b.id)).limit(NEWEST_ROWS).all();
  return newestSealedBackup(rows(false), rows(true), seal);
}

/** The conditions (Alarm.condition) of backup-controle's db-integrity alarms. */
const ONTBREEKT = "backup-controle:ontbreekt";
const VERVALST = "backup-controle:vervalst";

export async function runBackupControle(deps: Deps, now: Date): Promise<JobResult<BackupControleBody>> {
  const maxUren = deps.config.backupMaxUren;
  const { store } = deps;
  const seal = rowSealOf(deps.config);
  const { backup: newest, vervalst, future } = store.kind === "pg" ? await newestBackupPg(store.db, seal, now) : newestBackup(store.db, seal, now);
  // No message is null, an empty one included: as the daily report's backupDetail shows it.
  const laatsteBackup = newest && { ...newest, foutmelding: newest.foutmelding || null };
  const toekomst = future?.ontvangen ?? null;
  const ageMs = laatsteBackup ? now.getTime() - new Date(laatsteBackup.ontvangen).getTime() : null;
  const leeftijdUren = ageMs === null ? null : Math.round(ageMs / 360_000) / 10;

  let reden: BackupReden | undefined;
  if (!laatsteBackup) reden = toekomst ? "toekomst" : "geen-backup";
  else if (!laatsteBackup.gelukt) reden = "mislukt";
  else if (backupOverdue(ageMs!, maxUren)) reden = "te-oud";
  else if (toekomst) reden = "toekomst";

  // A newer report this process stored that the database no longer holds (sealed). One
  // witnessed beyond latestCountingStart(now) was stored with the clock ahead: it does not
  // count, as its row does not (and backup-status writes the next report's over it).
  const witnessed = witnessedMoment(backupWitnessFile(deps.config));
  const ontbreekt =
    witnessed !== null && witnessed <= latestCountingStart(now) && (laatsteBackup === null || laatsteBackup.ontvangen < witnessed) ? witnessed : null;

  // What this run finds gone is settled, so that the mail channel mails its return at once.
  if (ontbreekt === null) await deps.alarms.settled?.(ONTBREEKT);
  if (vervalst === 0) await deps.alarms.settled?.(VERVALST);
  if (!reden) await deps.alarms.settled?.(ALARM_CONDITIONS.backupAbout);

  if (!reden && vervalst === 0 && ontbreekt === null) return { status: 200, body: { ok: true, laatsteBackup, leeftijdUren, maxUren, ontbreekt: null, vervalst: 0, toekomst: null } };

  if (ontbreekt !== null) {
    await deps.alarms.raise({
      type: "db-integrity",
      message:
        `De backupmelding die om ${ontbreekt} binnenkwam staat niet meer (verzegeld) in backup_statuses: iemand die de database kan wijzigen heeft haar verwijderd of veranderd, ` +
        `of er is een oudere database teruggezet. De nieuwste melding die er nog staat is van ${laatsteBackup?.ontvangen ?? "geen enkele"}. Controleer de backups op de host zelf.`,
      context: { ontbreekt, ontvangen: laatsteBackup?.ontvangen ?? null },
      condition: { about: ONTBREEKT, state: `${ontbreekt} ${laatsteBackup?.ontvangen ?? "-"}` },
    });
  }
  if (vervalst > 0) {
    await deps.alarms.raise({
      type: "db-integrity",
      message:
        `backup_statuses bevat ${vervalst} ${vervalst === 1 ? "melding" : "meldingen"} zonder geldig zegel, nieuwer dan de laatste echte: iemand die de database kan wijzigen heeft ze geschreven of veranderd, ` +
        `niet nachtwacht. Ze tellen niet. Zoek uit wie schrijftoegang tot de database heeft, en controleer de backups op de host zelf.`,
      context: { vervalst, ontvangen: laatsteBackup?.ontvangen ?? null },
      condition: { about: VERVALST, state: `${vervalst} ${laatsteBackup?.ontvangen ?? "-"}` },
    });
  }
  if (!reden) return { status: 409, body: { ok: false, reden: ontbreekt !== null ? "ontbreekt" : "vervalst", laatsteBackup, leeftijdUren, maxUren, ontbreekt, vervalst, toekomst } };

  const body: BackupControleBody = { ok: false, reden, laatsteBackup, leeftijdUren, maxUren, ontbreekt, vervalst, toekomst };
  const clock = future
    ? ` Een nieuwere melding (ontvangen ${future.ontvangen}, ${backupUitkomst(future)}) staat in de toekomst geregistreerd: de klok van de server liep voor toen ze binnenkwam. ` +
      `Zo'n melding telt niet. Controleer de tijdsynchronisatie (NTP) van de server; docs/operations.md zegt hoe de melding weg kan.`
    : "";
  const message =
    (reden === "geen-backup"
      ? "Er is nog nooit een backup gemeld: controleer of de backup-taak op de host draait en backup-status aanroept."
      : reden === "mislukt"
        ? `De laatste backup (${laatsteBackup!.ontvangen}) is mislukt met exitcode ${laatsteBackup!.exitCode}.`
        : reden === "te-oud"
          ? `De laatste geslaagde backup is ${leeftijdUren} uur oud (maximaal ${maxUren} uur): de backup-taak meldt zich niet meer.`
          : laatsteBackup
            ? `De laatste backupmelding die telt (${laatsteBackup.ontvangen}) is geslaagd en recent.`
            : "Er is geen backupmelding die telt.") + clock;
  await deps.alarms.raise({
    type: "backup-missing",
    message,
    context: {
      reden,
      toekomst,
      ...(future ? { toekomstGelukt: future.gelukt, toekomstExitCode: future.exitCode, toekomstFoutmelding: future.foutmelding || null } : {}),
      leeftijdUren,
      maxUren,
      ontvangen: laatsteBackup?.ontvangen ?? null,
      exitCode: laatsteBackup?.exitCode ?? null,
      bestandsnaam: laatsteBackup?.bestandsnaam ?? null,
      foutmelding: laatsteBackup?.foutmelding ?? null,
    },
    // Raised every hour while it lasts; mailed when it starts or changes, then once a day.
    condition: ALARM_CONDITIONS.backup(reden, laatsteBackup?.ontvangen ?? null, toekomst),
  });
  return { status: 409, body };
}

export const backupControleJob = defineJob({
  name: "backup-controle",
  summary: "Controleert of de nieuwste backup geslaagd en recent is",
  description:
    "200 wanneer de nieuwste verzegelde BackupStatus geslaagd is en jonger dan BACKUP_MAX_UREN. Anders 409 met `reden` " +
    "(`geen-backup`, `mislukt`, `te-oud`), de nieuwste status en haar leeftijd in uren, en een alarm (`type` = `backup-missing`). " +
    "Een melding die meer dan 5 minuten na nu geregistreerd staat (de klok van de server liep voor) telt niet; ze staat in `toekomst` " +
    "(409, alarm `backup-missing`; `reden` `toekomst` wanneer de backup die wel telt in orde is, of er geen andere is). " +
    "Alleen meldingen met een geldig zegel (ondertekend met de ankersleutel bij ontvangst) tellen; nieuwere rijen zonder geldig zegel staan als aantal in `vervalst` " +
    "(409, alarm `db-integrity`; `reden` `vervalst` wanneer de backup zelf in orde is). Een nieuwere melding die deze instantie opsloeg en die niet meer in de database staat, " +
    "staat in `ontbreekt` (409, alarm `db-integrity`; `reden` `ontbreekt` wanneer de backup verder in orde is).",
  run: (deps, now) => runBackupControle(deps, now),
  responses: {
    200: { description: "De nieuwste backup is geslaagd en recent.", schema: BackupControleOk },
    409: { description: "Geen backup, de nieuwste is mislukt of te oud, een nieuwere staat in de toekomst, of er zijn vervalste meldingen; alarm verstuurd.", schema: BackupControleAfwijking },
  },
});
