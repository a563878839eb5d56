"""A power cut of every replica of a quorum-write broker group (SYNC_FLUSH, SYNC_MASTER,
totalReplicas 3, inSyncReplicas 2), each replica's data dir on :mod:`tests.faults.lazyfs`:
SIGKILL of all three, every unsynced write dropped, restart. Every message the producer saw
acknowledged must be consumable from the master afterwards.

It did not hold before: a slave acknowledged bytes before it fsynced them (as RocketMQ does),
so the quorum's second ack could be unsynced; after the cut the master had every
acknowledged message synced, the slaves 3,411 and 72,389 of 129,618 bytes, and the group
came back with the shortest log's replica as master and lost 333 of 342 acknowledged
messages. Now a slave under SYNC_FLUSH acks only what it fsynced, and a group without a
master elects only once a quorum of its in-sync replicas reported their offsets, the longest
first (RocketMQ 5's DefaultElectPolicy orders by epoch, then max offset). The directories of
the store were lost outright before (made without an fsync of their parents): every message
gone."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path

import pytest

from nameserver.client import Client
from snapshots import makedirs_durable
from tests.cluster.broker.failover_procs import Replica
from tests.cluster.broker.failover_support import Producer, group_info, pull_all, setup_group, until
from tests.faults.lazymount import LazyMount, fuse_unavailable
from tests.harness import running_cluster

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.faults,
    pytest.mark.slow,
    pytest.mark.skipif(fuse_unavailable() is not None, reason=str(fuse_unavailable())),
]

GROUP = "cut-group"


async def _scenario(reps: list[Replica], mounts: list[LazyMount], endpoints: list[str]) -> None:
    client = Client(endpoints, timeout_s=5.0)
    producer = Producer(client, GROUP)
    try:
        await setup_group(reps, client, GROUP)
        producer.start(reps[0].addr)
        await until(lambda: len(producer.acked) >= 300, 60, "300 acknowledged sends")
        for r in reps:  # the power goes: all at once, sends in flight
            await asyncio.to_thread(r.stop, signal.SIGKILL)
        await producer.halt()
        acked = {body for body, _, _ in producer.acked}
        for m in mounts:
            await asyncio.to_thread(m.cut)
        for r in reps:
            await asyncio.to_thread(r.start)
        await until(lambda: group_info(client, GROUP).master_address, 30, "a master again")
        master = group_info(client, GROUP).master_address
        got = set(await pull_all(master))
        lost = sorted(acked - got)
        assert not lost, (
            f"{len(lost)} of {len(acked)} acknowledged messages gone after the cut, first "
            f"{[b[:8] for b in lost[:5]]}\n" + "\n".join(m.log_text() for m in mounts)
        )
    finally:
        await producer.halt()
        await producer.close()
        client.close()


def test_power_cut_of_every_replica_loses_no_acknowledged_message(tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        node = stack.enter_context(running_cluster(tmp_path / "ml", n=1))
        mounts = [stack.enter_context(LazyMount(tmp_path / f"lazy{i}")) for i in range(3)]
        reps = []
        for i, m in enumerate(mounts):
            r = Replica(tmp_path, node.endpoints, GROUP, i, "--flush", "SYNC_FLUSH")
            r.data_dir = m.mnt / "data"
            makedirs_durable(r.data_dir)  # the operator's data dir, there before the broker
            stack.callback(r.stop, signal.SIGKILL)  # before its mount goes (LIFO)
            reps.append(r)
        asyncio.run(asyncio.wait_for(_scenario(reps, mounts, node.endpoints), 110))
