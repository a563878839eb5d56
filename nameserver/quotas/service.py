"""metaledger.v1.Quotas: set and read the per-type quotas and their usage."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nameserver.grpc.status import rpc
from nameserver.quotas import apply as quotas
from nameserver.state import consistency
from nameserver.state.image import MetadataDelta, MetadataImage
from protos import records_pb2
from protos.metaledger.v1 import quotas_pb2, quotas_pb2_grpc
from raftlog import Entry

if TYPE_CHECKING:
    from nameserver.node import NodeFacade


def quota_usage(image: MetadataImage) -> list[quotas_pb2.QuotaUsage]:
    """Limits and usage of every quota type in ``image``."""
    delta = MetadataDelta(image)  # reads only: the usage counters of an untouched delta
    used = quotas.usage(delta)
    out = []
    for record_type in quotas.quota_types(image.registry):
        limit = quotas.limit_of(delta, record_type)
        keys, size = used[record_type]
        out.append(
            quotas_pb2.QuotaUsage(
                record_type=record_type,
                max_keys=limit.max_keys,
                max_bytes=limit.max_bytes,
                keys=keys,
                bytes=size,
            )
        )
    return out


class QuotasService(quotas_pb2_grpc.QuotasServicer):  # type: ignore[misc]
    def __init__(self, node: NodeFacade) -> None:
        self.node = node

    @rpc
    async def Set(
        self, request: quotas_pb2.SetQuotaRequest, context: Any
    ) -> quotas_pb2.SetQuotaResponse:
        q = records_pb2.QuotaRecord(
            record_type=request.record_type,
            max_keys=request.max_keys,
            max_bytes=request.max_bytes,
        )
        quotas.validate(q, quotas.quota_types(self.node.state.image.registry))
        applied = await self.node.propose(
            Entry(type="quota", key=q.record_type.encode(), value=q.SerializeToString()),
            context.invocation_metadata(),
        )
        return quotas_pb2.SetQuotaResponse(revision=applied.offset)

    @rpc
    async def List(
        self, request: quotas_pb2.ListQuotasRequest, context: Any
    ) -> quotas_pb2.ListQuotasResponse:
        image, _ = await consistency.read_image(self.node, "quota")
        resp = quotas_pb2.ListQuotasResponse(revision=image.offset)
        resp.quotas.extend(quota_usage(image))
        return resp
