// dagrapport: the daily operational report, mailed to DAGRAPPORT_EMAIL
// (else SUPPORT_EMAIL) and always returned whole in the response. No recipient: not
// sent, `verzonden` false. A send that certainly failed (surelyNotDelivered): 502 with
// the report and a mail-failure alarm; the run is a fout, so the next scheduled call for
// the same time sends it. A send whose outcome is unknown (the whole message went out,
// then the connection dropped or the answer never came): 409, an afwijking, done for that
// time, so the report is not sent a second time; the alarm says it may have arrived. A run
// killed while its report went out left a send mark (src/reports/daily-send-mark.ts): the
// next run for the same scheduled time answers that 409 instead of sending a second copy.
import { t, type Static } from "elysia";
import { DailyReport } from "../../emails/DailyReport.tsx";
import type { Alarm } from "../alarms/alarm.ts";
import type { Deps } from "../deps.ts";
import { surelyNotDelivered } from "../mail/mailer.ts";
import { renderEmail } from "../mail/render.ts";
import { buildDailyReportPg } from "../pg/daily.ts";
import { WATCHED_FILES } from "../disk-space.ts";
import { buildDailyReport, dailySubject, type DailyReport as DailyReportData } from "../reports/daily.ts";
import { takeSendMark, type MarkedRun } from "../reports/daily-send-mark.ts";
import { rowSealOf } from "../row-seal.ts";
import { latestCountingStart } from "../time.ts";
import { JOB_STATUSES, lastFireOf } from "../schedule-due.ts";
import { defineJob, type JobContext, type JobResult } from "./job.ts";
import { dateTime, integer, nullable, enumOf } from "./schema.ts";

const datum = (description: string, example = "23/07/2026 14:00") =>
  t.String({ example, description: `${description} dd/mm/yyyy hh:mm in RAPPORT_TIJDZONE.` });
const count = (description?: string) => integer({ minimum: 0, ...(description ? { description } : {}) });

/** The report itself: what the e-mail shows (DailyReportProps in emails/DailyReport.tsx, built by src/reports/daily.ts). */
export const DailyReportBody = t.Object({
  gemaakt: datum("Wanneer het rapport is gemaakt,", "23/07/2026 08:00"),
  tijdzone: t.String({ example: "Europe/Amsterdam" }),
  status: t.Object({
    niveau: enumOf(["ok", "let-op", "actie"]),
    kop: t.String(),
    punten: t.Array(t.String(), { description: "Wat aandacht of actie vraagt, één zin per punt, zoals de mail het toont: tekst van de host (de foutmelding van een back-up) zonder opmaaktekens, een regeleinde of reeks witruimte als één spatie." }),
  }),
  backup: t.Object({
    resultaat: enumOf(["OK", "FOUT"]),
    gelukt: t.Boolean(),
    datum: t.String({ example: "23/07/2026 14:00", description: "dd/mm/yyyy hh:mm in RAPPORT_TIJDZONE; '-' zonder back-up." }),
    grootte: t.String({ example: "23.4 MB", description: "1024-gebaseerd; '-' zonder back-up of grootte." }),
    bron: t.String({ example: "host-cron", description: "'-' zonder back-up." }),
  }),
  backupDetail: t.Object({
    ontvangen: nullable(dateTime(), { description: "Ontvangsttijd van de nieuwste back-upstatus; null zonder back-up." }),
    exitCode: nullable(integer()),
    bestandsnaam: nullable(t.String()),
    foutmelding: nullable(t.String()),
    ouderdomUren: nullable(count("Hele uren sinds de nieuwste back-upstatus.")),
    maxUren: integer({ description: "BACKUP_MAX_UREN." }),
    teOud: t.Boolean({ description: "Ouder dan BACKUP_MAX_UREN." }),
    toekomst: nullable(
      t.Object({
        ontvangen: dateTime(),
        datum: datum("Ontvangsttijd,"),
        gelukt: t.Boolean(),
        exitCode: integer(),
        foutmelding: nullable(t.String()),
      }),
      {
        description:
          "De nieuwste verzegelde back-upstatus die meer dan 5 minuten na nu geregistreerd staat: ontvangen terwijl de klok van de server voorliep. Ze telt niet (zie backup-controle `toekomst`); niet null is een actiepunt in `status`. Null als er geen is.",
      },
    ),
  }),
  inlogpogingen: t.Object(
    {
      van: datum("Begin van het venster,"),
      tot: datum("Einde van het venster,"),
      totaal: count(),
      gelukt: count(),
      mislukt: count(),
      mislukteIps: count("IP-adressen met minstens één mislukte poging."),
      topMislukteIps: t.Array(t.Object({ ip: t.String(), aantal: count() }), { description: "Hoogstens 5, meeste mislukte pogingen voorop." }),
    },
    { description: "Laatste 24 uur, alle tenants." },
  ),
  verificatie: t.Object({
    tijdstip: t.String({ example: "23/07/2026 02:30", description: "Laatste verificatie van een tenant, dd/mm/yyyy hh:mm in RAPPORT_TIJDZONE; '-' als er nog geen was." }),
    gecontroleerd: count("Tenants met een verificatieresultaat."),
    nietGecontroleerd: count("Tenants zonder verificatieresultaat."),
    aantalGebroken: count(),
    gebroken: t.Array(
      t.Object({
        tenantId: integer(),
        tenant: t.String(),
        seq: nullable(integer()),
        reden: nullable(t.String({ description: "De `reden`-code van audit-verificatie." })),
        uitleg: t.String({ description: "De reden in gewone taal." }),
        gecontroleerd: datum("Wanneer deze keten gebroken werd bevonden,"),
      }),
      { description: "Hoogstens 50; `aantalGebroken` telt ze allemaal." },
    ),
  }),
  anker: t.Object(
    {
      installatieCheckpoint: nullable(t.String(), {
        description:
          "Het nieuwste installatie-checkpoint uit het ankerbestand zelf (niet uit de kopie in de database), letterlijk (signed note, eindigt op een regeleinde) en " +
          "gecontroleerd met de vertrouwde sleutels; null zolang audit-anker er geen heeft ondertekend, of als het niet opent (zie `checkpointProbleem`).",
        example:
          "nachtwacht.zuiderhaven.nl/audit/installatie\n1873\nDuL77MTej25munc5vNg7hiNzed0ORLwlOAxlf0NsOOs=\n\n" +
          "\u2014 nachtwacht.zuiderhaven.nl/audit hOAEN0JqlqjgBqHBYakQZE/iT5U6OPhvfoIXO0kTScPFh/FR2afkjF1QAjvN5oZpO334lWo8owF1wQEUpzMW99VmCwY=\n",
      }),
      checkpointProbleem: nullable(t.String(), {
        description:
          "Waarom het installatie-checkpoint niet zonder meer klopt: de nieuwste installatieregel van het ankerbestand opent niet onder een vertrouwde sleutel " +
          "(dan is `installatieCheckpoint` null), of de kopie in de database (audit_anchor_log) wijkt ervan af; ook een punt (actie) in `status`. null als alles klopt.",
        example: null,
      }),
      verificatieSleutel: t.String({
        description: "De openbare verificatiesleutel (<naam>+<id>+<sleutel>), nooit de ondertekeningssleutel.",
        example: "nachtwacht.zuiderhaven.nl/audit+84e00437+AfPPJGLHWCXskLnJfYcHKOkkktoe1IRUgcS+39nOPJ/U",
      }),
      waarschuwingen: t.Array(t.String(), {
        description:
          "Wat de beheerder met de ondertekeningssleutel heeft aanvaard (een geadopteerde keten van een eerdere versie, een bewust teruggezette database), " +
          "één zin per record; staat er elke dag in zolang het record in het ankerbestand staat.",
      }),
    },
    {
      description:
        "Wat de beheerder buiten de server bewaart: het nieuwste installatie-checkpoint, waartegen `nachtwacht verify --checkpoint <bestand>` " +
        "de database en het ankerbestand controleert, en de openbare sleutel die de handtekening controleert.",
    },
  ),
  taken: t.Array(
    t.Object({
      job: t.String(),
      cron: t.String(),
      uitkomst: enumOf(["ok", "afwijking", "fout", "bezig", "nooit"]),
      laatsteStart: t.String({ description: "dd/mm/yyyy hh:mm in RAPPORT_TIJDZONE; '-' als de taak nooit liep." }),
      laatsteEinde: t.String({ description: "dd/mm/yyyy hh:mm in RAPPORT_TIJDZONE; '-' zonder einde." }),
      laatsteDuurMs: nullable(count("Hoe lang de laatste run duurde, in milliseconden; null als hij nog loopt, nooit eindigde of de taak nooit liep.")),
      laatsteDuur: t.String({ example: "12.4 s", description: "laatsteDuurMs als tekst (`850 ms`, `12.4 s`, `3 min 05 s`, `2 h 07 min`); '-' zonder." }),
      gebruikelijkeDuurMs: nullable(count("De gebruikelijke duur: de mediaan van de laatste (hoogstens 10) geslaagde runs, in milliseconden; null zonder geslaagde run.")),
      gebruikelijkeDuur: t.String({ example: "11.9 s", description: "gebruikelijkeDuurMs als tekst; '-' zonder." }),
      gebruikelijkOver: count("Over hoeveel geslaagde runs (0–10) die mediaan gaat."),
      laatstVerwacht: t.String({ description: "Het laatste starttijdstip waarvan de marge verstreken is, dd/mm/yyyy hh:mm; '-' als er nog geen was." }),
      volgende: t.String({ description: "Het volgende starttijdstip, dd/mm/yyyy hh:mm; '-' als er geen is." }),
      achterstallig: t.Boolean({ description: "Niet gestart sinds `laatstVerwacht` (`status` is `gemist`)." }),
      status: enumOf(JOB_STATUSES, {
        description:
          "De status zoals taken-controle hem bepaalt (zie daar): ook `onderbroken` (de laatste run eindigde nooit en geen proces voert hem nog uit) " +
          "en `hangt` (een levende run, langer dan de maximale looptijd); beide zijn een punt van `status`.",
      }),
    }),
  ),
  database: t.Object({
    bytes: count("SQLite: pagina's × paginagrootte plus de -wal. PostgreSQL: pg_database_size van de database."),
    grootte: t.String({ example: "23.4 MB" }),
    walBytes: count("SQLite: de grootte van de -wal. PostgreSQL: 0 (de write-ahead log hoort bij de hele server, niet bij één database)."),
    klokAfwijkingSeconden: nullable(t.Number(), {
      description:
        "PostgreSQL: hoeveel seconden de klok van de databaseserver voorloopt op die van deze host (negatief: achterloopt), op één decimaal; " +
        "meer dan 10 s is een punt in `status` (de tijden die deze host vastlegt wijken even veel af; de leases van de taken volgen de klok van de databaseserver). SQLite: null.",
    }),
  }),
  schijf: t.Array(
    t.Object({
      bestanden: t.Array(enumOf([...WATCHED_FILES]), { description: "Wat nachtwacht op dit bestandssysteem bewaart: database (alleen SQLite), ankerbestand, outbox (alleen zonder SMTP_URL)." }),
      map: t.String({ example: "/var/lib/nachtwacht", description: "De map waar gemeten is: de dichtstbijzijnde bestaande map van het eerste bestand." }),
      vrijBytes: count("Vrij voor de gebruiker van de service (statfs f_bavail)."),
      totaalBytes: count(),
      vrij: t.String({ example: "39.0 GB" }),
      totaal: t.String({ example: "97.9 GB" }),
      vrijProcent: t.Number({ minimum: 0, maximum: 100, description: "Het vrije deel in procenten, op één decimaal." }),
      niveau: enumOf(["ok", "let-op", "actie"], { description: "let-op onder SCHIJF_MIN_VRIJ_PROCENT, actie onder de helft daarvan (ook een punt in `status`)." }),
    }),
    { description: "Elk bestandssysteem van deze host waarop nachtwacht schrijft, één keer." },
  ),
  tenants: t.Object(
    {
      aantal: count("Het aantal tenants."),
      max: integer({ minimum: 1, description: "TENANTS_MAX." }),
      niveau: enumOf(["ok", "let-op", "actie"], {
        description: "actie vanaf TENANTS_MAX (nieuwe tenants worden geweigerd, 422), let-op vanaf 90 % ervan; beide ook een punt in `status`.",
      }),
    },
    { description: "De tenants tegenover TENANTS_MAX: zo weet de beheerder van een nieuwe tenant die geweigerd wordt." },
  ),
  laatUitgesteld: t.Object(
    {
      runs: count("Runs van beveiligingslog-analyse op rij die de te laat ontvangen inlogpogingen uitstelden (`laat.uitgesteld`); 0 zodra een run ze beoordeelde, op SQLite altijd 0."),
      sinds: nullable(datum("De eerste van die runs,"), { description: "null als de laatste run ze beoordeelde." }),
      niveau: enumOf(["ok", "let-op"], { description: "let-op als ze langer dan een uur zijn uitgesteld; dan ook een punt in `status`." }),
    },
    {
      description:
        "PostgreSQL: zolang een partij inlogpogingen wordt opgeslagen, stelt beveiligingslog-analyse het beoordelen van te laat ontvangen pogingen uit. " +
        "Gebeurt dat run na run (een sessie die de vergrendeling vasthoudt), dan worden late brute-force-pogingen niet beoordeeld.",
    },
  ),
});

// The wire body and the e-mail's props are one shape: a change to either that the other
// lacks is a compile error here.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
true satisfies Same<Static<typeof DailyReportBody>, DailyReportData>;

const bezorging = enumOf(["smtp", "outbox"], { description: "outbox: SMTP_URL ontbreekt, het bericht staat als .eml in de outbox-map." });

/** 200: made, and sent when there is a recipient. */
export const DagrapportVerstuurd = t.Object({
  ok: t.Literal(true),
  verzonden: t.Boolean({ description: "false zonder ontvanger (DAGRAPPORT_EMAIL en SUPPORT_EMAIL leeg)." }),
  ontvanger: t.Optional(t.String({ description: "Alleen als er een ontvanger is ingesteld." })),
  bezorging,
  ...DailyReportBody.properties,
});

/** 502: the send failed; the report is still in the answer. */
export const DagrapportNietVerstuurd = t.Object({
  ok: t.Literal(false),
  verzonden: t.Literal(false),
  ontvanger: t.String(),
  bezorging,
  error: t.String({ description: "Waarom het versturen mislukte." }),
  ...DailyReportBody.properties,
});

/** 409: the whole message went out, but whether the server took it is unknown; not sent again. */
export const DagrapportMogelijkAfgeleverd = t.Object({
  ...DagrapportNietVerstuurd.properties,
  verzonden: t.Literal(false, { description: "Niet bevestigd door de mailserver; het rapport is mogelijk wel afgeleverd." }),
  mogelijkAfgeleverd: t.Literal(true, {
    description:
      "Het hele bericht ging naar de mailserver, daarna viel de verbinding weg of kwam er geen antwoord meer: mogelijk wel afgeleverd. " +
      "Of een eerdere run voor hetzelfde geplande tijdstip was het rapport aan het versturen toen het proces stopte (nooit beëindigd): dan verstuurt deze run het niet; de aanroep daarna wel. " +
      "Niet opnieuw verstuurd (ook niet door een geplande aanroep voor hetzelfde tijdstip), om geen tweede exemplaar te sturen.",
  }),
  error: t.String({ description: "Wat er gebeurde, met de fout van de verbinding." }),
});

export type DagrapportResult = Static<typeof DagrapportVerstuurd> | Static<typeof DagrapportNietVerstuurd> | Static<typeof DagrapportMogelijkAfgeleverd>;

/**
 * Marks this run as sending (src/reports/daily-send-mark.ts), unless an earlier run for
 * the same scheduled time (lastFireOf) began to send and never ended: then that run is
 * returned and nothing is marked. A run has ended when job_runs has its end, or when this
 * process keeps its end because writing it failed (JobContext.unrecorded): either way its
 * send finished and its outcome was told (a 409 of its own when it may have arrived).
 * Called directly (no run of the wrapper), nothing is marked.
 */
async function markSend(deps: Deps, now: Date, context: JobContext): Promise<MarkedRun | null> {
  const own = context.running.find((r) => r.job === "dagrapport")?.runId;
  if (own === undefined) return null;
  const fired = lastFireOf("dagrapport", now)?.toISOString() ?? "";
  const latest = latestCountingStart(now);
  const seal = rowSealOf(deps.config);
  // Only a run nachtwacht started (its start sealed, not dated ahead) holds a report back:
  // a row and a mark a database writer inserted must not silence the report every day.
  const cutShort = (earlier: MarkedRun | null): earlier is MarkedRun =>
    earlier !== null &&
    earlier.runId !== own &&
    earlier.uitkomst === "bezig" &&
    earlier.gestart >= fired &&
    earlier.gestart <= latest &&
    seal.startSealed({ job: "dagrapport", gestart: earlier.gestart, zegel: earlier.zegel }) &&
    !context.unrecorded.some((u) => u.runId === earlier.runId);
  const earlier = await takeSendMark(deps.store, own, (e) => ({ send: !cutShort(e) }));
  return cutShort(earlier) ? earlier : null;
}

/** The recipient in a mail-failure alarm, and `more` about it: an e-mail address, for the operator's channels only (Alarm.personal). */
function recipientOf(ontvanger: string, more: Record<string, unknown> = {}): Alarm["personal"] {
  return { message: `Ontvanger: ${ontvanger}.`, context: { ontvanger, ...more } };
}

/** `context`: what the job wrapper knows of this process (its own run is alive); called directly, nothing of this process runs. */
export async function runDagrapport(deps: Deps, now: Date, context: JobContext = { running: [], unrecorded: [] }): Promise<JobResult<DagrapportResult>> {
  // Only the reads differ per store; the report made of them, and so the mail, is one.
  const report = deps.store.kind === "pg" ? await buildDailyReportPg(deps.store, deps.config, now, context) : await buildDailyReport(deps.store, deps.config, now, context);
  const bezorging = deps.mailer.bezorging;
  const ontvanger = deps.config.dagrapportEmail;
  if (ontvanger === null) {
    return { status: 200, body: { ok: true, verzonden: false, bezorging, ...report } };
  }
  const { html, text } = await renderEmail(DailyReport, report);
  const failed = { ok: false, verzonden: false, ontvanger, bezorging, ...report } as const;
  const left = await markSend(deps, now, context);
  if (left !== null) {
    // An earlier run for this same scheduled time was handing its report over when it
    // stopped (killed, or frozen past its lease): it may have arrived, so this run does not
    // send a second copy. The mark is gone now: the next call sends.
    const why =
      `een eerdere run voor dit tijdstip (run ${left.runId}, gestart ${left.gestart}) was het aan het versturen en eindigde nooit (het proces stopte of bevroor); het is mogelijk afgeleverd. ` +
      `Niet opnieuw verstuurd. Controleer het log van de mailserver; roep dagrapport nog eens aan als het niet aankwam.`;
    await deps.alarms.raise({ type: "mail-failure", message: `Het dagrapport: ${why}`, context: { bezorging, runId: left.runId, gestart: left.gestart }, personal: recipientOf(ontvanger) });
    return { status: 409, body: { ...failed, mogelijkAfgeleverd: true, error: `Het dagrapport aan ${ontvanger} is mogelijk al afgeleverd: ${why}` } };
  }
  try {
    await deps.mailer.send({ to: ontvanger, subject: dailySubject(report, now), html, text });
  } catch (e) {
    const reason = e instanceof Error ? e.message : String(e);
    // Not surely undelivered: the server may have the whole report and its "250" was late or lost, so a resend could be a second copy.
    const perhaps = !surelyNotDelivered(e);
    await deps.alarms.raise({
      type: "mail-failure",
      message: perhaps
        ? `Het dagrapport is mogelijk wel afgeleverd; niet opnieuw verstuurd: het hele bericht ging naar de mailserver (of de outbox), ` +
          `maar de bevestiging ontbrak. Controleer het log van de mailserver; roep dagrapport met de hand aan als het niet aankwam.`
        : `Het dagrapport kon niet worden verstuurd.`,
      context: { bezorging },
      // The mail server's answer often repeats the address ("550 <…>: unknown user").
      personal: recipientOf(ontvanger, { fout: reason }),
    });
    return perhaps
      ? { status: 409, body: { ...failed, mogelijkAfgeleverd: true, error: `Het dagrapport aan ${ontvanger} is mogelijk wel afgeleverd (niet bevestigd; niet opnieuw verstuurd): ${reason}` } }
      : { status: 502, body: { ...failed, error: `Het dagrapport kon niet worden verstuurd naar ${ontvanger}: ${reason}` } };
  }
  return { status: 200, body: { ok: true, verzonden: true, ontvanger, bezorging, ...report } };
}

export const dagrapportJob = defineJob({
  name: "dagrapport",
  summary: "Dagrapport maken en mailen",
  description:
    "Maakt het dagelijkse rapport (back-up, inlogpogingen van de laatste 24 uur, laatste verificatie van de auditketens, " +
    "het nieuwste installatie-checkpoint met de openbare verificatiesleutel, geplande taken, databasegrootte) en mailt het " +
    "naar DAGRAPPORT_EMAIL, anders SUPPORT_EMAIL. Zonder ontvanger wordt " +
    "niets verstuurd (`verzonden: false`); het antwoord bevat altijd het hele rapport. " +
    "Zeker niet verstuurd: 502 (een geplande aanroep voor hetzelfde tijdstip verstuurt het opnieuw). " +
    "Mogelijk wel afgeleverd (het hele bericht ging weg, de bevestiging ontbrak): 409, niet opnieuw verstuurd. " +
    "Stopte een eerdere run voor hetzelfde geplande tijdstip tijdens het versturen (het proces gedood), dan is ook dat 409 zonder te versturen; de volgende aanroep verstuurt het.",
  run: (deps, now, _input, context) => runDagrapport(deps, now, context),
  responses: {
    200: { description: "Rapport gemaakt (en verstuurd als er een ontvanger is).", schema: DagrapportVerstuurd },
    409: {
      description:
        "Mogelijk wel afgeleverd: het hele bericht ging naar de mailserver (of de outbox), maar de bevestiging ontbrak; of een eerdere run voor hetzelfde geplande tijdstip stopte tijdens het versturen, zonder einde (dan niet verstuurd; de volgende aanroep verstuurt het). " +
        "`ok` en `verzonden` false, `mogelijkAfgeleverd` true, het rapport en `error`; alarm mail-failure. " +
        "Telt als gedaan voor dit tijdstip: niet opnieuw verstuurd.",
      schema: DagrapportMogelijkAfgeleverd,
    },
    502: {
      description: "Zeker niet verstuurd: `ok` en `verzonden` false, het rapport en `error`; alarm mail-failure. Een nieuwe (ook geplande) aanroep verstuurt het opnieuw.",
      schema: DagrapportNietVerstuurd,
    },
  },
});
