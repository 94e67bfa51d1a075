// beveiligingslog-analyse: failed login attempts of the last hour per
// IP address and per account against INLOG_DREMPEL_IP / INLOG_DREMPEL_ACCOUNT.
//
// "A threshold is passed" when the count reaches it: with a threshold of 20, the
// 20th failure from one address raises the alarm (count >= threshold). That reads
// the setting as "20 failures an hour is already too many".
import { and, count, desc, gte, lte, sql } from "drizzle-orm";
import { t, type Static } from "elysia";
import { loginAttempts } from "../../db/schema.ts";
import type { Db, Store } from "../db.ts";
import { onSqlite, type Deps } from "../deps.ts";
import { defineJob, type JobResult } from "./job.ts";
import { dateTime, integer, enumOf } from "./schema.ts";

/** Offenders listed per kind; a wider attack is summed up in `aantalVerdacht`. */
const MAX_LISTED = 100;
const WINDOW_MS = 3600_000;

export const Verdacht = t.Object({
  soort: enumOf(["ip", "account"]),
  waarde: t.String({ description: "Het IP-adres of de accountnaam." }),
  aantal: integer({ minimum: 1, description: "Mislukte pogingen in het venster." }),
  eerste: dateTime(),
  laatste: dateTime(),
});
export type Verdacht = Static<typeof Verdacht>;

const perSoort = (description: string) => t.Object({ ip: integer({ minimum: 0 }), account: integer({ minimum: 0 }) }, { description });

export const BeveiligingslogAnalyseBody = t.Object({
  ok: t.Boolean(),
  venster: t.Object({ van: dateTime(), tot: dateTime() }, { description: "Het afgelopen uur: [van, tot]." }),
  drempels: perSoort("INLOG_DREMPEL_IP en INLOG_DREMPEL_ACCOUNT."),
  verdacht: t.Array(Verdacht, { description: "Eerst de IP-adressen, dan de accounts, elk met de meeste pogingen voorop; hoogstens 100 van elk." }),
  aantalVerdacht: perSoort("Hoeveel IP-adressen en accounts de drempel bereikten (ook voorbij de 100 in `verdacht`)."),
});
export type BeveiligingslogAnalyseBody = Static<typeof BeveiligingslogAnalyseBody>;

/**
 * Failed attempts in [van, tot] per IP address or per account, those at or over the
 * threshold, most first. `gelukt = 0` (a literal, the index's own term) and the range
 * on `tijdstip` match the partial index login_attempts_failed_idx (tijdstip, ip,
 * account) WHERE gelukt = 0, which also covers every column read: SQLite walks only the
 * last hour's failures in the index and never touches the table, however many millions
 * of rows it holds. Run twice a job, so not kept prepared.
 */
export function offenderQuery(db: Db, column: "ip" | "account", van: string, tot: string, threshold: number) {
  const a = loginAttempts;
  const waarde = a[column];
  const aantal = count().as("aantal");
  return db
    .select({
      waarde,
      aantal,
      // min and max of a group are never null: typed as the column itself
      eerste: sql`min(${a.tijdstip})`.mapWith(a.tijdstip),
      laatste: sql`max(${a.tijdstip})`.mapWith(a.tijdstip),
    })
    .from(a)
    .where(and(sql`${a.gelukt} = 0`, gte(a.tijdstip, van), lte(a.tijdstip, tot)))
    .groupBy(waarde)
    .having(gte(count(), threshold))
    .orderBy(desc(aantal), waarde);
}

function offenders(db: Db, soort: "ip" | "account", van: string, tot: string, threshold: number): Verdacht[] {
  return offenderQuery(db, soort, van, tot, threshold)
    .all()
    .map((r) => ({ soort, ...r }));
}

export async function runBeveiligingslogAnalyse(deps: Deps<Store>, now: Date): Promise<JobResult<BeveiligingslogAnalyseBody>> {
  const { db } = deps.store;
  const van = new Date(now.getTime() - WINDOW_MS).toISOString();
  const tot = now.toISOString();
  const drempels = { ip: deps.config.inlogDrempelIp, account: deps.config.inlogDrempelAccount };

  const ips = offenders(db, "ip", van, tot, drempels.ip);
  const accounts = offenders(db, "account", van, tot, drempels.account);
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

export const beveiligingslogAnalyseJob = defineJob({
  name: "beveiligingslog-analyse",
  summary: "Zoekt brute-force-pogingen in de mislukte inlogpogingen van het afgelopen uur",
  description:
    "Telt de mislukte inlogpogingen in [nu − 1 uur, nu] per IP-adres en per account. Een IP-adres of account waarvan het aantal " +
    "de drempel (INLOG_DREMPEL_IP, INLOG_DREMPEL_ACCOUNT) bereikt, is verdacht: 409 met elke overtreder (soort, waarde, aantal, eerste en laatste poging) " +
    "en een alarm (`type` = `login-bruteforce`). Anders 200 met een lege lijst.",
  run: (deps, now) => runBeveiligingslogAnalyse(onSqlite(deps, "beveiligingslog-analyse"), now),
  responses: {
    200: { description: "Niets verdachts in het afgelopen uur.", schema: BeveiligingslogAnalyseBody },
    409: { description: "Een drempel is bereikt; alarm verstuurd.", schema: BeveiligingslogAnalyseBody },
  },
});
