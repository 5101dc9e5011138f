"""`make test-contract`: fuzz the live service with schemathesis, using the schema it publishes.

Serves the production path (debug off, gunicorn, started by tests.live.LiveGunicorn as the tests
start it) on a free loopback port, with DATABASE_URL if set (e.g. under scripts/with-postgres),
else a throwaway SQLite file; issues a token; runs every schemathesis check on positive and
negative data, none excluded. Exits non-zero on any failure, with the server's log.
"""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.live import ROOT, LiveGunicorn  # noqa: E402

SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"


def manage(server: LiveGunicorn, *args: str) -> str:
    # The server's settings, but not its metrics folder: gunicorn makes that when it starts.
    env = {name: value for name, value in server.env.items() if name != "PROMETHEUS_MULTIPROC_DIR"}
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True, text=True
    ).stdout


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="plantstore-contract.") as work:
        work = Path(work)
        server = LiveGunicorn(
            work,
            DATABASE_URL=os.environ.get("DATABASE_URL") or f"sqlite:///{work / 'db.sqlite3'}",
            DJANGO_STATIC_ROOT=str(work / "static"),
            # Throttling on, as in production, so every answer's RateLimit headers are checked
            # against the schema; at a rate the fuzzer never reaches, in a store of this run's own.
            PLANTS_THROTTLE_RATE="1000000/hour",
            PLANTS_THROTTLE_DIR=str(work / "rate-limits"),
        )
        manage(server, "migrate", "--no-input", "-v", "0")
        manage(server, "collectstatic", "--no-input", "-v", "0")
        token = manage(server, "token", "issue", "schemathesis").strip()
        server.start()
        try:
            command = [str(SCHEMATHESIS), "run", f"{server.url}/openapi.json"]
            command += ["--header", f"Authorization: Bearer {token}", "--checks", "all", "--mode", "all"]
            command += ["--max-examples", os.environ.get("SCHEMATHESIS_EXAMPLES", "300")]
            command += ["--generation-database", "none", "--no-color"]
            hooks = {"PYTHONPATH": str(ROOT), "SCHEMATHESIS_HOOKS": "tests.schemathesis_hooks"}
            status = subprocess.run(command, cwd=ROOT, env={**os.environ, **hooks}).returncode
        finally:
            server.stop()
        if status:
            failures = [line for line in server.log().splitlines() if '"status": 2' not in line]
            sys.stderr.write("contract-test: schemathesis failed; the server's log follows\n")
            sys.stderr.write("\n".join(failures[-50:]) + "\n")
        return status


if __name__ == "__main__":
    sys.exit(main())
