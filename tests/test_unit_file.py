"""deploy/systemd's units' time bounds against the code's: systemd waits longer than a start or a
reload can take, and gives a stop the time its graceful steps need."""

from deploy import app_server, probe, unit
from deploy.processes import ROOT

UNITS = ROOT / "deploy" / "systemd"


def service_settings(name: str) -> dict[str, list[str]]:
    """The [Service] section of a unit file of deploy/systemd: each key's values, in order."""
    settings, section = {}, None
    for line in map(str.strip, (UNITS / name).read_text().splitlines()):
        if line.startswith("["):
            section = line
        elif line and not line.startswith(("#", ";")) and section == "[Service]":
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def test_systemd_waits_for_a_slot_s_probe_and_gives_its_workers_their_time_to_finish():
    settings = service_settings("plantstore-app@.service")

    # ExecStartPost='s probe gives up after probe.WAIT_S: systemd waits longer for it.
    assert probe.WAIT_S < int(settings["TimeoutStartSec"][0])
    # SIGTERM to Granian alone, whose workers finish their requests within WORKER_STOP_S.
    assert app_server.WORKER_STOP_S < int(settings["TimeoutStopSec"][0])
    assert settings["KillMode"] == ["mixed"]


def test_systemd_waits_for_nginx_s_reload_and_drain():
    settings = service_settings("plantstore-nginx.service")
    timeout_start = int(settings["TimeoutStartSec"][0])  # it bounds ExecReload= too

    # deploy/edge.py's reload: nginx -t, nginx's new workers, then its old ones gone.
    assert unit.NGINX_CHECK_S + unit.NGINX_SWITCH_S + unit.NGINX_SHUTDOWN_S + 5 < timeout_start
    assert probe.WAIT_S < timeout_start
    # SIGQUIT: nginx's workers finish what they hold within worker_shutdown_timeout.
    assert unit.NGINX_SHUTDOWN_S < int(settings["TimeoutStopSec"][0])
    assert (settings["KillMode"], settings["KillSignal"]) == (["mixed"], ["SIGQUIT"])
