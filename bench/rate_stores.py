"""The rate-limit stores' cost per request: one increment, alone and from several processes at once.

`python -m bench.rate_stores` (or `make bench`) measures the counters file and a throwaway
redis-server on this machine and writes the "Rate-limit stores" section of BENCHMARKS.md.
"""

import os
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

from bench.report import write_section
from deploy.cluster import Redis
from plants.rate_stores import CountersFileStore, RedisStore

OPERATIONS = int(os.environ.get("BENCH_STORE_OPERATIONS", 20000))
PROCESSES = int(os.environ.get("BENCH_STORE_PROCESSES", 5))  # gunicorn.conf.py's workers on 2 cores
WINDOW = 60
HEADING = "## Rate-limit stores"


def make_store(kind: str, where: str):
    return RedisStore(where) if kind == "redis" else CountersFileStore(where)


def timed_increments(kind: str, where: str, token_key: str, count: int) -> list[float]:
    """The latency of each of `count` increments, in microseconds (the first, which opens, left out)."""
    store = make_store(kind, where)
    window_start = int(time.time() // WINDOW) * WINDOW
    store.increment(token_key, window_start, WINDOW)
    latencies = []
    for _ in range(count):
        started = time.perf_counter()
        store.increment(token_key, window_start, WINDOW)
        latencies.append((time.perf_counter() - started) * 1e6)
    return latencies


def measure(kind: str, where: str) -> dict:
    alone = timed_increments(kind, where, "alone", OPERATIONS)
    with ProcessPoolExecutor(PROCESSES) as pool:
        # Every process counts the same token: all of them write one row (or key), the worst case.
        started = time.perf_counter()
        arguments = ([kind] * PROCESSES, [where] * PROCESSES, ["shared"] * PROCESSES, [OPERATIONS] * PROCESSES)
        runs = list(pool.map(timed_increments, *arguments))
        elapsed = time.perf_counter() - started
    together = sorted(latency for run in runs for latency in run)
    return {
        "alone_p50": statistics.median(alone),
        "alone_p99": sorted(alone)[int(len(alone) * 0.99)],
        "together_p50": statistics.median(together),
        "together_p99": together[int(len(together) * 0.99)],
        "together_per_second": len(together) / elapsed,
    }


def section(results: dict[str, dict]) -> str:
    rows = [
        ("one process: latency p50", "alone_p50", "{:.0f} µs"),
        ("one process: latency p99", "alone_p99", "{:.0f} µs"),
        (f"{PROCESSES} processes, one token: latency p50", "together_p50", "{:.0f} µs"),
        (f"{PROCESSES} processes, one token: latency p99", "together_p99", "{:.0f} µs"),
        (f"{PROCESSES} processes, one token: increments/s", "together_per_second", "{:.0f}"),
    ]
    table = "\n".join(
        f"| {label} | {fmt.format(results['file'][key])} | {fmt.format(results['redis'][key])} |"
        for label, key, fmt in rows
    )
    return f"""{HEADING}

Written by `python -m bench.rate_stores` (also run by `make bench`), {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, on
the machine above. Each request the throttle counts costs one `increment` of its store
(`plants/rate_stores.py`): the counters file's locked add to a slot in shared memory, or Redis's
`MULTI INCR EXPIRE NX EXEC` over loopback TCP to a local `redis-server`. {OPERATIONS} increments per
process, timed one by one, after one that opens the connection.

| | counters file (default) | Redis |
|---|---|---|
{table}

The default store is the counters file: it needs no server, is exact across the workers of one
server, and costs a fraction of the round trip to even a local Redis. (The SQLite file it replaced
in issue 21 took 14 µs at p50 alone and 56 µs at p99 with 5 processes on one token.) Redis is for
several servers sharing one limit, and adds its network round trip (more on a real network).
"""


def main() -> str:
    redis = Redis().start()
    try:
        with tempfile.TemporaryDirectory() as directory:
            results = {
                "file": measure("file", str(Path(directory) / "store")),
                "redis": measure("redis", redis.url),
            }
    finally:
        redis.stop()
    text = section(results)
    write_section("bench.rate_stores", text)
    print(text)
    return text


if __name__ == "__main__":
    main()
