#!/bin/bash
# Calls one nachtwacht job on loopback, as /etc/cron.d/nachtwacht does:
#
#   nachtwacht-call.sh <job> <max-time-seconds> [json-body]
#
# Exits with curl's status: 0 for a 2xx answer, 22 for any other HTTP status (the body
# is still logged: --fail-with-body), 28 on --max-time, 7 when nothing listens; or
# 64 usage, 78 no readable environment file or no CRON_SECRET in it, 77 (EX_NOPERM) the
# port is held by another user than the service's (check_listener): nothing was sent.
# Output goes to syslog with the tag nachtwacht-<job>; NACHTWACHT_LOG=stdout prints it
# instead (by hand, and in the tests).
#
# NACHTWACHT_GEPLAND=1 (the crontab sets it) marks the call as the job's scheduled one:
# the service then runs it only if no run has done this scheduled time yet and it is not
# running already, so two instances whose crontabs both call it run it once. The other
# answers 204 with the reason in X-Nachtwacht-Overgeslagen, which is logged after the
# status line; that is no failure (exit 0). By hand, without it, a call always runs.
# Logging the reason takes curl 7.84 or newer (%header{} in --write-out; Debian 12 has
# 7.88); an older curl logs the placeholder instead, and the exit code is the same.
#
# The secret: it is read from the root-only environment file (parsed here, never
# sourced, so the file is not executed), and given to curl as a header on STDIN
# (-H @-). The only command that sees it is `printf`, a bash builtin: bash writes it into
# the pipe itself without starting a process, so no process's argv (ps,
# /proc/<pid>/cmdline) ever contains it, and curl's argv holds only "@-". Do not turn on
# `set -x` here: it would print the printf line, secret included, to stderr.
#
# The listener: the secret goes only to a port whose listening sockets are the service's
# user's (the owner of AUDIT_ANKER_BESTAND) or root's (check_listener in env-file.sh). A
# relative AUDIT_ANKER_BESTAND is the service's, from its working directory
# NACHTWACHT_STATE_DIR (default /var/lib/nachtwacht), as backup.sh takes it.
set -euo pipefail

job="${1:-}"
max_time="${2:-60}"
body="${3:-}"
env_file="${NACHTWACHT_ENV:-/etc/nachtwacht/nachtwacht.env}"

case "$job" in
  '' | *[!a-z-]*) echo "usage: nachtwacht-call.sh <job> <max-time-seconds> [json-body]" >&2; exit 64 ;;
esac
case "$max_time" in
  '' | *[!0-9]*) echo "nachtwacht-call: max-time must be a number of seconds, got '$max_time'" >&2; exit 64 ;;
esac

if [ "${NACHTWACHT_LOG:-syslog}" = stdout ]; then
  sink() { cat; }
else
  sink() { logger -t "nachtwacht-$job"; }
fi

CRON_SECRET="" PORT="" HOST="" AUDIT_ANKER_BESTAND=""
# read_env and service_origin: the environment file and the address, as install.sh reads them.
. "$(dirname "$(readlink -f "$0")")/env-file.sh"
if [ ! -r "$env_file" ]; then
  echo "nachtwacht-call: cannot read $env_file (run as root)" | sink
  exit 78
fi
read_env "$env_file" CRON_SECRET PORT HOST AUDIT_ANKER_BESTAND
if [ -z "$CRON_SECRET" ]; then
  echo "nachtwacht-call: CRON_SECRET is not set in $env_file" | sink
  exit 78
fi

# The service listens on HOST (default loopback); a wildcard address is reached on loopback.
url="$(service_origin "$HOST" "$PORT")/api/cron/$job"

# The default and the unit's working directory as in nachtwacht.service.
anchor="${AUDIT_ANKER_BESTAND:-/var/lib/nachtwacht/audit-ankers.jsonl}"
case "$anchor" in /*) ;; *) anchor="${NACHTWACHT_STATE_DIR:-/var/lib/nachtwacht}/$anchor" ;; esac
if ! refusal=$(check_listener "${PORT:-3000}" "$anchor"); then
  echo "nachtwacht-call: $job niet aangeroepen: $refusal" | sink
  exit 77
fi

args=(--fail-with-body --silent --show-error --max-time "$max_time" --request POST
  --write-out '\n(HTTP %{http_code}, %{time_total} s) %header{x-nachtwacht-overgeslagen}\n' --header @-)
if [ -n "$body" ]; then
  args+=(--header 'Content-Type: application/json' --data-raw "$body")
fi
if [ "${NACHTWACHT_GEPLAND:-}" = 1 ]; then
  args+=(--header 'X-Nachtwacht-Gepland: 1')
fi

status=0
printf 'Authorization: Bearer %s\n' "$CRON_SECRET" | curl "${args[@]}" "$url" 2>&1 | sink || status=$?
if [ "$status" -ne 0 ]; then
  echo "nachtwacht-call: $job failed (curl exit $status)" | sink
fi
exit "$status"
