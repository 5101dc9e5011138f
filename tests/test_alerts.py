"""deploy/prometheus/: promtool accepts the rules and the shipped configuration, the rules' unit tests
fire each alert and keep it silent, each alert points at its runbook, every series it selects is one
/metrics exposes and every job it names one the configuration scrapes, an alert on a missing series
waits out a Prometheus restart, and Alertmanager's example routes each severity to its receiver."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.live import ALERT_RULES, ROOT, alert_rules
from tests.monitoring import EQUALITY, jobs_named, rule_selectors
from tests.test_docs import anchors

UNIT_TESTS = ROOT / "tests" / "plantstore-alerts.test.yml"
SHIPPED = ROOT / "deploy" / "prometheus"
PROMETHEUS_CONFIG = SHIPPED / "prometheus.yml"
OPERATING = ROOT / "docs" / "operating.md"
METRICS_TOKEN = "alerts-" + "m" * 40
DURATION = re.compile(r"(\d+)(ms|s|m|h|d)")
SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def promtool(*args: str) -> subprocess.CompletedProcess:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.fail("promtool is not installed (Debian package prometheus: make system-packages)")
    return subprocess.run([binary, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def alerts() -> list[dict]:
    return [rule for rule in alert_rules() if "alert" in rule]


def seconds(duration: str) -> float:
    """A Prometheus duration (1m30s) in seconds."""
    assert re.fullmatch(rf"(?:{DURATION.pattern})+", duration), duration
    return sum(int(number) * SECONDS[unit] for number, unit in DURATION.findall(duration))


def scrape_intervals() -> dict[str, float]:
    """Each job of the shipped configuration and its scrape interval, in seconds."""
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    default = config["global"].get("scrape_interval", "1m")
    return {job["job_name"]: seconds(job.get("scrape_interval", default)) for job in config["scrape_configs"]}


def shipped_copy(folder: Path) -> Path:
    """deploy/prometheus/ copied into `folder` as an operator installs it, with a metrics token."""
    for path in SHIPPED.iterdir():
        shutil.copy(path, folder / path.name)
    token = folder / "metrics-token"
    token.touch(mode=0o600)
    token.write_text(METRICS_TOKEN)
    return folder / "prometheus.yml"


# Neither test uses a database: they run once, in the SQLite pass.
@pytest.mark.own_database
def test_promtool_check_rules_accepts_the_rules_file():
    result = promtool("check", "rules", str(ALERT_RULES.relative_to(ROOT)))

    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in result.stdout


@pytest.mark.own_database
def test_promtool_unit_tests_fire_each_alert_at_its_burn_and_keep_it_silent_otherwise():
    result = promtool("test", "rules", str(UNIT_TESTS.relative_to(ROOT)))

    assert (result.returncode, result.stdout.split()[-1:]) == (0, ["SUCCESS"]), result.stdout + result.stderr


def test_the_unit_tests_assert_every_alert_they_name_at_every_moment_and_see_each_fire():
    tests = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    names = {alert["alert"] for alert in alerts()}

    # An alert asserted at a moment is asserted silent for every job its list leaves out.
    for test in tests:
        cases = test["alert_rule_test"]
        moments, named = {case["eval_time"] for case in cases}, {case["alertname"] for case in cases}
        assert sorted((case["eval_time"], case["alertname"]) for case in cases) == sorted(
            (moment, name) for moment in moments for name in named
        ), test["name"]
    assert {case["alertname"] for test in tests for case in test["alert_rule_test"] if case["exp_alerts"]} == names


def test_each_recorded_ratio_reads_every_series_over_the_window_its_name_states():
    recorded = [rule for rule in alert_rules() if "record" in rule]

    windows = {rule["record"]: set(re.findall(r"\[(\w+)\]", rule["expr"])) for rule in recorded}

    assert len(recorded) == 12
    assert windows == {rule["record"]: {rule["record"].rpartition("_rate")[2]} for rule in recorded}


def test_every_alert_has_a_severity_a_summary_a_description_and_a_runbook_heading_in_operating_md():
    headings = anchors(OPERATING)

    for alert in alerts():
        # Watchdog alone pages no one: its own receiver expects it (alertmanager.yml).
        assert alert["labels"]["severity"] in ({"none"} if alert["alert"] == "Watchdog" else {"page", "ticket"})
        assert set(alert["annotations"]) == {"summary", "description", "runbook"}, alert["alert"]
        page, _, heading = alert["annotations"]["runbook"].partition("#")
        assert (page, heading in headings) == ("docs/operating.md", True), alert["alert"]


def test_every_series_the_rules_select_is_one_the_service_exposes(api_client, settings, post_plant):
    settings.PLANTS_METRICS_TOKEN = METRICS_TOKEN
    assert post_plant({"id": 1, "name": "Rose"}).status_code == 200
    response = api_client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {METRICS_TOKEN}")
    assert response.status_code == 200
    exposed = [
        (sample.name, sample.labels)
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    ]
    selectors = {(name, matchers) for name, matchers in rule_selectors() if name.startswith("plants_")}

    # Each selector's name, with the labels it matches exactly (a regex, status=~"5..", is left out).
    unmatched = [
        f"{name}{{{matchers}}}"
        for name, matchers in sorted(selectors)
        if not any(
            name == exposed_name and set(EQUALITY.findall(matchers)) <= set(labels.items())
            for exposed_name, labels in exposed
        )
    ]
    assert {name for name, _ in selectors} == {
        "plants_http_requests_total",
        "plants_http_request_duration_seconds_count",
        "plants_http_request_duration_seconds_bucket",
        "plants_database_errors_total",
        "plants_readiness_failures_total",
        "plants_rate_limit_uncounted_total",
    }
    assert unmatched == []


@pytest.mark.own_database
def test_every_job_the_rules_name_is_one_the_shipped_configuration_scrapes():
    named = {job for rule in alert_rules() for job in jobs_named(rule["expr"])}

    assert named == set(scrape_intervals()) == {"plantstore", "plantstore-edge", "haproxy", "plantstore-database"}


@pytest.mark.own_database
def test_every_alert_on_up_or_a_missing_series_waits_twice_the_scrape_interval_of_its_jobs():
    """A Prometheus restart leaves every series missing until its first scrape, an interval away: such
    an alert waits out two (Cloudflare's pint, rule/for, checks the same; it is not packaged here)."""
    intervals = scrape_intervals()
    watched = [alert for alert in alerts() if re.search(r"\babsent\(|\bup\{", alert["expr"])]

    assert {alert["alert"] for alert in watched} == {
        "PlantsAppServersDown",
        "PlantsAppServerDown",
        "PlantsMonitoringTargetDown",
    }
    for alert in watched:
        longest = max(intervals[job] for job in jobs_named(alert["expr"]))
        assert seconds(alert.get("for", "0s")) >= 2 * longest, alert["alert"]


@pytest.mark.own_database
def test_promtool_accepts_the_shipped_configuration_installed_beside_its_files(tmp_path):
    config = shipped_copy(tmp_path)

    result = promtool("check", "config", str(config))

    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {config} is valid prometheus config file syntax" in result.stdout


@pytest.mark.own_database
@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        (["alertname=Watchdog", "severity=none"], "watchdog"),
        (["alertname=PlantsAppServersDown", "severity=page"], "page"),
        (["alertname=PlantsAppServerDown", "severity=ticket"], "ticket"),
    ],
)
def test_alertmanager_example_routes_each_severity_and_the_watchdog_to_its_own_receiver(labels, receiver):
    binary = shutil.which("amtool")
    if binary is None:
        pytest.fail("amtool is not installed (Debian package prometheus-alertmanager: make system-packages)")
    config = str(SHIPPED / "alertmanager.yml")

    checked = subprocess.run([binary, "check-config", config], capture_output=True, text=True, timeout=60)
    routed = subprocess.run(
        [binary, "config", "routes", "test", f"--config.file={config}", *labels],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert (routed.returncode, routed.stdout.strip()) == (0, receiver), routed.stderr


@pytest.mark.own_database
def test_the_blackbox_exporter_accepts_the_shipped_module():
    binary = shutil.which("prometheus-blackbox-exporter")
    if binary is None:
        pytest.fail("the blackbox exporter is not installed (Debian package prometheus-blackbox-exporter)")
    command = [binary, "--config.check", f"--config.file={SHIPPED / 'blackbox.yml'}"]

    result = subprocess.run(command, capture_output=True, text=True, timeout=60)

    assert (result.returncode, "level=warn" in result.stderr) == (0, False), result.stderr
