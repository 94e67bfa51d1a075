// beveiligingslog-retentie (contract §3): deletes login attempts older than
// BEVEILIGINGSLOG_RETENTIE_DAGEN in small write transactions.
import { deleteOldLoginAttempts, retentionBoundary, type RetentionOptions } from "../audit/retention.ts";
import type { Deps } from "../deps.ts";
import { defineJob, type JobResult } from "./job.ts";

export type RetentieBody = {
  ok: true;
  verwijderd: number;
  retentieDagen: number;
  grens: string;
};

export async function runBeveiligingslogRetentie(deps: Deps, now: Date, o: RetentionOptions = {}): Promise<JobResult<RetentieBody>> {
  const retentieDagen = deps.config.beveiligingslogRetentieDagen;
  const grens = retentionBoundary(now, retentieDagen);
  const verwijderd = await deleteOldLoginAttempts(deps.store.sqlite, grens, o);
  return { status: 200, body: { ok: true, verwijderd, retentieDagen, grens } };
}

export const beveiligingslogRetentieJob = defineJob({
  name: "beveiligingslog-retentie",
  summary: "Verwijdert inlogpogingen ouder dan BEVEILIGINGSLOG_RETENTIE_DAGEN",
  description:
    "Verwijdert de inlogpogingen (BeveiligingsLog) met een tijdstip strikt vóór `grens` = nu − retentieDagen × 24 h, " +
    "in kleine schrijftransacties zodat de applicatie zelf nooit lang op de database wacht.",
  run: (deps, now) => runBeveiligingslogRetentie(deps, now),
  openapi: {
    responses: {
      200: {
        description: "Verwijderd.",
        schema: {
          type: "object",
          required: ["ok", "verwijderd", "retentieDagen", "grens"],
          properties: {
            ok: { type: "boolean", const: true },
            verwijderd: { type: "integer", description: "Aantal verwijderde inlogpogingen." },
            retentieDagen: { type: "integer", description: "Toegepaste bewaartermijn in dagen (BEVEILIGINGSLOG_RETENTIE_DAGEN)." },
            grens: { type: "string", format: "date-time" },
          },
        },
      },
    },
  },
});
