"""Quotas per record type: keys and bytes, so one runaway type cannot fill the cluster.

etcd has one global quota (its backend size). metaledger keeps one per record type
(the kinds of :mod:`nameserver.kinds` that declare ``usage``). The limits are records of the log (type ``quota``, set through
``metaledger.v1.Quotas/Set``), so every node applies the same ones: apply stays
deterministic. A type without a record has no limit.

Usage is counted incrementally by the deltas (``key_delta``/``byte_delta``; each kind's
``usage`` reads them), never by scanning. A request is checked once after all its
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

from collections.abc import Sequence

from nameserver.errors import InvalidArgument, ResourceExhausted
from nameserver.quotas.records import Quota
from nameserver.state.image import MetadataDelta
from nameserver.state.registry import Registry
from protos import records_pb2
from raftlog import Effect, Entry

#: Per record type with a quota: (keys, bytes).
Usage = dict[str, tuple[int, int]]


def quota_types(registry: Registry) -> tuple[str, ...]:
    """The record types that have a quota: the kinds that declare ``usage``."""
    return registry.quota_types


def in_force(delta: MetadataDelta, entries: Sequence[Entry]) -> bool:
    """Whether a limit can apply to this request: a quota is set (as the delta would
    publish it, without making the quota sub-delta when nothing touched it), or the request
    sets one. A request with no quota in force can exceed nothing."""
    quotas = delta.made("quotas")
    if bool(delta.image.quotas.quotas) if quotas is None else quotas.any():
        return True
    for e in entries:
        if e.type == "quota":
            return True
    return False


def usage(delta: MetadataDelta) -> Usage:
    """Keys and bytes of each quota type as the delta would publish them (O(1) per type)."""
    return {k.name: k.usage(delta.sub(k.field)) for k in delta.registry.quota_kinds}  # type: ignore[misc]


def limit_of(delta: MetadataDelta, record_type: str) -> Quota:
    """The limits of a type (a type without a quota record has none: 0 = unlimited)."""
    return delta.quotas.get(record_type) or Quota(record_type)


def check(delta: MetadataDelta, before: Usage) -> None:
    """Reject (RESOURCE_EXHAUSTED) if the request grew a type past its quota."""
    after = usage(delta)
    for record_type in delta.registry.quota_types:
        (keys0, bytes0), (keys, size) = before[record_type], after[record_type]
        if (keys, size) == (keys0, bytes0):
            continue
        quota = limit_of(delta, record_type)
        if quota.max_keys and keys > quota.max_keys and keys > keys0:
            raise exceeded(record_type, keys, "keys", quota.max_keys)
        if quota.max_bytes and size > quota.max_bytes and size > bytes0:
            raise exceeded(record_type, size, "bytes", quota.max_bytes)


class QuotaGuard:
    """The quota kind's check around every request (:class:`~nameserver.state.registry.
    RequestGuard`): usage is counted before and after only when a limit can apply."""

    def before(self, delta: MetadataDelta, entries: Sequence[Entry]) -> Usage | None:
        return usage(delta) if in_force(delta, entries) else None

    def after(self, delta: MetadataDelta, before: Usage) -> None:
        check(delta, before)


def exceeded(record_type: str, value: int, unit: str, limit: int) -> ResourceExhausted:
    return ResourceExhausted(
        f"metaledger: quota exceeded for record type {record_type}: {value} {unit} > limit {limit}",
    )


def validate(q: records_pb2.QuotaRecord, types: Sequence[str]) -> None:
    """``types``: the record types that have a quota (:func:`quota_types`)."""
    if q.record_type not in types:
        raise InvalidArgument(
            f"metaledger: record_type {q.record_type!r} has no quota (one of: {', '.join(types)})",
        )
    for field, value in (("max_keys", q.max_keys), ("max_bytes", q.max_bytes)):
        if value < 0:
            raise InvalidArgument(f"metaledger: {field} must be >= 0, 0 = unlimited ({value})")


def apply_quota(delta: MetadataDelta, q: records_pb2.QuotaRecord, effects: list[Effect]) -> Quota:
    """One ``quota`` entry: set the limits of a type (both 0: back to the default)."""
    validate(q, delta.registry.quota_types)
    quota = Quota(q.record_type, q.max_keys, q.max_bytes)
    key = q.record_type.encode()
    if quota == Quota(q.record_type):
        if delta.quotas.get(q.record_type) is not None:
            delta.quotas.delete(q.record_type)
            effects.append(Effect("quota", key, delete=True))
    elif delta.quotas.get(q.record_type) != quota:
        delta.quotas.put(quota)
        effects.append(Effect("quota", key, quota.to_record()))
    return quota


def apply_quota_entry(delta: MetadataDelta, e: Entry, rev: int, effects: list[Effect]) -> Quota:
    """One ``quota`` entry (the registry's rule)."""
    return apply_quota(delta, records_pb2.QuotaRecord.FromString(e.value), effects)
