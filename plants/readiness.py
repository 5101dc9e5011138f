"""Readiness: whether the dependencies every API request needs (database, rate-limit store) answer."""

from django.conf import settings
from django.db import DatabaseError, connection

from plants.rate_stores import StoreError, store_for
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
    """Redis answers PING, or the counters file opens and locks; true while throttling is off (no store)."""
    policy = rate_policy(settings.PLANTS_THROTTLE_RATE)
    if policy is None:
        return True
    try:
        store_for(settings.REDIS_URL, settings.PLANTS_THROTTLE_DIR).ping(policy.window)
    except StoreError:
        return False
    return True


def unready_dependencies() -> list[str]:
    """The names of the dependencies that do not answer, for the health check's message; [] when ready."""
    checks = {"database": database_answers, "rate-limit store": rate_limit_store_answers}
    return [name for name, answers in checks.items() if not answers()]
