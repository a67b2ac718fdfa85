#!/usr/bin/env bash
# Makes sure the server binaries the tests start are installed:
#   - PostgreSQL (initdb, postgres): on PATH or under /usr/lib/postgresql/<major>/bin
#   - redis-server 7.x or newer (it also runs Sentinel: redis-server <conf> --sentinel)
#   - when running as root, an unprivileged OS user to run PostgreSQL as (postgres refuses root):
#     $TESTENV_PG_USER, default "postgres" (Debian's package creates it; otherwise we do)
#
# On Debian/Ubuntu as root it installs what is missing with apt-get; elsewhere it stops with a
# message naming the package to install. Idempotent, silent and fast when everything is present.
set -euo pipefail

PG_USER=${TESTENV_PG_USER:-postgres}
MIN_REDIS_MAJOR=7

log() { echo "deps: $*" >&2; }
die() { log "$*"; exit 1; }

have_postgres() {
  if [ -n "${TESTENV_PG_BIN:-}" ]; then
    [ -x "$TESTENV_PG_BIN/initdb" ] && [ -x "$TESTENV_PG_BIN/postgres" ]
    return
  fi
  if command -v initdb >/dev/null 2>&1 && command -v postgres >/dev/null 2>&1; then
    return 0
  fi
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && [ -x "$d/postgres" ] && return 0
  done
  return 1
}

redis_bin() {
  if [ -n "${TESTENV_REDIS_SERVER:-}" ]; then echo "$TESTENV_REDIS_SERVER"; return; fi
  command -v redis-server 2>/dev/null || echo /usr/bin/redis-server
}

# have_redis succeeds when redis-server exists and is at least MIN_REDIS_MAJOR.x.
have_redis() {
  local bin version
  bin=$(redis_bin)
  [ -x "$bin" ] || return 1
  version=$("$bin" --version | sed -n 's/.* v=\([0-9][0-9.]*\).*/\1/p')
  if [ -z "$version" ] || [ "${version%%.*}" -lt "$MIN_REDIS_MAJOR" ]; then
    die "$bin is version ${version:-unknown}; the tests need redis-server $MIN_REDIS_MAJOR.x or newer (Sentinel behaviour they rely on)"
  fi
}

is_debian() { [ -r /etc/debian_version ] && command -v apt-get >/dev/null 2>&1; }

missing=()
have_postgres || missing+=(postgresql)
have_redis || missing+=(redis-server)

if [ ${#missing[@]} -gt 0 ]; then
  if ! is_debian; then
    die "missing: ${missing[*]}. Install them with your package manager (PostgreSQL server >= 13 providing initdb and postgres, and redis-server >= $MIN_REDIS_MAJOR), or point TESTENV_PG_BIN / TESTENV_REDIS_SERVER at them"
  fi
  if [ "$(id -u)" -ne 0 ]; then
    die "missing: ${missing[*]}. Install them as root: sudo apt-get install -y ${missing[*]}"
  fi
  export DEBIAN_FRONTEND=noninteractive
  log "installing ${missing[*]} with apt-get"
  apt-get update -qq >/dev/null
  pkgs=()
  for m in "${missing[@]}"; do
    if [ "$m" = postgresql ]; then
      # The newest PostgreSQL major the archive offers (e.g. postgresql-15 on Debian 12).
      pg_pkg=$(apt-cache pkgnames postgresql- | grep -E '^postgresql-[0-9]+$' | sort -t- -k2 -n | tail -n1 || true)
      pkgs+=("${pg_pkg:-postgresql}")
    else
      pkgs+=("$m")
    fi
  done
  if [[ " ${missing[*]} " == *" postgresql "* ]]; then
    # The tests start their own throwaway servers: skip the package's default cluster (and
    # the system service it would start) through postgresql-common's drop-in folder.
    mkdir -p /etc/postgresql-common/createcluster.d
    echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/callback-platform-tests.conf
  fi
  apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
  have_postgres || die "installed ${pkgs[*]} but initdb/postgres are still not found"
  have_redis || die "installed ${pkgs[*]} but redis-server is still not found"
  log "installed ${pkgs[*]}"
fi

# PostgreSQL refuses to run as root, so a root test run starts it as an unprivileged user.
if [ "$(id -u)" -eq 0 ] && ! id -u "$PG_USER" >/dev/null 2>&1; then
  log "creating system user $PG_USER to run PostgreSQL in tests"
  if command -v useradd >/dev/null 2>&1; then
    useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$PG_USER"
  elif command -v adduser >/dev/null 2>&1; then
    adduser -S -D -H -h /nonexistent -s /sbin/nologin "$PG_USER"
  else
    die "cannot create the system user $PG_USER (no useradd or adduser); create it by hand"
  fi
fi
