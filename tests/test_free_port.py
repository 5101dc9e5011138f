"""The ports the tests' servers are given: no two pytest-xdist workers give the same one."""

import itertools

import pytest

from localcluster import processes


@pytest.mark.parametrize("workers", [2, 3, 8])
def test_each_xdist_worker_gives_ports_from_a_range_no_other_worker_gives_from(monkeypatch, workers):
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(workers))
    shares = []
    for worker in range(workers):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{worker}")
        shares.append(processes.port_range())
        assert processes.free_port() in shares[-1]

    ephemeral = int(processes.EPHEMERAL_PORTS.read_text().split()[0])
    assert processes.LOWEST_PORT <= shares[0].start and shares[-1].stop <= ephemeral
    assert all(len(share) >= 1000 for share in shares)
    assert all(one.stop <= other.start for one, other in itertools.pairwise(shares))


def test_outside_xdist_every_port_below_the_ephemeral_range_may_be_given(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    ephemeral = int(processes.EPHEMERAL_PORTS.read_text().split()[0])
    assert processes.port_range() == range(processes.LOWEST_PORT, ephemeral)


def test_a_worker_started_in_place_of_a_crashed_one_gives_ports_below_the_ephemeral_range(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw7")  # the fifth worker started in place of another

    ephemeral = int(processes.EPHEMERAL_PORTS.read_text().split()[0])
    assert processes.LOWEST_PORT <= processes.free_port() < ephemeral
