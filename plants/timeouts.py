"""The bounds on every wait for the database and Redis, whatever the network or the server does.

A pulled cable drops packets without refusing anything: no error ever arrives, and only a timeout of
our own ends the wait. Each wait below ends within the database bound T (PLANTS_DATABASE_TIMEOUT_S,
5 s unless set) and raises the driver's OperationalError, which the API answers 503 (plants/
exception_handler.py); the first wait that ends so ends the request. docs/operating.md ("Network
faults") tells what a client sees and what an operator does.
"""

from django.core.exceptions import ImproperlyConfigured

# 5 s: above a healthy request's slowest database round trip by three orders of magnitude (a create
# takes about 2 ms), so a slow moment is never cut short, and below a client's usual 10 s timeout, so
# a client is told 503 (and retries) rather than giving up unanswered.
DEFAULT_DATABASE_TIMEOUT_S = 5
# libpq's smallest connect_timeout: a smaller one is read as 2 s.
SMALLEST_DATABASE_TIMEOUT_S = 2
# A health check that has waited this long for the database is past any healthy pause (a `SELECT 1`
# takes about a millisecond) and past a balancer's patience (HAProxy's check timeout is its `inter`,
# 1 s): checks asked meanwhile answer 503 at once (plants/readiness.py: OneAtATime).
READINESS_PATIENCE_S = 1
# A request's wait for an app server's thread (nginx stamps it, X-Request-Start): past half the bound
# it is answered 503 at once (plants/middleware.py: QueueDeadlineMiddleware). Threads all waiting on
# a silent database free up only after the bound; a request queued behind them would then wait out
# its own bound too, twice the bound in all, past a client's usual 10 s: so every request is answered
# within 1.5 × the bound. A healthy unit's queue is milliseconds; past seconds it is overloaded.
QUEUE_PATIENCE_OF_BOUND = 0.5
# Redis answers in well under a millisecond: 2 s is past any healthy pause. A command waits at most
# this for a new connection and at most this for its answer (redis-py's socket timeouts, which it
# enforces itself, so they hold against a server that hangs as well as a network that drops), and
# is never sent again (no retry): a request's one wait on Redis ends within 2 s, inside the bound.
REDIS_TIMEOUT_S = 2


def redis_options() -> dict:
    """The rate-limit cache's OPTIONS (plantstore_site/settings.py), as redis-py's ConnectionPool reads
    them. redis-py is loaded here, by a service that sets REDIS_URL, and by no other: it is about a
    seventh of a worker's start (0.2 s of CPU)."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return {
        "socket_connect_timeout": REDIS_TIMEOUT_S,
        "socket_timeout": REDIS_TIMEOUT_S,
        "retry": Retry(NoBackoff(), retries=0),
    }


def database_timeout(seconds: int) -> int:
    if seconds < SMALLEST_DATABASE_TIMEOUT_S:
        raise ImproperlyConfigured(
            f"PLANTS_DATABASE_TIMEOUT_S must be at least {SMALLEST_DATABASE_TIMEOUT_S} "
            f"(libpq's smallest connect_timeout), not {seconds}."
        )
    return seconds


def postgresql_options(options: dict, host: str, timeout_s: int) -> dict:
    """`options` (DATABASE_URL's query parameters, which win) with libpq's timeouts added.

    psycopg hands every one to libpq as a connection parameter; `host` is the URL's host (several,
    comma-separated, in the failover form, each tried in turn).
    """
    hosts = len((options.get("host") or host or "").split(","))
    timeouts = {
        # A connect whose packets vanish: libpq gives up on each host after this, so all of them
        # together take at most the bound (never under libpq's smallest, 2 s).
        "connect_timeout": max(SMALLEST_DATABASE_TIMEOUT_S, timeout_s // hosts),
        # A statement sent but never acknowledged (the cable pulled before it left): the kernel
        # drops the connection once sent data has waited this long for its acknowledgement.
        "tcp_user_timeout": timeout_s * 1000,
        # A statement acknowledged whose answer never comes (the cable pulled after it left), and
        # an idle connection whose server is gone: a probe each second once the connection has
        # been silent 1 s; the kernel drops it once a probe is unanswered past tcp_user_timeout
        # (Linux), or after 1 + (T - 1) unanswered seconds elsewhere. A server busy on a long
        # statement answers the probes: only lock_timeout (the database's, below) ends some of those.
        # One probe a second per idle connection is a few bytes; a dead idle connection is then seen
        # by the health check before a request is sent on it (plants/postgresql/base.py).
        "keepalives": 1,
        "keepalives_idle": 1,
        "keepalives_interval": 1,
        "keepalives_count": max(1, timeout_s - 1),
    }
    # A statement kept waiting for a lock: not here but in the database's own lock_timeout, which
    # `migrate` sets (plants/lock_timeout.py). A startup parameter (`options`) would not reach
    # PostgreSQL behind a pooler: PgBouncer refuses the connection unless told to drop it.
    return {**timeouts, **options}


def lock_timeout_ms(timeout_s: int) -> int:
    """The longest a statement waits for a lock (a migration's, a racing create of the same id):
    PostgreSQL cancels the wait itself after the bound less 1 s, a second before a pooler's
    query_timeout (localcluster/config/pgbouncer.ini) would cut the connection. Not
    statement_timeout: it also cancels a commit's wait for a synchronous standby, and PostgreSQL then
    reports the commit as done (a warning, no error) although only the primary has it: a create
    answered 200 that a failover loses."""
    return (timeout_s - 1) * 1000


def sqlite_options(options: dict, timeout_s: int) -> dict:
    """`options` with SQLite's busy wait: how long a statement waits for another connection's write
    lock before "database is locked" (OperationalError, answered 503)."""
    return {"timeout": timeout_s, **options}
