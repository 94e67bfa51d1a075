// beveiligingslog-retentie: deletes login attempts older than
// BEVEILIGINGSLOG_RETENTIE_DAGEN in small write transactions, on SQLite
// (src/audit/retention.ts) or PostgreSQL (src/pg/retention.ts); the boundary is one rule.
import { t, type Static } from "elysia";
import { deleteOldLoginAttempts, jobRetentionOptions, retentionBoundary, type RetentionOptions } from "../audit/retention.ts";
import type { Deps } from "../deps.ts";
import { deleteOldLoginAttemptsPg } from "../pg/retention.ts";
import { defineJob, type JobResult } from "./job.ts";
import { clockReasonSchema, retentionClockRefusal } from "./retention-clock.ts";
import { dateTime, integer } from "./schema.ts";

export const RetentieBody = t.Object({
  ok: t.Literal(true),
  verwijderd: integer({ minimum: 0, description: "Aantal verwijderde inlogpogingen." }),
  retentieDagen: integer({ description: "Toegepaste bewaartermijn in dagen (BEVEILIGINGSLOG_RETENTIE_DAGEN)." }),
  grens: dateTime({ description: "nu − retentieDagen × 24 h; inlogpogingen van vóór dit moment zijn verwijderd." }),
});

/** 409: the host clock looks ahead (retentionClockRefusal), nothing deleted. */
export const RetentieAfwijking = t.Object({
  ok: t.Literal(false),
  verwijderd: t.Literal(0),
  retentieDagen: RetentieBody.properties.retentieDagen,
  grens: dateTime({ description: "nu − retentieDagen × 24 h, naar de klok van deze host; er is niets verwijderd." }),
  reden: clockReasonSchema([]),
  fout: t.String({ description: "De toelichting bij `reden`, met wat te doen." }),
});
export type RetentieBody = Static<typeof RetentieBody> | Static<typeof RetentieAfwijking>;

export async function runBeveiligingslogRetentie(deps: Deps, now: Date, o: RetentionOptions = {}): Promise<JobResult<RetentieBody>> {
  const retentieDagen = deps.config.beveiligingslogRetentieDagen;
  const grens = retentionBoundary(now, retentieDagen);
  // Deleting by a clock that runs ahead would delete records inside their retention period.
  const refusal = await retentionClockRefusal(deps, "beveiligingslog-retentie", grens);
  if (refusal !== null) return { status: 409, body: { ok: false, verwijderd: 0, retentieDagen, grens, ...refusal } };
  const { store } = deps;
  const verwijderd =
    store.kind === "pg"
      ? await deleteOldLoginAttemptsPg(store.sql, grens, o)
      : await deleteOldLoginAttempts(store.sqlite, grens, jobRetentionOptions(deps, o));
  return { status: 200, body: { ok: true, verwijderd, retentieDagen, grens } };
}

export const beveiligingslogRetentieJob = defineJob({
  name: "beveiligingslog-retentie",
  summary: "Verwijdert inlogpogingen ouder dan BEVEILIGINGSLOG_RETENTIE_DAGEN",
  description:
    "Verwijdert de inlogpogingen (BeveiligingsLog) met een tijdstip strikt vóór `grens` = nu − retentieDagen × 24 h, " +
    "in kleine schrijftransacties zodat de applicatie zelf nooit lang op de database wacht. " +
    "Loopt de klok van de host zichtbaar voor (sinds de start van de dienst meer dan 10 minuten vooruitgezet, of bij PostgreSQL meer dan 10 s voor op de databaseserver): 409, niets verwijderd, alarm `clock-ahead`.",
  run: (deps, now) => runBeveiligingslogRetentie(deps, now),
  responses: {
    200: { description: "Verwijderd.", schema: RetentieBody },
    409: { description: "De klok van de host loopt voor: niets verwijderd.", schema: RetentieAfwijking },
  },
});
