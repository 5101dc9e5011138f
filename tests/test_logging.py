"""The request log: one JSON line per request, with a request id, never a token or a body."""

import json
import logging

import pytest
from django.db import OperationalError, connection

from plants import log_format
from plants.models import Plant

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
    assert entry == {"method": "POST", "path": "/plants", "status": 200, "token": "test-client", "request_id": "req-42"}
    assert response["X-Request-ID"] == "req-42"
    assert token not in request_log.text
    assert "Secret Garden Rose" not in request_log.text


def test_refused_token_is_never_logged(request_log, api_client):
    secret = "plnt_this-is-a-guessed-token-value"

    api_client.post("/plants", {"id": 1, "name": "Rose"}, format="json", HTTP_AUTHORIZATION=f"Bearer {secret}")

    entry = json.loads(request_log.records[-1].getMessage())
    assert (entry["status"], entry["token"]) == (401, None)
    assert secret not in request_log.text


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


def test_unreachable_redis_logs_one_traceback_then_one_line_per_request(outage_log, redis_unreachable, post_plant):
    answers = [post_plant({"id": plant_id, "name": "Rose"}) for plant_id in range(5)]

    assert [(answer.status_code, answer.json()) for answer in answers] == [(503, STORE_DOWN)] * 5
    line = "rate-limit store unavailable: ConnectionError"
    assert outage_lines(outage_log, "plants.throttling") == [(line, True)] + [(line + REPEATED, False)] * 4
    assert [record.exc_info is not None for record in outage_log.records].count(True) == 1
    assert request_lines(outage_log) == [503] * 5
    assert not Plant.objects.exists()


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
