"""A pipelined asyncio RocketMQ remoting client for the broker benchmark (load side only).

Frames go through the sans-I/O codec (``rmq.codec``: ``encode`` out, one
``FrameDecoder`` per connection in); many requests are in flight on one connection and each
reply is matched to its request by ``opaque``, as RocketMQ's own clients do
(``NettyRemotingAbstract.responseTable``).

Requests, as real producers and consumers send them (research/broker.md §2, §3;
rocketmq-clients.md §1.6):

* SEND_MESSAGE_V2 (310): the V1 header's fields renamed ``a``..``m`` in order (producerGroup,
  topic, defaultTopic, defaultTopicQueueNums, queueId, sysFlag, bornTimestamp, flag,
  properties, reconsumeTimes, unitMode, maxReconsumeTimes, batch) plus ``n`` = brokerName
  (J4 ``SendMessageRequestHeaderV2.java:32-60``); properties ``k\\x01v\\x02`` with a
  ``UNIQ_KEY`` and ``WAIT=true``. Answer SUCCESS (0) = PUT_OK; any other code is a failed send.
* PULL_MESSAGE (11) with SUSPEND|SUBSCRIPTION (0x2|0x4), subscription ``*``, long polling:
  SUCCESS carries stored records (§1), 19 = nothing new, 20/21 = go on at ``nextBeginOffset``.
* HEART_BEAT (34) registering the benchmark's consumer group before it pulls.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import time
from collections.abc import Callable
from typing import Any, cast

from rmq.codec import FrameDecoder, ProtocolError, RemotingCommand, encode
from rmq.message import decode_records, properties_text
from rmq.msgid import uniq_key

SEND_MESSAGE_V2 = 310
PULL_MESSAGE = 11
HEART_BEAT = 34
SUCCESS = 0
PULL_NOT_FOUND = 19
PULL_RETRY_IMMEDIATELY = 20
PULL_OFFSET_MOVED = 21
PULL_SYSFLAG = 0x2 | 0x4  # SUSPEND | SUBSCRIPTION (PullSysFlag.java:20-24)
DEFAULT_TOPIC = "TBW102"
PRODUCER_GROUP = "bench-producer"
CONSUMER_GROUP = "bench-consumer"


class SendFailed(Exception):
    """A send answered with a code other than SUCCESS."""

    def __init__(self, code: int, remark: str | None) -> None:
        super().__init__(f"code {code}: {remark or ''}".rstrip(": "))
        self.code = code


class ConnectionLost(Exception):
    pass


class RemotingConnection(asyncio.Protocol):
    """One TCP connection; ``call`` may be awaited by many tasks at once."""

    def __init__(self) -> None:
        self._decoder = FrameDecoder()
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._opaque = itertools.count(1)
        self._lost: BaseException | None = None

    @classmethod
    async def open(cls, address: str) -> RemotingConnection:
        host, _, port = address.rpartition(":")
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(cls, host, int(port))
        return conn

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport is not an asyncio.Transport subclass: no isinstance check
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            replies = self._decoder.feed(data)
        except ProtocolError as exc:
            self._fail(ConnectionLost(f"broken stream from the broker: {exc}"))
            if self._transport is not None:
                self._transport.close()
            return
        for reply in replies:
            future = self._pending.pop(reply.opaque, None)
            if future is not None and not future.done():
                future.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(ConnectionLost(f"connection closed: {exc or 'by the peer'}"))

    def _fail(self, exc: BaseException) -> None:
        self._lost = exc
        for future in self._pending.values():
            if not future.done():
                future.set_exception(exc)
        self._pending.clear()

    async def call(self, request: RemotingCommand, timeout_s: float = 30.0) -> RemotingCommand:
        if self._lost is not None:
            raise self._lost
        assert self._transport is not None
        if self._transport.is_closing():  # closed, connection_lost not called yet
            raise ConnectionLost("connection closing")
        opaque = next(self._opaque)
        future: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._pending[opaque] = future
        self._transport.write(encode(request.replace(opaque=opaque)))
        try:
            return await asyncio.wait_for(future, timeout_s)
        finally:
            self._pending.pop(opaque, None)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


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
    return RemotingCommand.request(
        SEND_MESSAGE_V2,
        {
            "a": producer_group,
            "b": topic,
            "c": DEFAULT_TOPIC,
            "d": queue_nums,
            "e": queue_id,
            "f": 0,
            "g": int(time.time() * 1000),
            "h": 0,
            "i": props,
            "j": 0,
            "k": False,
            "m": False,
            "n": broker_name,
        },
        body,
        language="PYTHON",
    )


def pull_request(
    topic: str, queue_id: int, offset: int, suspend_ms: int = 1000, max_msgs: int = 32
) -> RemotingCommand:
    """PULL_MESSAGE from ``offset``, at most ``max_msgs`` messages (the Java consumer's
    ``pullBatchSize``, default 32)."""
    return RemotingCommand.request(
        PULL_MESSAGE,
        {
            "consumerGroup": CONSUMER_GROUP,
            "topic": topic,
            "queueId": queue_id,
            "queueOffset": offset,
            "maxMsgNums": max_msgs,
            "sysFlag": PULL_SYSFLAG,
            "commitOffset": 0,
            "suspendTimeoutMillis": suspend_ms,
            "subscription": "*",
            "subVersion": 0,
            "expressionType": "TAG",
        },
        language="PYTHON",
    )


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
