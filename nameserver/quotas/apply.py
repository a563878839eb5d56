"""Quotas per record type: keys and bytes, so one runaway type cannot fill the cluster.

etcd has one global quota (its backend size). metaledger keeps one per record type
(``QUOTA_TYPES``). The limits are records of the log (type ``quota``, set through
``metaledger.v1.Quotas/Set``), so every node applies the same ones: apply stays
deterministic. A type without a record has :data:`DEFAULT_QUOTAS`' limit (unlimited).

Usage is counted incrementally by the deltas (``key_delta``/``byte_delta``, see
:mod:`nameserver.state.image`), never by scanning. A request is checked once after all its
entries applied: if it grew a type past its limit (keys or bytes), the whole request is
rejected with RESOURCE_EXHAUSTED naming the type and the state machine rolls it back. A
request that shrinks a type (a delete, a smaller value) always passes, even over a limit
lowered below the current usage.

Bytes are the key and value lengths of kv records, and the key and offset bytes of
replicator offsets, the broker name and encoded record of replica groups; leases count
keys only. Route records (``broker``, ``topic``, ``kvconfig``) count their keys and the
bytes of their names, addresses and values.
"""

from __future__ import annotations

from nameserver.errors import InvalidArgument, ResourceExhausted
from nameserver.quotas.records import Quota
from nameserver.state.image import MetadataDelta
from protos import records_pb2
from raftlog import Effect

#: Record types that have a quota.
QUOTA_TYPES = ("kv", "lease", "offset", "replica_group", "broker", "topic", "kvconfig")
#: Limits of types that have no quota record: none (0 = unlimited).
DEFAULT_QUOTAS: dict[str, Quota] = {t: Quota(t) for t in QUOTA_TYPES}

Usage = dict[str, tuple[int, int]]


def usage(delta: MetadataDelta) -> Usage:
    """Keys and bytes of each quota type as the delta would publish them (O(1) per type)."""
    img = delta.image
    return {
        "kv": (delta.kv.key_count, delta.kv.byte_count),
        "lease": (len(img.leases) + delta.leases.key_delta, 0),
        "offset": (
            len(img.offsets) + delta.offsets.key_delta,
            img.offsets.value_bytes + delta.offsets.byte_delta,
        ),
        "replica_group": (
            len(img.replica_groups) + delta.replica_groups.key_delta,
            img.replica_groups.value_bytes + delta.replica_groups.byte_delta,
        ),
        "broker": (delta.brokers.count, delta.brokers.byte_count),
        "topic": (delta.topics.count, delta.topics.byte_count),
        "kvconfig": (delta.kvconfig.count, delta.kvconfig.byte_count),
    }


def limit_of(delta: MetadataDelta, record_type: str) -> Quota:
    return delta.quotas.get(record_type) or DEFAULT_QUOTAS[record_type]


def check(delta: MetadataDelta, before: Usage) -> None:
    """Reject (RESOURCE_EXHAUSTED) if the request grew a type past its quota."""
    after = usage(delta)
    for record_type in QUOTA_TYPES:
        (keys0, bytes0), (keys, size) = before[record_type], after[record_type]
        if (keys, size) == (keys0, bytes0):
            continue
        quota = limit_of(delta, record_type)
        if quota.max_keys and keys > quota.max_keys and keys > keys0:
            raise exceeded(record_type, keys, "keys", quota.max_keys)
        if quota.max_bytes and size > quota.max_bytes and size > bytes0:
            raise exceeded(record_type, size, "bytes", quota.max_bytes)


def exceeded(record_type: str, value: int, unit: str, limit: int) -> ResourceExhausted:
    return ResourceExhausted(
        f"metaledger: quota exceeded for record type {record_type}: {value} {unit} > limit {limit}",
    )


def validate(q: records_pb2.QuotaRecord) -> None:
    if q.record_type not in QUOTA_TYPES:
        raise InvalidArgument(
            f"metaledger: record_type {q.record_type!r} has no quota "
            f"(one of: {', '.join(QUOTA_TYPES)})",
        )
    for field, value in (("max_keys", q.max_keys), ("max_bytes", q.max_bytes)):
        if value < 0:
            raise InvalidArgument(f"metaledger: {field} must be >= 0, 0 = unlimited ({value})")


def apply_quota(delta: MetadataDelta, q: records_pb2.QuotaRecord, effects: list[Effect]) -> Quota:
    """One ``quota`` entry: set the limits of a type (both 0: back to the default)."""
    validate(q)
    quota = Quota(q.record_type, q.max_keys, q.max_bytes)
    key = q.record_type.encode()
    if quota == DEFAULT_QUOTAS[q.record_type]:
        if delta.quotas.get(q.record_type) is not None:
            delta.quotas.delete(q.record_type)
            effects.append(Effect("quota", key, delete=True))
    elif delta.quotas.get(q.record_type) != quota:
        delta.quotas.put(quota)
        effects.append(Effect("quota", key, quota.to_record()))
    return quota
