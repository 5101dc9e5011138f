"""API tokens kept by each PostgreSQL connection, and dropped when PostgreSQL says they changed.

Looking a token up costs every API request a database round trip, as much as its INSERT. So a
persistent connection LISTENs on CHANNEL before it reads any token, and keeps the tokens it has
read; a trigger on the token table (migration 0002) NOTIFYs every change authentication could
see: revoking, expiring, renaming, deleting, truncating. Before the cache answers, the connection
reads the notifications the server has sent it, so a change holds from the first request that
arrives after PostgreSQL delivered it, which it does as the change commits (well within a
millisecond on an idle connection), on every worker.

The cache answers only when that reasoning holds:
- on PostgreSQL, with PLANTS_TOKEN_CACHE on and a persistent connection (CONN_MAX_AGE not 0):
  a cache lives and dies with its connection, so no notification can be missed between two
  connections (`plants.postgresql.base.DatabaseWrapper` sets it up);
- outside transactions: a change made in the current transaction is only notified at commit.

Unknown digests are never cached, so a guessing client cannot fill the cache, and a new token
works at once.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from plants.models import ApiToken

# The channel migration 0002's trigger notifies, with the changed token's digest as payload
# ('' for "every token", after a TRUNCATE).
CHANNEL = "plants_apitoken_changed"
# Tokens are few (an operator issues them); the bound only keeps a mistake from growing a worker.
MAX_TOKENS = 1000


class TokenCache:
    def __init__(self) -> None:
        self.tokens: dict[str, ApiToken] = {}

    def get(self, digest: str) -> "ApiToken | None":
        return self.tokens.get(digest)

    def add(self, digest: str, token: "ApiToken") -> None:
        if len(self.tokens) >= MAX_TOKENS:
            self.tokens.clear()
        self.tokens[digest] = token

    def on_notify(self, notify) -> None:
        """psycopg's notify handler: forget the token the notification names (all if none)."""
        if notify.channel != CHANNEL:
            return
        if notify.payload:
            self.tokens.pop(notify.payload, None)
        else:
            self.tokens.clear()
