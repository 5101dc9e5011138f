"""`make bench-inprocess`: the Python CPU of one `POST /plants`, in process, A/B against a commit.

Run under scripts/with-postgres. Each run is a fresh process that calls production's WSGI `application`
(plantstore_site/wsgi.py, on bench.settings) directly: no HTTP server, so what is measured is Django, DRF and the
service, throttling and metrics on, the request log to a file: `time.process_time()` per create over
BENCH_REQUESTS creates after a warm-up. BASELINE=<commit> alternates runs of that commit's tree (this file
copied in) with runs of the working tree: the A/B of a change.
"""

import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from io import BytesIO
from pathlib import Path
from wsgiref.util import setup_testing_defaults

ROOT = Path(__file__).resolve().parent.parent
REQUESTS = int(os.environ.get("BENCH_REQUESTS", 3000))
WARM_UP = int(os.environ.get("BENCH_WARM_UP", 300))
RUNS = int(os.environ.get("BENCH_RUNS", 5))
ENV = {
    "DJANGO_SETTINGS_MODULE": "bench.settings",
    "DJANGO_DEBUG": "0",
    "DJANGO_ALLOWED_HOSTS": "plants.example.com",  # as .env.example has it
    # Per day: counted on every request, never reached.
    "PLANTS_THROTTLE_RATE": "100000000/day",
}


def environ(token: str, plant_id: int) -> dict:
    """What an app server hands the app for wrk's request (bench/create.lua)."""
    body = f'{{"id": {plant_id}, "name": "Plant {plant_id}", "tag": "bench"}}'.encode()
    request = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/plants",
        "SERVER_NAME": "plants.example.com",
        "HTTP_HOST": "plants.example.com",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_AUTHORIZATION": f"Bearer {token}",
        "wsgi.input": BytesIO(body),
    }
    setup_testing_defaults(request)  # the other keys a WSGI server sets, as the standard library has them
    return request


def child(token: str, id_base: int) -> None:
    """One run: the request log to a file (stderr, as the app server's workers write it), then the timing."""
    log = open(os.environ["BENCH_LOG"], "a")  # noqa: SIM115 (kept open for the process)
    os.dup2(log.fileno(), 2)
    from plantstore_site.wsgi import application

    statuses = []

    def start_response(status, headers, exc_info=None):
        statuses.append(status)

    def call(plant_id: int) -> None:
        result = application(environ(token, plant_id), start_response)
        b"".join(result)
        result.close()  # request_finished, as a WSGI server does

    for n in range(WARM_UP):
        call(id_base + n)
    ids = range(id_base + WARM_UP, id_base + WARM_UP + REQUESTS)
    started = time.process_time()
    for plant_id in ids:
        call(plant_id)
    cpu = time.process_time() - started
    bad = [status for status in statuses if not status.startswith("200")]
    if bad:
        raise SystemExit(f"{len(bad)} answers were not 200, e.g. {bad[0]}")
    print(json.dumps({"us_per_request": cpu / REQUESTS * 1e6}))


def run(tree: Path, token: str, id_base: int, folder: Path) -> float:
    command = [sys.executable, "-m", "bench.inprocess", "--child", token, str(id_base)]
    environment = child_environment(tree, id_base, folder)
    output = subprocess.run(command, cwd=tree, env=environment, check=True, capture_output=True, text=True).stdout
    # The last line of its own: with OTEL_TRACES_EXPORTER=otlp_json_file, spans share the output.
    return json.loads([line for line in output.splitlines() if '"us_per_request"' in line][-1])["us_per_request"]


def child_environment(tree: Path, id_base: int, folder: Path) -> dict:
    metrics = folder / f"metrics-{id_base}"
    metrics.mkdir()
    return {
        **os.environ,
        **ENV,
        "PYTHONPATH": str(tree),
        "PROMETHEUS_MULTIPROC_DIR": str(metrics),
        "BENCH_LOG": str(folder / "requests.log"),
    }


def baseline_tree(commit: str, folder: Path, name: str) -> Path:
    """The commit's files, with this harness copied in (a commit before it has none)."""
    tree = folder / name
    tree.mkdir()
    archive = subprocess.run(["git", "archive", commit], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    shutil.copy(__file__, tree / "bench" / "inprocess.py")
    return tree


def main() -> None:
    from bench.run import prepare  # this tree's: a baseline's tree runs the child alone

    os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    token = prepare("bench-inprocess")
    baseline = os.environ.get("BASELINE", "")
    with tempfile.TemporaryDirectory(prefix="plantstore-inprocess.") as name:
        folder = Path(name)
        trees = {"this tree": ROOT}
        if baseline:
            trees = {f"baseline {baseline}": baseline_tree(baseline, folder, "baseline"), "this tree": ROOT}
        results = {label: [] for label in trees}
        id_base = time.time_ns() // 1000 % 10**12 * 1000
        for _ in range(RUNS):
            for label, tree in trees.items():  # alternating, so both meet the same machine
                id_base += 10**7
                results[label].append(run(tree, token, id_base, folder))
        lines = (folder / "requests.log").read_text().count('"request_id"')
    expected = RUNS * len(trees) * (REQUESTS + WARM_UP)
    print(f"{RUNS} runs each of {REQUESTS} creates after {WARM_UP} warm-up; request log lines {lines}/{expected}")
    print("| tree | CPU µs per request, median (minimum) | runs |\n|---|---|---|")
    for label, values in results.items():
        runs = ", ".join(f"{value:.0f}" for value in values)
        print(f"| {label} | {statistics.median(values):.0f} ({min(values):.0f}) | {runs} |")
    if baseline:
        base, this = (statistics.median(values) for values in results.values())
        print(f"this tree ÷ baseline: {this / base:.3f} ({this - base:+.0f} µs)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], int(sys.argv[3]))
    else:
        main()
