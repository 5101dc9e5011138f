"""What every peer's equal-work variant (PEER_EQUAL_WORK=1) shares: its log line and its count; Django-free."""

import json
import logging
import os
import re
import time

# The logger of the peers' one line per request.
REQUEST_LOGGER = "bench.peers.requests"
# A client's request id is echoed only if it is short and plain (the service's rule).
SAFE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
# The count's limit, never reached (the count is measured, not a refusal), in a day's window: one row a run.
LIMIT, WINDOW_S = 1_000_000_000, 86_400
# One atomic upsert per request (the service's, plants/rate_stores.py, as an app would first write it) in its
# UNLOGGED table, each peer on keys of its own (`drf:<token id>`): the bench checks each counted all it answered.
COUNT_REQUEST = (
    "INSERT INTO plants_ratelimitcounter (key, window_start, count) VALUES ({key}, {window}, 1) ON CONFLICT (key) "
    "DO UPDATE SET count = CASE WHEN plants_ratelimitcounter.window_start = excluded.window_start "
    "THEN plants_ratelimitcounter.count + 1 ELSE 1 END, window_start = excluded.window_start RETURNING count"
)


def window_start() -> int:
    return int(time.time()) // WINDOW_S * WINDOW_S


def request_id(incoming: str) -> str:
    """The client's X-Request-ID if plain, else a new one."""
    return incoming if SAFE_REQUEST_ID.fullmatch(incoming) else os.urandom(16).hex()


def log_request(method: str, path: str, status: int, started: float, token: str | None, request_id: str) -> None:
    """One line: `{"method", "path", "status", "duration_ms", "token", "request_id"}`, as the service's."""
    duration_ms = round((time.perf_counter() - started) * 1000, 2)
    fields = {"method": method, "path": path, "status": status, "duration_ms": duration_ms, "token": token}
    logging.getLogger(REQUEST_LOGGER).info("request", extra={"fields": fields | {"request_id": request_id}})


class JsonFormatter(logging.Formatter):
    """`{"time", "level", "logger", "message", ...the record's `fields`}` as one line of JSON.

    A request's fields come as logging's `extra={"fields": {...}}`, the way JSON formatters built on
    the standard library take them; json.dumps escapes every line break, so a record is one line.
    """

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **getattr(record, "fields", {}),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line)
