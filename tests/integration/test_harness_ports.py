"""The harnesses start a server again on fresh ports when a port they picked free was
taken before the server bound it (tests/ports.py): here a listening socket of the test's
own holds the port the harness picks first, and the node (tests/harness.py), the broker
(tests/integration/broker/conftest.py), etcd and redis-server end up serving on other
ports."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nameserver.client import Client, NotFound
from tests import etcd_harness, harness, redis_harness
from tests.harness import Cluster, free_ports
from tests.integration.broker import conftest as broker_conftest
from tests.integration.broker.conftest import BrokerProcess, wait_for

pytestmark = [pytest.mark.integration]


@pytest.fixture
def held() -> Iterator[int]:
    """A port a listening socket of this test holds throughout."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", free_ports(1)[0]))
        s.listen()
        yield s.getsockname()[1]


def first_pick_gets(port: int, index: int) -> Callable[[int], list[int]]:
    """A ``free_ports`` whose first answer has ``port`` at ``index``; later ones are real."""
    calls: list[int] = []

    def pick(n: int) -> list[int]:
        ports = free_ports(n)
        calls.append(n)
        if len(calls) == 1:
            ports[index] = port
        return ports

    return pick


@pytest.mark.parametrize("index", [0, 3], ids=["client", "metrics"])
def test_a_node_whose_picked_port_is_taken_serves_on_fresh_ports(
    tmp_path: Path, held: int, index: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client port is bound first, the metrics port last: either taken, the node exits
    78 and the cluster starts again on fresh ports."""
    monkeypatch.setattr(harness, "free_ports", first_pick_gets(held, index))
    with Cluster(tmp_path, n=1) as cluster:
        cluster.wait_ready(30)  # the first wait_ready checks the first start
        node = cluster.nodes[0]
        ports = (node.client_port, node.peer_port, node.remoting_port, node.metrics_port)
        assert held not in ports
        cluster.put(0, b"k", b"v")
        assert cluster.range_all(0)[b"k"][0] == b"v"
        log = cluster.log_text(0)
        assert f"cannot listen on 127.0.0.1:{held}" in log, log  # the first start's


def test_a_cluster_whose_picked_peer_port_is_taken_starts_every_node_again(
    tmp_path: Path, held: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """n1's peer port taken: the others know it by that address, so all three start again
    on fresh ports (and fresh data dirs) and form one cluster."""
    monkeypatch.setattr(harness, "free_ports", first_pick_gets(held, 5))
    with Cluster(tmp_path, n=3) as cluster:
        leader = cluster.wait_ready(30)
        assert held not in [n.peer_port for n in cluster.nodes]
        assert cluster.nodes[1].peer_addr in cluster.initial_cluster
        cluster.put(leader, b"k", b"v")
        cluster.wait_converged()
        assert all(cluster.range_all(i, serializable=True)[b"k"][0] == b"v" for i in range(3))


def test_a_broker_whose_picked_grpc_port_is_taken_serves_on_fresh_ports(
    tmp_path: Path, held: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Cluster(tmp_path / "node", n=1) as node:
        node.wait_ready(30)
        monkeypatch.setattr(broker_conftest, "free_ports", first_pick_gets(held, 0))
        broker = BrokerProcess(tmp_path, node.endpoints, "broker-a", grpc=True)
        try:
            assert broker.grpc_port not in (0, held)
            log = broker.log_path.read_text(errors="replace")
            assert f"127.0.0.1:{held}" in log, log  # the first start's failure
            with Client(node.endpoints, timeout_s=10) as client:

                def registered() -> bool:
                    try:  # the group exists once the broker's first registration is applied
                        return client.replica_group("broker-a").master_address == broker.addr
                    except NotFound:
                        return False

                wait_for("broker-a registered at its new address", registered)
            with socket.create_connection(("127.0.0.1", broker.grpc_port), timeout=5):
                pass  # its gRPC front listens on the fresh port
        finally:
            assert broker.stop() == 0, broker.log_tail()


def test_etcd_and_redis_whose_picked_port_is_taken_serve_on_fresh_ports(
    tmp_path: Path, held: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """etcd and redis-server exit 1 with ``bind: address already in use``."""
    monkeypatch.setattr(etcd_harness, "free_ports", first_pick_gets(held, 0))
    with etcd_harness.EtcdServer(tmp_path / "etcd") as etcd:
        assert etcd.address != f"127.0.0.1:{held}"
        etcd.wait_ready()
    monkeypatch.setattr(redis_harness, "free_ports", first_pick_gets(held, 0))
    server = redis_harness.RedisServer(tmp_path)
    try:
        assert server.port != held
        assert server.client().ping()
        assert "address already in use" in server.log_path.read_text().lower()
    finally:
        server.stop()
