"""One production unit (deploy/unit.py) in the foreground until stopped: `python -m deploy.serve`.

What `make serve` and the image run (the systemd install runs nginx and the app server as units of
their own: deploy/systemd/). SIGHUP reloads (Unit.reload), with the settings of DJANGO_ENV_FILE's
file read anew; the outcome is a line here. SIGTERM, SIGINT (Ctrl-C) or the terminal it started on
closing (the kernel signals only make, the session's leader) stop it gracefully, a start or a reload
under way included.
"""

import contextlib
import os
import signal
import sys
import time

from deploy.processes import with_env_file
from deploy.unit import Unit, listen_address


def main() -> int:
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
    try:
        env = with_env_file(started_with)
        unit = Unit(listen_address(env), env, supervised=True, name="serve")
    except Exception as error:  # a settings file or a setting it cannot serve with
        say(f"serve: {reason(error)}")
        return 1
    try:
        with under_way(busy, "start"):
            unit.start()
        say(f"serve: nginx on {unit.url}, the app server on {unit.socket_path} (pid {os.getpid()}: HUP reloads)")
        while "stop" not in asked and not terminal_gone():
            if not unit.running():
                say("serve: a server exited; stopping the other")
                return 1
            if "reload" in asked:
                asked.remove("reload")
                say("serve: reloading (a new app server with the new code; the old one finishes its requests)")
                try:
                    with under_way(busy, "reload"):
                        unit.reload(with_env_file(started_with))
                except StopAsked:
                    raise
                except Exception as error:  # whatever broke it off, the running version is untouched
                    say(f"serve: the reload failed, the running version serves on: {reason(error)}")
                else:
                    say(f"serve: reloaded: the new app server on {unit.socket_path}, the old one finishing")
            if unit.retire():
                say("serve: the old app server has stopped")
            time.sleep(0.1)
        say("serve: stopping gracefully")
        return 0
    except StopAsked:  # start() and reload() have stopped what they were starting
        say("serve: stopping gracefully, during a start or a reload")
        return 0
    except Exception as error:  # it did not come up (ours), or could not be started (nginx missing, say)
        say(f"serve: {reason(error)}")
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


def reason(error: Exception) -> str:
    """An error in one line: ours (RuntimeError) and the system's (OSError) say what failed; any other
    is named by its type. Without the unit's name, which the lines here begin with already."""
    text = str(error) if isinstance(error, (RuntimeError, OSError)) else f"{type(error).__name__}: {error}"
    return text.removeprefix("serve: ")


def say(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except OSError:  # the terminal has gone
        pass


if __name__ == "__main__":
    sys.exit(main())
