#!/usr/bin/env bash
# A throwaway PostgreSQL server for the results-store tests: listening on 127.0.0.1 only, trust
# authentication (nothing but this machine can reach it), data in a scratch folder.
#
#   scripts/postgres.sh [DATABASE]   start it (or reuse the running one), create DATABASE
#                                    (default collectivetrace), print its SQLAlchemy URL
#   scripts/postgres.sh stop         stop it
#
#   export COLLECTIVETRACE_PG_URL=$(scripts/postgres.sh)
#
# Installs Debian's postgresql package when the server is missing and we are root. Exit status 3
# when PostgreSQL cannot be had (not installed, not root); messages go to stderr, the URL to stdout.
# Settings: COLLECTIVETRACE_PG_PORT (54329), COLLECTIVETRACE_PG_DIR (/tmp/collectivetrace-pg-PORT).
set -euo pipefail

PORT=${COLLECTIVETRACE_PG_PORT:-54329}
DIR=${COLLECTIVETRACE_PG_DIR:-/tmp/collectivetrace-pg-$PORT}
DB=${1:-collectivetrace}

find_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

BIN=$(find_bin)
if [ -z "$BIN" ] || [ ! -x "$BIN/initdb" ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "postgres.sh: no PostgreSQL server installed (/usr/lib/postgresql/*/bin), and not root to install it" >&2
    exit 3
  fi
  echo "postgres.sh: installing postgresql (apt-get)" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >&2
  BIN=$(find_bin)
fi

# initdb refuses to run as root: the server runs as the postgres user then, else as ourselves.
if [ "$(id -u)" = 0 ]; then
  OWNER=postgres
  as_owner() { runuser -u postgres -- "$@"; }
else
  OWNER=$(id -un)
  as_owner() { "$@"; }
fi

if [ "$DB" = stop ]; then
  [ -d "$DIR/data" ] && as_owner "$BIN/pg_ctl" -D "$DIR/data" -m fast -w stop >&2 || true
  exit 0
fi

mkdir -p "$DIR"
chown "$OWNER" "$DIR"
chmod 700 "$DIR"
# One set-up at a time: tests of several checkouts may start together.
exec 9>"$DIR.lock"
flock 9

if ! as_owner "$BIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1; then
  if [ ! -f "$DIR/data/PG_VERSION" ]; then
    rm -rf "$DIR/data"
    as_owner "$BIN/initdb" -D "$DIR/data" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 >"$DIR/initdb.log" 2>&1 \
      || { cat "$DIR/initdb.log" >&2; exit 1; }
  fi
  # Loopback only; the Unix socket in our own folder (the system one may not be writable).
  as_owner "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DIR -c fsync=off" start >&2 9>&- \
    || { tail -n 20 "$DIR/server.log" >&2; exit 1; }
fi

psql=("$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -tAq)
if [ "$("${psql[@]}" -c "SELECT 1 FROM pg_database WHERE datname = '$DB'")" != 1 ]; then
  "${psql[@]}" -c "CREATE DATABASE \"$DB\"" >&2
fi
echo "postgresql+psycopg://postgres@127.0.0.1:$PORT/$DB"
