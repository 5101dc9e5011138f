"""`make profile`: where an app server worker's CPU goes per POST /plants, by part of the stack.

Run under scripts/with-postgres. Starts the service as `make serve` runs it, loads it with wrk,
reads the workers' CPU per request from /proc (unprofiled), then samples them with py-spy (`--gil`)
and charges each sample to the deepest frame naming a part; a third run writes bench/flamegraph.svg.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.run import BENCH_HOST, ENV, ID_BLOCK, LOG_DIR, WRK_THREADS, cpu_seconds, manage
from bench.servers import service
from deploy.processes import ROOT

SECONDS = int(os.environ.get("PROFILE_SECONDS", 15))
CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", 16))
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


def load(url: str, token: str, id_base: int, seconds: int) -> subprocess.Popen:
    command = ["wrk", f"-t{WRK_THREADS}", f"-c{CONNECTIONS}", f"-d{seconds}s", "-s", "bench/create.lua", url]
    environment = {**os.environ, "BENCH_TOKEN": token, "BENCH_ID_BASE": str(id_base), "BENCH_HOST": BENCH_HOST}
    return subprocess.Popen(command, cwd=ROOT, env=environment, stdout=subprocess.PIPE, text=True)


def requests_of(wrk: subprocess.Popen) -> int:
    return json.loads(wrk.communicate()[0].strip().splitlines()[-1])["requests"]


def py_spy(pid: int, output: Path, form: str, seconds: int) -> None:
    command = [str(PY_SPY), "record", "-p", str(pid), "--subprocesses", "--gil", "--nonblocking"]
    command += ["--rate", "250", "--duration", str(seconds), "--format", form, "--output", str(output)]
    subprocess.run(command, check=True, capture_output=True)


def main() -> None:
    manage("migrate", "--no-input", env=ENV)
    token = manage("token", "issue", "profile", env=ENV).strip()
    server = service(LOG_DIR, **ENV).start()
    url = f"{server.url}/plants"
    try:
        requests_of(load(url, token, ID_BLOCK, 3))  # warm-up
        workers = server.worker_pids()
        before = cpu_seconds(workers)
        requests = requests_of(load(url, token, 2 * ID_BLOCK, SECONDS))
        cpu_per_request_us = (cpu_seconds(workers) - before) / requests * 1e6
        with tempfile.TemporaryDirectory() as folder:
            raw = Path(folder) / "profile.txt"
            wrk = load(url, token, 3 * ID_BLOCK, SECONDS + 2)
            time.sleep(1)
            py_spy(server.app.process.pid, raw, "raw", SECONDS)
            requests_of(wrk)
            samples = Counter()
            for line in raw.read_text().splitlines():
                stack, _, count = line.rpartition(" ")
                if not count.isdigit():  # a frame's text broken over lines (seen once): not a sample line
                    continue
                samples[part_of(stack.split(";"))] += int(count)
        wrk = load(url, token, 4 * ID_BLOCK, SECONDS + 2)
        time.sleep(1)
        py_spy(server.app.process.pid, FLAMEGRAPH, "flamegraph", SECONDS)
        requests_of(wrk)
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
