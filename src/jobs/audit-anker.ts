// PLACEHOLDER until its issue lands: answers 501 so the route exists and is gated.
import { HttpError } from "../http/errors.ts";
import { defineJob } from "./job.ts";

export const auditAnkerJob = defineJob({
  name: "audit-anker",
  summary: "audit-anker (nog niet gebouwd)",
  description: "Nog niet gebouwd.",
  async run() {
    throw new HttpError(501, "De taak audit-anker is nog niet gebouwd.");
  },
});
