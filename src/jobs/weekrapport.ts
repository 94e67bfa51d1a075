// PLACEHOLDER until its issue lands: answers 501 so the route exists and is gated.
import { HttpError } from "../http/errors.ts";
import { defineJob } from "./job.ts";

export const weekrapportJob = defineJob({
  name: "weekrapport",
  summary: "weekrapport (nog niet gebouwd)",
  description: "Nog niet gebouwd.",
  async run() {
    throw new HttpError(501, "De taak weekrapport is nog niet gebouwd.");
  },
});
