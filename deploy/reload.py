"""`systemctl reload plantstore` (ExecReload=, `python -m deploy.reload MAINPID`): a reload that reports its outcome.

The unit's settings as systemd reads them now (a changed EnvironmentFile= included) to
$RUNTIME_DIRECTORY for the new app server, SIGHUP to deploy/serve.py, then wait for the outcome it
writes there: exit 0 once the new version serves, else 1 with the reason on standard error (the journal).
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

from deploy.serve import ENVIRONMENT_FILE
from deploy.unit import RELOAD_WORST_S

# The reload's own worst case (deploy/unit.py), and a little more; under the unit's TimeoutStartSec=,
# which bounds ExecReload= (tests/test_systemd_unit.py checks both).
WAIT_S = RELOAD_WORST_S + 10


def main(pid: int) -> int:
    runtime = Path(os.environ["RUNTIME_DIRECTORY"].split(":")[0])
    path = runtime / "reload"
    before = path.read_text() if path.exists() else ""  # serve.py replaces it whole, never removes it
    # The settings the reload applies: this process's environment, which systemd has just built from
    # the unit's Environment= and EnvironmentFile= (read anew), for serve.py alone (mode 600).
    settings = runtime / f"{ENVIRONMENT_FILE}.new"
    with os.fdopen(os.open(settings, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as file:
        json.dump(dict(os.environ), file)
    os.replace(settings, runtime / ENVIRONMENT_FILE)
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
