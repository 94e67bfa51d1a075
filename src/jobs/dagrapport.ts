// dagrapport (contract §3): the daily operational report, mailed to DAGRAPPORT_EMAIL
// (else SUPPORT_EMAIL) and always returned whole in the response. No recipient: not
// sent, `verzonden` false. A failed send: 502 with the report and a mail-failure alarm.
import { DailyReport } from "../../emails/DailyReport.tsx";
import type { Deps } from "../deps.ts";
import { renderEmail } from "../mail/render.ts";
import { buildDailyReport, dailySubject, type DailyReport as DailyReportData } from "../reports/daily.ts";
import { defineJob, type JobResult } from "./job.ts";

export type DagrapportResult = {
  ok: boolean;
  verzonden: boolean;
  ontvanger?: string;
  bezorging: "smtp" | "outbox";
  error?: string;
} & DailyReportData;

export async function runDagrapport(deps: Deps, now: Date): Promise<JobResult<DagrapportResult>> {
  const report = buildDailyReport(deps.store, deps.config, now);
  const bezorging = deps.mailer.bezorging;
  const ontvanger = deps.config.dagrapportEmail;
  if (ontvanger === null) {
    return { status: 200, body: { ok: true, verzonden: false, bezorging, ...report } };
  }
  const { html, text } = await renderEmail(DailyReport, report);
  try {
    await deps.mailer.send({ to: ontvanger, subject: dailySubject(report, now), html, text });
  } catch (e) {
    const reason = e instanceof Error ? e.message : String(e);
    await deps.alarms.raise({
      type: "mail-failure",
      message: `Het dagrapport kon niet worden verstuurd naar ${ontvanger}.`,
      context: { ontvanger, bezorging, fout: reason },
    });
    return {
      status: 502,
      body: {
        ok: false,
        verzonden: false,
        ontvanger,
        bezorging,
        ...report,
        error: `Het dagrapport kon niet worden verstuurd naar ${ontvanger}: ${reason}`,
      },
    };
  }
  return { status: 200, body: { ok: true, verzonden: true, ontvanger, bezorging, ...report } };
}

const backupSchema = {
  type: "object",
  required: ["resultaat", "gelukt", "datum", "grootte", "bron"],
  properties: {
    resultaat: { type: "string", enum: ["OK", "FOUT"] },
    gelukt: { type: "boolean" },
    datum: { type: "string", example: "23/07/2026 14:00", description: "dd/mm/yyyy hh:mm in RAPPORT_TIJDZONE; '-' zonder back-up." },
    grootte: { type: "string", example: "23.4 MB", description: "1024-gebaseerd; '-' zonder back-up of grootte." },
    bron: { type: "string", example: "host-cron", description: "'-' zonder back-up." },
  },
};

const reportSchema = {
  type: "object",
  required: ["ok", "verzonden", "bezorging", "gemaakt", "tijdzone", "status", "backup", "backupDetail", "inlogpogingen", "verificatie", "anker", "taken", "database"],
  properties: {
    ok: { type: "boolean" },
    verzonden: { type: "boolean", description: "false zonder ontvanger (DAGRAPPORT_EMAIL en SUPPORT_EMAIL leeg) of als versturen mislukte." },
    ontvanger: { type: "string", description: "Alleen als er een ontvanger is ingesteld." },
    bezorging: { type: "string", enum: ["smtp", "outbox"] },
    error: { type: "string", description: "Alleen bij 502." },
    gemaakt: { type: "string", example: "23/07/2026 08:00" },
    tijdzone: { type: "string", example: "Europe/Amsterdam" },
    status: {
      type: "object",
      properties: { niveau: { type: "string", enum: ["ok", "let-op", "actie"] }, kop: { type: "string" }, punten: { type: "array", items: { type: "string" } } },
    },
    backup: backupSchema,
    backupDetail: {
      type: "object",
      properties: {
        ontvangen: { type: ["string", "null"] },
        exitCode: { type: ["integer", "null"] },
        bestandsnaam: { type: ["string", "null"] },
        foutmelding: { type: ["string", "null"] },
        ouderdomUren: { type: ["integer", "null"] },
        maxUren: { type: "integer" },
        teOud: { type: "boolean" },
      },
    },
    inlogpogingen: {
      type: "object",
      description: "Laatste 24 uur, alle tenants.",
      properties: {
        van: { type: "string" },
        tot: { type: "string" },
        totaal: { type: "integer" },
        gelukt: { type: "integer" },
        mislukt: { type: "integer" },
        mislukteIps: { type: "integer" },
        topMislukteIps: { type: "array", items: { type: "object", properties: { ip: { type: "string" }, aantal: { type: "integer" } } } },
      },
    },
    verificatie: {
      type: "object",
      properties: {
        tijdstip: { type: "string" },
        gecontroleerd: { type: "integer" },
        nietGecontroleerd: { type: "integer" },
        aantalGebroken: { type: "integer" },
        gebroken: { type: "array", items: { type: "object" } },
      },
    },
    anker: {
      type: "object",
      description:
        "Wat de beheerder buiten de server bewaart: het nieuwste installatie-checkpoint, waartegen `nachtwacht verify --checkpoint <bestand>` " +
        "de database en het ankerbestand controleert, en de openbare sleutel die de handtekening controleert.",
      required: ["installatieCheckpoint", "verificatieSleutel"],
      properties: {
        installatieCheckpoint: {
          type: ["string", "null"],
          description: "Het ondertekende installatie-checkpoint van audit-anker, letterlijk (signed note, eindigt op een regeleinde); null zolang audit-anker er geen heeft ondertekend.",
          example:
            "nachtwacht.zuiderhaven.nl/audit/installatie\n1873\nDuL77MTej25munc5vNg7hiNzed0ORLwlOAxlf0NsOOs=\n\n" +
            "\u2014 nachtwacht.zuiderhaven.nl/audit hOAEN0JqlqjgBqHBYakQZE/iT5U6OPhvfoIXO0kTScPFh/FR2afkjF1QAjvN5oZpO334lWo8owF1wQEUpzMW99VmCwY=\n",
        },
        verificatieSleutel: {
          type: "string",
          description: "De openbare verificatiesleutel (<naam>+<id>+<sleutel>), nooit de ondertekeningssleutel.",
          example: "nachtwacht.zuiderhaven.nl/audit+84e00437+AfPPJGLHWCXskLnJfYcHKOkkktoe1IRUgcS+39nOPJ/U",
        },
      },
    },
    taken: {
      type: "array",
      items: {
        type: "object",
        properties: {
          job: { type: "string" },
          cron: { type: "string" },
          uitkomst: { type: "string", enum: ["ok", "afwijking", "fout", "bezig", "nooit"] },
          laatsteStart: { type: "string" },
          laatsteEinde: { type: "string" },
          laatstVerwacht: { type: "string" },
          volgende: { type: "string" },
          achterstallig: { type: "boolean" },
        },
      },
    },
    database: { type: "object", properties: { bytes: { type: "integer" }, grootte: { type: "string" }, walBytes: { type: "integer" } } },
  },
};

export const dagrapportJob = defineJob({
  name: "dagrapport",
  summary: "Dagrapport maken en mailen",
  description:
    "Maakt het dagelijkse rapport (back-up, inlogpogingen van de laatste 24 uur, laatste verificatie van de auditketens, " +
    "het nieuwste installatie-checkpoint met de openbare verificatiesleutel, geplande taken, databasegrootte) en mailt het " +
    "naar DAGRAPPORT_EMAIL, anders SUPPORT_EMAIL. Zonder ontvanger wordt " +
    "niets verstuurd (`verzonden: false`); het antwoord bevat altijd het hele rapport.",
  run: (deps, now) => runDagrapport(deps, now),
  openapi: {
    responses: {
      200: { description: "Rapport gemaakt (en verstuurd als er een ontvanger is).", schema: reportSchema },
      409: { description: "De taak loopt al." },
      502: { description: "Versturen mislukt: `ok` en `verzonden` false, het rapport en `error`.", schema: reportSchema },
    },
  },
});
