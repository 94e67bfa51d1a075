// The e-mail channel's memory of the alarm conditions it mailed (mailAlarmChannel in
// src/alarms/mail-channel.ts): per condition the state mailed and when. Kept in the
// database (alarm_mails) when the channel has one, so that every instance on it shares
// it: the job lease hands the hourly checks from one instance to another between runs,
// and a memory per process mailed a condition again on the other instance (a failed
// backup as backup-failure on one, as backup-missing on the next), or kept quiet about
// its return when the run that found it gone ran elsewhere. A restart forgets nothing.
//
// Not sealed (src/row-seal.ts): a database writer can only cause a duplicate mail or keep
// one back until its daily reminder; the alarm's stderr line and error-tracking event do
// not depend on it.
import { and, eq, lt } from "drizzle-orm";
import { alarmMails } from "../../db/schema.ts";
import { alarmMails as alarmMailsPg } from "../../db/schema-pg.ts";
import { retryWhenBusy, type Store } from "../db.ts";
import type { AnyStore } from "../deps.ts";
import { errorText, log } from "../logger.ts";
import type { PgStore } from "../pg/store.ts";
import { CLOCK_SKEW_LIMIT_MS } from "../pg/clock.ts";
import { DAY_MS } from "../time.ts";
import type { AlarmCondition } from "./alarm.ts";

/** How long a condition in the same state goes unmailed after its mail: a reminder a day. */
export const REMINDER_MS = DAY_MS;

/** Rows mailed longer ago than this are dropped when another condition is mailed: they are due anyway. */
export const FORGOTTEN_AFTER_MS = 30 * DAY_MS;

/** A condition's mail: the state mailed and when (`gemaild`, ISO 8601 as stored). */
export interface MailedMark {
  state: string;
  gemaild: string;
}

/**
 * Where the marks are kept. `swap` is the one conditional write every change goes
 * through: it sets `about` to `next` (null: removes it) only when it still holds
 * `expected` (null: absent), and says whether it did, so that of two instances that
 * find a condition due at once only one mails it.
 */
export interface AlarmMemory {
  read(about: string): Promise<MailedMark | null>;
  swap(about: string, expected: MailedMark | null, next: MailedMark | null): Promise<boolean>;
  forget(about: string): Promise<void>;
  /** Drops the marks dated before `before`. */
  prune(before: string): Promise<void>;
}

/**
 * Whether condition `c` is to be mailed at `at` after its last mail `last`: it is new,
 * its state changed, its reminder is due, or the raise is dated before the last mail
 * (the clock was ahead then and is put right: a mail from a clock a year ahead would
 * otherwise keep it quiet for a year). Before by more than CLOCK_SKEW_LIMIT_MS only:
 * two instances whose clocks differ by a little raising it at once mail it once. A mark
 * whose time does not read is due.
 */
export function mailDue(last: MailedMark | null, c: AlarmCondition, at: number): boolean {
  if (!last || last.state !== c.state) return true;
  const lastAt = Date.parse(last.gemaild);
  return !(at >= lastAt - CLOCK_SKEW_LIMIT_MS) || at - lastAt >= REMINDER_MS;
}

/** What claimMail decided: not due, or due with a way to take the claim back. */
export type MailClaim = { due: false } | { due: true; release(): Promise<void> };

const SWAP_ATTEMPTS = 3;

/**
 * Claims the mail of condition `c` at `now` when it is due (mailDue): marks it as mailed
 * before the mail goes out, so that no other raise (this instance's or another's) mails it
 * meanwhile. `release` puts the previous mark back, when the mark is still this claim's:
 * for a mail that surely did not go out. When the memory cannot be read or written (the
 * database is down), the condition counts as due: better a duplicate than a missed alarm.
 */
export async function claimMail(memory: AlarmMemory, c: AlarmCondition, now: Date): Promise<MailClaim> {
  const mark: MailedMark = { state: c.state, gemaild: now.toISOString() };
  try {
    for (let attempt = 0; attempt < SWAP_ATTEMPTS; attempt++) {
      const last = await memory.read(c.about);
      if (!mailDue(last, c, now.getTime())) return { due: false };
      // Lost to another raise that changed the mark in between: judged again by its mark.
      if (!(await memory.swap(c.about, last, mark))) continue;
      await memory.prune(new Date(now.getTime() - FORGOTTEN_AFTER_MS).toISOString()).catch((e) => log("warn", "alarm memory: old marks not dropped", { error: errorText(e) }));
      return {
        due: true,
        release: () =>
          memory.swap(c.about, mark, last).then(
            () => {},
            (e) => log("error", "alarm memory: a mail that was not sent stays marked as sent until its reminder", { about: c.about, error: errorText(e) }),
          ),
      };
    }
    log("warn", "alarm memory: the mark kept changing under this raise; mailed without it", { about: c.about });
  } catch (e) {
    log("error", "alarm memory unavailable: the alarm is mailed without it (a duplicate at most)", { about: c.about, error: errorText(e) });
  }
  return { due: true, release: async () => {} };
}

/** This process's memory, for a channel without a database: a restart forgets it. */
export function processAlarmMemory(): AlarmMemory {
  const marks = new Map<string, MailedMark>();
  const same = (a: MailedMark | null | undefined, b: MailedMark | null) => (a ?? null) === b || (!!a && !!b && a.state === b.state && a.gemaild === b.gemaild);
  return {
    async read(about) {
      return marks.get(about) ?? null;
    },
    async swap(about, expected, next) {
      if (!same(marks.get(about), expected)) return false;
      if (next) marks.set(about, next);
      else marks.delete(about);
      return true;
    },
    async forget(about) {
      marks.delete(about);
    },
    async prune(before) {
      for (const [about, m] of marks) if (m.gemaild < before) marks.delete(about);
    },
  };
}

/** The memory in `store`'s alarm_mails, shared by every instance on it. */
export function databaseAlarmMemory(store: AnyStore): AlarmMemory {
  return store.kind === "pg" ? pgMemory(store) : sqliteMemory(store);
}

// The writes wait for the write lock without blocking the event loop (retryWhenBusy): the
// host application or another instance may hold it. Each is one statement.
function sqliteMemory(store: Store): AlarmMemory {
  const t = alarmMails;
  const { db, sqlite } = store;
  const held = (about: string, m: MailedMark) => and(eq(t.about, about), eq(t.state, m.state), eq(t.gemaild, m.gemaild));
  const write = <T>(w: () => T) => retryWhenBusy(sqlite, w);
  return {
    async read(about) {
      return db.select({ state: t.state, gemaild: t.gemaild }).from(t).where(eq(t.about, about)).get() ?? null;
    },
    async swap(about, expected, next) {
      const rows = await write(() => {
        if (!expected) return next ? db.insert(t).values({ about, ...next }).onConflictDoNothing().returning({ about: t.about }).all() : [{ about }];
        if (!next) return db.delete(t).where(held(about, expected)).returning({ about: t.about }).all();
        return db.update(t).set(next).where(held(about, expected)).returning({ about: t.about }).all();
      });
      return rows.length > 0;
    },
    async forget(about) {
      await write(() => db.delete(t).where(eq(t.about, about)).run());
    },
    async prune(before) {
      await write(() => db.delete(t).where(lt(t.gemaild, before)).run());
    },
  };
}

// Each statement waits for another session's row lock at most LOCK_TIMEOUT_MS (SESSION).
function pgMemory(store: PgStore): AlarmMemory {
  const t = alarmMailsPg;
  const { db } = store;
  const held = (about: string, m: MailedMark) => and(eq(t.about, about), eq(t.state, m.state), eq(t.gemaild, m.gemaild));
  return {
    async read(about) {
      const [row] = await db.select({ state: t.state, gemaild: t.gemaild }).from(t).where(eq(t.about, about));
      return row ?? null;
    },
    async swap(about, expected, next) {
      let rows: { about: string }[];
      if (!expected) rows = next ? await db.insert(t).values({ about, ...next }).onConflictDoNothing().returning({ about: t.about }) : [{ about }];
      else if (!next) rows = await db.delete(t).where(held(about, expected)).returning({ about: t.about });
      else rows = await db.update(t).set(next).where(held(about, expected)).returning({ about: t.about });
      return rows.length > 0;
    },
    async forget(about) {
      await db.delete(t).where(eq(t.about, about));
    },
    async prune(before) {
      await db.delete(t).where(lt(t.gemaild, before));
    },
  };
}
