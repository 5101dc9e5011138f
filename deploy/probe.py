"""The unit's health probe: a GET through nginx on the unit's own address, with a Host Django allows.

Django answers a Host outside DJANGO_ALLOWED_HOSTS with a 400, and that list may name only a public
host name that does not resolve here: so every probe connects to the unit's own address and names
the first allowed host (docs/decisions/health-probes.md).

    python -m deploy.probe [/healthz]    # exit 0 when the path answers 200 (the image's HEALTHCHECK)
"""

import os
import sys

from deploy.processes import http_status


def probe_host(allowed_hosts: str) -> str:
    """A Host that DJANGO_ALLOWED_HOSTS (comma-separated, as settings.py reads it) allows: its first
    name; ".example.com" allows example.com itself, "*" any name; Django's default list's, unset."""
    first = next((name.strip() for name in allowed_hosts.split(",") if name.strip()), "localhost")
    return "localhost" if first == "*" else first.lstrip(".")


def main() -> int:
    path = sys.argv[1] if len(sys.argv) > 1 else "/healthz"
    port = os.environ.get("PLANTS_LISTEN", "127.0.0.1:8000").rpartition(":")[2]
    status = http_status(f"http://127.0.0.1:{port}{path}", host=probe_host(os.environ.get("DJANGO_ALLOWED_HOSTS", "")))
    return 0 if status == 200 else 1


if __name__ == "__main__":
    sys.exit(main())
