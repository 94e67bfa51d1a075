// The retention jobs delete by the host clock: with it ahead, records inside their
// retention period look old and are deleted for good (a year ahead: the whole security
// log; 400 days: audit entries inside the 7-year legal period). A single host has no
// independent clock, but two cheap signs that its clock is ahead exist, and before either
// job deletes anything it asks this one rule:
//  - the wall clock was stepped forward since the process started (wallClockStepMs, the
//    monotonic clock against the wall clock) by more than CLOCK_STEP_LIMIT_MS;
//  - on PostgreSQL, the host is ahead of the database server's clock by more than
//    CLOCK_SKEW_LIMIT_MS (the limit the daily report and the start's log tell).
// A clock behind makes retention delete less, which waits harmlessly; it is not refused.
import type { Deps } from "../deps.ts";
import { CLOCK_SKEW_LIMIT_MS, databaseClockOffsetMs, offsetSeconds } from "../pg/clock.ts";
import { CLOCK_STEP_LIMIT_MS, wallClockStepMs } from "../time.ts";
import { enumOf } from "./schema.ts";

export const CLOCK_REASONS = ["klok-verzet", "klok-voor-op-database"] as const;
export type ClockReason = (typeof CLOCK_REASONS)[number];

/** The `reden` of a retention job's 409 for its clock, documented once for both jobs. */
export const clockReasonSchema = <const A extends readonly string[]>(also: A) =>
  enumOf([...CLOCK_REASONS, ...also] as readonly [...typeof CLOCK_REASONS, ...A], {
    description:
      "Waarom niets is verwijderd. `klok-verzet`: de klok van deze host is sinds de start van de dienst meer dan 10 minuten vooruitgezet; " +
      "`klok-voor-op-database`: de klok van deze host loopt meer dan 10 s voor op die van de databaseserver (PostgreSQL). " +
      "Met een klok die voorloopt zouden gegevens binnen hun bewaartermijn worden verwijderd.",
  });

export interface ClockRefusal {
  reden: ClockReason;
  fout: string;
}

/**
 * Whether `job` may delete by the host clock now. Null: yes. Else why not (a Dutch
 * sentence), after raising the `clock-ahead` alarm; the job then deletes nothing and
 * answers 409.
 */
export async function retentionClockRefusal(deps: Deps, job: string, grens: string): Promise<ClockRefusal | null> {
  const refusal = await clockAhead(deps);
  if (refusal === null) return null;
  await deps.alarms.raise({ type: "clock-ahead", message: `${job} heeft niets verwijderd: ${refusal.fout}`, context: { reden: refusal.reden, grens } });
  return refusal;
}

async function clockAhead(deps: Deps): Promise<ClockRefusal | null> {
  const stepMs = (deps.clockStep ?? wallClockStepMs)();
  if (stepMs > CLOCK_STEP_LIMIT_MS) {
    return {
      reden: "klok-verzet",
      fout:
        `de klok van deze host is sinds de start van de dienst ${minutes(stepMs)} vooruitgezet, en met een klok die voorloopt zouden gegevens binnen hun bewaartermijn verdwijnen. ` +
        "Controleer de tijd (timedatectl) en zet hem zo nodig goed; herstart daarna de dienst (systemctl restart nachtwacht), die de klok bij zijn start als uitgangspunt neemt, en roep de taak opnieuw aan.",
    };
  }
  const { store } = deps;
  if (store.kind === "pg") {
    const offsetMs = await (deps.databaseClockOffset ?? (() => databaseClockOffsetMs(store.sql)))();
    if (-offsetMs > CLOCK_SKEW_LIMIT_MS) {
      return {
        reden: "klok-voor-op-database",
        fout:
          `de klok van deze host loopt ${offsetSeconds(-offsetMs)} s voor op die van de databaseserver, en met een klok die voorloopt zouden gegevens binnen hun bewaartermijn verdwijnen. ` +
          "Controleer de tijd op deze host en op de databaseserver (timedatectl, NTP) en zet hem goed; roep de taak daarna opnieuw aan.",
      };
    }
  }
  return null;
}

/** A step as the operator reads it: whole minutes, or days past two days. */
function minutes(ms: number): string {
  const m = Math.round(ms / 60_000);
  return m >= 2 * 24 * 60 ? `${Math.round(m / (24 * 60))} dagen` : `${m} minuten`;
}
