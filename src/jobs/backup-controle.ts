// PLACEHOLDER until its issue lands: answers 501 so the route exists and is gated.
import { HttpError } from "../http/errors.ts";
import { defineJob } from "./job.ts";

export const backupControleJob = defineJob({
  name: "backup-controle",
  summary: "backup-controle (nog niet gebouwd)",
  description: "Nog niet gebouwd.",
  async run() {
    throw new HttpError(501, "De taak backup-controle is nog niet gebouwd.");
  },
});
