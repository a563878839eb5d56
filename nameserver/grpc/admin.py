"""etcd's Maintenance service (status, snapshot, hash, defragment, alarms, move leader) and
metaledger.v1.Admin.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import grpc

from nameserver.grpc.status import abort_stream, rpc
from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc
from protos.metaledger.v1 import admin_pb2, admin_pb2_grpc
from snapshots import etcd_trailer

if TYPE_CHECKING:
    from nameserver.node import NodeFacade

#: the etcd server version we match (etcd's StatusResponse.version, the VERSION column of
#: ``etcdctl endpoint status``): etcd 3.4.23 answers its full version, not the API level
ETCD_VERSION = "3.4.23"
SNAPSHOT_CHUNK_BYTES = 1 << 20
#: etcd's snapshot chunk (etcdserver/api/v3rpc/maintenance.go: 32 KiB)
ETCD_SNAPSHOT_CHUNK_BYTES = 32 * 1024
#: the call metadata that picks metaledger's own snapshot format (the default is etcd's)
SNAPSHOT_FORMAT_METADATA = "x-ml-snapshot-format"
NATIVE_SNAPSHOT_FORMAT = "metaledger"

#: Status's trailing metadata: this member applies ``count_revisions`` (the leader asks
#: before switching the store to etcd's revision count; nameserver.kv.revision's
#: COUNTS_METADATA, written out here: the front imports no domain)
COUNTS_METADATA = ("x-ml-revisions", "etcd")
FLOOR_METADATA = ("x-ml-revisions-floor", "1")
START_METADATA = ("x-ml-revisions-start", "untouched")
#: ... and, once this member's store counts etcd's way (switched), this one too: what a
#: script or a test waits for before it relies on etcd's numbering
COUNTING_METADATA = ("x-ml-store-revisions", "etcd")


class MaintenanceService(rpc_pb2_grpc.MaintenanceServicer):  # type: ignore[misc]
    def __init__(self, node: NodeFacade) -> None:
        self.node = node

    @rpc
    async def Status(self, request: rpc_pb2.StatusRequest, context: Any) -> rpc_pb2.StatusResponse:
        st = self.node.log.engine_status()
        off = self.node.log.offsets()
        image = self.node.state.image
        trailing = [COUNTS_METADATA, FLOOR_METADATA, START_METADATA]  # the leader's question
        if image.store_rev.revision >= 0:
            trailing.append(COUNTING_METADATA)
        with contextlib.suppress(AttributeError):  # a context without metadata (tests)
            context.set_trailing_metadata(tuple(trailing))
        return rpc_pb2.StatusResponse(
            header=self.node.header(image.revision),
            version=ETCD_VERSION,
            dbSize=self.node.db_size_bytes(),
            dbSizeInUse=self.node.db_size_bytes(),
            leader=self.node.leader_member_id(),
            raftIndex=off.commit_offset,
            raftTerm=st.term,
            raftAppliedIndex=off.apply_offset,
            errors=self.node.status_errors(),
        )

    async def Snapshot(
        self, request: rpc_pb2.SnapshotRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[rpc_pb2.SnapshotResponse]:
        """Stream a fresh snapshot of this node's image: etcd 3.4's bbolt database and its
        SHA-256 (``etcdctl snapshot save|status|restore`` read it;
        :mod:`nameserver.etcd_snapshot` says what it carries), or, when the call's metadata
        asks for it (``x-ml-snapshot-format: metaledger``, as ``metaledger snapshot save``
        does), metaledger's own format with every record (routes, offsets, replica groups...)."""
        wanted = dict(context.invocation_metadata() or ()).get(SNAPSHOT_FORMAT_METADATA)
        if wanted == NATIVE_SNAPSHOT_FORMAT:
            async for resp in self._native_snapshot(context):
                yield resp
            return
        try:
            data, image = await self.node.etcd_snapshot()
        except Exception as exc:
            await abort_stream(context, "Snapshot", exc)
            return
        sent = 0
        for start in range(0, len(data), ETCD_SNAPSHOT_CHUNK_BYTES):
            blob = data[start : start + ETCD_SNAPSHOT_CHUNK_BYTES]
            sent += len(blob)
            resp = rpc_pb2.SnapshotResponse(blob=blob, remaining_bytes=len(data) - sent)
            if sent == len(blob):
                resp.header.CopyFrom(self.node.header(image.revision))
            yield resp

    async def _native_snapshot(
        self, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[rpc_pb2.SnapshotResponse]:
        """metaledger's own snapshot file, then etcd's trailer (``metaledger snapshot
        inspect|restore`` read it)."""
        try:
            tmp, image = await self.node.snapshot_file()
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
        await self.node.move_leader(request.targetID)
        return rpc_pb2.MoveLeaderResponse(header=self.node.header(image.revision))

    @rpc
    async def HashKV(self, request: rpc_pb2.HashKVRequest, context: Any) -> rpc_pb2.HashKVResponse:
        """A content hash of the key-value store at ``revision`` (0: the current one) and
        the compaction revision in force there (:func:`nameserver.kv.hashing.kv_hash_at`):
        the same on every member at the same revision. OUT_OF_RANGE (etcd's texts) above
        the current revision or below this node's history floor."""
        image = self.node.state.image
        digest, _ = await self.node.hash_kv(request.revision)
        if image.store_rev.revision >= 0:  # the corruption check compares like with like
            with contextlib.suppress(AttributeError):  # a context without metadata (tests)
                context.set_trailing_metadata((COUNTING_METADATA,))
        return rpc_pb2.HashKVResponse(
            header=self.node.header(image.revision),
            hash=digest,
            compact_revision=image.mvcc.compact_revision,
        )

    @rpc
    async def Hash(self, request: rpc_pb2.HashRequest, context: Any) -> rpc_pb2.HashResponse:
        """A content hash of this node's whole image, every record type (etcd: the backend)."""
        image = self.node.state.image
        digest = await self.node.image_hash(image)
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
            return await self.node.change_alarm(request, context.invocation_metadata())
        resp = rpc_pb2.AlarmResponse()  # no header: etcd 3.4 sets none on alarm answers
        for member_id, alarm in await self.node.read_alarms(request.alarm):
            resp.alarms.add(memberID=member_id, alarm=alarm)
        return resp


class AdminService(admin_pb2_grpc.AdminServicer):  # type: ignore[misc]
    def __init__(self, node: NodeFacade) -> None:
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
            db_size_bytes=self.node.db_size_bytes(),
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
