"""Consistency by record type (RIP-18; docs/semantics.md,
"Consistency by type"): how each type is read.

Each record kind declares its level (``RecordKind.consistency``, the registry of
:mod:`nameserver.kinds`); this table is what the server's kinds declare, and why:

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
auth           linearizable    who may do what: a revoked permission is never read as granted
=============  ==============  ==============================================================

A linearizable read confirms the read index through the leader (batched: concurrent reads
share one heartbeat round, Raft's ReadIndex, or one barrier entry with PySyncObj) and
waits until this node applied it. A serializable (or eventual) read
takes this node's image as it is; every answer carries the revision (apply offset) of the
image that served it, so a client can tell how fresh it was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from nameserver.state.registry import Registry

if TYPE_CHECKING:
    from nameserver.state.image import MetadataImage

LINEARIZABLE = "linearizable"
SERIALIZABLE = "serializable"
AS_REQUESTED = "as requested"
EVENTUAL = "eventual"


def declared(record_type: str, registry: Registry) -> str:
    """The consistency a record type (or read surface) declares in ``registry``: its kind's
    ``consistency``, or a read surface's (the server's: :data:`nameserver.kinds.READS`).
    Unknown types raise KeyError: a new record type declares its consistency in its kind."""
    return registry.consistency[record_type]


class ReadsImages(Protocol):
    @property
    def registry(self) -> Registry:
        """The registry of the images it reads (whose kinds declare their consistency)."""
        ...

    async def read_image(self, serializable: bool) -> MetadataImage: ...


def read_mode(record_type: str, serializable: bool, registry: Registry) -> str:
    """How a read of ``record_type`` is served when the client asked ``serializable``:
    :data:`LINEARIZABLE` or :data:`SERIALIZABLE` (a local read)."""
    level = declared(record_type, registry)
    if level == LINEARIZABLE:
        return LINEARIZABLE
    if level == EVENTUAL:
        return SERIALIZABLE
    return SERIALIZABLE if serializable else LINEARIZABLE


async def read_image(
    node: ReadsImages, record_type: str, serializable: bool = False
) -> tuple[MetadataImage, str]:
    """The image to answer a read of ``record_type`` from, and how it was read."""
    mode = read_mode(record_type, serializable, node.registry)
    return await node.read_image(mode == SERIALIZABLE), mode
