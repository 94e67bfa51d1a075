#!/usr/bin/env bash
# Sends one batch of audit entries to nachtwacht (POST /api/audit) and prints the
# answer, with a receipt per entry, on stdout. docs/integration.md explains it.
#
#   NACHTWACHT_URL=https://nachtwacht.intern.example APP_SECRET=… examples/audit.sh batch.json
#   … | examples/audit.sh            # the batch on stdin
#
# The batch is {"entries":[{tenantId, actor, action, subject, details?, tijdstip?, sleutel?}, …]}
# (examples/batch.json). Give every entry a `sleutel` (your own event id): a batch sent
# twice is then stored once, and the second time answered with the same receipts. A
# batch with an entry without one is sent again only when the failed attempt certainly
# stored nothing (the name did not resolve or the connection failed, or nachtwacht's own
# 503 says so in its `nachtwacht-opgeslagen: nee` header); after any other failure it may
# have been stored, and is not repeated. jq checks the sleutels; without jq every batch
# counts as one with an entry without.
#
# Environment: NACHTWACHT_URL and APP_SECRET (required); NACHTWACHT_MAX_ATTEMPTS (5),
# NACHTWACHT_BACKOFF_MS (500: the first wait, doubled each time, with jitter),
# NACHTWACHT_MAX_DELAY_MS (60000: a Retry-After above it ends the retries).
#
# Exit: 0 stored (or already stored); 1 refused (a 3xx, or a 4xx other than 408/429: fix
# the batch or the URL; the server's {"error"} is on stderr); 2 usage or curl cannot run;
# 3 perhaps stored (entries without a sleutel, no certain answer): do not send it again as
# it is; 75 gave up for now (no answer, 408, 429, 5xx, an answer that is not nachtwacht's):
# send the same file again later.
#
# APP_SECRET never appears on a command line (`ps`, /proc/<pid>/cmdline): curl reads the
# Authorization header from its stdin (`--header @-`), fed by a here-string. Do not
# replace that with `-H "Authorization: Bearer $APP_SECRET"`, and do not add -L (a
# redirect would take the header along).
set -euo pipefail

me=${0##*/}
die() { echo "$me: $*" >&2; exit 2; }

[[ -n ${NACHTWACHT_URL:-} ]] || die "NACHTWACHT_URL is not set (e.g. http://127.0.0.1:3000)"
[[ -n ${APP_SECRET:-} ]] || die "APP_SECRET is not set"
# What the service takes as a secret (src/config.ts); [!-~] is printable ASCII in the C locale.
# The length is counted apart: BSD's regex (macOS) takes no repeat count above 255.
LC_ALL=C
[[ ${#APP_SECRET} -ge 32 && ${#APP_SECRET} -le 1024 && $APP_SECRET =~ ^[!-~]+$ ]] || die "APP_SECRET must be 32 to 1024 printable ASCII characters, without spaces or line breaks (as the service requires)"
[[ ${NACHTWACHT_URL,,} =~ ^https?:// ]] || die "NACHTWACHT_URL must start with http:// or https://"
[[ $# -le 1 ]] || die "usage: $me [BATCH.json | -]"
# setting VAR NAME DEFAULT: the environment's NAME (or DEFAULT) into VAR, as a decimal
# whole number, also with a leading zero (bash would read 08 as a bad octal number).
setting() {
  local v=${!2:-$3}
  [[ $v =~ ^[0-9]{1,9}$ ]] || die "$2 takes a whole number"
  printf -v "$1" '%d' "$((10#$v))"
}
setting max_attempts NACHTWACHT_MAX_ATTEMPTS 5
setting base_ms NACHTWACHT_BACKOFF_MS 500
setting max_delay_ms NACHTWACHT_MAX_DELAY_MS 60000
((max_attempts >= 1)) || die "NACHTWACHT_MAX_ATTEMPTS must be at least 1"
command -v curl >/dev/null || die "curl is not installed"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Read once: every attempt sends the same bytes, so the same sleutels.
if [[ $# -eq 0 || $1 == - ]]; then cat >"$work/batch.json"; else cp -- "$1" "$work/batch.json" || die "cannot read $1"; fi
url=${NACHTWACHT_URL%/}/api/audit
# The largest batch POST /api/audit takes, in bytes: the service's MAX_BATCH_BYTES
# (src/ingest/audit.ts). A larger one is refused before sending: the service would close
# the connection on it unread, which looks like a lost answer, not like the 413 it is.
max_batch_bytes=1048576
size=$(($(wc -c <"$work/batch.json"))) # BSD's wc pads the number with spaces
if ((size > max_batch_bytes)); then
  echo "$me: refused, by this client, before sending (413, no answer from the service): the batch is $size bytes, more than the $max_batch_bytes bytes the service takes; nothing sent, nothing stored: split it" >&2
  exit 1
fi
# Every entry with a sleutel: then a repeat is answered from them, and may always be sent.
keyed=0
if ! command -v jq >/dev/null; then
  unkeyed_why="jq, which checks the sleutels, is not installed"
elif jq -e 'all(.entries[]; .sleutel | type == "string")' "$work/batch.json" >/dev/null 2>&1; then
  keyed=1
else
  unkeyed_why="an entry has no sleutel (or jq could not read the batch)"
fi

# A header of the last answer in curl's --dump-header file (a 100 Continue may come first).
header() { awk -v name="$1" -F': *' '{ sub(/\r$/, "") } /^HTTP\// { v = "" } tolower($1) == name { v = $2 } END { print v }' "$work/headers"; }
# Whether the answer is nachtwacht's (it has the receipts); without jq, whether it names
# them. Not empty: jq 1.6 says yes to no input at all.
answered() {
  [[ -s $work/answer ]] || return 1
  if command -v jq >/dev/null; then
    jq -e '.ontvangstbewijzen | type == "array"' "$work/answer" >/dev/null 2>&1
  else
    grep -q '"ontvangstbewijzen":\[' "$work/answer"
  fi
}

for ((attempt = 1; ; attempt++)); do
  rc=0
  status=$(curl --silent --show-error --proto '=http,https' \
    --connect-timeout 10 --max-time 60 \
    --request POST --header 'Content-Type: application/json' --header @- \
    --data-binary @"$work/batch.json" \
    --output "$work/answer" --dump-header "$work/headers" --write-out '%{http_code}' \
    "$url" <<<"Authorization: Bearer $APP_SECRET") || rc=$?

  retry_after=""
  nothing_stored=0
  if ((rc != 0)); then
    case $rc in
      # curl could not start the request (bad option or URL, out of memory, the batch unreadable)
      2 | 3 | 26 | 27) die "curl failed before sending (exit $rc)" ;;
      # could not resolve or connect: the request never left this machine
      5 | 6 | 7) reason="no answer (curl exit $rc)" nothing_stored=1 ;;
      # anything else (timeout, dropped connection, an answer curl could not read) may come after the batch was stored
      *) reason="no answer (curl exit $rc)" ;;
    esac
  else
    case $status in
      2??)
        # Only nachtwacht's answer counts: a 200 from something in between (a login page) stored nothing certain.
        if answered; then
          cat "$work/answer"
          echo
          exit 0
        fi
        reason="HTTP $status, but not nachtwacht's answer: $(head -c 300 "$work/answer")"
        ;;
      408 | 429 | 5??) ;;
      3?? | 4??)
        # Final: the batch itself is wrong (400, 409, 413, 422), the secret is (401, 403), or the URL is (3xx, 404).
        echo "$me: refused, HTTP $status: $(cat "$work/answer")" >&2
        exit 1
        ;;
    esac
    if [[ $status != 2?? ]]; then
      reason="HTTP $status $(head -c 300 "$work/answer")"
      retry_after=$(header retry-after) # seconds only
      if [[ $retry_after =~ ^[0-9]{1,9}$ ]]; then retry_after=$((10#$retry_after)); else retry_after=""; fi
      # nachtwacht's own 503 carries it when nothing of the request was stored (a proxy's 503 does not).
      if [[ $status == 503 && $(header nachtwacht-opgeslagen) == nee ]]; then nothing_stored=1; fi
    fi
  fi

  if ((!keyed && !nothing_stored)); then
    echo "$me: $reason; perhaps stored, and not sent again: $unkeyed_why, so it could be stored twice; check before sending it again, and give every entry a sleutel" >&2
    exit 3
  fi
  if ((attempt >= max_attempts)); then
    echo "$me: gave up after $attempt attempts: $reason; send the same batch again later" >&2
    exit 75
  fi
  delay=$base_ms
  for ((i = 1; i < attempt && delay < max_delay_ms; i++)); do delay=$((delay * 2)); done
  ((delay <= max_delay_ms)) || delay=$max_delay_ms
  # RANDOM is 0..32767: two of them for a random part of a backoff up to max_delay_ms.
  jitter=$(((RANDOM * 32768 + RANDOM) % (delay + 1)))
  if [[ -n $retry_after ]]; then
    if ((retry_after * 1000 > max_delay_ms)); then
      echo "$me: gave up: $reason; the server asks to wait ${retry_after} s (Retry-After), more than NACHTWACHT_MAX_DELAY_MS" >&2
      exit 75
    fi
    # Retry-After plus a random part of the backoff: clients refused at once do not all return at once.
    delay=$((retry_after * 1000 + jitter))
    ((delay <= max_delay_ms)) || delay=$((max_delay_ms > retry_after * 1000 ? max_delay_ms : retry_after * 1000))
  else
    delay=$((delay / 2 + jitter / 2))
  fi
  echo "$me: attempt $attempt: $reason; again in ${delay} ms" >&2
  sleep "$((delay / 1000)).$(printf '%03d' $((delay % 1000)))"
done
