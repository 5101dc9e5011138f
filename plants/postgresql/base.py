"""Django's PostgreSQL backend, with a connection health check that costs no query.

With CONN_HEALTH_CHECKS, Django asks `is_usable()` before a request reuses a persistent
connection, and the stock backend answers with a `SELECT 1` round trip: one statement more on
every request. An idle connection between requests has nothing to read: the server (or a
pooler such as PgBouncer) sends it something unasked only as it closes it (a termination
notice, then EOF). So a zero-timeout poll of the socket tells the same without a query: if there
is anything to read, the connection is replaced before the request uses it. The rule errs on
the safe side: whatever arrives, the cost is one reconnect, never a request on a dead connection.

`is_usable()` is the backend's own hook for this question (Django's base class defines it for
every backend to answer), and `Connection.fileno()` is psycopg's public API: nothing else of
the stock backend is changed.
"""

import select

import psycopg
from django.db.backends.postgresql import base


class DatabaseWrapper(base.DatabaseWrapper):
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
