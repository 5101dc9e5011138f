"""Where rate-limit counters live: Redis across servers, else a file mapped by one server's workers."""

import fcntl
import functools
import hashlib
import mmap
import os
import stat
import struct
import tempfile
import threading
import time
import weakref
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

    def ping(self, window: int) -> None:
        """One PING: the readiness check's cheap proof that the store answers (whatever the window)."""
        try:
            self.client.ping()
        except redis.RedisError as error:
            raise StoreError(str(error)) from error


# A counters file: a header, then a fixed table of slots, mapped into every worker's memory.
# Header: magic (with the layout's version), the newest window counted, and how many slots that
# window has filled. Slot: a token's key (16 bytes of its hash), the window its count is of, the count.
COUNTERS_MAGIC = b"plantsr1"
COUNTERS_HEADER = struct.Struct("<8sqq")
COUNTERS_SLOT = struct.Struct("<16sqq")
# 131,072 slots (4 MiB): the tokens one window can count, up to 3/4 full so that probes stay short.
COUNTERS_SLOTS = 1 << 17
COUNTERS_CAPACITY = COUNTERS_SLOTS * 3 // 4
COUNTERS_SIZE = COUNTERS_HEADER.size + COUNTERS_SLOTS * COUNTERS_SLOT.size
# A request waits at most this long for the file's lock (its holder stopped or stuck) before the
# store counts as down, as a SQLite busy timeout or a Redis socket timeout would.
LOCK_TIMEOUT_SECONDS = 2


class CountersFileStore:
    """Counters in a file that every worker process of one server maps into memory: exact across
    them, with no server to run, and kept across a reload or a restart (the file stays).

    One file per window length (`rate-limits-60s.counters`), so that two rates never share one.
    An increment takes the process's thread lock, then the file's (flock: the processes take turns),
    finds the token's slot by open addressing and adds one: a few microseconds. A slot of an older
    window is free again, so the file never grows; a request computed just before a window turned
    is counted in the newer one, and a clock that went back more than a window restarts the count.
    """

    def __init__(self, directory: str):
        self.directory = Path(directory) if directory else default_directory()
        self.files: dict[int, CountersFile] = {}
        self.lock = threading.Lock()
        # A forked child must not use (or keep) its parent's descriptors, mappings or thread lock.
        os.register_at_fork(after_in_child=functools.partial(_reset_after_fork, weakref.ref(self)))

    def reset(self) -> None:
        """Forget the open files and make a new thread lock (a forked child: they were its parent's)."""
        for counters in self.files.values():
            counters.close()
        self.files, self.lock = {}, threading.Lock()

    def path(self, window: int) -> Path:
        return self.directory / f"rate-limits-{window}s.counters"

    def increment(self, token_key: str, window_start: int, window: int) -> int:
        key = hashlib.blake2b(token_key.encode(), digest_size=16).digest()
        return self.use(window, CountersFile.increment, key, window_start, window)

    def ping(self, window: int) -> None:
        """Open and map the window's file (as a request would) and take its lock: the readiness check."""
        self.use(window, CountersFile.check)

    def use(self, window: int, action, *args):
        """`action(counters, *args)` on the window's file, opened on first use, under the thread lock."""
        if not self.lock.acquire(timeout=LOCK_TIMEOUT_SECONDS):
            raise StoreError(f"the counters file's thread lock was held for over {LOCK_TIMEOUT_SECONDS} s")
        try:
            try:
                return action(self.opened(window), *args)
            except FileGone:
                # Removed or replaced while in use: every process moves to the file now at the path.
                self.drop(window)
                return action(self.opened(window), *args)
        except (OSError, ValueError) as error:
            self.drop(window)  # open afresh next time: the file may have been fixed
            raise StoreError(str(error)) from error
        finally:
            self.lock.release()

    def opened(self, window: int) -> "CountersFile":
        counters = self.files.get(window)
        if counters is None:
            private_directory(self.directory)
            counters = self.files[window] = CountersFile(self.path(window))
        return counters

    def drop(self, window: int) -> None:
        if counters := self.files.pop(window, None):
            counters.close()


class FileGone(OSError):
    """The counters file mapped is no longer the one at its path, or was cut short."""


def _reset_after_fork(reference: weakref.ref) -> None:
    if store := reference():
        store.reset()


class CountersFile:
    """One counters file, open and mapped; its descriptor closes when this is closed or collected."""

    def __init__(self, path: Path):
        self.path = path
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        self.file = os.fdopen(descriptor, "r+b", buffering=0)
        self.mapped = None
        try:
            with Locked(self.file):
                self.mapped = self.map()
        except BaseException:
            self.close()
            raise

    def map(self) -> mmap.mmap:
        info = os.fstat(self.file.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise OSError(f"{self.path} must be a regular file of this user's that no one else can read or write")
        if info.st_size == 0:
            # The space now: a full disk refuses here (503), not as a crash when a page is first written.
            os.posix_fallocate(self.file.fileno(), 0, COUNTERS_SIZE)
        elif info.st_size != COUNTERS_SIZE:
            raise OSError(f"{self.path} is not a rate-limit counters file ({info.st_size} bytes)")
        mapped = mmap.mmap(self.file.fileno(), COUNTERS_SIZE)
        magic, newest, filled = COUNTERS_HEADER.unpack_from(mapped)
        if (magic, newest, filled) == (bytes(8), 0, 0):  # a new file
            COUNTERS_HEADER.pack_into(mapped, 0, COUNTERS_MAGIC, 0, 0)
        elif magic != COUNTERS_MAGIC:
            mapped.close()
            raise OSError(f"{self.path} is not a rate-limit counters file")
        return mapped

    def close(self) -> None:
        if self.mapped is not None:
            self.mapped.close()
        self.file.close()

    def check(self) -> None:
        """Take the lock and see that the file is still the one mapped."""
        with Locked(self.file):
            self.check_still_mapped()

    def check_still_mapped(self) -> None:
        # Counting on in a file removed or replaced would split the count from the processes that
        # open the new one; reading one cut short would crash the process (SIGBUS). Checked under
        # the lock, before any read of the mapping.
        info = os.fstat(self.file.fileno())
        if info.st_nlink == 0 or info.st_size < COUNTERS_SIZE:
            raise FileGone(f"{self.path} was removed, replaced or cut short while in use")

    def increment(self, key: bytes, window_start: int, window: int) -> int:
        with Locked(self.file):
            self.check_still_mapped()
            return count(self.mapped, key, window_start, window)


class Locked:
    """flock(LOCK_EX) on `file` for a `with` block, given up after LOCK_TIMEOUT_SECONDS (TimeoutError,
    an OSError). A class, not a generator: it is on every counted request's path."""

    def __init__(self, file):
        self.file = file

    def __enter__(self) -> None:
        tries, deadline = 0, None
        while True:
            try:
                fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                now = time.monotonic()
                deadline = deadline or now + LOCK_TIMEOUT_SECONDS
                if now >= deadline:
                    raise TimeoutError(f"the counters file was locked for over {LOCK_TIMEOUT_SECONDS} s") from None
                tries += 1
                # The holder's work takes microseconds: let it run, then back off should it be stopped.
                if tries < 100:
                    os.sched_yield()
                else:
                    time.sleep(0.0005)

    def __exit__(self, *exception) -> None:
        fcntl.flock(self.file, fcntl.LOCK_UN)


def count(mapped: mmap.mmap, key: bytes, window_start: int, window: int) -> int:
    """Add one to `key`'s count in the newest window and return it; the caller holds the file's lock."""
    _, counted, filled = COUNTERS_HEADER.unpack_from(mapped)
    newest = counted
    if window_start > newest or window_start < newest - window:
        # A newer window; or the clock went back by more than a window (or ran ahead when the file
        # was last written): counting starts again rather than waiting for that future window.
        newest, filled = window_start, 0
    index = int.from_bytes(key[:8], "little") % COUNTERS_SLOTS
    for _ in range(COUNTERS_SLOTS):
        offset = COUNTERS_HEADER.size + index * COUNTERS_SLOT.size
        slot_key, slot_window, slot_count = COUNTERS_SLOT.unpack_from(mapped, offset)
        if slot_window == newest and slot_key == key:
            COUNTERS_SLOT.pack_into(mapped, offset, key, newest, slot_count + 1)
            if newest != counted:  # the clock went back to a window this file had counted before
                COUNTERS_HEADER.pack_into(mapped, 0, COUNTERS_MAGIC, newest, filled)
            return slot_count + 1
        if slot_window != newest:  # free: this window has not reached the key, nor this slot
            if filled >= COUNTERS_CAPACITY:
                raise StoreError(f"{filled} tokens counted in this window fill the counters file")
            COUNTERS_SLOT.pack_into(mapped, offset, key, newest, 1)
            COUNTERS_HEADER.pack_into(mapped, 0, COUNTERS_MAGIC, newest, filled + 1)
            return 1
        index = (index + 1) % COUNTERS_SLOTS
    raise StoreError("the counters file has no free slot")


def default_directory() -> Path:
    """A directory of this user's in the system's temporary directory: one per user on this machine."""
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
