"""make bench's method, as a reader of BENCHMARKS.md relies on it: an open-loop point is called saturated
when it is, every estimator is shown, and the floors are judged on the median of the held runs."""

import json

from bench import open_loop, runs
from bench.estimators import compare


def k6_summary(sent: int, in_window: int, dropped: int = 0, failed: int = 0) -> dict:
    """The parts of k6's end-of-test summary the bench reads (bench/create.js: handleSummary)."""
    metrics = {
        "http_reqs": {"values": {"count": sent}},
        "answered_in_window": {"values": {"count": in_window}},
        "http_req_failed": {"values": {"passes": failed, "fails": sent - failed}},
        "iteration_duration": {
            "values": {"med": 4.0, "p(90)": 9.0, "p(99)": 20.0, "p(99.9)": 30.0, "max": 31.0, "avg": 5.0}
        },
    }
    if dropped:  # k6 leaves the metric out when nothing was dropped
        metrics["dropped_iterations"] = {"values": {"count": dropped}}
    return {"metrics": metrics}


def test_an_open_loop_point_is_saturated_when_a_request_was_dropped_or_the_answers_fall_behind():
    kept_up = open_loop.figures(k6_summary(sent=3000, in_window=2995), rate=100, seconds=30)
    dropped = open_loop.figures(k6_summary(sent=2999, in_window=2990, dropped=1), rate=100, seconds=30)
    behind = open_loop.figures(k6_summary(sent=3000, in_window=2930), rate=100, seconds=30)
    failed = open_loop.figures(k6_summary(sent=3000, in_window=2995, failed=7), rate=100, seconds=30)

    assert (kept_up["saturated"], dropped["saturated"], behind["saturated"], failed["saturated"]) == (
        False,
        True,
        True,
        False,
    )
    assert (behind["achieved"], failed["failed"], dropped["dropped"]) == (2930 / 30, 7, 1)
    assert {key: kept_up[key] for key in ("p50_ms", "p99_ms", "p999_ms", "max_ms")} == {
        "p50_ms": 4.0,
        "p99_ms": 20.0,
        "p999_ms": 30.0,
        "max_ms": 31.0,
    }


def test_a_point_sends_at_least_the_methods_requests_and_lasts_at_least_its_seconds():
    assert open_loop.point_seconds(100) * 100 >= open_loop.MIN_REQUESTS
    assert open_loop.point_seconds(10_000) == open_loop.MIN_SECONDS


def test_both_estimators_are_given_with_the_range_of_the_per_round_ratios():
    # Round by round the service's rate over a peer's: 0.5, 0.4, 0.5, 0.6, 0.25.
    service = [100, 80, 110, 120, 50]
    peer = [200, 200, 220, 200, 200]

    assert compare(service, peer) == {"ratio_of_medians": 0.5, "median_of_ratios": 0.5, "min": 0.25, "max": 0.6}
    assert compare([100, 90, 130], [200, 150, 200]) == {
        "ratio_of_medians": 0.5,
        "median_of_ratios": 0.6,
        "min": 0.5,
        "max": 0.65,
    }


def fake_run(when: str, fastapi_rate: float, commit: str = "abc", full: bool = True) -> dict:
    """A run's raw figures, as bench/run.py keeps them, with the service at 100 requests/s and 1,000 µs
    of CPU per create in every round, the bare view at 600 µs, and the FastAPI peer at `fastapi_rate`."""
    names = ("service", "bare", "fastapi", "drf", "ninja", "fastapi+", "drf+", "ninja+")
    rates = {name: 100.0 for name in names} | {"fastapi": fastapi_rate}
    cpu = {name: 0.1 for name in names} | {"bare": 0.06}  # seconds for 100 requests
    rounds = {
        name: [
            {"rps": rates[name], "requests": 100, "cpu_server_s": cpu[name] * 0.75, "cpu_database_s": cpu[name] * 0.25}
        ]
        * 3
        for name in names
    }
    points = [{"target": name, "common": True, "p99_ms": 10.0, "saturated": False} for name in names]
    return {
        "when": when,
        "code": {"commit": commit, "uncommitted": ""},
        "machine": "2 cores",
        "method": {"full": full, "rounds": 3},
        "rounds": rounds,
        "open_loop": points,
    }


def test_the_floors_are_judged_on_the_median_of_the_newest_three_runs_of_the_same_code_and_method(tmp_path):
    kept = [
        fake_run("2026-11-27T10:00Z", 250.0),  # ÷ FastAPI 0.40
        fake_run("2026-11-27T11:00Z", 200.0),  # 0.50
        fake_run("2026-11-27T12:00Z", 100 / 0.43),  # 0.43
        fake_run("2026-11-27T13:00Z", 500.0),  # 0.20: the newest
    ]
    others = [fake_run("2026-11-27T14:00Z", 100.0, commit="def"), fake_run("2026-11-27T15:00Z", 100.0, full=False)]
    for number, run in enumerate(kept + others):
        (tmp_path / f"make-bench-{number}.json").write_text(json.dumps(run))

    held = runs.held_runs(tmp_path, kept[-1])
    table = runs.runs_table(held)

    assert [run["when"] for run in held] == ["2026-11-27T11:00Z", "2026-11-27T12:00Z", "2026-11-27T13:00Z"]
    fastapi = next(line for line in table if line.startswith("| service ÷ FastAPI peer"))
    assert fastapi.split(" | ")[1:6] == ["≥ 0.42", "0.50", "0.43", "0.20", "0.43 **met**"]
    cpu = next(line for line in table if line.startswith("| CPU per create with PostgreSQL"))
    assert cpu.split(" | ")[1:6] == ["≤ 1.8", "1.67", "1.67", "1.67", "1.67 **met**"]
    assert [run["when"] for run in runs.held_runs(tmp_path, others[0])] == ["2026-11-27T14:00Z"]
    alone = runs.runs_table(runs.held_runs(tmp_path, others[1]))
    assert next(line for line in alone if line.startswith("| service ÷ FastAPI")).split(" | ")[1:4] == [
        "≥ 0.42",
        "1.00",
        "1.00 **met**",
    ]


def test_a_target_is_refused_for_errors_in_a_round_or_at_a_point_it_kept_up_with_not_at_an_overload_point():
    from bench.run import TARGETS, targets_with_errors

    def bench_run(non_2xx: int = 0, failed_kept_up: int = 0, failed_saturated: int = 0) -> dict:
        clean = {name: [{"non_2xx": 0, "socket_errors": 0}] for name in TARGETS}
        points = [{"target": name, "failed": 0, "saturated": False} for name in TARGETS] + [
            {"target": name, "failed": 0, "saturated": True} for name in TARGETS
        ]
        rounds = dict(clean, bare=[{"non_2xx": non_2xx, "socket_errors": 0}])
        points += [{"target": "service", "failed": failed_kept_up, "saturated": False}]
        points += [{"target": "drf", "failed": failed_saturated, "saturated": True}]
        return {"rounds": rounds, "open_loop": points}

    assert targets_with_errors(bench_run()) == []
    assert targets_with_errors(bench_run(non_2xx=1)) == ["bare"]
    assert targets_with_errors(bench_run(failed_kept_up=1)) == ["service"]
    assert targets_with_errors(bench_run(failed_saturated=8)) == []
