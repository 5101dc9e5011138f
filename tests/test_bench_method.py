"""make bench's method, as a reader of BENCHMARKS.md relies on it: an open-loop point is called saturated
when it is, every estimator is shown, and the floors are judged on the median of the held runs."""

import json
from pathlib import Path

from bench import open_loop, runs


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

    assert runs.compare(service, peer) == {"ratio_of_medians": 0.5, "median_of_ratios": 0.5, "min": 0.25, "max": 0.6}
    assert runs.compare([100, 90, 130], [200, 150, 200]) == {
        "ratio_of_medians": 0.5,
        "median_of_ratios": 0.6,
        "min": 0.5,
        "max": 0.65,
    }


def fake_run(when: str, drf_rate: float, commit: str = "abc", full: bool = True) -> dict:
    """A run's raw figures, as bench/run.py keeps them, with the service at 100 requests/s and 1,000 µs
    of CPU per create in every round, the bare view at 600 µs, and the equal-work DRF peer at `drf_rate`."""
    names = ("service", "bare", "fastapi", "drf", "ninja", "fastapi+", "drf+", "ninja+")
    rates = {name: 100.0 for name in names} | {"drf+": drf_rate}
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
        fake_run("2026-11-27T10:00Z", 100 / 1.25),  # equal work ÷ DRF 1.25
        fake_run("2026-11-27T11:00Z", 100 / 1.5),  # 1.50
        fake_run("2026-11-27T12:00Z", 100 / 1.35),  # 1.35
        fake_run("2026-11-27T13:00Z", 100 / 1.1),  # 1.10: the newest
    ]
    others = [fake_run("2026-11-27T14:00Z", 100.0, commit="def"), fake_run("2026-11-27T15:00Z", 100.0, full=False)]
    for number, run in enumerate(kept + others):
        (tmp_path / f"make-bench-{number}.json").write_text(json.dumps(run))

    held = runs.held_runs(tmp_path, kept[-1])
    table = runs.runs_table(held)

    assert [run["when"] for run in held] == ["2026-11-27T11:00Z", "2026-11-27T12:00Z", "2026-11-27T13:00Z"]
    drf = next(line for line in table if line.startswith("| equal work: service ÷ DRF peer"))
    assert drf.split(" | ")[1:6] == ["floor ≥ 1.3", "1.50", "1.35", "1.10", "1.35 **met**"]
    cpu = next(line for line in table if line.startswith("| CPU per create with PostgreSQL"))
    assert cpu.split(" | ")[1:6] == ["aim ≤ 2", "1.67", "1.67", "1.67", "1.67 **met**"]
    assert [run["when"] for run in runs.held_runs(tmp_path, others[0])] == ["2026-11-27T14:00Z"]
    alone = runs.runs_table(runs.held_runs(tmp_path, others[1]))
    assert next(line for line in alone if line.startswith("| equal work: service ÷ DRF")).split(" | ")[1:4] == [
        "floor ≥ 1.3",
        "1.00",
        "1.00 **NOT met**",
    ]
    ninja = next(line for line in alone if line.startswith("| equal work: service ÷ django-ninja"))
    assert ninja.split(" | ")[1:4] == ["aim ≥ 1", "1.00", "1.00 **met**"]
    fastapi = next(line for line in alone if line.startswith("| service ÷ FastAPI"))
    assert fastapi.split(" | ")[1:4] == ["", "1.00", "1.00"]


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


def test_the_open_loop_order_is_shuffled_per_step_from_the_seed_and_the_same_seed_replays_it():
    from bench.run import COMMON_REQUESTS, COMMON_SHARE, LOAD_SHARES, TARGETS, open_loop_plan

    capacity = dict.fromkeys(TARGETS, 1000.0) | {"service": 600.0}
    plan = open_loop_plan(capacity, seed=7)
    orders = [[name for name, *_ in plan[i : i + len(TARGETS)]] for i in range(0, len(plan), len(TARGETS))]

    assert plan == open_loop_plan(capacity, seed=7)
    assert plan != open_loop_plan(capacity, seed=8)
    assert len({tuple(order) for order in orders}) > 1  # not one order for every step
    assert all(sorted(order) == sorted(TARGETS) for order in orders)
    assert [share for _, _, share, _ in plan[:: len(TARGETS)]] == [*LOAD_SHARES, None]
    common = plan[-len(TARGETS) :]
    assert {(rate, requests) for _, rate, _, requests in common} == {(COMMON_SHARE * 600.0, COMMON_REQUESTS)}
    assert COMMON_SHARE * 600.0 not in {rate for name, rate, share, _ in plan if name == "service" and share}


def test_the_common_rate_point_has_ten_thousand_requests_in_the_method():
    from bench.run import METHOD

    assert METHOD["common_requests"] >= 10_000
    assert open_loop.point_seconds(250, METHOD["common_requests"]) * 250 >= 10_000


def bench_round(requests: int, by_statement: dict) -> dict:
    return {
        "rps": requests / 8,
        "requests": requests,
        "stored": requests,
        "cpu_server_s": requests * 1e-3,
        "cpu_database_s": requests * 2e-4,
        "by_statement": by_statement,
        "statements": sum(by_statement.values()),
    }


def test_asyncpgs_reset_on_release_is_four_statements_in_one_round_trip():
    reset = {"SELECT pg_advisory_unlock_all()": 100, "CLOSE ALL": 100, "UNLISTEN *": 100, "RESET ALL": 100}
    create = {"SELECT id, name FROM plants_apitoken WHERE digest = $1": 100, "INSERT INTO plants_plant": 100}
    run = {"rounds": {"fastapi": [bench_round(100, create | reset)]}}

    assert runs.per_create(run, "fastapi", "statements") == [6.0]
    assert runs.per_create(run, "fastapi", "round_trips") == [3.0]
    assert list(runs.statements_per_create(run, "fastapi").values()) == [1.0] * 6


def test_the_per_target_table_gives_medians_across_the_runs_and_the_common_p99_with_its_min_max():
    from bench.run import TARGETS, target_rows

    def bench_run(requests: int, common_p99: float) -> dict:
        rounds = {name: [bench_round(requests, {"INSERT": requests})] * 3 for name in TARGETS}
        points = [
            {"target": name, "share": share, "offered": 100, "p50_ms": 4.0, "p99_ms": p99, "saturated": False}
            for name in TARGETS
            for share, p99 in ((0.5, 10.0), (0.8, 20.0), (None, common_p99))
        ]
        return {"rounds": rounds, "open_loop": points}

    rows = target_rows([bench_run(800, 30.0), bench_run(1600, 90.0), bench_run(1200, 40.0)])
    service = rows[2].split(" | ")

    assert service[1:5] == ["150 (100–200)", "100/s: 4 / 10 ms", "100/s: 4 / 20 ms", "100/s: 4 / 40 (30–90) ms"]
    assert service[5:] == ["1,000 + 200 = 1,200", "1.00 / 1.00 |"]


def test_bench_code_stays_within_2200_lines_of_python_and_javascript():
    bench = Path(__file__).resolve().parent.parent / "bench"
    files = [path for pattern in ("*.py", "*.js") for path in bench.rglob(pattern)]

    assert sum(len(path.read_text().splitlines()) for path in files) <= 2200


def test_every_django_target_prepares_its_statements_whatever_the_env_example_has():
    from bench.run import ENV, peer_settings

    assert ENV["DJANGO_DB_PREPARED_STATEMENTS"] == "1"  # the service and the bare view
    assert [peer_settings(name)["DJANGO_DB_PREPARED_STATEMENTS"] for name in ("drf", "ninja")] == ["1", "1"]
    assert set(peer_settings("fastapi")) == {"DATABASE_URL", "APP_PROCESSES", "APP_THREADS"}  # asyncpg prepares its own
