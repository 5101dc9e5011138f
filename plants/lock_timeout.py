"""The database's own lock_timeout, set by `migrate`: every lock wait bounded, whatever pooler is in front."""

from django.conf import settings
from django.core.management.base import CommandError
from django.db import DatabaseError, connections

from plants import timeouts

# PostgreSQL's insufficient_privilege: only the database's owner (or a superuser) may set its defaults.
INSUFFICIENT_PRIVILEGE = "42501"


def ensure_database_lock_timeout(*, using: str, **kwargs) -> None:
    """pre_migrate's receiver (migrate's alone, before any migration applies): on PostgreSQL, the
    database's default lock_timeout made the bound's (plants/timeouts.py: lock_timeout_ms), unless it
    already is.

    A database default reaches every session PostgreSQL starts on it, the server connections a
    pooler opens included, and costs nothing per request or connection. A startup parameter
    (`options`) is refused by a PgBouncer not told to drop it; a `SET` on each new connection, in
    PgBouncer's transaction pooling, lands on whichever server connection ran it, not on the ones
    the next transactions get. Set at each migrate, so that it follows PLANTS_DATABASE_TIMEOUT_S from
    one deploy to the next: run migrate with the service's environment. A session's own value (a
    one-off's PGOPTIONS or the URL's `options`) still wins over it.
    """
    connection = connections[using]
    if connection.vendor != "postgresql":
        return  # SQLite's wait for a lock is the driver's timeout (timeouts.sqlite_options)
    milliseconds = timeouts.lock_timeout_ms(settings.PLANTS_DATABASE_TIMEOUT_S)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT d.datname, %s = ANY(s.setconfig) FROM pg_database d LEFT JOIN pg_db_role_setting s"
            " ON s.setdatabase = d.oid AND s.setrole = 0 WHERE d.datname = current_database()",
            [f"lock_timeout={milliseconds}"],
        )
        name, already_set = cursor.fetchone()
        if already_set:
            return
        statement = f"ALTER DATABASE {connection.ops.quote_name(name)} SET lock_timeout = {milliseconds}"
        try:
            cursor.execute(statement)
        except DatabaseError as error:
            if getattr(error.__cause__, "sqlstate", None) != INSUFFICIENT_PRIVILEGE:
                raise
            # No migration applied, the bound not set. One line (manage.py prints a CommandError
            # so, and exits 1), naming the statement that makes it hold.
            raise CommandError(
                f"The database's lock_timeout must be {milliseconds} ms (PLANTS_DATABASE_TIMEOUT_S less 1 s), "
                f"and this role cannot set it ({error.__cause__}): as the database's owner, run "
                f"{statement}; then migrate again."
            ) from None
