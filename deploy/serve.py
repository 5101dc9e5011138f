"""One production unit (deploy/unit.py) in the foreground until stopped: `python -m deploy.serve`.

SIGHUP reloads (Unit.reload): the outcome is a line here and, under systemd, $RUNTIME_DIRECTORY/reload
for deploy/reload.py. SIGTERM, SIGINT (Ctrl-C) or the terminal it started on closing (the kernel
signals only make, the session's leader) stop it gracefully, a start or a reload under way included. Under systemd (Type=notify) it says
READY=1 once /livez answers 200 through nginx, whether or not the database answers yet.
"""

import contextlib
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

from deploy.processes import with_env_file
from deploy.unit import Unit, listen_address


def main() -> int:
    # Only this process speaks to systemd (NotifyAccess=main): the servers do not get the socket.
    notify_socket = os.environ.pop("NOTIFY_SOCKET", None)
    started_with = dict(os.environ)
    on_terminal = os.isatty(sys.stderr.fileno())

    def terminal_gone() -> bool:
        return on_terminal and not os.isatty(sys.stderr.fileno())

    asked: list[str] = []  # what the signals asked for, handled in the loop below
    busy: list[str] = []  # a start or a reload under way: a stop interrupts it, as Ctrl-C would

    def stop(*_) -> None:
        asked.append("stop")
        if busy:
            busy.clear()  # once: a second signal must not break off the clean-up of the first
            raise StopAsked()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # A closing terminal may send SIGHUP too: the loop below checks the terminal before any reload.
    signal.signal(signal.SIGHUP, lambda *_: asked.append("reload"))
    env = with_env_file(started_with)
    unit = Unit(listen_address(env), env, supervised=True, name="serve")
    reloads = 0
    try:
        with under_way(busy, "start"):
            unit.start()
        notify_systemd(notify_socket, "READY=1")
        say(f"serve: nginx on {unit.url}, the app server on {unit.socket_path} (pid {os.getpid()}: HUP reloads)")
        while "stop" not in asked and not terminal_gone():
            if not unit.running():
                say("serve: a server exited; stopping the other")
                return 1
            if "reload" in asked:
                asked.remove("reload")
                say("serve: reloading (a new app server with the new code; the old one finishes its requests)")
                reloads += 1
                try:
                    with under_way(busy, "reload"):
                        unit.reload(settings_for_reload(started_with))
                except (RuntimeError, OSError) as error:  # it did not come up; it could not be started
                    say(f"serve: the reload failed, the running version serves on: {error}")
                    report_reload(f"{reloads} failed, the running version serves on: {error}")
                else:
                    say(f"serve: reloaded: the new app server on {unit.socket_path}, the old one finishing")
                    report_reload(f"{reloads} reloaded: the new version serves")
            if unit.retire():
                say("serve: the old app server has stopped")
            time.sleep(0.1)
        say("serve: stopping gracefully")
        notify_systemd(notify_socket, "STOPPING=1")
        return 0
    except StopAsked:  # start() and reload() have stopped what they were starting
        say("serve: stopping gracefully, during a start or a reload")
        notify_systemd(notify_socket, "STOPPING=1")
        return 0
    except RuntimeError as error:
        say(f"serve: {error}")
        return 1
    finally:
        unit.stop()


class StopAsked(Exception):
    """SIGTERM or SIGINT during a start or a reload: it is broken off, and the unit stops."""


@contextlib.contextmanager
def under_way(busy: list[str], what: str):
    busy.append(what)
    try:
        yield
    finally:
        busy.clear()


def settings_for_reload(started_with: dict) -> dict:
    """The settings a reload applies: under systemd, the environment deploy/reload.py was given (systemd
    reads EnvironmentFile= anew for it); else this process's, with DJANGO_ENV_FILE's file read anew."""
    if runtime := os.environ.get("RUNTIME_DIRECTORY"):
        path = Path(runtime.split(":")[0]) / ENVIRONMENT_FILE
        if path.exists():
            env = json.loads(path.read_text())
            path.unlink()
            return {name: value for name, value in env.items() if name not in RELOAD_ONLY}
    return with_env_file(started_with)


# Where deploy/reload.py leaves its environment, in the runtime directory; what of it is its own.
ENVIRONMENT_FILE = "environment.json"
RELOAD_ONLY = {"MAINPID", "NOTIFY_SOCKET"}


def notify_systemd(notify_socket: str | None, state: str) -> None:
    """sd_notify(3): send `state` ("READY=1") to systemd's socket, when systemd started this process."""
    if notify_socket:
        address = "\0" + notify_socket[1:] if notify_socket.startswith("@") else notify_socket  # @: abstract
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as connection:
            connection.sendto(state.encode(), address)


def report_reload(outcome: str) -> None:
    """`<count> <outcome>` of a reload, for deploy/reload.py, in systemd's RuntimeDirectory= (if any)."""
    if runtime := os.environ.get("RUNTIME_DIRECTORY"):
        path = os.path.join(runtime.split(":")[0], "reload")
        with open(f"{path}.new", "w") as file:
            file.write(outcome + "\n")
        os.replace(f"{path}.new", path)  # at once: reload.py never reads half of it


def say(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except OSError:  # the terminal has gone
        pass


if __name__ == "__main__":
    sys.exit(main())
