// PLACEHOLDER until its issue lands: answers 501 so the route exists and is gated.
import { HttpError } from "../http/errors.ts";
import { defineJob } from "./job.ts";

export const beveiligingslogRetentieJob = defineJob({
  name: "beveiligingslog-retentie",
  summary: "beveiligingslog-retentie (nog niet gebouwd)",
  description: "Nog niet gebouwd.",
  async run() {
    throw new HttpError(501, "De taak beveiligingslog-retentie is nog niet gebouwd.");
  },
});
