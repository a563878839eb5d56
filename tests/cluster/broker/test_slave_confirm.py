"""A slave serves consumers nothing past the confirm offset its master sent it.

Three real replicas under a quorum policy (inSyncReplicas 2 of 3). One slave is stopped
(SIGSTOP: its HA connection stays open, it acks nothing), so the master's confirm offset, the
minimum ack over the in-sync set, stays where that slave stopped. Messages sent then get
SEND_OK (the master and the other slave hold them) and that other slave holds every byte of
them, but they are not confirmed: a failover to the stopped slave would truncate them. Pulls
from the running slave answer only the messages before the stop (RocketMQ 5's controller-mode
slave reads up to the master's confirm offset), and its runtime info shows that confirm
offset below its log end. Once the stopped slave runs again and acks, the confirm offset
moves on and the running slave serves everything.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable

import pytest

from nameserver.client import GroupPolicy
from rmq.message import StoredMessage
from tests.cluster.broker.conftest import SEND_OK, TOPIC, BrokerGroup, BrokerProc
from tests.harness import wait_until
from tests.integration.broker.test_grpc_producer import _pull_all

pytestmark = pytest.mark.cluster


def bodies(proc: BrokerProc) -> list[bytes]:
    got: list[StoredMessage] = asyncio.run(_pull_all(proc.port, TOPIC))
    return [m.body for m in got]


def test_a_slave_serves_nothing_past_the_confirm_offset(
    broker_group: Callable[..., BrokerGroup],
) -> None:
    # nobody leaves the in-sync set during the test: the confirm offset stays put
    g = broker_group(
        3, "SYNC_MASTER", GroupPolicy(3, 2), heartbeat_timeout_ms=60_000, not_catchup_ms=60_000
    )
    before = [b"before-%d" % i for i in range(5)]
    after = [b"after-%d" % i for i in range(5)]
    for body in before:
        assert g.send(body) == (SEND_OK, "")
    master = g.master
    running, stopped = g.slaves
    wait_until(lambda: bodies(running) == before, 30, "the slave serves the confirmed messages")

    g.hang(stopped)
    try:
        confirm = int(master.runtime_info()["confirmOffset"])
        for body in after:
            assert g.send(body) == (SEND_OK, "")  # the master and the running slave hold it
        end = master.max_offset()
        assert end > confirm
        assert int(master.runtime_info()["confirmOffset"]) == confirm
        wait_until(lambda: running.max_offset() == end, 30, "the running slave holds the tail")
        assert bodies(running) == before  # not the unconfirmed tail it holds
        info = running.runtime_info()
        assert int(info["confirmOffset"]) <= confirm < int(info["commitLogMaxOffset"])
        assert bodies(master) == before  # the master: unchanged, the confirm offset too
    finally:
        stopped.signal(signal.SIGCONT)

    wait_until(lambda: bodies(running) == before + after, 30, "the tail once confirmed")
    assert int(running.runtime_info()["confirmOffset"]) == end
