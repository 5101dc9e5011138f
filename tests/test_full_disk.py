"""A full disk under load: with the database's filesystem filled (PostgreSQL's data directory and its
WAL, or make serve's SQLite file), every create is answered 200 or a 503 Error body within the bound
(PLANTS_DATABASE_TIMEOUT_S), none answered 200 is lost, and once space is freed the unit serves again
by itself, without a restart. The filesystem is a size-limited tmpfs the test mounts in its temp dir
(as root, as the tests run here and in CI) and unmounts whatever happens."""

import os
import shutil
import subprocess
import time
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

import psycopg
import pytest

from tests.live import Load, MakeServe, live_unit
from tests.test_exhausted_connections import SmallPostgres, stored_ids
from tests.test_timeouts import BOUND_S, DATABASE_DOWN, MARGIN_S, manage

# Room for PostgreSQL's cluster (about 40 MB after initdb, one 16 MB WAL segment of it), the
# migrated database and the load's rows, or for make serve's SQLite file: then filled to the last byte.
FILESYSTEM_MB = 128
# How many creates must be refused on the full disk before space is freed: enough that PostgreSQL has
# had to extend its files or start a WAL segment, not merely fill the free space in its pages.
REFUSED_WHILE_FULL = 30
# make serve's SQLite file (a few hundred KB migrated) and the load's rows.
SQLITE_FILESYSTEM_MB = 16
# Once space is freed, creates are answered 200 again within this, PostgreSQL's crash recovery included.
SERVES_AGAIN_WITHIN_S = 30


@contextmanager
def small_filesystem(path: Path, size_mb: int, owner: str | None = None):
    """A tmpfs of `size_mb` mounted on `path` (made here, owned by `owner`) while the block runs,
    unmounted after it whatever happens (lazily if a process still holds a file on it)."""
    path.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0755", "plantstore-full-disk", str(path)],
        check=True,
        capture_output=True,
        timeout=10,
    )
    try:
        if owner:
            shutil.chown(path, owner, owner)
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True, timeout=30).returncode:
            subprocess.run(["umount", "--lazy", str(path)], check=True, capture_output=True, timeout=30)


def fill(filesystem: Path, within_s: float = 10) -> Path:
    """A filler file written into `filesystem` until the write fails with ENOSPC: not one byte is
    left for anyone (tmpfs keeps none for root). Topped up while the load frees space under it
    (SQLite deletes a transaction's rollback journal as it ends) until none is left."""
    filler = filesystem / "filler"
    deadline = time.monotonic() + within_s
    block = "1M"
    while True:
        subprocess.run(
            ["dd", "if=/dev/zero", f"of={filler}", f"bs={block}", "oflag=append", "conv=notrunc"],
            capture_output=True,
            timeout=60,
        )
        if not os.statvfs(filesystem).f_bavail:
            return filler
        if time.monotonic() > deadline:
            raise RuntimeError(f"{filesystem} is not full")
        block = "4K"


def refused_since(load: Load, moment: float) -> int:
    return sum(1 for _, status, _, _, sent in load.answers if status == 503 and sent > moment)


def answered_200_since(load: Load, moment: float) -> bool:
    return any(status == 200 and sent > moment for _, status, _, _, sent in load.answers)


def assert_every_answer_200_or_503(load: Load) -> None:
    """Every create answered (within the Load's timeout, the bound and its margin): 200, or a 503 Error body."""
    for plant_id, status, content_type, text, _ in load.answers:
        assert status == 200 or (status, content_type, text) == (503, "application/json", DATABASE_DOWN), (
            plant_id,
            status,
            text,
        )


class PostgresOnSmallDisk(SmallPostgres):
    """SmallPostgres with its data directory (WAL included) on a small filesystem of its own, fsync
    on as in production; its log stays outside, as production's goes to the journal."""

    def __init__(self, stack: ExitStack):
        super().__init__(max_connections=20, reserved=3, fsync="on")
        stack.callback(shutil.rmtree, self.work_dir, ignore_errors=True)  # after the unmount
        owner = "postgres" if os.geteuid() == 0 else None
        self.disk = stack.enter_context(small_filesystem(self.work_dir / "disk", FILESYSTEM_MB, owner))
        self.data = self.disk / "data"

    def log(self) -> str:
        return (self.work_dir / "postgres.log").read_text(errors="replace")


@pytest.fixture
def postgres_on_small_disk():
    with ExitStack() as stack:
        server = PostgresOnSmallDisk(stack)
        stack.callback(server.stop)  # stopped before its filesystem is unmounted
        yield server.start()


def wait_for_refusals(load: Load, count: int, since: float, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while refused_since(load, since) < count and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.mark.live
@pytest.mark.own_database
def test_postgresql_s_disk_filled_under_load_answers_200_or_503_loses_nothing_and_serves_again_once_freed(
    tmp_path, postgres_on_small_disk
):
    database = postgres_on_small_disk
    app_url = database.url("plantstore")
    manage(app_url, "migrate", "--no-input")
    secret = manage(app_url, "token", "issue", "full-disk").strip()
    unit = live_unit(tmp_path, DATABASE_URL=app_url).start()
    restarts = 0
    try:
        with Load(f"{unit.url}/plants", secret, clients=4, timeout=BOUND_S + MARGIN_S) as load:
            load.wait_for(50)
            filler = fill(database.disk)
            filled = time.monotonic()
            wait_for_refusals(load, REFUSED_WHILE_FULL, filled)  # "could not extend file": it serves on
            # The WAL's next segment, which a busy server needs every 16 MB, needed now: PostgreSQL
            # cannot create it, PANICs and restarts, and its recovery cannot write either.
            switched = time.monotonic()
            with suppress(psycopg.OperationalError), database.connect("postgres") as admin:
                admin.execute("SELECT pg_switch_wal()")  # may be what PANICs
            wait_for_refusals(load, REFUSED_WHILE_FULL, switched)
            filler.unlink()
            freed = time.monotonic()
            while not answered_200_since(load, freed) and time.monotonic() < freed + SERVES_AGAIN_WITHIN_S:
                if database.process.poll() is not None:
                    # The postmaster gave up (its crash recovery could not write either): started
                    # again on its data, as the systemd drop-in docs/operating.md gives does
                    # (Restart=on-failure; Debian's postgresql@.service has none).
                    database.launch()
                    restarts += 1
                time.sleep(0.05)
            served_again_after = time.monotonic() - freed
            serving = len(load.answers)
            load.wait_for(serving + 50)
        stored = stored_ids(database)
    finally:
        unit.stop()
    log = database.log()

    # The disk was full for PostgreSQL. Whether it also PANICked depends on whether its next WAL
    # segment was already on disk (a recycled one): the client's answers are the same either way.
    assert "could not extend file" in log, log[-3000:]
    assert refused_since(load, switched) >= REFUSED_WHILE_FULL
    assert_every_answer_200_or_503(load)
    assert served_again_after < SERVES_AGAIN_WITHIN_S, (restarts, log[-3000:])
    assert [status for _, status, *_ in load.answers[serving:]].count(200) >= 40  # serving steadily again
    assert load.ids_with(200) <= stored, sorted(load.ids_with(200) - stored)


def serves_again(load: Load, since: float, timeout: float) -> float:
    """Seconds from `since` until a create sent after it was answered 200 (at least `timeout` if none was)."""
    while not answered_200_since(load, since) and time.monotonic() < since + timeout:
        time.sleep(0.05)
    return time.monotonic() - since


@pytest.mark.live
@pytest.mark.own_database
def test_make_serve_s_sqlite_disk_filled_under_load_answers_200_or_503_loses_nothing_and_serves_again_once_freed(
    tmp_path,
):
    with small_filesystem(tmp_path / "disk", SQLITE_FILESYSTEM_MB) as disk:
        server = MakeServe(tmp_path, database=disk / "db.sqlite3").start()  # its log and static files elsewhere
        try:
            secret = server.token()
            with Load(f"{server.url}/plants", secret, clients=4, timeout=BOUND_S + MARGIN_S) as load:
                load.wait_for(50)
                filler = fill(disk)
                filled = time.monotonic()
                wait_for_refusals(load, REFUSED_WHILE_FULL, filled)
                filler.unlink()
                freed = time.monotonic()
                served_again_after = serves_again(load, freed, SERVES_AGAIN_WITHIN_S)
                serving = len(load.answers)
                load.wait_for(serving + 50)
            stored = server.stored_ids()
            log = server.log()
        finally:
            server.stop()

    assert refused_since(load, filled) >= REFUSED_WHILE_FULL
    assert "database or disk is full" in log
    assert_every_answer_200_or_503(load)
    assert served_again_after < SERVES_AGAIN_WITHIN_S
    assert [status for _, status, *_ in load.answers[serving:]].count(200) >= 40  # serving steadily again
    assert load.ids_with(200) <= stored, sorted(load.ids_with(200) - stored)
