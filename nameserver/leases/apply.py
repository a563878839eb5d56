"""The apply rules of ``lease`` entries: grant, revoke, refresh, expire.

Time comes from the entry (``timestamp_ms``: the clock of the leader that appended it),
never a clock; a checkpoint's own ``refreshed_ms`` (a proposer's clock) is read only in
old logs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from nameserver.errors import FailedPrecondition, InvalidArgument, NotFound, OutOfRange
from nameserver.leases.records import Lease, lease_key
from nameserver.state.image import MetadataDelta
from protos import records_pb2
from raftlog import Effect, Entry

# -------------------------------------------------------------------- leases
LEASE_NOT_FOUND = "etcdserver: requested lease not found"
#: etcd's MaxLeaseTTL
MAX_LEASE_TTL_S = 9_000_000_000


def apply_lease(
    delta: MetadataDelta,
    op: records_pb2.LeaseOperation,
    e: Entry,
    rev: int,
    effects: list[Effect],
) -> Any:
    """One ``lease`` entry. Time comes from the entry (``timestamp_ms``), never a clock."""
    which = op.WhichOneof("op")
    leases = delta.leases
    if which == "grant":
        g = op.grant
        if g.id <= 0:
            raise InvalidArgument(f"metaledger: lease ID must be positive (ID: {g.id})")
        if g.ttl_s <= 0:
            raise InvalidArgument(f"etcdserver: TTL must be positive (TTL: {g.ttl_s})")
        if g.ttl_s > MAX_LEASE_TTL_S:
            raise OutOfRange("etcdserver: too large lease TTL")
        if leases.get(g.id) is not None:
            raise FailedPrecondition("etcdserver: lease already exists")
        lease = Lease(g.id, g.ttl_s, rev, e.timestamp_ms, delta.counted_revision())
        leases.put(lease)
        effects.append(Effect("lease", lease_key(lease.id), lease.to_record()))
        return lease
    if which == "revoke":
        if leases.get(op.revoke.id) is None:
            raise NotFound(LEASE_NOT_FOUND)
        return _drop_lease(delta, op.revoke.id, effects)
    if which == "refresh":
        refreshed = []
        for cp in op.refresh.checkpoints:
            old = leases.get(cp.id)
            if old is None:
                continue
            if cp.refreshed_ms:
                # as written before stamps came from the leader only: the proposer's clock,
                # and a lease already past its deadline is not revived (old logs replay so)
                at = min(cp.refreshed_ms, e.timestamp_ms)
                if at <= old.last_refresh_ms or at > old.deadline_ms:
                    continue
            else:
                # refreshed when the leader appended the checkpoint, by the leader's clock: a
                # little after the keepalives it carries, never before. A lease still here
                # was not expired: a holder was told it lives, so it lives on.
                at = e.timestamp_ms
                if at <= old.last_refresh_ms:
                    continue
            new = replace(old, last_refresh_ms=at)
            leases.put(new)
            effects.append(Effect("lease", lease_key(new.id), new.to_record()))
            refreshed.append(new.id)
        return refreshed
    if which == "expire":
        expired = []
        for lease_id in op.expire.ids:
            current = leases.get(lease_id)
            # re-checked with the entry's time: a refresh applied since wins
            if current is None or e.timestamp_ms < current.deadline_ms:
                continue
            _drop_lease(delta, lease_id, effects)
            expired.append(lease_id)
        return expired
    raise InvalidArgument("lease entry carries no operation")


def _drop_lease(delta: MetadataDelta, lease_id: int, effects: list[Effect]) -> list[bytes]:
    """Delete a lease and every key attached to it (as delete effects)."""
    keys = sorted(delta.kv.keys_of_lease(lease_id))
    for key in keys:
        delta.kv.delete(key)
        effects.append(Effect("kv", key, delete=True))
    delta.leases.delete(lease_id)
    effects.append(Effect("lease", lease_key(lease_id), delete=True))
    return keys


def apply_lease_entry(delta: MetadataDelta, e: Entry, rev: int, effects: list[Effect]) -> Any:
    """One ``lease`` entry (the registry's rule)."""
    return apply_lease(delta, records_pb2.LeaseOperation.FromString(e.value), e, rev, effects)
