"""The leases surface (etcd's Lease service) and the keeper that renews a lease.

::

    lease = client.lease_grant(10)              # Lease(id, ttl_s, fencing_token)
    with client.keep_alive(lease.id) as keeper:  # a background thread renews it every TTL/3
        ...                                      # keeper.lost is set when the lease is gone
    client.lease_revoke(lease.id)

The keeper renews over one LeaseKeepAlive stream, like etcd's clients: a request, then the next
one TTL/3 after the answer. If an endpoint fails or stays silent, it moves on to the next one.
The lease is **lost** when an answer says TTL 0 (expired or revoked), or when no endpoint
answered for a whole TTL since the last renewal was sent (the servers may already have expired
it); the keeper then sets ``lost``, records ``error``, calls ``on_lost`` and stops.

Errors are :mod:`nameserver.client.errors` errors (NotFound for an unknown lease, ...);
:class:`~nameserver.client.errors.LeaseLost` (FAILED_PRECONDITION) is raised by recipes that
find their lease gone.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from nameserver.client.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unavailable,
    error_from_rpc,
)
from nameserver.client.transport import Transport
from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc

__all__ = [
    "DEFAULT_TTL_S",
    "KeepAlive",
    "Lease",
    "LeaseTimeToLive",
    "LeasesApi",
    "check_lease_id",
    "check_ttl",
    "lease_grant",
    "lease_keep_alive_once",
    "lease_leases",
    "lease_revoke",
    "lease_time_to_live",
]

log = logging.getLogger(__name__)

LEASE_NOT_FOUND = "etcdserver: requested lease not found"
DEFAULT_TTL_S = (
    10  # etcdctl's lock and session default is 60 s; 10 s frees a dead holder's lock sooner
)


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class Lease:
    """A granted lease. ``fencing_token`` is the grant's log offset: it never changes while
    the lease lives and a later grant always has a higher one (a lock's token, its key's
    create revision, is a store revision: the Offsets service orders the two, see
    docs/semantics.md "Fencing tokens, offsets and revisions")."""

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


# --------------------------------------------------------------------------- leases


def _lease_stub(s: Any) -> Any:
    return rpc_pb2_grpc.LeaseStub(s.channel)


def check_ttl(ttl_s: int) -> None:
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, int) or ttl_s <= 0:
        raise InvalidArgument(
            f"ttl_s: a lease TTL must be a positive number of seconds ({ttl_s!r})"
        )


def check_lease_id(lease_id: int) -> None:
    if isinstance(lease_id, bool) or not isinstance(lease_id, int) or lease_id <= 0:
        raise InvalidArgument(f"lease_id: a lease ID must be positive ({lease_id!r})")


#: LeaseGrant's trailing metadata naming the lease's fencing token
FENCING_TOKEN_METADATA = "x-ml-fencing-token"


def lease_grant(client: Transport, ttl_s: int, lease_id: int = 0) -> Lease:
    check_ttl(ttl_s)
    if lease_id:
        check_lease_id(lease_id)
    req = rpc_pb2.LeaseGrantRequest(TTL=ttl_s, ID=lease_id)
    resp, call = client._call(lambda s: _lease_stub(s).LeaseGrant.with_call, req, write=True)
    if resp.error:
        raise FailedPrecondition(resp.error)
    # the fencing token: the grant's offset, from the trailing metadata (a server counting
    # revisions etcd's way says another revision in the header), else the header's revision
    token = dict(call.trailing_metadata() or ()).get(FENCING_TOKEN_METADATA)
    return Lease(resp.ID, resp.TTL, int(token) if token else resp.header.revision)


def lease_revoke(client: Transport, lease_id: int) -> int:
    """Revoke a lease (its keys are deleted); returns the revision. NotFound if unknown."""
    check_lease_id(lease_id)
    req = rpc_pb2.LeaseRevokeRequest(ID=lease_id)
    resp = client._call(lambda s: _lease_stub(s).LeaseRevoke, req, write=True)
    return int(resp.header.revision)


def lease_time_to_live(client: Transport, lease_id: int, keys: bool = False) -> LeaseTimeToLive:
    check_lease_id(lease_id)
    req = rpc_pb2.LeaseTimeToLiveRequest(ID=lease_id, keys=keys)
    resp = client._call(lambda s: _lease_stub(s).LeaseTimeToLive, req, write=False)
    return LeaseTimeToLive(resp.ID, resp.TTL, resp.grantedTTL, list(resp.keys))


def lease_leases(client: Transport) -> list[int]:
    """The ids of every live lease, ascending."""
    req = rpc_pb2.LeaseLeasesRequest()
    resp = client._call(lambda s: _lease_stub(s).LeaseLeases, req, write=False)
    return [status.ID for status in resp.leases]


def lease_keep_alive_once(client: Transport, lease_id: int) -> int:
    """Renew once; returns the TTL. NotFound when the lease is expired or unknown (etcd's
    ``KeepAliveOnce``: the server answers TTL 0)."""
    check_lease_id(lease_id)

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
        client: Transport,
        lease_id: int,
        on_lost: Callable[[str], None] | None = None,
        on_renew: Callable[[int], None] | None = None,
    ) -> None:
        check_lease_id(lease_id)
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

    @property
    def expires_at(self) -> float:
        """``time.monotonic()`` until which the lease is certainly alive: the last renewal's
        sending time plus its TTL (the server counts from when it received it, later). A
        process paused past it must assume the lease gone before it acts on it."""
        return self._lost_at()

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


class LeasesApi(Transport):
    """Grant, revoke, inspect and renew leases; ``keep_alive`` for a background keeper."""

    def lease_grant(self, ttl_s: int, lease_id: int = 0) -> Lease:
        """LeaseGrant (``lease_id`` 0: the server picks one); the result's ``fencing_token``
        is the grant's offset."""
        return lease_grant(self, ttl_s, lease_id)

    def lease_revoke(self, lease_id: int) -> int:
        return lease_revoke(self, lease_id)

    def lease_time_to_live(self, lease_id: int, keys: bool = False) -> LeaseTimeToLive:
        return lease_time_to_live(self, lease_id, keys)

    def lease_leases(self) -> list[int]:
        return lease_leases(self)

    def lease_keep_alive_once(self, lease_id: int) -> int:
        return lease_keep_alive_once(self, lease_id)

    def keep_alive(
        self,
        lease_id: int,
        on_lost: Callable[[str], None] | None = None,
        on_renew: Callable[[int], None] | None = None,
    ) -> KeepAlive:
        """A background keeper for the lease (``with client.keep_alive(id) as k:`` or
        ``.start()``/``.stop()``); ``k.lost`` is set when the lease is gone."""
        return KeepAlive(self, lease_id, on_lost, on_renew)
