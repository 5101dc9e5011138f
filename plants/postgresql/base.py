"""Django's PostgreSQL backend, with a connection health check that costs no query.

With CONN_HEALTH_CHECKS, Django asks `is_usable()` before a request reuses a persistent
connection, and the stock backend answers with a `SELECT 1` round trip: one statement more on
every request. An idle connection has nothing to read, so when its socket *is* readable the
server has closed it (a restart sends a termination notice, then EOF). A zero-timeout poll of the
socket tells the same without a query; the connection is then replaced before the request uses it.
"""

import select

from django.db.backends.postgresql import base


class DatabaseWrapper(base.DatabaseWrapper):
    def is_usable(self) -> bool:
        connection = self.connection
        if connection is None or connection.closed or connection.broken:
            return False
        try:
            readable, _, _ = select.select([connection.fileno()], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable
