// beveiligingslog-analyse: failed login attempts of the last hour per
// IP address and per account against INLOG_DREMPEL_IP / INLOG_DREMPEL_ACCOUNT.
//
// "A threshold is passed" when the count reaches it: with a threshold of 20, the
// 20th failure from one address raises the alarm (count >= threshold). That reads
// the setting as "20 failures an hour is already too many".
import { and, count, desc, gte, lte, sql, type Column, type SQL } from "drizzle-orm";
import { t, type Static } from "elysia";
import { loginAttempts } from "../../db/schema.ts";
import type { Db } from "../db.ts";
import type { AnyStore, Deps } from "../deps.ts";
import { offenderQueryPg } from "../pg/status.ts";
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

/** The columns of login_attempts the offender rule reads, on either store's schema. */
export interface LoginAttemptColumns {
  tijdstip: Column;
}

/**
 * Who is an offender, once for both stores (offenderQuery here, offenderQueryPg in
 * src/pg/status.ts): failed attempts in the window, grouped per IP address or account,
 * counted, and kept when the count reaches the threshold. Each store adds its own term
 * for "failed" (its partial index's literal) and for byte order of the value.
 */
export const offenderRule = {
  /** The last hour, [now − 1 h, now], inclusive at both ends. */
  window(now: Date): { van: string; tot: string } {
    return { van: new Date(now.getTime() - WINDOW_MS).toISOString(), tot: now.toISOString() };
  },
  /** `failed`: the store's term for a failed attempt, the one its partial index is defined by. */
  inWindow: (c: LoginAttemptColumns, failed: SQL, van: string, tot: string) => and(failed, gte(c.tijdstip, van), lte(c.tijdstip, tot)),
  /** count >= threshold: the 20th failure with a threshold of 20 is the alarm. */
  reaches: (threshold: number) => gte(count(), threshold),
};

/** One offender as both stores' queries return it: most attempts first, then the value in byte order. */
export interface OffenderRow {
  waarde: string;
  aantal: number;
  eerste: string;
  laatste: string;
}

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
    .where(offenderRule.inWindow(a, sql`${a.gelukt} = 0`, van, tot))
    .groupBy(waarde)
    .having(offenderRule.reaches(threshold))
    // BINARY, SQLite's default collation: byte order
    .orderBy(desc(aantal), waarde);
}

async function offenders(store: AnyStore, soort: "ip" | "account", van: string, tot: string, threshold: number): Promise<OffenderRow[]> {
  return store.kind === "pg" ? offenderQueryPg(store.db, soort, van, tot, threshold) : offenderQuery(store.db, soort, van, tot, threshold).all();
}

export async function runBeveiligingslogAnalyse(deps: Deps, now: Date): Promise<JobResult<BeveiligingslogAnalyseBody>> {
  const { van, tot } = offenderRule.window(now);
  const drempels = { ip: deps.config.inlogDrempelIp, account: deps.config.inlogDrempelAccount };

  const ips = (await offenders(deps.store, "ip", van, tot, drempels.ip)).map((r) => ({ soort: "ip" as const, ...r }));
  const accounts = (await offenders(deps.store, "account", van, tot, drempels.account)).map((r) => ({ soort: "account" as const, ...r }));
  const aantalVerdacht = { ip: ips.length, account: accounts.length };
  const verdacht: Verdacht[] = [...ips.slice(0, MAX_LISTED), ...accounts.slice(0, MAX_LISTED)];
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
  run: (deps, now) => runBeveiligingslogAnalyse(deps, now),
  responses: {
    200: { description: "Niets verdachts in het afgelopen uur.", schema: BeveiligingslogAnalyseBody },
    409: { description: "Een drempel is bereikt; alarm verstuurd.", schema: BeveiligingslogAnalyseBody },
  },
});
