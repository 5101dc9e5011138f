"""nginx of the systemd install (deploy/systemd/plantstore-nginx.service), in front of the serving slot.

    python -m deploy.edge render          # ExecStartPre=: nginx.conf in $RUNTIME_DIRECTORY, checked
    python -m deploy.edge reload MAINPID  # ExecReload=: the same, then nginx switched to it

The config is deploy/nginx.conf rendered as every unit renders it (deploy/unit.py), from the unit's
settings as systemd reads them for the command (the edge file deploy/plantstore-release writes: the
slot, PLANTS_APP_SLOT, and the settings nginx's config reads), its upstream the slot's socket. A
reload is deploy/unit.py's switch_nginx, the one every unit uses; it returns once nginx's new workers
serve the config and its old ones have finished what they held, so the slot they sent to can be
stopped then (deploy/plantstore-release); if nginx refuses the config or does not switch to it in
time, the running config is put back and it exits 1 with the reason, which systemd puts in the journal.
"""

import os
import sys
from pathlib import Path

from deploy.processes import children, wait_until
from deploy.unit import NGINX_SHUTDOWN_S, check_nginx_conf, listen_address, render_nginx_conf, switch_nginx

SLOTS = ("a", "b")


def slot_socket(env: dict) -> Path:
    slot = env.get("PLANTS_APP_SLOT", "")
    if slot not in SLOTS:
        raise SystemExit(f"edge: PLANTS_APP_SLOT is {slot!r}, not one of {SLOTS}: deploy/plantstore-release sets it")
    return Path("/run/plantstore") / slot / "app.sock"


def render(run_dir: Path, env: dict) -> Path:
    """next.conf in `run_dir`, naming the slot's socket."""
    return render_nginx_conf(run_dir, f"unix:{slot_socket(env)}", listen_address(env), env, name="next.conf")


def reload(run_dir: Path, env: dict, master: int) -> None:
    old_workers = switch_nginx(run_dir, render(run_dir, env), master, "edge")
    sys.stderr.write(f"edge: nginx sends to {slot_socket(env)}\n")
    # nginx's old workers finish what they hold, within worker_shutdown_timeout; nginx has switched
    # whatever comes of it, so the reload has succeeded: a worker that outlives it is only reported.
    try:
        wait_until(lambda: not old_workers & set(children(master)), None, NGINX_SHUTDOWN_S + 5, "old workers")
    except RuntimeError:
        sys.stderr.write(f"edge: nginx's old workers {sorted(old_workers)} still run after {NGINX_SHUTDOWN_S + 5} s\n")


def main(argv: list[str]) -> None:
    run_dir = Path(os.environ["RUNTIME_DIRECTORY"].split(":")[0])
    env = dict(os.environ)
    try:
        if argv == ["render"]:  # before nginx starts: checked, then the config it starts with
            check_nginx_conf(run_dir, next_conf := render(run_dir, env), "edge")
            next_conf.replace(run_dir / "nginx.conf")
        elif len(argv) == 2 and argv[0] == "reload":
            reload(run_dir, env, int(argv[1]))
        else:
            raise SystemExit("usage: python -m deploy.edge render | reload MAINPID")
    except RuntimeError as error:  # what nginx refused, or did not take: the running config serves on
        raise SystemExit(str(error)) from None


if __name__ == "__main__":
    main(sys.argv[1:])
