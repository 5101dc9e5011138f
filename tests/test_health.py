"""GET /healthz (readiness: the database and the rate-limit store answer) and GET /livez (liveness), unauthenticated."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.test import Client
from prometheus_client import REGISTRY

from localcluster.processes import free_port
from plants.readiness import OneAtATime
from tests.live import live_unit, request


@pytest.mark.django_db
def test_health_returns_200_without_authentication():
    response = Client().get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_liveness_returns_200_without_authentication():
    response = Client().get("/livez")

    assert (response.status_code, response["Content-Type"]) == (200, "application/json")
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/healthz", "/livez"])
def test_health_with_other_method_returns_405_with_allow(path):
    response = Client().post(path)

    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"
    assert response.json() == {"error": 40500, "message": "Method POST not allowed."}


@pytest.mark.django_db
def test_health_post_is_405_even_with_csrf_checks_on():
    response = Client(enforce_csrf_checks=True).post("/healthz")

    assert response.status_code == 405
    assert response.json() == {"error": 40500, "message": "Method POST not allowed."}


def assert_unready(response, message: str):
    assert (response.status_code, response["Content-Type"]) == (503, "application/json")
    assert response.json() == {"error": 50300, "message": message}


@pytest.mark.django_db
def test_health_is_200_while_redis_is_stopped_when_the_limits_fail_open(settings, counting_in_redis):
    settings.PLANTS_THROTTLE_RATE = "10/minute"
    counting_in_redis.stop()

    response = Client().get("/healthz")

    assert (response.status_code, response.json()) == (200, {"status": "ok"})


@pytest.mark.django_db
def test_health_is_503_while_redis_is_stopped_when_the_limits_fail_closed_and_liveness_stays_200(
    settings, counting_in_redis
):
    settings.PLANTS_THROTTLE_RATE = "10/minute"
    settings.PLANTS_RATE_LIMIT_FAILURE_MODE = "closed"
    redis_server = counting_in_redis
    client = Client()
    assert client.get("/healthz").json() == {"status": "ok"}

    redis_server.stop()
    counted_before = REGISTRY.get_sample_value("plants_readiness_failures_total", {"dependency": "rate_limit_store"})
    assert_unready(client.get("/healthz"), "The rate-limit store does not answer.")
    counted = REGISTRY.get_sample_value("plants_readiness_failures_total", {"dependency": "rate_limit_store"})
    assert counted - counted_before == 1
    assert (client.get("/livez").status_code, client.get("/livez").json()) == (200, {"status": "ok"})

    redis_server.start()  # the same port: the service's client reconnects by itself
    response = client.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


@pytest.mark.live
def test_health_names_both_dependencies_when_neither_answers(tmp_path):
    unreachable = f"postgres://nobody@{str(tmp_path / 'no-server').replace('/', '%2F')}/plantstore"
    no_redis = f"redis://127.0.0.1:{free_port()}/0"
    metrics_token = "health-test-metrics-token-" + "m" * 16
    server = live_unit(
        tmp_path,
        DATABASE_URL=unreachable,
        REDIS_URL=no_redis,
        PLANTS_THROTTLE_RATE="10/minute",
        PLANTS_RATE_LIMIT_FAILURE_MODE="closed",
        PLANTS_METRICS_TOKEN=metrics_token,
    )
    server.start()
    try:
        health, liveness = request(f"{server.url}/healthz"), request(f"{server.url}/livez")
        health_again = request(f"{server.url}/healthz")
        exposed = request(f"{server.url}/metrics", token=metrics_token)[2]
    finally:
        server.stop()

    assert health[0] == health_again[0] == 503
    assert health[2] == '{"error": 50300, "message": "The database and the rate-limit store do not answer."}'
    assert (liveness[0], liveness[2]) == (200, '{"status": "ok"}')
    # What the database's alert reads once a balancer has taken the unit out (no create reaches it).
    assert 'plants_readiness_failures_total{dependency="database"} 2.0' in exposed.splitlines()
    assert 'plants_readiness_failures_total{dependency="rate_limit_store"} 2.0' in exposed.splitlines()


def blocked_check(answer: bool, release: threading.Event, started: threading.Event, runs: list):
    """A check that says it began (and records its run in `runs`), then waits for `release` before it
    answers `answer`."""

    def check() -> bool:
        runs.append(answer)
        started.set()
        release.wait(10)
        return answer

    return check


@pytest.mark.parametrize("answer", [True, False])
def test_a_check_asked_while_another_runs_takes_its_answer_without_running_itself(answer):
    release, started, runs = threading.Event(), threading.Event(), []
    check = OneAtATime(blocked_check(answer, release, started, runs), patience_s=5)
    with ThreadPoolExecutor(max_workers=3) as threads:
        first = threads.submit(check)
        started.wait(5)
        others = [threads.submit(check) for _ in range(2)]
        time.sleep(0.1)
        release.set()

        assert [first.result(), *(other.result() for other in others)] == [answer] * 3
    assert len(runs) == 1 and check.running is None


def test_a_check_asked_while_another_has_run_past_the_patience_answers_false_at_once():
    release, started = threading.Event(), threading.Event()
    check = OneAtATime(blocked_check(True, release, started, []), patience_s=0.3)
    with ThreadPoolExecutor(max_workers=1) as threads:
        first = threads.submit(check)
        started.wait(5)
        time.sleep(0.4)
        asked = time.monotonic()

        assert check() is False
        assert time.monotonic() - asked < 0.1
        release.set()
        assert first.result() is True


def test_after_a_check_that_raised_its_waiters_answer_false_and_the_next_check_runs_anew():
    release, started, calls = threading.Event(), threading.Event(), []

    def failing() -> bool:
        calls.append(1)
        if len(calls) == 1:
            started.set()
            release.wait(10)
            raise RuntimeError("the driver failed")
        return True

    check = OneAtATime(failing, patience_s=5)
    with ThreadPoolExecutor(max_workers=2) as threads:
        first = threads.submit(check)
        started.wait(5)
        waiter = threads.submit(check)
        time.sleep(0.1)
        release.set()

        with pytest.raises(RuntimeError):
            first.result()
        assert waiter.result() is False
    assert check() is True and len(calls) == 2
