"""Readiness: whether the dependencies every API request needs (database, rate-limit store) answer."""

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from django.conf import settings
from django.db import DatabaseError, connection

from plants import rate_stores, timeouts
from plants.authentication_limit import failure_policy
from plants.throttling import rate_policy


def select_1() -> bool:
    """One `SELECT 1` on this thread's connection (reused, as requests reuse it)."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError:
        return False
    return True


class OneAtATime:
    """A check run by one thread at a time in this process: a thread asking while it runs takes its
    answer, or "does not answer" once it has run `patience_s` without one.

    A balancer checks each unit every second, and gives up on a check after a second (HAProxy's
    `inter`), but the app's thread waits out the database bound (5 s) whatever the balancer does: a
    database (or Redis) that stops answering would otherwise hold a thread for each check, five of a
    unit's eight after five seconds, and the creates still sent to the unit until it is out of
    rotation wait for a thread before they wait for the database, past the bound. So one check asks;
    the others wait at most `patience_s` for its answer, and say 503 at once when it has waited that
    long already (tests/test_timeouts.py holds creates to their bound beside a pile of checks)."""

    def __init__(self, check: Callable[[], bool], patience_s: float):
        self.check, self.patience_s = check, patience_s
        self.lock = threading.Lock()
        self.running: Run | None = None

    def __call__(self) -> bool:
        with self.lock:
            run = self.running
            mine = run is None
            if mine:
                run = self.running = Run(time.monotonic())
        if not mine:
            return run.done.wait(max(run.started + self.patience_s - time.monotonic(), 0)) and run.answer
        try:
            run.answer = self.check()
        finally:  # raised: the threads waiting take "does not answer"
            with self.lock:
                self.running = None
            run.done.set()
        return run.answer


@dataclass
class Run:
    """One run of a check: when it began, whether it is done, and its answer."""

    started: float
    done: threading.Event = field(default_factory=threading.Event)
    answer: bool = False


database_answers = OneAtATime(select_1, timeouts.READINESS_PATIENCE_S)


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


store_answers = OneAtATime(rate_limit_store_answers, timeouts.READINESS_PATIENCE_S)
# Redis is asked from a thread of its own while the request's thread asks the database: with both
# unreachable, the answer comes within the database's bound, not after both bounds one after the
# other. Two: one asks Redis, the other gives the checks asked meanwhile its answer (OneAtATime).
STORE_CHECKER = ThreadPoolExecutor(max_workers=2, thread_name_prefix="readiness")


def unready_dependencies() -> list[str]:
    """The names of the dependencies that do not answer, for the health check's message; [] when ready."""
    deadline = time.monotonic() + settings.PLANTS_DATABASE_TIMEOUT_S
    store_check = STORE_CHECKER.submit(store_answers)
    database = database_answers()
    try:
        # Its own socket timeouts (2 s), or its patience, end it first; this ends the wait for a
        # check still queued behind others, which then does not run.
        store = store_check.result(timeout=max(deadline - time.monotonic(), 0))
    except TimeoutError:
        store_check.cancel()
        store = False
    return [name for name, answers in (("database", database), ("rate-limit store", store)) if not answers]
