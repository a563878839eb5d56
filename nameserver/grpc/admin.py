"""etcd's Maintenance service (status, snapshot, hash, defragment, alarms, move leader) and
metaledger.v1.Admin.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
from collections.abc import AsyncIterator
from typing import Any

import grpc

from nameserver.cluster.apply import alarm_entry
from nameserver.cluster.records import ALARM_NONE, ALARM_NOSPACE, alarm_key, alarm_text
from nameserver.errors import FailedPrecondition, NotFound
from nameserver.grpc.context import (
    ETCD_VERSION,
    SNAPSHOT_CHUNK_BYTES,
    NodeContext,
    abort_stream,
    rpc,
)
from nameserver.kv.hashing import kv_hash_at
from nameserver.state import image_hash
from nameserver.state.image import MetadataImage
from nameserver.state.machine import CapturedImage
from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc
from protos.metaledger.v1 import admin_pb2, admin_pb2_grpc
from snapshots import SnapshotMeta, etcd_trailer, write_snapshot


class MaintenanceService(rpc_pb2_grpc.MaintenanceServicer):  # type: ignore[misc]
    def __init__(self, node: NodeContext) -> None:
        self.node = node

    @rpc
    async def Status(self, request: rpc_pb2.StatusRequest, context: Any) -> rpc_pb2.StatusResponse:
        st = self.node.log.engine_status()
        off = self.node.log.offsets()
        return rpc_pb2.StatusResponse(
            header=self.node.header(self.node.state.image.revision),
            version=ETCD_VERSION,
            dbSize=sum(s.size for s in self.node.log.segments.segments()),
            dbSizeInUse=sum(s.size for s in self.node.log.segments.segments()),
            leader=self.node.leader_member_id(),
            raftIndex=off.commit_offset,
            raftTerm=st.term,
            raftAppliedIndex=off.apply_offset,
            errors=self._status_errors(),
        )

    def _status_errors(self) -> list[str]:
        """etcd's StatusResponse.errors: no leader, then each raised alarm in Go's text form
        (``memberID:<id> alarm:NOSPACE ``), which ``etcdctl endpoint status`` prints."""
        errors = [] if self.node.engine.leader_address() else ["etcdserver: no leader"]
        for member_id, alarm in self._alarms(self.node.state.image):
            errors.append(alarm_text(member_id, alarm))
        return errors

    async def Snapshot(
        self, request: rpc_pb2.SnapshotRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[rpc_pb2.SnapshotResponse]:
        """Stream a fresh snapshot of this node's image (our format; ``etcdctl snapshot save``
        stores it, ``metaledger snapshot inspect|restore`` read it)."""
        try:
            image = await self.node.read_image(False)
            directory = os.path.join(self.node.config.data_dir, "snap")
            os.makedirs(directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".stream-", suffix=".tmp", dir=directory)
            os.close(fd)
            captured = CapturedImage(image)
            meta = SnapshotMeta(
                cluster_id=f"{self.node.cluster_id:016x}",
                last_offset=captured.last_offset,
                last_term=captured.last_term,
            )
            await asyncio.to_thread(write_snapshot, tmp, meta, captured.records)
        except Exception as exc:
            await abort_stream(context, "Snapshot", exc)
            return
        try:
            content = os.path.getsize(tmp)
            size = content + len(etcd_trailer(content, hashlib.sha256()))
            digest = hashlib.sha256()
            sent = 0
            with open(tmp, "rb") as f:
                while sent < size:
                    blob = f.read(SNAPSHOT_CHUNK_BYTES)
                    digest.update(blob)
                    if len(blob) < SNAPSHOT_CHUNK_BYTES:  # the end: etcd's trailer follows
                        blob += etcd_trailer(content, digest)
                    resp = rpc_pb2.SnapshotResponse(blob=blob)
                    sent += len(blob)
                    resp.remaining_bytes = size - sent
                    if sent == len(blob):
                        resp.header.CopyFrom(self.node.header(image.revision))
                    yield resp
        finally:
            os.unlink(tmp)

    @rpc
    async def MoveLeader(
        self, request: rpc_pb2.MoveLeaderRequest, context: Any
    ) -> rpc_pb2.MoveLeaderResponse:
        image = self.node.state.image
        target = [m for m in self.node.members(image) if m[1] == request.targetID]
        if request.targetID and not target:
            raise NotFound(f"etcdserver: member not found (ID {request.targetID:x})")
        if not self.node.engine.is_leader():
            raise FailedPrecondition("etcdserver: not leader")
        if target and target[0][2] == self.node.config.listen_peer:
            return rpc_pb2.MoveLeaderResponse(header=self.node.header(image.revision))
        await self.node.transfer_leadership(target[0][2] if target else None)
        return rpc_pb2.MoveLeaderResponse(header=self.node.header(image.revision))

    @rpc
    async def HashKV(self, request: rpc_pb2.HashKVRequest, context: Any) -> rpc_pb2.HashKVResponse:
        """A content hash of the key-value store at ``revision`` (0: the current one) and
        the compaction revision in force there (:func:`nameserver.kv.hashing.kv_hash_at`):
        the same on every member at the same revision. OUT_OF_RANGE (etcd's texts) above
        the current revision or below this node's history floor."""
        image = self.node.state.image
        current = image.revision
        rev = request.revision if request.revision > 0 else current
        if rev < current:
            view = await self.node.kv_at(rev, current)
            history = self.node.history
            assert history is not None  # kv_at refuses a past revision without one
            compact = history.compact_revision_at(rev)
            digest = await asyncio.to_thread(kv_hash_at, view.items(), compact)
            self.node.recheck(rev, current)
        else:
            self.node.check_revision(rev, current)
            compact = image.mvcc.compact_revision
            digest = await asyncio.to_thread(kv_hash_at, image.kv.data.items(), compact)
        return rpc_pb2.HashKVResponse(
            header=self.node.header(current),
            hash=digest,
            compact_revision=image.mvcc.compact_revision,
        )

    @rpc
    async def Hash(self, request: rpc_pb2.HashRequest, context: Any) -> rpc_pb2.HashResponse:
        """A content hash of this node's whole image, every record type (etcd: the backend)."""
        image = self.node.state.image
        digest = await asyncio.to_thread(image_hash.image_hash, image)
        return rpc_pb2.HashResponse(header=self.node.header(image.revision), hash=digest)

    @rpc
    async def Defragment(
        self, request: rpc_pb2.DefragmentRequest, context: Any
    ) -> rpc_pb2.DefragmentResponse:
        """etcd compacts its bolt file; metaledger's store is the image in memory, the
        change-log segments and the Raft log, which shrink only behind a snapshot: this
        asks the engine for a snapshot now (taken in the background, as its own trigger
        would; segments it covers are then deleted, or archived, as usual) and answers
        success at once, as etcd answers when its defragment is done."""
        self.node.engine.force_snapshot()
        return rpc_pb2.DefragmentResponse(header=self.node.header(self.node.state.image.revision))

    @rpc
    async def Alarm(self, request: rpc_pb2.AlarmRequest, context: Any) -> rpc_pb2.AlarmResponse:
        """etcd's Alarm: GET lists every member's raised alarms of a type (NONE: all) from
        the image, after a read barrier (etcd reads them through its log), with this
        member's full disk while it lasts; ACTIVATE and
        DEACTIVATE are ``alarm`` entries (:mod:`nameserver.cluster.apply`), answered with
        the alarm changed (none: DEACTIVATE of an alarm not raised, still OK)."""
        if request.action != rpc_pb2.AlarmRequest.GET:
            applied = await self.node.propose(alarm_entry(request), context)
            resp = applied.result
            return resp if isinstance(resp, rpc_pb2.AlarmResponse) else rpc_pb2.AlarmResponse()
        # linearizable, except while this member's own disk is full: its apply may be
        # stuck behind the full change log, and the alarm list must still answer
        image = await self.node.read_image(self.node.log.health.refuses_writes)
        resp = rpc_pb2.AlarmResponse()  # no header: etcd 3.4 sets none on alarm answers
        for member_id, alarm in self._alarms(image, request.alarm):
            resp.alarms.add(memberID=member_id, alarm=alarm)
        return resp

    def _alarms(self, image: MetadataImage, alarm: int = ALARM_NONE) -> list[tuple[int, int]]:
        """(member id, alarm type) of the raised alarms of type ``alarm`` (NONE: all): the
        image's, and this member's full disk while it lasts (raftlog.health: a local state
        that leaves by itself when space returns, and that a one-member cluster could not
        write to its log anyway)."""
        out = [(a.member_id, a.alarm) for a in image.alarms.list(alarm)]
        me = self.node.member_id
        if (
            self.node.log.health.refuses_writes  # this member's disk is full right now
            and alarm in (ALARM_NONE, ALARM_NOSPACE)
            and image.alarms.get(alarm_key(me, ALARM_NOSPACE)) is None
        ):
            out.append((me, ALARM_NOSPACE))
        return out


class AdminService(admin_pb2_grpc.AdminServicer):  # type: ignore[misc]
    def __init__(self, node: NodeContext) -> None:
        self.node = node

    @rpc
    async def Status(
        self, request: admin_pb2.StatusRequest, context: Any
    ) -> admin_pb2.StatusResponse:
        st = self.node.log.engine_status()
        off = self.node.log.offsets()
        cfg = self.node.config
        return admin_pb2.StatusResponse(
            id=cfg.node_id,
            role=st.role,
            term=st.term,
            leader=st.leader_id,
            end_offset=off.end_offset,
            commit_offset=off.commit_offset,
            apply_offset=off.apply_offset,
            applied_lag=off.commit_offset - off.apply_offset,
            segment_flushed_offset=off.flushed_offset,
            cluster_id=f"{self.node.cluster_id:016x}",
            member_id=self.node.member_id,
            db_size_bytes=sum(s.size for s in self.node.log.segments.segments()),
            has_quorum=st.has_quorum,
            peer_url="http://" + cfg.listen_peer,
            client_urls=list(cfg.client_urls),
            items_proposed=self.node.log.items_proposed,
            requests_proposed=self.node.log.requests_proposed,
        )

    @rpc
    async def Members(
        self, request: admin_pb2.MembersRequest, context: Any
    ) -> admin_pb2.MembersResponse:
        resp = admin_pb2.MembersResponse()
        for name, mid, address, client_urls in self.node.members(self.node.state.image):
            resp.members.add(
                id=name, member_id=mid, peer_url="http://" + address, client_urls=list(client_urls)
            )
        return resp
