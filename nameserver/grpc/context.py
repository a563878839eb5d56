"""The request context every gRPC service shares: :class:`NodeContext` (propose and wait,
read barriers, members), the :func:`rpc` decorator, member ids.

Handlers (each domain's ``service.py``) validate, then either read the image (after a read
barrier unless the request is serializable) or propose an entry and wait until it is
applied here. Every error leaves through :func:`nameserver.grpc.status.to_status`.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from nameserver.auth.check import checked_entries
from nameserver.auth.tokens import node_credential
from nameserver.cluster.apply import alarm_entry
from nameserver.cluster.nospace import SpaceCheck, no_space
from nameserver.cluster.records import ALARM_NOSPACE, host_port
from nameserver.config import ServerConfig
from nameserver.errors import (
    DeadlineExceeded,
    InvalidArgument,
    NameserverError,
    NotFound,
)
from nameserver.grpc.status import to_status
from nameserver.kv import semantics as kvops
from nameserver.kv.history import KvHistory, RevisionView
from nameserver.kv.mvcc import check_read
from nameserver.leases.apply import LEASE_NOT_FOUND
from nameserver.metrics import REJECTIONS
from nameserver.state.image import MetadataImage
from nameserver.state.machine import MetadataStateMachine
from protos.etcdserverpb import rpc_pb2
from raftlog import (
    Applied,
    ApplyFailure,
    ConsensusEngine,
    Entry,
    ProposeError,
    ReplicatedLog,
    UnsafeReconfigurationError,
)

log = logging.getLogger(__name__)

ETCD_VERSION = "3.4.0"  # the etcd API level we speak
SNAPSHOT_CHUNK_BYTES = 1 << 20

R = TypeVar("R")


def member_id_of(peer_address: str) -> int:
    """etcd member ids are uint64: ours is a stable hash of the member's peer address."""
    text = "member:" + host_port(peer_address)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") & 0x7FFF_FFFF_FFFF_FFFF


def peer_address(url: str) -> str:
    address = host_port(url)
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise InvalidArgument(f"peerURLs: {url!r} is not http://host:port")
    return address


def rpc(fn: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
    """Turn any error of a handler into its gRPC status (one place, STYLE.md 3)."""

    @functools.wraps(fn)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> R:
        try:
            return await fn(self, request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            code, message = to_status(exc)
            if code == grpc.StatusCode.INTERNAL:
                log.exception("%s failed", fn.__name__)
            else:
                REJECTIONS.count("grpc", code.name, type(exc).__name__)
            await context.abort(code, message)
            raise  # unreachable: abort raises

    return wrapper


async def abort_stream(context: grpc.aio.ServicerContext, method: str, exc: Exception) -> None:
    """End a streaming handler on ``exc`` with its status (what :func:`rpc` does for unary
    handlers); only a server fault (INTERNAL) is logged above DEBUG."""
    code, message = to_status(exc)
    if code == grpc.StatusCode.INTERNAL:
        log.error("%s failed", method, exc_info=exc)
    else:
        REJECTIONS.count("grpc", code.name, type(exc).__name__)
        log.debug("%s: %s", method, message)
    await context.abort(code, message)


class NodeContext:
    """What the handlers share: config, the log, the state machine and identities."""

    def __init__(
        self,
        config: ServerConfig,
        rlog: ReplicatedLog,
        state: MetadataStateMachine,
        cluster_id: int,
        engine: ConsensusEngine,
    ) -> None:
        self.config = config
        self.log = rlog
        self.state = state
        self.cluster_id = cluster_id
        self.engine = engine
        self.timeout_s = config.propose_timeout_ms / 1000
        self.member_id = member_id_of(config.listen_peer)
        #: the backend quota and a raised NOSPACE, checked before a write is proposed
        self.space = SpaceCheck(config.quota_backend_bytes)
        self._raising: dict[int, asyncio.Future[None]] = {}  # alarm type -> its proposal
        #: the kv store's past revisions (set by the node; None: only the latest state)
        self.history: KvHistory | None = None
        #: metadata of calls to another member: the node credential, root under auth
        self.node_metadata = (("token", node_credential(config.cluster_password or "")),)

    def members(self, image: MetadataImage) -> list[tuple[str, int, str, tuple[str, ...]]]:
        """(name, member id, peer address, client URLs) of the current configuration,
        named from the member records in ``image`` (a member added but not yet started
        has no name)."""
        out = []
        for address in (m.address for m in self.engine.members()):
            rec = image.members.find(address)
            if rec is not None:
                self.engine.name_member(rec.id, address)
            out.append(
                (
                    rec.id if rec else "",
                    member_id_of(address),
                    address,
                    rec.client_urls if rec else (),
                )
            )
        return out

    async def engine_call(
        self, start: Callable[[Callable[[int | None, Exception | None], None]], None]
    ) -> None:
        """Run an engine operation that answers through a callback on the engine thread
        (membership change, leadership transfer) and wait for it; a refusal (ProposeError:
        a change in progress, a target still catching up) is retried every 0.1 s until the
        propose timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        while True:
            done: asyncio.Future[None] = loop.create_future()

            def callback(_: int | None, err: Exception | None, fut: Any = done) -> None:
                loop.call_soon_threadsafe(_settle_future, fut, err)

            start(callback)
            try:
                await asyncio.wait_for(done, max(0.1, deadline - loop.time()))
                return
            except UnsafeReconfigurationError:
                raise  # waiting does not start members
            except ProposeError:
                if loop.time() >= deadline:
                    raise
                await asyncio.sleep(0.1)

    async def transfer_leadership(self, address: str | None) -> str:
        """Hand leadership to ``address`` (None: the most caught-up follower) and wait until
        another node leads; returns the new leader's address."""
        await self.engine_call(lambda cb: self.engine.transfer_leadership(address, cb))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        me = self.config.listen_peer
        while loop.time() < deadline:
            leader = self.engine.leader_address()
            if leader and leader != me and (address is None or leader == address):
                return leader
            await asyncio.sleep(0.05)
        raise DeadlineExceeded(
            f"metaledger: leadership did not move to {address or 'a follower'} in time",
        )

    def leader_member_id(self) -> int:
        leader = self.state.image.members.find(self.engine.status().leader_id)
        return leader.member_id if leader is not None else 0

    def header(self, revision: int) -> rpc_pb2.ResponseHeader:
        return rpc_pb2.ResponseHeader(
            cluster_id=self.cluster_id,
            member_id=self.member_id,
            revision=revision,
            raft_term=self.log.term(),
        )

    def fill_header(self, header: rpc_pb2.ResponseHeader, revision: int) -> None:
        """Stamp a response's own ``header`` in place: a fifth of the cost of building a
        :meth:`header` and copying it in (the KV handlers' hot path)."""
        header.cluster_id = self.cluster_id
        header.member_id = self.member_id
        header.revision = revision
        header.raft_term = self.log.term()

    async def read_image(self, serializable: bool) -> MetadataImage:
        if not serializable:
            index = await self.log.read_barrier(self.timeout_s)
            await self.log.wait_applied(index, self.timeout_s)
        return self.state.image

    async def propose(self, entry: Entry, context: grpc.aio.ServicerContext | None) -> Applied:
        """Propose ``entry`` and wait until it is applied here. The client's de-duplication
        identity comes from ``context``'s metadata; None proposes without one (a handler that
        proposes several entries for one request must not reuse the request's)."""
        client_id, seq = None, None
        metadata = context.invocation_metadata() if context is not None else None
        for k, v in metadata or ():
            if k == "x-ml-client-id":
                client_id = str(v)
            elif k == "x-ml-seq":
                try:
                    seq = int(v)
                except ValueError:
                    raise InvalidArgument(f"x-ml-seq: {v!r} is not an integer") from None
        if (client_id is None) != (seq is None):
            raise InvalidArgument("x-ml-client-id and x-ml-seq must be given together")
        refusal = self.space.refuses(self.state.image, entry)
        if refusal is not None:
            if refusal == "quota":  # etcd's quotaAlarmer: raise NOSPACE for this member
                await self.raise_alarm(ALARM_NOSPACE)
            raise no_space()
        # with auth on, a call whose key permissions were checked carries the auth revision
        # it was checked at, ahead of its entry: apply refuses it if auth changed since
        entries, checked = checked_entries([entry])
        applied = await self.log.propose(entries, self.timeout_s, client_id, seq)
        if checked and isinstance(applied.result, list):  # [check's None, the entry's]
            applied = Applied(applied.offset, applied.result[-1], applied.duplicate)
        if isinstance(applied.result, ApplyFailure):
            error = applied.result.error  # the exception apply raised, untouched
            if isinstance(error, NameserverError):
                raise error
            raise NameserverError(
                f"metaledger: internal error: apply failed: {type(error).__name__}: {error}"
            ) from error
        return applied

    async def raise_alarm(self, alarm: int) -> None:
        """Propose ACTIVATE ``alarm`` for this member (etcd's quotaAlarmer: the caller
        refuses its request whatever comes of it; a failure is logged, not raised).
        Concurrent callers share one proposal."""
        pending = self._raising.get(alarm)
        if pending is None:
            pending = asyncio.ensure_future(self._propose_alarm(alarm))
            self._raising[alarm] = pending
            pending.add_done_callback(lambda _: self._raising.pop(alarm, None))
        await asyncio.shield(pending)

    async def _propose_alarm(self, alarm: int) -> None:
        request = rpc_pb2.AlarmRequest(
            action=rpc_pb2.AlarmRequest.ACTIVATE,
            memberID=self.member_id,
            alarm=alarm,  # type: ignore[arg-type]  # an AlarmType value
        )
        try:
            await self.log.propose([alarm_entry(request)], self.timeout_s)
        except Exception as exc:  # the write is refused anyway; the next one tries again
            log.warning("could not raise alarm %s: %s", rpc_pb2.AlarmType.Name(alarm), exc)

    def check_size(self, request: Any) -> None:
        self.check_encoded_size(request.ByteSize())

    def check_value(self, value: bytes) -> None:
        """A value put under a key (KV, lock, election) is at most ``max_value_bytes``."""
        limit = self.config.max_value_bytes
        if len(value) > limit:
            raise InvalidArgument(
                f"etcdserver: value is too large: {len(value)} bytes > limit max_value_bytes={limit}"
            )

    def response_budget(self, what: str) -> kvops.ResponseBudget:
        """A fresh ``max_response_bytes`` budget for one response (of ``what``)."""
        return kvops.ResponseBudget(self.config.max_response_bytes, what)

    def check_encoded_size(self, size: int) -> None:
        """:meth:`check_size` of a request already encoded into ``size`` bytes."""
        if size > self.config.max_request_bytes:
            raise InvalidArgument(
                f"etcdserver: request is too large: {size} bytes > limit "
                f"max_request_bytes={self.config.max_request_bytes}"
            )

    def check_revision(self, revision: int, current: int) -> None:
        """OUT_OF_RANGE (etcd's texts) unless ``revision`` (0 = current) is readable here:
        not above ``current``, not below this node's history floor."""
        if revision <= 0 or revision == current:
            return
        if self.history is None:
            check_read(revision, current, current)
            return
        self.history.check(revision, current)

    async def kv_at(self, revision: int, current: int) -> RevisionView:
        """The kv store at ``revision`` (checked: :meth:`check_revision`); call
        :meth:`recheck` when done reading it (a compaction may pass it meanwhile)."""
        self.check_revision(revision, current)
        assert self.history is not None  # check_revision refuses every past revision else
        await self.history.ready(revision, self.timeout_s)
        return self.history.view(revision)

    def recheck(self, revision: int, current: int) -> None:
        """After a read at ``revision``: compacted if a compaction passed it meanwhile."""
        if self.history is not None and 0 < revision < current:
            self.history.check(revision, current)


async def require_lease(node: NodeContext, lease_id: int) -> None:
    """NOT_FOUND unless the lease exists (linearizably: a barrier when this node lacks it).

    Apply checks again (the lease may go in between); its rejection keeps its code
    (the NotFound in ``raftlog.ApplyFailure.error``), so the client gets NOT_FOUND either way."""
    if node.state.image.leases.get(lease_id) is not None:
        return
    image = await node.read_image(False)
    if image.leases.get(lease_id) is None:
        raise NotFound(LEASE_NOT_FOUND)


def _settle_future(fut: asyncio.Future[None], err: Exception | None) -> None:
    if fut.done():
        return
    if err is not None:
        fut.set_exception(err)
    else:
        fut.set_result(None)
