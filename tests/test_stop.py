"""`make serve`'s stops: SIGTERM, Ctrl-C, a closed terminal or a killed supervisor leave nothing
running, and what was in flight is answered."""

import json
import os
import pty
import shutil
import signal

import pytest

from tests.live import (
    Load,
    MakeServe,
    wait_for_exit,
)

# make serve on a SQLite file of its own (tests/live.py: MakeServe), or on no reachable database.
pytestmark = [pytest.mark.live, pytest.mark.own_database]


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
def test_sigterm_or_ctrl_c_stops_gracefully_and_leaves_nothing_running(tmp_path, how):
    server = MakeServe(tmp_path).start()
    processes, folder = server.descendants(), server.unit_folder()

    os.kill(server.pid_of(b"deploy.serve"), getattr(signal, how))

    assert server.process.wait(timeout=60) == 0
    assert wait_for_exit(processes) == []
    assert not folder.exists()
    assert "serve: stopping gracefully" in server.log()


def test_a_closed_terminal_stops_make_serve_and_leaves_nothing_running(tmp_path):
    terminal, seat = pty.openpty()
    server = MakeServe(tmp_path, terminal=seat).start()
    os.close(seat)
    processes, folder = server.descendants(), server.unit_folder()

    os.close(terminal)  # the terminal window closes: the kernel sends SIGHUP to its foreground

    server.process.wait(timeout=60)
    assert wait_for_exit(processes) == [], server.log()
    assert not folder.exists()


def test_a_killed_supervisor_takes_its_servers_with_it(tmp_path):
    server = MakeServe(tmp_path).start()
    supervisor = server.pid_of(b"deploy.serve")
    servers, folder = [pid for pid in server.descendants() if pid != supervisor], server.unit_folder()

    os.kill(supervisor, signal.SIGKILL)

    assert wait_for_exit(servers) == []
    server.stop()
    shutil.rmtree(folder)  # a killed supervisor cannot remove the unit's folder: the test does


def test_request_in_flight_at_sigterm_is_answered(served):
    token = served.token()
    with Load(f"{served.url}/plants", token, clients=4, limit=2000, timeout=30) as load:
        load.wait_for(100)
        os.kill(served.pid_of(b"deploy.serve"), signal.SIGTERM)
        served.process.wait(timeout=60)

    # Every request either got its answer or found no server listening; none was cut off.
    cut_off = [(status, text) for _, status, _, text, _ in load.answers if status not in (200, None)]
    assert cut_off == []
    assert load.ids_with(200) <= served.stored_ids()
    assert json.loads(load.answers[0][3])["id"] == load.answers[0][0]
