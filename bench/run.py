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

# bench writes only its own section of BENCHMARKS.md; the prose around it is kept as written.
SECTION_BEGIN = "<!-- written by make bench: begin -->"
SECTION_END = "<!-- written by make bench: end -->"


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
    # Throttling stays on, at a rate the load never reaches, so its cost is measured.
    "PLANTS_THROTTLE_RATE": "100000000/second",
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
        "PostgreSQL's pg_stat_statements, transaction statements included: the token lookup and the INSERT "
        "(a revoked token is refused from the next request: README, Tokens).",
        f"Peak memory (VmHWM) of the largest gunicorn worker: {peak_rss:.0f} MiB.",
    ]
    print("\n".join(rows + [""] + summary))
    section = [
        SECTION_BEGIN,
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
        SECTION_END,
    ]
    write_section("\n".join(section))
    if bare["non_2xx"] or bare["socket_errors"]:
        # A baseline that failed requests did less work than a real create: the ratio means nothing.
        raise SystemExit("bench: the bare view answered errors; see the gunicorn log, then rerun")


def write_section(section: str) -> None:
    """Replace make bench's section of BENCHMARKS.md, keeping everything around it."""
    path = ROOT / "BENCHMARKS.md"
    text = path.read_text()
    begin, end = text.index(SECTION_BEGIN), text.index(SECTION_END) + len(SECTION_END)
    path.write_text(text[:begin] + section + text[end:])


if __name__ == "__main__":
    main()
