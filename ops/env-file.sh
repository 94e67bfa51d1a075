# Shared by the ops scripts (sourced, not run): how they read the service's environment
# file and reach the service, the one place for both rules. Installed beside the scripts
# in /usr/local/lib/nachtwacht/.

# read_env FILE NAME...: sets each named shell variable to its value in FILE, read as
# systemd's EnvironmentFile reads it: KEY=VALUE lines, the value optionally quoted
# ("…" or '…'); # and ; start comments; the last line of a name wins. The file is
# parsed, never sourced, so nothing in it is executed. Names absent keep their value.
read_env() {
  local file=$1 line key val want
  shift
  while IFS= read -r line || [ -n "$line" ]; do
    line="${line#"${line%%[![:space:]]*}"}"
    case "$line" in '' | '#'* | ';'*) continue ;; esac
    key="${line%%=*}"
    val="${line#*=}"
    key="${key%"${key##*[![:space:]]}"}"
    case "$val" in
      \"*\") val="${val:1:${#val}-2}" ;;
      \'*\') val="${val:1:${#val}-2}" ;;
    esac
    for want in "$@"; do
      [ "$key" = "$want" ] && printf -v "$key" '%s' "$val"
    done
  done <"$file"
  return 0
}

# service_origin HOST PORT: prints http://host:port where a client on this host reaches
# the service that listens on HOST and PORT (defaults 127.0.0.1 and 3000): a wildcard
# address is reached on loopback (0.0.0.0 → 127.0.0.1, :: → [::1]), an IPv6 address
# is bracketed.
service_origin() {
  local host="${1:-127.0.0.1}"
  case "$host" in
    0.0.0.0) host=127.0.0.1 ;;
    :: | '[::]') host='[::1]' ;;
    \[*) ;;
    *:*) host="[$host]" ;;
  esac
  printf 'http://%s:%s' "$host" "${2:-3000}"
}

# check_listener PORT ANCHOR_FILE: whether whatever listens on TCP PORT on this host may be
# handed CRON_SECRET. The port is unprivileged: while the service is down (a restart, an
# upgrade, the boot) any local user can bind it, keep it, and collect the secret from the
# next call. So every socket listening on PORT (IPv4 and IPv6, from /proc/net/tcp*, no
# `ss` needed) must belong to the service's user, the owner of ANCHOR_FILE (the anchor
# file the service writes; before it exists, the owner of its directory), or to root
# (docker-proxy, a service run as root; root can read the environment file anyway).
# Returns 0 when it may (also when nothing listens: the call then fails to connect as
# before); otherwise prints one Dutch line naming the port and both uids, returns 1.
check_listener() {
  local port=$1 owner=$2 expected='' uid files=() f
  # Read as the service and curl read it: decimal, leading zeros and all (printf would take 03001 for octal).
  if ! [[ $port =~ ^[0-9]+$ ]] || [ "$((10#$port))" -gt 65535 ]; then
    printf 'PORT %s is geen poortnummer: CRON_SECRET niet verstuurd\n' "$port"
    return 1
  fi
  port=$((10#$port))
  [ -e "$owner" ] || owner=$(dirname -- "$owner")
  [ -e "$owner" ] && expected=$(stat -c %u -- "$owner")
  for f in /proc/net/tcp /proc/net/tcp6; do [ -r "$f" ] && files+=("$f"); done
  [ "${#files[@]}" -gt 0 ] || return 0
  # Columns: sl local_address(hexip:HEXPORT) rem_address st(0A = LISTEN) … uid(8th).
  for uid in $(awk -v port="$(printf '%04X' "$port")" \
    'FNR > 1 && $4 == "0A" { n = split($2, a, ":"); if (a[n] == port) print $8 }' "${files[@]}"); do
    [ "$uid" = 0 ] || [ "$uid" = "$expected" ] && continue
    printf 'poort %s is in gebruik door uid %s, niet door de dienst (verwacht uid %s, eigenaar van %s, of root): CRON_SECRET niet verstuurd\n' \
      "$port" "$uid" "${expected:-onbekend}" "$owner"
    return 1
  done
  return 0
}
