"""Django's PostgreSQL backend, with a connection health check that costs no query.

With CONN_HEALTH_CHECKS, Django asks `is_usable()` before a request reuses a persistent
connection, and the stock backend answers with a `SELECT 1` round trip: one statement more on
every request. An idle connection between requests has nothing to read: the server (or a
pooler such as PgBouncer) sends it something unasked only as it closes it (a termination
notice, then EOF). So a zero-timeout poll of the socket tells the same without a query: if there
is anything to read, the connection is replaced before the request uses it. The rule errs on
the safe side: whatever arrives, the cost is one reconnect, never a request on a dead connection.

Its timestamptz values are parsed by `datetime.fromisoformat` (in C) rather than psycopg's regular
expression in Python, to the same aware datetime; anything it cannot read goes to psycopg's parser.
"""

import functools
import select
from datetime import datetime

import psycopg
from django.db.backends.postgresql import base
from django.db.backends.postgresql.psycopg_any import BaseTzLoader
from psycopg.pq import Format


class IsoTzLoader(BaseTzLoader):
    """Django's timestamptz loader (`2026-11-23 16:31:41.123456+00`), the ISO text read in C."""

    def load(self, data) -> datetime:
        try:
            value = datetime.fromisoformat(bytes(data).decode())
        except ValueError:  # BC, infinity, years past 9999, a DateStyle other than ISO
            return super().load(data)
        # As psycopg's parser, then Django's: in the connection's time zone, then labelled with Django's.
        return value.astimezone(self._timezone).replace(tzinfo=self.timezone)


@functools.cache
def iso_tz_loader(timezone) -> type[IsoTzLoader]:
    return type("IsoTzLoader", (IsoTzLoader,), {"timezone": timezone})


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params):
        connection = super().get_new_connection(conn_params)
        # Django's loader for this connection names the time zone (Django compares it per cursor).
        django_loader = connection.adapters.get_loader(base.TIMESTAMPTZ_OID, Format.TEXT)
        connection.adapters.register_loader("timestamptz", iso_tz_loader(django_loader.timezone))
        return connection

    # Django checks that no event loop runs in this thread on the way into cursor(), and again in
    # ensure_connection() and create_cursor() under it, each by raising and catching RuntimeError
    # (measured in BENCHMARKS.md). cursor() keeps its check; the two under it are skipped once the
    # connection is open: an async caller is refused all the same (tests/test_connections.py).
    def ensure_connection(self):
        if self.connection is None:
            super().ensure_connection()

    def create_cursor(self, name=None):
        return base.DatabaseWrapper.create_cursor.__wrapped__(self, name)

    def is_usable(self) -> bool:
        connection = self.connection
        if connection is None or connection.closed or connection.broken:
            return False
        try:
            # poll(), not select(): select() cannot watch file descriptors numbered 1024 or more.
            poller = select.poll()
            poller.register(connection.fileno(), select.POLLIN)
            return not poller.poll(0)
        except (OSError, ValueError, psycopg.Error):
            return False  # no socket: as good as closed
