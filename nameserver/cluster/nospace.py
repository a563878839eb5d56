"""NOSPACE: which writes a raised NOSPACE alarm refuses, and the backend quota.

etcd 3.4 (``etcdserver/quota.go``, ``apply.go`` ``applierV3Capped``,
``api/v3rpc/quota.go``):

- ``--quota-backend-bytes`` (0: the default, 2 GiB; negative: no quota). Before a Put, a
  Txn or a LeaseGrant is proposed, the serving member checks ``size + cost < quota``; if
  not, it proposes ACTIVATE NOSPACE for itself and answers RESOURCE_EXHAUSTED
  "etcdserver: mvcc: database space exceeded" (:meth:`SpaceCheck.refuses`).
- While any member's NOSPACE alarm is raised, the writes that grow the store are refused,
  before proposing and again in apply (:class:`~nameserver.cluster.kind.AlarmGuards`: the alarm is in the image,
  so every member refuses the same requests): a Put, a Txn with a put in either branch
  (metaledger also looks into nested txns, which etcd's cost skips), a LeaseGrant.
  DeleteRange, Compact, LeaseRevoke, reads, and metaledger's own records (routes,
  offsets, replica groups: the messaging system keeps running) still go through.

The size is metaledger's, not a file's: the image's bytes as the quota accounting
counts them (:mod:`nameserver.quotas.apply`: key and value bytes of the kinds with a
quota) plus etcd's ``kvOverhead`` (256 bytes) per record, plus this member's kv history
(etcd's db holds every revision until a compaction): the bytes of the past versions its
index holds, 256 more each (:attr:`SpaceCheck.history_bytes`, node-local: the check runs on
the serving member only, before proposing). A request's cost is its entry's bytes plus 256
per put, or etcd's ``leaseOverhead`` (64) for a lease grant.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from nameserver.errors import ResourceExhausted
from nameserver.state.image import MetadataImage
from protos import records_pb2
from protos.etcdserverpb import rpc_pb2
from raftlog import Entry

#: etcd's ErrGRPCNoSpace text
NO_SPACE = "etcdserver: mvcc: database space exceeded"
#: etcd's DefaultQuotaBytes
DEFAULT_QUOTA_BYTES = 2 * 1024 * 1024 * 1024
#: etcd's kvOverhead and leaseOverhead (quota.go)
KV_OVERHEAD = 256
LEASE_OVERHEAD = 64

#: The entry types that can grow the store (the others never do, or are not capped).
_GROWING = frozenset({"kv", "txn", "lease"})
#: First byte of a KvOperation with ``put`` (field 1, length-delimited) and of a
#: LeaseOperation with ``grant`` (field 1, length-delimited).
_FIELD1_LEN = 0x0A


def no_space() -> ResourceExhausted:
    return ResourceExhausted(NO_SPACE)


def _txn_puts(txn: rpc_pb2.TxnRequest) -> int:
    """Puts in the branch with more of them (etcd's costTxn takes the larger branch)."""
    return max(_ops_puts(txn.success), _ops_puts(txn.failure))


def _ops_puts(ops: Sequence[rpc_pb2.RequestOp]) -> int:
    n = 0
    for op in ops:
        which = op.WhichOneof("request")
        if which == "request_put":
            n += 1
        elif which == "request_txn":
            n += _txn_puts(op.request_txn)
    return n


def puts_of(e: Entry) -> int:
    """How many records ``e`` may add (0: it cannot grow the store); a lease grant is 1."""
    if e.type not in _GROWING or not e.value:
        return 0
    if e.type == "txn":
        return _txn_puts(records_pb2.TxnOperation.FromString(e.value).txn)
    return 1 if e.value[0] == _FIELD1_LEN else 0  # kv put, lease grant


def cost(e: Entry) -> int:
    """etcd's quota cost of the request ``e`` carries (0: it grows nothing)."""
    puts = puts_of(e)
    if not puts:
        return 0
    if e.type == "lease":
        return LEASE_OVERHEAD
    return len(e.value) + KV_OVERHEAD * puts


def image_bytes(image: MetadataImage, known: dict[str, tuple[object, int]] | None = None) -> int:
    """The size the backend quota is checked against (see the module docstring).

    ``known``: each kind's size by field, with the sub-image it was counted on (read and
    updated here): a sub-image that a new image shares with an older one (a put changes
    only ``kv``) is not counted again, and no delta is made for it."""
    size = 0
    for kind in image.registry.quota_kinds:
        field = kind.field
        sub = image.__dict__[field]
        seen = known.get(field) if known is not None else None
        if seen is not None and seen[0] is sub:
            size += seen[1]
            continue
        assert kind.usage is not None
        # reads only: the usage counters of an untouched sub-delta (its own undo log)
        keys, nbytes = kind.usage(kind.delta(sub))
        counted = nbytes + KV_OVERHEAD * keys
        if known is not None:
            known[field] = (sub, counted)
        size += counted
    return size


def quota_bytes(configured: int) -> int:
    """The quota in force for ``--quota-backend-bytes`` (0: etcd's default; <0: none)."""
    return DEFAULT_QUOTA_BYTES if configured == 0 else configured


class SpaceCheck:
    """The serving member's check before it proposes (etcd's quotaKVServer and
    quotaLeaseServer): refuse a growing write while NOSPACE is raised, or when it would
    take the image past the quota (then NOSPACE is to be raised for this member)."""

    def __init__(self, configured_quota_bytes: int) -> None:
        self.quota = quota_bytes(configured_quota_bytes)
        self._image: MetadataImage | None = None
        self._size = 0
        # each quota kind's size, with the sub-image it was counted on (see image_bytes)
        self._known: dict[str, tuple[object, int]] = {}
        #: this member's past kv versions' bytes (set by the node: its history index)
        self.history_bytes: Callable[[], int] | None = None

    def size(self, image: MetadataImage) -> int:
        """:func:`image_bytes` (computed once per published image) plus the history's."""
        if image is not self._image:
            self._size = image_bytes(image, self._known)
            self._image = image
        return self._size + (self.history_bytes() if self.history_bytes is not None else 0)

    def refuses(self, image: MetadataImage, e: Entry) -> str | None:
        """None if ``e`` may be proposed; "alarm" if a NOSPACE alarm is raised, "quota" if
        it would exceed the quota (the caller raises the alarm, then refuses)."""
        if e.type not in _GROWING:
            return None
        if image.alarms.nospace:
            return "alarm" if puts_of(e) else None
        if self.quota < 0:
            return None
        if e.type == "txn" and self.size(image) + _txn_bound(e) < self.quota:
            return None  # far from the quota: no need to decode the txn for its cost
        c = cost(e)
        if c and self.size(image) + c >= self.quota:
            return "quota"
        return None


def _txn_bound(e: Entry) -> int:
    """An upper bound of a txn entry's cost without decoding it (a put takes >= 2 bytes)."""
    return len(e.value) + KV_OVERHEAD * (len(e.value) // 2)
