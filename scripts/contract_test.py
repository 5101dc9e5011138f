"""`make test-contract` (`python -m scripts.contract_test`): fuzz the live service with schemathesis, using the schema it publishes.

Serves the production path (debug off, a production unit: deploy/unit.py, nginx then the app
server) on a free loopback port, with DATABASE_URL if set (e.g. under scripts/with-postgres),
else a throwaway SQLite file; issues a token; runs every schemathesis check on positive and
negative data, none excluded (their settings in tests/schemathesis.toml; SCHEMATHESIS_ARGS adds
options, e.g. `--seed N` to replay a failed run). Exits non-zero on any failure, with the server's log.
"""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from deploy.processes import ROOT
from localcluster.processes import LocalUnit, free_port

SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
PUBLIC_HOST = "plants.example.com"
CONFIG = ROOT / "tests" / "schemathesis.toml"


def manage(server: LocalUnit, *args: str) -> str:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=server.env, check=True, capture_output=True, text=True
    ).stdout


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="plantstore-contract.") as work:
        work = Path(work)
        port = free_port()
        settings = dict(
            DJANGO_DEBUG="0",
            DJANGO_SECRET_KEY="contract-test-secret-key-" + "x" * 40,
            # The public host name alone, as .env.example has it: the fuzzer names it in its Host.
            DJANGO_ALLOWED_HOSTS=PUBLIC_HOST,
            DATABASE_URL=os.environ.get("DATABASE_URL") or f"sqlite:///{work / 'db.sqlite3'}",
            DJANGO_STATIC_ROOT=str(work / "static"),
            # Throttling on, as in production, so every answer's RateLimit headers are checked
            # against the schema; at a rate the fuzzer never reaches.
            PLANTS_THROTTLE_RATE="1000000/hour",
            # The fuzzer sends many requests without a valid token from one address: the limit on
            # them on, as in production, where it never refuses the valid ones the fuzzer checks.
            PLANTS_ANONYMOUS_THROTTLE_RATE="1000000/hour",
        )
        server = LocalUnit(f"127.0.0.1:{port}", {**os.environ, **settings}, log=work / "unit.log", name="contract")
        manage(server, "migrate", "--no-input", "-v", "0")
        manage(server, "collectstatic", "--no-input", "-v", "0")
        token = manage(server, "token", "issue", "schemathesis").strip()
        server.start()
        try:
            command = [str(SCHEMATHESIS), "--config-file", str(CONFIG), "run", f"{server.url}/openapi.json"]
            command += ["--header", f"Authorization: Bearer {token}", "--header", f"Host: {PUBLIC_HOST}"]
            command += ["--checks", "all", "--mode", "all"]
            command += ["--max-examples", os.environ.get("SCHEMATHESIS_EXAMPLES", "300")]
            command += ["--generation-database", "none", "--no-color"]
            command += os.environ.get("SCHEMATHESIS_ARGS", "").split()
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
