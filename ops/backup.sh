#!/bin/bash
# Host backup of the nachtwacht database, run by /etc/cron.d/nachtwacht as root: a thin
# caller of `nachtwacht backup` (src/cli/backup.ts), which makes the online copy
# (VACUUM INTO), checks and compresses it, copies the anchor file beside it, prunes old
# backups and reports the result, success or failure, to backup-status. The host needs
# no sqlite3 CLI. The secret stays in the environment file; nothing here reads it.
#
# Settings (environment, defaults for the installed layout):
#   NACHTWACHT_BIN              /usr/local/bin/nachtwacht
#   NACHTWACHT_STATE_DIR        /var/lib/nachtwacht  the service's working directory (the unit's
#                               WorkingDirectory): the backup runs in it, so a relative
#                               DATABASE_PATH or AUDIT_ANKER_BESTAND means the same file as to the service
#   NACHTWACHT_DB               DATABASE_PATH from NACHTWACHT_ENV, else /var/lib/nachtwacht/nachtwacht.db
#   NACHTWACHT_BACKUP_DIR       /var/backups/nachtwacht
#   NACHTWACHT_BACKUP_KEEP_DAYS 30      older backups in BACKUP_DIR are deleted after a success
#   NACHTWACHT_ANCHORS          AUDIT_ANKER_BESTAND from NACHTWACHT_ENV, else /var/lib/nachtwacht/audit-ankers.jsonl  (copied beside each backup)
#   NACHTWACHT_ENV              /etc/nachtwacht/nachtwacht.env          (CRON_SECRET, PORT, HOST for the report)
#   NACHTWACHT_LOG              syslog (tag nachtwacht-backup) or "stdout"
# Copy BACKUP_DIR off the machine (rsync, restic, ...): a backup on the same disk is no backup.
set -uo pipefail
umask 077 # the copies hold the audit trail

args=(backup
  --env "${NACHTWACHT_ENV:-/etc/nachtwacht/nachtwacht.env}"
  --map "${NACHTWACHT_BACKUP_DIR:-/var/backups/nachtwacht}"
  --bewaar-dagen "${NACHTWACHT_BACKUP_KEEP_DAYS:-30}")
# Unset, `nachtwacht backup` takes the service's own paths from the env file.
[ -n "${NACHTWACHT_DB:-}" ] && args+=(--db "$NACHTWACHT_DB")
[ -n "${NACHTWACHT_ANCHORS:-}" ] && args+=(--ankers "$NACHTWACHT_ANCHORS")
bin="${NACHTWACHT_BIN:-/usr/local/bin/nachtwacht}"
state="${NACHTWACHT_STATE_DIR:-/var/lib/nachtwacht}"

# Relative paths (the env file's, and NACHTWACHT_DB/NACHTWACHT_ANCHORS) are the
# service's: taken from its working directory, as the unit runs it, not cron's.
if ! cd "$state" 2>/dev/null; then
  msg="nachtwacht-backup: cannot enter $state, the service's working directory (NACHTWACHT_STATE_DIR): no backup"
  if [ "${NACHTWACHT_LOG:-syslog}" = stdout ]; then echo "$msg" >&2; else echo "$msg" | logger -t nachtwacht-backup; fi
  exit 66
fi

if [ "${NACHTWACHT_LOG:-syslog}" = stdout ]; then
  exec "$bin" "${args[@]}" 2>&1
fi
"$bin" "${args[@]}" 2>&1 | logger -t nachtwacht-backup
exit "${PIPESTATUS[0]}"
