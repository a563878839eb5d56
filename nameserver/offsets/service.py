"""gRPC service ``metaledger.v1.Offsets`` (replicator offsets).

The rules live in the state machine (:mod:`nameserver.offsets.apply`), which imports
nothing from gRPC; here requests are checked early (the same checks apply runs, so a bad
request never reaches the log), proposed, and answered. Reads follow the consistency table
(:mod:`nameserver.state.consistency`): offsets are always read linearizably, whatever
``serializable`` asks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nameserver.checks import check_name
from nameserver.errors import AlreadyExists, NotFound
from nameserver.grpc.status import rpc
from nameserver.leases.expiry import LeaseKeeper
from nameserver.offsets import apply as offsets
from nameserver.offsets.records import CommittedOffset, offset_key
from nameserver.state import consistency
from protos import records_pb2
from protos.metaledger.v1 import offsets_pb2, offsets_pb2_grpc
from raftlog import Applied, Entry

if TYPE_CHECKING:
    from nameserver.node import NodeFacade


def to_pb(c: CommittedOffset) -> offsets_pb2.Offset:
    return offsets_pb2.Offset(
        job=c.job,
        partition=c.partition,
        offset=c.offset,
        position=c.position,
        version=c.version,
        epoch=c.epoch,
        lease_id=c.lease_id,
        fencing_token=c.fencing_token,
        create_revision=c.create_revision,
        mod_revision=c.mod_revision,
        reset_revision=c.reset_revision,
    )


class OffsetsService(offsets_pb2_grpc.OffsetsServicer):  # type: ignore[misc]
    def __init__(self, node: NodeFacade, keeper: LeaseKeeper) -> None:
        self.node = node
        self.keeper = keeper

    async def _propose(
        self, op: records_pb2.OffsetOperation, key: bytes, context: Any
    ) -> tuple[Applied, CommittedOffset]:
        applied = await self.node.propose(
            Entry(type="offset", key=key, value=op.SerializeToString()),
            context.invocation_metadata(),
        )
        result = applied.result
        if not isinstance(result, CommittedOffset):  # a de-duplicated retry: no result kept
            result = self.node.state.image.offsets.get(key)
            if result is None:  # reset or removed since: nothing to report but the revision
                raise AlreadyExists(
                    f"metaledger: this request was already applied at revision {applied.offset}",
                )
        return applied, result

    @rpc
    async def Commit(
        self, request: offsets_pb2.CommitRequest, context: Any
    ) -> offsets_pb2.CommitResponse:
        c = records_pb2.OffsetCommit(
            job=request.job,
            partition=request.partition,
            offset=request.offset,
            position=request.position,
            lease_id=request.lease_id,
            fencing_token=request.fencing_token,
            expected_version=request.expected_version,
            epoch=request.epoch,
        )
        offsets.check_commit(c)
        key = offset_key(c.job, c.partition)
        applied, result = await self._propose(records_pb2.OffsetOperation(commit=c), key, context)
        resp = offsets_pb2.CommitResponse(
            revision=applied.offset, version=result.version, epoch=result.epoch
        )
        if request.keepalive:
            # the commit just proved the lease alive at `applied.offset`: count it as a keepalive
            lease = self.node.state.image.leases.get(request.lease_id)
            resp.ttl = self.keeper.keep_alive(lease) if lease is not None else 0
        return resp

    @rpc
    async def Reset(
        self, request: offsets_pb2.ResetRequest, context: Any
    ) -> offsets_pb2.ResetResponse:
        r = records_pb2.OffsetReset(
            job=request.job,
            partition=request.partition,
            offset=request.offset,
            position=request.position,
            expected_version=request.expected_version,
        )
        offsets.check_reset(r)
        key = offset_key(r.job, r.partition)
        applied, result = await self._propose(records_pb2.OffsetOperation(reset=r), key, context)
        return offsets_pb2.ResetResponse(
            revision=applied.offset, version=result.version, epoch=result.epoch
        )

    @rpc
    async def Fetch(
        self, request: offsets_pb2.FetchRequest, context: Any
    ) -> offsets_pb2.FetchResponse:
        check_name("job", request.job)
        check_name("partition", request.partition)
        image, mode = await consistency.read_image(self.node, "offset", request.serializable)
        found = image.offsets.get(offset_key(request.job, request.partition))
        if found is None:
            raise NotFound(
                "metaledger: no offset committed for "
                + offsets.where(request.job, request.partition),
            )
        return offsets_pb2.FetchResponse(
            offset=to_pb(found), revision=image.offset, consistency=mode
        )

    @rpc
    async def List(
        self, request: offsets_pb2.ListRequest, context: Any
    ) -> offsets_pb2.ListResponse:
        offsets.check_job(request.job, prefix=request.prefix)
        image, mode = await consistency.read_image(self.node, "offset", request.serializable)
        resp = offsets_pb2.ListResponse(revision=image.offset, consistency=mode)
        budget = self.node.response_budget("offsets list")
        add = resp.offsets.append
        for c in image.offsets.of_job(request.job, request.prefix):
            offset = to_pb(c)
            budget.spend(offset.ByteSize() + 4)  # RESOURCE_EXHAUSTED before passing it
            add(offset)
        return resp
