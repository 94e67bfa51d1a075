// beveiligingslog-analyse: failed login attempts of the last hour per
// IP address and per account against INLOG_DREMPEL_IP / INLOG_DREMPEL_ACCOUNT.
//
// "A threshold is passed" when the count reaches it: with a threshold of 20, the
// 20th failure from one address raises the alarm (count >= threshold). That reads
// the setting as "20 failures an hour is already too many".
//
// Late deliveries: the window is on `tijdstip`, the moment the application gives, and
// the application keeps a batch nachtwacht did not take in its outbox and sends it
// again later (docs/integration.md). A batch that arrives more than ~45 minutes late
// lies before every future window. So each run also judges the failed attempts stored
// since the previous run (ids above the watermark, service_meta
// 'beveiligingslog-gezien') whose moment lies before its window: over the whole hours the
// quarter-hourly runs would have judged them in, had they arrived in time, together with
// every other failed attempt stored in those hours (a burst that straddles this run's
// window start, or that came in two deliveries, is counted whole).
import { and, count, desc, eq, gt, gte, isNotNull, lt, lte, sql, type Column, type SQL } from "drizzle-orm";
import { t, type Static } from "elysia";
import { jobRuns, loginAttempts, serviceMeta } from "../../db/schema.ts";
import type { Alarm } from "../alarms/alarm.ts";
import { putMeta, writeTransaction, type Db } from "../db.ts";
import type { AnyStore, Deps } from "../deps.ts";
import { lateFailuresPg, offenderQueryPg, seenStatePg, storedLoginIdsPg, writeSeenUpToPg } from "../pg/status.ts";
import { defineJob, type JobResult } from "./job.ts";
import { recordPostponement } from "./late-postponed.ts";
import { dateTime, integer, enumOf } from "./schema.ts";

/** Offenders listed per kind; a wider attack is summed up in `aantalVerdacht`. */
const MAX_LISTED = 100;
const WINDOW_MS = 3600_000;
/** The job's schedule (every quarter hour): late attempts are judged in the windows of the runs they missed. */
const QUARTER_MS = 15 * 60_000;
/**
 * Late failed attempts read per run (an id and a moment each, a few hundred KiB): a
 * larger backlog (an outbox emptied after days) is carried to the next runs by the
 * watermark, which then stops at the last attempt read.
 */
export const MAX_LATE_ROWS = 10_000;
/** Missed windows judged per run (a day's worth): two indexed queries each. Beyond them, as MAX_LATE_ROWS. */
export const MAX_LATE_WINDOWS = 96;
/**
 * service_meta key: the highest login_attempts id a run has judged (ids grow in the order
 * attempts are stored, on PostgreSQL too: see storedLoginIdsPg). Not sealed, like the other
 * job state in service_meta: a database writer could raise it so late attempts are never
 * judged (they can as well delete the attempts), or lower it so old attempts are judged
 * again (repeat alarms, each run bounded by MAX_LATE_ROWS); the window of the last hour
 * does not depend on it.
 */
export const SEEN_KEY = "beveiligingslog-gezien";

export const Verdacht = t.Object({
  soort: enumOf(["ip", "account"]),
  waarde: t.String({ description: "Het IP-adres of de accountnaam." }),
  aantal: integer({ minimum: 1, description: "Mislukte pogingen in het venster." }),
  eerste: dateTime(),
  laatste: dateTime(),
});
export type Verdacht = Static<typeof Verdacht>;

export const LaatVerdacht = t.Object({
  ...Verdacht.properties,
  venster: t.Object({ van: dateTime(), tot: dateTime() }, { description: "Het uur waarin de drempel werd bereikt: het venster van de run die deze pogingen had moeten zien." }),
  teLaat: integer({
    minimum: 0,
    description: "Minuten tussen `laatste` en deze analyse: hoogstens zo laat kwamen de pogingen binnen (na de vorige analyse). De aanval was toen, niet nu.",
  }),
});
export type LaatVerdacht = Static<typeof LaatVerdacht>;

const perSoort = (description: string) => t.Object({ ip: integer({ minimum: 0 }), account: integer({ minimum: 0 }) }, { description });

export const BeveiligingslogAnalyseBody = t.Object({
  ok: t.Boolean(),
  venster: t.Object({ van: dateTime(), tot: dateTime() }, { description: "Het afgelopen uur: [van, tot]." }),
  drempels: perSoort("INLOG_DREMPEL_IP en INLOG_DREMPEL_ACCOUNT."),
  verdacht: t.Array(Verdacht, { description: "Eerst de IP-adressen, dan de accounts, elk met de meeste pogingen voorop; hoogstens 100 van elk." }),
  aantalVerdacht: perSoort("Hoeveel IP-adressen en accounts de drempel bereikten (ook voorbij de 100 in `verdacht`)."),
  laat: t.Object(
    {
      pogingen: integer({ minimum: 0, description: "Mislukte pogingen van vóór het venster die sinds de vorige analyse binnenkwamen en nu zijn beoordeeld." }),
      verdacht: t.Array(LaatVerdacht, {
        description:
          "Wie in een van die uren de drempel bereikte met ten minste één te laat ontvangen poging, elk in het uur met de meeste pogingen; " +
          "wie al in `verdacht` staat (het afgelopen uur) niet nogmaals. Eerst de IP-adressen, dan de accounts, hoogstens 100 van elk.",
      }),
      aantalVerdacht: perSoort("Hoeveel IP-adressen en accounts in die uren de drempel bereikten (zonder wie al in `verdacht` staat)."),
      meer: t.Boolean({
        description: `true: er wachten meer te laat ontvangen pogingen dan één run leest (${MAX_LATE_ROWS} pogingen, ${MAX_LATE_WINDOWS} uren), of ze zijn uitgesteld; de volgende run gaat verder.`,
      }),
      uitgesteld: t.Boolean({
        description:
          "true: de te laat ontvangen pogingen zijn deze run niet beoordeeld, omdat er op dat moment een partij inlogpogingen werd opgeslagen (PostgreSQL); " +
          "de volgende run beoordeelt ze. Het afgelopen uur is wel beoordeeld.",
      }),
    },
    {
      description:
        "Te laat ontvangen pogingen (bv. uit de outbox van de applicatie na een storing): hun tijdstip ligt vóór het venster, maar geen eerdere analyse zag ze. " +
        "Ze worden beoordeeld in de uren van de runs die ze hadden moeten zien, samen met de andere mislukte pogingen in die uren, met dezelfde drempels.",
    },
  ),
});
export type BeveiligingslogAnalyseBody = Static<typeof BeveiligingslogAnalyseBody>;

/** The columns of login_attempts the offender rule reads, on either store's schema. */
export interface LoginAttemptColumns {
  id: Column;
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
  /**
   * The rows counted: failed (`failed`, the store's term, the one its partial index is
   * defined by) in [van, tot]. In a missed window (`ids`), every one stored up to
   * ids.upTo, the ones judged before too: the run that missed them would have counted
   * them together, and a burst delivered in two parts, or straddling this run's window
   * start, only reaches the threshold whole. Not above upTo: those are the next run's.
   */
  where: (c: LoginAttemptColumns, failed: SQL, van: string, tot: string, ids?: StoredIds) =>
    and(failed, gte(c.tijdstip, van), lte(c.tijdstip, tot), ids && lte(c.id, ids.upTo)),
  /**
   * count >= threshold: the 20th failure with a threshold of 20 is the alarm. In a missed
   * window, only with at least one attempt stored after the watermark: what an earlier
   * run judged whole is not alarmed again, but an hour that gains late attempts is
   * judged again, and alarmed again if it reaches the threshold (new information).
   */
  having: (c: LoginAttemptColumns, threshold: number, ids?: StoredIds) => and(gte(count(), threshold), ids && sql`max(${c.id}) > ${ids.after}`),
  /** Only the attempts stored in (after, upTo]: the late ones this run reads. */
  stored: (c: LoginAttemptColumns, ids: StoredIds) => and(gt(c.id, ids.after), lte(c.id, ids.upTo)),
};

/** A range of login_attempts ids, (after, upTo]. */
export interface StoredIds {
  after: number;
  upTo: number;
}

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
export function offenderQuery(db: Db, column: "ip" | "account", van: string, tot: string, threshold: number, ids?: StoredIds) {
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
    .where(offenderRule.where(a, sql`${a.gelukt} = 0`, van, tot, ids))
    .groupBy(waarde)
    .having(offenderRule.having(a, threshold, ids))
    // BINARY, SQLite's default collation: byte order
    .orderBy(desc(aantal), waarde);
}

async function offenders(store: AnyStore, soort: "ip" | "account", van: string, tot: string, threshold: number, ids?: StoredIds): Promise<OffenderRow[]> {
  return store.kind === "pg" ? offenderQueryPg(store.db, soort, van, tot, threshold, ids) : offenderQuery(store.db, soort, van, tot, threshold, ids).all();
}

/** What a run knows of the watermark: the stored value (unchecked), and whether a run of this job ever ended here. */
export interface SeenState {
  value: string | undefined;
  ended: boolean;
}

function seenStateSqlite(db: Db): SeenState {
  const row = db.select({ value: serviceMeta.value }).from(serviceMeta).where(eq(serviceMeta.key, SEEN_KEY)).get();
  const run = db
    .select({ id: jobRuns.id })
    .from(jobRuns)
    .where(and(eq(jobRuns.job, "beveiligingslog-analyse"), isNotNull(jobRuns.beeindigd)))
    .limit(1)
    .get();
  return { value: row?.value, ended: run !== undefined };
}

/**
 * Where this run's late attempts begin: after the watermark. Without one (a database that
 * never had this job's run end: all its attempts are unjudged), from the first attempt;
 * on a database the job ran on before the watermark existed (or whose watermark a writer
 * removed or spoiled), from now on, as before: which of its older rows came late cannot
 * be told, and judging its whole history would raise its old alarms again.
 */
export function seenAfter(state: SeenState, upTo: number): number {
  if (state.value !== undefined && /^(0|[1-9][0-9]{0,15})$/.test(state.value)) return Math.min(Number(state.value), upTo);
  return state.ended ? upTo : 0;
}

/** The highest id stored, on SQLite: its one writer at a time commits ids in order. */
export function storedIdsSqlite(db: Db): number {
  return db.select({ id: sql<number>`coalesce(max(${loginAttempts.id}), 0)` }).from(loginAttempts).get()!.id;
}

/** Failed attempts stored in `ids` with a moment before `before`, in the order stored: at most `limit`. */
export function lateFailuresQuery(db: Db, ids: StoredIds, before: string, limit: number) {
  const a = loginAttempts;
  return db
    .select({ id: a.id, tijdstip: a.tijdstip })
    .from(a)
    .where(and(sql`${a.gelukt} = 0`, offenderRule.stored(a, ids), lt(a.tijdstip, before)))
    .orderBy(a.id)
    .limit(limit);
}

function writeSeenSqlite(db: Db, value: number): void {
  putMeta(db, SEEN_KEY, String(value));
}

/** The windows [t − 1 h, t] of the quarter-hourly runs (t on the quarter hour) that hold moment `x`. */
function windowsHolding(x: number): number[] {
  const ends: number[] = [];
  for (let t = Math.ceil(x / QUARTER_MS) * QUARTER_MS; t <= x + WINDOW_MS; t += QUARTER_MS) ends.push(t);
  return ends;
}

/**
 * Of the late attempts (in the order stored), those this run judges and the windows they
 * fall in: all of them, unless their windows exceed MAX_LATE_WINDOWS; then up to the last
 * attempt that fits. `upTo` is the last id judged; the next run starts after it.
 */
export function lateWindows(rows: readonly { id: number; tijdstip: string }[], ids: StoredIds, limitReached: boolean): { ends: number[]; upTo: number; pogingen: number; meer: boolean } {
  const ends = new Set<number>();
  let pogingen = 0;
  for (const r of rows) {
    const own = windowsHolding(Date.parse(r.tijdstip)).filter((t) => !ends.has(t));
    if (ends.size + own.length > MAX_LATE_WINDOWS && pogingen > 0) {
      return { ends: [...ends].sort((a, b) => a - b), upTo: rows[pogingen - 1]!.id, pogingen, meer: true };
    }
    for (const t of own) ends.add(t);
    pogingen++;
  }
  const upTo = limitReached ? rows[rows.length - 1]!.id : ids.upTo;
  return { ends: [...ends].sort((a, b) => a - b), upTo, pogingen, meer: limitReached };
}

/** Each offender once, in the window where it had the most attempts (the first such); most first. */
function strongest(found: LaatVerdacht[]): LaatVerdacht[] {
  const best = new Map<string, LaatVerdacht>();
  for (const v of found) {
    const had = best.get(v.waarde);
    if (!had || v.aantal > had.aantal) best.set(v.waarde, v);
  }
  return [...best.values()].sort((a, b) => b.aantal - a.aantal || (a.eerste < b.eerste ? -1 : a.eerste > b.eerste ? 1 : 0));
}

/** The late part of the body, and the id the watermark moves to (none: it stays as stored). */
type LateResult = BeveiligingslogAnalyseBody["laat"] & { upTo?: number };

/**
 * A run that could not tell which ids are committed (PostgreSQL: a batch of login attempts
 * was being stored, see storedLoginIdsPg): nothing late judged, the watermark kept, so
 * the next run judges them.
 */
const POSTPONED: Omit<LateResult, "upTo"> = { pogingen: 0, verdacht: [], aantalVerdacht: { ip: 0, account: 0 }, meer: true, uitgesteld: true };

/** The offenders of the last hour, per kind: the late part does not list them again. */
type Reported = Record<"ip" | "account", ReadonlySet<string>>;

/**
 * The late attempts: failed, stored after the watermark, dated before this run's window
 * `van`. Each whole window [t − 1 h, t] of a run that missed them is judged by offenders,
 * the same rule as the last hour's, over every failed attempt stored in it so far; an
 * offender counts there only with at least one attempt stored after the watermark
 * (offenderRule.having). Called after the last hour's query: whatever was stored before
 * that is at or below the ids read here, so none of it is taken for new next run.
 */
async function judgeLate(store: AnyStore, now: Date, van: string, drempels: { ip: number; account: number }, reported: Reported): Promise<LateResult> {
  let state: SeenState;
  let stored: StoredIds;
  let rows: { id: number; tijdstip: string }[];
  if (store.kind === "pg") {
    const upTo = await storedLoginIdsPg(store);
    if (upTo === null) return { ...POSTPONED };
    state = await seenStatePg(store.db);
    stored = { after: seenAfter(state, upTo), upTo };
    rows = await lateFailuresPg(store.db, stored, van, MAX_LATE_ROWS);
  } else {
    const upTo = storedIdsSqlite(store.db);
    state = seenStateSqlite(store.db);
    stored = { after: seenAfter(state, upTo), upTo };
    rows = lateFailuresQuery(store.db, stored, van, MAX_LATE_ROWS).all();
  }
  const late = lateWindows(rows, stored, rows.length === MAX_LATE_ROWS);
  const judged: StoredIds = { after: stored.after, upTo: late.upTo };
  const found = { ip: [] as LaatVerdacht[], account: [] as LaatVerdacht[] };
  for (const t of late.ends) {
    const venster = { van: new Date(t - WINDOW_MS).toISOString(), tot: new Date(t).toISOString() };
    for (const soort of ["ip", "account"] as const) {
      for (const r of await offenders(store, soort, venster.van, venster.tot, drempels[soort], judged)) {
        // Already an offender of the last hour: reported there, once in this run's alarm.
        if (reported[soort].has(r.waarde)) continue;
        found[soort].push({ soort, ...r, venster, teLaat: Math.max(0, Math.floor((now.getTime() - Date.parse(r.laatste)) / 60_000)) });
      }
    }
  }
  const ips = strongest(found.ip);
  const accounts = strongest(found.account);
  return {
    pogingen: late.pogingen,
    verdacht: [...ips.slice(0, MAX_LISTED), ...accounts.slice(0, MAX_LISTED)],
    aantalVerdacht: { ip: ips.length, account: accounts.length },
    meer: late.meer,
    uitgesteld: false,
    // Written only when it moves: most runs find nothing new (on SQLite a write waits for the lock).
    upTo: state.value === String(late.upTo) ? undefined : late.upTo,
  };
}

/** Moves the watermark to `upTo`, after the run's alarm: a run that dies before it leaves those attempts to the next run. */
async function writeSeen(store: AnyStore, upTo: number | undefined): Promise<void> {
  if (upTo === undefined) return;
  if (store.kind === "pg") return writeSeenUpToPg(store.db, upTo);
  const s = store;
  await writeTransaction(s.sqlite, () => writeSeenSqlite(s.db, upTo));
}

const topOf = (vs: readonly Verdacht[]) =>
  vs
    .slice()
    .sort((a, b) => b.aantal - a.aantal)
    .slice(0, 5)
    .map((v) => `${v.soort} ${v.waarde} (${v.aantal}×)`)
    .join(", ");

/**
 * The run's one login-bruteforce alarm. `laat` undefined: the late part failed, and the
 * last hour's offenders are alarmed without it. The offenders' IP addresses and account
 * names (typed by the attacker: mostly e-mail addresses) are its personal part: the
 * journal names them, the error tracker gets the counts and the window only, every
 * quarter hour while an attack lasts.
 */
function bruteforceAlarm(body: Omit<BeveiligingslogAnalyseBody, "laat" | "ok"> & { laat?: BeveiligingslogAnalyseBody["laat"] }): Alarm {
  const { verdacht, aantalVerdacht, laat } = body;
  const parts: string[] = [];
  const named: string[] = [];
  if (verdacht.length > 0) {
    parts.push(`${aantalVerdacht.ip} IP-adres(sen) en ${aantalVerdacht.account} account(s) boven de drempel van mislukte inlogpogingen in het afgelopen uur`);
    named.push(`afgelopen uur: ${topOf(verdacht)}`);
  }
  if (laat === undefined) {
    parts.push("de te laat ontvangen pogingen konden niet worden beoordeeld (zie de run)");
  } else if (laat.verdacht.length > 0) {
    const teLaat = Math.max(...laat.verdacht.map((v) => v.teLaat));
    const eerste = laat.verdacht.reduce((m, v) => (v.eerste < m ? v.eerste : m), laat.verdacht[0]!.eerste);
    parts.push(
      `${laat.aantalVerdacht.ip} IP-adres(sen) en ${laat.aantalVerdacht.account} account(s) boven de drempel in pogingen die te laat binnenkwamen ` +
        `(vanaf ${eerste}, tot ${teLaat} minuten na de poging; de aanval was toen, niet nu)`,
    );
    named.push(`te laat binnengekomen: ${topOf(laat.verdacht)}`);
  }
  const { verdacht: laatVerdacht, ...laatCounts } = laat ?? { verdacht: [] };
  return {
    type: "login-bruteforce",
    message: `Mogelijke brute-force-aanval: ${parts.join("; ")}.`,
    context: { venster: body.venster, drempels: body.drempels, aantalVerdacht, ...(laat ? { laat: laatCounts } : {}) },
    personal: {
      ...(named.length > 0 ? { message: `Meeste pogingen (${named.join("; ")}).` } : {}),
      context: { verdacht: verdacht.slice(0, 20), ...(laat ? { laatVerdacht: laatVerdacht.slice(0, 20) } : {}) },
    },
  };
}

export async function runBeveiligingslogAnalyse(deps: Deps, now: Date): Promise<JobResult<BeveiligingslogAnalyseBody>> {
  const { van, tot } = offenderRule.window(now);
  const drempels = { ip: deps.config.inlogDrempelIp, account: deps.config.inlogDrempelAccount };

  const ips = (await offenders(deps.store, "ip", van, tot, drempels.ip)).map((r) => ({ soort: "ip" as const, ...r }));
  const accounts = (await offenders(deps.store, "account", van, tot, drempels.account)).map((r) => ({ soort: "account" as const, ...r }));
  const aantalVerdacht = { ip: ips.length, account: accounts.length };
  const verdacht: Verdacht[] = [...ips.slice(0, MAX_LISTED), ...accounts.slice(0, MAX_LISTED)];
  const lastHour = { venster: { van, tot }, drempels, verdacht, aantalVerdacht };
  const reported: Reported = { ip: new Set(ips.map((v) => v.waarde)), account: new Set(accounts.map((v) => v.waarde)) };
  let late: LateResult;
  try {
    late = await judgeLate(deps.store, now, van, drempels, reported);
  } catch (err) {
    // Nothing in the late part swallows the last hour's alarm: raised, then the run fails.
    if (verdacht.length > 0) await deps.alarms.raise(bruteforceAlarm(lastHour));
    throw err;
  }
  const { upTo, ...laat } = late;
  const body: BeveiligingslogAnalyseBody = { ok: verdacht.length === 0 && laat.verdacht.length === 0, ...lastHour, laat };
  if (!body.ok) await deps.alarms.raise(bruteforceAlarm(body));
  await writeSeen(deps.store, upTo);
  // Run after run postponed (a stuck batch holding LOCK_LOGIN_IDS): counted for /metrics and the daily report.
  await recordPostponement(deps.store, laat.uitgesteld, now);
  return { status: body.ok ? 200 : 409, body };
}

export const beveiligingslogAnalyseJob = defineJob({
  name: "beveiligingslog-analyse",
  summary: "Zoekt brute-force-pogingen in de mislukte inlogpogingen van het afgelopen uur",
  description:
    "Telt de mislukte inlogpogingen in [nu − 1 uur, nu] per IP-adres en per account. Een IP-adres of account waarvan het aantal " +
    "de drempel (INLOG_DREMPEL_IP, INLOG_DREMPEL_ACCOUNT) bereikt, is verdacht: 409 met elke overtreder (soort, waarde, aantal, eerste en laatste poging) " +
    "en een alarm (`type` = `login-bruteforce`). Anders 200 met een lege lijst. " +
    "Daarnaast beoordeelt elke run de mislukte pogingen die sinds de vorige run binnenkwamen maar een tijdstip vóór het venster hebben " +
    "(te laat afgeleverd, bv. uit de outbox van de applicatie na een storing), met dezelfde drempels, in de uren van de runs die ze hadden moeten zien (`laat`); " +
    "een overtreder daar geeft ook 409 en een alarm dat zegt hoe laat de pogingen binnenkwamen.",
  run: (deps, now) => runBeveiligingslogAnalyse(deps, now),
  responses: {
    200: { description: "Niets verdachts in het afgelopen uur, noch in de te laat ontvangen pogingen.", schema: BeveiligingslogAnalyseBody },
    409: { description: "Een drempel is bereikt; alarm verstuurd.", schema: BeveiligingslogAnalyseBody },
  },
});
