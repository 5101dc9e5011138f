"""Readiness: whether the dependencies every API request needs (database, rate-limit store) answer."""

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
    """Redis answers, when the counters are there; true while both limits are off (no store is asked)."""
    if rate_policy(settings.PLANTS_THROTTLE_RATE) is None and failure_policy() is None:
        return True
    try:
        rate_stores.ping()
    except rate_stores.StoreError:
        return False
    return True


def unready_dependencies() -> list[str]:
    """The names of the dependencies that do not answer, for the health check's message; [] when ready."""
    checks = {"database": database_answers, "rate-limit store": rate_limit_store_answers}
    return [name for name, answers in checks.items() if not answers()]
