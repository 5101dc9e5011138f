"""make bench's runs: each run's raw figures kept as JSON beside BENCHMARKS.md (benchmarks/), the headline
ratios a run yields with every estimator, the floors they are held to, and the last three runs of one
version of the code side by side, the floors judged on the median of the three.
"""

import hashlib
import json
import statistics
import subprocess
from pathlib import Path

from bench.estimators import compare
from deploy.processes import ROOT

RUNS_HELD = 3
# What a run's raw file may differ in from the code it measured: the results themselves.
RESULT_PATHS = ("BENCHMARKS.md", "benchmarks")
# Each headline: (label, the floor's sense and value, or None). Throughput ratios are the service's
# requests/s over the other target's; CPU ratios the service's CPU per create over the bare view's;
# the p99 ratio is the service's over the FastAPI peer's at the one common rate.
HEADLINES = {
    "fastapi": ("service ÷ FastAPI peer, requests/s", (">=", 0.42)),
    "drf": ("service ÷ DRF peer", None),
    "ninja": ("service ÷ django-ninja peer", None),
    "bare": ("service ÷ bare view", None),
    "fastapi+": ("equal work: service ÷ FastAPI peer", (">=", 0.75)),
    "ninja+": ("equal work: service ÷ django-ninja peer", (">=", 1.05)),
    "drf+": ("equal work: service ÷ DRF peer (no uniqueness SELECT)", (">=", 1.3)),
    "cpu": ("CPU per create with PostgreSQL's, ÷ the bare view's", ("<=", 1.8)),
    "cpu_server": ("CPU per create, nginx and app server only, ÷ the bare view's", None),
    "p99": ("p99 at the common rate, ÷ the FastAPI peer's", ("<=", 2.0)),
}


def code_version() -> dict:
    """The commit measured, and a digest of any change to it not yet committed (results aside)."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout if done.returncode == 0 else ""

    excluded = [f":(exclude){path}" for path in RESULT_PATHS]
    changes = git("diff", "HEAD", "--", ".", *excluded) + git(
        "ls-files", "--others", "--exclude-standard", "--", ".", *excluded
    )
    return {
        "commit": git("rev-parse", "HEAD").strip() or "unknown",
        "uncommitted": hashlib.sha256(changes.encode()).hexdigest()[:16] if changes else "",
    }


def save(run: dict, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"make-bench-{run['when'].replace(':', '').replace('-', '')}.json"
    path.write_text(json.dumps(run, indent=1) + "\n")
    return path


def held_runs(folder: Path, latest: dict) -> list[dict]:
    """The newest RUNS_HELD runs in `folder` of the same code, machine and method as `latest` (full runs
    with full runs, smoke runs with smoke runs), oldest first."""
    runs = [json.loads(path.read_text()) for path in sorted(folder.glob("make-bench-*.json"))]
    latest = json.loads(json.dumps(latest))  # as its file has it (a tuple a list)
    same = [
        run
        for run in runs
        if run["code"] == latest["code"] and run["machine"] == latest["machine"] and run["method"] == latest["method"]
    ]
    return sorted(same, key=lambda run: run["when"])[-RUNS_HELD:]


def per_round(run: dict, target: str, key: str) -> list[float]:
    return [figures[key] for figures in run["rounds"][target]]


def cpu_per_create(run: dict, target: str, database: bool = True) -> list[float]:
    """Each round's CPU per create (µs): nginx's and the app server's, with PostgreSQL's if `database`."""
    return [
        (f["cpu_server_s"] + (f["cpu_database_s"] if database else 0)) / f["requests"] * 1e6
        for f in run["rounds"][target]
    ]


def common_point(run: dict, target: str) -> dict:
    return next(point for point in run["open_loop"] if point["target"] == target and point["common"])


def headlines(run: dict) -> dict[str, dict]:
    """Each headline's estimators: {"ratio_of_medians", "median_of_ratios", "min", "max"} (and
    "saturated" for the p99 ratio, whose two points are one each)."""
    found = {
        other: compare(per_round(run, "service", "rps"), per_round(run, other, "rps"))
        for other in ("fastapi", "drf", "ninja", "bare", "fastapi+", "ninja+", "drf+")
    }
    found["cpu"] = compare(cpu_per_create(run, "service"), cpu_per_create(run, "bare"))
    found["cpu_server"] = compare(cpu_per_create(run, "service", False), cpu_per_create(run, "bare", False))
    service, peer = common_point(run, "service"), common_point(run, "fastapi")
    ratio = service["p99_ms"] / peer["p99_ms"]
    found["p99"] = {
        "ratio_of_medians": ratio,
        "median_of_ratios": ratio,
        "min": ratio,
        "max": ratio,
        "saturated": service["saturated"] or peer["saturated"],
    }
    return found


def meets(value: float, floor: tuple | None) -> bool | None:
    if floor is None:
        return None
    sense, bound = floor
    return value >= bound if sense == ">=" else value <= bound


def floor_text(floor: tuple | None) -> str:
    return "" if floor is None else f"{'≥' if floor[0] == '>=' else '≤'} {floor[1]:g}"


def runs_table(runs: list[dict]) -> list[str]:
    """The held runs' headlines side by side (ratio of medians, per-round range), the median of the
    runs against each floor, and the other estimator's median of the runs beside it."""
    found = [headlines(run) for run in runs]
    lines = [
        "| headline (ratio of medians; per-round min–max) | floor | "
        + " | ".join(f"run {n} ({run['when'][11:16]} UTC)" for n, run in enumerate(runs, 1))
        + f" | median of the {len(runs)} | median of per-round ratios (median of the runs) |",
        "|---|---|" + "---:|" * len(runs) + "---|---:|",
    ]
    for key, (label, floor) in HEADLINES.items():
        cells = []
        for figures in found:
            value = figures[key]
            spread = f" ({value['min']:.2f}–{value['max']:.2f})" if value["min"] != value["max"] else ""
            cells.append(f"{value['ratio_of_medians']:.2f}{spread}{' saturated' if value.get('saturated') else ''}")
        median = statistics.median(figures[key]["ratio_of_medians"] for figures in found)
        held = meets(median, floor)
        verdict = "" if held is None else (" **met**" if held else " **NOT met**")
        other = statistics.median(figures[key]["median_of_ratios"] for figures in found)
        lines.append(f"| {label} | {floor_text(floor)} | {' | '.join(cells)} | {median:.2f}{verdict} | {other:.2f} |")
    return lines
