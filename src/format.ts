// Formatting shared by the reports: sizes with 1024-based units, dates as
// dd/mm/yyyy hh:mm in the report time zone, and ISO week keys.
import { DAY_MS } from "./time.ts";

const UNITS = ["B", "KB", "MB", "GB", "TB", "PB"] as const;

/**
 * `512 B`, `1.0 KB`, `1.5 KB`, `23.4 MB`: 1024-based, bytes whole, every larger unit
 * with one decimal. A value that would round to 1024.0 of a unit is shown in the next
 * one (1048575 B is `1.0 MB`, not `1024.0 KB`).
 */
export function formatSize(bytes: number): string {
  if (!Number.isFinite(bytes) || bytes < 0) throw new RangeError(`size must be a finite number ≥ 0, got ${bytes}`);
  if (bytes < 1024) return `${Math.round(bytes)} B`;
  let unit = 1;
  let value = bytes / 1024;
  while (unit < UNITS.length - 1 && Number(value.toFixed(1)) >= 1024) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(1)} ${UNITS[unit]}`;
}

const dateFormats = new Map<string, Intl.DateTimeFormat>();

function dateFormat(timeZone: string): Intl.DateTimeFormat {
  let f = dateFormats.get(timeZone);
  if (!f) {
    // en-GB with h23 gives day/month/year and 00-23 hours; nl-NL would give dashes
    // and a comma. formatToParts keeps the layout ours whatever the locale data does.
    f = new Intl.DateTimeFormat("en-GB", {
      timeZone,
      day: "2-digit",
      month: "2-digit",
      year: "numeric",
      hour: "2-digit",
      minute: "2-digit",
      hourCycle: "h23",
    });
    dateFormats.set(timeZone, f);
  }
  return f;
}

/** `dd/mm/yyyy hh:mm` of an instant in a time zone (e.g. Europe/Amsterdam). */
export function formatDatum(instant: Date | string, timeZone: string): string {
  const d = typeof instant === "string" ? new Date(instant) : instant;
  if (Number.isNaN(d.getTime())) throw new RangeError(`not a date: ${String(instant)}`);
  const parts: Record<string, string> = {};
  for (const p of dateFormat(timeZone).formatToParts(d)) parts[p.type] = p.value;
  return `${parts.day}/${parts.month}/${parts.year} ${parts.hour}:${parts.minute}`;
}

/** `dd/mm/yyyy` of an instant in a time zone. */
export function formatDag(instant: Date | string, timeZone: string): string {
  return formatDatum(instant, timeZone).slice(0, 10);
}

/** ISO 8601 week of an instant, taken in UTC: `2026-W30`. Weeks run Monday to Sunday. */
export function isoWeek(instant: Date): string {
  const day = Date.UTC(instant.getUTCFullYear(), instant.getUTCMonth(), instant.getUTCDate());
  const weekday = (instant.getUTCDay() + 6) % 7; // Monday 0 … Sunday 6
  // The Thursday of this week decides the week's year.
  const thursday = new Date(day + (3 - weekday) * DAY_MS);
  const year = thursday.getUTCFullYear();
  const week = Math.floor((thursday.getTime() - Date.UTC(year, 0, 1)) / (7 * DAY_MS)) + 1;
  return `${year}-W${String(week).padStart(2, "0")}`;
}

/**
 * How a backup report ended, in the words of backup-controle's alarm, the daily report and
 * its e-mail when they name a report dated ahead: it may be a failure the one that counts hides.
 */
export function backupUitkomst(b: { gelukt: boolean; exitCode: number }): string {
  return b.gelukt ? "geslaagd" : `mislukt met exitcode ${b.exitCode}`;
}

/** Dutch count with a noun: `1 bericht`, `3 berichten`. */
export function aantal(n: number, enkelvoud: string, meervoud: string): string {
  return `${n.toLocaleString("nl-NL")} ${n === 1 ? enkelvoud : meervoud}`;
}

/** A number with Dutch thousands separators: `12.345`. */
export function getal(n: number): string {
  return n.toLocaleString("nl-NL");
}

/**
 * Characters that change how the text around them is shown, or split a line: C0 and C1
 * controls, bidi marks, embeddings, overrides and isolates, line and paragraph separators.
 * Tenant names, actions and the like come from the application: a name with U+202E shows
 * the rest of a subject line backwards ("gebroken" as "nekorbeg", or a fake "in orde").
 */
const LAYOUT_CHARACTERS = /[\u0000-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]/g;

/**
 * White space and what breaks a line, as one space each: \s (tab, line feed, U+000B, U+000C,
 * carriage return, NBSP, U+1680, U+2000–U+200A, U+2028, U+2029, U+202F, U+205F, U+3000,
 * U+FEFF) and U+0085 and U+001C–U+001F, which some readers take for line ends. A run of them is
 * one space: sixty NBSPs in a tenant name pushed the subject's real status out of view, and a
 * line separator deleted glued the words on either side together ("failedSTATUS").
 */
const SPACING = /[\s\u0085\u001c-\u001f]+/g;

/**
 * Text from the application for a line a person reads (a subject, a status line, a cell of
 * a report): each run of SPACING as one space, the other LAYOUT_CHARACTERS left out, none
 * at either end (a name starting with an NBSP or U+3000 would put two spaces in a subject).
 * The spaces are folded last, so a space on either side of a character left out is one space.
 */
export function displayText(text: string): string {
  return text.replace(SPACING, " ").replace(LAYOUT_CHARACTERS, "").replace(/ {2,}/g, " ").trim();
}

/** What JSON.stringify leaves as they are of LAYOUT_CHARACTERS (it escapes C0 itself). */
const JSON_UNESCAPED_LAYOUT = /[\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]/g;

/**
 * JSON as one line that a terminal or a log viewer shows as it is: as JSON.stringify, with
 * the C1 controls (U+009B is a one-character ESC [), bidi controls and line separators
 * written as \uXXXX escapes too. The same value when parsed.
 */
export function jsonLine(value: unknown): string {
  return JSON.stringify(value).replace(JSON_UNESCAPED_LAYOUT, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

// Text as both stores keep it: well-formed Unicode without NUL (U+0000). SQLite stores a
// NUL; PostgreSQL's text refuses it, so a row holding one is a 500 there (lost on every
// retry), and a SQLite file holding one cannot move to PostgreSQL (migrate-to). A lone
// UTF-16 surrogate (half of a character, "\ud800" in JSON) is hashed or sealed as
// JavaScript holds it, but both stores keep U+FFFD instead: the entry would never verify
// again (and an e-mail address would be stored as another one). The one rule, spelled
// twice from the same parts: per character for a schema's pattern (which counts its
// length in characters), and as what breaks it for a whole text (isStorableText,
// storableText): the pattern repeated over a whole text backtracks, slower than linear,
// and JavaScriptCore gives up on it (false) at a few million UTF-16 units.
const NUL = "\\u0000";
const HIGH = "\\ud800-\\udbff";
const LOW = "\\udc00-\\udfff";
const SURROGATE = "\\ud800-\\udfff";

/**
 * One character of storable text, as a pattern source: anything but NUL and a surrogate
 * half, or a high and a low half together. Matched per UTF-16 unit, a pair as one
 * character, so the same with or without the u flag. The write API's text fields
 * (textPattern, src/jobs/schema.ts) are made of it.
 */
export const STORABLE_CHARACTER = `(?:[^${NUL}${SURROGATE}]|[${HIGH}][${LOW}])`;

/** What STORABLE_CHARACTER leaves out, wherever it stands in a text: a lone surrogate, or NUL. */
const NOT_STORABLE_SOURCE = `[${HIGH}](?![${LOW}])|(?<![${HIGH}])[${LOW}]|${NUL}`;
const NOT_STORABLE = new RegExp(NOT_STORABLE_SOURCE, "g");

/**
 * Whether both stores keep `s` exactly as it is: every character a STORABLE_CHARACTER.
 * What the write API's text fields take, for the writers that do not go through it
 * (appendAuditEntry, recordLoginAttempt: src/audit/chain.ts).
 */
export function isStorableText(s: string): boolean {
  // The same test as NOT_STORABLE's, natively: it runs for every field of every entry appended (~0.05 against ~0.15 µs).
  return s.isWellFormed() && !s.includes("\u0000");
}

/**
 * `s` as both stores keep it, exactly: a lone surrogate and NUL (which PostgreSQL's text
 * cannot hold; SQLite would keep a lone surrogate as U+FFFD) replaced by U+FFFD, and when
 * `max` is given cut to at most `max` UTF-16 units ending in "…", never inside a
 * character. A row sealed over text that did not survive storage would read as forged.
 */
export function storableText(s: string, max = Infinity): string {
  const clean = s.replace(NOT_STORABLE, "\uFFFD");
  if (clean.length <= max) return clean;
  let end = max - 1;
  const last = clean.charCodeAt(end - 1);
  if (last >= 0xd800 && last <= 0xdbff) end--;
  return clean.slice(0, end) + "…";
}
