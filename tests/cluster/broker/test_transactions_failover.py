"""Transactions across a failover: a SYNC_MASTER group of three (in-sync 2) on a real
metaledger node; the master prepares two transactions and commits one, then is killed with
SIGKILL. The new master has the half and op topics (replicated): it commits the open one,
answers a second commit of the ended one without writing, and each is seen once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from nameserver.client import GroupPolicy
from rmq.codes import ResponseCode
from rmq.connection import RemotingConnection
from tests.cluster.broker.conftest import TOPIC, BrokerGroup
from tests.harness import wait_until
from tests.integration.broker.test_transactions import (
    COMMIT,
    ROLLBACK,
    count,
    end_sent,
    prepare,
    pull_all,
)

pytestmark = [pytest.mark.cluster]


def test_a_new_master_ends_what_the_old_one_prepared_once(
    broker_group: Callable[..., BrokerGroup],
) -> None:
    group = broker_group(3, "SYNC_MASTER", GroupPolicy(3, 2))
    old = group.master

    async def before() -> tuple[object, object]:
        c = await RemotingConnection.connect("127.0.0.1", old.port)
        try:
            done = await prepare(c, b"committed before", "fo-a", TOPIC)
            r = await end_sent(c, done, COMMIT)
            assert r.code == ResponseCode.SUCCESS, r.remark
            return done, await prepare(c, b"committed after", "fo-b", TOPIC)
        finally:
            await c.close()

    done, open_one = asyncio.run(before())
    for slave in group.slaves:  # both slaves hold every byte: either may be elected
        group.wait_slave_seen(slave, connected=True, lag=lambda x: x == 0)
    old.kill()
    wait_until(lambda: group.info().master_address not in ("", old.address), 60, "a new master")
    new = group.master

    async def after() -> list[int]:
        c = await RemotingConnection.connect("127.0.0.1", new.port)
        try:
            while (r := await end_sent(c, open_one, COMMIT)).code != ResponseCode.SUCCESS:
                # not writable yet, or its in-sync set not back yet: refused before the append
                assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE or (
                    "in-sync replicas not enough" in (r.remark or "")
                ), (r.code, r.remark)
                await asyncio.sleep(0.2)
            again = await end_sent(c, done, COMMIT)
            assert again.code == ResponseCode.SUCCESS and "already" in (again.remark or ""), again
            other_way = await end_sent(c, open_one, ROLLBACK)
            assert other_way.code == ResponseCode.SYSTEM_ERROR, other_way.remark
            found = await pull_all(c, TOPIC)
            return [count(found, "fo-a"), count(found, "fo-b")]
        finally:
            await c.close()

    assert asyncio.run(asyncio.wait_for(after(), 60)) == [1, 1]
