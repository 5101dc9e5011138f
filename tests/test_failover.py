"""The database survives the loss of its primary: make cluster's tier (localcluster/database.py) under load.

One formation (pg_auto_failover's monitor, a primary and a synchronous standby) and one cluster in
front of it for the module; each test issues its own token, creates its own range of ids (nothing
is emptied between tests), and starts with the formation healthy.
Stored rows are read from the primary (or a standby) directly. tests/test_cluster.py's cases that
depend on the database (one winner of a duplicate race, a revoke seen from the next request) run
here too, on this tier.
"""

import json
import logging
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import psycopg
import pytest
import redis

from deploy.processes import ROOT, wait_until
from localcluster.cluster import BALANCER_ADDRESS
from localcluster.database import ADDRESSES, PRIMARY_STATES, DataNode, FailoverDatabase
from plants.timeouts import DEFAULT_DATABASE_TIMEOUT_S
from plants.tokens import token_digest
from tests.faults import dropped_packets
from tests.live import LIVE_SETTINGS, Load, entry_points, live_cluster, live_env, manage_on, request

pytestmark = [pytest.mark.postgres, pytest.mark.live]

# Measured here (docs/scaling.md, "Scaling out"): creates answer 200 again about 7 s after the primary's host
# is lost (monitor: 2 s to declare it down, 3 s for it to demote, then the promotion; HAProxy: 2
# health checks to put the app servers back). The bound tested:
FAILOVER_SECONDS = 15
# A switchover fails the creates of the moment neither node takes writes, each retried to a 200:
# measured, 33 to 52 requests over 1.2 to 1.4 s (4 clients retrying every 0.1 s), once 273 over 7.1 s
# at a load average of 15. The bound tested: every failed request sent within 10 s of its start, so
# at most 4 clients × 10 s / 0.1 s of them.
SWITCHOVER_SECONDS = 10
SWITCHOVER_FAILED_REQUESTS = 4 * SWITCHOVER_SECONDS * 10
UNAVAILABLE = [
    {"error": 50300, "message": "The service cannot reach its database; retry later."},
    {"error": 50300, "message": "No app server could answer; retry later."},
]
# Every create is answered within the database bound (plants/timeouts.py), whatever the formation's state.
BOUND_SECONDS = DEFAULT_DATABASE_TIMEOUT_S
log = logging.getLogger(__name__)  # the times measured: pytest --log-cli-level=INFO
REVOKED = {"error": 40101, "message": "The token has been revoked."}


@pytest.fixture(scope="module")
def database():
    formation = FailoverDatabase().start()
    yield formation
    try:
        free_shared_memory_of_lost_hosts(formation)
    finally:
        formation.stop()


def free_shared_memory_of_lost_hosts(formation: FailoverDatabase) -> None:
    """A PostgreSQL killed with its host (DataNode.kill) leaves its shared memory behind (segments in
    /dev/shm, a System V one) until a server starts on its data folder again: start and stop each
    node a test left lost, so that PostgreSQL itself frees them before the folder goes."""
    for node in formation.nodes:
        if node.process.poll() is not None and (node.pgdata / "postmaster.pid").exists():
            node.wait_until_gone()
            pg_ctl = [str(formation.bin / "pg_ctl"), "-D", str(node.pgdata), "-w", "-s"]
            formation.run([*pg_ctl, "start", "-l", str(node.pgdata / "freed.log")])
            formation.run([*pg_ctl, "stop", "-m", "immediate"])


@pytest.fixture(scope="module")
def cluster(database, tmp_path_factory):
    env = {**LIVE_SETTINGS, "PLANTS_THROTTLE_RATE": "100000/hour"}
    manage_on(database.url, "migrate", "--no-input", "-v", "0")
    # Each unit reaches the database at an address of its own, as from a host of its own.
    urls = [database.url_via(address) for address in ADDRESSES]
    live = live_cluster(None, tmp_path_factory.mktemp("failover"), database_url=urls, **env).start()
    yield live
    live.stop()


@pytest.fixture
def healthy(database):
    """The formation as each test expects it: every node running, one primary, one standby."""
    for node in database.nodes:
        if node.process.poll() is not None:
            node.start()
    database.wait_until_healthy(timeout=60)
    return database


def issue_token(database: FailoverDatabase, name: str) -> str:
    return manage_on(database.url, "token", "issue", name)


def stored_ids(node: DataNode) -> set[int]:
    return {plant_id for (plant_id,) in FailoverDatabase.execute(node, "SELECT id FROM plants_plant")}


def wait_for_promotion(database: FailoverDatabase, lost: DataNode) -> DataNode:
    """The standby the monitor promoted in place of `lost`, once it takes writes."""

    def promoted() -> bool:
        try:
            states = database.states()
            return any(states[node.name][0] in PRIMARY_STATES for node in database.nodes if node is not lost)
        except (psycopg.Error, KeyError):
            return False

    wait_until(promoted, None, 60, "the standby's promotion")
    return database.primary()


def assert_only_created_or_unavailable(load: Load) -> None:
    """Every answer came before the client's timeout, and is a 200 or a 503 Error body."""
    for _, status, content_type, text, _sent in load.answers:
        if status != 200:
            assert (status, content_type, json.loads(text) in UNAVAILABLE) == (503, "application/json", True), text


def test_multi_host_database_url_reaches_libpq_as_lists_with_target_session_attrs():
    # The URL form localcluster/database.py gives the app servers: dj_database_url passes its query to
    # OPTIONS, and Django's backend passes OPTIONS to psycopg (and libpq) as they are.
    url = "postgres://plantstore@/plantstore?host=10.0.0.1,10.0.0.2&port=5432,5433&target_session_attrs=read-write"
    show = "from django.db import connection; import json; print(json.dumps(connection.get_connection_params(), default=str))"
    env = {**live_env(DATABASE_URL=url), "DJANGO_DEBUG": "1"}
    command = [sys.executable, "manage.py", "shell", "-c", show]
    output = subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True, text=True).stdout
    params = json.loads(output.splitlines()[-1])  # after the shell's own line on what it imported

    assert {name: params.get(name) for name in ("host", "port", "target_session_attrs", "dbname", "user")} == {
        "host": "10.0.0.1,10.0.0.2",
        "port": "5432,5433",
        "target_session_attrs": "read-write",
        "dbname": "plantstore",
        "user": "plantstore",
    }


def test_primary_waits_for_its_named_synchronous_standby(healthy):
    primary, (standby,) = healthy.primary(), healthy.standbys()
    standby_name = f"pgautofailover_standby_{standby.name.removeprefix('node')}"

    (synchronous_commit,), (standby_names,) = [
        FailoverDatabase.execute(primary, f"SHOW {name}")[0]
        for name in ("synchronous_commit", "synchronous_standby_names")
    ]
    replication = FailoverDatabase.execute(primary, "SELECT application_name, sync_state FROM pg_stat_replication")

    assert synchronous_commit == "on"
    assert standby_names == f"ANY 1 ({standby_name})"
    assert replication == [(standby_name, "quorum")]  # ANY 1 of one standby: it confirms every commit


def test_duplicate_race_across_servers_has_one_winner_on_the_primary(healthy, cluster):
    token = issue_token(healthy, "race-client")

    def create(number: int):
        return request(f"{cluster.url}/plants", {"id": 7, "name": f"Rose {number}"}, token)

    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = [(status, json.loads(text)) for status, _, text in pool.map(create, range(16))]

    winners = [body for status, body in answers if status == 200]
    duplicate = {"error": 40003, "message": "A plant with id 7 already exists with a different name or tag."}
    assert len(winners) == 1 and [answer for answer in answers if answer[0] != 200] == [(400, duplicate)] * 15
    assert FailoverDatabase.execute(healthy.primary(), "SELECT name FROM plants_plant WHERE id = 7") == [
        (winners[0]["name"],)
    ]


def test_token_revoked_is_refused_by_every_server_from_the_next_request(healthy, cluster):
    token = issue_token(healthy, "revoke-next-client")
    servers = entry_points(cluster)
    before = [
        request(f"{url}/plants", {"id": 40_000 + n, "name": "Rose"}, token, proxy=proxy)[0]
        for n, (url, proxy) in enumerate(servers)
    ]

    manage_on(healthy.url, "token", "revoke", "revoke-next-client")
    after = [
        request(f"{url}/plants", {"id": 40_010 + n, "name": "Rose"}, token, proxy=proxy)
        for n, (url, proxy) in enumerate(servers * 2)
    ]

    assert before == [200, 200, 200]
    assert [(status, json.loads(text)) for status, _, text in after] == [(401, REVOKED)] * 6


def test_primary_host_lost_under_load_fails_over_with_503s_only_and_keeps_every_acknowledged_create(healthy, cluster):
    token = issue_token(healthy, "failover-client")
    old_primary = healthy.primary()
    with Load(f"{cluster.url}/plants", token, clients=4, retry=True, first_id=100_000) as load:
        load.wait_for(40)
        old_primary.kill()
        killed_at = time.monotonic()
        new_primary = wait_for_promotion(healthy, old_primary)
        promoted_after = time.monotonic() - killed_at
        time.sleep(max(0.0, killed_at + FAILOVER_SECONDS + 3 - time.monotonic()))

    during = [answer for answer in load.answers if answer[4] > killed_at]
    failed = [sent - killed_at for _, status, _, _, sent in during if status != 200]
    log.info(
        "promoted after %.1f s; %d failed requests, the last sent %.1f s after the kill",
        *(promoted_after, len(failed), max(failed, default=0)),
    )
    assert_only_created_or_unavailable(load)
    assert failed and max(failed) < FAILOVER_SECONDS
    late = [status for _, status, _, _, sent in during if sent > killed_at + FAILOVER_SECONDS]
    assert len(late) >= 20 and set(late) == {200}
    acknowledged = load.ids_with(200)
    assert new_primary is not old_primary and acknowledged <= stored_ids(new_primary)

    old_primary.start()  # the lost host is back: it rejoins as the new primary's standby
    healthy.wait_until_healthy(timeout=60)
    assert healthy.states()[old_primary.name] == ("secondary", "secondary")
    wait_until(lambda: acknowledged <= stored_ids(old_primary), None, 10, "the rejoined standby's copy")


def test_switchover_under_load_loses_no_acknowledged_create_and_fails_few_requests(healthy, cluster):
    token = issue_token(healthy, "switchover-client")
    old_primary = healthy.primary()
    with Load(f"{cluster.url}/plants", token, clients=4, retry=True, first_id=200_000) as load:
        load.wait_for(40)
        started = time.monotonic()
        healthy.switchover()
        switched_after = time.monotonic() - started
        time.sleep(max(0.0, started + SWITCHOVER_SECONDS + 2 - time.monotonic()))

    failed = [sent - started for _, status, _, _, sent in load.answers if status != 200]
    log.info(
        "switchover took %.1f s; %d failed requests of %d, sent from %.1f s to %.1f s after its start",
        *(switched_after, len(failed), len(load.answers), min(failed, default=0), max(failed, default=0)),
    )
    assert_only_created_or_unavailable(load)
    assert len(failed) <= SWITCHOVER_FAILED_REQUESTS and max(failed, default=0) < SWITCHOVER_SECONDS
    late = [status for _, status, _, _, sent in load.answers if sent > started + SWITCHOVER_SECONDS]
    assert len(late) >= 20 and set(late) == {200}
    new_primary = healthy.primary()
    assert new_primary is not old_primary and healthy.states()[old_primary.name][1] == "secondary"
    lost = load.ids_with(200) - stored_ids(new_primary)
    # Where a lost create went, if one is: the old primary's copy, once it has rejoined, and when it was sent.
    sent = {plant_id: round(at - started, 1) for plant_id, status, _, _, at in load.answers if status == 200}
    assert not lost, (
        len(lost),
        sorted(lost)[:5],
        [sent[i] for i in sorted(lost)[:5]],
        len(lost & stored_ids(old_primary)),
    )


def test_token_revoked_just_before_a_failover_is_refused_after_it_and_rate_counts_carry_over(healthy, cluster):
    revoked, kept, probe = (issue_token(healthy, name) for name in ("revoked-client", "kept-client", "probe-client"))
    counters = redis.Redis.from_url(cluster.redis.url)

    def counts() -> dict[bytes, int]:
        return {key: int(counters.get(key)) for key in counters.scan_iter("plants:rate:*")}

    def create(plant_id: int, token: str) -> int:
        return request(f"{cluster.url}/plants", {"id": plant_id, "name": "Rose"}, token)[0]

    created_before = [create(10_000 + n, kept) for n in range(3)]
    counted = counts()
    manage_on(healthy.url, "token", "revoke", "revoked-client")
    old_primary = healthy.primary()
    old_primary.kill()
    wait_for_promotion(healthy, old_primary)
    # A third token's creates (retried, as a client would) find when the new primary answers.
    probe_ids = iter(range(30_000, 31_000))
    wait_until(lambda: create(next(probe_ids), probe) == 200, None, FAILOVER_SECONDS, "a create after the failover")
    counted_after = counts()
    created_after = create(10_003, kept)
    refused = [
        request(f"{url}/plants", {"id": 20_000 + n, "name": "Rose"}, revoked, proxy=proxy)
        for n, (url, proxy) in enumerate(entry_points(cluster))
    ]

    assert created_before == [200, 200, 200] and created_after == 200
    assert [(status, json.loads(text)) for status, _, text in refused] == [(401, REVOKED)] * 3
    assert not {20_000, 20_001, 20_002} & stored_ids(healthy.primary())
    # Redis is no part of the failover: every count is where it was, and the next create adds one.
    assert token_count(counted, kept) == 3
    assert {key: counted_after[key] for key in counted} == counted
    assert token_count(counts(), kept) == 4


def token_count(counts: dict[bytes, int], secret: str) -> int:
    """A token's requests counted in Redis (keys `plants:rate:1:<digest>:<window start>`), over every
    window: the test may take longer than what is left of the hour's window it starts in."""
    prefix = f"plants:rate:1:{token_digest(secret)}:".encode()
    return sum(count for key, count in counts.items() if key.startswith(prefix))


def formation_settings(database: FailoverDatabase) -> tuple[int, dict[str, tuple[bool, int]]]:
    """The formation's number_sync_standbys and each node's (replication quorum, candidate priority)."""
    with psycopg.connect(database.monitor_url, connect_timeout=2, autocommit=True) as conn:
        (number_sync_standbys,) = conn.execute(
            "SELECT number_sync_standbys FROM pgautofailover.formation WHERE formationid = 'default'"
        ).fetchone()
        nodes = conn.execute("SELECT nodename, replicationquorum, candidatepriority FROM pgautofailover.node")
        return number_sync_standbys, {name: (quorum, priority) for name, quorum, priority in nodes}


def monitor_now(database: FailoverDatabase) -> datetime:
    with psycopg.connect(database.monitor_url, connect_timeout=2, autocommit=True) as conn:
        return conn.execute("SELECT now()").fetchone()[0]


def last_report(database: FailoverDatabase, node: DataNode) -> datetime:
    """When the node's keeper last reported to the monitor (by the monitor's clock)."""
    with psycopg.connect(database.monitor_url, connect_timeout=2, autocommit=True) as conn:
        query = "SELECT reporttime FROM pgautofailover.node WHERE nodename = %s"
        return conn.execute(query, [node.name]).fetchone()[0]


def timed_creates(url: str, token: str, plant_ids, seconds: float, clients: int = 4) -> list[tuple]:
    """(id, status, body, sent, seconds to the answer) of each create `clients` clients send for
    `seconds`, each 0.1 s after its last answer (as a client retries a 503), none sent again."""
    deadline = time.monotonic() + seconds

    def client() -> list[tuple]:
        answers = []
        while (sent := time.monotonic()) < deadline:
            plant_id = next(plant_ids)
            status, _, text = request(url, {"id": plant_id, "name": "Rose"}, token)
            answers.append((plant_id, status, json.loads(text) if text else None, sent, time.monotonic() - sent))
            time.sleep(0.1)
        return answers

    with ThreadPoolExecutor(max_workers=clients) as pool:
        return [answer for answers in pool.map(lambda _: client(), range(clients)) for answer in answers]


def test_standby_lost_creates_go_on_on_the_primary_alone_and_the_primary_lost_too_answers_503_until_it_is_back(
    healthy, cluster
):
    token = issue_token(healthy, "standby-lost-client")
    url, plant_ids = f"{cluster.url}/plants", iter(range(300_000, 400_000))
    primary, (standby,) = healthy.primary(), healthy.standbys()
    # The availability choice, pg_auto_failover's defaults (docs/decisions/failover.md): the one standby
    # is in the replication quorum and a candidate, and no standby is required to accept a write.
    assert formation_settings(healthy) == (0, {primary.name: (True, 50), standby.name: (True, 50)})

    standby.kill()
    # The creates sent before the monitor puts the primary in wait_primary wait for the standby,
    # and are answered 200 once the primary stops waiting for it.
    standby_lost = timed_creates(url, token, plant_ids, seconds=8)
    single_copy = timed_creates(url, token, plant_ids, seconds=2)
    states, (standby_names,) = healthy.states(), FailoverDatabase.execute(primary, "SHOW synchronous_standby_names")[0]
    log.info(
        "standby lost: the slowest create answered in %.1f s; the primary in %s, synchronous_standby_names %r",
        *(max(answer[4] for answer in standby_lost), states[primary.name], standby_names),
    )
    assert {(status, seconds < BOUND_SECONDS) for _, status, _, _, seconds in standby_lost + single_copy} == {
        (200, True)
    }
    assert states[primary.name] == ("wait_primary", "wait_primary") and standby_names == ""
    assert len(single_copy) >= 20
    acknowledged = {answer[0] for answer in standby_lost + single_copy}
    assert acknowledged <= stored_ids(primary)

    primary.kill()  # no node holds the creates acknowledged since the standby was lost but this one
    both_lost = timed_creates(url, token, plant_ids, seconds=4)
    restarted_at = monitor_now(healthy)
    standby.start()  # back, but behind: the monitor does not promote it, and it waits for the primary
    wait_until(lambda: last_report(healthy, standby) > restarted_at, None, 30, "the standby's report")
    standby_back = timed_creates(url, token, plant_ids, seconds=6)
    states = healthy.states()
    log.info(
        "primary lost too: %d creates refused, the slowest in %.1f s; the standby back reports %s",
        *(len(both_lost + standby_back), max(answer[4] for answer in both_lost + standby_back), states[standby.name]),
    )
    refusals = {
        (status, body in UNAVAILABLE, seconds < BOUND_SECONDS)
        for _, status, body, _, seconds in both_lost + standby_back
    }
    assert refusals == {(503, True, True)}
    assert states[standby.name][1] not in PRIMARY_STATES and states[primary.name][1] in PRIMARY_STATES

    primary.start()  # the lost primary's host is back: it serves again, and the standby catches up
    healthy.wait_until_healthy(timeout=60)
    wait_until(lambda: request(url, {"id": next(plant_ids), "name": "Rose"}, token)[0] == 200, None, 15, "a create")
    refused = {answer[0] for answer in both_lost + standby_back}
    assert healthy.primary() is primary and acknowledged <= stored_ids(primary)
    assert not refused & stored_ids(primary)
    wait_until(lambda: acknowledged <= stored_ids(standby), None, 10, "the standby's copy")


# How long the primary's database port stays unreachable, and the bound on 200s after the heal: a
# failover the monitor may start during the partition (it loses its health checks of the primary)
# ends within FAILOVER_SECONDS of the heal at the latest.
PARTITION_SECONDS = 20
HEALED_SECONDS = FAILOVER_SECONDS


def test_primary_database_port_dropped_for_20_s_under_load_answers_only_200_or_503_within_the_bound_and_loses_nothing(
    healthy, cluster
):
    """Every packet to and from the primary's PostgreSQL port is dropped for 20 s, from everyone (the
    app servers, the standby, the monitor), as a network fault leaves connections hanging, not refused.
    Every create is answered within the database bound plus a margin, 200 or a 503 Error body; 200s are
    sustained within HEALED_SECONDS of the heal; every create acknowledged is on the primary then,
    whichever node it is (the monitor may have promoted the standby)."""
    token = issue_token(healthy, "partition-client")
    old_primary = healthy.primary()
    answer_within = BOUND_SECONDS + 3  # the bound, and the round trips through the front and HAProxy
    url = f"{cluster.url}/plants"
    with Load(url, token, clients=4, retry=True, first_id=600_000, timeout=answer_within) as load:
        load.wait_for(40)
        with dropped_packets(old_primary.port):
            dropped_at = time.monotonic()
            time.sleep(PARTITION_SECONDS)
        healed_at = time.monotonic()
        time.sleep(HEALED_SECONDS + 3)

    during = [status for _, status, _, _, sent in load.answers if dropped_at < sent < healed_at]
    late = [status for _, status, _, _, sent in load.answers if sent > healed_at + HEALED_SECONDS]
    first_200 = min((sent - healed_at for _, status, _, _, sent in load.answers if status == 200 and sent > healed_at),
                    default=None)  # fmt: skip
    log.info(
        "partition: %d answers during it (%d of them 200); the first 200 sent %s s after the heal; the primary %s",
        *(len(during), during.count(200), first_200 and round(first_200, 1), healthy.primary().name),
    )
    assert_only_created_or_unavailable(load)
    assert len(during) >= PARTITION_SECONDS // answer_within and 503 in during
    assert len(late) >= 20 and set(late) == {200}
    healthy.wait_until_healthy(timeout=90)
    assert load.ids_with(200) <= stored_ids(healthy.primary())


def test_one_app_server_cut_off_from_the_database_for_20_s_leaves_rotation_within_the_bound_and_the_other_serves(
    healthy, cluster
):
    """Every packet between the second unit and the database (every node, at the address that unit
    alone uses) is dropped for 20 s; the first unit, the standby and the monitor are untouched. HAProxy's
    health checks of /healthz take the cut-off unit out of rotation within the bound, the other unit
    answers every create sent after that with a 200, the cut-off unit's own requests end as 503 Error
    bodies within the bound, and after the heal it is back in rotation and serves, never restarted."""
    token = issue_token(healthy, "cut-off-client")
    cut_off = cluster.units[1]
    app_server = cut_off.app.process
    answer_within = BOUND_SECONDS + 3
    with Load(f"{cluster.url}/plants", token, clients=4, retry=True, first_id=700_000, timeout=answer_within) as load:
        load.wait_for(40)
        with dropped_packets(*(node.port for node in healthy.nodes), address=ADDRESSES[1]):
            dropped_at = time.monotonic()
            out = lambda: cluster.haproxy.server_stat(1)["status"].startswith("DOWN")  # noqa: E731
            wait_until(out, None, BOUND_SECONDS, "the cut-off unit out of rotation")
            out_after = time.monotonic() - dropped_at
            time.sleep(max(0.0, dropped_at + PARTITION_SECONDS - time.monotonic()))
        healed_at = time.monotonic()
        back = lambda: cluster.haproxy.server_stat(1)["status"] == "UP"  # noqa: E731
        wait_until(back, None, HEALED_SECONDS, "the cut-off unit back in rotation")
        back_after = time.monotonic() - healed_at
        time.sleep(2)
    direct = request(f"{cut_off.url}/plants", {"id": 799_999, "name": "Rose"}, token, proxy=BALANCER_ADDRESS)

    while_out = [status for _, status, _, _, sent in load.answers if dropped_at + out_after < sent < healed_at]
    refused = [sent - dropped_at for _, status, _, _, sent in load.answers if status != 200]
    log.info(
        "cut off: out of rotation %.1f s after the drop, back %.1f s after the heal; %d answers while out, "
        "%d answers not 200, sent %.1f s to %.1f s after the drop",
        *(out_after, back_after, len(while_out), len(refused), min(refused, default=0), max(refused, default=0)),
    )
    assert_only_created_or_unavailable(load)
    assert len(while_out) >= 20 and set(while_out) == {200}
    assert direct[0] == 200 and cut_off.app.process is app_server and app_server.poll() is None
    assert load.ids_with(200) | {799_999} <= stored_ids(healthy.primary())
