"""The leader switches the kv store to etcd's revision count
(:mod:`nameserver.kv.revision`) once every member can apply the switch.

A member of an older version rejects a ``count_revisions`` entry (an unknown entry type)
and would go on counting by log offset while the others count etcd's way: so the leader
asks every member of the Raft configuration, learners too, through its client port's
``Maintenance.Status``, whose trailing metadata says whether it counts
(:data:`~nameserver.kv.revision.COUNTS_METADATA`, and that it reads the entry's floor:
``FLOOR_METADATA``, and its offset up to which the store changed no key:
``START_METADATA``), and proposes the entry only when all do. The entry carries that
offset when the leader's kv history shows no change of a key from the empty store up to
what it applied (:meth:`RevisionSwitch.untouched`): a new cluster then starts counting at
1, as etcd, whatever offsets its member records took.
A store that counts already is left alone; so is one whose members cannot all be asked
(retried every :data:`CHECK_S`). A member of an older version must not join a store that
counts (it would count otherwise from the switch on): upgrade, never downgrade, as etcd.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import grpc

from nameserver.kv.revision import COUNTS_METADATA, FLOOR_METADATA, START_METADATA, count_entry
from nameserver.state.duties import PeriodicDuties
from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc

if TYPE_CHECKING:
    from nameserver.node import NodeFacade

log = logging.getLogger(__name__)

#: how often the leader looks while the store does not count yet
CHECK_S = 0.2

Dial = Callable[[str], grpc.aio.Channel]


def _address(url: str) -> str:
    return url.split("://", 1)[-1].rstrip("/")


class RevisionSwitch(PeriodicDuties):
    def __init__(self, node: NodeFacade, dial: Dial) -> None:
        super().__init__(node.log)
        self.node = node
        self.dial = dial

    def start(self) -> None:
        self.run_every((CHECK_S, self.tick))

    async def stop(self) -> None:
        await self.stop_jobs()

    async def tick(self) -> None:
        if self.node.state.image.store_rev.revision >= 0:
            return  # counts already (for good: the entry is in the log)
        if self.lead() is None or not await self.all_count():
            return
        await self.node.propose(count_entry(self.untouched()), None)
        log.info("the kv store counts revisions as etcd does from here")

    def untouched(self) -> int | None:
        """The last offset this node's kv history took in, when it shows the store never
        changed a key nor compacted from the empty store up to it (else None). Read as the
        apply thread goes on: the offset first (the history takes in an apply group's
        versions before it moves its image), then what only grows (the versions, until a
        pruning or compaction, which raise the floor read last)."""
        history = self.node.history
        if history is None:
            return None
        generation = history.generation
        through = history.image.offset
        if history.version_count or len(history.image.kv.data):
            return None
        if history.base or history.compacted > 0 or history.pruned_to:
            return None
        return through if history.generation == generation else None

    async def all_count(self) -> bool:
        """Whether every member of the configuration says it counts etcd's way."""
        image = self.node.state.image
        by_peer = {_address(m.peer_url): m for m in image.members.members.values()}
        me = self.node.config.listen_peer
        for member in self.node.engine.members():
            if member.address == me:
                continue
            rec = by_peer.get(member.address)
            if rec is None or not rec.client_urls:
                return False  # not announced yet: ask again later
            if not await self._counts(rec.client_urls):
                return False
        return True

    async def _counts(self, urls: tuple[str, ...]) -> bool:
        for url in urls:
            channel = self.dial(_address(url))
            try:
                call = rpc_pb2_grpc.MaintenanceStub(channel).Status(
                    rpc_pb2.StatusRequest(),
                    metadata=self.node.node_metadata,
                    timeout=self.node.timeout_s,
                )
                await call
                trailing = await call.trailing_metadata()
                said = [(k, v) for k, v in trailing or ()]
                return COUNTS_METADATA in said and FLOOR_METADATA in said and START_METADATA in said
            except grpc.aio.AioRpcError as exc:
                log.debug("revision count: %s did not answer Status (%s)", url, exc.code())
            finally:
                await channel.close()
        return False
