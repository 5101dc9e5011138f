"""make cluster's topology, driven through its load balancer: HAProxy, two app servers, PgBouncer, Redis.

One cluster for the module (localcluster/cluster.py's Cluster, the one make cluster runs); each test
issues its own token, so the throttle quota of one does not touch another.
"""

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from deploy.processes import ROOT
from localcluster.cluster import Cluster
from localcluster.processes import command_line, descendants, free_port
from plants.models import Plant
from tests.failover import service_unavailable
from tests.live import (
    DEPLOYED_SETTINGS,
    Load,
    create_many,
    entry_points,
    live_cluster,
    request,
    start_make,
    wait_for_exit,
    wait_until_healthy,
)

pytestmark = [pytest.mark.postgres, pytest.mark.live, pytest.mark.django_db(transaction=True)]

QUOTA = 600  # per token and hour, shared by the app servers through Redis
REVOKED = {"error": 40101, "message": "The token has been revoked."}
STORE_UNAVAILABLE = {"error": 50300, "message": "The service cannot reach its rate-limit store; retry later."}


@pytest.fixture(scope="module")
def cluster(django_db_setup, tmp_path_factory):
    live = live_cluster(
        connection.settings_dict, tmp_path_factory.mktemp("cluster"), PLANTS_THROTTLE_RATE=f"{QUOTA}/hour"
    ).start()
    yield live
    live.stop()


def stored_ids() -> set[int]:
    return set(Plant.objects.values_list("id", flat=True))


def posts_served(server) -> int:
    """Creates a server answered 200, from its request log (plants.requests: one line a request)."""
    return server.log().count('"method": "POST", "path": "/plants", "status": 200,')


def served_since(cluster: Cluster, before: list[int], total: int) -> list[int]:
    """POSTs each app server logged since `before`; a request is logged just after it is answered."""
    deadline = time.monotonic() + 5
    while True:
        served = [posts_served(unit) - count for unit, count in zip(cluster.units, before, strict=True)]
        if sum(served) >= total or time.monotonic() > deadline:
            return served
        time.sleep(0.05)


def assert_only_created_or_unavailable(load: Load) -> None:
    """Every answer is a 200, or a 503 Error body; every acknowledged create is stored."""
    for _, status, content_type, text, _sent in load.answers:
        if status != 200:
            assert (status, content_type, service_unavailable(json.loads(text))) == (503, "application/json", True), (
                text
            )
    acknowledged = load.ids_with(200)
    assert acknowledged and acknowledged <= stored_ids()


def test_creates_through_the_load_balancer_are_served_by_both_app_servers(cluster, token):
    before = [posts_served(unit) for unit in cluster.units]

    answers = create_many(cluster.url, token, range(1, 21), "Rose")

    assert [(status, json.loads(text)) for status, text in answers] == [
        (200, {"id": plant_id, "name": "Rose"}) for plant_id in range(1, 21)
    ]
    assert stored_ids() == set(range(1, 21))
    served = served_since(cluster, before, total=20)
    assert sum(served) == 20 and min(served) > 0, served


def test_duplicate_race_across_servers_has_one_winner(cluster, token):
    def create(number: int):
        return request(f"{cluster.url}/plants", {"id": 7, "name": f"Rose {number}"}, token)

    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = [(status, json.loads(text)) for status, _, text in pool.map(create, range(16))]

    winners = [body for status, body in answers if status == 200]
    assert len(winners) == 1
    duplicate = {"error": 40003, "message": "A plant with id 7 already exists with a different name or tag."}
    assert [answer for answer in answers if answer[0] != 200] == [(400, duplicate)] * 15
    assert list(Plant.objects.values_list("id", "name")) == [(7, winners[0]["name"])]


def test_token_revoked_on_one_server_is_refused_by_every_server_from_the_next_request(cluster, token):
    servers = entry_points(cluster)
    before = [
        request(f"{url}/plants", {"id": number, "name": "Rose"}, token, proxy=proxy)[0]
        for number, (url, proxy) in enumerate(servers)
    ]

    revoke = [sys.executable, "manage.py", "token", "revoke", "test-client"]
    subprocess.run(revoke, cwd=ROOT, env=cluster.units[0].env, check=True, capture_output=True)
    after = [
        request(f"{url}/plants", {"id": 10 + n, "name": "Rose"}, token, proxy=proxy)
        for n, (url, proxy) in enumerate(servers * 2)
    ]

    assert before == [200, 200, 200]
    assert [(status, json.loads(text)) for status, _, text in after] == [(401, REVOKED)] * 6
    assert stored_ids() == {0, 1, 2}


def test_throttle_quota_is_exact_across_servers(cluster, token):
    seconds_into_hour = time.time() % 3600
    if seconds_into_hour > 3600 - 30:  # keep the burst inside one fixed window
        time.sleep(3600 - seconds_into_hour + 1)

    answers = create_many(cluster.url, token, range(QUOTA + 30), "Rose", threads=8)

    # On a loaded machine a request can fail before it is counted (HAProxy finding no app server
    # healthy for a moment, the token's read timing out): a few such 503 Error bodies are allowed, and
    # each may leave its place in the quota to a later request or not. Anything else fails the test,
    # and so does one 200 past the quota.
    statuses = Counter(status for status, _ in answers)
    unavailable = [text for status, text in answers if status == 503]
    assert len(unavailable) <= 3 and all(
        service_unavailable(json.loads(t)) or json.loads(t) == STORE_UNAVAILABLE for t in unavailable
    ), unavailable
    assert set(statuses) <= {200, 429, 503}, statuses
    assert QUOTA - len(unavailable) <= statuses[200] <= QUOTA, statuses
    assert statuses[200] <= Plant.objects.count() <= QUOTA


def test_app_server_killed_mid_load_loses_no_acknowledged_create(cluster, token):
    victim, survivor = cluster.units
    try:
        with Load(f"{cluster.url}/plants", token, clients=4, pause=0.1) as load:
            load.wait_for(30)
            served_before = posts_served(survivor)
            victim.kill()
            killed_at = time.monotonic()
            time.sleep(6)
    finally:
        victim.start()

    assert_only_created_or_unavailable(load)
    # Once HAProxy's health checks mark it down (2 checks 1 s apart), every create goes to the other.
    late = [status for _, status, _, _, sent in load.answers if sent > killed_at + 3]
    assert len(late) >= 20 and set(late) == {200}
    assert posts_served(survivor) - served_before >= len(late)


def test_pgbouncer_restart_answers_503_at_most_then_recovers(cluster, token):
    # Paced, and capped below the token's quota: at most 4 clients / 0.4 s = 10 requests a second for
    # about 15 s, whatever the machine's speed, so no answer is a 429 (a fast machine once outran it).
    with Load(f"{cluster.url}/plants", token, clients=4, pause=0.4, limit=QUOTA // 2) as load:
        load.wait_for(20)
        cluster.pgbouncer.terminate()
        time.sleep(3)
        unavailable = [status for _, status, *_ in load.answers[20:]]
        cluster.pgbouncer.start()
        restarted_at = time.monotonic()
        time.sleep(10)

    assert 503 in unavailable
    assert_only_created_or_unavailable(load)
    # Back within HAProxy's two passing health checks and Django's reconnection.
    late = [status for _, status, _, _, sent in load.answers if sent > restarted_at + 5]
    assert len(late) >= 20 and set(late) == {200}


def test_rolling_restart_under_load_fails_no_request_and_loses_no_create(cluster, token):
    old_workers = {unit.name: set(unit.worker_pids()) for unit in cluster.units}

    # Paced (at most 20 requests a second) and capped at the token's quota, as the test above.
    with Load(f"{cluster.url}/plants", token, clients=4, pause=0.2, timeout=30, limit=QUOTA) as load:
        load.wait_for(30)
        cluster.rolling_restart()
        restarted_at = len(load.answers)
        load.wait_for(restarted_at + 30)

    assert len(load.answers) >= restarted_at + 30
    assert [(status, text) for _, status, _, text, _ in load.answers if status != 200] == []
    assert load.ids_with(200) <= stored_ids()
    for unit in cluster.units:  # every unit runs new processes: the new version
        assert unit.worker_pids() and not set(unit.worker_pids()) & old_workers[unit.name]


def test_make_cluster_restarts_on_sighup_and_stops_on_sigterm_leaving_nothing_running(tmp_path):
    port = free_port()
    log = tmp_path / "cluster.log"
    # .env.example's settings, as an operator exports them (make cluster makes its own database).
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_", "PLANTS_"))},
        **DEPLOYED_SETTINGS,
        "PORT": str(port),
    }
    make = start_make("cluster", env, log)
    try:
        assert wait_until_healthy(f"http://127.0.0.1:{port}", make, timeout=120), log.read_text()
        processes = descendants(make.pid)
        # The Python process running `python -m localcluster` (not scripts/with-postgres, which names it too).
        script = next(pid for pid in processes if command_line(pid).split(b"\0")[1:3] == [b"-m", b"localcluster"])

        os.kill(script, signal.SIGHUP)
        deadline = time.monotonic() + 120
        while "every unit restarted" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        health = request(f"http://127.0.0.1:{port}/healthz")
        other_host = request(f"http://127.0.0.1:{port}/healthz", Host="127.0.0.1")
        processes += descendants(make.pid)
        os.kill(script, signal.SIGTERM)

        assert make.wait(timeout=90) == 0, log.read_text()
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)
    assert "every unit restarted" in log.read_text()
    assert (health[0], health[2]) == (200, '{"status": "ok"}')
    assert (other_host[0], json.loads(other_host[2])) == (400, {"error": 40000, "message": "Bad request."})
    assert wait_for_exit(processes) == []


def test_units_whose_rate_limit_store_is_down_stay_in_the_balancer_and_serve_uncounted(cluster, token):
    """.env.example's PLANTS_RATE_LIMIT_FAILURE_MODE, open: Redis down stops no create."""

    def statuses() -> set[str]:
        return {stat["status"] for stat in cluster.haproxy.server_stats()}

    cluster.redis.stop()
    try:
        time.sleep(3)  # HAProxy checks every second and takes a unit out after 2 failures
        states = statuses()
        creates = [request(f"{cluster.url}/plants", {"id": plant_id, "name": "Rose"}, token) for plant_id in (1, 2)]
        readiness = [request(f"{unit.url}/healthz") for unit in cluster.units]
    finally:
        cluster.redis.start()
    after = request(f"{cluster.url}/plants", {"id": 3, "name": "Rose"}, token)

    assert states == {"UP"}
    assert [(status, json.loads(text), headers["RateLimit"]) for status, headers, text in creates] == [
        (200, {"id": plant_id, "name": "Rose"}, None) for plant_id in (1, 2)
    ]
    assert [(status, text) for status, _, text in readiness] == [(200, '{"status": "ok"}')] * 2
    assert (after[0], json.loads(after[2])) == (200, {"id": 3, "name": "Rose"})
