"""`make chaos` (`python -m localcluster.chaos`): make cluster's topology under load while faults come and go.

    SEED=1234 DURATION=1200 CHAOS_DIR=test-artifacts/chaos python -m localcluster.chaos

SEED draws the schedule (random when not given, printed first either way: the same SEED and DURATION
replay the same faults at the same offsets); DURATION is the load's length in seconds (20 minutes);
the run's files go into CHAOS_DIR (test-artifacts/chaos-SEED). Exits 1 if the checker finds a violation.
"""

import os
import secrets
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from deploy.processes import ROOT
from localcluster.chaos.nemesis import draw_schedule
from localcluster.chaos.run import THROTTLE_RATE, run
from localcluster.chaos.topology import Topology


def stop_asked(*_) -> None:
    raise KeyboardInterrupt


def main() -> int:
    seed = int(os.environ.get("SEED") or secrets.randbelow(2**31))
    duration = float(os.environ.get("DURATION") or 1200)
    folder = Path(os.environ.get("CHAOS_DIR") or ROOT / "test-artifacts" / f"chaos-{seed}")
    schedule = draw_schedule(seed, duration)
    print(f"make chaos SEED={seed} DURATION={duration:g}: {len(schedule)} faults; files in {folder}", flush=True)
    for planned in schedule:
        print(f"  +{planned.at:6.1f} s  {planned.kind}, healed {planned.lasts:g} s later", flush=True)
    signal.signal(signal.SIGTERM, stop_asked)  # as Ctrl-C: every fault healed, every server stopped
    work_dir = Path(tempfile.mkdtemp(prefix="plantstore-chaos."))
    topology = Topology(work_dir, THROTTLE_RATE, supervised=True)
    try:
        topology.start()
        print(f"cluster up at {topology.cluster.url}; load starts", flush=True)
        outcome = run(topology, schedule, seed, duration, folder, say=lambda line: print(line, flush=True))
    finally:
        print("stopping the cluster", flush=True)
        topology.stop()
        shutil.rmtree(work_dir, ignore_errors=True)
    print((folder / "summary.txt").read_text(), flush=True)
    print(f"history {folder / 'history.jsonl'}, plot {folder / 'plot.svg'}", flush=True)
    if outcome.violations:
        print(f"{len(outcome.violations)} violations:\n{outcome.explained}", flush=True)
        return 1
    print("no violation", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
