"""`make soak`: the service as `make serve` runs it under k6's open loop (bench/open_loop.py) at SOAK_RATE
creates a second (200, about half this machine's capacity) for SOAK_MINUTES (20), sampled each minute: each
worker's resident memory and open files, the database's connections, the minute's p50, p99 and failures. After a
first minute of warm-up they must stay flat within the bounds below, or it exits 1. Run under
scripts/with-postgres (PostgreSQL as production runs it); prints the table and writes its section of BENCHMARKS.md.
"""

import os
import statistics
import sys
import time

from bench.cpu import status_kib
from bench.open_loop import k6
from bench.run import BENCH_HOST, ENV, ID_BLOCK, LOG_DIR, prepare, psql
from bench.runs import write_section
from bench.servers import unit as bench_unit

MINUTES = int(os.environ.get("SOAK_MINUTES", 20))
RATE = float(os.environ.get("SOAK_RATE", 200))
# Flat means, from the first sample after the warm-up minute to the last:
RSS_GROWTH_MIB = 16  # each worker's resident memory grows by at most this
OPEN_FILES_GROWTH = 4  # each worker's open files grow by at most this
P99_GROWTH = 2.0  # the last minutes' median p99 is at most this times the first minutes'
CONNECTIONS = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend' "
    "AND pid <> pg_backend_pid()"
)


def worker_figures(pids: list[int]) -> tuple[list[float], list[int]]:
    """Each worker's resident memory (MiB) and open file descriptors."""
    return [status_kib(pid, "VmRSS") / 1024 for pid in pids], [len(os.listdir(f"/proc/{pid}/fd")) for pid in pids]


def main() -> int:
    token = prepare("soak")
    # The limit stays on, as production runs it, at a rate the load never reaches.
    unit = bench_unit("soak", LOG_DIR, **ENV, DJANGO_SETTINGS_MODULE="plantstore_site.settings").start()
    print(f"soak: {MINUTES} minutes at {RATE:.0f} creates/s; the service's log: {unit.log_path}", flush=True)
    samples = []
    try:
        workers = unit.worker_pids()
        for minute in range(1, MINUTES + 1):
            figures = k6(f"{unit.url}/plants", token, BENCH_HOST, ID_BLOCK * (2000 + minute), RATE, seconds=60)
            rss, files = worker_figures(workers)
            samples.append({
                "minute": minute, **figures, "rss": rss, "files": files, "connections": int(psql(CONNECTIONS)),
            })  # fmt: skip
            print(
                f"minute {minute:2}: {figures['achieved']:.0f}/s, p50 {figures['p50_ms']:.0f} ms, p99 "
                f"{figures['p99_ms']:.0f} ms, {figures['failed']} failed, {figures['dropped']} dropped; RSS {', '.join(f'{r:.0f}' for r in rss)} MiB; open files "
                f"{', '.join(map(str, files))}; {samples[-1]['connections']} database connections",
                flush=True,
            )
        if unit.worker_pids() != workers:
            print("soak: a worker was replaced during the run", file=sys.stderr)
            return 1
    finally:
        unit.stop()
    return report(samples)


def report(samples: list[dict]) -> int:
    steady = samples[1:]  # the first minute warms up: imports, connections, caches
    first, last = steady[0], steady[-1]
    head, tail = steady[: max(1, len(steady) // 4)], steady[-max(1, len(steady) // 4) :]
    checks = {
        "each worker's RSS grows by at most 16 MiB": all(
            b - a <= RSS_GROWTH_MIB for a, b in zip(first["rss"], last["rss"], strict=True)
        ),
        "each worker's open files grow by at most 4": all(
            b - a <= OPEN_FILES_GROWTH for a, b in zip(first["files"], last["files"], strict=True)
        ),
        "database connections do not grow": max(s["connections"] for s in steady) <= first["connections"],
        "the last quarter's median p99 is at most 2 × the first quarter's": statistics.median(s["p99_ms"] for s in tail)
        <= P99_GROWTH * statistics.median(s["p99_ms"] for s in head),
        "no request failed": not any(s["failed"] for s in samples),
        "no request dropped, every minute answered its rate (not saturated)": not any(s["saturated"] for s in samples),
    }
    lines = [
        f"`python -m bench.soak` (`make soak`), {time.strftime('%Y-%m-%d')}: the service as `make serve` runs it "
        f"({ENV['APP_PROCESSES']} processes × {ENV['APP_THREADS']} threads), PostgreSQL as production runs it, "
        f"k6's open loop (constant-arrival-rate) at {RATE:.0f} creates/s for {len(samples)} minutes, sampled at the end of each minute.",
        "",
        "| minute | creates/s | p50 | p99 | failed | RSS per worker | open files per worker | database connections |",
        "|---:|---:|---:|---:|---:|---|---|---:|",
    ]
    for s in samples:
        lines.append(
            f"| {s['minute']} | {s['achieved']:.0f} | {s['p50_ms']:.0f} ms | {s['p99_ms']:.0f} ms | {s['failed']} | "
            f"{', '.join(f'{r:.0f}' for r in s['rss'])} MiB | {', '.join(map(str, s['files']))} | {s['connections']} |"
        )
    lines += ["", "Flat, from minute 2 to the last:"]
    lines += [f"- {check}: **{'yes' if held else 'NO'}**" for check, held in checks.items()]
    text = "\n".join(lines)
    print(text)
    write_section("make soak", text)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
