"""The metric files of exited worker processes, folded into one archive set with the same totals."""

import fcntl
import os
import re
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

from prometheus_client.mmap_dict import MmapedDict

# prometheus-client's multiprocess mode names a worker's files <type>_<pid>.db. Counters and
# histograms (and summaries) are sums over processes, so a dead worker's samples add into one
# archive file per type with nothing lost; gauges (none here) would not, and are left alone.
WORKER_FILE = re.compile(r"^(counter|histogram|summary)_(\d+)\.db$")
LOCK = "fold.lock"
# The fold's commit point: the names of the folded files, whose samples the *.db.next archives hold.
PENDING = "fold.pending"


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


@contextmanager
def folded(directory: Path):
    """Fold the files of exited workers, and hold the folder's lock while the caller reads the files.

    Under the lock no reader sees a half-done fold, and no two processes fold at once.
    """
    with open(directory / LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            finish_fold(directory)
            fold_exited_workers(directory)
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def fold_exited_workers(directory: Path) -> None:
    """Add the samples of every exited worker's files to the archive files, then remove them."""
    exited = defaultdict(list)
    for path in directory.iterdir():
        if (match := WORKER_FILE.match(path.name)) and not process_exists(int(match[2])):
            exited[match[1]].append(path)
    if not exited:
        return
    for kind, paths in exited.items():
        archive = directory / f"{kind}_archive.db"
        totals = defaultdict(float)
        for path in [archive, *paths] if archive.exists() else paths:
            for key, value, _, _ in MmapedDict.read_all_values_from_file(path):
                totals[key] += value
        write_values(directory / f"{archive.name}.next", totals)
    # Written whole, then renamed: a crash before this leaves the archives as they were.
    names = [path.name for paths in exited.values() for path in paths]
    (directory / f"{PENDING}.tmp").write_text("\n".join(names))
    (directory / f"{PENDING}.tmp").replace(directory / PENDING)
    finish_fold(directory)


def finish_fold(directory: Path) -> None:
    """Complete a committed fold (new archives in, folded files out); discard an uncommitted one."""
    pending = directory / PENDING
    if pending.exists():
        for archive in directory.glob("*.db.next"):
            archive.replace(directory / archive.name.removesuffix(".next"))
        for name in pending.read_text().split():
            (directory / name).unlink(missing_ok=True)
        pending.unlink()
    for leftover in directory.glob("*.db.next"):
        leftover.unlink()


def write_values(path: Path, values: dict[str, float]) -> None:
    path.unlink(missing_ok=True)
    archive = MmapedDict(str(path))
    try:
        for key, value in values.items():
            archive.write_value(key, value, 0.0)
    finally:
        archive.close()
