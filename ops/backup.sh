#!/bin/bash
# Host backup of the nachtwacht database, run by /etc/cron.d/nachtwacht as root.
#
#  1. an online, consistent copy with SQLite's VACUUM INTO: one read transaction, so the
#     copy is a snapshot even while the service writes (a plain cp of a live WAL
#     database can copy a torn state and misses what is still in the -wal file);
#  2. an integrity check of the copy, gzip, and an atomic rename into BACKUP_DIR;
#  3. its name and size reported to backup-status ({"exitCode":0,...}).
# On ANY failure the failing command's exit code and its error output are reported
# instead ({"exitCode":N,"foutmelding":...}) and the script exits with that code.
#
# Settings (environment, defaults for the installed layout):
#   NACHTWACHT_DB               /var/lib/nachtwacht/nachtwacht.db
#   NACHTWACHT_BACKUP_DIR       /var/backups/nachtwacht
#   NACHTWACHT_BACKUP_KEEP_DAYS 30      older backups in BACKUP_DIR are deleted after a success
#   NACHTWACHT_ANCHORS          /var/lib/nachtwacht/audit-ankers.jsonl  (copied beside each backup)
#   NACHTWACHT_ENV              /etc/nachtwacht/nachtwacht.env          (read by nachtwacht-call.sh)
#   NACHTWACHT_LOG              syslog (tag nachtwacht-backup) or "stdout"
# Copy BACKUP_DIR off the machine (rsync, restic, ...): a backup on the same disk is no backup.
set -euo pipefail
umask 077 # the copies hold the audit trail

DB="${NACHTWACHT_DB:-/var/lib/nachtwacht/nachtwacht.db}"
BACKUP_DIR="${NACHTWACHT_BACKUP_DIR:-/var/backups/nachtwacht}"
KEEP_DAYS="${NACHTWACHT_BACKUP_KEEP_DAYS:-30}"
ANCHORS="${NACHTWACHT_ANCHORS:-/var/lib/nachtwacht/audit-ankers.jsonl}"
CALL="$(dirname "$(readlink -f "$0")")/nachtwacht-call.sh"

if [ "${NACHTWACHT_LOG:-syslog}" = stdout ]; then
  sink() { cat; }
else
  sink() { logger -t nachtwacht-backup; }
fi

# A JSON string literal from any text: backslash, quote and control characters escaped;
# bytes that are not valid UTF-8 dropped (the service would refuse the body otherwise).
json_string() {
  local s c
  s=$(printf '%s' "$1" | iconv -c -f UTF-8 -t UTF-8 2>/dev/null || printf '%s' "$1" | LC_ALL=C tr -cd '\11\12\15\40-\176')
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\r'/\\r}
  s=${s//$'\t'/\\t}
  for c in 1 2 3 4 5 6 7 8 11 12 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 127; do
    local ch
    ch=$(printf "\\x$(printf '%02x' "$c")")
    s=${s//"$ch"/$(printf '\\u%04x' "$c")}
  done
  printf '"%s"' "$s"
}

report() { # <json body>: to backup-status; its output goes to syslog as nachtwacht-backup-status
  "$CALL" backup-status 30 "$1"
}

errlog=$(mktemp)
tmp=""
cleanup() {
  [ -n "$tmp" ] && rm -f "$tmp" "$tmp.gz"
  rm -f "$errlog"
}
trap cleanup EXIT

step="starting"
# Everything the commands below write to stderr is kept for the failure report.
exec 3>&2 2>>"$errlog"

fail() { # <exit code> [message]: report the failure and stop with that code
  local code=$1 msg=${2:-}
  trap - ERR
  set +e
  local detail
  detail=$(tail -c 4000 "$errlog")
  [ -n "$msg" ] && detail="$msg${detail:+; $detail}"
  local text="backup mislukt bij: $step (exit $code)${detail:+: $detail}"
  printf '%s\n' "$text" | sink
  report "{\"exitCode\":$code,\"foutmelding\":$(json_string "$text")}" || printf 'nachtwacht-backup: could not report the failure to backup-status\n' | sink
  exit "$code"
}
trap 'fail $? "$BASH_COMMAND"' ERR

step="controleren van de database $DB"
# sqlite3 would create an empty database at a missing path and back that up.
[ -f "$DB" ] && [ -r "$DB" ] || fail 66 "database $DB bestaat niet of is niet leesbaar"
command -v sqlite3 >/dev/null || fail 69 "sqlite3 is niet geïnstalleerd (apt-get install sqlite3)"

step="aanmaken van de back-upmap $BACKUP_DIR"
mkdir -p "$BACKUP_DIR"
[ -w "$BACKUP_DIR" ] || fail 73 "back-upmap $BACKUP_DIR is niet schrijfbaar"

stamp=$(date -u +%Y%m%dT%H%M%SZ)
name="nachtwacht-$stamp.db.gz"
tmp="$BACKUP_DIR/.nachtwacht-$stamp.db.tmp"

step="online kopie (VACUUM INTO)"
# The path goes into an SQL string literal: single quotes doubled.
sqlite3 -bail "$DB" ".timeout 30000" "VACUUM INTO '${tmp//\'/\'\'}'" >/dev/null

step="integriteitscontrole van de kopie"
check=$(sqlite3 -bail "$tmp" "PRAGMA integrity_check")
[ "$check" = ok ] || fail 65 "integrity_check van de kopie: ${check:0:500}"

step="comprimeren"
gzip -9 -n "$tmp"
mv "$tmp.gz" "$BACKUP_DIR/$name"
size=$(stat -c %s "$BACKUP_DIR/$name")

if [ -f "$ANCHORS" ]; then
  step="kopiëren van het ankerbestand $ANCHORS"
  gzip -9 -n -c "$ANCHORS" >"$BACKUP_DIR/audit-ankers-$stamp.jsonl.gz"
fi

step="opruimen van back-ups ouder dan $KEEP_DAYS dagen"
find "$BACKUP_DIR" -maxdepth 1 -type f \( -name 'nachtwacht-*.db.gz' -o -name 'audit-ankers-*.jsonl.gz' \) -mtime +"$KEEP_DAYS" -delete

trap - ERR
printf 'backup ok: %s (%s bytes)\n' "$BACKUP_DIR/$name" "$size" | sink
exec 2>&3
report "{\"exitCode\":0,\"bestandsnaam\":$(json_string "$name"),\"grootte\":$size}"
