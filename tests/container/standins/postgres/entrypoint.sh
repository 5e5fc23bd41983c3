#!/bin/sh
# The official postgres image's start, reduced to what compose.scale.yaml uses: a first start makes the cluster
# with POSTGRES_USER as its superuser (password POSTGRES_PASSWORD, scram over TCP) and the database POSTGRES_DB;
# every start then runs postgres in the foreground as the postgres user, listening on every address.
set -eu
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}"
user=${POSTGRES_USER:-postgres}
database=${POSTGRES_DB:-$user}
if [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA"
    chown postgres:postgres "$PGDATA"
    chmod 700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    secret=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" >"$secret"
    initdb --pgdata="$PGDATA" --username="$user" --pwfile="$secret" --auth-local=trust --auth-host=scram-sha-256
    rm -f "$secret"
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    pg_ctl --pgdata="$PGDATA" --options="-c listen_addresses=''" --wait start
    if [ "$database" != postgres ]; then
        psql --username="$user" --dbname=postgres --set=ON_ERROR_STOP=1 --command="CREATE DATABASE \"$database\""
    fi
    pg_ctl --pgdata="$PGDATA" --mode=fast --wait stop
fi
exec postgres -D "$PGDATA" -c listen_addresses='*'
