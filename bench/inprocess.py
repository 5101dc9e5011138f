"""`make bench-inprocess`: the Python CPU of one `POST /plants`, measured in-process, A/B against a commit.

Run under scripts/with-postgres. Each run is a fresh process that calls the bench's WSGI
`application` (bench.wsgi: production settings and middleware) directly with a prepared environ:
no HTTP server and no sockets but PostgreSQL's, so what is measured is Django, DRF and the
service. Each request creates a new plant with a real bearer token; throttling is on at a rate
never reached (as make bench runs it), the request log goes to a file (as under gunicorn), and
metrics are on in multiprocess mode. A run reports `time.process_time()` per request over
BENCH_REQUESTS creates after a warm-up: CPU, not wall time, so a machine shared with other work
disturbs it far less (though a loaded VM still spreads it: compare medians and minimums of
alternating runs). BASELINE=<commit> alternates runs of that commit's tree (this file copied in)
with runs of the working tree (or of CANDIDATE=<commit>): the A/B table of a lever; TREES=<c1>,<c2>,…
runs a chain of commits, each against the one before.
BENCH_CALLGRIND=1 counts instructions instead: deterministic, but minutes per run.
"""

import json
import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQUESTS = int(os.environ.get("BENCH_REQUESTS", 3000))
WARM_UP = int(os.environ.get("BENCH_WARM_UP", 300))
RUNS = int(os.environ.get("BENCH_RUNS", 5))
# BENCH_CALLGRIND=1: instructions per request instead (valgrind's callgrind, deterministic on a
# shared machine): two runs of each tree, CALLGRIND_REQUESTS apart, and the difference per request.
CALLGRIND = os.environ.get("BENCH_CALLGRIND") == "1"
CALLGRIND_REQUESTS = (50, 250)
ENV = {
    "DJANGO_SETTINGS_MODULE": "bench.settings",
    "DJANGO_DEBUG": "0",
    "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
    # Per day, not per second: a window that rolls over every second costs the rate-limit store a
    # new row per second of the run, and under callgrind (slower as the machine is busier) that made
    # identical trees differ by up to 2% per create. Still counted on every request, never reached.
    "PLANTS_THROTTLE_RATE": "100000000/day",
    "BENCH_LEVERS": "",
}


def environ(token: str, plant_id: int) -> dict:
    """What gunicorn hands the app for wrk's request (bench/create.lua)."""
    body = f'{{"id": {plant_id}, "name": "Plant {plant_id}", "tag": "bench"}}'.encode()
    return {
        "REQUEST_METHOD": "POST",
        "SCRIPT_NAME": "",
        "PATH_INFO": "/plants",
        "QUERY_STRING": "",
        "RAW_URI": "/plants",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "REMOTE_ADDR": "127.0.0.1",
        "REMOTE_PORT": "40000",
        "HTTP_HOST": "127.0.0.1:8000",
        "HTTP_CONTENT_TYPE": "application/json",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_AUTHORIZATION": f"Bearer {token}",
        "wsgi.input": BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.url_scheme": "http",
        "wsgi.version": (1, 0),
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }


def child(token: str, id_base: int) -> None:
    """One run: the request log to a file (stderr, as gunicorn's workers write it), then the timing."""
    log = open(os.environ["BENCH_LOG"], "a")  # noqa: SIM115 (kept open for the process)
    os.dup2(log.fileno(), 2)
    from bench.wsgi import application

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
    flush = getattr(application, "flush_request_log", None)
    if flush:
        flush()
    print(json.dumps({"us_per_request": cpu / REQUESTS * 1e6}))


def run(tree: Path, token: str, id_base: int, folder: Path) -> float:
    if CALLGRIND:
        counts = [instructions(tree, token, id_base + n * 10**6, folder, n) for n in CALLGRIND_REQUESTS]
        return (counts[1] - counts[0]) / (CALLGRIND_REQUESTS[1] - CALLGRIND_REQUESTS[0])
    output = subprocess.run(
        [sys.executable, "-m", "bench.inprocess", "--child", token, str(id_base)],
        cwd=tree,
        env=child_environment(tree, id_base, folder),
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(output.strip().splitlines()[-1])["us_per_request"]


def instructions(tree: Path, token: str, id_base: int, folder: Path, requests: int) -> int:
    """Instructions one child run executes, start-up included (cancelled out by the caller)."""
    log = folder / f"callgrind-{id_base}.log"
    command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={folder}/callgrind-{id_base}.out"]
    command += [f"--log-file={log}", sys.executable, "-m", "bench.inprocess", "--child", token, str(id_base)]
    environment = {**child_environment(tree, id_base, folder), "BENCH_REQUESTS": str(requests), "PYTHONHASHSEED": "0"}
    subprocess.run(command, cwd=tree, env=environment, check=True, capture_output=True)
    return int(re.search(r"Collected : (\d+)", log.read_text()).group(1))


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
    if "DATABASE_URL" not in os.environ:
        raise SystemExit("bench.inprocess: run under scripts/with-postgres (make bench-inprocess)")
    os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    manage = [sys.executable, "manage.py"]
    environment = {**os.environ, **ENV}
    subprocess.run([*manage, "migrate", "--no-input"], cwd=ROOT, env=environment, check=True, capture_output=True)
    token = subprocess.run(
        [*manage, "token", "issue", f"inprocess-{secrets.token_hex(4)}"],
        cwd=ROOT,
        env=environment,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    baseline = os.environ.get("BASELINE", "")
    with tempfile.TemporaryDirectory(prefix="plantstore-inprocess.") as name:
        folder = Path(name)
        # CANDIDATE=<commit>: that commit in place of the working tree, which may then change meanwhile.
        candidate = os.environ.get("CANDIDATE", "")
        this = baseline_tree(candidate, folder, "candidate") if candidate else ROOT
        trees = {"this tree": this}
        if baseline:
            trees = {f"baseline {baseline}": baseline_tree(baseline, folder, "baseline"), "this tree": this}
        if chain := os.environ.get("TREES", ""):  # TREES=a,b,c: those commits in turn, each against the one before
            trees = {commit: baseline_tree(commit, folder, f"tree-{n}") for n, commit in enumerate(chain.split(","))}
        results = {label: [] for label in trees}
        id_base = time.time_ns() // 1000 % 10**12 * 1000
        for _ in range(RUNS):
            for label, tree in trees.items():  # alternating, so both meet the same machine
                id_base += 10**7
                results[label].append(run(tree, token, id_base, folder))
        lines = (folder / "requests.log").read_text().count('"request_id"')
    if CALLGRIND:
        expected = RUNS * len(trees) * (sum(CALLGRIND_REQUESTS) + 2 * WARM_UP)
        print(f"{RUNS} callgrind runs each; request log lines {lines}/{expected}")
        print("| tree | instructions per request, median | runs |\n|---|---|---|")
    else:
        expected = RUNS * len(trees) * (REQUESTS + WARM_UP)
        print(f"{RUNS} runs each of {REQUESTS} creates after {WARM_UP} warm-up; request log lines {lines}/{expected}")
        print("| tree | CPU µs per request, median (minimum) | runs |\n|---|---|---|")
    for label, values in results.items():
        runs = ", ".join(f"{value:.0f}" for value in values)
        print(f"| {label} | {statistics.median(values):.0f} ({min(values):.0f}) | {runs} |")
    medians = [statistics.median(values) for values in results.values()]
    for label, before, after in zip(results, medians, medians[1:], strict=False):
        print(f"{label} -> next: {after / before - 1:+.1%} ({after - before:+.0f})")
    if baseline:
        base, this = medians
        print(
            f"this tree ÷ baseline: {this / base:.3f} ({this - base:+.0f}); by minimum {min(results[label]) / min(next(iter(results.values()))):.3f}"
        )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], int(sys.argv[3]))
    else:
        main()
