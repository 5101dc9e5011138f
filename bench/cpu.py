"""CPU time of process trees, for make bench's CPU per create: a server's, and PostgreSQL's whole server.

A process's time counts with its descendants', the live ones read from /proc and the ones that exited
through their parent's cutime and cstime (the kernel adds a child's time there when the parent reaps
it): PostgreSQL's backends come and go, a respawned app worker leaves its time to its master.
"""

import os
from pathlib import Path

from localcluster.processes import descendants

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(roots: list[int]) -> float:
    """User and system CPU time of `roots` and every process under them, reaped children included."""
    total = 0
    for pid in [*roots, *(child for root in roots for child in descendants(root))]:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):  # exited meanwhile: its parent has its time
            continue
        # After the command: state is field 0, so utime, stime, cutime, cstime are fields 11 to 14.
        total += sum(int(field) for field in fields[11:15])
    return total / TICKS


def status_kib(pid: int, field: str) -> int:
    """A process's `field` of /proc/<pid>/status in KiB: VmRSS, its resident memory, or VmHWM, its peak."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return int(next(line for line in lines if line.startswith(field)).split()[1])


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
