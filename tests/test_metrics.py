"""/metrics: Prometheus' text behind its own token, counting requests, creates, refusals and errors."""

import os
import secrets
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import OperationalError, connection
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from plants.models import ApiToken
from plants.services import token_issue, tokens_revoke
from tests.live import PUBLIC_HOST, ROOT, LivePrometheus, alert_rules, create_many

pytestmark = pytest.mark.django_db
METRICS_TOKEN = "metrics-" + "k" * 40


def sample(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture
def counted():
    """The change of a sample across the test: `counted("plants_creates_total", outcome="created")`."""
    before: dict = {}

    def change(name: str, **labels) -> float:
        return sample(name, **labels) - before[(name, tuple(sorted(labels.items())))]

    def remember(*samples):
        for name, labels in samples:
            before[(name, tuple(sorted(labels.items())))] = sample(name, **labels)

    change.remember = remember
    return change


def get_metrics(api_client, authorization: str | None = None):
    headers = {"HTTP_AUTHORIZATION": authorization} if authorization else {}
    return api_client.get("/metrics", **headers)


def test_metrics_without_a_configured_token_returns_404(api_client, settings):
    settings.PLANTS_METRICS_TOKEN = ""

    response = get_metrics(api_client, f"Bearer {METRICS_TOKEN}")

    assert (response.status_code, response.json()) == (404, {"error": 40400, "message": "No such path: /metrics"})


def test_metrics_without_a_bearer_token_returns_401(api_client, settings):
    settings.PLANTS_METRICS_TOKEN = METRICS_TOKEN

    response = get_metrics(api_client)

    assert response.status_code == 401
    assert response.json() == {"error": 40100, "message": "Send the metrics token as a bearer token."}
    assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'


@pytest.mark.parametrize("authorization", [f"Bearer {METRICS_TOKEN}x", "Bearer wrong", "Bearer plnt_api_token"])
def test_metrics_with_another_token_returns_401_invalid_token(api_client, settings, authorization):
    settings.PLANTS_METRICS_TOKEN = METRICS_TOKEN

    response = get_metrics(api_client, authorization)

    assert response.status_code == 401
    assert response.json() == {"error": 40101, "message": "The metrics token is not valid."}
    assert response["WWW-Authenticate"] == 'Bearer realm="metrics", error="invalid_token"'


def test_while_the_metrics_token_is_rotated_the_new_one_and_the_old_are_taken_and_no_other(api_client, settings):
    new_token = "metrics-new-" + "n" * 40
    settings.PLANTS_METRICS_TOKEN = f"{new_token}, {METRICS_TOKEN}"  # the new one, then the old

    answers = [
        get_metrics(api_client, f"Bearer {token}") for token in (new_token, METRICS_TOKEN, "metrics-" + "o" * 40)
    ]

    assert [answer.status_code for answer in answers] == [200, 200, 401]
    assert answers[2].json() == {"error": 40101, "message": "The metrics token is not valid."}


def test_metrics_over_plain_http_are_answered_where_the_api_is_redirected_to_https(api_client, settings):
    # Prometheus scrapes each app server from inside, over plain HTTP, as health checks come.
    settings.PLANTS_METRICS_TOKEN = METRICS_TOKEN
    settings.SECURE_SSL_REDIRECT = True

    scraped = get_metrics(api_client, f"Bearer {METRICS_TOKEN}")
    schema = api_client.get("/openapi.json")

    assert scraped.status_code == 200
    assert (schema.status_code, schema["Location"]) == (301, "https://testserver/openapi.json")


def test_metrics_with_the_token_returns_prometheus_text(api_client, settings, post_plant):
    settings.PLANTS_METRICS_TOKEN = METRICS_TOKEN
    post_plant({"id": 1, "name": "Rose"})

    response = get_metrics(api_client, f"bearer {METRICS_TOKEN}")

    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    text = response.content.decode()
    assert 'plants_http_requests_total{method="POST",route="/plants",status="200"}' in text
    assert 'plants_http_request_duration_seconds_bucket{le="0.005",method="POST",route="/plants"}' in text
    assert 'plants_auth_failures_total{reason="revoked"}' in text


def test_create_outcomes_and_requests_are_counted_by_route_method_and_status(post_plant, counted):
    creates = [("plants_creates_total", {"outcome": outcome}) for outcome in ("created", "retry", "duplicate")]
    requests = [
        ("plants_http_requests_total", {"route": "/plants", "method": "POST", "status": status})
        for status in ("200", "400")
    ]
    durations = [("plants_http_request_duration_seconds_count", {"route": "/plants", "method": "POST"})]
    counted.remember(*creates, *requests, *durations)

    post_plant({"id": 1, "name": "Rose"})
    post_plant({"id": 2, "name": "Fern"})
    post_plant({"id": 1, "name": "Rose"})  # a safe retry
    post_plant({"id": 1, "name": "Tulip"})  # a duplicate id
    post_plant({"id": "x", "name": "Tulip"})  # invalid: not a create outcome

    assert [counted(name, **labels) for name, labels in creates] == [2, 1, 1]
    assert [counted(name, **labels) for name, labels in requests] == [3, 2]
    assert counted(*durations[0][:1], **durations[0][1]) == 5


def test_unmatched_path_is_counted_under_one_route_whatever_the_path(api_client, counted):
    labels = {"route": "(unmatched)", "method": "GET", "status": "404"}
    counted.remember(("plants_http_requests_total", labels))

    for path in ("/nope", "/plants/1", "/a/b/c"):
        api_client.get(path)

    assert counted("plants_http_requests_total", **labels) == 3


def test_auth_failures_are_counted_by_reason(api_client, issued_token, counted):
    reasons = ("missing", "malformed", "unknown", "revoked", "expired")
    counted.remember(*[("plants_auth_failures_total", {"reason": reason}) for reason in reasons])
    _, expired = token_issue(name="expired-client", expires_in=timedelta(seconds=-1))
    _, revoked = token_issue(name="revoked-client")
    tokens_revoke(tokens=ApiToken.objects.filter(name="revoked-client"))

    for authorization in [None, "Basic abc", "Bearer", "Bearer plnt_unknown", f"Bearer {revoked}", f"Bearer {expired}"]:
        headers = {"HTTP_AUTHORIZATION": authorization} if authorization else {}
        response = api_client.post("/plants", {"id": 1, "name": "Rose"}, format="json", **headers)
        assert response.status_code == 401

    assert [counted("plants_auth_failures_total", reason=reason) for reason in reasons] == [2, 1, 1, 1, 1]


def test_throttled_requests_are_counted(post_plant, settings, counted):
    settings.PLANTS_THROTTLE_RATE = "2/hour"
    counted.remember(("plants_throttled_total", {}))

    statuses = [post_plant({"id": plant_id, "name": "Rose"}).status_code for plant_id in range(5)]

    assert statuses == [200, 200, 429, 429, 429]
    assert counted("plants_throttled_total") == 3


def test_database_outage_is_counted_as_unavailable(post_plant, counted):
    def refuse_inserts(execute, sql, params, many, context):
        if sql.lstrip().upper().startswith("INSERT"):
            raise OperationalError("connection refused")
        return execute(sql, params, many, context)

    counted.remember(("plants_database_errors_total", {"kind": "unavailable"}))
    with connection.execute_wrapper(refuse_inserts):
        response = post_plant({"id": 1, "name": "Rose"})

    assert response.status_code == 503
    assert counted("plants_database_errors_total", kind="unavailable") == 1


@pytest.mark.live
def test_prometheus_scraping_a_two_worker_server_reports_the_requests_sent(production_unit, token, tmp_path):
    metrics_token = secrets.token_urlsafe(32)
    # One thread per worker and eight clients at once: both workers must serve.
    # Prometheus names the address it scrapes in its Host: the operator allows it beside the public
    # name (docs/operating.md, Metrics).
    server = production_unit(
        APP_PROCESSES="2",
        APP_THREADS="1",
        PLANTS_METRICS_TOKEN=metrics_token,
        DJANGO_ALLOWED_HOSTS=f"{PUBLIC_HOST},127.0.0.1",
    )
    prometheus = LivePrometheus([server.url.removeprefix("http://")], metrics_token).start()
    try:
        created = create_many(server.url, token, range(1, 41), "Rose")
        duplicates = create_many(server.url, token, range(1, 11), "Tulip")
        retries = create_many(server.url, token, range(31, 41), "Rose")
        missing = create_many(server.url, "", range(100, 106), "Rose")
        unknown = create_many(server.url, "plnt_unknown", range(100, 104), "Rose")
        assert [status for status, _ in created + duplicates + retries + missing + unknown] == (
            [200] * 40 + [400] * 10 + [200] * 10 + [401] * 10
        )

        expected = {
            'sum by (status) (plants_http_requests_total{route="/plants",method="POST"})': {
                ("200",): 50,
                ("400",): 10,
                ("401",): 10,
                ("500",): 0,  # from the start, so the first ones after a restart count (rate() starts from 0)
                ("503",): 0,
            },
            'sum(plants_http_request_duration_seconds_count{route="/plants"})': {(): 70},
            "sum by (outcome) (plants_creates_total)": {("created",): 40, ("retry",): 10, ("duplicate",): 10},
            "sum by (reason) (plants_auth_failures_total)": {
                ("missing",): 6,
                ("malformed",): 0,
                ("unknown",): 4,
                ("revoked",): 0,
                ("expired",): 0,
            },
            "sum(plants_throttled_total)": {(): 0},
            "sum(plants_database_errors_total)": {(): 0},
        }
        reported = wait_for_scrape(prometheus, expected)
        rules = wait_for_evaluation(prometheus)
    finally:
        prometheus.stop()

    assert reported == expected
    # The objectives' rules load from the config operators copy, and evaluate on the service's series.
    assert rules == {rule.get("record") or rule["alert"]: "ok" for rule in alert_rules()}
    # Each worker wrote its own histogram file when it timed a request: both served, and were summed.
    histogram_files = {path.name for path in Path(server.app.env["PROMETHEUS_MULTIPROC_DIR"]).glob("histogram_*.db")}
    assert {f"histogram_{pid}.db" for pid in server.worker_pids()} <= histogram_files


def wait_for_scrape(prometheus: LivePrometheus, expected: dict, timeout: float = 30) -> dict:
    """What Prometheus reports for each query, once it equals `expected` or the time is up."""
    deadline = time.monotonic() + timeout
    while True:
        reported = {promql: prometheus.query(promql) for promql in expected}
        if reported == expected or time.monotonic() > deadline:
            return reported
        time.sleep(0.5)


def wait_for_evaluation(prometheus: LivePrometheus, timeout: float = 30) -> dict[str, str]:
    """Every rule's health, once none is still unknown (not yet evaluated) or the time is up."""
    deadline = time.monotonic() + timeout
    while "unknown" in (rules := prometheus.rules()).values() and time.monotonic() < deadline:
        time.sleep(0.5)
    return rules


# A worker process counting in the multiprocess folder: 3 creates and one timed request.
WORKER = """
from plants import metrics
metrics.CREATE_OUTCOME["created"].inc(3)
metrics.record_request("^plants$", "POST", 200, 0.02)
print("counted", flush=True)
import sys
sys.stdin.read()  # stays alive until its stdin closes
"""


def start_worker(directory: Path) -> subprocess.Popen:
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER],
        cwd=ROOT,
        env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert worker.stdout.readline() == "counted\n"
    return worker


def exit_worker(worker: subprocess.Popen) -> None:
    worker.stdin.close()
    assert worker.wait(timeout=10) == 0


@pytest.fixture
def multiprocess_metrics(settings, tmp_path, monkeypatch):
    """/metrics on, reading workers' files in tmp_path, as under the app server."""
    settings.PLANTS_METRICS_TOKEN = METRICS_TOKEN
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    monkeypatch.setattr("plants.metrics.MULTIPROCESS", True)


def scraped(api_client) -> dict[tuple, float]:
    response = get_metrics(api_client, f"Bearer {METRICS_TOKEN}")
    assert response.status_code == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def test_an_exited_worker_s_counts_stay_in_the_totals_beside_the_living_ones(
    api_client, multiprocess_metrics, tmp_path
):
    created = ("plants_creates_total", (("outcome", "created"),))
    requests = ("plants_http_requests_total", (("method", "POST"), ("route", "/plants"), ("status", "200")))
    under_25ms = (
        "plants_http_request_duration_seconds_bucket",
        (("le", "0.025"), ("method", "POST"), ("route", "/plants")),
    )
    exited, living = start_worker(tmp_path), start_worker(tmp_path)
    exit_worker(exited)  # as a worker recycled by the app server, or killed

    first = scraped(api_client)

    assert (first[created], first[requests], first[under_25ms]) == (6, 2, 2)
    assert scraped(api_client) == first  # read again, counted once
    exit_worker(living)
    assert scraped(api_client) == first
