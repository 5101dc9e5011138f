"""deploy/prometheus/plantstore-alerts.yml: promtool accepts it, its unit tests fire each alert and keep
it silent, each alert points at its runbook, and every series it selects is one /metrics exposes."""

import re
import shutil
import subprocess

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.live import ALERT_RULES, ROOT, alert_rules
from tests.test_docs import anchors

UNIT_TESTS = ROOT / "tests" / "plantstore-alerts.test.yml"
OPERATING = ROOT / "docs" / "operating.md"
METRICS_TOKEN = "alerts-" + "m" * 40
# A selector of one of the service's series, e.g. plants_database_errors_total{kind="unavailable"}.
SELECTOR = re.compile(r"\b(plants_\w+)\{([^}]*)\}")
EQUALITY = re.compile(r'(\w+)\s*=\s*"([^"]*)"')


def promtool(*args: str) -> subprocess.CompletedProcess:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.fail("promtool is not installed (Debian package prometheus: make system-packages)")
    return subprocess.run([binary, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def alerts() -> list[dict]:
    return [rule for rule in alert_rules() if "alert" in rule]


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


def test_the_unit_tests_assert_every_alert_at_every_moment_and_see_each_fire():
    cases = [case for test in yaml.safe_load(UNIT_TESTS.read_text())["tests"] for case in test["alert_rule_test"]]
    names = {alert["alert"] for alert in alerts()}
    moments = {case["eval_time"] for case in cases}

    # An alert asserted at a moment is asserted silent for every job its list leaves out.
    assert sorted((case["eval_time"], case["alertname"]) for case in cases) == sorted(
        (moment, name) for moment in moments for name in names
    )
    assert {case["alertname"] for case in cases if case["exp_alerts"]} == names


def test_each_recorded_ratio_reads_every_series_over_the_window_its_name_states():
    recorded = [rule for rule in alert_rules() if "record" in rule]

    windows = {rule["record"]: set(re.findall(r"\[(\w+)\]", rule["expr"])) for rule in recorded}

    assert len(recorded) == 10
    assert windows == {rule["record"]: {rule["record"].rpartition("_rate")[2]} for rule in recorded}


def test_every_alert_has_a_severity_a_summary_a_description_and_a_runbook_heading_in_operating_md():
    headings = anchors(OPERATING)

    for alert in alerts():
        assert alert["labels"]["severity"] in {"page", "ticket"}, alert["alert"]
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
    selectors = {(name, matchers) for rule in alert_rules() for name, matchers in SELECTOR.findall(rule["expr"])}

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
    }
    assert unmatched == []
