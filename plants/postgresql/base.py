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


class DatabaseWrapper(base.DatabaseWrapper):
    _token_cache_owner = None  # the psycopg connection the cache below belongs to
    _token_cache: TokenCache | None = None

    def is_usable(self) -> bool:
        connection = self.connection
        if connection is None or connection.closed or connection.broken:
            return False
        if self._readable() and not (self._receive_notifications() and not self._readable()):
            return False
        return True

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
        if self._token_cache_owner is not self.connection:
            self._token_cache_owner, self._token_cache = self.connection, self._listen_for_token_changes()
        if self._token_cache is not None and not self._receive_notifications():
            self._token_cache = None  # closed by the server: its notifications may be lost
        return self._token_cache

    def _listen_for_token_changes(self) -> TokenCache | None:
        from plants.models import ApiToken

        with self.cursor() as cursor:
            cursor.execute(TRIGGER_EXISTS, [CHANNEL, ApiToken._meta.db_table])
            if not cursor.fetchone()[0]:
                logger.warning("API tokens are not cached: the token table has no change trigger; run migrate.")
                return None
            cursor.execute(f"LISTEN {CHANNEL}")
        cache = TokenCache()
        self.connection.add_notify_handler(cache.on_notify)
        return cache

    def _readable(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection.fileno()], [], [], 0)
        except (OSError, ValueError):
            return True  # no socket: as good as closed
        return bool(readable)

    def _receive_notifications(self) -> bool:
        """Read what the server has sent this idle connection, handing notifications to their
        handlers (psycopg's, then ours); False if the server has closed the connection."""
        pgconn = self.connection.pgconn
        try:
            pgconn.consume_input()
        except psycopg.Error:
            return False
        while notify := pgconn.notifies():
            pgconn.notify_handler(notify)
        return True
