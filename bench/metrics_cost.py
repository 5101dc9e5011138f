"""`python -m bench.metrics_cost`: what counting one request costs, in prometheus-client's multiprocess mode."""

import os
import tempfile
import timeit

ROUNDS = 200_000


def per_call(function) -> float:
    """Microseconds per call, less the cost of calling an empty function."""
    empty = min(timeit.repeat(lambda: None, number=ROUNDS, repeat=5))
    return (min(timeit.repeat(function, number=ROUNDS, repeat=5)) - empty) / ROUNDS * 1e6


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = folder  # as under gunicorn; read when metrics is imported
        from plants import metrics

        request = per_call(lambda: metrics.record_request("^plants$", "POST", 200, 0.012))
        outcome = per_call(metrics.CREATE_OUTCOME["created"].inc)
    print(f"per request (counter + histogram): {request:.2f} us")  # noqa: T201
    print(f"per create outcome (one counter):  {outcome:.2f} us")  # noqa: T201


if __name__ == "__main__":
    main()
