"""`make serve`: one production unit (deploy/unit.py) in the foreground, until told to stop.

Signals, as an operator or a process supervisor sends them:
- SIGHUP: a graceful reload (a new version): a new app server starts with the new code on a new
  socket, nginx re-reads its config naming it, and the old ones finish their requests first.
  Nothing is refused; if the new version does not come up, the running one serves on. The outcome
  is a line here, and, under systemd, in $RUNTIME_DIRECTORY/reload for deploy/reload.py.
- SIGTERM or SIGINT (Ctrl-C): a graceful stop: no new connections, the requests in flight are
  answered, then everything exits and the unit's temp folder is removed.
- The terminal it started on closing: a graceful stop (the kernel signals only make, the session's
  leader, so the terminal is also watched).
- SIGKILL: the servers get SIGTERM from the kernel (`setpriv --pdeathsig`), so none is left running.

Under systemd (deploy/plantstore.service, Type=notify) it tells systemd when it is ready: once
/livez answers 200 through nginx. A database or Redis that is down then does not stop it: /healthz
and the API answer 503 Error bodies until it is back, then it serves without a restart.
"""

import os
import signal
import socket
import sys
import time

# The checkout as configured, not resolved: a release switched by a symlink is what a reload runs.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from deploy.unit import Unit  # noqa: E402


def public_address() -> str:
    # The address clients reach: nginx answers there.
    return os.environ.get("PLANTS_LISTEN") or f"127.0.0.1:{os.environ.get('PORT', '8000')}"


def terminal_gone(started_on_terminal: bool) -> bool:
    """True when this process started on a terminal that has since hung up."""
    return started_on_terminal and not os.isatty(sys.stderr.fileno())


def notify_systemd(notify_socket: str | None, state: str) -> None:
    """sd_notify(3): send `state` ("READY=1") to systemd's socket, when systemd started this process."""
    if not notify_socket:
        return
    address = "\0" + notify_socket[1:] if notify_socket.startswith("@") else notify_socket  # @: abstract
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as connection:
        connection.sendto(state.encode(), address)


def main() -> int:
    started_on_terminal = os.isatty(sys.stderr.fileno())
    # Only this process speaks to systemd (NotifyAccess=main): the servers do not get the socket
    # (one that speaks sd_notify, as uWSGI did, would send its own states, which systemd refuses and logs).
    notify_socket = os.environ.pop("NOTIFY_SOCKET", None)
    asked: list[str] = []  # what the signals asked for, handled in the loop below

    def on_stop(signum, frame):
        asked.append("stop")

    def on_hangup(signum, frame):
        asked.append("stop" if terminal_gone(started_on_terminal) else "reload")

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGHUP, on_hangup)
    unit = Unit(public_address(), dict(os.environ), supervised=True, name="serve")
    reloads = 0
    try:
        unit.start()
        notify_systemd(notify_socket, "READY=1")
        say(f"serve: nginx on {unit.url}, the app server on {unit.socket_path} (pid {os.getpid()}: HUP reloads)")
        while "stop" not in asked:
            if terminal_gone(started_on_terminal):
                say("serve: the terminal has closed; stopping gracefully")
                break
            if not unit.running():
                say("serve: a server exited; stopping the other")
                return 1
            if "reload" in asked:
                asked.remove("reload")
                say("serve: reloading (a new app server with the new code; the old one finishes its requests)")
                reloads += 1
                try:
                    unit.reload()
                except (RuntimeError, OSError) as error:  # it did not come up; it could not be started
                    say(f"serve: the reload failed, the running version serves on: {error}")
                    report_reload(reloads, f"failed, the running version serves on: {error}")
                else:
                    say(f"serve: reloaded: the new app server on {unit.socket_path}, the old one finishing")
                    report_reload(reloads, "reloaded: the new version serves")
            if unit.retire():
                say("serve: the old app server has stopped")
            time.sleep(0.1)
        say("serve: stopping gracefully")
        notify_systemd(notify_socket, "STOPPING=1")
        return 0
    except RuntimeError as error:
        say(f"serve: {error}")
        return 1
    finally:
        unit.stop()


def report_reload(count: int, outcome: str) -> None:
    """The outcome of reload number `count`, for deploy/reload.py (systemctl reload) to report, in
    the unit's runtime directory (systemd's RuntimeDirectory=); nowhere without one (make serve)."""
    if runtime := os.environ.get("RUNTIME_DIRECTORY"):
        path = os.path.join(runtime.split(":")[0], "reload")
        with open(f"{path}.new", "w") as file:
            file.write(f"{count} {outcome}\n")
        os.replace(f"{path}.new", path)  # at once: reload.py never reads half of it


def say(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except OSError:  # the terminal has gone; the servers' own logs go on elsewhere, or nowhere
        pass


if __name__ == "__main__":
    sys.exit(main())
