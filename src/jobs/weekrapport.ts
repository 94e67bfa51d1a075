// weekrapport: one e-mail per active administrator of every active
// tenant about that tenant's last seven days up to the job's scheduled time. Each tenant's figures are gathered and
// rendered once, then addressed to each of its administrators. A message the
// transport accepted is recorded per (administrator, tenant, ISO week), so a rerun for
// the same week sends only what is still owed. The same run on either store: only the
// queries differ (weeklyQueries, weeklyQueriesPg).
import { t, type Static } from "elysia";
import { WeeklyReport } from "../../emails/WeeklyReport.tsx";
import type { Deps } from "../deps.ts";
import { isoWeek } from "../format.ts";
import { driverError } from "../http/errors.ts";
import { errorText, log } from "../logger.ts";
import { surelyNotDelivered, type MailMessage } from "../mail/mailer.ts";
import { renderEmail } from "../mail/render.ts";
import { weeklyQueriesPg } from "../pg/weekly.ts";
import {
  DELIVERY_WEEKS_KEPT,
  lateLoginsOf,
  lateMarkOf,
  SENDING,
  tenantLate,
  WEEK_MS,
  weeklyQueries,
  weeklyReportProps,
  weeklySubject,
  type LateLogins,
  type TenantWeekLogins,
  type WeekRecipient,
} from "../reports/weekly.ts";
import { JobStoppedForShutdown } from "../running-jobs.ts";
import { lastFireOf } from "../schedule-due.ts";
import { defineJob, type JobResult } from "./job.ts";
import { integer, enumOf } from "./schema.ts";
import { rowSealOf } from "../row-seal.ts";

/** Messages in flight at once: about the pool's connections, so they stay busy. */
export const IN_FLIGHT = 5;
/** Failing addresses named in the alarm; the counts are always complete. */
const MAX_NAMED_FAILURES = 20;

const verstuurdField = integer({ minimum: 0, description: "Berichten die de mailserver (of de outbox) aannam." });
const overgeslagenField = integer({ minimum: 0, description: "Berichten die voor deze ISO-week al eerder verstuurd zijn." });
const onzekerField = integer({
  minimum: 1,
  description:
    "Alleen als > 0: berichten waarvan niet bekend is of ze aankwamen: het versturen begon maar de uitkomst is nooit vastgelegd " +
    "(een eerdere run stopte, in welke bewaarde week ook; die van deze week tellen ook in `overgeslagen`), " +
    "of in deze run: de verbinding viel weg of de mailserver antwoordde niet meer terwijl het bericht al onderweg was, " +
    "het .eml-bestand staat in de outbox maar de map kon niet worden gesynchroniseerd (fsync), " +
    "of de uitkomst kon niet in de database worden vastgelegd. " +
    "Ze worden niet opnieuw verstuurd; het alarm mail-failure noemt ze.",
});
const begrensdField = integer({
  minimum: 1,
  description:
    "Alleen als > 0: zoveel ontvangers (actieve beheerders van actieve tenants, in volgorde van tenant en beheerder) vielen buiten WEEKRAPPORT_MAX_BERICHTEN en krijgen deze week niets; alarm mail-failure.",
});
const bezorgingField = enumOf(["smtp", "outbox"], { description: "outbox: SMTP_URL ontbreekt, berichten staan als .eml in de outbox-map." });
const weekField = t.String({
  pattern: "^\\d{4}-W\\d{2}$",
  example: "2026-W30",
  description: "ISO-week (UTC) waarvoor verstuurd is: die van het laatste geplande tijdstip (zondag 18:00 UTC) op of voor de aanroep.",
});
const geenFoutenField = integer({ minimum: 0, maximum: 0, description: "Berichten die zeker niet aankwamen: hier 0." });

/** 200: every message owed went out (or had gone out before); nothing failed, nothing uncertain, nobody left out. */
export const WeekrapportVerstuurd = t.Object({ verstuurd: verstuurdField, fouten: geenFoutenField, overgeslagen: overgeslagenField, bezorging: bezorgingField, week: weekField });

/** 409 (afwijking): nothing surely failed, but some messages' arrival is unknown or recipients were left out; a rerun cannot mend that. */
export const WeekrapportAfwijking = t.Object({
  verstuurd: verstuurdField,
  fouten: geenFoutenField,
  overgeslagen: overgeslagenField,
  onzeker: t.Optional(onzekerField),
  begrensd: t.Optional(begrensdField),
  bezorging: bezorgingField,
  week: weekField,
});

/** 502 (fout): messages surely not sent; their reservations are released, so a rerun for this week sends exactly those. */
export const WeekrapportNietVerstuurd = t.Object({
  verstuurd: verstuurdField,
  fouten: integer({
    minimum: 1,
    description: "Berichten die zeker niet aankwamen (de mailserver weigerde ze of was niet bereikbaar); alarm mail-failure. Een nieuwe aanroep voor deze week verstuurt precies die.",
  }),
  overgeslagen: overgeslagenField,
  onzeker: t.Optional(onzekerField),
  begrensd: t.Optional(begrensdField),
  bezorging: bezorgingField,
  week: weekField,
});

export type WeekrapportResult = Static<typeof WeekrapportVerstuurd> | Static<typeof WeekrapportAfwijking> | Static<typeof WeekrapportNietVerstuurd>;

function errorMessage(e: unknown): string {
  const m = e instanceof Error ? e.message : String(e);
  return m.length > 300 ? m.slice(0, 299) + "…" : m;
}

/**
 * The end of the week a run at `now` reports on: the schedule's newest fire time at or
 * before `now` (Sunday 18:00 UTC). A catch-up call on Monday for a missed Sunday, or a
 * rerun during the week, reports that same week; the report covers the seven days before it.
 */
export function reportEnd(now: Date): Date {
  const fired = lastFireOf("weekrapport", now);
  if (fired === null) throw new Error("weekrapport has no fire time at or before now in the schedule table");
  return fired;
}

/** A message whose arrival is not known: left by an earlier run (`week` of any week kept), or from this run, with why. */
interface Uncertain {
  adres: string;
  tenantId: number;
  week: string;
  fout?: string;
}

/**
 * `stopping`: whether the service began to shut down (JobContext.stopping); no message
 * starts after that, the ones under way are awaited, and the run ends as interrupted.
 */
export async function runWeekrapport(deps: Deps, now: Date, stopping: () => boolean = () => false): Promise<JobResult<WeekrapportResult>> {
  const seal = rowSealOf(deps.config);
  const q = deps.store.kind === "pg" ? weeklyQueriesPg(deps.store, seal, deps.config) : weeklyQueries(deps.store.db, seal, deps.config);
  const tot = reportEnd(now);
  const week = isoWeek(tot);
  const van = new Date(tot.getTime() - WEEK_MS);
  const tijdzone = deps.config.rapportTijdzone;

  await q.pruneDeliveries(isoWeek(new Date(tot.getTime() - (DELIVERY_WEEKS_KEPT - 1) * WEEK_MS)));
  // At most WEEKRAPPORT_MAX_BERICHTEN, the same ones at every run of the week: whoever can
  // write tenants and administrators (APP_SECRET) must not make the service mail without
  // end, nor read an unbounded list into memory. One more tells that there are more.
  const limit = deps.config.weekrapportMaxBerichten;
  const recipients = await q.weekRecipients(week, limit + 1);
  const begrensd = recipients.length > limit ? (await q.recipientCount()) - limit : 0;
  if (begrensd > 0) recipients.length = limit;
  // Before this run reserves anything: what earlier runs left unresolved, in every week kept.
  const onzeker: Uncertain[] = (await q.uncertainDeliveries()).map((d) => ({ adres: d.email, tenantId: d.tenantId, week: d.isoWeek }));
  const byTenant = new Map<number, WeekRecipient[]>();
  for (const r of recipients) {
    const list = byTenant.get(r.tenantId);
    if (list) list.push(r);
    else byTenant.set(r.tenantId, [r]);
  }

  // What this week counts as late (stored since the previous week's first run, dated before
  // the end of the week it reported): fixed at the week's first run, so every rerun of the
  // week shows the same (LateMark).
  const mark = await lateMarkOf(q, week, tot);

  let verstuurd = 0;
  let fouten = 0;
  let overgeslagen = 0;
  let interrupted = false;
  const mislukt: { adres: string; tenantId: number; fout: string }[] = [];
  const inFlight = new Set<Promise<void>>();
  // Every tenant's login attempts in one pass, once some report is owed.
  let logins: Map<number, TenantWeekLogins> | undefined;
  let lateLogins: Map<number, LateLogins> | undefined;

  /**
   * One reserved message to the transport and its outcome into the bookkeeping. Never
   * rejects: a failure to record or release is logged and counted as onzeker (the
   * reservation stays, so no run sends it again), and the alarm names it.
   */
  const sendOne = async (admin: WeekRecipient, message: MailMessage): Promise<void> => {
    const uncertain = (fout: string) => onzeker.push({ adres: admin.email, tenantId: admin.tenantId, week, fout });
    try {
      await deps.mailer.send(message);
    } catch (e) {
      if (!surelyNotDelivered(e)) {
        // The server may have the whole message and its "250" was late or lost: a resend could be a second copy.
        uncertain(`mogelijk toch afgeleverd: ${errorMessage(e)}`);
        return;
      }
      try {
        await q.releaseDelivery(admin, week);
      } catch (releaseError) {
        log("error", "weekrapport: could not release the reservation of a message that was not sent", { week, tenantId: admin.tenantId, administratorId: admin.administratorId, error: errorText(releaseError) });
        uncertain(`niet verstuurd (${errorMessage(e)}), maar de reservering bleef staan: ${errorMessage(errorText(releaseError))}`);
        return;
      }
      fouten++;
      if (mislukt.length < MAX_NAMED_FAILURES) mislukt.push({ adres: admin.email, tenantId: admin.tenantId, fout: errorMessage(e) });
      return;
    }
    try {
      await q.recordDelivery(admin, week, deps.clock());
      verstuurd++;
    } catch (recordError) {
      log("error", "weekrapport: could not record a message the transport accepted", { week, tenantId: admin.tenantId, administratorId: admin.administratorId, error: errorText(recordError) });
      uncertain(`door de mailserver aangenomen, maar niet vastgelegd: ${errorMessage(errorText(recordError))}`);
    }
  };

  /**
   * Whether this run reserved the message (reserveDelivery); false too when the
   * administrator was removed meanwhile (PUT …/beheerders deletes one that no delivery
   * record names, so the reservation's reference to it fails): not sent, skipped.
   */
  const reserved = async (admin: WeekRecipient): Promise<boolean> => {
    try {
      return await q.reserveDelivery(admin, week);
    } catch (e) {
      const err = driverError(e);
      if (err?.code === "SQLITE_CONSTRAINT_FOREIGNKEY" || err?.errno === "23503") return false;
      throw e;
    }
  };

  try {
    for (const [tenantId, admins] of byTenant) {
      const owed = admins.filter((a) => !a.alVerstuurd);
      overgeslagen += admins.length - owed.length;
      if (owed.length === 0) continue;
      if (stopping()) {
        interrupted = true;
        break;
      }

      logins ??= await q.weekLogins(van, tot);
      const stats = await q.tenantWeekStats(tenantId, van, tot, logins, now);
      lateLogins ??= await lateLoginsOf(q, mark);
      const laat = await tenantLate(q, mark, tenantId, lateLogins);
      const props = weeklyReportProps(owed[0]!.tenant, stats, { week, van, tot, tijdzone }, laat);
      const { html, text } = await renderEmail(WeeklyReport, props);
      const subject = weeklySubject(props);

      for (const admin of owed) {
        // Bounded concurrency: wait for a slot before starting the next message.
        while (inFlight.size >= IN_FLIGHT) await Promise.race(inFlight);
        // Shutdown began: no new message; the ones under way are awaited below.
        if (stopping()) {
          interrupted = true;
          break;
        }
        // Marked before it leaves: should the service die before the outcome is
        // recorded, the rerun reports it as uncertain rather than sending it twice.
        // A claim: when another run (another instance whose lease lapsed) reserved it
        // first, that run sends it; this one does not send it again, and counts it as
        // skipped.
        if (!(await reserved(admin))) {
          overgeslagen++;
          continue;
        }
        const p: Promise<void> = sendOne(admin, { to: admin.email, subject, html, text }).finally(() => inFlight.delete(p));
        inFlight.add(p);
      }
      if (interrupted) break;
    }
  } finally {
    // The run never ends while its messages are under way, also when a step above threw.
    await Promise.allSettled(inFlight);
    await raiseAlarms();
  }

  async function raiseAlarms(): Promise<void> {
    if (begrensd > 0) {
      await deps.alarms.raise({
        type: "mail-failure",
        message:
          `Weekrapport ${week}: ${begrensd} van de ${limit + begrensd} ontvangers krijgen het weekrapport niet: meer dan WEEKRAPPORT_MAX_BERICHTEN (${limit}) berichten per week. ` +
          `Controleer de beheerders die de applicatie heeft opgegeven (PUT /api/tenants/{id}/beheerders); verhoog de grens alleen als zoveel ontvangers kloppen.`,
        context: { week, begrensd, grens: limit },
      });
    }
    if (fouten > 0) {
      await deps.alarms.raise({
        type: "mail-failure",
        message: `Weekrapport ${week}: ${fouten} van ${fouten + verstuurd} berichten niet verstuurd; een nieuwe aanroep voor deze week verstuurt alleen die.`,
        context: { week, verstuurd, fouten, overgeslagen, bezorging: deps.mailer.bezorging },
        // Recipient addresses, and the mail server's answers that often repeat them: the operator's channels only.
        personal: { context: { mislukt } },
      });
    }
    if (onzeker.length > 0) {
      const eerder = [...new Set(onzeker.map((o) => o.week).filter((w) => w !== week))].sort();
      await deps.alarms.raise({
        type: "mail-failure",
        message:
          `Weekrapport ${week}: bij ${onzeker.length} bericht(en) is niet bekend of ze aankwamen: het versturen begon, maar de uitkomst is niet vastgelegd ` +
          `(de service stopte, de verbinding met de mailserver viel weg terwijl het bericht onderweg was, of de database faalde). ` +
          `Ze worden niet opnieuw verstuurd (geen dubbele berichten). Controleer het log van de mailserver; om ze van week ${week} toch opnieuw te sturen: ` +
          `DELETE FROM weekly_report_deliveries WHERE iso_week = '${week}' AND verstuurd = '${SENDING}', en roep weekrapport opnieuw aan.` +
          (eerder.length > 0
            ? ` Die van eerdere weken (${eerder.join(", ")}) kunnen niet meer verstuurd worden; na controle beëindigt ` +
              `DELETE FROM weekly_report_deliveries WHERE iso_week IN (${eerder.map((w) => `'${w}'`).join(", ")}) AND verstuurd = '${SENDING}' deze melding.`
            : ""),
        context: { week, aantal: onzeker.length },
        personal: { context: { onzeker: onzeker.slice(0, MAX_NAMED_FAILURES) } },
      });
    }
  }

  if (interrupted) {
    throw new JobStoppedForShutdown(
      `Onderbroken: de service wordt gestopt; weekrapport ${week} begon geen nieuwe berichten meer (${verstuurd} verstuurd, ${fouten} mislukt). ` +
        `Een nieuwe aanroep verstuurt de rest van deze week.`,
    );
  }
  const body: WeekrapportResult = {
    verstuurd,
    fouten,
    overgeslagen,
    ...(onzeker.length > 0 ? { onzeker: onzeker.length } : {}),
    ...(begrensd > 0 ? { begrensd } : {}),
    bezorging: deps.mailer.bezorging,
    week,
  };
  // The outcome the job-run history records (src/http/job-route.ts outcomeOf): fout (502)
  // when messages surely were not sent, so that a scheduled call for the same time runs
  // again and sends exactly those; afwijking (409, done: not run again) when nothing can
  // be retried safely but the operator must see it; ok (200) only when all went out.
  return { status: fouten > 0 ? 502 : onzeker.length > 0 || begrensd > 0 ? 409 : 200, body };
}

export const weekrapportJob = defineJob({
  name: "weekrapport",
  summary: "Weekrapport per beheerder van elke actieve tenant versturen",
  description:
    "Stuurt elke actieve beheerder van elke actieve tenant het overzicht van de afgelopen zeven dagen van die tenant: " +
    "audit-activiteit per actie, inlogpogingen (geslaagd, mislukt, IP-adressen) en de staat van de auditketen. " +
    "Het rapport gaat over de zeven dagen tot het laatste geplande tijdstip (zondag 18:00 UTC) op of voor de aanroep, en heeft de ISO-week daarvan. " +
    "Veilig om opnieuw aan te roepen: voor dezelfde week gaat alleen wat nog niet verstuurd is. " +
    "Mislukte berichten (`fouten` > 0) geven 502, zodat een geplande aanroep voor hetzelfde tijdstip ze opnieuw verstuurt; " +
    "berichten waarvan niet bekend is of ze aankwamen (`onzeker`) of ontvangers boven de grens (`begrensd`) geven 409. " +
    "Beide melden het alarm mail-failure.",
  run: (deps, now, _input, context) => runWeekrapport(deps, now, context.stopping),
  responses: {
    200: { description: "Verstuurd: alles wat voor deze week nog verstuurd moest worden, is aangenomen.", schema: WeekrapportVerstuurd },
    409: {
      description:
        "Afwijking: niets is zeker mislukt, maar van `onzeker` berichten is niet bekend of ze aankwamen, of `begrensd` ontvangers vielen buiten WEEKRAPPORT_MAX_BERICHTEN. " +
        "Niet opnieuw te versturen zonder kans op dubbele berichten; de run telt als gedaan. Alarm mail-failure.",
      schema: WeekrapportAfwijking,
    },
    502: {
      description:
        "`fouten` berichten zijn zeker niet verstuurd (alarm mail-failure); hun reservering is vrijgegeven, dus een nieuwe aanroep (ook een geplande voor hetzelfde tijdstip) verstuurt precies die. " +
        "Het hele resultaat staat in het antwoord.",
      schema: WeekrapportNietVerstuurd,
    },
  },
});
