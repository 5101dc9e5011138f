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
; The apps' lock_timeout is the database's own default (migrate sets it): nothing of theirs here.
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
; The usual setting: the apps send no startup parameter PgBouncer does not track.
ignore_startup_parameters = extra_float_digits
; Every wait within the app's 5 s database bound; each value's reason is in localcluster/config/pgbouncer.ini.
server_connect_timeout = 5
server_login_retry = 1
query_wait_timeout = 5
query_timeout = 5
idle_transaction_timeout = 5
tcp_keepalive = 1
tcp_keepidle = 1
tcp_keepintvl = 1
tcp_keepcnt = 4
tcp_user_timeout = 5000
INI
exec pgbouncer /tmp/pgbouncer.ini
