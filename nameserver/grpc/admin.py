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
        )

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
        """Nothing to do: the image lives in memory and the logs are append-only segments
        deleted whole (etcd defragments its bolt file)."""
        return rpc_pb2.DefragmentResponse(header=self.node.header(self.node.state.image.revision))

    @rpc
    async def Alarm(self, request: rpc_pb2.AlarmRequest, context: Any) -> rpc_pb2.AlarmResponse:
        # This node's NOSPACE alarm (raftlog.health): raised and cleared by the node itself
        # as its disk fills and frees, so every action (list, disarm, arm) reports it.
        alarms = [rpc_pb2.AlarmMember(memberID=self.node.member_id, alarm=rpc_pb2.NOSPACE)]
        return rpc_pb2.AlarmResponse(
            header=self.node.header(self.node.state.image.revision),
            alarms=alarms if self.node.log.health.refuses_writes else [],
        )


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
            client_urls=[cfg.client_url],
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
