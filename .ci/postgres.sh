# Start and stop a throwaway PostgreSQL cluster on 127.0.0.1:55432 (trust auth, databases pagetune and
# pagetune_mlflow); exports PAGETUNE_PG_URL and PAGETUNE_PG_MLFLOW_URL for the tests. Sourced by .ci/run;
# also usable by hand: `source .ci/postgres.sh && start_postgres`.
PG_PORT=${PG_PORT:-55432}

start_postgres() {
  if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fi
  local bin
  bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  PG_DIR=$(mktemp -d /tmp/pagetune-pg.XXXXXX)
  chown postgres "$PG_DIR" && chmod 700 "$PG_DIR"
  su postgres -s /bin/sh -c "$bin/initdb -D $PG_DIR/data -A trust -U postgres >/dev/null"
  su postgres -s /bin/sh -c "$bin/pg_ctl -D $PG_DIR/data -l $PG_DIR/log -w \
      -o '-p $PG_PORT -k $PG_DIR -c listen_addresses=127.0.0.1 -c max_connections=200' start >/dev/null"
  for db in pagetune pagetune_mlflow; do
    su postgres -s /bin/sh -c "$bin/createdb -h 127.0.0.1 -p $PG_PORT $db"
  done
  PG_BIN=$bin
  export PAGETUNE_PG_URL="postgresql+psycopg://postgres@127.0.0.1:$PG_PORT/pagetune"
  export PAGETUNE_PG_MLFLOW_URL="postgresql+psycopg://postgres@127.0.0.1:$PG_PORT/pagetune_mlflow"
  echo "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') running on 127.0.0.1:$PG_PORT"
}

stop_postgres() {
  [ -n "${PG_DIR:-}" ] || return 0
  su postgres -s /bin/sh -c "$PG_BIN/pg_ctl -D $PG_DIR/data -m fast -w stop >/dev/null" || true
  rm -rf "$PG_DIR"
}
