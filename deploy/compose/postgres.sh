#!/bin/sh
# compose.yaml's PostgreSQL, as the postgres user: on the first start, a cluster on the volume with
# the app's role and database (password: POSTGRES_PASSWORD, scram-sha-256 over the network), its
# lock_timeout the apps' (4 s, for the default PLANTS_DATABASE_TIMEOUT_S); then
# the server in the foreground (SIGTERM: PostgreSQL's smart shutdown).
set -eu
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
data=/var/lib/postgresql/data
if [ ! -s "$data/PG_VERSION" ]; then
    : "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
    "$bin/initdb" -D "$data" --auth-local=peer --auth-host=scram-sha-256 >/dev/null
    echo "host all all all scram-sha-256" >>"$data/pg_hba.conf"
    "$bin/pg_ctl" -D "$data" -o "-c listen_addresses='' -k /tmp" -w start >/dev/null
    psql -h /tmp -q -v ON_ERROR_STOP=1 -v password="$POSTGRES_PASSWORD" postgres <<'SQL'
CREATE ROLE plantstore LOGIN PASSWORD :'password';
CREATE DATABASE plantstore OWNER plantstore;
-- The apps' lock bound (plants/lock_timeout.py; migrate sets the same) from the first session on:
-- podman-compose starts the apps beside migrate, and PgBouncer keeps the sessions it opens then.
ALTER DATABASE plantstore SET lock_timeout = 4000;
SQL
    "$bin/pg_ctl" -D "$data" -w stop >/dev/null
fi
exec "$bin/postgres" -D "$data" -c listen_addresses='*' -k /tmp
