#!/bin/sh
# compose.yaml's PgBouncer, as the postgres user: the app servers' connections pooled by
# transaction in front of PostgreSQL (the apps leave DJANGO_DB_PREPARED_STATEMENTS off, its default:
# PgBouncer 1.18 keeps no prepared statements), scram-sha-256 with the app's password (POSTGRES_PASSWORD).
set -eu
: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
umask 077
printf '"plantstore" "%s"\n' "$POSTGRES_PASSWORD" >/tmp/userlist.txt
cat >/tmp/pgbouncer.ini <<INI
[databases]
plantstore = host=postgres port=5432 dbname=plantstore

[pgbouncer]
listen_addr = 0.0.0.0
listen_port = 6432
unix_socket_dir =
auth_type = scram-sha-256
auth_file = /tmp/userlist.txt
pool_mode = transaction
max_client_conn = 500
default_pool_size = 20
; psycopg and Django send these at connect; PgBouncer would refuse parameters it does not track.
ignore_startup_parameters = extra_float_digits,options
INI
exec pgbouncer /tmp/pgbouncer.ini
