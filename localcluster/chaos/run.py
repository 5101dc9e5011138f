"""One chaos run on a started topology: the clients' load, the nemesis, the wait for convergence, the
checker, and the files a reader looks at (history.jsonl, summary.txt, plot.svg, violations.txt)."""

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from localcluster.chaos.checker import CONVERGE_WITHIN_S, Violation, ambiguous_outcomes, check, explain
from localcluster.chaos.clients import Client
from localcluster.chaos.history import History
from localcluster.chaos.nemesis import Nemesis, Planned
from localcluster.chaos.report import plot, summary, summary_text
from localcluster.chaos.topology import HOST, Topology

# Clients within their limit, each pausing between creates (at most about 6 a second: 400 a minute),
# and one sending as fast as it is answered, far past the limit.
CLIENTS = 4
PAUSE_S = 0.15
LIMIT, WINDOW = 600, 60
THROTTLE_RATE = f"{LIMIT}/minute"
# Load goes on to the run's duration, and at least this long once the cluster has converged.
AFTER_CONVERGED_S = 5.0


@dataclass
class Outcome:
    records: list[dict]
    violations: list[Violation]
    explained: str  # each violation with the requests and faults around it
    summary: dict[str, dict]


def run(topology: Topology, schedule: list[Planned], seed: int, duration: float, folder: Path, say=print) -> Outcome:
    """Load `topology` for `duration` seconds (longer if a fault's heal runs late) while `schedule` is played."""
    folder.mkdir(parents=True, exist_ok=True)
    history = History(folder / "history.jsonl")
    clients = [
        Client(
            name,
            topology.cluster.url,
            HOST,
            topology.issue_token(f"chaos-{name}"),
            10_000_000 * (n + 1),
            history,
            pause,
        )
        for n, (name, pause) in enumerate([*((f"c{n + 1}", PAUSE_S) for n in range(CLIENTS)), ("limited", 0.0)])
    ]
    started_at = time.time()
    plan = {
        "seed": seed,
        "duration": duration,
        "limit": LIMIT,
        "window": WINDOW,
        "schedule": [asdict(p) for p in schedule],
    }
    history.add({"type": "run", "started": started_at, **plan})
    nemesis = Nemesis(topology, schedule, history, started_at, say)
    for client in clients:
        client.start()
    try:
        nemesis.run()
        healed = time.time()  # the last fault's heal: the convergence's bound counts from here
        deadline, converged = healed + CONVERGE_WITHIN_S, None
        while converged is None and time.time() < deadline:
            converged = time.time() if topology.converged() else time.sleep(0.5)
        history.add({"type": "converged", "healed": healed, "converged": converged, "state": topology.state()})
        say(
            f"+{time.time() - started_at:6.1f} s  every fault healed; converged: {converged and round(converged - healed, 1)} s"
        )
        time.sleep(max(AFTER_CONVERGED_S, started_at + duration - time.time()))
    finally:
        nemesis.abort()
        for client in clients:
            client.stop()
        for client in clients:
            client.join()
        history.close()
    outcome = judge(history.records, topology.rows(), started_at, folder)
    if outcome.violations:
        topology.save_logs(folder / "logs")
    return outcome


def judge(records: list[dict], rows: dict[int, dict], started_at: float, folder: Path) -> Outcome:
    """Check the history against the rows; write the summary, the plot and the violations into `folder`."""
    violations = check(records, rows, LIMIT, WINDOW)
    explained = "\n\n".join(explain(violation, records, started_at) for violation in violations)
    table = summary(records)
    requests = [record for record in records if record["type"] == "request"]
    seed = next(record["seed"] for record in records if record["type"] == "run")
    title = f"make chaos SEED={seed}: {len(requests)} requests, {len(rows)} plants stored, {len(violations)} violations"
    stored, absent = ambiguous_outcomes(requests, rows)
    resolved = f"creates left ambiguous when the load stopped: {stored} stored with their body, {absent} absent"
    (folder / "summary.txt").write_text(f"{title}\n{resolved}\n\n{summary_text(table)}\n")
    (folder / "summary.json").write_text(json.dumps(table, indent=2) + "\n")
    (folder / "plot.svg").write_text(plot(records, started_at, title))
    (folder / "violations.txt").write_text(explained + "\n" if explained else "none\n")
    return Outcome(records, violations, explained, table)
