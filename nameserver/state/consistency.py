"""Consistency by record type (RIP-18, DESIGN.md §5): one table says how each type is read.

=============  ==============  ==============================================================
record type    consistency     why
=============  ==============  ==============================================================
kv             as requested    etcd's ``serializable`` flag picks a local read
member         as requested    etcd's MemberList ``linearizable`` flag
lease          linearizable    a holder must never see a lease that the leader let expire
offset         linearizable    a standby resumes from the newest checkpoint, never an older one
quota          linearizable    limits and usage are read to decide what may still be written
replica_group  linearizable    masters, epochs and the in-sync set fence brokers' writes
lock/election  linearizable    ownership keys (etcd v3lock / v3election) decide who may act
routing        eventual        any node's image; the answer carries the node's apply offset
broker/topic   eventual        RocketMQ route data (RIP-18): as ``routing``; clients re-read
kvconfig       eventual        routes every 30 s, and every node converges on one log
=============  ==============  ==============================================================

A linearizable read confirms the read index through the leader (batched: concurrent reads
share one heartbeat round, Raft's ReadIndex, or one barrier entry with PySyncObj) and
waits until this node applied it. A serializable (or eventual) read
takes this node's image as it is; every answer carries the revision (apply offset) of the
image that served it, so a client can tell how fresh it was.
"""

from __future__ import annotations

from typing import Protocol

from nameserver.state.image import MetadataImage

LINEARIZABLE = "linearizable"
SERIALIZABLE = "serializable"
AS_REQUESTED = "as requested"
EVENTUAL = "eventual"

READ_CONSISTENCY: dict[str, str] = {
    "kv": AS_REQUESTED,
    "member": AS_REQUESTED,
    "lease": LINEARIZABLE,
    "offset": LINEARIZABLE,
    "quota": LINEARIZABLE,
    "replica_group": LINEARIZABLE,
    "lock": LINEARIZABLE,
    "election": LINEARIZABLE,
    "routing": EVENTUAL,
    "broker": EVENTUAL,
    "topic": EVENTUAL,
    "kvconfig": EVENTUAL,
}


class ReadsImages(Protocol):
    async def read_image(self, serializable: bool) -> MetadataImage: ...


def read_mode(record_type: str, serializable: bool) -> str:
    """How a read of ``record_type`` is served when the client asked ``serializable``:
    :data:`LINEARIZABLE` or :data:`SERIALIZABLE` (a local read). Unknown types raise
    KeyError: a new record type must be added to the table."""
    declared = READ_CONSISTENCY[record_type]
    if declared == LINEARIZABLE:
        return LINEARIZABLE
    if declared == EVENTUAL:
        return SERIALIZABLE
    return SERIALIZABLE if serializable else LINEARIZABLE


async def read_image(
    node: ReadsImages, record_type: str, serializable: bool = False
) -> tuple[MetadataImage, str]:
    """The image to answer a read of ``record_type`` from, and how it was read."""
    mode = read_mode(record_type, serializable)
    return await node.read_image(mode == SERIALIZABLE), mode
