"""The Django peers' per-token rate limit, in their equal-work variants (PEER_EQUAL_WORK=1).

A fixed window per token, counted by one atomic upsert per request (INSERT ... ON CONFLICT DO UPDATE
... RETURNING) in the service's own table, plants_ratelimitcounter, UNLOGGED on PostgreSQL: the service's
statement (plants/rate_stores.py) as an app would first write it, without its allowance for a clock
that went back, on the same table. Each peer counts on keys of its own
(`drf:<token id>`), so the bench can check that its count equals the requests it answered.
"""

import time

from django.db import connection

from bench.peers.tables.models import RateLimitCounter

# Never reached: the bench measures the count, not a refusal. A day's window (DRF's "1000000000/day"),
# so a bench run's requests add up in one row.
LIMIT = 1_000_000_000
WINDOW_S = 86_400

TABLE = connection.ops.quote_name(RateLimitCounter._meta.db_table)
COUNT_REQUEST = (
    f"INSERT INTO {TABLE} (key, window_start, count) VALUES (%s, %s, 1) ON CONFLICT (key) DO UPDATE SET "
    f"count = CASE WHEN {TABLE}.window_start = excluded.window_start THEN {TABLE}.count + 1 ELSE 1 END, "
    "window_start = excluded.window_start RETURNING count"
)


def count_request(key: str) -> int:
    """Count one request of `key` in the current window; return the window's count so far."""
    window_start = int(time.time()) // WINDOW_S * WINDOW_S
    with connection.cursor() as cursor:
        cursor.execute(COUNT_REQUEST, [key, window_start])
        return cursor.fetchone()[0]


def seconds_to_next_window() -> float:
    return WINDOW_S - time.time() % WINDOW_S
