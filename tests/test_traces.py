"""W3C Trace Context with OpenTelemetry off (the default): the request's log line joins the caller's
trace, whatever answer it gets; a missing or invalid `traceparent` starts a trace and is never an
error. tests/test_traces_exported.py runs the same through nginx and HAProxy with OpenTelemetry on."""

import json
import logging
import re
import sys

import pytest
from django.test import RequestFactory

from plants.models import Plant

pytestmark = pytest.mark.django_db

TRACE_ID, PARENT_ID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


class Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(record.getMessage()))


@pytest.fixture
def log_lines():
    """The request log's entries so far, parsed (in a fixture's setup too, which caplog keeps apart)."""
    logger, handler = logging.getLogger("plants.requests"), Lines()
    logger.addHandler(handler)
    yield lambda: handler.lines
    logger.removeHandler(handler)


def assert_ids_of_a_span(entry: dict) -> None:
    assert re.fullmatch(r"[0-9a-f]{32}", entry["trace_id"]) and entry["trace_id"] != "0" * 32
    assert re.fullmatch(r"[0-9a-f]{16}", entry["span_id"]) and entry["span_id"] != "0" * 16


def test_a_valid_traceparent_puts_the_request_in_the_caller_s_trace_with_a_span_of_its_own(post_plant, log_lines):
    response = post_plant({"id": 1, "name": "Rose"}, HTTP_TRACEPARENT=TRACEPARENT, HTTP_TRACESTATE="congo=t61rcWkgMzE")

    assert response.status_code == 200
    [entry] = log_lines()
    assert entry["trace_id"] == TRACE_ID
    assert_ids_of_a_span(entry)
    assert entry["span_id"] != PARENT_ID


def test_a_later_version_s_traceparent_is_read_for_its_first_four_fields(post_plant, log_lines):
    post_plant({"id": 1, "name": "Rose"}, HTTP_TRACEPARENT=f"cc-{TRACE_ID}-{PARENT_ID}-01-what-comes-later")

    assert log_lines()[0]["trace_id"] == TRACE_ID


INVALID = {
    "version ff": f"ff-{TRACE_ID}-{PARENT_ID}-01",
    "all-zero trace id": f"00-{'0' * 32}-{PARENT_ID}-01",
    "all-zero parent id": f"00-{TRACE_ID}-{'0' * 16}-01",
    "short trace id": f"00-{TRACE_ID[:-1]}-{PARENT_ID}-01",
    "long parent id": f"00-{TRACE_ID}-{PARENT_ID}0-01",
    "upper-case hex": f"00-{TRACE_ID.upper()}-{PARENT_ID}-01",
    "version 00 with a fifth field": f"00-{TRACE_ID}-{PARENT_ID}-01-extra",
    "two headers that disagree": f"{TRACEPARENT},00-{'1' * 32}-{PARENT_ID}-01",
    "a forged log line": f'{TRACEPARENT}\n{{"method": "GET", "path": "/forged"}}',
    "empty": "",
}


@pytest.mark.parametrize("traceparent", INVALID.values(), ids=INVALID.keys())
def test_an_invalid_traceparent_starts_a_new_trace_and_the_create_is_answered(post_plant, log_lines, traceparent):
    response = post_plant({"id": 1, "name": "Rose"}, HTTP_TRACEPARENT=traceparent)

    assert (response.status_code, response.json()) == (200, {"id": 1, "name": "Rose"})
    assert Plant.objects.count() == 1
    [entry] = log_lines()
    assert_ids_of_a_span(entry)
    assert entry["trace_id"] not in (TRACE_ID, "1" * 32)


def test_requests_without_a_traceparent_each_start_a_trace_of_their_own(post_plant, log_lines):
    post_plant({"id": 1, "name": "Rose"}), post_plant({"id": 2, "name": "Fern"})

    first, second = log_lines()
    assert first["trace_id"] != second["trace_id"]


@pytest.fixture
def refusals(log_lines, settings, post_plant, api_client, monkeypatch):
    """A request answered each way the service refuses one, each sent with TRACEPARENT: the statuses."""
    settings.PLANTS_MAX_BODY_BYTES = 4096
    settings.PLANTS_THROTTLE_RATE = "1/hour"

    def explode(**kwargs):
        raise RuntimeError("boom")

    answers = [
        api_client.post("/plants", {"id": 1, "name": "Rose"}, format="json", HTTP_TRACEPARENT=TRACEPARENT),  # 401
        post_plant({"id": "one", "name": "Rose"}, HTTP_TRACEPARENT=TRACEPARENT),  # 400, and the token's one request
        post_plant({"id": 2, "name": "Fern"}, HTTP_TRACEPARENT=TRACEPARENT),  # 429
    ]
    settings.PLANTS_THROTTLE_RATE = ""
    answers.append(post_plant({"id": 3, "name": "x" * 5000}, HTTP_TRACEPARENT=TRACEPARENT))  # 413
    monkeypatch.setattr("plants.serializers.plant_create", explode)
    api_client.raise_request_exception = False  # answer as a server would, not re-raise into the test
    answers.append(post_plant({"id": 4, "name": "Ivy"}, HTTP_TRACEPARENT=TRACEPARENT))  # 500
    return [answer.status_code for answer in answers]


def test_every_refusal_s_log_line_carries_the_caller_s_trace(refusals, log_lines):
    assert refusals == [401, 400, 429, 413, 500]
    entries = log_lines()
    assert [entry["status"] for entry in entries] == refusals
    assert {entry["trace_id"] for entry in entries} == {TRACE_ID}
    assert len({entry["span_id"] for entry in entries}) == len(entries)


def test_with_tracing_off_no_opentelemetry_instrumentation_is_loaded(post_plant, settings):
    post_plant({"id": 1, "name": "Rose"}, HTTP_TRACEPARENT=TRACEPARENT)

    assert settings.PLANTS_TRACING is False
    assert not any(name.startswith("opentelemetry.instrumentation") for name in sys.modules)
    assert not any("opentelemetry" in middleware for middleware in settings.MIDDLEWARE)


def test_the_server_span_is_named_for_the_route_and_carries_no_query_string():
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415

    from plants.tracing import finish_server_span  # noqa: PLC0415

    request = RequestFactory().post("/plants?token=secret-in-the-url")
    tracer = TracerProvider().get_tracer("tests")
    attributes = {
        "http.route": "^plants$",
        "http.url": "http://testserver/plants?token=secret-in-the-url",
        "http.target": "/plants?token=secret-in-the-url",
        "url.query": "token=secret-in-the-url",
    }
    with tracer.start_as_current_span("POST ^plants$", attributes=attributes) as span:
        finish_server_span(span, request, None)

    context = span.get_span_context()
    assert request.trace_ids == (f"{context.trace_id:032x}", f"{context.span_id:016x}")
    assert (span.name, dict(span.attributes)) == (
        "POST /plants",
        {"http.route": "/plants", "http.url": "http://testserver/plants", "http.target": "/plants", "url.query": ""},
    )


def test_an_unsampled_server_span_still_gives_the_log_line_its_ids():
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF  # noqa: PLC0415

    from plants.tracing import finish_server_span  # noqa: PLC0415

    request = RequestFactory().post("/plants")
    with TracerProvider(sampler=ALWAYS_OFF).get_tracer("tests").start_as_current_span("POST") as span:
        finish_server_span(span, request, None)

    context = span.get_span_context()
    assert (span.is_recording(), request.trace_ids) == (False, (f"{context.trace_id:032x}", f"{context.span_id:016x}"))
