// beveiligingslog-analyse (contract §4): failed login attempts of the last hour per
// IP address and per account against INLOG_DREMPEL_IP / INLOG_DREMPEL_ACCOUNT.
//
// "A threshold is passed" when the count reaches it: with a threshold of 20, the
// 20th failure from one address raises the alarm (count >= threshold). That reads
// the setting as "20 failures an hour is already too many".
import type { Database } from "bun:sqlite";
import type { Deps } from "../deps.ts";
import { defineJob, type JobResult } from "./job.ts";

/** Offenders listed per kind; a wider attack is summed up in `aantalVerdacht`. */
const MAX_LISTED = 100;
const WINDOW_MS = 3600_000;

export interface Verdacht {
  soort: "ip" | "account";
  waarde: string;
  aantal: number;
  eerste: string;
  laatste: string;
}

export interface BeveiligingslogAnalyseBody {
  ok: boolean;
  venster: { van: string; tot: string };
  drempels: { ip: number; account: number };
  verdacht: Verdacht[];
  /** How many IPs and accounts passed their threshold (the list shows at most 100 of each). */
  aantalVerdacht: { ip: number; account: number };
}

/**
 * The statement per kind. `gelukt = 0` and the range on `tijdstip` match the partial
 * index login_attempts_failed_idx (tijdstip, ip, account) WHERE gelukt = 0, which also
 * covers every column read: SQLite walks only the last hour's failures in the index
 * and never touches the table, however many millions of rows it holds.
 */
export function offenderQuery(column: "ip" | "account"): string {
  return `SELECT ${column} AS waarde, count(*) AS aantal, min(tijdstip) AS eerste, max(tijdstip) AS laatste
          FROM login_attempts
          WHERE gelukt = 0 AND tijdstip >= ? AND tijdstip <= ?
          GROUP BY ${column}
          HAVING count(*) >= ?
          ORDER BY aantal DESC, waarde`;
}

function offenders(sqlite: Database, soort: "ip" | "account", van: string, tot: string, threshold: number): Verdacht[] {
  const rows = sqlite.query(offenderQuery(soort)).all(van, tot, threshold) as Omit<Verdacht, "soort">[];
  return rows.map((r) => ({ soort, waarde: r.waarde, aantal: r.aantal, eerste: r.eerste, laatste: r.laatste }));
}

export async function runBeveiligingslogAnalyse(deps: Deps, now: Date): Promise<JobResult<BeveiligingslogAnalyseBody>> {
  const { sqlite } = deps.store;
  const van = new Date(now.getTime() - WINDOW_MS).toISOString();
  const tot = now.toISOString();
  const drempels = { ip: deps.config.inlogDrempelIp, account: deps.config.inlogDrempelAccount };

  const ips = offenders(sqlite, "ip", van, tot, drempels.ip);
  const accounts = offenders(sqlite, "account", van, tot, drempels.account);
  const aantalVerdacht = { ip: ips.length, account: accounts.length };
  const verdacht = [...ips.slice(0, MAX_LISTED), ...accounts.slice(0, MAX_LISTED)];
  const body: BeveiligingslogAnalyseBody = { ok: verdacht.length === 0, venster: { van, tot }, drempels, verdacht, aantalVerdacht };
  if (body.ok) return { status: 200, body };

  const top = verdacht
    .slice()
    .sort((a, b) => b.aantal - a.aantal)
    .slice(0, 5)
    .map((v) => `${v.soort} ${v.waarde} (${v.aantal}×)`)
    .join(", ");
  await deps.alarms.raise({
    type: "login-bruteforce",
    message: `Mogelijke brute-force-aanval: ${aantalVerdacht.ip} IP-adres(sen) en ${aantalVerdacht.account} account(s) boven de drempel van mislukte inlogpogingen in het afgelopen uur (${top}).`,
    context: { venster: body.venster, drempels, aantalVerdacht, verdacht: verdacht.slice(0, 20) },
  });
  return { status: 409, body };
}

const bodySchema = {
  type: "object",
  required: ["ok", "venster", "drempels", "verdacht", "aantalVerdacht"],
  properties: {
    ok: { type: "boolean" },
    venster: {
      type: "object",
      properties: { van: { type: "string", format: "date-time" }, tot: { type: "string", format: "date-time" } },
    },
    drempels: { type: "object", properties: { ip: { type: "integer" }, account: { type: "integer" } } },
    verdacht: {
      type: "array",
      items: {
        type: "object",
        required: ["soort", "waarde", "aantal", "eerste", "laatste"],
        properties: {
          soort: { type: "string", enum: ["ip", "account"] },
          waarde: { type: "string" },
          aantal: { type: "integer" },
          eerste: { type: "string", format: "date-time" },
          laatste: { type: "string", format: "date-time" },
        },
      },
    },
    aantalVerdacht: { type: "object", properties: { ip: { type: "integer" }, account: { type: "integer" } } },
  },
};

export const beveiligingslogAnalyseJob = defineJob({
  name: "beveiligingslog-analyse",
  summary: "Zoekt brute-force-pogingen in de mislukte inlogpogingen van het afgelopen uur",
  description:
    "Telt de mislukte inlogpogingen in [nu − 1 uur, nu] per IP-adres en per account. Een IP-adres of account waarvan het aantal " +
    "de drempel (INLOG_DREMPEL_IP, INLOG_DREMPEL_ACCOUNT) bereikt, is verdacht: 409 met elke overtreder (soort, waarde, aantal, eerste en laatste poging) " +
    "en een alarm (`type` = `login-bruteforce`). Anders 200 met een lege lijst.",
  run: (deps, now) => runBeveiligingslogAnalyse(deps, now),
  openapi: {
    responses: {
      200: { description: "Niets verdachts in het afgelopen uur.", schema: bodySchema },
      409: { description: "Een drempel is bereikt; alarm verstuurd.", schema: bodySchema },
    },
  },
});
