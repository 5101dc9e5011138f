"""The unit's health probe: a GET through nginx on the unit's own address, with a Host Django allows.

DJANGO_ALLOWED_HOSTS may name only a public host name that does not resolve here, and Django answers
any other Host with a 400: so every probe names the first allowed host (docs/decisions/health-probes.md).

    python -m deploy.probe [/healthz]    # exit 0 when the path answers 200 (the image's HEALTHCHECK: /livez)
    python -m deploy.probe --socket SOCKET --wait PID /livez    # the app server's own, on its socket
    python -m deploy.probe --header X-Upstream /_edge/upstream  # and print the 200's header (the release's)

--wait PID probes until the path answers 200 (exit 0) or process PID has gone or 90 s have passed
(exit 1): the systemd units' ExecStartPost=, so `systemctl start` returns once the unit serves, and
fails as soon as its server exits (systemd waits for ExecStartPost= even then).
"""

import argparse
import os
import sys
import time
from pathlib import Path

from deploy.processes import http_answer, with_env_file


def probe_host(allowed_hosts: str) -> str:
    """The first name DJANGO_ALLOWED_HOSTS allows ("localhost" for "*" or an empty list; ".a.b": a.b)."""
    first = next((name.strip() for name in allowed_hosts.split(",") if name.strip()), "localhost")
    return "localhost" if first == "*" else first.lstrip(".")


WAIT_S = 90


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: it runs
        pass
    return True


def main(argv: list[str]) -> int:
    from deploy.unit import listen_address, local_url

    parser = argparse.ArgumentParser(prog="python -m deploy.probe")
    parser.add_argument("path", nargs="?", default="/healthz")
    parser.add_argument("--socket", type=Path, help="the app server's unix socket, not nginx's address")
    parser.add_argument("--wait", type=int, metavar="PID", help="probe until 200 while PID runs")
    parser.add_argument("--header", help="print this header of the 200 (empty when it has none)")
    args = parser.parse_args(argv)
    try:
        env = with_env_file(os.environ)
        where = local_url(listen_address(env))  # where the unit listens, as deploy/serve.py says
    except RuntimeError as error:  # a settings file it cannot read as written, an address without a port
        sys.stderr.write(f"probe: {error}\n")
        return 1
    url, host = f"{where}{args.path}", probe_host(env.get("DJANGO_ALLOWED_HOSTS", ""))
    deadline = time.monotonic() + WAIT_S
    while (status := (reply := http_answer(url, timeout=5, unix_socket=args.socket, host=host))[0]) != 200:
        if args.wait is None:
            return 1
        if not running(args.wait) or time.monotonic() > deadline:
            where = args.socket or where
            answer = f"answered {status}" if status else "no answer"
            ended = "its server ran on" if running(args.wait) else "its server exited"
            sys.stderr.write(f"probe: {args.path} on {where}: {answer} ({ended})\n")
            return 1
        time.sleep(0.1)
    if args.header:
        sys.stdout.write(f"{reply[1].get(args.header, '')}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
