"""The consumer-side codes (RocketMQ's ``ClientManageProcessor``, ``ConsumerManageProcessor``).

- HEART_BEAT (34): body HeartbeatData JSON (C++ enum ordinals or names, both read); each
  consumer group is registered, its ``%RETRY%<group>`` topic created (1 queue) and, when the
  group's members changed, NOTIFY_CONSUMER_IDS_CHANGED (40, oneway) sent to its members; each
  producer group of ``producerDataSet`` registers the connection (where a transaction's
  check goes: ``broker.state.producers``).
- UNREGISTER_CLIENT (35): the client leaves its group(s) (same notification).
- GET_CONSUMER_LIST_BY_GROUP (38): ``{"consumerIdList": [...]}``, SYSTEM_ERROR without members.
- LOCK_BATCH_MQ (41) / UNLOCK_BATCH_MQ (42): ``{consumerGroup, clientId, mqSet}`` →
  ``{"lockOKMQSet": [...]}``.
- QUERY_CONSUMER_OFFSET (14): ``offset``; a group without one gets 0 when the queue still
  starts at 0 (RocketMQ 4.9's ``ConsumerManageProcessor.java:118-152``), else
  QUERY_NOT_FOUND (22). UPDATE_CONSUMER_OFFSET (15, often oneway).
- GET_MAX_OFFSET (30), GET_MIN_OFFSET (31), SEARCH_OFFSET_BY_TIMESTAMP (29): ``offset``.
"""

from __future__ import annotations

import json
from typing import Any

from broker.core import BrokerCore, now_ms
from broker.remoting.errors import BrokerRequestError
from broker.state.producers import PeerChannel, ProducerClient
from broker.topics import RETRY_PREFIX, TOPIC_NAME
from rmq.codec import BadRequest, RemotingCommand, loads_lenient
from rmq.codes import RequestCode, ResponseCode, version_name
from rmq.headers import (
    OffsetResponseHeader,
    QueryConsumerOffsetHeader,
    QueueHeader,
    SearchOffsetHeader,
    UnregisterClientHeader,
    UpdateConsumerOffsetHeader,
)
from rmq.server import Handler, Peer

#: every Java client's own producer (``MixAll.CLIENT_INNER_PRODUCER_GROUP``): never a sender of
#: transactions, not registered
INNER_PRODUCER = "CLIENT_INNER_PRODUCER"


def _json_body(request: RemotingCommand, what: str) -> dict[str, Any]:
    try:
        doc = loads_lenient(request.body)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise BadRequest(f"{what}: the body is not JSON") from None
    if not isinstance(doc, dict):
        raise BadRequest(f"{what}: the body must be a JSON object")
    return doc


def _queues(doc: dict[str, Any], what: str) -> list[tuple[str, int]]:
    out = []
    for mq in doc.get("mqSet") or []:
        if not isinstance(mq, dict) or not isinstance(mq.get("topic"), str):
            raise BadRequest(f"{what}: an mqSet entry has no topic")
        qid = mq.get("queueId")
        if isinstance(qid, str) and qid.lstrip("-").isdigit():
            qid = int(qid)
        if not isinstance(qid, int) or isinstance(qid, bool):
            raise BadRequest(f"{what}: an mqSet entry has no integer queueId")
        out.append((mq["topic"], qid))
    return out


class ConsumerProcessor:
    def __init__(self, core: BrokerCore) -> None:
        self.core = core

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.HEART_BEAT: self.heartbeat,
            RequestCode.UNREGISTER_CLIENT: self.unregister,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
            RequestCode.LOCK_BATCH_MQ: self.lock,
            RequestCode.UNLOCK_BATCH_MQ: self.unlock,
            RequestCode.QUERY_CONSUMER_OFFSET: self.query_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self.update_offset,
            RequestCode.GET_MAX_OFFSET: self.max_offset,
            RequestCode.GET_MIN_OFFSET: self.min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset,
        }

    # --------------------------------------------------------------- registry
    def notify(self, groups: list[str]) -> None:
        """NOTIFY_CONSUMER_IDS_CHANGED (40, oneway) to every member of each group."""
        for group in groups:
            for peer in self.core.consumers.peers(group):
                peer.send_oneway(
                    RemotingCommand.request(
                        RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                        {"consumerGroup": group},
                        oneway=True,
                    )
                )

    def connection_closed(self, peer: Peer) -> None:
        self.core.producers.connection_closed(PeerChannel(peer).key)
        self.notify(self.core.consumers.connection_closed(peer))

    def expire(self) -> None:
        self.core.producers.expire(now_ms())
        self.notify(self.core.consumers.expire(now_ms()))

    async def heartbeat(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        doc = _json_body(request, "heartbeat")
        client_id = doc.get("clientID")
        if not isinstance(client_id, str) or not client_id:
            raise BadRequest("heartbeat: the body has no clientID")
        changed: list[str] = []
        for data in doc.get("consumerDataSet") or []:
            if not isinstance(data, dict):
                raise BadRequest("heartbeat: consumerDataSet entries must be objects")
            group = data.get("groupName")
            if isinstance(group, str) and TOPIC_NAME.fullmatch(RETRY_PREFIX + group):
                self.core.topics.ensure(RETRY_PREFIX + group, 1)
            changed += self.core.consumers.heartbeat(
                client_id, peer, data, now_ms(), request.language, request.version
            )
        producer = ProducerClient(
            peer.address,
            request.language,
            request.version,
            "remoting",
            version_name(request.version),
        )
        for data in doc.get("producerDataSet") or []:
            group = data.get("groupName") if isinstance(data, dict) else None
            if isinstance(group, str) and group and group != INNER_PRODUCER:
                self.core.producers.heartbeat(
                    group, client_id, PeerChannel(peer), now_ms(), producer
                )
        self.notify(changed)
        return request.response(ResponseCode.SUCCESS)

    async def unregister(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        h = UnregisterClientHeader.from_command(request)
        if h.producer_group:
            self.core.producers.unregister(h.producer_group, h.client_id)
        if h.consumer_group:
            self.notify(self.core.consumers.unregister(h.client_id, h.consumer_group))
        return request.response(ResponseCode.SUCCESS)

    async def consumer_list(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        group = request.ext_str("consumerGroup")
        ids = self.core.consumers.client_ids(group)
        if not ids:
            raise BrokerRequestError(f"no consumer for this group, {group}")
        return request.response(
            ResponseCode.SUCCESS, body=json.dumps({"consumerIdList": ids}).encode()
        )

    async def lock(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        doc = _json_body(request, "lockBatchMQ")
        group, client = doc.get("consumerGroup"), doc.get("clientId")
        if not isinstance(group, str) or not isinstance(client, str):
            raise BadRequest("lockBatchMQ: consumerGroup and clientId must be strings")
        mqs = {
            (t, q): mq
            for (t, q), mq in zip(_queues(doc, "lockBatchMQ"), doc.get("mqSet") or [], strict=True)
        }
        got = self.core.locks.try_lock(group, list(mqs), client, now_ms())
        body = json.dumps({"lockOKMQSet": [mqs[k] for k in got]}).encode()
        return request.response(ResponseCode.SUCCESS, body=body)

    async def unlock(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        doc = _json_body(request, "unlockBatchMQ")
        group, client = doc.get("consumerGroup"), doc.get("clientId")
        if not isinstance(group, str) or not isinstance(client, str):
            raise BadRequest("unlockBatchMQ: consumerGroup and clientId must be strings")
        self.core.locks.unlock(group, _queues(doc, "unlockBatchMQ"), client)
        return request.response(ResponseCode.SUCCESS)

    # ---------------------------------------------------------------- offsets
    async def query_offset(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        h = QueryConsumerOffsetHeader.from_command(request)
        if not self.core.offsets.loaded:  # answering 0 or 22 now would rewind or skip
            raise BrokerRequestError("consumer offsets are not loaded from metaledger yet, retry")
        offset = self.core.offsets.load(h.consumer_group, h.topic, h.queue_id)
        if offset is None:
            if self.core.store.min_offset(h.topic, h.queue_id) <= 0:
                offset = 0  # as RocketMQ: a young queue starts a new group at 0
            else:
                return request.response(
                    ResponseCode.QUERY_NOT_FOUND,
                    "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
                )
        return OffsetResponseHeader(offset).response(request, ResponseCode.SUCCESS)

    async def update_offset(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        h = UpdateConsumerOffsetHeader.from_command(request)
        if h.commit_offset >= 0:
            self.core.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        return request.response(ResponseCode.SUCCESS)

    async def max_offset(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        h = QueueHeader.from_command(request)
        offset = self.core.store.max_offset(h.topic, h.queue_id)
        return OffsetResponseHeader(offset).response(request, ResponseCode.SUCCESS)

    async def min_offset(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        h = QueueHeader.from_command(request)
        offset = self.core.store.min_offset(h.topic, h.queue_id)
        return OffsetResponseHeader(offset).response(request, ResponseCode.SUCCESS)

    async def search_offset(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        h = SearchOffsetHeader.from_command(request)
        offset = await self.core.run(
            self.core.store.search_offset_by_timestamp, h.topic, h.queue_id, h.timestamp
        )
        return OffsetResponseHeader(offset).response(request, ResponseCode.SUCCESS)
