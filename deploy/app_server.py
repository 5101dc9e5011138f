"""The app server of every unit: Granian (WSGI) on the unit's unix socket (docs/decisions/app-server.md).

One process per core, APP_THREADS threads each to wait out database round trips; SIGTERM finishes
the requests in flight, then exits; a worker that dies is started again.
"""

import math
import os

from deploy.processes import BIN
from plants.timeouts import DEFAULT_DATABASE_TIMEOUT_S, QUEUE_PATIENCE_OF_BOUND, REDIS_TIMEOUT_S

# Every setting and its default; the unit's environment may set each.
SETTINGS = {"APP_PROCESSES": str(os.cpu_count() or 1), "APP_THREADS": "4"}
# nginx always sets X-Forwarded-Proto (a trusted proxy's, else its own scheme) and only nginx reaches
# the socket, so Django believes it (Granian itself says "http", the socket's).
APP_ENVIRONMENT = {"DJANGO_SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO"}
# An idle kept-alive connection is closed after this (Granian's header read timeout): above nginx's
# upstream idle timeout (deploy/unit.py: UPSTREAM_IDLE_S), so nginx closes first.
KEEP_ALIVE_IDLE_S = 30
# Connections a worker serves at once: well above the idle ones nginx keeps (nginx.conf: `keepalive`),
# or a worker would stop taking nginx's new connections (tests/test_upstream_keepalive.py).
BACKPRESSURE = 128
# nginx's wait for the app's answer (proxy_read_timeout), then its own 503: the app must answer first.
NGINX_READ_TIMEOUT_S = 30
# A stopped worker's time to finish its requests: above nginx's wait, under systemd's TimeoutStopSec.
WORKER_STOP_S = 35


def setting(env: dict, name: str, default: str | None = None) -> int:
    """A whole-number setting of `env`: RuntimeError naming it otherwise (a reload refused, the
    running version serving on; at a start, the start refused)."""
    value = env.get(name) or default or SETTINGS[name]
    try:
        return int(value)
    except ValueError:
        raise RuntimeError(f"{name} must be a whole number, not {value!r}") from None


def longest_answer_s(bound: int) -> int:
    """The longest a request can take from nginx to its answer with the database bound `bound`
    (plants/timeouts.py): its wait for a thread (half the bound), then its wait on the database (the
    bound) and on a silent Redis (a connect and an answer, when the limits fail open), whole seconds up."""
    return math.ceil((1 + QUEUE_PATIENCE_OF_BOUND) * bound + 2 * REDIS_TIMEOUT_S)


def check_database_timeout(env: dict) -> None:
    """A database bound whose answers nginx would cut off first is refused for serving."""
    bound = setting(env, "PLANTS_DATABASE_TIMEOUT_S", str(DEFAULT_DATABASE_TIMEOUT_S))
    if (longest := longest_answer_s(bound)) >= NGINX_READ_TIMEOUT_S:
        largest = max(t for t in range(1, NGINX_READ_TIMEOUT_S) if longest_answer_s(t) < NGINX_READ_TIMEOUT_S)
        raise RuntimeError(
            f"PLANTS_DATABASE_TIMEOUT_S is {bound}: a request could take {longest} s, and nginx answers 503 "
            f"after {NGINX_READ_TIMEOUT_S} s while the app may still store it; at most {largest} to serve "
            "(a one-off command may have more)"
        )


def granian_command(env: dict, socket_mode: str = "0o600") -> list[str]:
    """Granian (from the venv) serving the service on `{socket}` as production runs it: the program
    first, the WSGI application last. The socket is the user's alone (`socket_mode`: the systemd
    slot's is its group's too, nginx's way in). RuntimeError names a setting it cannot serve with."""
    workers, threads = setting(env, "APP_PROCESSES"), setting(env, "APP_THREADS")
    check_database_timeout(env)
    return [
        str(BIN / "granian"),
        *("--interface=wsgi", "--http=1", "--no-ws", "--uds={socket}", f"--uds-permissions={socket_mode}"),
        f"--workers={workers}",
        f"--blocking-threads={threads}",
        f"--backpressure={BACKPRESSURE}",
        f"--http1-header-read-timeout={KEEP_ALIVE_IDLE_S * 1000}",
        "--respawn-failed-workers",
        f"--workers-kill-timeout={WORKER_STOP_S}",
        "--no-access-log",  # the app writes one line per request (plants.requests)
        "plantstore_site.wsgi:application",
    ]


if __name__ == "__main__":
    # The systemd install's slot (deploy/systemd/plantstore-app@.service): Granian itself, in this
    # process's place, on the socket given, with the unit's settings and APP_ENVIRONMENT beneath them.
    import sys

    try:
        command = [part.format(socket=sys.argv[1]) for part in granian_command(os.environ, socket_mode="0o660")]
    except RuntimeError as error:
        raise SystemExit(str(error)) from None
    os.execve(command[0], command, {**APP_ENVIRONMENT, **os.environ})
