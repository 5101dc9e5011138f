"""make chaos's short schedule: make cluster's topology under load through overlapping faults drawn from a
fixed seed (localcluster/chaos/), and the checker finds no violation of the contract once all are healed.

Its own formation and cluster (no test database), beside nothing else: it loads the machine as a run
of test_failover.py or test_partitions.py does, for about 3 minutes.
"""

import logging
import time

import pytest

from localcluster.chaos.history import read_history
from localcluster.chaos.nemesis import draw_schedule
from localcluster.chaos.run import THROTTLE_RATE, run
from localcluster.chaos.topology import Topology

pytestmark = [pytest.mark.live, pytest.mark.alone, pytest.mark.own_database]
log = logging.getLogger(__name__)

# The fixed schedule: seed 64 over 100 s among these kinds draws the slow-database relay, the primary
# killed while it lasts, an app server killed while the primary is down, Redis stopped, and an app
# server killed again as Redis comes back.
SEED, DURATION_S = 64, 100
KINDS = ["primary-killed", "app-server-killed", "redis-stopped", "primary-cut-off-from-app-servers", "slow-database"]


def test_a_short_chaos_schedule_keeps_every_acknowledged_create_and_answers_within_the_contract(tmp_path):
    schedule = draw_schedule(SEED, DURATION_S, KINDS)
    assert [planned.kind for planned in schedule] == [
        "slow-database", "primary-killed", "app-server-killed", "redis-stopped", "app-server-killed",
    ]  # fmt: skip
    began = time.monotonic()
    (tmp_path / "cluster").mkdir()
    topology = Topology(tmp_path / "cluster", THROTTLE_RATE)
    try:
        topology.start()
        outcome = run(topology, schedule, SEED, DURATION_S, tmp_path / "chaos", say=log.info)
    finally:
        topology.stop()
    log.info("chaos: %.0f s in all\n%s", time.monotonic() - began, (tmp_path / "chaos" / "summary.txt").read_text())

    assert outcome.violations == [], outcome.explained
    records = read_history(tmp_path / "chaos" / "history.jsonl")
    faults = [record for record in records if record["type"] == "fault"]
    assert sorted(fault["kind"] for fault in faults) == sorted(planned.kind for planned in schedule)
    assert all(fault["target"] and not fault["note"] for fault in faults), faults
    spans = sorted((fault["started"], fault["healed"]) for fault in faults)
    assert any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:], strict=False)), "no faults overlapped"
    requests = [record for record in records if record["type"] == "request"]
    assert {request["status"] for request in requests} >= {200, 429, 503}
    assert {request["client"] for request in requests} == {"c1", "c2", "c3", "c4", "limited"}
    assert set(outcome.summary) == set(KINDS) - {"primary-cut-off-from-app-servers"}
    svg = (tmp_path / "chaos" / "plot.svg").read_text()
    assert all(kind in svg for kind in outcome.summary)
