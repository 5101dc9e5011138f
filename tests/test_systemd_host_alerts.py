"""Prometheus wired to a host with systemd as PID 1 (tests/systemd_host.py) as docs/operating.md says,
the service installed there as docs/deploying.md says: healthy, no alert but Watchdog; its serving slot
stopped, the page for every app server down arrives once.

A module of its own, with a host of its own: the test is mostly waiting (the shipped rule's `for: 1m`,
Alertmanager's `group_wait`), and beside the host of tests/test_systemd_host.py it made that module,
and so make test's SQLite pass, 2 min 40 s longer while the pass's other processes sat idle. It runs in
the PostgreSQL pass (tests/conftest.py: RUN_ONCE_IN_POSTGRESQL_PASS), whose processes wait on
tests/test_alerts_live.py's."""

import time

import pytest

from deploy.processes import wait_until
from tests.installed_unit import PROMETHEUS_NAMES_IT
from tests.monitoring import (
    ShippedPrometheus,
    WebhookReceiver,
    alertmanager,
    blackbox_exporter,
    running,
    watching_directory,
)

# One host per module, as tests/test_systemd_host.py's; the host is no database of the run's: once.
pytestmark = [pytest.mark.live, pytest.mark.container]


def test_prometheus_wired_as_operating_md_says_pages_once_when_the_host_s_app_server_is_down(deployed):
    """Debian's Prometheus, Alertmanager and blackbox exporter on this machine, as on a monitoring host,
    with deploy/prometheus/'s files unchanged and the targets docs/operating.md has an operator write
    for a systemd host: /metrics through the host's nginx (the name Prometheus scrapes it by is in
    DJANGO_ALLOWED_HOSTS), the blackbox probe of /healthz. Healthy: every target up, no alert but
    Watchdog. The serving slot stopped: nothing answers behind nginx, the edge's probe and the app's
    scrape fail, PlantsAppServersDown fires and its page arrives once."""
    address = f"{PROMETHEUS_NAMES_IT}:{deployed.host.port}"
    work_dir, webhook = watching_directory(), WebhookReceiver()
    alerts, blackbox = alertmanager(work_dir, webhook), blackbox_exporter(work_dir)
    targets = {
        "plantstore.yml": [{"targets": [address]}],
        "edge.yml": [{"targets": [blackbox.address], "labels": {"__param_target": f"http://{address}/healthz"}}],
        "alertmanager.yml": [{"targets": [alerts.address]}],
    }
    prometheus = ShippedPrometheus(work_dir, deployed.app_environment("PLANTS_METRICS_TOKEN"), targets)
    slot = deployed.slot()
    with running(work_dir, webhook, [alerts, blackbox, prometheus]):
        up = lambda: [health for _, health in prometheus.targets()] == ["up", "up"]  # noqa: E731
        wait_until(up, prometheus.process, 60, "every target scraped")
        wait_until(lambda: prometheus.alerts() == {"Watchdog": "firing"}, prometheus.process, 60, "only the watchdog")
        healthy = prometheus.targets(), prometheus.alerts()
        deployed.host.run(f"systemctl stop plantstore-app@{slot}")
        try:
            down = lambda: prometheus.alerts().get("PlantsAppServersDown") == "firing"  # noqa: E731
            # A failed scrape, `for: 1m`, then the route's group_wait (30 s).
            wait_until(down, prometheus.process, 150, "PlantsAppServersDown firing")
            pending_or_firing = set(prometheus.alerts())
            wait_until(lambda: webhook.notified("page", "PlantsAppServersDown"), None, 60, "the page")
            time.sleep(15)  # one more evaluation: a page sent twice would be here
            pages = webhook.notified("page", "PlantsAppServersDown")
        finally:
            deployed.host.run(f"systemctl start plantstore-app@{slot}", check=False)

    assert healthy == ([("plantstore", "up"), ("plantstore-edge", "up")], {"Watchdog": "firing"})
    assert {"PlantsAppServersDown", "PlantsAppServerDown", "PlantsEdgeDown"} <= pending_or_firing
    assert len(pages) == 1 and webhook.notified("ticket", "PlantsAppServersDown") == []
