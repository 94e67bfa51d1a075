// weekrapport: one e-mail per active administrator of every active
// tenant about that tenant's last seven days. Each tenant's figures are gathered and
// rendered once, then addressed to each of its administrators. A message the
// transport accepted is recorded per (administrator, tenant, ISO week), so a rerun in
// the same week sends only what is still owed. The same run on either store: only the
// queries differ (weeklyQueries, weeklyQueriesPg).
import { t, type Static } from "elysia";
import { WeeklyReport } from "../../emails/WeeklyReport.tsx";
import type { Deps } from "../deps.ts";
import { isoWeek } from "../format.ts";
import { renderEmail } from "../mail/render.ts";
import { weeklyQueriesPg } from "../pg/weekly.ts";
import {
  DELIVERY_WEEKS_KEPT,
  SENDING,
  WEEK_MS,
  weeklyQueries,
  weeklyReportProps,
  weeklySubject,
  type TenantWeekLogins,
  type WeekRecipient,
} from "../reports/weekly.ts";
import { defineJob, type JobResult } from "./job.ts";
import { integer, enumOf } from "./schema.ts";
import { rowSealOf } from "../row-seal.ts";

/** Messages in flight at once: about the pool's connections, so they stay busy. */
export const IN_FLIGHT = 5;
/** Failing addresses named in the alarm; the counts are always complete. */
const MAX_NAMED_FAILURES = 20;

export const WeekrapportResult = t.Object({
  verstuurd: integer({ minimum: 0, description: "Berichten die de mailserver (of de outbox) aannam." }),
  fouten: integer({ minimum: 0, description: "Berichten die mislukten; bij > 0 volgt een alarm (mail-failure)." }),
  overgeslagen: integer({ minimum: 0, description: "Berichten die deze ISO-week al eerder verstuurd zijn." }),
  onzeker: t.Optional(
    integer({
      minimum: 1,
      description:
        "Alleen als > 0: berichten waarvan een eerdere run het versturen begon maar de uitkomst nooit vastlegde (de service stopte). " +
        "Ze worden niet opnieuw verstuurd; het alarm mail-failure noemt ze. Deel van `overgeslagen`.",
    }),
  ),
  bezorging: enumOf(["smtp", "outbox"], { description: "outbox: SMTP_URL ontbreekt, berichten staan als .eml in de outbox-map." }),
  week: t.String({ pattern: "^\\d{4}-W\\d{2}$", example: "2026-W30", description: "ISO-week (UTC) waarvoor verstuurd is." }),
});
export type WeekrapportResult = Static<typeof WeekrapportResult>;

function errorMessage(e: unknown): string {
  const m = e instanceof Error ? e.message : String(e);
  return m.length > 300 ? m.slice(0, 299) + "…" : m;
}

export async function runWeekrapport(deps: Deps, now: Date): Promise<JobResult<WeekrapportResult>> {
  const seal = rowSealOf(deps.config);
  const q = deps.store.kind === "pg" ? weeklyQueriesPg(deps.store, seal) : weeklyQueries(deps.store.db, seal);
  const week = isoWeek(now);
  const van = new Date(now.getTime() - WEEK_MS);
  const tijdzone = deps.config.rapportTijdzone;

  await q.pruneDeliveries(isoWeek(new Date(now.getTime() - (DELIVERY_WEEKS_KEPT - 1) * WEEK_MS)));
  const recipients = await q.weekRecipients(week);
  const byTenant = new Map<number, WeekRecipient[]>();
  for (const r of recipients) {
    const list = byTenant.get(r.tenantId);
    if (list) list.push(r);
    else byTenant.set(r.tenantId, [r]);
  }

  let verstuurd = 0;
  let fouten = 0;
  let overgeslagen = 0;
  const mislukt: { adres: string; tenantId: number; fout: string }[] = [];
  const onzeker = recipients.filter((r) => r.onzeker).map((r) => ({ adres: r.email, tenantId: r.tenantId }));
  const inFlight = new Set<Promise<void>>();
  // Every tenant's login attempts in one pass, once some report is owed.
  let logins: Map<number, TenantWeekLogins> | undefined;

  for (const [tenantId, admins] of byTenant) {
    const owed = admins.filter((a) => !a.alVerstuurd);
    overgeslagen += admins.length - owed.length;
    if (owed.length === 0) continue;

    logins ??= await q.weekLogins(van, now);
    const stats = await q.tenantWeekStats(tenantId, van, now, logins);
    const props = weeklyReportProps(owed[0]!.tenant, stats, { week, van, tot: now, tijdzone });
    const { html, text } = await renderEmail(WeeklyReport, props);
    const subject = weeklySubject(props);

    for (const admin of owed) {
      // Bounded concurrency: wait for a slot before starting the next message.
      while (inFlight.size >= IN_FLIGHT) await Promise.race(inFlight);
      // Marked before it leaves: should the service die before the outcome is
      // recorded, the rerun reports it as uncertain rather than sending it twice.
      // A claim: when another run (another instance whose lease lapsed) reserved it
      // first, that run sends it; this one does not send it again, and counts it as
      // skipped.
      if (!(await q.reserveDelivery(admin, week))) {
        overgeslagen++;
        continue;
      }
      const p: Promise<void> = deps.mailer
        .send({ to: admin.email, subject, html, text })
        .then(
          async () => {
            await q.recordDelivery(admin, week, deps.clock());
            verstuurd++;
          },
          async (e) => {
            await q.releaseDelivery(admin, week);
            fouten++;
            if (mislukt.length < MAX_NAMED_FAILURES) mislukt.push({ adres: admin.email, tenantId, fout: errorMessage(e) });
          },
        )
        .finally(() => inFlight.delete(p));
      inFlight.add(p);
    }
  }
  await Promise.all(inFlight);

  const bezorging = deps.mailer.bezorging;
  if (fouten > 0) {
    await deps.alarms.raise({
      type: "mail-failure",
      message: `Weekrapport ${week}: ${fouten} van ${fouten + verstuurd} berichten niet verstuurd; een nieuwe aanroep deze week verstuurt alleen die.`,
      context: { week, verstuurd, fouten, overgeslagen, bezorging, mislukt },
    });
  }
  if (onzeker.length > 0) {
    await deps.alarms.raise({
      type: "mail-failure",
      message:
        `Weekrapport ${week}: bij ${onzeker.length} bericht(en) is niet bekend of ze aankwamen; de service stopte tijdens het versturen. ` +
        `Ze worden niet opnieuw verstuurd (geen dubbele berichten). Controleer het log van de mailserver; om ze toch opnieuw te sturen: ` +
        `DELETE FROM weekly_report_deliveries WHERE iso_week = '${week}' AND verstuurd = '${SENDING}', en roep weekrapport opnieuw aan.`,
      context: { week, onzeker: onzeker.slice(0, MAX_NAMED_FAILURES), aantal: onzeker.length },
    });
  }
  const body: WeekrapportResult = { verstuurd, fouten, overgeslagen, ...(onzeker.length > 0 ? { onzeker: onzeker.length } : {}), bezorging, week };
  return { status: 200, body };
}

export const weekrapportJob = defineJob({
  name: "weekrapport",
  summary: "Weekrapport per beheerder van elke actieve tenant versturen",
  description:
    "Stuurt elke actieve beheerder van elke actieve tenant het overzicht van de afgelopen zeven dagen van die tenant: " +
    "audit-activiteit per actie, inlogpogingen (geslaagd, mislukt, IP-adressen) en de staat van de auditketen. " +
    "Veilig om opnieuw aan te roepen: in dezelfde ISO-week gaat alleen wat nog niet verstuurd is. " +
    "Antwoordt ook met 200 als er berichten mislukten (`fouten` > 0); dat meldt het alarm mail-failure.",
  run: (deps, now) => runWeekrapport(deps, now),
  responses: {
    200: { description: "Verstuurd; `fouten` telt mislukte berichten.", schema: WeekrapportResult },
  },
});
