"""Where rate-limit counters live: Redis through Django's cache framework, else the database itself.

Either way a count is exact across every worker process and thread of every server that shares the
store: each request is one atomic increment in the store, never a count kept in a process.
- With REDIS_URL set (several servers, one limit), the cache alias `rate_limits` is Django's own
  Redis backend: `incr()` is Redis' INCR, and `add()` makes a window's key with its expiry (SET NX EX).
- Otherwise the database counts, with its own atomic upsert (INSERT ... ON CONFLICT DO UPDATE, on
  PostgreSQL and on SQLite 3.35 or later): one statement per request, one row per token, reused from
  window to window, so the table holds no more rows than there are tokens. On PostgreSQL the table
  is UNLOGGED: no flush per count, and a crash or a failover starts the counts afresh
  (docs/decisions/rate-limit-store.md).
A store that cannot count raises StoreError (Redis) or the database's own error. The database is the
request's own: the request is answered 503. Redis is another service: PLANTS_RATE_LIMIT_FAILURE_MODE
says what then, `open` (the default: served uncounted) or `closed` (503).
"""

import functools

from django.conf import settings
from django.core.cache import caches
from django.db import connection

from plants.models import RateLimitCounter, quoted_names

# The cache alias the settings define when REDIS_URL is set.
RATE_LIMIT_CACHE = "rate_limits"


class StoreError(Exception):
    """The store could not count a request (Redis down, unreachable or too slow)."""


def increment(key: str, window_start: int, window: int) -> int:
    """Count one request of `key` in the window of `window` seconds from `window_start`; return the
    window's count so far. A request computed just before its window turned counts in the newer one."""
    if RATE_LIMIT_CACHE in settings.CACHES:
        return cache_increment(key, window_start, window)
    return database_increment(key, window_start, window)


def cache_increment(key: str, window_start: int, window: int) -> int:
    import redis  # here, not above: a service without REDIS_URL never loads redis-py

    cache = caches[RATE_LIMIT_CACHE]
    name = f"{key}:{window_start}"
    try:
        try:
            return cache.incr(name)  # Redis' INCR, once the window's key exists: the usual case
        except ValueError:  # the window's first request, or two at once
            # add() makes the key with its expiry only if it is still missing (SET NX EX). Twice
            # the window: a server whose clock runs a little behind still finds it.
            return 1 if cache.add(name, 1, timeout=2 * window) else cache.incr(name)
    except redis.RedisError as error:
        raise StoreError(str(error)) from error


def database_increment(key: str, window_start: int, window: int) -> int:
    with connection.cursor() as cursor:
        cursor.execute(upsert_sql(connection.vendor), [key, window_start, window, window])
        return cursor.fetchone()[0]


@functools.cache
def upsert_sql(vendor: str) -> str:
    """The counting statement on this kind of database, with the table's and columns' names from the model, quoted:
    SQL, since the ORM has no upsert that returns the row's new count (bulk_create's update_conflicts
    sets columns to the new row's values, not to an expression of the stored ones).

    Its parameters: the key, the window's start, then the window in seconds twice. The row starts afresh for a newer window, and for an older one more than a window
    back (a clock that went back); a request of the window just before the row's counts in the row's.
    """
    table, key, start, count = quoted_names(RateLimitCounter, "key", "window_start", "count")
    fresh = f"(excluded.{start} > {table}.{start} OR excluded.{start} < {table}.{start} - %s)"
    return (
        f"INSERT INTO {table} ({key}, {start}, {count}) VALUES (%s, %s, 1) ON CONFLICT ({key}) DO UPDATE SET "
        f"{count} = CASE WHEN {fresh} THEN 1 ELSE {table}.{count} + 1 END, "
        f"{start} = CASE WHEN {fresh} THEN excluded.{start} ELSE {table}.{start} END "
        f"RETURNING {count}"
    )


def database_forget(prefix: str, *, before: int) -> None:
    """Delete the database's counts of keys starting with `prefix` whose window started before `before`."""
    RateLimitCounter.objects.filter(key__startswith=prefix, window_start__lt=before).delete()


def ping() -> None:
    """The readiness check's question to Redis (one GET); the database's is the database check."""
    if RATE_LIMIT_CACHE in settings.CACHES:
        import redis  # as in cache_increment

        try:
            caches[RATE_LIMIT_CACHE].get("ping")
        except redis.RedisError as error:
            raise StoreError(str(error)) from error
