"""Replicator offsets: the apply rules of ``offset`` entries (docs/semantics.md, "Replicator
offsets").

A commit is a compare-and-set on (job, partition) that carries the worker's lease and
fencing token. Every check runs here, inside apply, against the image as the entry finds
it, so two racing commits cannot both win and every node decides alike. Like the rest of
the state machine this module reads no clock and imports nothing from gRPC (the service
is :mod:`nameserver.offsets.service`).

Rules of a commit, in the order they are checked (the first that fails rejects it whole):

1. the request is well formed (fields named in the message; INVALID_ARGUMENT);
2. the lease exists: NOT_FOUND with etcd's "requested lease not found" (an expired lease
   is gone once the leader's expiry entry is applied, within ``EXPIRE_INTERVAL_S`` of its
   deadline);
3. the fencing token belongs to the lease: it is the lease's grant revision
   (``Lease.granted_offset``) or the create revision of a key attached to the lease (a
   lock's ownership key), else FAILED_PRECONDITION;
4. ``expected_version`` (if > 0) equals the stored version, ``epoch`` (if > 0) equals the
   stored epoch (FAILED_PRECONDITION);
5. the token is not older than the newest token that committed to this (job, partition):
   a newer holder always has a later token (FAILED_PRECONDITION, "stale fencing token");
6. after a reset, a token older than the reset must come with the new epoch: a stale
   worker that never saw the reset cannot undo it (FAILED_PRECONDITION);
7. ``position`` does not go down: offsets are opaque bytes (Redis replid+offset, RocketMQ
   queue offsets), so the order is the int64 ``position`` the worker sends with them,
   compared numerically; an equal position is accepted (an idempotent re-commit). Only a
   reset moves it back (FAILED_PRECONDITION).

A reset (an operator's act) needs no lease: it sets offset and position (backwards too),
bumps the epoch, records its revision as ``reset_revision`` and keeps the token floor.

"Older" and "later" (rules 5 and 6) are the order in which tokens and resets came about,
:func:`fence_of`: a key's create revision is a store revision, a lease's grant token and a
reset's ``reset_revision`` are log offsets, and once the kv store counts etcd's way
(:mod:`nameserver.kv.revision`) the two no longer agree. So a grant and a reset also record
the store revision they happened at (``Lease.granted_revision``,
``CommittedOffset.reset_store_revision``; a commit with a grant token keeps it as
``fencing_revision``), and events are ordered by (store revision, offset). In a store that
counts by offset the revision is the offset and the order is the plain number's, as
before.
"""

from __future__ import annotations

from dataclasses import replace

from nameserver.checks import check_name, check_non_negative, invalid
from nameserver.errors import FailedPrecondition, NotFound
from nameserver.offsets.records import CommittedOffset, offset_key
from nameserver.state.image import MetadataDelta
from protos import records_pb2
from raftlog import Effect, Entry

#: Largest offset value, in bytes.
MAX_OFFSET_BYTES = 64 * 1024

LEASE_NOT_FOUND = "etcdserver: requested lease not found"


def check_job(job: str, *, prefix: bool = False) -> None:
    """A job name, or (``prefix``) the start of job names, which may be empty (all jobs)."""
    if prefix and not job:
        return
    check_name("job", job)


def check_target(job: str, partition: str, offset: bytes, position: int, expected: int) -> None:
    """The fields a commit and a reset share."""
    check_name("job", job)
    check_name("partition", partition)
    if len(offset) > MAX_OFFSET_BYTES:
        raise invalid(f"offset is too large: {len(offset)} bytes > limit {MAX_OFFSET_BYTES}")
    check_non_negative("position", position)
    check_non_negative("expected_version", expected)


def check_commit(c: records_pb2.OffsetCommit) -> None:
    check_target(c.job, c.partition, c.offset, c.position, c.expected_version)
    if c.lease_id <= 0:
        raise invalid(f"lease_id must be a granted lease's ID (lease_id: {c.lease_id})")
    if c.fencing_token <= 0:
        raise invalid(f"fencing_token must be > 0 (fencing_token: {c.fencing_token})")
    check_non_negative("epoch", c.epoch)


def check_reset(r: records_pb2.OffsetReset) -> None:
    check_target(r.job, r.partition, r.offset, r.position, r.expected_version)


def where(job: str, partition: str) -> str:
    return f"(job {job!r}, partition {partition!r})"


#: where a fencing token or a reset stands among all of them: (store revision, offset)
Fence = tuple[int, int]


def fence_of(value: int, revision: int) -> Fence:
    """The order of a token or a reset: ``value`` with ``revision`` -1 is a store revision
    (a key's create revision; or an offset taken while the store counted by offset, when
    offset and revision are one) -> ``(value, 0)``; else ``value`` is the offset of a grant
    or a reset made while the store counted etcd's way and stood at ``revision`` ->
    ``(revision, value)``. This is the order in which they came about: a key created at
    revision r comes after every event at a revision below r and before every other event
    at r (creating it moved the store to r), and events at one revision follow their
    offsets."""
    return (value, 0) if revision < 0 else (revision, value)


def token_fence(delta: MetadataDelta, lease_id: int, token: int) -> Fence | None:
    """The order of a valid fencing token of a lease (None: not one): its grant token, or the
    create revision of a key attached to it (etcd v3lock's lock token is its ownership key's
    create revision). A number that is both (in a store counting etcd's way an offset and a
    revision may be equal) is taken at the earlier of the two."""
    lease = delta.leases.get(lease_id)
    if lease is None:
        return None
    found: Fence | None = None
    if token == lease.granted_offset:
        found = fence_of(token, lease.granted_revision)
    for key in delta.kv.keys_of_lease(lease_id):
        kv = delta.kv.get(key)
        if kv is not None and kv.create_revision == token:
            at = fence_of(token, -1)
            return at if found is None or at < found else found
    return found


def _check_versions(
    existing: CommittedOffset | None, expected_version: int, epoch: int, at: str
) -> None:
    version = existing.version if existing else 0
    if expected_version and expected_version != version:
        raise FailedPrecondition(
            f"metaledger: expected_version {expected_version} but {at} is at version {version}",
        )
    current_epoch = existing.epoch if existing else 0
    if epoch and epoch != current_epoch:
        raise FailedPrecondition(
            f"metaledger: epoch {epoch} is not the current epoch {current_epoch} of {at}",
        )


def apply_offset_entry(
    delta: MetadataDelta, e: Entry, rev: int, effects: list[Effect]
) -> CommittedOffset:
    """One ``offset`` entry (the registry's rule)."""
    return apply_offset(delta, records_pb2.OffsetOperation.FromString(e.value), rev, effects)


def apply_offset(
    delta: MetadataDelta, op: records_pb2.OffsetOperation, rev: int, effects: list[Effect]
) -> CommittedOffset:
    """One ``offset`` entry; returns the new committed offset."""
    which = op.WhichOneof("op")
    if which == "commit":
        new = commit(delta, op.commit, rev)
    elif which == "reset":
        new = reset(delta, op.reset, rev)
    else:
        raise invalid("offset entry carries no operation")
    delta.offsets.put(new)
    effects.append(Effect("offset", new.key, new.to_record()))
    return new


def commit(delta: MetadataDelta, c: records_pb2.OffsetCommit, rev: int) -> CommittedOffset:
    check_commit(c)
    at = where(c.job, c.partition)
    if delta.leases.get(c.lease_id) is None:
        raise NotFound(
            f"{LEASE_NOT_FOUND} (lease_id {c.lease_id:x}: expired, revoked or never granted)",
        )
    fence = token_fence(delta, c.lease_id, c.fencing_token)
    if fence is None:
        raise FailedPrecondition(
            f"metaledger: fencing_token {c.fencing_token} is not a token of lease "
            f"{c.lease_id:x} (its grant offset, or the create revision of a key attached "
            "to it)",
        )
    # a grant token's store revision, kept to order it later (-1: the token is one)
    fencing_revision = fence[0] if fence[1] else -1
    existing = delta.offsets.get(offset_key(c.job, c.partition))
    _check_versions(existing, c.expected_version, c.epoch, at)
    if existing is None:
        return CommittedOffset(
            c.job,
            c.partition,
            c.offset,
            c.position,
            1,
            1,
            c.lease_id,
            c.fencing_token,
            rev,
            rev,
            fencing_revision=fencing_revision,
        )
    if fence < fence_of(existing.fencing_token, existing.fencing_revision):
        raise FailedPrecondition(
            f"metaledger: stale fencing_token {c.fencing_token}: {at} was committed with the "
            f"newer fencing token {existing.fencing_token}",
        )
    reset_at = fence_of(existing.reset_revision, existing.reset_store_revision)
    if reset_at > fence and c.epoch != existing.epoch:
        raise FailedPrecondition(
            f"metaledger: {at} was reset at revision {existing.reset_revision} "
            f"(epoch {existing.epoch}) after fencing_token {c.fencing_token} was issued: "
            f"commit with epoch {existing.epoch} or a newer token",
        )
    if c.position < existing.position:
        raise FailedPrecondition(
            f"metaledger: offset of {at} would move backwards: position {c.position} < "
            f"committed position {existing.position} (only Reset moves it back)",
        )
    return replace(
        existing,
        offset=c.offset,
        position=c.position,
        version=existing.version + 1,
        lease_id=c.lease_id,
        fencing_token=c.fencing_token,
        mod_revision=rev,
        fencing_revision=fencing_revision,
    )


def reset(delta: MetadataDelta, r: records_pb2.OffsetReset, rev: int) -> CommittedOffset:
    check_reset(r)
    existing = delta.offsets.get(offset_key(r.job, r.partition))
    _check_versions(existing, r.expected_version, 0, where(r.job, r.partition))
    store_rev = delta.counted_revision()  # -1: the store counts by offset, and rev is its revision
    if existing is None:
        return CommittedOffset(
            r.job,
            r.partition,
            r.offset,
            r.position,
            1,
            1,
            0,
            0,
            rev,
            rev,
            rev,
            reset_store_revision=store_rev,
        )
    return replace(
        existing,
        offset=r.offset,
        position=r.position,
        version=existing.version + 1,
        epoch=existing.epoch + 1,
        lease_id=0,
        mod_revision=rev,
        reset_revision=rev,
        reset_store_revision=store_rev,
    )
