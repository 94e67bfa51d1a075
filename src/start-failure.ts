// Why the service could not start, in one line for the operator (the entry point prints
// it and exits 2): the address it cannot listen on, a path it may not write, a database
// of a newer version, a move's copy that was never proved, a marker `zegelsleutel` naming
// a key the start does not trust. Without this such a start ended in a stack trace (and,
// under systemd, in a restart every 2 s with nothing but that trace in the journal).
import { dirname, resolve, sep } from "node:path";
import type { Config } from "./config.ts";
import { SchemaTooNew, UnprovedCopy } from "./db.ts";
import { UntrustedSealKey } from "./row-seal.ts";

/** A start that failed for a reason the operator can mend; the message says which. */
export class StartError extends Error {}

/** What a failed listen on HOST:PORT means, by the system's error code. */
const LISTEN_HINTS: Record<string, string> = {
  EADDRINUSE: "daar luistert al een ander proces (een tweede nachtwacht?); stop het of kies een andere PORT",
  EADDRNOTAVAIL: "dat adres hoort niet bij deze host (HOST)",
  ENOTFOUND: "HOST is geen naam die deze host kan opzoeken",
  EAI_AGAIN: "HOST kon niet worden opgezocht (DNS)",
  EINVAL: "HOST is geen geldig adres",
  EACCES: "een poort onder 1024 vraagt rechten die de service niet hoort te hebben; kies PORT 1024 of hoger",
};

/** The listen's failure as a StartError naming HOST and PORT, or the error itself when it is not one. */
export function listenFailure(e: unknown, host: string, port: number): unknown {
  const code = (e as { code?: unknown })?.code;
  if (typeof code !== "string" || !(code in LISTEN_HINTS)) return e;
  return new StartError(`kan niet luisteren op HOST ${host}, PORT ${port} (${code}): ${LISTEN_HINTS[code]}`);
}

/** File-system errors that a start meets where it may not write, or where nothing is. */
const FS_CODES = new Set(["EACCES", "EPERM", "EROFS", "ENOENT", "ENOTDIR", "EISDIR", "ENOSPC", "EDQUOT"]);

const within = (path: string, dir: string) => resolve(path) === resolve(dir) || resolve(path).startsWith(resolve(dir) + sep);

/**
 * The message for an error the start threw, or null when it is none the operator can
 * mend from here (then it is thrown on, with its stack).
 */
export function startFailureMessage(e: unknown, config: Config): string | null {
  if (e instanceof StartError || e instanceof SchemaTooNew || e instanceof UnprovedCopy || e instanceof UntrustedSealKey) return e.message;
  const err = e as { code?: unknown; path?: unknown; message?: unknown };
  const message = typeof err?.message === "string" ? err.message : String(e);
  const code = typeof err?.code === "string" ? err.code : "";
  // SQLite says no path: it is the database's folder or file. IOERR too: a clean stop
  // removes the -shm file, and on a full disk the next start fails making it again
  // (SQLITE_IOERR_SHMSIZE), which ended in a stack trace and a restart loop.
  if (/^SQLITE_(CANTOPEN|READONLY|PERM|FULL|IOERR)/.test(code)) {
    return `DATABASE_PATH: kan ${config.databasePath} niet openen of schrijven (${code}: ${message}). ${hint(code, dirname(config.databasePath))}`;
  }
  if (!FS_CODES.has(code) || typeof err.path !== "string") return null;
  const setting = config.databaseUrl === null && within(err.path, dirname(config.databasePath)) ? "DATABASE_PATH" : within(err.path, dirname(config.auditAnkerBestand)) ? "AUDIT_ANKER_BESTAND" : null;
  const what = `kan ${err.path} niet schrijven (${code})`;
  return `${setting ? `${setting}: ` : ""}${what}. ${hint(code, dirname(err.path))}`;
}

/** Codes that say (or, IOERR, may say) the disk is full rather than closed to the service. */
const FULL_CODES = /^(SQLITE_FULL|SQLITE_IOERR|ENOSPC|EDQUOT)/;

/** What the operator should look at for `code` in `dir`: the free space, or whether the service may write there. */
function hint(code: string, dir: string): string {
  if (!FULL_CODES.test(code)) return writableHint(dir);
  const io = code.startsWith("SQLITE_IOERR") ? " (anders een schijffout: zie `journalctl -k`)" : "";
  return `De schijf is misschien vol${io}: zie \`df -h ${dir}\`, maak ruimte en start opnieuw.`;
}

/** Where the service may write under the shipped unit, and how to add a folder. */
function writableHint(dir: string): string {
  return (
    `De map moet bestaan en schrijfbaar zijn voor de gebruiker van de service; onder ops/nachtwacht.service mag die alleen in /var/lib/nachtwacht schrijven: ` +
    `zet het bestand daar, of voeg de map toe met \`systemctl edit nachtwacht\` ([Service] ReadWritePaths=${dir}).`
  );
}
