"""`systemctl reload plantstore` (ExecReload=, `python -m deploy.reload MAINPID`): a reload that reports its outcome.

SIGHUP to deploy/serve.py, then wait for the outcome it writes to $RUNTIME_DIRECTORY/reload: exit 0
once the new version serves, else 1 with the reason on standard error (the journal).
"""

import os
import signal
import sys
import time
from pathlib import Path

from deploy.unit import RELOAD_WORST_S

# The reload's own worst case (deploy/unit.py), and a little more; under the unit's TimeoutStartSec=,
# which bounds ExecReload= (tests/test_systemd_unit.py checks both).
WAIT_S = RELOAD_WORST_S + 10


def main(pid: int) -> int:
    path = Path(os.environ["RUNTIME_DIRECTORY"].split(":")[0]) / "reload"
    before = path.read_text() if path.exists() else ""  # serve.py replaces it whole, never removes it
    os.kill(pid, signal.SIGHUP)
    deadline = time.monotonic() + WAIT_S
    while (now := path.read_text() if path.exists() else "") == before:  # "<count> <outcome>"
        if time.monotonic() > deadline:
            sys.stderr.write(f"reload: serve.py (pid {pid}) reported no outcome within {WAIT_S} s\n")
            return 1
        time.sleep(0.1)
    outcome = now.partition(" ")[2]
    sys.stderr.write(f"reload: {outcome.strip()}\n")
    return 0 if outcome.startswith("reloaded") else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
