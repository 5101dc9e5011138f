"""The alerts proven on make cluster's real units: Debian's Prometheus with deploy/prometheus/'s
configuration and rules unchanged (tests/monitoring.py) sees the cluster healthy under load, then each
failure made, its alert in Prometheus' own ALERTS series (its expression on real series, its `for:`
untouched), and Alertmanager's pages for every app server down and for the edge arrive once each.

The cluster and its failover pair are tests/failover.py's. The tests run in order, the failures grouped
so that each server is stopped once: Redis, the standby and archiving at once; then the primary's archiver
stopped, as a push that hangs leaves it (its series, not its alert, which waits 10 minutes); then the
database cut off from the app servers; then the front stopped, then every app server too.
"""

import os
import signal
import time

import pytest

from deploy.processes import wait_until
from localcluster.database import ADDRESSES, FailoverDatabase
from tests.failover import cluster, database, healthy, issue_token  # noqa: F401 (the fixtures)
from tests.faults import dropped_packets
from tests.live import DEPLOYED_SETTINGS, Load
from tests.monitoring import (
    ShippedPrometheus,
    WebhookReceiver,
    alertmanager,
    blackbox_exporter,
    postgres_exporter,
    running,
    series_the_rules_read,
    watching_directory,
)

pytestmark = [pytest.mark.postgres, pytest.mark.live]

# The shipped scrape and evaluation interval is 15 s: an alert with no `for:` is in ALERTS within a
# scrape and an evaluation of the failure, about 30 s; the database's within its bound more.
SEEN_WITHIN_S = 90
HEALTHY_S = 120


class Watching:
    def __init__(self, prometheus: ShippedPrometheus, webhook: WebhookReceiver, exporters: dict[str, str]):
        self.prometheus, self.webhook = prometheus, webhook
        self.exporters = exporters  # each data node's postgres_exporter (its `instance`), by the node's name

    def wait_for(self, names: set[str], states: set[str] = frozenset({"pending", "firing"}), timeout=SEEN_WITHIN_S):
        """Until each of `names` is in ALERTS in one of `states`."""
        seen = lambda: all(self.prometheus.alerts().get(name) in states for name in names)  # noqa: E731
        try:
            wait_until(seen, self.prometheus.process, timeout, f"{sorted(names)} {sorted(states)} in ALERTS")
        except RuntimeError as error:
            raise RuntimeError(f"{error}; in ALERTS: {self.prometheus.alerts()}") from None


@pytest.fixture(scope="module")
def watching(database, cluster):  # noqa: F811
    work_dir = watching_directory()
    webhook = WebhookReceiver()
    # The exporters' role as docs/operating.md has an operator make it: pg_monitor's, nothing more (the
    # standby has it by replication).
    FailoverDatabase.execute(database.primary(), "CREATE ROLE prometheus LOGIN IN ROLE pg_monitor")
    # Each exporter reaches its node on its unix socket, as on the node's host (the package's README.Debian).
    servers = [alertmanager(work_dir, webhook), blackbox_exporter(work_dir)] + [
        postgres_exporter(
            work_dir,
            node.name,
            f"user=prometheus host={database.socket_dir} port={node.port} dbname=postgres sslmode=disable",
        )
        for node in database.nodes
    ]
    alerts, blackbox, *exporters = servers
    targets = {
        "plantstore.yml": [{"targets": [unit.url.removeprefix("http://") for unit in cluster.units]}],
        "edge.yml": [{"targets": [blackbox.address], "labels": {"__param_target": f"{cluster.url}/healthz"}}],
        "haproxy.yml": [{"targets": [f"127.0.0.1:{cluster.haproxy.metrics_port}"]}],
        "database.yml": [{"targets": [exporter.address for exporter in exporters]}],
        "alertmanager.yml": [{"targets": [alerts.address]}],
    }
    prometheus = ShippedPrometheus(work_dir, DEPLOYED_SETTINGS["PLANTS_METRICS_TOKEN"], targets)
    with running(work_dir, webhook, [*servers, prometheus]):
        nodes = {node.name: exporter.address for node, exporter in zip(database.nodes, exporters, strict=True)}
        yield Watching(prometheus, webhook, nodes)


def test_healthy_under_load_for_two_minutes_no_alert_is_pending_or_firing_but_the_watchdog(
    watching,
    healthy,  # noqa: F811
    cluster,  # noqa: F811
):
    prometheus = watching.prometheus
    token = issue_token(healthy, "alerts-healthy")
    with Load(f"{cluster.url}/plants", token, clients=2, pause=0.1, first_id=100_000) as load:
        up = lambda: {health for _, health in prometheus.targets()} == {"up"}  # noqa: E731
        wait_until(up, prometheus.process, 60, "every target scraped")
        # Before the first scrape the app servers' `up` is missing: its alert may be pending, no more.
        watching.wait_for({"Watchdog"}, {"firing"}, timeout=60)
        wait_until(lambda: set(prometheus.alerts()) == {"Watchdog"}, prometheus.process, 60, "only the watchdog")
        time.sleep(HEALTHY_S)

    targets = prometheus.targets()
    # Each series the rules read, under the job they name, is one the real units and exporters give.
    unread = sorted(selector for selector in series_the_rules_read() if not prometheus.query(f"count({selector})"))
    in_window = prometheus.query(f"count by (alertname, alertstate) (count_over_time(ALERTS[{HEALTHY_S}s]))")
    # The healthy window alone: before it, the cluster's first (cold) creates are most of what the
    # latency budget's windows hold, and a burn seen then says nothing of the service under load.
    fired = prometheus.query(
        f'count by (alertname) (count_over_time(ALERTS{{alertstate="firing", alertname!="Watchdog"}}[{HEALTHY_S}s]))'
    )

    assert unread == []
    assert targets == sorted(
        [("plantstore", "up")] * 2
        + [("plantstore-edge", "up"), ("haproxy", "up")]
        + [("plantstore-database", "up")] * 2
    )
    assert {(s["metric"]["alertname"], s["metric"]["alertstate"]) for s in in_window} == {("Watchdog", "firing")}
    assert fired == []
    assert len(load.answers) > HEALTHY_S and {status for _, status, *_ in load.answers} == {200}
    # The dead man's switch hears from it, through Alertmanager's route of its own.
    wait_until(lambda: watching.webhook.notified("watchdog", "Watchdog"), None, 60, "the watchdog's notification")


def test_redis_the_standby_and_archiving_failing_raise_their_alerts(
    watching,
    healthy,  # noqa: F811
    cluster,  # noqa: F811
):
    token = issue_token(healthy, "alerts-redis")
    primary, standby = healthy.primary(), healthy.standbys()[0]
    mode = healthy.repository.stat().st_mode
    with Load(f"{cluster.url}/plants", token, clients=2, pause=0.1, first_id=200_000):
        try:
            cluster.redis.stop()
            standby.stop()
            # The repository unwritable, as a full or unmounted backup disk: archive-push fails on the
            # segment the switch closes, and PostgreSQL counts each attempt.
            healthy.repository.chmod(0)
            FailoverDatabase.execute(primary, "CHECKPOINT")
            FailoverDatabase.execute(primary, "SELECT pg_switch_wal()")
            # The standby's postgres_exporter answers, its database does not (pg_up 0): a target down too.
            watching.wait_for(
                {
                    "PlantsRateLimitsFailingOpen",
                    "PlantsDatabaseSingleCopy",
                    "PlantsDatabaseArchivingFailing",
                    "PlantsMonitoringTargetDown",
                }
            )
        finally:
            healthy.repository.chmod(mode)
            cluster.redis.start()
            standby.start()
    healthy.wait_until_healthy(timeout=90)


def test_an_archiving_push_that_hangs_counts_no_failure_and_shows_its_waiting_segment_to_the_stalled_alert(
    watching,
    healthy,  # noqa: F811
):
    prometheus = watching.prometheus
    primary = healthy.primary()
    (archiver,) = FailoverDatabase.execute(primary, "SELECT pid FROM pg_stat_activity WHERE backend_type = 'archiver'")
    failed = lambda: FailoverDatabase.execute(primary, "SELECT failed_count FROM pg_stat_archiver")  # noqa: E731
    failed_before = failed()
    waiting = 'plantstore_archive_oldest_waiting_seconds{job="plantstore-database"} > 20'
    # The archiver stopped as a push that never returns leaves it (a repository that does not answer):
    # the segment the switch closes waits, and PostgreSQL counts nothing. The alert waits 5 minutes
    # more than this test does (its arithmetic: promtool's unit tests); here its series, on the real
    # exporter, says what it reads.
    os.kill(archiver[0], signal.SIGSTOP)
    try:
        FailoverDatabase.execute(primary, "CHECKPOINT")
        FailoverDatabase.execute(primary, "SELECT pg_switch_wal()")
        wait_until(lambda: prometheus.query(waiting), prometheus.process, SEEN_WITHIN_S, "a segment waiting over 20 s")
        stalled = prometheus.query(waiting)
        failed_meanwhile = failed()
    finally:
        os.kill(archiver[0], signal.SIGCONT)
    archived = 'max(plantstore_archive_waiting_segments{job="plantstore-database"}) == 0'
    wait_until(lambda: prometheus.query(archived), prometheus.process, SEEN_WITHIN_S, "every waiting segment archived")

    assert [sample["metric"]["instance"] for sample in stalled] == [watching.exporters[primary.name]]
    assert failed_meanwhile == failed_before


def test_the_database_cut_off_from_the_app_servers_raises_database_unavailable(
    watching,
    healthy,  # noqa: F811
    cluster,  # noqa: F811
):
    token = issue_token(healthy, "alerts-database")
    with Load(f"{cluster.url}/plants", token, clients=2, pause=0.1, first_id=300_000) as load:
        load.wait_for(10)
        # Every packet between the second app server and the database dropped (it reaches every node
        # at an address of its own, ADDRESSES[1]): the requests it holds wait out the database bound
        # (PLANTS_DATABASE_TIMEOUT_S), then are answered 503 and counted, until HAProxy takes it out.
        with dropped_packets(*(node.port for node in healthy.nodes), address=ADDRESSES[1]):
            watching.wait_for({"PlantsDatabaseUnavailable"})

    assert 503 in {status for _, status, *_ in load.answers}


def test_every_app_server_and_the_front_stopped_raise_their_alerts_and_each_page_arrives_once(
    watching,
    healthy,  # noqa: F811
    cluster,  # noqa: F811
):
    webhook = watching.webhook
    try:
        cluster.front.stop()
        # The front alone first: its alert while every app server is up.
        watching.wait_for({"PlantsEdgeDown"})
        front_alone = set(watching.prometheus.alerts())
        for unit in cluster.units:
            unit.stop()
        # Each app server's own alert too (its `for:` is 10 minutes: pending, not firing, here).
        watching.wait_for({"PlantsEdgeDown", "PlantsAppServersDown", "PlantsAppServerDown"})
        # `for: 1m`, then the route's group_wait (30 s).
        watching.wait_for({"PlantsAppServersDown"}, {"firing"}, timeout=SEEN_WITHIN_S + 60)
        wait_until(lambda: webhook.notified("page", "PlantsAppServersDown"), None, 60, "the page")
        # The edge's own page too, the app servers' firing meanwhile: it is not muted by theirs (a false
        # one, scrapes refused for a token out of step, would hide a front that stopped answering).
        wait_until(lambda: webhook.notified("page", "PlantsEdgeDown"), None, 90, "the edge's page")
    finally:
        for unit in cluster.units:
            unit.start()
        cluster.front.start()
    time.sleep(15)  # one more evaluation: a page sent twice would be here

    assert {"PlantsAppServersDown", "PlantsAppServerDown"}.isdisjoint(front_alone), front_alone
    assert len(webhook.notified("page", "PlantsAppServersDown")) == 1
    assert len(webhook.notified("page", "PlantsEdgeDown")) == 1
    assert webhook.notified("ticket", "PlantsAppServersDown") == []
