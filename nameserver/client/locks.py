"""The locks and elections surface: the server's ``v3lockpb.Lock`` (etcd's mutex recipe) and
``v3electionpb.Election``, each held through a lease the recipe grants and keeps alive.

Locks::

    with client.lock("jobs/compactor", ttl_s=10) as held:    # grant + keep alive + Lock
        client.txn([held.is_owner()], success=[Op.put("jobs/out", "x")])  # a guarded write
    # left: Unlock, keeper stopped, lease revoked

``held.token`` is the fencing token: the create revision of the ownership key ``held.key``.
A write guarded by ``Compare.create(held.key) == held.token`` (that is ``held.is_owner()``, etcd's
``Mutex.IsOwner``) runs its failure branch once the holder has lost the lock, even if it does not
know it yet (it was paused past its TTL): the key was deleted with the lease, and a later holder's
key has a higher create revision.

Elections::

    e = client.election("brokers/a")
    e.campaign("10.0.0.1:10911", ttl_s=10)   # blocks until leader; e.leader_key.rev is the token
    e.proclaim("10.0.0.1:10912")             # FailedPrecondition "election: not leader" if stale
    e.leader()                               # KeyValue of the leader, None if there is none
    for kv in e.observe(): ...               # the leader's key on every change
    e.resign()

A recipe that finds its lease gone raises :class:`~nameserver.client.leases.LeaseLost`.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import grpc

from nameserver.client.errors import (
    ClientError,
    FailedPrecondition,
    InvalidArgument,
    LeaseLost,
    NotFound,
    Unavailable,
    error_from_rpc,
)
from nameserver.client.kv import Bytesish, Compare, Comparison, KeyValue, to_bytes
from nameserver.client.leases import (
    DEFAULT_TTL_S,
    KeepAlive,
    check_lease_id,
    check_ttl,
    lease_grant,
    lease_revoke,
)
from nameserver.client.transport import Transport
from protos.etcdserverpb import (
    rpc_pb2,
    v3election_pb2,
    v3election_pb2_grpc,
    v3lock_pb2,
    v3lock_pb2_grpc,
)

__all__ = ["Election", "HeldLock", "LeaderKey", "LocksApi", "acquire", "lock", "release"]


@dataclass(frozen=True, slots=True)
class LeaderKey:
    """Proof of leadership (etcd's LeaderKey): ``rev``, the key's create revision, is the token."""

    name: bytes
    key: bytes
    rev: int
    lease: int

    def to_proto(self) -> v3election_pb2.LeaderKey:
        return v3election_pb2.LeaderKey(
            name=self.name, key=self.key, rev=self.rev, lease=self.lease
        )

    def is_owner(self) -> Comparison:
        """The txn guard "still the leader"."""
        return Compare.create(self.key) == self.rev


# --------------------------------------------------------------------------- locks


@dataclass(frozen=True, slots=True)
class HeldLock:
    """A lock held through ``client.lock``: ``token`` is the fencing token (the create revision
    of ``key``), ``lost`` is set when the lease behind it is gone."""

    name: bytes
    key: bytes
    token: int
    lease_id: int
    keeper: KeepAlive

    @property
    def lost(self) -> threading.Event:
        return self.keeper.lost

    def is_owner(self) -> Comparison:
        """The txn guard ``create_revision(key) == token`` (etcd's ``Mutex.IsOwner``)."""
        return Compare.create(self.key) == self.token


def _wait_budget(timeout_s: float | None) -> float:
    if timeout_s is None:
        return math.inf
    if timeout_s <= 0:
        raise InvalidArgument(f"timeout_s must be > 0 (got {timeout_s!r})")
    return timeout_s


def acquire(
    client: Transport, name: Bytesish, lease_id: int, timeout_s: float | None = None
) -> bytes:
    """The Lock RPC alone: block until the lock is held through ``lease_id`` (or ``timeout_s``
    passes: DeadlineExceeded, and the server withdraws the waiter); returns the key. Safe to
    retry on another endpoint: the same lease finds its own key."""
    n = to_bytes(name)
    if not n:
        raise InvalidArgument("name: a lock name must not be empty")
    check_lease_id(lease_id)
    req = v3lock_pb2.LockRequest(name=n, lease=lease_id)
    resp = client._call(
        lambda s: v3lock_pb2_grpc.LockStub(s.channel).Lock,
        req,
        write=False,
        timeout_s=_wait_budget(timeout_s),
    )
    return bytes(resp.key)


def release(client: Transport, key: Bytesish) -> int:
    """The Unlock RPC: delete the ownership key; returns the revision."""
    req = v3lock_pb2.UnlockRequest(key=to_bytes(key))
    resp = client._call(lambda s: v3lock_pb2_grpc.LockStub(s.channel).Unlock, req, write=True)
    return int(resp.header.revision)


def _create_revision(client: Transport, key: bytes, lease_id: int) -> int:
    got = client._call(lambda s: s.kv.Range, rpc_pb2.RangeRequest(key=key), write=False)
    if not got.kvs:
        raise LeaseLost(f"lease {lease_id:x} ended before its key {key!r} could be read")
    return int(got.kvs[0].create_revision)


@contextlib.contextmanager
def lock(
    client: Transport,
    name: Bytesish,
    ttl_s: int = DEFAULT_TTL_S,
    timeout_s: float | None = None,
    on_lost: Callable[[str], None] | None = None,
) -> Iterator[HeldLock]:
    """Grant a lease, keep it alive, take the lock, yield a :class:`HeldLock`; on exit unlock,
    stop the keeper and revoke the lease (whatever happened inside)."""
    check_ttl(ttl_s)
    _wait_budget(timeout_s)
    lease = lease_grant(client, ttl_s)
    keeper: KeepAlive | None = None
    key = b""
    try:
        keeper = KeepAlive(client, lease.id, on_lost=on_lost).start()
        key = acquire(client, name, lease.id, timeout_s)
        token = _create_revision(client, key, lease.id)
        yield HeldLock(to_bytes(name), key, token, lease.id, keeper)
    finally:
        if keeper is not None:
            keeper.stop()
        with contextlib.suppress(ClientError):
            if key and keeper is not None and keeper.alive:
                release(client, key)
        with contextlib.suppress(ClientError):
            lease_revoke(client, lease.id)  # NotFound when it already expired


# --------------------------------------------------------------------------- elections


def _election_stub(s: Any) -> Any:
    return v3election_pb2_grpc.ElectionStub(s.channel)


class Election:
    """One election (etcd's ``concurrency.Election`` over the Election service)."""

    def __init__(self, client: Transport, name: Bytesish) -> None:
        self.client = client
        self.name = to_bytes(name)
        if not self.name:
            raise InvalidArgument("name: an election name must not be empty")
        self.leader_key: LeaderKey | None = None
        self.keeper: KeepAlive | None = None
        self._own_lease = False

    def campaign(
        self,
        value: Bytesish,
        ttl_s: int = DEFAULT_TTL_S,
        lease_id: int = 0,
        timeout_s: float | None = None,
        on_lost: Callable[[str], None] | None = None,
    ) -> LeaderKey:
        """Block until leader (or ``timeout_s``); returns the LeaderKey. Without ``lease_id``
        a lease of ``ttl_s`` is granted and kept alive (and revoked by :meth:`resign`)."""
        _wait_budget(timeout_s)
        if lease_id:
            check_lease_id(lease_id)
        else:
            check_ttl(ttl_s)
            lease_id = lease_grant(self.client, ttl_s).id
            self._own_lease = True
            try:
                self.keeper = KeepAlive(self.client, lease_id, on_lost=on_lost).start()
            except BaseException:
                self._drop_lease(lease_id)
                raise
        req = v3election_pb2.CampaignRequest(name=self.name, lease=lease_id, value=to_bytes(value))
        try:
            resp = self.client._call(
                lambda s: _election_stub(s).Campaign,
                req,
                write=False,
                timeout_s=_wait_budget(timeout_s),
            )
        except BaseException:
            self._drop_lease(lease_id)
            raise
        lk = resp.leader
        self.leader_key = LeaderKey(lk.name, lk.key, lk.rev, lk.lease)
        return self.leader_key

    def _held(self) -> LeaderKey:
        if self.leader_key is None:
            raise FailedPrecondition("election: not leader (campaign first)")
        return self.leader_key

    def proclaim(self, value: Bytesish) -> int:
        req = v3election_pb2.ProclaimRequest(leader=self._held().to_proto(), value=to_bytes(value))
        resp = self.client._call(lambda s: _election_stub(s).Proclaim, req, write=False)
        return int(resp.header.revision)

    def resign(self) -> int:
        """Give up leadership (guarded: FailedPrecondition if it was already lost); the lease
        this election granted is revoked either way."""
        held = self._held()
        self.leader_key = None
        try:
            req = v3election_pb2.ResignRequest(leader=held.to_proto())
            resp = self.client._call(lambda s: _election_stub(s).Resign, req, write=False)
            return int(resp.header.revision)
        finally:
            self._drop_lease(held.lease)

    def _drop_lease(self, lease_id: int) -> None:
        if self.keeper is not None:
            self.keeper.stop()
            self.keeper = None
        if self._own_lease:
            self._own_lease = False
            with contextlib.suppress(ClientError):
                lease_revoke(self.client, lease_id)

    def leader(self) -> KeyValue | None:
        """The current leader's key (its value is the proclamation), None if nobody leads."""
        req = v3election_pb2.LeaderRequest(name=self.name)
        try:
            resp = self.client._call(lambda s: _election_stub(s).Leader, req, write=False)
        except NotFound:
            return None
        return KeyValue.from_proto(resp.kv)

    def observe(self, timeout_s: float | None = None) -> Iterator[KeyValue]:
        """The leader's key now and on every change, until ``timeout_s`` (None: forever) or
        the caller stops iterating; a broken stream resumes on the next endpoint without
        repeating what was already seen."""
        deadline = time.monotonic() + _wait_budget(timeout_s)
        endpoints = self.client.endpoints
        index = self.client._current
        last: tuple[bytes, int] | None = None
        while time.monotonic() < deadline:
            endpoint = endpoints[index % len(endpoints)]
            remaining = deadline - time.monotonic()
            stream = _election_stub(self.client._stubs_for(endpoint)).Observe(
                v3election_pb2.LeaderRequest(name=self.name),
                timeout=None if math.isinf(remaining) else remaining,
            )
            try:
                for resp in stream:
                    seen = (resp.kv.key, resp.kv.mod_revision)
                    if seen != last:
                        last = seen
                        yield KeyValue.from_proto(resp.kv)
                return
            except grpc.RpcError as err:
                exc = error_from_rpc(err, endpoint)
                if exc.code == grpc.StatusCode.DEADLINE_EXCEEDED:
                    return
                if not isinstance(exc, Unavailable):
                    raise exc from None
                index += 1
                time.sleep(0.05)
            finally:
                stream.cancel()


class LocksApi(Transport):
    """``lock()`` and ``election()``: the recipes above on this client."""

    def lock(
        self,
        name: Bytesish,
        ttl_s: int = DEFAULT_TTL_S,
        timeout_s: float | None = None,
        on_lost: Callable[[str], None] | None = None,
    ) -> AbstractContextManager[HeldLock]:
        """``with client.lock(name) as held:`` hold the lock (``held.token`` fences writes)."""
        return lock(self, name, ttl_s, timeout_s, on_lost)

    def election(self, name: Bytesish) -> Election:
        return Election(self, name)
