"""make bench's runs: each run's raw figures kept as JSON beside BENCHMARKS.md (benchmarks/), the headline
ratios a run yields with every estimator, the floors they are held to, and the last three runs of one
version of the code side by side, the floors judged on the median of the three; and BENCHMARKS.md's
sections, each benchmark's between markers naming it (write_section).
"""

import hashlib
import json
import statistics
import subprocess
from pathlib import Path

from deploy.processes import ROOT

BENCHMARKS = ROOT / "BENCHMARKS.md"
RUNS_HELD = 3
# What a run's raw file may differ in from the code it measured: the results themselves.
RESULT_PATHS = ("BENCHMARKS.md", "benchmarks")
# Each headline: (label, its bound's sense, value and kind, or None): a floor holds the code back, an aim
# is reported with what it misses by. Throughput ratios are the service's
# requests/s over the other target's; CPU ratios the service's CPU per create over the bare view's;
# p99 ratios the service's over the other target's at the one common rate: over the bare view's (the
# service's own cost, on the same host's tail) against the floor, over the FastAPI peer's beside it.
HEADLINES = {
    "fastapi": ("service ÷ FastAPI peer, requests/s", None),
    "drf": ("service ÷ DRF peer", None),
    "ninja": ("service ÷ django-ninja peer", None),
    "bare": ("service ÷ bare view", None),
    "fastapi+": ("equal work: service ÷ FastAPI peer", None),
    "ninja+": ("equal work: service ÷ django-ninja peer", (">=", 1.0, "aim")),
    "drf+": ("equal work: service ÷ DRF peer (no uniqueness SELECT)", (">=", 1.3, "floor")),
    "cpu": ("CPU per create with PostgreSQL's, ÷ the bare view's", ("<=", 2.0, "aim")),
    "cpu_server": ("CPU per create, nginx and app server only, ÷ the bare view's", None),
    "p99": ("p99 at the common rate, ÷ the bare view's", ("<=", 1.5, "aim")),
    "p99_fastapi": ("p99 at the common rate, ÷ the FastAPI peer's", None),
}
# Statements that ride in another's message, one round trip for all: asyncpg's pool resets a released
# connection with one query of four statements (`SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *;
# RESET ALL`: Connection.get_reset_query()). Every other statement is a round trip of its own (psycopg and
# asyncpg send one at a time; neither pipelines).
RIDERS = ("CLOSE ALL", "UNLISTEN *", "RESET ALL")


def compare(values: list[float], others: list[float]) -> dict:
    """`values` over `others`, round by round: the ratio of medians (each target's typical round) and the
    median of per-round ratios (which cancels the host's drift between rounds but, on a skewed sample,
    can sit on either side of it), never one without the other nor without the per-round range."""
    ratios = [value / other for value, other in zip(values, others, strict=True)]
    return {
        "ratio_of_medians": statistics.median(values) / statistics.median(others),
        "median_of_ratios": statistics.median(ratios),
        "min": min(ratios),
        "max": max(ratios),
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


def per_create(run: dict, target: str, key: str) -> list[float]:
    """Each round's statements ("statements") or round trips ("round_trips") to PostgreSQL per create: per
    plant stored, the requests still in flight when wrk stopped included (wrk does not count them)."""
    figures = run["rounds"][target]
    if key == "round_trips":
        return [(f["statements"] - sum(f["by_statement"].get(q, 0) for q in RIDERS)) / f["stored"] for f in figures]
    return [f[key] / f["stored"] for f in figures]


def statements_per_create(run: dict, target: str) -> dict[str, float]:
    """Each statement's calls per create over the run's rounds, the most frequent first."""
    rounds, calls = run["rounds"][target], {}
    for figures in rounds:
        for query, count in figures["by_statement"].items():
            calls[query] = calls.get(query, 0) + count / sum(f["stored"] for f in rounds)
    return dict(sorted(calls.items(), key=lambda item: -item[1]))


def p99_ratio(run: dict, other: str) -> dict:
    """The service's p99 over `other`'s at the common rate: one point each, a ratio with no spread."""
    service, peer = (next(p for p in run["open_loop"] if p["target"] == t and p["common"]) for t in ("service", other))
    ratio = service["p99_ms"] / peer["p99_ms"]
    return dict.fromkeys(("ratio_of_medians", "median_of_ratios", "min", "max"), ratio) | {
        "saturated": service["saturated"] or peer["saturated"]
    }


def headlines(run: dict) -> dict[str, dict]:
    """Each headline's estimators: {"ratio_of_medians", "median_of_ratios", "min", "max"} (and
    "saturated" for the p99 ratios, whose two points are one each)."""
    found = {
        other: compare(per_round(run, "service", "rps"), per_round(run, other, "rps"))
        for other in ("fastapi", "drf", "ninja", "bare", "fastapi+", "ninja+", "drf+")
    }
    found["cpu"] = compare(cpu_per_create(run, "service"), cpu_per_create(run, "bare"))
    found["cpu_server"] = compare(cpu_per_create(run, "service", False), cpu_per_create(run, "bare", False))
    return found | {"p99": p99_ratio(run, "bare"), "p99_fastapi": p99_ratio(run, "fastapi")}


def meets(value: float, floor: tuple | None) -> bool | None:
    if floor is None:
        return None
    sense, bound, _ = floor
    return value >= bound if sense == ">=" else value <= bound


def floor_text(floor: tuple | None) -> str:
    return "" if floor is None else f"{floor[2]} {'≥' if floor[0] == '>=' else '≤'} {floor[1]:g}"


def runs_table(runs: list[dict]) -> list[str]:
    """The held runs' headlines side by side (ratio of medians, per-round range), the median of the
    runs against each floor, and the other estimator's median of the runs beside it."""
    found = [headlines(run) for run in runs]
    lines = [
        "| headline (ratio of medians; per-round min–max) | floor or aim | "
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
        verdict = "" if held is None else f" **{'met' if held else 'NOT met' if floor[2] == 'floor' else 'missed'}**"
        other = statistics.median(figures[key]["median_of_ratios"] for figures in found)
        lines.append(f"| {label} | {floor_text(floor)} | {' | '.join(cells)} | {median:.2f}{verdict} | {other:.2f} |")
    return lines


def write_section(writer: str, text: str) -> None:
    """Put `text` between `writer`'s markers, keeping everything around them (appended if new)."""
    begin, end = f"<!-- written by {writer}: begin -->", f"<!-- written by {writer}: end -->"
    document = BENCHMARKS.read_text()
    section = f"{begin}\n{text.strip()}\n{end}"
    if begin in document and end in document:
        document = document[: document.index(begin)] + section + document[document.index(end) + len(end) :]
    else:
        document = document.rstrip() + "\n\n" + section + "\n"
    BENCHMARKS.write_text(document)
