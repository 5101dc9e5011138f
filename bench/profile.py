"""`make profile`: where an app server worker's CPU goes per POST /plants, by part of the stack.

Run under scripts/with-postgres. Starts the service as `make serve` runs it, loads it with wrk,
reads the workers' CPU per request from /proc (unprofiled), then samples them with py-spy (`--gil`)
and charges each sample to the deepest frame naming a part; a third run writes bench/flamegraph.svg.
"""

import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.run import ENV, ID_BLOCK, LOG_DIR, cpu_seconds, prepare, wrk_figures
from bench.run import wrk_load as load
from bench.servers import unit
from deploy.processes import ROOT

SECONDS = int(os.environ.get("PROFILE_SECONDS", 15))
PY_SPY = Path(sys.executable).parent / "py-spy"
FLAMEGRAPH = ROOT / "bench" / "flamegraph.svg"

# (pattern on a frame "function (file:line)", part); a frame takes the first part it matches, and a
# sample the part of its deepest such frame. Library frames below a part (psycopg under the token
# lookup, say) are that part's cost.
PARTS = [
    (r"plants/authentication", "authentication: header, SHA-256, the token SELECT (a cursor, psycopg, round trip)"),
    (r"plant_create \(plants/services", "the INSERT (ORM, psycopg, round trip)"),
    (r"plants/(throttling|rate_stores)", "throttle: the count (the database's upsert, or Redis)"),
    (r"plants/metrics|prometheus_client/", "metrics (RequestMetricsMiddleware, counters)"),
    (r"plants/parsers|Request\._parse|Request\._load_data|Request\.data ", "reading the body, JSON parse"),
    (r"plants/serializers|rest_framework/(serializers|fields)\.py", "NewPlant validation (DRF serializer)"),
    (r"to_representation|rest_framework/renderers|Response\.rendered_content", "the answer: dict, JSON render"),
    (r"plants/negotiation|perform_content_negotiation", "content negotiation"),
    (r"rest_framework/permissions", "permission check"),
    (r"rest_framework/|plants/views", "DRF request/response wrapping (APIView.dispatch, Request, Response)"),
    (r"plantstore_site/wsgi", "the process environment taken out of the request's environ"),
    (r"plants/middleware", "request log (RequestLogMiddleware: json.dumps, logging to a file)"),
    (
        r"django/(middleware|contrib/\w+/middleware|utils/deprecation)|whitenoise/|axes/",
        "Django middleware (the 9 other classes)",
    ),
    (
        r"django/dispatch|django/db/__init__|is_usable \(plants/postgresql",
        "request_started/finished signals (connection checks)",
    ),
    (
        r"django/(core/handlers|core/signals|urls|http|views)/",
        "Django request handler (WSGIRequest, URL resolution, HttpResponse)",
    ),
]
OTHER = "other (thread pool, interpreter)"


def part_of(stack: list[str]) -> str:
    for frame in reversed(stack):
        for pattern, part in PARTS:
            if re.search(pattern, frame):
                return part
    return OTHER


def py_spy(pid: int, output: Path, form: str, seconds: int) -> None:
    command = [str(PY_SPY), "record", "-p", str(pid), "--subprocesses", "--gil", "--nonblocking"]
    command += ["--rate", "250", "--duration", str(seconds), "--format", form, "--output", str(output)]
    subprocess.run(command, check=True, capture_output=True)


def main() -> None:
    token = prepare("profile")
    server = unit("profile", LOG_DIR, **ENV).start()
    url = f"{server.url}/plants"
    try:
        wrk_figures(load(url, token, ID_BLOCK, 3))  # warm-up
        workers = server.worker_pids()
        before = cpu_seconds(workers)
        requests = wrk_figures(load(url, token, 2 * ID_BLOCK, SECONDS))["requests"]
        cpu_per_request_us = (cpu_seconds(workers) - before) / requests * 1e6
        with tempfile.TemporaryDirectory() as folder:
            raw = Path(folder) / "profile.txt"
            wrk = load(url, token, 3 * ID_BLOCK, SECONDS + 2)
            time.sleep(1)
            py_spy(server.app.process.pid, raw, "raw", SECONDS)
            wrk_figures(wrk)
            samples = Counter()
            for line in raw.read_text().splitlines():
                stack, _, count = line.rpartition(" ")
                if not count.isdigit():  # a frame's text broken over lines (seen once): not a sample line
                    continue
                samples[part_of(stack.split(";"))] += int(count)
        wrk = load(url, token, 4 * ID_BLOCK, SECONDS + 2)
        time.sleep(1)
        py_spy(server.app.process.pid, FLAMEGRAPH, "flamegraph", SECONDS)
        wrk_figures(wrk)
    finally:
        server.stop()
    total = sum(samples.values())
    print(f"{requests / SECONDS:.0f} requests/s unprofiled; worker CPU {cpu_per_request_us:.0f} µs per request")
    print(f"{total} samples of threads holding the GIL; flame graph: {FLAMEGRAPH.relative_to(ROOT)}\n")
    print("| part of the stack | share of samples | µs per request |\n|---|---|---|")
    for part, count in samples.most_common():
        print(f"| {part} | {count / total:.1%} | {count / total * cpu_per_request_us:.0f} |")


if __name__ == "__main__":
    main()
