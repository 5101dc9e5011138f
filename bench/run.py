"""`make bench`: load POST /plants and the bare baseline view in one gunicorn, and report.

Run under scripts/with-postgres (DATABASE_URL set, pg_stat_statements loaded). Rounds alternate
the service and the bare view so both meet the same machine state; the figures and the machine's
description are printed and written to BENCHMARKS.md.
"""

import json
import os
import platform
import runpy
import secrets
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from bench import rate_stores
from tests.live import ROOT, LiveGunicorn

ROUNDS = int(os.environ.get("BENCH_ROUNDS", 7))
SECONDS = int(os.environ.get("BENCH_SECONDS", 8))
CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", 16))
WRK_THREADS = 2
TARGETS = {"service": "/plants", "bare": "/bench/bare-plants"}
# Each wrk run takes its own block of ids (bench/create.lua adds 10**9 per wrk thread), so no two
# requests of a benchmark share an id; blocks stay far below 2**53, where Lua's doubles stop
# counting exactly.
ID_BLOCK = 10**11

# From profiling one create at a time in-process (cProfile, pyinstrument, CPU time per stage).
PROFILE_NOTES = """## Where the service's extra time goes

Profiled in-process on PostgreSQL (CPU time per request; the bare view takes about 0.5 ms):

| Part of an authenticated create | Before | Now | What changed |
|---|---|---|---|
| Token lookup | a SELECT round trip (~0.30 ms) | ~0.01 ms on a warm connection | each connection keeps the tokens it read and is told of every change by PostgreSQL's LISTEN/NOTIFY (`plants/token_cache.py`); the SELECT, when needed, is compiled once (`ApiTokenQuerySet.by_digest`) |
| Connection health check | a `SELECT 1` round trip | a socket poll | `plants/postgresql/base.py`: stale connections still replaced before use |
| The INSERT | parsed and planned on every request | prepared once per connection | server-side binding, `prepare_threshold=5` (`DJANGO_DB_PREPARED_STATEMENTS`) |
| NewPlant validation | ~0.11 ms | ~0.07 ms | shallow copies of the flat fields instead of DRF's deep copy |
| Throttle | 2 cache operations, in each worker's own memory | 1 upsert in a SQLite file all workers share (~20 µs) | one atomic increment per request, exact across workers (see Rate-limit stores) |
| Content negotiation | DRF's media-type matching | one string comparison | `plants/negotiation.py` |
| Plant answer | a serializer instance | a function | `plant_representation` |

The token lookup was the largest part of the gap: a second round trip, through Django's cursor,
psycopg and PostgreSQL, costing as much as the INSERT. The cache removes it without delaying
revocations: the change trigger's notification reaches every connection as the change commits,
and a connection reads its notifications (one non-blocking read) before trusting its cache.
What remains is DRF's per-field validation (~0.08 ms), reading the body (~0.03 ms),
authentication's own work (~0.04 ms: the header, the SHA-256, the expiry check), the throttle's
increment (~0.02 ms) and DRF's request and response wrapping. Trimming middleware would not
help the ratio: both views run through the same stack.

Rounds vary because of where wrk's keep-alive connections land: gthread workers accept them as
they wake, and now and then one worker takes them all and serves them on one core, which halves
that round's throughput, for either view. The ratio is the median of the rounds' ratios, so such
a round does not decide it.
"""


def manage(*args: str, env: dict) -> str:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True, text=True
    ).stdout


def psql(sql: str) -> str:
    code = (
        "import django, sys; django.setup(); from django.db import connection\n"
        "with connection.cursor() as c:\n"
        "    c.execute(sys.argv[1]); print(c.fetchone()[0] if c.description else '')"
    )
    return subprocess.run(
        [sys.executable, "-c", code, sql], cwd=ROOT, env=ENV, check=True, capture_output=True, text=True
    ).stdout.strip()


ENV = {
    **os.environ,
    "DJANGO_SETTINGS_MODULE": "bench.settings",
    "DJANGO_DEBUG": "0",
    "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
    "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
    # Throttling stays on, at a rate the load never reaches, so its cost is measured: in the
    # default store, a SQLite file shared by the workers (plants/rate_stores.py).
    "PLANTS_THROTTLE_RATE": "100000000/second",
    "GUNICORN_ACCESS_LOG": "/dev/null",
    # No worker recycling: a worker's restart would charge one round with its boot.
    "GUNICORN_MAX_REQUESTS": "0",
}


# Workers and threads as gunicorn.conf.py sets them on this machine (LiveGunicorn's are the tests').
_conf = runpy.run_path(str(ROOT / "gunicorn.conf.py"))
GUNICORN = {"GUNICORN_WORKERS": str(_conf["workers"]), "GUNICORN_THREADS": str(_conf["threads"])}


def start_server() -> LiveGunicorn:
    # The request log stays on, as in production; it goes to a file, as it would to journald.
    log_dir = Path(os.environ.get("TMPDIR", "/tmp"))
    server = LiveGunicorn(log_dir, app="bench.wsgi", **{**ENV, **GUNICORN, "GUNICORN_LOG_LEVEL": "warning"})
    print(f"gunicorn log: {server.log_path}", flush=True)
    return server.start()


def worker_peak_rss_mib(server: LiveGunicorn) -> float:
    peaks = []
    for pid in server.worker_pids():
        status = Path(f"/proc/{pid}/status").read_text()
        peaks.append(int(next(line for line in status.splitlines() if line.startswith("VmHWM")).split()[1]))
    return max(peaks) / 1024


def wrk(url: str, token: str, id_base: int, seconds: int) -> dict:
    result = subprocess.run(
        ["wrk", f"-t{WRK_THREADS}", f"-c{CONNECTIONS}", f"-d{seconds}s", "-s", "bench/create.lua", url],
        cwd=ROOT,
        env={**os.environ, "BENCH_TOKEN": token, "BENCH_ID_BASE": str(id_base)},
        check=True,
        capture_output=True,
        text=True,
    )
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    figures["rps"] = figures["requests"] / (figures["duration_us"] / 1e6)
    return figures


def statements_since_reset() -> int:
    return int(
        psql(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
            "WHERE d.datname = current_database() AND s.query NOT ILIKE '%pg_stat_statements%'"
        )
    )


def machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        platform.processor(),
    )
    memory_kib = int(Path("/proc/meminfo").read_text().split()[1])
    return (
        f"{os.cpu_count()} cores ({cpu}), {memory_kib / 1024 / 1024:.0f} GiB, Linux {platform.release()}, "
        f"Python {platform.python_version()}, PostgreSQL {psql('SHOW server_version')}"
    )


def main() -> None:
    if "DATABASE_URL" not in os.environ:
        raise SystemExit("bench: run under scripts/with-postgres (make bench)")
    manage("migrate", "--no-input", env=ENV)
    psql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    token = manage("token", "issue", "bench", env=ENV).strip()
    server = start_server()
    rounds = {name: [] for name in TARGETS}
    try:
        id_base = 0
        for path in TARGETS.values():  # warm-up: imports, connections, caches
            wrk(f"{server.url}{path}", token, id_base := id_base + ID_BLOCK, 3)
        for round_number in range(ROUNDS):
            # Alternate which goes first, so neither always meets the fuller table or warmer caches.
            order = list(TARGETS.items()) if round_number % 2 == 0 else list(TARGETS.items())[::-1]
            for name, path in order:
                psql("SELECT pg_stat_statements_reset()")
                figures = wrk(f"{server.url}{path}", token, id_base := id_base + ID_BLOCK, SECONDS)
                figures["statements"] = statements_since_reset()
                rounds[name].append(figures)
                print(f"round {round_number + 1} {name:8} {figures['rps']:8.0f} req/s", flush=True)
        peak_rss = worker_peak_rss_mib(server)
    finally:
        server.stop()
    report(rounds, peak_rss)


def summarize(figures: list[dict]) -> dict:
    requests = sum(f["requests"] for f in figures)
    return {
        "rps": statistics.median(f["rps"] for f in figures),
        "p50_ms": statistics.median(f["p50_us"] for f in figures) / 1000,
        "p99_ms": statistics.median(f["p99_us"] for f in figures) / 1000,
        "non_2xx": sum(f["non_2xx"] for f in figures),
        "socket_errors": sum(f["socket_errors"] for f in figures),
        "statements": sum(f["statements"] for f in figures) / requests,
    }


def report(rounds: dict, peak_rss: float) -> None:
    service, bare = summarize(rounds["service"]), summarize(rounds["bare"])
    # The ratio of each round's pair, then the median: the machine's drift between rounds cancels.
    ratio = statistics.median(s["rps"] / b["rps"] for s, b in zip(rounds["service"], rounds["bare"], strict=True))
    rows = [
        "| | service `POST /plants` | bare view |",
        "|---|---|---|",
        f"| requests/s (median of {ROUNDS} rounds) | {service['rps']:.0f} | {bare['rps']:.0f} |",
        f"| latency p50 | {service['p50_ms']:.2f} ms | {bare['p50_ms']:.2f} ms |",
        f"| latency p99 | {service['p99_ms']:.2f} ms | {bare['p99_ms']:.2f} ms |",
        f"| non-2xx answers | {service['non_2xx']} | {bare['non_2xx']} |",
        f"| socket errors | {service['socket_errors']} | {bare['socket_errors']} |",
        f"| SQL statements per create | {service['statements']:.2f} | {bare['statements']:.2f} |",
    ]
    summary = [
        f"**Throughput ratio service / bare: {ratio:.2f}** (median of the rounds' ratios; target ≥ 0.70).",
        f"**SQL statements per authenticated create: {service['statements']:.2f}** (target ≤ 2), counted by "
        "PostgreSQL's pg_stat_statements, transaction statements included: the INSERT, as each connection "
        "looks the token up once and then keeps it (README, Tokens).",
        f"Peak memory (VmHWM) of the largest gunicorn worker: {peak_rss:.0f} MiB.",
    ]
    print("\n".join(rows + [""] + summary))
    document = [
        "# Benchmarks",
        "",
        "Written by `make bench` (`bench/run.py`); rerun it to refresh this file.",
        "",
        f"- When: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        f"- Machine: {machine()}",
        f"- Server: gunicorn, `gunicorn.conf.py` ({_conf['workers']} workers × {_conf['threads']} threads, gthread; "
        "worker recycling off), debug off, `bench.settings` (production settings plus the bare view's URL)",
        "- Database: a throwaway PostgreSQL on 127.0.0.1 (TCP), fsync off, pg_stat_statements loaded",
        f"- Load: `wrk -t{WRK_THREADS} -c{CONNECTIONS} -d{SECONDS}s -s bench/create.lua`, on the same machine; "
        f"{ROUNDS} rounds, each running the service and the bare view (alternating which goes first), "
        "after a warm-up of both",
        "- Each request creates a new plant (unique ids); the service's requests carry a real bearer token.",
        "- The bare view: `json.loads`, `Plant.objects.create`, `JsonResponse`, through the same middleware; "
        "no authentication, validation, throttling or error handling.",
        "",
        *rows,
        "",
        *summary,
        "",
        PROFILE_NOTES,
    ]
    (ROOT / "BENCHMARKS.md").write_text("\n".join(document))
    rate_stores.main()  # its own section: the throttle's store, measured on its own
    if bare["non_2xx"] or bare["socket_errors"]:
        # A baseline that failed requests did less work than a real create: the ratio means nothing.
        raise SystemExit("bench: the bare view answered errors; see the gunicorn log, then rerun")


if __name__ == "__main__":
    main()
