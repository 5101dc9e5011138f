"""Where rate-limit counters live: Redis across servers, else a SQLite file shared by one server's workers."""

import functools
import os
import sqlite3
import stat
import tempfile
import threading
from pathlib import Path

import redis


class StoreError(Exception):
    """The store could not count a request (down, unreachable, locked past its timeout)."""


class RedisStore:
    """Counters in Redis, exact across every server that shares it: one key per token and window,
    bumped with INCR and given its expiry with EXPIRE NX in one MULTI/EXEC, one round trip."""

    def __init__(self, url: str):
        # Short timeouts: a request waits at most this long before the store counts as down.
        self.client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)

    def increment(self, token_key: str, window_start: int, window: int) -> int:
        pipeline = self.client.pipeline(transaction=True)
        key = f"plants:rate:{token_key}:{window_start}"
        pipeline.incr(key)
        # Twice the window: a server whose clock runs a little behind still finds the key.
        pipeline.expire(key, 2 * window, nx=True)
        try:
            count, _ = pipeline.execute()
        except redis.RedisError as error:
            raise StoreError(str(error)) from error
        return count

    def ping(self) -> None:
        """One PING: the readiness check's cheap proof that the store answers."""
        try:
            self.client.ping()
        except redis.RedisError as error:
            raise StoreError(str(error)) from error


# One row per token: the start of its current window and the requests counted in it. A request
# of a newer window restarts the count; one computed just before a window turned (a thread
# that lost the race) is counted in the newer window rather than reopening the old one.
SQLITE_SCHEMA = """CREATE TABLE IF NOT EXISTS rate_counter (
    token_key TEXT PRIMARY KEY, window_start INTEGER NOT NULL, count INTEGER NOT NULL
) WITHOUT ROWID"""
SQLITE_INCREMENT = """INSERT INTO rate_counter (token_key, window_start, count) VALUES (?, ?, 1)
ON CONFLICT (token_key) DO UPDATE SET
    count = CASE WHEN excluded.window_start > window_start THEN 1 ELSE count + 1 END,
    window_start = max(window_start, excluded.window_start)
RETURNING count"""
SQLITE_PING = "SELECT count FROM rate_counter LIMIT 1"
# A row whose window ended a whole window ago is never counted again (the upsert above would
# restart it): without this, the file keeps one row per token ever used.
SQLITE_PRUNE = "DELETE FROM rate_counter WHERE window_start < ?"


class SQLiteStore:
    """Counters in a SQLite file that every worker process of one server opens: exact across them,
    with no server to run. Each increment is one statement (an upsert returning the count) in
    autocommit; WAL mode and a busy timeout let the workers' threads take turns."""

    BUSY_TIMEOUT_SECONDS = 2

    def __init__(self, directory: str):
        self.directory = Path(directory) if directory else default_directory()
        self.path = self.directory / "rate-limits.sqlite3"
        self.local = threading.local()
        # The newest window this process has pruned for: one DELETE per window per process, not
        # per request. Threads share it; a race costs at most a second, harmless DELETE.
        self.pruned_window = 0

    def connection(self) -> sqlite3.Connection:
        # One connection per thread and process: a connection must never cross a fork.
        if getattr(self.local, "pid", None) != os.getpid():
            private_directory(self.directory)
            connection = sqlite3.connect(self.path, timeout=self.BUSY_TIMEOUT_SECONDS, isolation_level=None)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")  # counters need not survive a power cut
            connection.execute(SQLITE_SCHEMA)
            self.local.connection, self.local.pid = connection, os.getpid()
        return self.local.connection

    def increment(self, token_key: str, window_start: int, window: int) -> int:
        try:
            connection = self.connection()
            if window_start > self.pruned_window:
                self.pruned_window = window_start
                connection.execute(SQLITE_PRUNE, (window_start - window,))
            return connection.execute(SQLITE_INCREMENT, (token_key, window_start)).fetchone()[0]
        except (sqlite3.Error, OSError) as error:
            self.local.pid = None  # open afresh next time: the file may have been fixed or replaced
            raise StoreError(str(error)) from error

    def ping(self) -> None:
        """Open the file (as a request would) and read from it: the readiness check."""
        try:
            self.connection().execute(SQLITE_PING).fetchone()
        except (sqlite3.Error, OSError) as error:
            self.local.pid = None
            raise StoreError(str(error)) from error


def default_directory() -> Path:
    """A directory of this user's in the system's temporary directory: per server, per user."""
    return Path(tempfile.gettempdir()) / f"plantstore-{os.getuid()}"


def private_directory(directory: Path) -> None:
    """Create `directory` for this user alone, and refuse one that another user could write to."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise OSError(f"{directory} must be a directory of this user's that no one else can write to")


@functools.lru_cache(maxsize=4)
def store_for(redis_url: str, directory: str) -> RedisStore | SQLiteStore:
    """The store the settings name: Redis when REDIS_URL is set, else the SQLite file."""
    return RedisStore(redis_url) if redis_url else SQLiteStore(directory)
