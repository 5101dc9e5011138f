"""The request log: one JSON line per request, with a request id, never a token or a body."""

import json
import logging
import os
import re
import signal

import pytest
from django.db import OperationalError, connection

from plants import log_format
from plants.models import Plant
from tests.live import live_unit, request

pytestmark = pytest.mark.django_db


@pytest.fixture
def request_log(caplog):
    logger = logging.getLogger("plants.requests")  # does not propagate: listen to it directly
    logger.addHandler(caplog.handler)
    yield caplog
    logger.removeHandler(caplog.handler)


def test_each_request_logs_one_json_line_with_token_name_and_request_id(request_log, post_plant, token):
    response = post_plant({"id": 1, "name": "Secret Garden Rose"}, HTTP_X_REQUEST_ID="req-42")

    lines = [record.getMessage() for record in request_log.records if record.name == "plants.requests"]
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert entry.pop("duration_ms") >= 0
    assert len(entry.pop("trace_id")) == 32 and len(entry.pop("span_id")) == 16  # tests/test_traces.py
    assert entry == {
        "method": "POST",
        "path": "/plants",
        "status": 200,
        "token": "test-client",
        "client": "127.0.0.1",
        "request_id": "req-42",
    }
    assert response["X-Request-ID"] == "req-42"
    assert token not in request_log.text
    assert "Secret Garden Rose" not in request_log.text


def test_refused_token_is_never_logged_and_its_line_names_the_cause_and_the_client(request_log, api_client):
    secret = "plnt_this-is-a-guessed-token-value"

    api_client.post(
        "/plants", {"id": 1, "name": "Rose"}, format="json", HTTP_AUTHORIZATION=f"Bearer {secret}", REMOTE_ADDR=""
    )

    entry = json.loads(request_log.records[-1].getMessage())
    assert (entry["status"], entry["token"], entry["client"]) == (401, None, None)
    assert (entry["error"], entry["message"]) == (40101, "The token is not valid.")
    assert secret not in request_log.text


def test_a_refusal_outside_the_api_names_its_error_and_the_address_nginx_gave(request_log, api_client):
    api_client.get("/no-such-page", REMOTE_ADDR="", HTTP_X_REAL_IP="198.51.100.7")

    entry = json.loads(request_log.records[-1].getMessage())
    assert {key: entry[key] for key in ("status", "client", "error", "message")} == {
        "status": 404,
        "client": "198.51.100.7",
        "error": 40400,
        "message": "No such path: /no-such-page",
    }


def test_request_without_an_id_gets_a_new_random_one_in_its_line_and_header(request_log, post_plant):
    first, second = post_plant({"id": 1, "name": "Rose"}), post_plant({"id": 2, "name": "Fern"})

    ids = [json.loads(record.getMessage())["request_id"] for record in request_log.records]
    assert ids == [first["X-Request-ID"], second["X-Request-ID"]]
    assert ids[0] != ids[1] and all(len(id_) == 32 and int(id_, 16) >= 0 for id_ in ids)


@pytest.mark.parametrize("created", [1700000000.0, 1700000000.999, 1700000001.0005, 1700003600.25])
def test_log_line_time_is_formatted_as_logging_formats_it_in_the_same_second_and_the_next(created):
    from plants.log_format import OneLineFormatter

    ours, standard = OneLineFormatter("%(asctime)s %(message)s"), logging.Formatter("%(asctime)s %(message)s")
    for when in (created, created + 0.5, created + 1):  # the cached second, then a new one
        record = logging.LogRecord("plants.requests", logging.INFO, __file__, 0, "line", None, None)
        record.created, record.msecs = when, int((when - int(when)) * 1000)

        assert ours.format(record) == standard.format(record)


# While a dependency is down: one traceback a minute per distinct error, one line per request besides.

DATABASE_DOWN = {"error": 50300, "message": "The service cannot reach its database; retry later."}
STORE_DOWN = {"error": 50300, "message": "The service cannot reach its rate-limit store; retry later."}


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def outage_log(caplog, monkeypatch):
    """Every record of the service's loggers and Django's request logger (neither propagates), with a
    traceback clock the test moves, and no traceback remembered from an earlier test."""
    monkeypatch.setattr(log_format, "last_traceback", {})
    monkeypatch.setattr(log_format, "clock", Clock(1000.0))
    loggers = [logging.getLogger(name) for name in ("plants", "plants.requests", "django.request")]
    for logger in loggers:
        logger.addHandler(caplog.handler)
    yield caplog
    for logger in loggers:
        logger.removeHandler(caplog.handler)


def outage_lines(log, logger_name: str) -> list[tuple[str, bool]]:
    """(message, whether it carries a traceback) of each ERROR record of `logger_name`."""
    return [
        (record.getMessage(), record.exc_info is not None)
        for record in log.records
        if record.name == logger_name and record.levelno == logging.ERROR
    ]


def request_lines(log) -> list[int]:
    return [json.loads(record.getMessage())["status"] for record in log.records if record.name == "plants.requests"]


@pytest.fixture
def database_down(issued_token):
    """Every query of this connection fails as one to a server that is down (once the token is issued)."""

    def refuse(execute, sql, params, many, context):
        raise OperationalError("connection to server failed: Connection refused")

    with connection.execute_wrapper(refuse):
        yield


@pytest.fixture
def redis_unreachable(settings):
    from localcluster.processes import free_port

    settings.PLANTS_THROTTLE_RATE = "3/hour"
    settings.CACHES = {  # a port no server listens on: refused at once
        **settings.CACHES,
        "rate_limits": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/0",
        },
    }


REPEATED = " (its traceback was logged within the last 60 s)"


def test_database_outage_logs_one_traceback_then_one_line_per_request(outage_log, database_down, post_plant):
    answers = [post_plant({"id": plant_id, "name": "Rose"}) for plant_id in range(5)]

    assert [(answer.status_code, answer.json()) for answer in answers] == [(503, DATABASE_DOWN)] * 5
    line = "database unavailable: OperationalError"
    assert outage_lines(outage_log, "plants.exception_handler") == [(line, True)] + [(line + REPEATED, False)] * 4
    assert [record.exc_info is not None for record in outage_log.records].count(True) == 1
    assert request_lines(outage_log) == [503] * 5


def test_unreachable_redis_logs_one_traceback_then_one_line_per_request(
    outage_log, redis_unreachable, post_plant, settings
):
    settings.PLANTS_RATE_LIMIT_FAILURE_MODE = "closed"
    answers = [post_plant({"id": plant_id, "name": "Rose"}) for plant_id in range(5)]

    assert [(answer.status_code, answer.json()) for answer in answers] == [(503, STORE_DOWN)] * 5
    line = "rate-limit store unavailable: ConnectionError"
    assert outage_lines(outage_log, "plants.throttling") == [(line, True)] + [(line + REPEATED, False)] * 4
    assert [record.exc_info is not None for record in outage_log.records].count(True) == 1
    assert request_lines(outage_log) == [503] * 5
    assert not Plant.objects.exists()


def test_unreachable_redis_failing_open_serves_and_logs_each_request_uncounted(
    outage_log, redis_unreachable, post_plant
):
    answers = [post_plant({"id": plant_id, "name": "Rose"}) for plant_id in range(3)]

    assert [(answer.status_code, answer.json()) for answer in answers] == [
        (200, {"id": plant_id, "name": "Rose"}) for plant_id in range(3)
    ]
    assert [answer.get("RateLimit") for answer in answers] == [None] * 3
    line = "rate-limit store unavailable: ConnectionError (the limits fail open: served uncounted)"
    assert outage_lines(outage_log, "plants.throttling") == [(line, True)] + [(line + REPEATED, False)] * 2
    assert request_lines(outage_log) == [200] * 3
    assert sorted(Plant.objects.values_list("id", flat=True)) == [0, 1, 2]


def test_outage_logs_its_traceback_again_a_minute_later(outage_log, database_down, post_plant):
    post_plant({"id": 1, "name": "Rose"})
    log_format.clock.now += 59.9
    post_plant({"id": 1, "name": "Rose"})
    log_format.clock.now += 0.1

    post_plant({"id": 1, "name": "Rose"})

    tracebacks = [traced for _, traced in outage_lines(outage_log, "plants.exception_handler")]
    assert tracebacks == [True, False, True]


def test_each_distinct_error_class_and_message_gets_its_own_traceback(outage_log):
    errors = [
        OperationalError("Connection refused"),
        OperationalError("Connection refused"),
        OperationalError("timeout expired"),
        ConnectionError("Connection refused"),
    ]

    assert [log_format.traceback_due(error) for error in errors] == [True, False, True, True]


def test_errors_remembered_for_their_tracebacks_stay_bounded(outage_log):
    for n in range(3 * log_format.REMEMBERED_ERRORS):
        log_format.traceback_due(OperationalError(f"error {n}"))

    assert len(log_format.last_traceback) <= log_format.REMEMBERED_ERRORS


# Finding a refused request's cause from the logs, as docs/operating.md ("Why was it refused?") says:
# the edge's line of the answer (by its status, or the X-Request-ID the client got) names the cause
# as the edge saw it and the request id; the app's line of that id names the Error; an app server
# nginx could not reach is named by nginx's error line.


FAILURE_LIMIT = 60  # .env.example's PLANTS_ANONYMOUS_THROTTLE_RATE, a minute


def lines_of(log: str, request_id: str) -> list[dict]:
    """The JSON request lines that carry `request_id`: the edge's first, then the app's, if any."""
    found = [line[line.index("{") :] for line in log.splitlines() if f'"request_id": "{request_id}"' in line]
    return sorted(map(json.loads, found), key=lambda line: "edge" not in line)


@pytest.mark.live
def test_a_refusals_cause_is_found_in_the_logs_by_its_request_id(tmp_path, redis_server):
    unreachable = f"postgres://nobody@{str(tmp_path / 'no-server').replace('/', '%2F')}/plantstore"
    server = live_unit(tmp_path, DATABASE_URL=unreachable, REDIS_URL=redis_server.url).start()
    try:
        database_down = request(f"{server.url}/plants", {"id": 1, "name": "Rose"}, token="plnt_anything")
        # No token at all, from one address: .env.example's limit, 60 a minute, then 429 (one window
        # may end among them: at most two windows' worth).
        unauthenticated = []
        while len(unauthenticated) <= 2 * FAILURE_LIMIT and 429 not in [status for status, *_ in unauthenticated[-1:]]:
            unauthenticated.append(request(f"{server.url}/plants", {"id": 1, "name": "Rose"}))
        os.killpg(server.app.process.pid, signal.SIGKILL)  # the app server gone; nginx answers alone
        server.app.process.wait()
        app_server_down = request(f"{server.url}/plants", {"id": 1, "name": "Rose"}, token="plnt_anything")
    finally:
        server.stop()
    log = server.log()

    assert (database_down[0], database_down[1]["Content-Type"]) == (503, "application/json")
    assert database_down[2] == '{"error":50300,"message":"The service cannot reach its database; retry later."}'
    edge, app = lines_of(log, database_down[1]["X-Request-ID"])
    assert (edge["edge"], edge["status"], edge["cause"], edge["upstream_status"]) == (True, 503, "app", "503")
    assert (app["status"], app["error"], app["message"]) == (
        503,
        50300,
        "The service cannot reach its database; retry later.",
    )
    assert edge["client"] == app["client"] == "127.0.0.1"
    assert "database unavailable: OperationalError" in log

    limited, statuses = unauthenticated[-1], [status for status, _, _ in unauthenticated]
    assert statuses[:FAILURE_LIMIT] == [401] * FAILURE_LIMIT and statuses[FAILURE_LIMIT:] == [401] * (
        len(statuses) - FAILURE_LIMIT - 1
    ) + [429]
    edge, app = lines_of(log, limited[1]["X-Request-ID"])
    assert (edge["status"], edge["cause"], edge["upstream_status"], edge["client"]) == (429, "app", "429", "127.0.0.1")
    assert (app["error"], app["client"]) == (42901, "127.0.0.1")
    assert app["message"].startswith("Too many requests without a valid bearer token from this address.")

    assert (app_server_down[0], json.loads(app_server_down[2])["error"]) == (503, 50300)
    [edge] = lines_of(log, app_server_down[1]["X-Request-ID"])  # the app never saw it
    assert (edge["status"], edge["cause"], edge["upstream_status"]) == (503, "app server unreachable", "502")
    # Refused, or reset on a kept connection: either way the error line names the upstream and the client.
    assert re.search(r"\[error\] .* failed \(.*upstream, client: 127\.0\.0\.1, .*\"POST /plants ", log), log
