"""A pipelined asyncio RocketMQ remoting client for the broker benchmark (load side only).

Frames go through ``rmq.connection.RemotingConnection`` (the sans-I/O codec underneath); many
requests are in flight on one connection and each reply is matched to its request by
``opaque``, as RocketMQ's own clients do (``NettyRemotingAbstract.responseTable``).

Requests, as real producers and consumers send them (research/broker.md §2, §3;
rocketmq-clients.md §1.6):

* SEND_MESSAGE_V2 (310): the V1 header's fields renamed ``a``..``m`` in order (producerGroup,
  topic, defaultTopic, defaultTopicQueueNums, queueId, sysFlag, bornTimestamp, flag,
  properties, reconsumeTimes, unitMode, maxReconsumeTimes, batch) plus ``n`` = brokerName
  (J4 ``SendMessageRequestHeaderV2.java:32-60``); properties ``k\\x01v\\x02`` with a
  ``UNIQ_KEY`` and ``WAIT=true``. Answer SUCCESS (0) = PUT_OK; any other code is a failed send.
* SEND_BATCH_MESSAGE (320): the same header with ``batch``, properties ``WAIT=true`` only, the
  body the messages in the store's batch encoding (``rmq.batch``), as the Redis replicator's
  sink sends a full sync.
* PULL_MESSAGE (11) with SUSPEND|SUBSCRIPTION (0x2|0x4), subscription ``*``, long polling:
  SUCCESS carries stored records (§1), 19 = nothing new, 20/21 = go on at ``nextBeginOffset``.
* HEART_BEAT (34) registering the benchmark's consumer group before it pulls.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Callable, Iterable
from typing import Any

from replicator.rocketmq import wire
from rmq.batch import encode_batch_raw
from rmq.codec import RemotingCommand
from rmq.codes import RequestCode, ResponseCode
from rmq.connection import ConnectionLost as ConnectionLost
from rmq.connection import RemotingConnection as RemotingConnection
from rmq.headers import DEFAULT_TOPIC, SendMessageHeader
from rmq.message import decode_records, properties_text
from rmq.msgid import uniq_key

SEND_MESSAGE_V2 = RequestCode.SEND_MESSAGE_V2
PULL_MESSAGE = RequestCode.PULL_MESSAGE
HEART_BEAT = RequestCode.HEART_BEAT
SUCCESS = ResponseCode.SUCCESS
PULL_NOT_FOUND = ResponseCode.PULL_NOT_FOUND
PULL_RETRY_IMMEDIATELY = ResponseCode.PULL_RETRY_IMMEDIATELY
PULL_OFFSET_MOVED = ResponseCode.PULL_OFFSET_MOVED
PRODUCER_GROUP = "bench-producer"
CONSUMER_GROUP = "bench-consumer"


class SendFailed(Exception):
    """A send answered with a code other than SUCCESS."""

    def __init__(self, code: int, remark: str | None) -> None:
        super().__init__(f"code {code}: {remark or ''}".rstrip(": "))
        self.code = code


def _send_request(
    topic: str,
    queue_id: int,
    body: bytes,
    broker_name: str,
    producer_group: str,
    queue_nums: int,
    properties: str,
    batch: bool,
) -> RemotingCommand:
    """SEND_MESSAGE_V2, or SEND_BATCH_MESSAGE when ``batch``: fields as the Java client's
    ``createSendMessageRequestHeaderV2``."""
    return SendMessageHeader(
        producer_group=producer_group,
        topic=topic,
        default_topic=DEFAULT_TOPIC,
        default_topic_queue_nums=queue_nums,
        queue_id=queue_id,
        sys_flag=0,
        born_timestamp=int(time.time() * 1000),
        flag=0,
        properties=properties,
        reconsume_times=0,
        unit_mode=False,
        batch=batch,
        broker_name=broker_name,
    ).request_v2(body, language="PYTHON")


def send_v2_request(
    topic: str,
    queue_id: int,
    body: bytes,
    broker_name: str,
    producer_group: str = PRODUCER_GROUP,
    queue_nums: int = 4,
) -> RemotingCommand:
    """One SEND_MESSAGE_V2 request, fields as the Java client's ``createSendMessageRequestHeaderV2``."""
    props = properties_text({"UNIQ_KEY": uniq_key(), "WAIT": "true"})
    return _send_request(
        topic, queue_id, body, broker_name, producer_group, queue_nums, props, batch=False
    )


def send_batch_request(
    topic: str,
    queue_id: int,
    items: Iterable[tuple[int, bytes, bytes]],
    broker_name: str,
    producer_group: str = PRODUCER_GROUP,
    queue_nums: int = 4,
) -> RemotingCommand:
    """One SEND_BATCH_MESSAGE request of ``items`` (flag, body, encoded properties each,
    ``rmq.batch.encode_batch_raw``), the header's properties WAIT only, as the Redis
    replicator's sink sends several messages."""
    body = encode_batch_raw(items)
    props = properties_text({"WAIT": "true"})
    return _send_request(
        topic, queue_id, body, broker_name, producer_group, queue_nums, props, batch=True
    )


def pull_request(
    topic: str, queue_id: int, offset: int, suspend_ms: int = 1000, max_msgs: int = 32
) -> RemotingCommand:
    """PULL_MESSAGE from ``offset``, at most ``max_msgs`` messages (the Java consumer's
    ``pullBatchSize``, default 32)."""
    return wire.pull_request(CONSUMER_GROUP, topic, queue_id, offset, max_msgs, suspend_ms)


def heartbeat_request(topic: str) -> RemotingCommand:
    body = {
        "clientID": f"bench@{os.getpid()}",
        "producerDataSet": [{"groupName": PRODUCER_GROUP}],
        "consumerDataSet": [
            {
                "groupName": CONSUMER_GROUP,
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "subscriptionDataSet": [
                    {
                        "topic": topic,
                        "subString": "*",
                        "tagsSet": [],
                        "codeSet": [],
                        "subVersion": 0,
                        "expressionType": "TAG",
                    }
                ],
                "unitMode": False,
            }
        ],
    }
    return RemotingCommand.request(HEART_BEAT, body=json.dumps(body).encode(), language="PYTHON")


def record_bodies(data: bytes) -> list[bytes]:
    """The bodies of the stored records a PULL_MESSAGE answer carries (research §1)."""
    return [m.body for m in decode_records(data, check_crc=False)]


class RmqTarget:
    """SEND_MESSAGE_V2 to one broker address over ``connections`` connections; worker ``w``
    sends on connection ``w % connections`` to queue ``w % queues``."""

    def __init__(
        self, address: str, topic: str, broker_name: str, queues: int = 4, connections: int = 4
    ) -> None:
        self.address = address
        self.topic = topic
        self.broker_name = broker_name
        self.queues = queues
        self.connections = connections
        self._conns: list[RemotingConnection] = []
        self._pullers: list[asyncio.Task[None]] = []

    async def open(self, timeout_s: float = 30.0) -> None:
        """Connect, then send until the first PUT_OK (the port is open, the topic known
        and a master answers), retrying both for up to ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if not self._conns:
                    for _ in range(self.connections):
                        self._conns.append(await RemotingConnection.open(self.address))
                await self.send(0, b"warm-up")
                return
            except (SendFailed, ConnectionLost, OSError) as exc:
                if not isinstance(exc, SendFailed):
                    for conn in self._conns:
                        conn.close()
                    self._conns.clear()
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)

    async def send(self, worker: int, payload: bytes) -> None:
        request = send_v2_request(
            self.topic, worker % self.queues, payload, self.broker_name, queue_nums=self.queues
        )
        reply = await self._conns[worker % len(self._conns)].call(request)
        if reply.code != SUCCESS:
            raise SendFailed(reply.code, reply.remark)

    async def consume(self, on_payload: Callable[[bytes], None]) -> None:
        """A long-polling pull loop per queue from its current end (returns once started)."""
        conn = await RemotingConnection.open(self.address)
        self._conns.append(conn)
        await conn.call(heartbeat_request(self.topic))
        for q in range(self.queues):
            self._pullers.append(asyncio.create_task(self._pull_loop(conn, q, on_payload)))

    async def _pull_loop(
        self, conn: RemotingConnection, queue_id: int, on_payload: Callable[[bytes], None]
    ) -> None:
        max_offset = RemotingCommand.request(30, {"topic": self.topic, "queueId": queue_id})
        reply = await conn.call(max_offset)
        offset = int(reply.ext_fields.get("offset", "0"))
        while True:
            reply = await conn.call(pull_request(self.topic, queue_id, offset))
            if reply.code == SUCCESS:
                for body in record_bodies(reply.body):
                    on_payload(body)
            elif reply.code not in (PULL_NOT_FOUND, PULL_RETRY_IMMEDIATELY, PULL_OFFSET_MOVED):
                raise SendFailed(reply.code, f"pull: {reply.remark}")
            offset = int(reply.ext_fields.get("nextBeginOffset", offset))

    async def close(self) -> None:
        for task in self._pullers:
            task.cancel()
        for task in self._pullers:
            with contextlib.suppress(BaseException):
                await task
        for conn in self._conns:
            conn.close()
        self._conns.clear()

    def status(self) -> dict[str, Any]:
        return {"address": self.address, "topic": self.topic, "queues": self.queues}
