"""Django's PostgreSQL backend, with a health check that costs no query, and a token cache.

With CONN_HEALTH_CHECKS, Django asks `is_usable()` before a request reuses a persistent
connection, and the stock backend answers with a `SELECT 1` round trip: one statement more on
every request. An idle connection has nothing to read but notifications, so when its socket is
still readable after those are read, the server has closed it (a restart sends a termination
notice, then EOF). A zero-timeout poll of the socket tells the same without a query; the
connection is then replaced before the request uses it.

Each connection also keeps the API tokens it has read, for as long as it lives: see
`plants.token_cache` for why that is safe, and `token_cache()` for when it answers.
"""

import logging
import select

import psycopg
from django.conf import settings
from django.db.backends.postgresql import base

from plants.token_cache import CHANNEL, TokenCache

logger = logging.getLogger("plants")

# Created by migration 0002; without it nothing would tell a cache that a token changed.
TRIGGER_EXISTS = "SELECT EXISTS (SELECT FROM pg_trigger WHERE tgname = %s AND tgrelid = to_regclass(%s))"


class Listener:
    """What a psycopg connection LISTENing for token changes has been told."""

    def __init__(self, connection: psycopg.Connection) -> None:
        self.connection = connection
        self.cache = TokenCache()
        self.server_closed = False
        connection.add_notify_handler(self.cache.on_notify)
        connection.add_notice_handler(self.on_notice)

    def on_notice(self, diagnostic) -> None:
        # libpq hands an unsolicited FATAL error on an idle connection (e.g. "terminating
        # connection due to administrator command", sent before the server closes it) to notices.
        if diagnostic.severity_nonlocalized == "FATAL":
            self.server_closed = True

    def receive(self) -> bool:
        """Read what the server has sent the idle connection, handing notifications to their
        handlers; False, from then on, once the server has closed the connection."""
        if not self.server_closed:
            pgconn = self.connection.pgconn
            try:
                pgconn.consume_input()
            except psycopg.Error:  # EOF: libpq reports it once, so it is remembered here
                self.server_closed = True
            else:
                while notify := pgconn.notifies():
                    pgconn.notify_handler(notify)
        return not self.server_closed


class DatabaseWrapper(base.DatabaseWrapper):
    # The psycopg connection that was last set up for the token cache, and its Listener (None if
    # it could not LISTEN). A new connection is set up afresh, with an empty cache.
    _listening: tuple = (None, None)

    def is_usable(self) -> bool:
        connection = self.connection
        if connection is None or connection.closed or connection.broken:
            return False
        listener = self._listener()
        if listener is None:
            return not self._readable()  # not listening: only a closing server sends anything
        # Listening: read the notifications; what is left to read is the server closing it.
        return listener.receive() and not self._readable()

    def token_cache(self) -> TokenCache | None:
        """This connection's token cache, with every notification received so far applied.

        None where the cache may not answer: PLANTS_TOKEN_CACHE off, connections that do not
        persist (CONN_MAX_AGE=0) or are pooled, inside a transaction, or when the token table
        has no change trigger (migrations not applied). Connects first if need be, so that a
        new connection LISTENs before it reads any token it will cache.
        """
        if not settings.PLANTS_TOKEN_CACHE or self.in_atomic_block or self.pool:
            return None
        if self.settings_dict["CONN_MAX_AGE"] == 0:
            return None
        if not self.get_autocommit():  # connects first if need be
            return None
        if self._listening[0] is not self.connection:
            self._listening = (self.connection, self._listen_for_token_changes())
        listener = self._listening[1]
        if listener is None or not listener.receive():
            return None  # closed by the server: the query will fail, and the connection be replaced
        return listener.cache

    def _listener(self) -> Listener | None:
        connection, listener = self._listening
        return listener if connection is self.connection else None

    def _listen_for_token_changes(self) -> Listener | None:
        from plants.models import ApiToken

        with self.cursor() as cursor:
            cursor.execute(TRIGGER_EXISTS, [CHANNEL, ApiToken._meta.db_table])
            if not cursor.fetchone()[0]:
                logger.warning("API tokens are not cached: the token table has no change trigger; run migrate.")
                return None
            cursor.execute(f"LISTEN {CHANNEL}")
        return Listener(self.connection)

    def _readable(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection.fileno()], [], [], 0)
        except (OSError, ValueError, psycopg.Error):
            return True  # no socket: as good as closed
        return bool(readable)
