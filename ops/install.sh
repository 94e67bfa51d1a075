#!/bin/bash
# Installs or upgrades nachtwacht on a Debian/Ubuntu host (run as root):
#
#   ops/install.sh [--binary PATH] [--root DIR] [--no-system] [--skip-backup]
#   ops/install.sh --rotate-secret [--root DIR] [--no-system]
#
#   /usr/local/bin/nachtwacht                the binary (npm run build → dist/nachtwacht)
#   /usr/local/lib/nachtwacht/               nachtwacht-call.sh, backup.sh, env-file.sh
#   /etc/nachtwacht/nachtwacht.env           root:root 600, CRON_SECRET, APP_SECRET and the audit signing key made here once
#   /etc/systemd/system/nachtwacht.service   runs the binary as the user nachtwacht
#   /etc/cron.d/nachtwacht                   the schedule (generated from src/schedule.ts)
#   /var/lib/nachtwacht/                     database, anchors, outbox (user nachtwacht)
#   /var/backups/nachtwacht/                 backups (root 700)
#
# Running it again upgrades: files are replaced, the environment file and its secrets are
# kept, the database is backed up first and migrated by the new binary when it starts.
#
# --root DIR installs under DIR (like DESTDIR) and implies --no-system: no user, no
# chown, no apt, no systemctl. The tests install into a temp dir this way.
set -euo pipefail

here="$(cd "$(dirname "$(readlink -f "$0")")" && pwd)"
ROOT=/
SYSTEM=1
BINARY=""
ROTATE=0
SKIP_BACKUP=0

while [ $# -gt 0 ]; do
  case "$1" in
    --root) ROOT="${2:?--root needs a directory}"; shift 2 ;;
    --root=*) ROOT="${1#--root=}"; shift ;;
    --binary) BINARY="${2:?--binary needs a path}"; shift 2 ;;
    --binary=*) BINARY="${1#--binary=}"; shift ;;
    --no-system) SYSTEM=0; shift ;;
    --rotate-secret) ROTATE=1; shift ;;
    --skip-backup) SKIP_BACKUP=1; shift ;;
    -h | --help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
    *) echo "install.sh: unknown option $1 (see --help)" >&2; exit 64 ;;
  esac
done
ROOT="${ROOT%/}"
[ -n "$ROOT" ] && SYSTEM=0 # anything but / is a staging tree
if [ "$SYSTEM" = 1 ] && [ "$(id -u)" != 0 ]; then
  echo "install.sh: run as root (or use --root DIR --no-system to stage into a directory)" >&2
  exit 77
fi

say() { printf 'nachtwacht-install: %s\n' "$*"; }
die() { printf 'nachtwacht-install: %s\n' "$*" >&2; exit 1; }

ENV_DIR="$ROOT/etc/nachtwacht"
ENV_FILE="$ENV_DIR/nachtwacht.env"
LIB_DIR="$ROOT/usr/local/lib/nachtwacht"
DATA_DIR="$ROOT/var/lib/nachtwacht"
BACKUP_DIR="$ROOT/var/backups/nachtwacht"

# 32 random bytes in hex. Captured from stdout, so it is on no command line.
new_secret() {
  local s
  s=$(openssl rand -hex 32 2>/dev/null) || s=""
  if ! [[ "$s" =~ ^[0-9a-f]{64}$ ]]; then
    s=$(head -c32 /dev/urandom | od -An -tx1 | tr -d ' \n')
  fi
  [[ "$s" =~ ^[0-9a-f]{64}$ ]] || die "could not make a random secret"
  printf '%s' "$s"
}

# A new Ed25519 signing key from the installed binary (`nachtwacht key`), read from its
# stdout: the AUDIT_ANKER_SLEUTEL=… line, then a comment with the public key.
new_signing_key() {
  local out
  out=$("$ROOT/usr/local/bin/nachtwacht" key) || die "could not make a signing key with $ROOT/usr/local/bin/nachtwacht key"
  [[ "$out" == AUDIT_ANKER_SLEUTEL=PRIVATE+KEY+* ]] || die "nachtwacht key gave no signing key"
  printf '%s' "$out"
}

# Name and value of an environment-file line, without the blanks around them, as systemd
# and the service read them ("AUDIT_ANKER_SLEUTEL = PRIVATE+KEY+…" is that key, not
# another line): sets the caller's `key` and `val`; `unquoted` is val without the
# surrounding quotes systemd's EnvironmentFile takes off (KEY="value", KEY='value').
split_env_line() {
  key="${1%%=*}"
  key="${key#"${key%%[![:space:]]*}"}"
  key="${key%"${key##*[![:space:]]}"}"
  val="${1#*=}"
  val="${val#"${val%%[![:space:]]*}"}"
  val="${val%"${val##*[![:space:]]}"}"
  unquoted="${val#[\"\']}"
  unquoted="${unquoted%[\"\']}"
}

# Writes the environment file from $1 (template or the current file) to a 600 temp file
# and moves it into place. An empty CRON_SECRET= line is filled, a missing one appended,
# a set one kept unless --rotate-secret. APP_SECRET (the host application's secret for
# the write API): an empty or missing one gets a new secret of its own, a set one is
# kept (empty the line to rotate it). AUDIT_ANKER_SLEUTEL: an empty or missing one
# gets a new Ed25519 key (quoted or not, a set key is kept); an HMAC key of an earlier version is replaced by one (its
# anchors are retired, docs/audit-chain.md). A name on several lines: systemd and the
# service take the last, so an empty line of it next to one with a value would empty it
# or, filled here, silently replace it (a new signing key, a new APP_SECRET the
# application does not have): empty lines of a name that another line gives a value are
# dropped, and one new value is made only when no line has one. Lines go through bash's
# printf builtin only: the secrets never reach another process's argv.
write_env() {
  local src=$1 tmp line key val unquoted secret has_secret=0 has_app=0 has_key=0 changed=0
  local held_secret=0 held_app=0 held_key=0 given
  # Which names a line already gives a value.
  while IFS= read -r line || [ -n "$line" ]; do
    split_env_line "$line"
    [ "$line" != "$key" ] && [ -n "${unquoted//[[:space:]]/}" ] || continue
    case "$key" in
      CRON_SECRET) held_secret=1 ;;
      APP_SECRET) held_app=1 ;;
      AUDIT_ANKER_SLEUTEL) held_key=1 ;;
    esac
  done <"$src"
  tmp=$(mktemp "$ENV_DIR/.nachtwacht.env.XXXXXX") # mode 600
  # A run that stops half-way leaves no copy of the secrets behind.
  trap 'rm -f "$tmp"' EXIT
  while IFS= read -r line || [ -n "$line" ]; do
    split_env_line "$line"
    # An empty line of a name already given (above or below): dropped.
    if [ "$line" != "$key" ] && [ -z "${unquoted//[[:space:]]/}" ]; then
      case "$key" in
        CRON_SECRET) given=$((held_secret + has_secret)) ;;
        APP_SECRET) given=$((held_app + has_app)) ;;
        AUDIT_ANKER_SLEUTEL) given=$((held_key + has_key)) ;;
        *) given=0 ;;
      esac
      [ "$given" = 0 ] || continue
    fi
    if [ "$line" != "$key" ] && [ "$key" = CRON_SECRET ]; then
      has_secret=1
      if [ -z "${unquoted//[[:space:]]/}" ] || [ "$ROTATE" = 1 ]; then
        secret=$(new_secret) || exit 1
        line="CRON_SECRET=$secret"
        changed=1
      fi
    elif [ "$line" != "$key" ] && [ "$key" = APP_SECRET ]; then
      has_app=1
      if [ -z "${unquoted//[[:space:]]/}" ]; then
        secret=$(new_secret) || exit 1
        line="APP_SECRET=$secret"
        say "APP_SECRET written to $ENV_FILE: give it to the application for the write API (docs/integration.md)"
      fi
    elif [ "$line" != "$key" ] && [ "$key" = AUDIT_ANKER_SLEUTEL ]; then
      has_key=1
      if [[ "$unquoted" != PRIVATE+KEY+* ]]; then
        # A signing key in a form not read here is never replaced: losing it would retire every anchor.
        [[ "$line" == *PRIVATE+KEY+* ]] && die "the AUDIT_ANKER_SLEUTEL line in $ENV_FILE holds a signing key in a form install.sh does not read; write it as AUDIT_ANKER_SLEUTEL=PRIVATE+KEY+… and run again (nothing was changed)"
        [ -n "${unquoted//[[:space:]]/}" ] && say "AUDIT_ANKER_SLEUTEL was an HMAC key of an earlier version: replaced by a new Ed25519 signing key (the old anchors are retired)"
        line=$(new_signing_key) || exit 1
        say "a new audit signing key was written to $ENV_FILE; its public key: ${line##*: }"
      fi
    fi
    printf '%s\n' "$line" >>"$tmp"
  done <"$src"
  if [ "$has_secret" = 0 ]; then
    secret=$(new_secret) || exit 1
    printf 'CRON_SECRET=%s\n' "$secret" >>"$tmp"
    changed=1
  fi
  if [ "$has_app" = 0 ]; then
    secret=$(new_secret) || exit 1
    printf 'APP_SECRET=%s\n' "$secret" >>"$tmp"
    say "APP_SECRET written to $ENV_FILE: give it to the application for the write API (docs/integration.md)"
  fi
  if [ "$has_key" = 0 ]; then
    line=$(new_signing_key) || exit 1
    printf '%s\n' "$line" >>"$tmp"
    say "a new audit signing key was written to $ENV_FILE; its public key: ${line##*: }"
  fi
  [ "$SYSTEM" = 1 ] && chown root:root "$tmp"
  chmod 600 "$tmp"
  mv -f "$tmp" "$ENV_FILE"
  trap - EXIT
  if [ "$changed" = 1 ]; then say "CRON_SECRET written to $ENV_FILE (root, 600)"; else say "kept the CRON_SECRET in $ENV_FILE"; fi
}

# The backup before an upgrade, by the installed (old) backup.sh and binary, of the
# database the service uses as its environment file $1 names it: DATABASE_URL
# (PostgreSQL; `nachtwacht backup` takes it from that file), else DATABASE_PATH (relative:
# to the unit's WorkingDirectory $3), else $3/nachtwacht.db. backup.sh runs in $3, as the
# service and the nightly backup do, so a relative AUDIT_ANKER_BESTAND is the service's too
# (an older installed backup.sh does not change directory itself). Skipped, and said, when there
# is nothing to back up: no environment file (a first install), no backup.sh yet, or no
# SQLite file at that path. Exit 75 of backup.sh (the backup made, but not reported to
# backup-status: the service is down) is a warning; 69 (another backup is running) and any
# other failure stop the upgrade.
pre_upgrade_backup() { # <env file> <backup.sh> <data dir>
  local env_file=$1 script=$2 data_dir=$3 line key val unquoted url="" path="" rc=0
  if [ ! -f "$env_file" ]; then
    say "no $env_file: a first install, no backup before it"
    return 0
  fi
  if [ ! -x "$script" ]; then
    say "no $script: no backup before the upgrade (install the new version, then run backup.sh)"
    return 0
  fi
  # The installed binary runs this backup, as root, in the service user's folder. One of
  # an earlier version reads a bunfig.toml (whose preload is code) and .env files there:
  # none of them is nachtwacht's, so one found there was planted.
  local planted
  for planted in "$data_dir"/bunfig.toml "$data_dir"/.env "$data_dir"/.env.*; do
    if [ -e "$planted" ] || [ -L "$planted" ]; then
      die "found $planted in the service's folder: the installed binary would read it as root during the pre-upgrade backup. It is not nachtwacht's: find out who wrote it (the service user can), remove it, and rerun this install"
    fi
  done
  while IFS= read -r line || [ -n "$line" ]; do
    split_env_line "$line"
    [ "$line" != "$key" ] || continue
    case "$key" in
      DATABASE_URL) url=$unquoted ;;
      DATABASE_PATH) path=$unquoted ;;
    esac
  done <"$env_file"
  if [ -n "${url//[[:space:]]/}" ]; then
    say "backing up the PostgreSQL database (DATABASE_URL in $env_file) before the upgrade"
    (cd "$data_dir" && NACHTWACHT_STATE_DIR="$data_dir" NACHTWACHT_ENV="$env_file" NACHTWACHT_LOG=stdout "$script") || rc=$?
  else
    [ -n "$path" ] || path="$data_dir/nachtwacht.db"
    [[ "$path" == /* ]] || path="$data_dir/$path"
    if [ ! -e "$path" ]; then
      say "no database at $path: nothing to back up before the upgrade"
      return 0
    fi
    say "backing up $path before the upgrade"
    (cd "$data_dir" && NACHTWACHT_STATE_DIR="$data_dir" NACHTWACHT_ENV="$env_file" NACHTWACHT_DB="$path" NACHTWACHT_LOG=stdout "$script") || rc=$?
  fi
  case "$rc" in
    0) ;;
    75) say "WARNING: the backup was made but could not be reported to backup-status (exit 75: is the service down?); continuing with the upgrade" ;;
    69) die "another backup into the same folder is running right now (the nightly one from cron?), so none was made before the upgrade (exit 69); rerun this install when it is done" ;;
    *) die "the pre-upgrade backup failed (exit $rc, see above); fix it or rerun with --skip-backup" ;;
  esac
}

# read_env and service_origin: the environment file and the service's address, read as
# nachtwacht-call.sh and the crontab read them.
. "$here/env-file.sh"

# Waits for /health where the crontab reaches the service: HOST and PORT (quoted or not)
# from the environment file, a wildcard HOST on loopback.
restart_and_wait() {
  systemctl daemon-reload
  systemctl enable nachtwacht.service >/dev/null
  systemctl restart nachtwacht.service
  local PORT="" HOST="" origin
  read_env "$ENV_FILE" PORT HOST
  origin=$(service_origin "$HOST" "$PORT")
  for _ in $(seq 1 50); do
    if curl -fsS --max-time 2 "$origin/health" >/dev/null 2>&1; then
      say "nachtwacht is running on ${origin#http://} (journalctl -u nachtwacht)"
      return 0
    fi
    sleep 0.2
  done
  systemctl --no-pager status nachtwacht.service || true
  die "the service did not answer $origin/health; see journalctl -u nachtwacht"
}

if [ "$ROTATE" = 1 ]; then
  [ -f "$ENV_FILE" ] || die "$ENV_FILE does not exist; install first"
  write_env "$ENV_FILE"
  # The crontab reads the file at every call; the service reads it at start.
  [ "$SYSTEM" = 1 ] && restart_and_wait
  exit 0
fi

if [ -z "$BINARY" ]; then
  for b in "$here/../dist/nachtwacht" "$here/nachtwacht"; do
    [ -x "$b" ] && { BINARY="$b"; break; }
  done
fi
[ -n "$BINARY" ] && [ -f "$BINARY" ] || die "no binary: run 'npm run build' first or pass --binary PATH"

if [ "$SYSTEM" = 1 ]; then
  missing=()
  for cmd in curl logger; do command -v "$cmd" >/dev/null || missing+=("$cmd"); done
  if [ ${#missing[@]} -gt 0 ]; then
    pkgs=("${missing[@]/logger/bsdutils}")
    say "installing ${pkgs[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >/dev/null
  fi
  if ! getent passwd nachtwacht >/dev/null; then
    useradd --system --user-group --home-dir /var/lib/nachtwacht --no-create-home --shell /usr/sbin/nologin nachtwacht
    say "created system user nachtwacht"
  fi
  zone=$(date +%Z)
  [ "$zone" = UTC ] || say "WARNING: the host clock is in $zone; the crontab's times are UTC (src/schedule.ts). Debian's cron ignores CRON_TZ: run 'timedatectl set-timezone UTC' or the jobs fire at local times and taken-controle reports them as missed."
fi

install -d -m 755 "$ROOT/usr/local/bin" "$LIB_DIR" "$ROOT/etc/cron.d" "$ROOT/etc/systemd/system" "$ROOT/usr/local/share/doc/nachtwacht"
install -d -m 700 "$ENV_DIR" "$BACKUP_DIR"
install -d -m 750 "$DATA_DIR"
[ "$SYSTEM" = 1 ] && chown nachtwacht:nachtwacht "$DATA_DIR"

# Upgrade: a backup of the current database (SQLite or PostgreSQL, as the environment
# file says) before the new binary migrates it.
if [ "$SYSTEM" = 1 ] && [ "$SKIP_BACKUP" = 0 ]; then
  pre_upgrade_backup "$ENV_FILE" "$LIB_DIR/backup.sh" "$DATA_DIR"
fi

# Files are copied to a temp name and renamed: a running binary is never overwritten in place.
put() { # <mode> <source> <target>
  install -m "$1" "$2" "$3.new"
  mv -f "$3.new" "$3"
}
put 755 "$BINARY" "$ROOT/usr/local/bin/nachtwacht"
put 755 "$here/nachtwacht-call.sh" "$LIB_DIR/nachtwacht-call.sh"
put 755 "$here/backup.sh" "$LIB_DIR/backup.sh"
put 644 "$here/env-file.sh" "$LIB_DIR/env-file.sh"
put 644 "$here/nachtwacht.service" "$ROOT/etc/systemd/system/nachtwacht.service"
# cron ignores files in cron.d that are group- or world-writable or not owned by root.
put 644 "$here/nachtwacht.cron" "$ROOT/etc/cron.d/nachtwacht"
if [ -f "$here/../docs/operations.md" ]; then
  put 644 "$here/../docs/operations.md" "$ROOT/usr/local/share/doc/nachtwacht/operations.md"
else
  say "WARNING: no docs/operations.md beside ops/ ($here/../docs): /usr/local/share/doc/nachtwacht/operations.md (the unit's Documentation=) not installed; copy docs/ to the host with ops/ and run again"
fi

if [ -f "$ENV_FILE" ]; then
  write_env "$ENV_FILE"
else
  write_env "$here/nachtwacht.env.example"
fi

if [ "$SYSTEM" = 1 ]; then
  restart_and_wait
else
  say "staged into $ROOT (no user, no systemd)"
fi
