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
