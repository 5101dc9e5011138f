"""A chaos run's history: every request and every fault with its times (wall clock, seconds), one JSON object a line.

    {"type": "request", "client": "c1", "id": 3000001, "body": {...}, "attempt": 1, "sent": 1764640000.1,
     "answered": 1764640000.2, "status": 200, "answer": {...}, "counted": true}
    {"type": "fault", "kind": "primary-killed", "target": "node1", "started": ..., "healed": ..., "note": ""}
    {"type": "run", "seed": ..., "schedule": [...], ...}
    {"type": "converged", "healed": ..., "converged": ... (null: not within the bound), "state": {...}}

A request not answered has status null and its error in "answer"; "counted" says whether its answer
carried the RateLimit headers (a request the rate limit counted).
"""

import json
import threading
from pathlib import Path


class History:
    """The records of one run, in memory and appended to `path` as they come."""

    def __init__(self, path: Path | None = None):
        self.records: list[dict] = []
        self.lock = threading.Lock()
        self.file = path.open("a") if path else None

    def add(self, record: dict) -> dict:
        with self.lock:
            self.records.append(record)
            if self.file:
                self.file.write(json.dumps(record) + "\n")
                self.file.flush()
        return record

    def of_type(self, kind: str) -> list[dict]:
        with self.lock:
            return [record for record in self.records if record["type"] == kind]

    def close(self) -> None:
        if self.file:
            self.file.close()


def read_history(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
