"""Django's PostgreSQL backend, with a health check that costs no query and knows a read-only server.

With CONN_HEALTH_CHECKS, Django asks `is_usable()` before a request reuses a persistent connection,
and after a request whose statements raised a database error; an unusable connection is closed and
the next use connects anew. The stock backend answers with a `SELECT 1` round trip: one statement
more on every request. This one answers from what the connection already knows:

- Anything to read on an idle connection means it is closing: the server (or a pooler such as
  PgBouncer) sends something unasked only as it closes it (a termination notice, then EOF). A
  zero-timeout poll of the socket tells that without a query; whatever arrives, the cost is one
  reconnect, never a request on a dead connection.
- A server that takes no writes: PostgreSQL 14 and later report `in_hot_standby` and
  `default_transaction_read_only` to the client as they change, so psycopg knows them without a
  query. A primary demoted by a failover that kept its connections open (as some managed services
  do) is left at the first request that meets it (answered 503 by the exception handler); the new
  connection's `target_session_attrs=read-write` finds the new primary.

`is_usable()` is the backend's own hook for this question (Django's base class defines it for every
backend to answer); `Connection.fileno()` and `ConnectionInfo.parameter_status()` are psycopg's
public API: nothing else of the stock backend is changed.
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
            if "on" in (
                connection.info.parameter_status("in_hot_standby"),
                connection.info.parameter_status("default_transaction_read_only"),
            ):
                return False
            # poll(), not select(): select() cannot watch file descriptors numbered 1024 or more.
            poller = select.poll()
            poller.register(connection.fileno(), select.POLLIN)
            return not poller.poll(0)
        except (OSError, ValueError, psycopg.Error):
            return False  # no socket: as good as closed
