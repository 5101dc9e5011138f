"""`systemctl reload plantstore` (ExecReload=): `python -m deploy.reload MAINPID`, a reload that reports its outcome.

SIGHUP to deploy/serve.py, then wait for the outcome it writes to $RUNTIME_DIRECTORY/reload: exit 0
once the new version serves; exit 1 with the reason on standard error (the journal) when it did not
come up and the running version serves on, or when no outcome came within WAIT_S.
"""

import os
import signal
import sys
import time
from pathlib import Path

# Under systemd's 90 s for ExecReload=: a new app server has 60 s to answer (deploy/unit.py), and
# the reload before it may still be retiring its old one.
WAIT_S = 85


def read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def main(pid: int) -> int:
    path = Path(os.environ["RUNTIME_DIRECTORY"].split(":")[0]) / "reload"
    before = read(path)
    os.kill(pid, signal.SIGHUP)
    deadline = time.monotonic() + WAIT_S
    while (now := read(path)) == before:  # "<count> <outcome>", the count new at each reload
        if time.monotonic() > deadline:
            sys.stderr.write(f"reload: serve.py (pid {pid}) reported no outcome within {WAIT_S} s\n")
            return 1
        time.sleep(0.1)
    outcome = now.partition(" ")[2]
    sys.stderr.write(f"reload: {outcome.strip()}\n")
    return 0 if outcome.startswith("reloaded") else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
