// The e-mail channel of the alarm sink: mails the daily-report recipient for the
// alarms a person must act on today, and stays quiet for the rest (missed jobs,
// brute-force attempts and mail failures are in the daily report and the log: a
// weekrapport or dagrapport run with mail failures ends as fout or afwijking, which the
// next daily report shows in its job table and as a point of its status; a
// mail-failure alarm mailed through the failing mail server would go nowhere anyway).
// A condition an hourly check keeps finding is mailed when it starts or changes and then
// once a day (mailAlarmChannel), not every hour, whichever instance raises it. Storage
// that takes no writes (storage-unwritable) is mailed although it is raised per request:
// every job then fails at its first write, so no report or check can tell the operator;
// at most once an hour per process (Guidance.onceEveryMs).
import { Alarm as AlarmTemplate, type AlarmProps } from "../../emails/Alarm.tsx";
import { displayText, formatDatum } from "../format.ts";
import { renderEmail } from "../mail/render.ts";
import { surelyNotDelivered, type Mailer } from "../mail/mailer.ts";
import type { AnyStore } from "../deps.ts";
import { claimMail, databaseAlarmMemory, processAlarmMemory, type MailClaim } from "./alarm-memory.ts";
import { forOperator, type Alarm, type AlarmType } from "./alarm.ts";

interface Guidance {
  titel: string;
  watTeDoen: string[];
  /**
   * At most one mail of this type per this many milliseconds, remembered in this process
   * only (mailAlarmChannel). For an alarm raised per request while it lasts, whose
   * condition cannot be kept in alarm_mails.
   */
  onceEveryMs?: number;
}

/** How often storage-unwritable is mailed at most while it lasts (per process). */
export const STORAGE_MAIL_EVERY_MS = 3600_000;

/** The alarms that are mailed, with what the recipient should do. */
export const MAILED_ALARMS: Partial<Record<AlarmType, Guidance>> = {
  "audit-chain-broken": {
    titel: "Auditketen gebroken",
    watTeDoen: [
      "Verander niets aan de database en maak direct een kopie van het databasebestand en het ankerbestand (AUDIT_ANKER_BESTAND): dat is het bewijs.",
      "Zoek in de gegevens hieronder de tenant en het volgnummer van de eerste fout en vergelijk die entries met een back-up van vóór de fout.",
      "Ga na wie schrijftoegang tot de database had (host, back-up, beheerders) en behandel het als mogelijk beveiligingsincident.",
      "Roep audit-verificatie opnieuw aan nadat de oorzaak bekend is; de uitkomst staat ook in het volgende dagrapport.",
    ],
  },
  "backup-failure": {
    titel: "Back-up mislukt",
    watTeDoen: [
      "Lees de foutmelding en exitcode hieronder en het log van de back-uptaak op de host.",
      "Los de oorzaak op (schijfruimte, rechten, bereikbaarheid van de opslag) en start de back-up met de hand opnieuw.",
      "Controleer daarna dat backup-status een geslaagde run meldt (het dagrapport toont dan OK).",
    ],
  },
  "backup-missing": {
    titel: "Back-up ontbreekt of is te oud",
    watTeDoen: [
      "Controleer of de back-uptaak in de crontab van de host staat en gedraaid heeft (journalctl / syslog van cron).",
      "Controleer dat de back-uptaak na elke run backup-status aanroept met het juiste token.",
      "Start een back-up met de hand en kijk of die binnen BACKUP_MAX_UREN als geslaagd wordt gemeld.",
    ],
  },
  "clock-ahead": {
    titel: "Klok van de host loopt voor: retentie gestopt",
    watTeDoen: [
      "Controleer de tijd op de host (timedatectl) en, bij PostgreSQL, op de databaseserver; zet NTP aan en de klok zo nodig goed.",
      "Herstart daarna de dienst (systemctl restart nachtwacht): die neemt de klok bij zijn start als uitgangspunt.",
      "Roep de genoemde retentietaak opnieuw aan en controleer dat die 200 antwoordt.",
    ],
  },
  "db-integrity": {
    titel: "Database-integriteit aangetast",
    watTeDoen: [
      "Stop schrijvende processen waar dat kan en maak een kopie van het databasebestand met de -wal en -shm bestanden.",
      "Voer `sqlite3 <bestand> 'PRAGMA integrity_check'` uit op de kopie voor de volledige lijst van fouten.",
      "Herstel zo nodig de laatste goede back-up en controleer daarna de auditketens met audit-verificatie.",
    ],
  },
  "storage-unwritable": {
    titel: "Opslag niet schrijfbaar (schijf vol of alleen-lezen)",
    watTeDoen: [
      "Zolang dit duurt start geen taak en slaat de schrijf-API niets op (503): er komt geen dagrapport en backup-controle en taken-controle melden niets. Alleen deze e-mail en het log (journalctl -u nachtwacht) zeggen het.",
      "Kijk hoeveel ruimte vrij is op de schijf van de database en het ankerbestand (df -h /var/lib/nachtwacht) en maak ruimte vrij; bij PostgreSQL (53100) op de schijf van de databaseserver.",
      "Is er ruimte maar is de schijf alleen-lezen (SQLITE_READONLY, EROFS) of geeft ze schrijffouten (SQLITE_IOERR): zoek de oorzaak in dmesg, herstel de schijf en herstart de service. Bij SQLITE_CANTOPEN: controleer dat de map van de database bestaat en dat de service erin mag schrijven; bestaat ze en mag dat, dan kan de service door haar bestandsdescriptors heen zijn (EMFILE: vergelijk `ls /proc/<pid>/fd | wc -l` met LimitNOFILE van de unit) en helpt een herstart.",
      "Bij PostgreSQL alleen-lezen (25006): na een failover wijst DATABASE_URL naar een standby, of default_transaction_read_only staat aan. Wijs DATABASE_URL naar de primaire server (of zet de instelling terug) en herstart de service.",
      "Roep daarna dagrapport en taken-controle met de hand aan en controleer dat ze 200 antwoorden, behalve een taak waarvan dit alarm zegt dat ze voltooid is en niet opnieuw moet worden uitgevoerd. Dit alarm wordt hoogstens eens per uur gemaild zolang het duurt.",
    ],
    // Not through alarm_mails (claimMail): that table is on the storage that takes no
    // writes, and a memory that cannot be written mails every raise, which here is every
    // failing request of the write API. So this process remembers it, by type and job: a
    // restart or a second instance mails it once more.
    onceEveryMs: STORAGE_MAIL_EVERY_MS,
  },
};

const MAX_CONTEXT_ROWS = 25;
const MAX_VALUE_CHARS = 600;

/** A context value as one readable line: `tenant: Beta BV, seq: 7; tenant: …` rather than JSON. */
function readable(v: unknown, depth = 0): string {
  if (v === null || v === undefined) return "-";
  if (typeof v === "string") return v;
  if (typeof v === "number" || typeof v === "boolean") return String(v);
  if (depth >= 2) return JSON.stringify(v);
  if (Array.isArray(v)) return v.length === 0 ? "(geen)" : v.map((x) => readable(x, depth + 1)).join("; ");
  if (typeof v === "object") {
    return Object.entries(v as Record<string, unknown>)
      .filter(([, x]) => x !== undefined)
      .map(([k, x]) => `${k}: ${readable(x, depth + 1)}`)
      .join(", ");
  }
  return String(v);
}

function contextRows(context: Record<string, unknown> | undefined): AlarmProps["context"] {
  if (!context) return [];
  const rows = Object.entries(context).map(([sleutel, v]) => {
    let waarde = displayText(readable(v));
    if (waarde.length > MAX_VALUE_CHARS) waarde = waarde.slice(0, MAX_VALUE_CHARS - 1) + "…";
    return { sleutel, waarde };
  });
  if (rows.length > MAX_CONTEXT_ROWS) {
    const rest = rows.length - MAX_CONTEXT_ROWS;
    return [...rows.slice(0, MAX_CONTEXT_ROWS), { sleutel: "…", waarde: `nog ${rest} velden, zie het log` }];
  }
  return rows;
}

export function alarmEmailProps(alarm: Alarm, now: Date, tijdzone: string): AlarmProps | null {
  const guidance = MAILED_ALARMS[alarm.type];
  if (!guidance) return null;
  // The operator's own mailbox: the personal part too.
  const { message, context } = forOperator(alarm);
  return {
    type: alarm.type,
    titel: guidance.titel,
    // Every mailed alarm passes here: its message and context hold tenant names and other
    // text of the application's (audit-verificatie's), shown without layout characters in
    // the body as in the subject (a U+202E reversed the rest of the alarm).
    message: displayText(message),
    tijdstip: formatDatum(now, tijdzone),
    tijdzone,
    context: contextRows(context),
    watTeDoen: guidance.watTeDoen,
  };
}

export function alarmSubject(p: AlarmProps): string {
  // The message may hold tenant names: a subject line shows it without layout characters.
  const shown = displayText(p.message);
  const message = shown.length > 120 ? shown.slice(0, 119) + "…" : shown;
  return `ALARM ${p.titel}: ${message}`;
}

/**
 * An alarm channel (src/alarms/sink.ts) that mails `recipient` for the serious alarm
 * types only. A failed send rejects; the sink logs it and the other channels go on.
 *
 * An alarm with a `condition` (src/alarms/alarm.ts) is mailed when its condition is new
 * or its state changed, and again REMINDER_MS after its last mail while it stays the
 * same, by the alarm's time (`clock`): backup-controle and taken-controle raise it every
 * hour (mailDue, src/alarms/alarm-memory.ts). The memory is `store`'s table alarm_mails,
 * shared by every instance on the database, so a condition is mailed once whichever
 * instance raises it, and a restart forgets nothing; without a store, this process's
 * (a restart forgets it, so the first raise after one is mailed). A send that surely
 * failed (surelyNotDelivered) is forgotten, so the next raise tries again; one that
 * perhaps arrived is not sent again before its reminder. A condition its check found
 * gone (settled) is forgotten: when it comes back, in the same state too, it is mailed at
 * once. A memory that cannot be read or written (the database down) does not hold a
 * mail back: it is sent, a duplicate at most.
 */
export function mailAlarmChannel(o: { mailer: Mailer; recipient: string; tijdzone: string; clock: () => Date; store?: AnyStore }) {
  const memory = o.store ? databaseAlarmMemory(o.store) : processAlarmMemory();
  // Per type with onceEveryMs, and per job: when this process last mailed it (by the alarm's time).
  const lastMailed = new Map<string, number>();
  /**
   * The claim of a type with onceEveryMs, as claimMail's for a condition: due when this
   * process did not mail it within the interval (or mailed it at a later time: the clock
   * was put back), marked at once, before any await, so that requests failing together
   * mail it once. Apart per job (context.job): a job's own alarm (one that completed but
   * whose end was not recorded: do not run it again) is not held back by the write API's
   * requests that failed before it; there are a dozen jobs. Null for the other types:
   * every raise is mailed.
   */
  const onceEvery = (alarm: Alarm, at: number): MailClaim | null => {
    const every = MAILED_ALARMS[alarm.type]?.onceEveryMs;
    if (every === undefined) return null;
    const job = alarm.context?.job;
    const key = `${alarm.type}\n${typeof job === "string" ? job : ""}`;
    const last = lastMailed.get(key);
    if (last !== undefined && at >= last && at - last < every) return { due: false };
    lastMailed.set(key, at);
    return {
      due: true,
      release: async () => {
        if (lastMailed.get(key) !== at) return;
        if (last === undefined) lastMailed.delete(key);
        else lastMailed.set(key, last);
      },
    };
  };
  return {
    name: "e-mail",
    /** The check found the condition gone: its next raise is a new condition, mailed at once. */
    async settled(about: string): Promise<void> {
      // Looked up first: most hourly runs find nothing remembered, and then write nothing
      // (on SQLite a write waits for the write lock the host application may hold).
      if (await memory.read(about)) await memory.forget(about);
    },
    async raise(alarm: Alarm): Promise<void> {
      const now = o.clock();
      const props = alarmEmailProps(alarm, now, o.tijdzone);
      if (!props) return;
      // Marked as mailed before the mail goes out: a raise of the same condition meanwhile
      // (another job, another instance) does not mail it twice.
      const claim = alarm.condition ? await claimMail(memory, alarm.condition, now) : onceEvery(alarm, now.getTime());
      if (claim && !claim.due) return;
      let sending = false;
      try {
        const { html, text } = await renderEmail(AlarmTemplate, props);
        sending = true;
        await o.mailer.send({ to: o.recipient, subject: alarmSubject(props), html, text });
      } catch (e) {
        // Not rendered, or surely not delivered: forgotten, so the next raise tries again.
        if (claim && (!sending || surelyNotDelivered(e))) await claim.release();
        throw e;
      }
    },
  };
}
