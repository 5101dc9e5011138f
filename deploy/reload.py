"""`systemctl reload plantstore` (the unit's ExecReload=): a graceful reload that reports its outcome.

    python deploy/reload.py MAINPID

SIGHUP to serve.py, then wait for the outcome it writes to $RUNTIME_DIRECTORY/reload: exit 0 once
the new version serves; exit 1, the reason on standard error (the journal), when it did not come
up and the running version serves on, or when no outcome came within WAIT_S.
"""

import os
import signal
import sys
import time
from pathlib import Path

# Under systemd's 90 s for ExecReload= (TimeoutStartSec's default): a new app server has 60 s to
# answer /livez (deploy/unit.py), and the reload before it may still be retiring its old one.
WAIT_S = 85


def outcome_file() -> Path:
    return Path(os.environ["RUNTIME_DIRECTORY"].split(":")[0]) / "reload"


def read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def main(pid: int) -> int:
    path = outcome_file()
    before = read(path)
    os.kill(pid, signal.SIGHUP)
    deadline = time.monotonic() + WAIT_S
    while (now := read(path)) == before:
        if time.monotonic() > deadline:
            sys.stderr.write(f"reload: serve.py (pid {pid}) reported no outcome within {WAIT_S} s\n")
            return 1
        time.sleep(0.1)
    _, _, outcome = now.partition(" ")  # "<count> <outcome>", the count new at each reload
    sys.stderr.write(f"reload: {outcome.strip()}\n")
    return 0 if outcome.startswith("reloaded") else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
