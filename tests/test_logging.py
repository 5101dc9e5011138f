"""The request log: one JSON line per request, with a request id, never a token or a body."""

import json
import logging

import pytest

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
