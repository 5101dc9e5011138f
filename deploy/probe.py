"""The unit's health probe: a GET through nginx on the unit's own address, with a Host Django allows.

DJANGO_ALLOWED_HOSTS may name only a public host name that does not resolve here, and Django answers
any other Host with a 400: so every probe names the first allowed host (docs/decisions/health-probes.md).

    python -m deploy.probe [/healthz]    # exit 0 when the path answers 200 (the image's HEALTHCHECK: /livez)
"""

import os
import sys

from deploy.processes import http_status, with_env_file


def probe_host(allowed_hosts: str) -> str:
    """The first name DJANGO_ALLOWED_HOSTS allows ("localhost" for "*" or an empty list; ".a.b": a.b)."""
    first = next((name.strip() for name in allowed_hosts.split(",") if name.strip()), "localhost")
    return "localhost" if first == "*" else first.lstrip(".")


if __name__ == "__main__":
    from deploy.unit import listen_address

    env = with_env_file(os.environ)
    path = sys.argv[1] if len(sys.argv) > 1 else "/healthz"
    port = listen_address(env).rpartition(":")[2]  # where the unit listens, as deploy/serve.py says
    host = probe_host(env.get("DJANGO_ALLOWED_HOSTS", ""))
    sys.exit(0 if http_status(f"http://127.0.0.1:{port}{path}", host=host) == 200 else 1)
