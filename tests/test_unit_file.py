"""deploy/plantstore.service's time bounds against the code's: systemd waits longer than a reload or
a start can take, and gives a stop the time its graceful steps need."""

from deploy import reload, unit
from deploy.processes import ROOT


def service_settings(text: str) -> dict[str, list[str]]:
    """The [Service] section of a unit file: each key's values, in order."""
    settings, section = {}, None
    for line in map(str.strip, text.splitlines()):
        if line.startswith("["):
            section = line
        elif line and not line.startswith(("#", ";")) and section == "[Service]":
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def test_systemd_waits_longer_for_a_reload_than_its_worst_case_and_stops_within_the_units_bound():
    settings = service_settings((ROOT / "deploy" / "plantstore.service").read_text())
    timeout_start = int(settings["TimeoutStartSec"][0])  # it bounds ExecReload= too

    # reload.py reports a reload's outcome after its slowest steps, and systemd waits for reload.py.
    assert unit.RELOAD_WORST_S < reload.WAIT_S < timeout_start
    # A start: the app server's socket, then /livez, each within its bound.
    assert unit.APP_START_S + 60 < timeout_start
    # A stop: nginx, then every app server at once, after SIGTERM to serve.py alone.
    assert 2 * unit.STOP_S < int(settings["TimeoutStopSec"][0])
    assert (settings["KillMode"], settings["KillSignal"]) == (["mixed"], ["SIGTERM"])
