"""Readiness: whether the dependencies every API request needs (database, rate-limit store) answer."""

import time
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.db import DatabaseError, connection

from plants import rate_stores
from plants.authentication_limit import failure_policy
from plants.throttling import rate_policy


def database_answers() -> bool:
    """One `SELECT 1` on this thread's connection (reused, as requests reuse it)."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError:
        return False
    return True


def rate_limit_store_answers() -> bool:
    """Redis answers, when the counters are there and a request needs it (the limits fail closed);
    true while both limits are off or they fail open (no store is asked)."""
    if rate_policy(settings.PLANTS_THROTTLE_RATE) is None and failure_policy() is None:
        return True
    if settings.PLANTS_RATE_LIMIT_FAILURE_MODE == "open":
        return True
    try:
        rate_stores.ping()
    except rate_stores.StoreError:
        return False
    return True


# Redis is asked from a thread of its own while the request's thread asks the database: with both
# unreachable, the answer comes within the database's bound, not after both bounds one after the other.
STORE_CHECKER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="readiness")


def unready_dependencies() -> list[str]:
    """The names of the dependencies that do not answer, for the health check's message; [] when ready."""
    deadline = time.monotonic() + settings.PLANTS_DATABASE_TIMEOUT_S
    store_check = STORE_CHECKER.submit(rate_limit_store_answers)
    database = database_answers()
    try:
        # Its own socket timeouts (2 s) end it first; this ends the wait for a check still queued
        # behind another thread's, which then does not run.
        store = store_check.result(timeout=max(deadline - time.monotonic(), 0))
    except TimeoutError:
        store_check.cancel()
        store = False
    return [name for name, answers in (("database", database), ("rate-limit store", store)) if not answers]
