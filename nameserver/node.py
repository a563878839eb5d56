"""The node's propose/read facade, :class:`NodeFacade`: what every front and every leader
duty calls, whatever the transport (etcd's ``EtcdServer``, ``v3_server.go``).

- **Writes**: :meth:`NodeFacade.propose` checks a raised CORRUPT, the backend quota and a
  raised NOSPACE (raising the alarm when the quota is exceeded), stamps the auth revision a checked call
  was checked at, proposes the entry with the client's de-duplication identity and waits
  until it is applied here; an apply refusal comes back as its own error.
- **Reads**: :meth:`NodeFacade.read_image` (a read barrier, Raft's ReadIndex, unless
  serializable), past kv revisions (:meth:`NodeFacade.kv_at`), request and response limits.
- **Maintenance**: members, leadership transfer, alarms, hashes, a fresh snapshot file.

The fronts are adapters: the gRPC services (each domain's ``service.py``, ``nameserver.grpc``:
status conversion, method table) and the RocketMQ remoting front (``nameserver.remoting``,
``<domain>/remoting.py``) translate requests into calls here; the leader duties
(:mod:`nameserver.kv.compactor`, ...) call it too. Nothing here imports a front (an
import-linter contract in ``pyproject.toml``), and the fronts and domains import this module
for its types only (``if TYPE_CHECKING:``), so the domains' folders form no import cycle
with it (``tests/unit/test_import_cycles.py``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
from collections.abc import Callable, Iterable
from typing import Any

from nameserver import etcd_snapshot
from nameserver.auth.check import checked_entries
from nameserver.auth.tokens import node_credential
from nameserver.cluster import corrupt as corruption
from nameserver.cluster.apply import alarm_entry
from nameserver.cluster.nospace import SpaceCheck, no_space
from nameserver.cluster.records import (
    ALARM_NONE,
    ALARM_NOSPACE,
    alarm_key,
    alarm_text,
    member_id_of,
)
from nameserver.config import ServerConfig
from nameserver.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NameserverError,
    NotFound,
)
from nameserver.kv import semantics as kvops
from nameserver.kv.hashing import kv_hash_at
from nameserver.kv.history import KvHistory, RevisionView
from nameserver.kv.mvcc import check_read
from nameserver.leases.apply import LEASE_NOT_FOUND
from nameserver.state import image_hash
from nameserver.state.image import MetadataImage
from nameserver.state.machine import CapturedImage, MetadataStateMachine
from nameserver.state.registry import Registry
from protos.etcdserverpb import rpc_pb2
from raftlog import (
    Applied,
    ApplyFailure,
    ConsensusEngine,
    Entry,
    LearnerNotReadyError,
    ProposeError,
    ReplicatedLog,
    UnsafeReconfigurationError,
)
from snapshots import SnapshotMeta, write_snapshot

log = logging.getLogger(__name__)

#: A request's metadata, ``(key, value)`` pairs (gRPC's invocation metadata; None: none).
#: The client's de-duplication identity travels in it as ``x-ml-client-id`` and ``x-ml-seq``.
Metadata = Iterable[tuple[str, str | bytes]]


class NodeFacade:
    """The node as its fronts and duties see it: config, the log, the state machine and
    identities; propose and wait, read barriers, alarms, members."""

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
        #: one etcd-format snapshot built at a time: each is the whole database in memory
        self._etcd_snapshot_lock = asyncio.Lock()

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
            except (UnsafeReconfigurationError, LearnerNotReadyError):
                raise  # waiting does not start members, nor catch a learner up at once
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

    def revision_after(self, applied: Applied) -> int:
        """The store revision once ``applied`` (a request that changes no key by itself, or
        whose result says nothing) is: its offset while the store counts by offset (every
        request moves it), else the current one (such a request keeps it)."""
        image = self.state.image
        return applied.offset if image.store_rev.revision < 0 else image.revision

    def fill_header(self, header: rpc_pb2.ResponseHeader, revision: int) -> None:
        """Stamp a response's own ``header`` in place: a fifth of the cost of building a
        :meth:`header` and copying it in (the KV handlers' hot path)."""
        header.cluster_id = self.cluster_id
        header.member_id = self.member_id
        header.revision = revision
        header.raft_term = self.log.term()

    @property
    def registry(self) -> Registry:
        """The record kinds of the node's images (the state machine's)."""
        return self.state.registry

    async def read_image(self, serializable: bool) -> MetadataImage:
        if not serializable:
            index = await self.log.read_barrier(self.timeout_s)
            await self.log.wait_applied(index, self.timeout_s)
        return self.state.image

    async def propose(self, entry: Entry, metadata: Metadata | None) -> Applied:
        """Propose ``entry`` and wait until it is applied here. The client's de-duplication
        identity comes from the request's ``metadata``; None proposes without one (a handler
        that proposes several entries for one request must not reuse the request's)."""
        client_id, seq = None, None
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
        image = self.state.image
        if image.alarms.corrupt and corruption.refused(entry):  # etcd's applierV3Corrupt
            raise corruption.corrupt()
        refusal = self.space.refuses(image, entry)
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

    def alarms(self, image: MetadataImage, alarm: int = ALARM_NONE) -> list[tuple[int, int]]:
        """(member id, alarm type) of the raised alarms of type ``alarm`` (NONE: all): the
        image's, and this member's full disk while it lasts (raftlog.health: a local state
        that leaves by itself when space returns, and that a one-member cluster could not
        write to its log anyway)."""
        out = [(a.member_id, a.alarm) for a in image.alarms.list(alarm)]
        me = self.member_id
        if (
            self.log.health.refuses_writes  # this member's disk is full right now
            and alarm in (ALARM_NONE, ALARM_NOSPACE)
            and image.alarms.get(alarm_key(me, ALARM_NOSPACE)) is None
        ):
            out.append((me, ALARM_NOSPACE))
        return out

    async def change_alarm(
        self, request: rpc_pb2.AlarmRequest, metadata: Metadata | None
    ) -> rpc_pb2.AlarmResponse:
        """ACTIVATE or DEACTIVATE an alarm (an ``alarm`` entry, :mod:`nameserver.cluster.apply`):
        the alarm changed (none: DEACTIVATE of an alarm not raised, still OK)."""
        applied = await self.propose(alarm_entry(request), metadata)
        resp = applied.result
        return resp if isinstance(resp, rpc_pb2.AlarmResponse) else rpc_pb2.AlarmResponse()

    async def read_alarms(self, alarm: int) -> list[tuple[int, int]]:
        """:meth:`alarms` read linearizably (etcd reads them through its log), except while
        this member's own disk is full: its apply may be stuck behind the full change log,
        and the alarm list must still answer."""
        image = await self.read_image(self.log.health.refuses_writes)
        return self.alarms(image, alarm)

    def status_errors(self) -> list[str]:
        """etcd's StatusResponse.errors: no leader, then each raised alarm in Go's text form
        (``memberID:<id> alarm:NOSPACE ``), which ``etcdctl endpoint status`` prints."""
        errors = [] if self.engine.leader_address() else ["etcdserver: no leader"]
        for member_id, alarm in self.alarms(self.state.image):
            errors.append(alarm_text(member_id, alarm))
        return errors

    def db_size_bytes(self) -> int:
        """The store's size as etcd's dbSize: the change-log segments on disk."""
        return sum(s.size for s in self.log.segments.segments())

    async def move_leader(self, target_id: int) -> None:
        """etcd's MoveLeader: hand leadership to the member ``target_id`` (0: the most
        caught-up follower); this node must lead. Done at once if it is the target."""
        target = [m for m in self.members(self.state.image) if m[1] == target_id]
        if target_id and not target:
            raise NotFound(f"etcdserver: member not found (ID {target_id:x})")
        if not self.engine.is_leader():
            raise FailedPrecondition("etcdserver: not leader")
        if target and target[0][2] == self.config.listen_peer:
            return
        await self.transfer_leadership(target[0][2] if target else None)

    async def hash_kv(self, revision: int) -> tuple[int, int]:
        """(hash, compaction revision in force there) of the key-value store at ``revision``
        (0: the current one; :func:`nameserver.kv.hashing.kv_hash_at`): the same on every
        member at the same revision. OUT_OF_RANGE (etcd's texts) above the current revision
        or below this node's history floor."""
        image = self.state.image
        current = image.revision
        rev = revision if revision > 0 else current
        if rev < current:
            view = await self.kv_at(rev, current)
            history = self.history
            assert history is not None  # kv_at refuses a past revision without one
            compact = history.compact_revision_at(rev)
            digest = await asyncio.to_thread(kv_hash_at, view.items(), compact)
            self.recheck(rev, current)
        else:
            self.check_revision(rev, current)
            compact = image.mvcc.compact_revision
            digest = await asyncio.to_thread(kv_hash_at, image.kv.data.items(), compact)
        return digest, compact

    async def image_hash(self, image: MetadataImage) -> int:
        """A content hash of ``image``, every record type (etcd: the backend's hash)."""
        return await asyncio.to_thread(image_hash.image_hash, image)

    async def snapshot_file(self) -> tuple[str, MetadataImage]:
        """A fresh snapshot of this node's image (read linearizably) written to a temporary
        file under the data directory (our format): its path, which the caller deletes,
        and the image."""
        image = await self.read_image(False)
        directory = os.path.join(self.config.data_dir, "snap")
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".stream-", suffix=".tmp", dir=directory)
        os.close(fd)
        try:
            captured = CapturedImage(image)
            meta = SnapshotMeta(
                cluster_id=f"{self.cluster_id:016x}",
                last_offset=captured.last_offset,
                last_term=captured.last_term,
            )
            await asyncio.to_thread(write_snapshot, tmp, meta, captured.records)
        except BaseException:
            os.unlink(tmp)
            raise
        return tmp, image

    async def etcd_snapshot(self) -> tuple[bytes, MetadataImage]:
        """A fresh snapshot of this node's image (read linearizably) in etcd 3.4's format
        (:mod:`nameserver.etcd_snapshot`: the bbolt database and its SHA-256), built in a
        worker thread, one at a time, and the image. FailedPrecondition when the image holds
        what a bbolt file cannot (a key over bbolt's 32 KiB limit, such as a user name)."""
        async with self._etcd_snapshot_lock:
            image = await self.read_image(False)
            try:
                data = await asyncio.to_thread(etcd_snapshot.etcd_snapshot_bytes, image)
            except ValueError as exc:
                raise FailedPrecondition(f"not expressible as an etcd snapshot: {exc}") from exc
        return data, image

    async def require_lease(self, lease_id: int) -> None:
        """NOT_FOUND unless the lease exists (linearizably: a barrier when this node lacks it).

        Apply checks again (the lease may go in between); its rejection keeps its code (the
        NotFound in ``raftlog.ApplyFailure.error``), so the client gets NOT_FOUND either way."""
        if self.state.image.leases.get(lease_id) is not None:
            return
        image = await self.read_image(False)
        if image.leases.get(lease_id) is None:
            raise NotFound(LEASE_NOT_FOUND)

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


def _settle_future(fut: asyncio.Future[None], err: Exception | None) -> None:
    if fut.done():
        return
    if err is not None:
        fut.set_exception(err)
    else:
        fut.set_result(None)
