"""RocketMQ 5's ``apache.rocketmq.v2.Admin`` on a replica's gRPC port: QueryMessage.

``rpc QueryMessage(ListMessageRequest) returns (ListMessageResponse)`` (protos/apache/rocketmq/
v2/admin.proto) looks up messages of ``topic`` in this replica's index
(:class:`broker.lookup.processor.MessageLookup`, the one QUERY_MESSAGE uses):

- ``message_key``: the messages whose KEYS hold it;
- ``message_id``: the message with that UNIQ_KEY (the id a 5.x producer gives), else, when
  the id is an offset message id, the record at its commit-log offset if it was stored by the
  id's host (so another group's id never finds this group's record);
- ``begin_timestamp``/``end_timestamp`` (store time; unset: all), ``max_message_nums`` (0: 32;
  at most 64).

Nothing found is MESSAGE_NOT_FOUND; a missing topic ILLEGAL_TOPIC, no search key or an
empty one BAD_REQUEST, ``subscription``/``lite_topic`` keys UNSUPPORTED, each naming the
field. Every other Admin method answers NOT_IMPLEMENTED. Messages are converted here with
:func:`broker.grpc.consume.to_message`, as a consumer receives them.
"""

from __future__ import annotations

from typing import Any

from broker.grpc.convert import to_message
from broker.grpc.service import Refused, _not_implemented, status
from broker.lookup.processor import MessageLookup
from broker.store.index import DEFAULT_QUERY_MAX_NUM
from protos.apache.rocketmq.v2 import admin_pb2 as adm
from protos.apache.rocketmq.v2 import admin_pb2_grpc as adm_grpc
from protos.apache.rocketmq.v2 import definition_pb2 as v2
from rmq.message import decode
from rmq.msgid import parse_offset_msg_id

IMPLEMENTED = frozenset({"QueryMessage"})
END_OF_TIME_MS = 2**63 - 1


class AdminService(adm_grpc.AdminServicer):  # type: ignore[misc]
    def __init__(self, lookup: MessageLookup) -> None:
        self.lookup = lookup
        for method in adm.DESCRIPTOR.services_by_name["Admin"].methods:
            if method.name not in IMPLEMENTED:
                setattr(self, method.name, _not_implemented(method, adm))

    async def QueryMessage(self, request: adm.ListMessageRequest, context: Any) -> Any:
        try:
            records = await self._query(request)
        except Refused as exc:
            return adm.ListMessageResponse(status=status(exc.code, str(exc)))
        messages = [to_message(decode(raw, check_crc=False)) for raw in records]
        if not messages:
            return adm.ListMessageResponse(
                status=status(v2.MESSAGE_NOT_FOUND, "no message matches in this replica")
            )
        return adm.ListMessageResponse(status=status(v2.OK), messages=messages)

    async def _query(self, request: adm.ListMessageRequest) -> list[bytes]:
        topic = request.topic.name
        if not topic:
            raise Refused(v2.ILLEGAL_TOPIC, "topic.name: required")
        which = request.WhichOneof("search_key")
        if which is None:
            raise Refused(v2.BAD_REQUEST, "search_key: give message_id or message_key")
        if which not in ("message_id", "message_key"):
            raise Refused(v2.UNSUPPORTED, f"{which}: not supported (message_id or message_key)")
        key = getattr(request, which)
        if not key:
            raise Refused(v2.BAD_REQUEST, f"{which}: empty")
        if request.max_message_nums < 0:
            raise Refused(v2.BAD_REQUEST, f"max_message_nums: {request.max_message_nums}")
        max_num = request.max_message_nums or DEFAULT_QUERY_MAX_NUM
        begin = (
            request.begin_timestamp.ToMilliseconds() if request.HasField("begin_timestamp") else 0
        )
        end = (
            request.end_timestamp.ToMilliseconds()
            if request.HasField("end_timestamp")
            else END_OF_TIME_MS
        )
        unique = which == "message_id"
        records, _hits = await self.lookup.query(topic, key, max_num, begin, end, unique)
        if records or not unique:
            return records
        try:
            where = parse_offset_msg_id(key)
        except ValueError:
            return []
        raw = await self.lookup.view(where.offset)
        if raw is None:
            return []
        m = decode(raw, check_crc=False)
        if m.topic != topic or (m.store_host.ip, m.store_host.port) != (where.ip, where.port):
            return []
        return [raw]


def add_admin_to_server(service: AdminService, server: Any) -> None:
    adm_grpc.add_AdminServicer_to_server(service, server)
