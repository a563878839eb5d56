"""A replica group's HA and quorum wired together (broker/group_member.py) on a real node.

Three replicas, each a real MessageStore, a real HA master or client over localhost sockets
and a RoleManager against a real metaledger node; policy 3 replicas, inSyncReplicas 2. The
first replica becomes master, the in-sync set grows to all three, quorum writes answer
PUT_OK and the slaves' commit logs become byte-identical to the master's. The master then
stops (its heartbeats and HA go silent, as after kill -9): metaledger elects another from
the in-sync set, which answers PUT_OK for new writes and holds every message acknowledged
before. The old master comes back on its own store, learns the higher epoch, rejoins as a
slave, cuts its unacknowledged tail and ends byte-identical to the new master.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from broker.group_member import GroupMember, HASettings
from broker.quorum import IsrSettings, QuorumSettings, RoleSettings
from broker.quorum.role import Role
from broker.replication import Admission, PutStatus
from broker.store import MessageStore, StoreConfig
from nameserver.client import Client, GroupPolicy
from rmq.message import Host, StoredMessage
from tests.harness import free_port_pairs, running_cluster

pytestmark = pytest.mark.cluster

GROUP = "bg-member"
TOPIC = "T"


class Replica:
    def __init__(self, root: Path, client: Client, port: int) -> None:
        self.root, self.client, self.port = root, client, port
        self.store = MessageStore(
            str(root), StoreConfig(segment_size=1 << 20, store_host=Host("127.0.0.1", port))
        )
        self.member = GroupMember(
            self.store,
            client,
            RoleSettings(
                "rc",
                GROUP,
                f"127.0.0.1:{port}",
                heartbeat_interval_s=0.2,
                heartbeat_timeout_ms=1500,
                refresh_interval_s=0.5,
            ),
            QuorumSettings(slave_timeout_s=2.0),
            HASettings("127.0.0.1", port + 1, heartbeat_interval_s=0.5, idle_timeout_s=3.0),
            IsrSettings(0.2, 2.0),
        )

    @property
    def is_master(self) -> bool:
        return self.member.roles.role is Role.MASTER and self.member.replication.writable() is None

    async def send(self, body: bytes) -> tuple[PutStatus, int]:
        repl = self.member.replication
        if repl.writable() is not None:
            return PutStatus.SERVICE_NOT_AVAILABLE, -1
        adm = repl.admit(self.store.log.end_offset)
        if isinstance(adm, PutStatus):
            return adm, -1
        msg = StoredMessage(topic=TOPIC, queue_id=0, body=body, born_host=Host("127.0.0.1", 1))
        r = await asyncio.to_thread(self.store.put, msg)
        self.member.appended()
        assert isinstance(adm, Admission)
        status = await repl.wait(r.physical_offset + r.size, adm, True)
        return status, r.queue_offset

    def bodies(self) -> list[bytes]:
        from rmq.message import decode

        got = self.store.get(TOPIC, 0, 0, 100_000)
        return [decode(b).body for b in got.messages]

    def log_bytes(self, end: int) -> bytes:
        out, pos = b"", 0
        while pos < end:
            chunk = self.store.read_log(pos, end - pos)
            assert chunk, f"no bytes at {pos} in {self.root}"
            out += chunk
            pos += len(chunk)
        return out

    async def close(self) -> None:
        await self.member.stop()
        await asyncio.to_thread(self.store.close)


async def until(pred: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s (last {v!r})")
        await asyncio.sleep(0.05)


async def scenario(tmp: Path, client: Client) -> None:
    ports = free_port_pairs(3)
    reps = [Replica(tmp / f"r{i}", client, p) for i, p in enumerate(ports)]
    reps[0].member.start()
    await until(lambda: reps[0].is_master, 15, "first replica is master")
    await asyncio.to_thread(client.replica_set_policy, GROUP, GroupPolicy(3, 2, 1, False, 1 << 20))
    for r in reps[1:]:
        r.member.start()
    try:
        g = await until(
            lambda: (x := client.replica_group(GROUP)) and len(x.sync_state_set) == 3 and x,
            20,
            "in-sync set of all three",
        )
        master = reps[0].member.replication
        await until(  # the master's own view of the group catches up with metaledger's
            lambda: isinstance(master.admit(reps[0].store.log.end_offset), Admission),
            20,
            "the master admits a 2-of-3 write",
        )
        acked: list[bytes] = []
        for i in range(50):
            body = b"m%03d" % i + bytes(range(256))
            status, _ = await reps[0].send(body)
            assert status is PutStatus.PUT_OK, (i, status)
            acked.append(body)
        end = g_end = reps[0].store.log.end_offset
        for r in reps[1:]:
            await until(lambda r=r: r.store.log.end_offset >= end, 10, "slave caught up")
            assert r.log_bytes(end) == reps[0].log_bytes(end)

        # the master goes silent: heartbeats and HA stop; a last write reaches only its own
        # log (the unacknowledged tail a kill leaves behind)
        old = reps[0]
        await old.member.stop()
        tail = StoredMessage(topic=TOPIC, queue_id=0, body=b"never acknowledged")
        await asyncio.to_thread(old.store.put, tail)
        old_end = old.store.log.end_offset
        await asyncio.to_thread(old.store.close)
        t0 = time.monotonic()
        new = await until(
            lambda: next((r for r in reps[1:] if r.is_master), None), 20, "a new master"
        )
        while True:  # first PUT_OK on the new master (its set regrows first)
            status, _ = await new.send(b"after")
            if status is PutStatus.PUT_OK:
                break
            assert time.monotonic() - t0 < 30, status
            await asyncio.sleep(0.1)
        acked.append(b"after")
        assert new.member.roles.epoch > g.master_epoch
        assert [b for b in new.bodies() if b in acked] == acked  # nothing acked lost

        # the old master comes back on its own store: slave, truncated, identical
        back = Replica(old.root, client, old.port)
        reps[0] = back
        back.member.start()
        await until(lambda: back.member.roles.role is Role.SLAVE, 15, "old master rejoins as slave")
        end = new.store.log.end_offset
        await until(lambda: back.store.log.end_offset == end, 15, "old master caught up")
        assert back.log_bytes(end) == new.log_bytes(end)
        assert b"never acknowledged" not in back.bodies()
        assert old_end > g_end  # it did hold a tail the group never had
    finally:
        for r in reps:
            await r.close()


def test_group_member_quorum_failover_and_rejoin(tmp_path: Path) -> None:
    with running_cluster(tmp_path / "ml", n=1) as cluster:
        with Client(cluster.endpoints, timeout_s=5.0) as client:
            asyncio.run(asyncio.wait_for(scenario(tmp_path, client), 120))
