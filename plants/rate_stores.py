"""Where rate-limit counters live: Redis across servers, else a file mapped by one server's workers."""

import contextlib
import fcntl
import functools
import hashlib
import mmap
import os
import stat
import struct
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


# The counters file: a header, then a fixed table of slots, mapped into every worker's memory.
# Header: magic, the newest window counted, and how many slots that window has filled.
# Slot: a token's key (16 bytes of its hash), the window its count belongs to, the count.
COUNTERS_MAGIC = b"plantsrl"
COUNTERS_HEADER = struct.Struct("<8sqq")
COUNTERS_SLOT = struct.Struct("<16sqq")
# 131,072 slots (4 MiB): the tokens one window can count, up to 3/4 full so that probes stay short.
COUNTERS_SLOTS = 1 << 17
COUNTERS_CAPACITY = COUNTERS_SLOTS * 3 // 4
COUNTERS_SIZE = COUNTERS_HEADER.size + COUNTERS_SLOTS * COUNTERS_SLOT.size


class CountersFileStore:
    """Counters in a file that every worker process of one server maps into memory: exact across
    them, with no server to run, and kept across a reload or a restart (the file stays).

    An increment takes the file's lock (flock: the workers' threads and processes take turns),
    finds the token's slot by open addressing and adds one: a few microseconds, no system call
    but the lock's. A slot whose window is older than the newest counted is free again, so the
    file never grows; a request computed just before a window turned is counted in the newer one.
    """

    def __init__(self, directory: str):
        self.directory = Path(directory) if directory else default_directory()
        self.path = self.directory / "rate-limits.counters"
        self.local = threading.local()

    def mapping(self) -> tuple[int, mmap.mmap]:
        # Each thread opens the file itself: flock excludes other open files, whatever process holds
        # them, and a mapping must never cross a fork.
        if getattr(self.local, "pid", None) != os.getpid():
            private_directory(self.directory)
            descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX)
                if os.fstat(descriptor).st_size == 0:
                    os.ftruncate(descriptor, COUNTERS_SIZE)
                mapped = mmap.mmap(descriptor, COUNTERS_SIZE)
                magic, _, _ = COUNTERS_HEADER.unpack_from(mapped)
                if magic == bytes(8):  # a new file
                    COUNTERS_HEADER.pack_into(mapped, 0, COUNTERS_MAGIC, 0, 0)
                elif magic != COUNTERS_MAGIC:
                    raise OSError(f"{self.path} is not a rate-limit counters file")
            except (OSError, ValueError):
                os.close(descriptor)
                raise
            finally:
                with contextlib.suppress(OSError):
                    fcntl.flock(descriptor, fcntl.LOCK_UN)
            self.local.descriptor, self.local.mapped, self.local.pid = descriptor, mapped, os.getpid()
        return self.local.descriptor, self.local.mapped

    def increment(self, token_key: str, window_start: int, window: int) -> int:
        key = hashlib.blake2b(token_key.encode(), digest_size=16).digest()
        try:
            descriptor, mapped = self.mapping()
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        except (OSError, ValueError) as error:
            self.local.pid = None  # open afresh next time: the file may have been fixed or replaced
            raise StoreError(str(error)) from error
        try:
            return self.count(mapped, key, window_start)
        finally:
            fcntl.flock(descriptor, fcntl.LOCK_UN)

    @staticmethod
    def count(mapped: mmap.mmap, key: bytes, window_start: int) -> int:
        """Add one to `key`'s count in the newest window; the caller holds the lock."""
        _, newest, filled = COUNTERS_HEADER.unpack_from(mapped)
        if window_start > newest:
            newest, filled = window_start, 0
        index = int.from_bytes(key[:8], "little") % COUNTERS_SLOTS
        while True:
            offset = COUNTERS_HEADER.size + index * COUNTERS_SLOT.size
            slot_key, slot_window, count = COUNTERS_SLOT.unpack_from(mapped, offset)
            if slot_window == newest and slot_key == key:
                COUNTERS_SLOT.pack_into(mapped, offset, key, newest, count + 1)
                return count + 1
            if slot_window != newest:  # free: this window has not reached the key, nor this slot
                if filled >= COUNTERS_CAPACITY:
                    raise StoreError(f"{filled} tokens counted in this window fill the counters file")
                COUNTERS_SLOT.pack_into(mapped, offset, key, newest, 1)
                COUNTERS_HEADER.pack_into(mapped, 0, COUNTERS_MAGIC, newest, filled + 1)
                return 1
            index = (index + 1) % COUNTERS_SLOTS

    def ping(self) -> None:
        """Open and map the file (as a request would) and take its lock: the readiness check."""
        try:
            descriptor, _ = self.mapping()
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            fcntl.flock(descriptor, fcntl.LOCK_UN)
        except (OSError, ValueError) as error:
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
def store_for(redis_url: str, directory: str) -> RedisStore | CountersFileStore:
    """The store the settings name: Redis when REDIS_URL is set, else the counters file."""
    return RedisStore(redis_url) if redis_url else CountersFileStore(directory)
