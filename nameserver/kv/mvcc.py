"""The kv store's compaction revision (etcd's ``Compact``): the ``mvcc`` record, its sub-image
and delta, and the apply rule of ``compact`` entries (the record, sub-image and delta are in
:mod:`nameserver.kv.records`).

etcd 3.4 (mvcc/kvstore.go ``updateCompactRev``): compacting at a revision at or below the
current compaction revision fails with ``ErrCompacted``, above the current revision with
``ErrFutureRev``; otherwise the compaction revision rises to it and reads and watches below
it answer "required revision has been compacted". Here the compaction revision is one
record (type ``mvcc``, key ``compact``) of the kv domain, so it travels in snapshots, the
change log and replay like every record; the per-key history it prunes is
:mod:`nameserver.kv.history` (in memory, per node).

Errors (gRPC OUT_OF_RANGE, etcd's exact texts: etcd clients match them by text)::

    OutOfRange
    ├── Compacted       revision <= the compaction revision (reads: < it)
    └── FutureRevision  revision > the current revision
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nameserver.errors import OutOfRange
from nameserver.kv.records import COMPACT_KEY, Compaction, MvccDelta
from nameserver.kv.revision import current_revision
from protos import records_pb2
from raftlog import Effect, Entry

if TYPE_CHECKING:
    from nameserver.state.image import MetadataDelta

#: etcdserver/api/v3rpc/rpctypes/error.go ErrGRPCCompacted / ErrGRPCFutureRev
ERR_COMPACTED = "etcdserver: mvcc: required revision has been compacted"
ERR_FUTURE_REV = "etcdserver: mvcc: required revision is a future revision"


class Compacted(OutOfRange):
    """A revision below what is kept (at or below the compaction revision for Compact)."""

    def __init__(self, floor: int = 0) -> None:
        super().__init__(ERR_COMPACTED)
        #: the oldest revision still readable here (0: not known)
        self.floor = floor


class FutureRevision(OutOfRange):
    """A revision above the current one."""

    def __init__(self) -> None:
        super().__init__(ERR_FUTURE_REV)


def check_compact(revision: int, compacted: int, current: int) -> None:
    """etcd's checks of a Compact at ``revision`` (kvstore.go ``updateCompactRev``)."""
    if revision <= compacted:
        raise Compacted(compacted)
    if revision > current:
        raise FutureRevision()


def check_read(revision: int, floor: int, current: int) -> None:
    """etcd's checks of a read at ``revision`` (0 = current) kept from ``floor`` up."""
    if revision <= 0:
        return
    if revision > current:
        raise FutureRevision()
    if revision < floor:
        raise Compacted(floor)


def apply_compact_entry(delta: MetadataDelta, e: Entry, offset: int, effects: list[Effect]) -> int:
    """One ``compact`` entry: the compaction revision rises to the entry's revision, or the
    entry is rejected as etcd rejects it (at or below the current one, above the store
    revision before it)."""
    req = records_pb2.MvccCompaction.FromString(e.value)
    mvcc: MvccDelta = delta.sub("mvcc")
    check_compact(req.revision, mvcc.compacted, current_revision(delta, offset))
    record = Compaction(req.revision)
    mvcc.put(record)
    effects.append(Effect("mvcc", COMPACT_KEY, record.to_record()))
    return req.revision
