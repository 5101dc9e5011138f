"""The peers' request log format: each record one JSON object on one line, through Python's logging."""

import json
import logging

# The logger of the peers' one line per request, in their equal-work variants (PEER_EQUAL_WORK=1).
REQUEST_LOGGER = "bench.peers.requests"


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
