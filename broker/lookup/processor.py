"""QUERY_MESSAGE (12) and VIEW_MESSAGE_BY_ID (33), RocketMQ 5's ``QueryMessageProcessor``
(broker/src/main/java/org/apache/rocketmq/broker/processor/QueryMessageProcessor.java:76-189),
and :class:`MessageLookup`, what they and the gRPC admin front (:mod:`broker.grpc.admin`) ask.

- QUERY_MESSAGE: the records of ``topic`` indexed under ``key`` stored between
  ``beginTimestamp`` and ``endTimestamp``, at most ``maxNum`` (≤ 64), oldest first, as the
  body (raw records one after the other, as a pull's). With the ext field
  ``_UNIQUE_KEY_QUERY`` = true the key is a UNIQ_KEY and ``maxNum`` is 32 (RocketMQ's
  ``defaultQueryMaxNum``). The answer's ext fields ``indexLastUpdateTimestamp`` and
  ``indexLastUpdatePhyoffset`` say how far the index got; nothing found is QUERY_NOT_FOUND
  (22) "can not find message, maybe time range not correct".
- VIEW_MESSAGE_BY_ID: the record at commit-log ``offset`` (the offset message id's last 8
  bytes) as the body; no record there is SYSTEM_ERROR "can not find message by the offset, N".

Both answer on masters and slaves alike (every replica indexes what it stores), and only
records the replication lets consumers read (``readable_limit``: a quorum's confirmed
offset). A header missing a field is the codec's BadRequest naming it.
"""

from __future__ import annotations

from broker.core import BrokerCore
from broker.lookup.query import query_messages, record_at
from broker.store.index import DEFAULT_QUERY_MAX_NUM, IndexHits
from rmq.codec import RemotingCommand
from rmq.codes import RequestCode, ResponseCode
from rmq.headers import QueryMessageHeader, QueryMessageResponseHeader, ViewMessageHeader
from rmq.server import Handler, Peer

UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"  # MixAll.UNIQUE_MSG_QUERY_FLAG
NOT_FOUND_REMARK = "can not find message, maybe time range not correct"


class MessageLookup:
    """One replica's lookups, run on the store's thread pool."""

    def __init__(self, core: BrokerCore) -> None:
        self.core = core

    async def query(
        self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int, unique: bool
    ) -> tuple[list[bytes], IndexHits]:
        limit = self.core.replication.readable_limit()
        return await self.core.run(
            query_messages, self.core.store, topic, key, max_num, begin_ms, end_ms, unique, limit
        )

    async def view(self, offset: int) -> bytes | None:
        limit = self.core.replication.readable_limit()
        found = await self.core.run(record_at, self.core.store, offset, limit)
        return None if found is None else found[0]


class QueryProcessor:
    def __init__(self, core: BrokerCore) -> None:
        self.lookup = MessageLookup(core)

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.QUERY_MESSAGE: self.query_message,
            RequestCode.VIEW_MESSAGE_BY_ID: self.view_message,
        }

    async def query_message(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        h = QueryMessageHeader.from_command(request)
        unique = request.ext_fields.get(UNIQUE_KEY_QUERY) == "true"
        max_num = DEFAULT_QUERY_MAX_NUM if unique else h.max_num
        records, hits = await self.lookup.query(
            h.topic, h.key, max_num, h.begin_timestamp, h.end_timestamp, unique
        )
        answer = QueryMessageResponseHeader(hits.last_timestamp, hits.last_phy_offset)
        if records:
            return answer.response(request, ResponseCode.SUCCESS, body=b"".join(records))
        return answer.response(request, ResponseCode.QUERY_NOT_FOUND, NOT_FOUND_REMARK)

    async def view_message(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        h = ViewMessageHeader.from_command(request)
        raw = await self.lookup.view(h.offset)
        if raw is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {h.offset}"
            )
        return request.response(ResponseCode.SUCCESS, body=raw)
