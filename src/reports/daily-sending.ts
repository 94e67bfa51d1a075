// The mark that the daily report for one fire time began to go out: a service_meta row
// `dagrapport-verzending:<fire time ISO>` whose value is the start of the run that wrote
// it (the run's job_runs.gestart), committed before the message goes to the transport,
// as weekrapport reserves each message (weekly_report_deliveries 'verzenden'). It goes
// when the outcome is known: sent, or surely not sent. It stays when the outcome is
// unknown: the process died while sending (SIGKILL, power loss after the .eml went into
// the outbox or the SMTP server took the message), or the transport left it uncertain.
// A later call for the same fire time that finds it does not send again (dagrapport 409
// mogelijkAfgeleverd); taken-controle tells the interrupted run's alarm that the report
// may have gone out. Only the operator removes it (sendingMarkDelete).
import { and, eq, like, lt } from "drizzle-orm";
import { serviceMeta } from "../../db/schema.ts";
import { serviceMeta as serviceMetaPg } from "../../db/schema-pg.ts";
import type { AnyStore } from "../deps.ts";
import { certainDbTransaction } from "../pg/commit.ts";
import { lastFireOf } from "../schedule-due.ts";

const PREFIX = "dagrapport-verzending:";

/** A mark: which fire time's report, and the start of the run that began sending it. */
export interface SendingMark {
  key: string;
  /** The fire time the report is for (ISO). */
  tijdstip: string;
  /** job_runs.gestart of the run that began sending (ISO). */
  gestart: string;
}

/** The fire time a call at `now` reports for: the schedule's newest at or before it (06:00 UTC). */
export function dailyFireTime(now: Date): Date {
  const fired = lastFireOf("dagrapport", now);
  if (fired === null) throw new Error("dagrapport has no fire time at or before now in the schedule table");
  return fired;
}

export function sendingKey(firedAt: Date): string {
  return PREFIX + firedAt.toISOString();
}

/** The SQL an operator runs, after checking the report never arrived, so that the next call sends it. */
export function sendingMarkDelete(key: string): string {
  return `DELETE FROM service_meta WHERE key = '${key}'`;
}

const asMark = (r: { key: string; value: string }): SendingMark => ({ key: r.key, tijdstip: r.key.slice(PREFIX.length), gestart: r.value });

/**
 * Claims the send of `firedAt`'s report for the run started at `gestart`: null when this
 * run holds the mark now (committed), else the mark an earlier run left. Marks of
 * earlier fire times go first: their day has passed, the next report was due since.
 */
export async function claimSending(store: AnyStore, firedAt: Date, gestart: Date): Promise<SendingMark | null> {
  const key = sendingKey(firedAt);
  const value = gestart.toISOString();
  if (store.kind === "pg") {
    await store.db.delete(serviceMetaPg).where(and(like(serviceMetaPg.key, `${PREFIX}%`), lt(serviceMetaPg.key, key)));
    // Looked up when its COMMIT's answer is lost (certainDbTransaction): a mark stored but
    // not known as ours would make this run say "perhaps sent" of a report it never sent.
    const mine = await certainDbTransaction(store.sql, "ISOLATION LEVEL READ COMMITTED", (tx) =>
      tx.insert(serviceMetaPg).values({ key, value }).onConflictDoNothing().returning({ key: serviceMetaPg.key }),
    );
    if (mine.length > 0) return null;
    const [row] = await store.db.select({ key: serviceMetaPg.key, value: serviceMetaPg.value }).from(serviceMetaPg).where(eq(serviceMetaPg.key, key));
    return row ? asMark(row) : claimSending(store, firedAt, gestart);
  }
  const db = store.db;
  db.delete(serviceMeta).where(and(like(serviceMeta.key, `${PREFIX}%`), lt(serviceMeta.key, key))).run();
  const mine = db.insert(serviceMeta).values({ key, value }).onConflictDoNothing().returning({ key: serviceMeta.key }).all();
  if (mine.length > 0) return null;
  const row = db.select({ key: serviceMeta.key, value: serviceMeta.value }).from(serviceMeta).where(eq(serviceMeta.key, key)).get();
  return row ? asMark(row) : claimSending(store, firedAt, gestart);
}

/** The outcome is known (sent, or surely not sent): the mark of this fire time goes. */
export async function releaseSending(store: AnyStore, firedAt: Date): Promise<void> {
  const key = sendingKey(firedAt);
  if (store.kind === "pg") await store.db.delete(serviceMetaPg).where(eq(serviceMetaPg.key, key));
  else store.db.delete(serviceMeta).where(eq(serviceMeta.key, key)).run();
}

/** The mark the run started at `gestart` left, if any: that run began to send the report. */
export async function sendingMarkOfRun(store: AnyStore, gestart: string): Promise<SendingMark | null> {
  const rows =
    store.kind === "pg"
      ? await store.db.select({ key: serviceMetaPg.key, value: serviceMetaPg.value }).from(serviceMetaPg).where(like(serviceMetaPg.key, `${PREFIX}%`))
      : store.db.select({ key: serviceMeta.key, value: serviceMeta.value }).from(serviceMeta).where(like(serviceMeta.key, `${PREFIX}%`)).all();
  // Compared as instants: PostgreSQL gives job_runs.gestart back in its own notation.
  const row = rows.find((r) => Date.parse(r.value) === Date.parse(gestart));
  return row ? asMark(row) : null;
}
