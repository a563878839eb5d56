"""tests/ports.py: which exits mean "a picked port was taken", and the start that tries
again on fresh ports (three times, then gives up). The real servers on a held port:
tests/integration/test_harness_ports.py."""

from __future__ import annotations

import pytest

from tests.ports import ATTEMPTS, CANNOT_START, PortTaken, port_taken, start_on_fresh_ports

NODE = (
    "metaledger: serve: cannot listen on 127.0.0.1:19318 (--listen-metrics): "
    "address already in use\n"
)
BROKER = (
    "E1206 03:25:20.616324 add_port.cc:83] Failed to add port to server: No address added "
    "out of total 1 resolved for '127.0.0.1:15172' (Error in bind for address "
    "'[::ffff:127.0.0.1]:15172': Address already in use)\n"
    "metaledger: broker: cannot listen on 127.0.0.1:19318 (or gRPC 127.0.0.1:15172): "
    "cannot listen on 127.0.0.1:15172 (gRPC): Failed to bind to address 127.0.0.1:15172\n"
)


def test_exit_78_with_address_in_use_is_a_taken_port() -> None:
    assert port_taken(CANNOT_START, NODE)
    assert port_taken(CANNOT_START, BROKER.encode())


def test_etcd_and_redis_say_it_with_exit_1() -> None:
    etcd = "etcdmain: listen tcp 127.0.0.1:52865: bind: address already in use"
    assert port_taken(1, etcd, codes=(1,))
    assert not port_taken(1, etcd)  # not metaledger's code


def test_other_exits_are_not() -> None:
    assert not port_taken(1, NODE)  # another exit code with the same words
    assert not port_taken(None, NODE)  # still running
    assert not port_taken(CANNOT_START, "cannot use data dir /x (--data-dir): not a directory")


def test_a_start_that_finds_its_port_taken_runs_again_on_fresh_ports() -> None:
    calls: list[str] = []

    def start() -> int:
        calls.append("start")
        if calls.count("start") < ATTEMPTS:
            raise PortTaken("taken")
        return 7

    assert start_on_fresh_ports(start, lambda: calls.append("repick")) == 7
    assert calls == ["start", "repick"] * (ATTEMPTS - 1) + ["start"]


def test_it_gives_up_after_three_starts_and_passes_other_errors_through() -> None:
    starts: list[int] = []

    def taken() -> None:
        starts.append(1)
        raise PortTaken("still taken")

    with pytest.raises(PortTaken, match="still taken"):
        start_on_fresh_ports(taken, lambda: None)
    assert len(starts) == ATTEMPTS == 3

    def broken() -> None:
        starts.append(1)
        raise RuntimeError("not a port")

    starts.clear()
    with pytest.raises(RuntimeError, match="not a port"):
        start_on_fresh_ports(broken, lambda: None)
    assert len(starts) == 1


def test_picked_ports_stay_clear_of_the_demos_default_ports() -> None:
    """The demo's tests run ``cluster up`` on its default ports while other tests' servers
    may still be going away: a picked port is never one of them."""
    from nameserver.cli import cluster, cluster_brokers
    from tests.harness import PICK_FROM, free_ports

    layouts = [*cluster.layout(3), *cluster_brokers.broker_layout(3, cluster.DEFAULT_BASE_PORT)]
    defaults = {port for layout in layouts for port in layout.ports().values()}
    assert max(defaults) < PICK_FROM
    assert not defaults & set(free_ports(200))
