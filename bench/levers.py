"""`make bench-levers`: the service on its production path (`make serve`'s unit: nginx in front of
Granian), one lever of the per-request Python changed per variant, all loaded side by side in rotating
rounds, as make bench does. The app servers themselves are `make bench-stack`'s.

Each variant is its own unit; its environment differs from the baseline's in the settings its row
names. Prints the table kept in BENCHMARKS.md (What was measured against it).
"""

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from bench.run import ENV, LOG_DIR, prepare, ratio, run_rounds, summarize
from bench.servers import service, unit
from deploy.app_server import granian_command
from deploy.processes import ROOT

ROUNDS = int(os.environ.get("BENCH_ROUNDS", 7))
TREE = os.environ.get("BENCH_TREE", "")
SECONDS = int(os.environ.get("BENCH_SECONDS", 6))
EXTRAS_OFF = {"PLANTS_THROTTLE_RATE": "", "BENCH_LEVERS": "no-request-log,no-metrics"}
# name: (what differs from the baseline, environment it adds); every one is behind nginx.
VARIANTS = {
    "baseline": ("baseline: `make serve` as configured (Granian, 1 process per core × 4 threads)", {}),
    # The baseline again, unchanged: how far apart two identical servers measure, the table's noise.
    "baseline-again": ("the baseline again, an identical second server (the noise)", {}),
    "no-prepare": (
        "prepared statements off (`DJANGO_DB_PREPARED_STATEMENTS=0`)",
        {"DJANGO_DB_PREPARED_STATEMENTS": "0"},
    ),
    "no-throttle": ("rate limit off (`PLANTS_THROTTLE_RATE=`)", {"PLANTS_THROTTLE_RATE": ""}),
    "no-request-log": ("request log off (plants.requests at WARNING)", {"BENCH_LEVERS": "no-request-log"}),
    "no-metrics": ("metrics middleware off", {"BENCH_LEVERS": "no-metrics"}),
    "no-admin-middleware": (
        "the admin's middleware off (sessions, CSRF, auth, messages, WhiteNoise, axes): serving the admin apart",
        {"BENCH_LEVERS": "no-admin-middleware"},
    ),
    "per-instance-fields": (
        "the serializer's fields bound per instance, as DRF does (the seam `shared_bound_fields` undone)",
        {"BENCH_LEVERS": "per-instance-fields"},
    ),
    "extras-off": ("all three of: rate limit, request log, metrics off", EXTRAS_OFF),
    "threads-2": ("2 threads per process (`APP_THREADS=2`)", {"APP_THREADS": "2"}),
    "threads-8": ("8 threads per process (`APP_THREADS=8`)", {"APP_THREADS": "8"}),
}


# Not a variant: the bare Django view (bench/views.py) on the baseline's own unit, the floor that
# make bench's "service ÷ bare view" target is measured against, beside the levers.
BARE_PATH = "/bench/bare-plants"
BARE_ROW = "the bare Django view in the baseline's unit (no authentication, validation, throttle, log line)"


# BENCH_VARIANTS=a,b: only those rows (and the baselines), for a shorter, less crowded run.
if only := os.environ.get("BENCH_VARIANTS", ""):
    VARIANTS = {name: row for name, row in VARIANTS.items() if name in {"baseline", "baseline-again", *only.split(",")}}


def start(env: dict):
    return service(LOG_DIR, **{**ENV, **env}).start()


def start_tree(commit: str):
    """BENCH_TREE=<commit>: that commit's code in a unit like the baseline's (the same venv and Granian
    settings), as a row beside the levers: an A/B of two trees on the production path."""
    tree = Path(tempfile.mkdtemp(prefix="plantstore-tree."))
    archive = subprocess.run(["git", "archive", commit], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    env = {**ENV, "PYTHONPATH": str(tree)}
    command = [*granian_command(env, "bench.wsgi:application"), f"--working-dir={tree}"]
    return unit("tree", LOG_DIR, command, **env).start()


def main() -> None:
    token = prepare("bench-levers")
    servers = {}
    try:
        for name, (_, env) in VARIANTS.items():
            servers[name] = start(dict(env))
        targets = {name: (name, "/plants", name) for name in VARIANTS}
        targets["bare"] = ("baseline", BARE_PATH, "bare")
        if TREE:
            servers["tree"] = start_tree(TREE)
            targets["tree"] = ("tree", "/plants", "tree")
        rounds = run_rounds(servers, token, targets, ROUNDS, SECONDS)
    finally:
        for server in servers.values():
            server.stop()
        for tree in Path(tempfile.gettempdir()).glob("plantstore-tree.*"):
            shutil.rmtree(tree, ignore_errors=True)
    base_cpu = summarize(rounds["baseline"])["cpu_us"]
    print(f"\n{ROUNDS} rounds of {SECONDS} s; CPU per request: nginx and the app server's processes")
    print("| lever (behind nginx) | requests/s ÷ baseline | CPU per request | statements per create | errors |")
    print("|---|---|---|---|---|")
    rows = {name: description for name, (description, _) in VARIANTS.items()} | {"bare": BARE_ROW}
    if TREE:
        rows["tree"] = f"the code at {TREE}, in a unit like the baseline's"
    for name, description in rows.items():
        figures = summarize(rounds[name])
        cpu = f"{figures['cpu_us']:.0f} µs ({figures['cpu_us'] / base_cpu - 1:+.0%})"
        errors = figures["non_2xx"] + figures["socket_errors"]
        print(
            f"| {description} | {ratio(rounds, name, 'baseline'):.2f} | {cpu} | {figures['statements']:.2f} | {errors} |"
        )


if __name__ == "__main__":
    main()
