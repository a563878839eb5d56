"""``cluster up --brokers``: replica j's ports (remoting B+100+10j, HA +1, RocketMQ 5 gRPC +2,
metrics +3) and the flags its command line carries them in."""

from __future__ import annotations

from pathlib import Path

from nameserver.cli.cluster_brokers import broker_argv, broker_layout


def test_replica_ports_follow_the_layout() -> None:
    layout = broker_layout(3, 20000)
    assert [b.ports() for b in layout] == [
        {"remoting": 20100 + 10 * j, "ha": 20101 + 10 * j, "grpc": 20102 + 10 * j,
         "metrics": 20103 + 10 * j}
        for j in range(3)
    ]  # fmt: skip


def test_the_command_line_gives_each_port_its_flag() -> None:
    b = broker_layout(2, 20000)[1]
    argv = broker_argv(b, "127.0.0.1:9877", Path("/tmp/d"), replicas=2)
    flags = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
    assert flags["--listen"].endswith(":20110") and flags["--listen-ha"].endswith(":20111")
    assert flags["--listen-grpc"].endswith(":20112")
    assert flags["--listen-metrics"].endswith(":20113")
