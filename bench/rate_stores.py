"""The rate-limit stores' cost per request: one increment, alone and from several processes at once.

`python -m bench.rate_stores` (or `make bench`, under scripts/with-postgres: DATABASE_URL names the
throwaway PostgreSQL) measures `plants.rate_stores.increment` on the database and on a throwaway
redis-server, and writes the "Rate-limit stores" section of BENCHMARKS.md.
"""

import multiprocessing
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime

from bench.report import write_section
from deploy.cluster import Redis

OPERATIONS = int(os.environ.get("BENCH_STORE_OPERATIONS", 5000))
PROCESSES = int(os.environ.get("BENCH_STORE_PROCESSES", 4))  # the app server's 2 processes x 2 on 2 cores
WINDOW = 60
HEADING = "## Rate-limit stores"


def set_up(redis_url: str) -> None:
    """Django with production settings, counting in Redis when `redis_url` is given, else in the database."""
    os.environ.update(DJANGO_SETTINGS_MODULE="plantstore_site.settings", DJANGO_DEBUG="0", REDIS_URL=redis_url)
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-" + "x" * 50)
    import django

    django.setup()


def timed_increments(token_key: str, count: int) -> list[float]:
    """The latency of each of `count` increments, in microseconds (the first, which connects, left out)."""
    from plants.rate_stores import increment

    window_start = int(time.time() // WINDOW) * WINDOW
    increment(token_key, window_start, WINDOW)
    latencies = []
    for _ in range(count):
        started = time.perf_counter()
        increment(token_key, window_start, WINDOW)
        latencies.append((time.perf_counter() - started) * 1e6)
    return latencies


def measure(redis_url: str) -> dict:
    # Fresh interpreters (spawn), each with Django set up for the store and its own connection.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, context, initializer=set_up, initargs=(redis_url,)) as pool:
        alone = pool.submit(timed_increments, "alone", OPERATIONS).result()
    with ProcessPoolExecutor(PROCESSES, context, initializer=set_up, initargs=(redis_url,)) as pool:
        # Every process counts the same token: all of them write one row (or key), the worst case.
        started = time.perf_counter()
        runs = list(pool.map(timed_increments, ["shared"] * PROCESSES, [OPERATIONS] * PROCESSES))
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
        f"| {label} | {fmt.format(results['database'][key])} | {fmt.format(results['redis'][key])} |"
        for label, key, fmt in rows
    )
    return f"""{HEADING}

Written by `python -m bench.rate_stores` (also run by `make bench`), {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, on
the machine above. Each request the throttle counts costs one `plants.rate_stores.increment`: the
database's upsert (one statement on Django's cursor, to the throwaway PostgreSQL over loopback TCP),
or Django's Redis cache (`add`, then `incr`: SET NX EX, EXISTS, INCR) to a local `redis-server`.
{OPERATIONS} increments per process, timed one by one, after one that connects.

| | database (default) | Redis |
|---|---|---|
{table}
"""


def main() -> str:
    redis = Redis().start()
    try:
        from django.core.management import call_command

        set_up("")
        call_command("migrate", "--no-input", verbosity=0)
        from django.db import connections

        connections.close_all()
        results = {"database": measure(""), "redis": measure(redis.url)}
    finally:
        redis.stop()
    text = section(results)
    write_section("bench.rate_stores", text)
    print(text)
    return text


if __name__ == "__main__":
    main()
