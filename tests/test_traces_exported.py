"""OpenTelemetry on, by its standard environment, in `make serve` (nginx in front of two Granian
workers, SQLite), `make cluster` (nginx, HAProxy, two units on PostgreSQL through PgBouncer) and
`make run` (Django's development server).

`make serve` exports as production does, OTLP over HTTP (`OTEL_TRACES_EXPORTER=otlp`), to a
collector here that decodes OpenTelemetry's own protobuf messages; `make cluster`'s units write
OTLP JSON lines with OpenTelemetry's file exporter to their standard output, the topology's log.
The tests read the spans back beside the request log lines."""

import json
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from base64 import b64decode
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.db import connection
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from localcluster.processes import free_port
from tests.live import PUBLIC_HOST, MakeServe, start_make, wait_until_healthy
from tests.topologies import CLUSTER, SERVE, Topology, running_cluster, topology_of_cluster, topology_of_served

pytestmark = pytest.mark.live

TRACING = {
    "OTEL_SERVICE_NAME": "plantstore-test",
    "OTEL_BSP_SCHEDULE_DELAY": "50",  # milliseconds: export at once, not every 5 s
}
TRACE_ID, PARENT_ID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
TRACESTATE = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
SERVER, CLIENT = 2, 3  # OTLP's span kinds


@pytest.fixture(scope="module")
def work_dir():
    folder = Path(tempfile.mkdtemp(prefix="plantstore-traces."))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@dataclass
class Traced:
    """A running topology, and every span it has exported so far: OTLP JSON's fields, `attributes`
    as a dict, and `pid`, the process.pid of the worker that exported it."""

    topology: Topology
    exported: Callable[[], list[dict]]


def attributes(pairs: list) -> dict:
    return {pair["key"]: next(iter(pair["value"].values())) for pair in pairs}


def spans(resource_spans: list[dict]) -> list[dict]:
    found = []
    for resource in resource_spans:
        pid = int(attributes(resource["resource"]["attributes"])["process.pid"])
        for scope in resource["scopeSpans"]:
            found += [{**span, "attributes": attributes(span["attributes"]), "pid": pid} for span in scope["spans"]]
    return found


def spans_in_log(topology: Topology) -> list[dict]:
    lines = [json.loads(line) for line in topology.log().splitlines() if line.startswith('{"resourceSpans"')]
    return [span for line in lines for span in spans(line["resourceSpans"])]


class Collector(ThreadingHTTPServer):
    """An OTLP/HTTP receiver on loopback: POST /v1/traces, protobuf, decoded with OpenTelemetry's
    own message classes into OTLP JSON's form (ids in hex)."""

    def __init__(self):
        self.resource_spans: list[dict] = []
        collector = self

        class Receive(BaseHTTPRequestHandler):
            def do_POST(self):
                message = ExportTraceServiceRequest.FromString(self.rfile.read(int(self.headers["Content-Length"])))
                received = (
                    MessageToDict(message, use_integers_for_enums=True)["resourceSpans"]
                    if self.path == "/v1/traces"
                    else []
                )
                for span in (span for scope in received for spans in scope["scopeSpans"] for span in spans["spans"]):
                    for field in ("traceId", "spanId", "parentSpanId"):
                        if field in span:
                            span[field] = b64decode(span[field]).hex()  # protobuf's JSON form is base64
                collector.resource_spans += received
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", free_port()), Receive)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def exported(self) -> list[dict]:
        return spans(list(self.resource_spans))


@pytest.fixture(scope="module")
def serve_topology(work_dir):
    (work_dir / "serve").mkdir()
    collector = Collector()
    exporting = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "NO_PROXY": "127.0.0.1"}
    served = MakeServe(work_dir / "serve", **TRACING, **exporting).start()
    try:
        yield Traced(topology_of_served(served), collector.exported)
    finally:
        served.stop()
        collector.shutdown()
        collector.server_close()


@pytest.fixture(scope="module")
def cluster_topology(django_db_setup, django_db_blocker, work_dir):
    env = {"OTEL_TRACES_EXPORTER": "otlp_json_file", **TRACING}
    with running_cluster(connection.settings_dict, work_dir, django_db_blocker, **env) as cluster:
        topology = topology_of_cluster(cluster)
        yield Traced(topology, lambda: spans_in_log(topology))


@pytest.fixture(scope="module", params=[SERVE, CLUSTER])
def traced(request) -> Traced:
    return request.getfixturevalue(f"{request.param}_topology")


def send(topology, path: str = "/plants", body: dict | None = None, host: str = PUBLIC_HOST, **headers: str):
    """POST `body` with the topology's token and `headers`; (status, the request's log line)."""
    request_id = os.urandom(8).hex()
    connection = topology.connection()
    payload = json.dumps(body or {"id": int.from_bytes(os.urandom(6)), "name": "Rose"})
    connection.request(
        "POST",
        path,
        payload,
        {
            "Host": host,
            "Content-Type": "application/json",
            "Authorization": f"Bearer {topology.token}",
            "X-Request-ID": request_id,
            **{name.replace("_", "-"): value for name, value in headers.items()},
        },
    )
    status = connection.getresponse().status
    connection.close()
    return status, log_line(topology, request_id)


def log_line(topology, request_id: str, timeout: float = 5) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        for line in topology.log().splitlines():
            if f'"request_id": "{request_id}"' in line and " plants.requests " in line:
                return json.loads(line.split(" plants.requests ", 1)[1])
        if time.monotonic() > deadline:
            raise AssertionError(f"no log line for request {request_id}")
        time.sleep(0.05)


def spans_of(traced: Traced, trace_id: str, count: int = 3, timeout: float = 10) -> list[dict]:
    """The trace's spans, once its server span and `count` spans in all are exported (a create's:
    the server span, the token's SELECT, the INSERT)."""
    deadline = time.monotonic() + timeout
    while len(spans := [span for span in traced.exported() if span["traceId"] == trace_id]) < count or SERVER not in {
        span["kind"] for span in spans
    }:
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(spans)} of {count} spans of trace {trace_id} exported: {spans}")
        time.sleep(0.05)
    return spans


def test_a_create_is_a_server_span_in_the_caller_s_trace_with_a_child_span_per_statement(traced):
    secret_name, secret_query = f"Rose {os.urandom(4).hex()}", os.urandom(6).hex()
    status, line = send(
        traced.topology,
        f"/plants?note={secret_query}",
        {"id": int.from_bytes(os.urandom(6)), "name": secret_name},
        traceparent=f"00-{TRACE_ID}-{PARENT_ID}-01",
        tracestate=TRACESTATE,
    )

    assert status == 200
    [server] = [span for span in spans_of(traced, TRACE_ID) if span["kind"] == SERVER]
    assert (server["name"], server["parentSpanId"], server["traceState"]) == ("POST /plants", PARENT_ID, TRACESTATE)
    assert server["attributes"]["http.route"] == "/plants"
    assert int(server["attributes"]["http.status_code"]) == 200
    assert (line["trace_id"], line["span_id"]) == (TRACE_ID, server["spanId"])
    statements = sorted(
        (span for span in spans_of(traced, TRACE_ID) if span["kind"] == CLIENT),
        key=lambda span: int(span["startTimeUnixNano"]),
    )
    assert {span["parentSpanId"] for span in statements} == {server["spanId"]}
    # The token's SELECT first, the plant's INSERT last (a worker's new connection sets its time zone
    # before: Django's connection set-up, a statement span too).
    token_statements = [span["name"] for span in statements if "plants_apitoken" in span["attributes"]["db.statement"]]
    assert (token_statements[0], statements[-1]["name"]) == ("SELECT", "INSERT")
    text = json.dumps(spans_of(traced, TRACE_ID))
    for secret in (traced.topology.token, traced.topology.token.split("_", 1)[1], secret_name, secret_query):
        assert secret not in text


@pytest.mark.parametrize(
    "traceparent",
    [f"ff-{TRACE_ID}-{PARENT_ID}-01", f"00-{'0' * 32}-{PARENT_ID}-01", f"00-{TRACE_ID.upper()}-{PARENT_ID}-01"],
    ids=["version ff", "all-zero trace id", "upper-case hex"],
)
def test_an_invalid_traceparent_starts_a_new_trace_and_the_create_is_answered(traced, traceparent):
    status, line = send(traced.topology, traceparent=traceparent)

    assert status == 200
    assert line["trace_id"] not in (TRACE_ID, "0" * 32)
    [server] = [span for span in spans_of(traced, line["trace_id"]) if span["kind"] == SERVER]
    assert "parentSpanId" not in server and server["spanId"] == line["span_id"]


def test_an_unsampled_caller_s_request_is_logged_in_its_trace_but_not_exported(traced):
    unsampled = os.urandom(16).hex()
    status, line = send(traced.topology, traceparent=f"00-{unsampled}-{PARENT_ID}-00")
    sampled = os.urandom(16).hex()
    send(traced.topology, traceparent=f"00-{sampled}-{PARENT_ID}-01")
    spans_of(traced, sampled)  # exported after the unsampled one was answered
    time.sleep(0.3)

    assert (status, line["trace_id"]) == (200, unsampled)
    assert not [span for span in traced.exported() if span["traceId"] == unsampled]


def test_a_host_django_refuses_is_answered_and_logged_in_the_caller_s_trace(traced):
    trace_id = os.urandom(16).hex()

    status, line = send(traced.topology, host="evil.example", traceparent=f"00-{trace_id}-{PARENT_ID}-01")

    assert (status, line["status"], line["trace_id"]) == (400, 400, trace_id)


def test_spans_are_exported_by_every_app_server_worker(traced):
    # Batches of 40 concurrent creates until every worker has answered one (which worker takes a
    # request is the kernel's and the load balancer's choice; on a busy machine one batch may miss one).
    workers, answers, servers = set(traced.topology.workers()), [], []
    for _ in range(5):
        trace_ids = [os.urandom(16).hex() for _ in range(40)]
        with ThreadPoolExecutor(max_workers=8) as pool:
            traceparents = [f"00-{trace_id}-{PARENT_ID}-01" for trace_id in trace_ids]
            answers += pool.map(lambda traceparent: send(traced.topology, traceparent=traceparent), traceparents)
        servers += [span for trace_id in trace_ids for span in spans_of(traced, trace_id) if span["kind"] == SERVER]
        if {span["pid"] for span in servers} >= workers:
            break

    assert {status for status, _ in answers} == {200}
    assert {span["pid"] for span in servers} == workers
    assert all(re.fullmatch(r"[0-9a-f]{16}", span["spanId"]) for span in servers)


@pytest.mark.own_database
def test_make_run_s_development_server_exports_the_request_s_span_in_the_caller_s_trace(tmp_path):
    port, trace_id, log = free_port(), os.urandom(16).hex(), tmp_path / "run.log"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PLANTS_", "OTEL_"))},
        "DJANGO_DEBUG": "1",  # as make run's commands have it
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "PORT": str(port),
        "OTEL_TRACES_EXPORTER": "otlp_json_file",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }
    run = start_make("run", env, log)
    try:
        # make run serves the development default hosts (localhost, 127.0.0.1).
        assert wait_until_healthy(f"http://127.0.0.1:{port}", run, timeout=60, host="127.0.0.1"), log.read_text()
        topology = Topology("run", port, env, lambda: [log.read_text()], lambda: [])
        status, line = send(topology, host="127.0.0.1", traceparent=f"00-{trace_id}-{PARENT_ID}-01")
        spans = spans_of(Traced(topology, lambda: spans_in_log(topology)), trace_id)
    finally:
        os.killpg(run.pid, signal.SIGTERM)
        run.wait(timeout=30)

    [server] = [span for span in spans if span["kind"] == SERVER]
    assert (status, server["name"], server["parentSpanId"]) == (200, "POST /plants", PARENT_ID)
    assert (line["trace_id"], line["span_id"]) == (trace_id, server["spanId"])
