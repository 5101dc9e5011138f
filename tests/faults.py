"""The network faults the tests make (localcluster/network_faults.py defines them, for `make chaos` too),
and where the test run's PostgreSQL listens, for a forwarder in front of it."""

from localcluster.network_faults import DelayingRelay, Forwarder, dropped_packets

__all__ = ["DelayingRelay", "Forwarder", "dropped_packets", "unix_socket_or_address"]


def unix_socket_or_address(settings_dict: dict) -> str | tuple[str, int]:
    """Where PostgreSQL of Django's `settings_dict` listens: its unix socket, or its TCP address."""
    host, port = settings_dict["HOST"] or "/var/run/postgresql", int(settings_dict["PORT"] or 5432)
    return f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)
