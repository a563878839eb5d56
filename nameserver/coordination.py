"""Leases, locks and elections for the client library (thin methods on :class:`Client` call these).

Leases (etcd's Lease service)::

    lease = client.lease_grant(10)              # Lease(id, ttl_s, fencing_token)
    with client.keep_alive(lease.id) as keeper:  # a background thread renews it every TTL/3
        ...                                      # keeper.lost is set when the lease is gone
    client.lease_revoke(lease.id)

The keeper renews over one LeaseKeepAlive stream, like etcd's clients: a request, then the next
one TTL/3 after the answer. If an endpoint fails or stays silent, it moves on to the next one.
The lease is **lost** when an answer says TTL 0 (expired or revoked), or when no endpoint
answered for a whole TTL since the last renewal was sent (the servers may already have expired
it); the keeper then sets ``lost``, records ``error``, calls ``on_lost`` and stops.

Locks (the server's ``v3lockpb.Lock``, etcd's mutex recipe, see :mod:`nameserver.election`)::

    with client.lock("jobs/compactor", ttl_s=10) as held:    # grant + keep alive + Lock
        client.txn([held.is_owner()], success=[Op.put("jobs/out", "x")])  # a guarded write
    # left: Unlock, keeper stopped, lease revoked

``held.token`` is the fencing token: the create revision of the ownership key ``held.key``.
A write guarded by ``Compare.create(held.key) == held.token`` (that is ``held.is_owner()``, etcd's
``Mutex.IsOwner``) runs its failure branch once the holder has lost the lock, even if it does not
know it yet (it was paused past its TTL): the key was deleted with the lease, and a later holder's
key has a higher create revision.

Elections (the server's ``v3electionpb.Election``)::

    e = client.election("brokers/a")
    e.campaign("10.0.0.1:10911", ttl_s=10)   # blocks until leader; e.leader_key.rev is the token
    e.proclaim("10.0.0.1:10912")             # FailedPrecondition "election: not leader" if stale
    e.leader()                               # KeyValue of the leader, None if there is none
    for kv in e.observe(): ...               # the leader's key on every change
    e.resign()

Errors are :mod:`nameserver.client` errors (NotFound for an unknown lease, ...);
:class:`LeaseLost` (FAILED_PRECONDITION) is raised by recipes that find their lease gone.
"""

from __future__ import annotations

import contextlib
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc

from nameserver.client import (
    ClientError,
    Compare,
    Comparison,
    FailedPrecondition,
    InvalidArgument,
    KeyValue,
    NotFound,
    Unavailable,
    error_from_rpc,
    to_bytes,
)
from protos.etcdserverpb import (
    rpc_pb2,
    rpc_pb2_grpc,
    v3election_pb2,
    v3election_pb2_grpc,
    v3lock_pb2,
    v3lock_pb2_grpc,
)

if TYPE_CHECKING:
    from nameserver.client import Bytesish, Client

__all__ = [
    "Election",
    "HeldLock",
    "KeepAlive",
    "LeaderKey",
    "Lease",
    "LeaseLost",
    "LeaseTimeToLive",
    "acquire",
    "release",
]

log = logging.getLogger(__name__)

LEASE_NOT_FOUND = "etcdserver: requested lease not found"
DEFAULT_TTL_S = (
    10  # etcdctl's lock and session default is 60 s; 10 s frees a dead holder's lock sooner
)


class LeaseLost(FailedPrecondition):
    """The lease behind a lock or an election is gone (expired, revoked or unreachable)."""


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class Lease:
    """A granted lease. ``fencing_token`` is the grant's revision: it never changes while the
    lease lives and a later grant always has a higher one."""

    id: int
    ttl_s: int
    fencing_token: int


@dataclass(frozen=True, slots=True)
class LeaseTimeToLive:
    """LeaseTimeToLive: ``ttl_s`` is the remaining time, -1 when the lease is unknown (etcd)."""

    id: int
    ttl_s: int
    granted_ttl_s: int
    keys: list[bytes] = field(default_factory=list)

    @property
    def exists(self) -> bool:
        return self.ttl_s >= 0


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


# --------------------------------------------------------------------------- leases


def _lease_stub(s: Any) -> Any:
    return rpc_pb2_grpc.LeaseStub(s.channel)


def _check_ttl(ttl_s: int) -> None:
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, int) or ttl_s <= 0:
        raise InvalidArgument(
            f"ttl_s: a lease TTL must be a positive number of seconds ({ttl_s!r})"
        )


def _check_lease_id(lease_id: int) -> None:
    if isinstance(lease_id, bool) or not isinstance(lease_id, int) or lease_id <= 0:
        raise InvalidArgument(f"lease_id: a lease ID must be positive ({lease_id!r})")


def lease_grant(client: Client, ttl_s: int, lease_id: int = 0) -> Lease:
    _check_ttl(ttl_s)
    if lease_id:
        _check_lease_id(lease_id)
    req = rpc_pb2.LeaseGrantRequest(TTL=ttl_s, ID=lease_id)
    resp = client._call(lambda s: _lease_stub(s).LeaseGrant, req, write=True)
    if resp.error:
        raise FailedPrecondition(resp.error)
    return Lease(resp.ID, resp.TTL, resp.header.revision)


def lease_revoke(client: Client, lease_id: int) -> int:
    """Revoke a lease (its keys are deleted); returns the revision. NotFound if unknown."""
    _check_lease_id(lease_id)
    req = rpc_pb2.LeaseRevokeRequest(ID=lease_id)
    resp = client._call(lambda s: _lease_stub(s).LeaseRevoke, req, write=True)
    return int(resp.header.revision)


def lease_time_to_live(client: Client, lease_id: int, keys: bool = False) -> LeaseTimeToLive:
    _check_lease_id(lease_id)
    req = rpc_pb2.LeaseTimeToLiveRequest(ID=lease_id, keys=keys)
    resp = client._call(lambda s: _lease_stub(s).LeaseTimeToLive, req, write=False)
    return LeaseTimeToLive(resp.ID, resp.TTL, resp.grantedTTL, list(resp.keys))


def lease_leases(client: Client) -> list[int]:
    """The ids of every live lease, ascending."""
    req = rpc_pb2.LeaseLeasesRequest()
    resp = client._call(lambda s: _lease_stub(s).LeaseLeases, req, write=False)
    return [status.ID for status in resp.leases]


def lease_keep_alive_once(client: Client, lease_id: int) -> int:
    """Renew once; returns the TTL. NotFound when the lease is expired or unknown (etcd's
    ``KeepAliveOnce``: the server answers TTL 0)."""
    _check_lease_id(lease_id)

    def once(s: Any) -> Callable[..., Any]:
        def call(request: Any, timeout: float | None = None, metadata: Any = None) -> Any:
            responses = _lease_stub(s).LeaseKeepAlive(iter([request]), timeout=timeout)
            try:
                answer = next(responses, None)
            finally:
                responses.cancel()
            if answer is None:
                raise Unavailable("the keep-alive stream ended without an answer")
            return answer

        return call

    resp = client._call(once, rpc_pb2.LeaseKeepAliveRequest(ID=lease_id), write=False)
    if resp.TTL <= 0:
        raise NotFound(f"{LEASE_NOT_FOUND} (lease {lease_id:x} expired or was revoked)")
    return int(resp.TTL)


class _StreamBroken(Exception):
    """This endpoint's keep-alive stream failed or went silent: try the next one."""


class KeepAlive:
    """Keeps one lease alive from a background thread (see the module docstring).

    ``start()`` renews once in the caller's thread, so an unknown or expired lease raises
    NotFound there; afterwards problems are reported through ``lost``, ``error`` and
    ``on_lost(error)``; ``on_renew(ttl_s)`` follows every renewal (both on the keeper's thread)."""

    def __init__(
        self,
        client: Client,
        lease_id: int,
        on_lost: Callable[[str], None] | None = None,
        on_renew: Callable[[int], None] | None = None,
    ) -> None:
        _check_lease_id(lease_id)
        self.client = client
        self.lease_id = lease_id
        self.on_lost = on_lost
        self.on_renew = on_renew
        self.lost = threading.Event()
        self.error: str | None = None
        self.ttl_s = 0
        self.renewals = 0
        self._stop = threading.Event()
        self._sent_at = 0.0  # monotonic time the last successful renewal was sent
        self._thread = threading.Thread(
            target=self._run, name=f"lease-keepalive-{lease_id:x}", daemon=True
        )

    @property
    def alive(self) -> bool:
        return not self.lost.is_set()

    def start(self) -> KeepAlive:
        self._sent_at = time.monotonic()
        self.ttl_s = lease_keep_alive_once(self.client, self.lease_id)
        self._renewed()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def __enter__(self) -> KeepAlive:
        return self.start() if not self._thread.is_alive() else self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _renewed(self) -> None:
        self.renewals += 1
        if self.on_renew is not None:
            try:
                self.on_renew(self.ttl_s)
            except Exception:
                log.exception("on_renew callback of lease %x failed", self.lease_id)

    def _lose(self, why: str) -> None:
        self.error = why
        self.lost.set()
        self._stop.set()
        log.warning("lease %x lost: %s", self.lease_id, why)
        if self.on_lost is not None:
            try:
                self.on_lost(why)
            except Exception:
                log.exception("on_lost callback of lease %x failed", self.lease_id)

    def _lost_at(self) -> float:
        return self._sent_at + self.ttl_s

    def _run(self) -> None:
        # wait TTL/3 after the renewal start() did, then keep one stream per endpoint
        if self._stop.wait(self.ttl_s / 3):
            return
        endpoints = self.client.endpoints
        index = self.client._current
        backoff = 0.05
        while not self._stop.is_set():
            endpoint = endpoints[index % len(endpoints)]
            try:
                self._stream(endpoint)
                return  # stopped, or lost
            except _StreamBroken as exc:
                log.info("lease %x keep-alive via %s failed: %s", self.lease_id, endpoint, exc)
            index += 1
            if time.monotonic() >= self._lost_at():
                self._lose(f"no endpoint renewed it within its TTL of {self.ttl_s}s")
                return
            self._stop.wait(min(backoff, max(0.0, self._lost_at() - time.monotonic())))
            backoff = min(backoff * 2, 0.5)

    def _stream(self, endpoint: str) -> None:
        requests: queue.Queue[rpc_pb2.LeaseKeepAliveRequest | None] = queue.Queue()
        answers: queue.Queue[Any] = queue.Queue()
        try:
            channel = self.client._stubs_for(endpoint).channel
            call = rpc_pb2_grpc.LeaseStub(channel).LeaseKeepAlive(iter(requests.get, None))
        except (grpc.RpcError, ValueError) as exc:
            raise _StreamBroken(str(exc)) from None

        def read() -> None:
            try:
                for answer in call:
                    answers.put(answer)
                answers.put(_StreamBroken("stream ended"))
            except grpc.RpcError as err:
                answers.put(_StreamBroken(str(error_from_rpc(err, endpoint))))

        reader = threading.Thread(target=read, name=f"{self._thread.name}-reader", daemon=True)
        reader.start()
        try:
            while not self._stop.is_set():
                sent = time.monotonic()
                requests.put(rpc_pb2.LeaseKeepAliveRequest(ID=self.lease_id))
                wait_s = min(self._lost_at() - sent, self.client.timeout_s)
                try:
                    answer = answers.get(timeout=max(wait_s, 0.0))
                except queue.Empty:
                    raise _StreamBroken(f"no answer within {wait_s:.1f}s") from None
                if isinstance(answer, _StreamBroken):
                    raise answer
                if answer.TTL <= 0:
                    self._lose("the lease expired or was revoked (keep-alive answered TTL 0)")
                    return
                self._sent_at, self.ttl_s = sent, int(answer.TTL)
                self._renewed()
                self._stop.wait(self.ttl_s / 3)
        finally:
            requests.put(None)
            call.cancel()
            reader.join(timeout=1.0)


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


def acquire(client: Client, name: Bytesish, lease_id: int, timeout_s: float | None = None) -> bytes:
    """The Lock RPC alone: block until the lock is held through ``lease_id`` (or ``timeout_s``
    passes: DeadlineExceeded, and the server withdraws the waiter); returns the key. Safe to
    retry on another endpoint: the same lease finds its own key."""
    n = to_bytes(name)
    if not n:
        raise InvalidArgument("name: a lock name must not be empty")
    _check_lease_id(lease_id)
    req = v3lock_pb2.LockRequest(name=n, lease=lease_id)
    resp = client._call(
        lambda s: v3lock_pb2_grpc.LockStub(s.channel).Lock,
        req,
        write=False,
        timeout_s=_wait_budget(timeout_s),
    )
    return bytes(resp.key)


def release(client: Client, key: Bytesish) -> int:
    """The Unlock RPC: delete the ownership key; returns the revision."""
    req = v3lock_pb2.UnlockRequest(key=to_bytes(key))
    resp = client._call(lambda s: v3lock_pb2_grpc.LockStub(s.channel).Unlock, req, write=True)
    return int(resp.header.revision)


def _create_revision(client: Client, key: bytes, lease_id: int) -> int:
    got = client.get(key)
    if not got.kvs:
        raise LeaseLost(f"lease {lease_id:x} ended before its key {key!r} could be read")
    return got.kvs[0].create_revision


@contextlib.contextmanager
def lock(
    client: Client,
    name: Bytesish,
    ttl_s: int = DEFAULT_TTL_S,
    timeout_s: float | None = None,
    on_lost: Callable[[str], None] | None = None,
) -> Iterator[HeldLock]:
    """Grant a lease, keep it alive, take the lock, yield a :class:`HeldLock`; on exit unlock,
    stop the keeper and revoke the lease (whatever happened inside)."""
    _check_ttl(ttl_s)
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

    def __init__(self, client: Client, name: Bytesish) -> None:
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
            _check_lease_id(lease_id)
        else:
            _check_ttl(ttl_s)
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
