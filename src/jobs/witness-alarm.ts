// A witness file beside the anchor file (src/row-seal.ts: laatste-backupmelding,
// laatste-verificatie) that a job could not write. The job's work is stored and its answer
// stays its own: backup-status's 200 (anything else makes `nachtwacht backup` report the
// stored report as failed, exit 75) and audit-verificatie's 200 or 409 (which means a broken
// chain). But the check the file serves is blind until it is written again, and a log line
// alone was all there was: a full anchor-file disk went unnoticed while the database was
// fine. So an alarm, of the type an unexpected error of the same cause raises
// (unexpectedAlarmType: storage-unwritable for a full or read-only disk, mailed).
import { unexpectedAlarmType } from "../http/errors.ts";
import type { Deps } from "../deps.ts";
import { errorText, log } from "../logger.ts";

/**
 * Logs and raises that the witness file `path` was not written: `gevolg` says, in Dutch,
 * what goes unnoticed meanwhile, `logMessage` the same for the log line.
 */
export async function alarmWitnessNotWritten(deps: Deps, path: string, e: unknown, gevolg: string, logMessage: string): Promise<void> {
  const error = errorText(e);
  log("error", logMessage, { bestand: path, error });
  const code = (e as { code?: unknown } | null)?.code;
  await deps.alarms.raise({
    type: unexpectedAlarmType(e),
    message: `${path} kon niet worden geschreven${typeof code === "string" ? ` (${code})` : ""}; ${gevolg}`,
    context: { bestand: path, fout: error },
  });
}
