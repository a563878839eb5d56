"""PULL_MESSAGE (11) (RocketMQ 4.9's ``broker/processor/PullMessageProcessor.java``).

Answers by the store's result, as RocketMQ's ``PullMessageProcessor`` maps it: ≥ 1 message → SUCCESS
with the raw records concatenated; entries scanned but all filtered out → PULL_RETRY_IMMEDIATELY;
caught up (offset == max) or an empty queue at offset 0 → PULL_NOT_FOUND, parked for long polling
when the request has SUSPEND (woken by a new message in that queue, else answered at the
deadline); offset out of range → PULL_OFFSET_MOVED. Ext fields ``suggestWhichBrokerId``,
``nextBeginOffset``, ``minOffset``, ``maxOffset`` are strings (a number reads as 0 in C++
1.x clients: rocketmq-client-cpp ``CommandHeader.cpp`` reads only JSON strings).

Subscription: with SUBSCRIPTION in ``sysFlag`` the request's expression, else the group's
heartbeat (SUBSCRIPTION_NOT_EXIST without one); tags are hashed here (C++ 1.x sends ``atoi(tag)`` as
codeSet). With COMMIT_OFFSET the request's ``commitOffset`` is stored as the group's offset. A batch
stops at ``max_transfer_count`` messages or ``max_transfer_bytes`` (RocketMQ's 32 and 256 KiB; at
least one message), and at the replication's readable limit
(RocketMQ 5: the confirm offset; 4.x exposes every appended message); ``nextBeginOffset`` then names
the first record not sent.
"""

from __future__ import annotations

import asyncio
import struct
import time

from broker.core import BrokerCore
from broker.remoting.errors import BrokerRequestError, NoPermission, TopicNotExist
from broker.state.consumers import Subscription, parse_expression
from broker.store import GetResult
from rmq.codec import RemotingCommand
from rmq.codes import RequestCode, ResponseCode
from rmq.headers import PullMessageHeader, PullMessageResponseHeader
from rmq.message import PHYSICAL_OFFSET_AT, QUEUE_OFFSET_AT
from rmq.server import Handler, Peer

FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
MAX_SUSPEND_MS = 60_000
_QOFF = struct.Struct(">q")  # a record's QUEUEOFFSET and PHYSICALOFFSET


class PullProcessor:
    def __init__(self, core: BrokerCore) -> None:
        self.core = core

    def handlers(self) -> dict[int, Handler]:
        return {RequestCode.PULL_MESSAGE: self.pull}

    def _subscription(self, h: PullMessageHeader) -> Subscription:
        if h.sys_flag & FLAG_SUBSCRIPTION:
            return parse_expression(h.topic, h.subscription, h.expression_type)
        sub = self.core.consumers.subscription(h.consumer_group, h.topic)
        if sub is None:
            raise BrokerRequestError(
                f"the consumer's subscription not exist, group: {h.consumer_group}",
                ResponseCode.SUBSCRIPTION_NOT_EXIST,
            )
        return sub

    async def pull(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        h = PullMessageHeader.from_command(request)
        config = await self.core.topics.lookup(h.topic)
        if config is None:
            raise TopicNotExist(f"topic[{h.topic}] not exist, apply first please!")
        if not config.readable:
            raise NoPermission(f"the topic[{h.topic}] pulling message is forbidden")
        if not 0 <= h.queue_id < max(config.read_queue_nums, config.write_queue_nums):
            raise BrokerRequestError(
                f"queueId[{h.queue_id}] is illegal, topic:[{h.topic}] "
                f"topicConfig.readQueueNums:[{config.read_queue_nums}]"
            )
        sub = self._subscription(h)
        if h.sys_flag & FLAG_COMMIT_OFFSET and h.commit_offset >= 0:
            self.core.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        suspend_s = min(max(h.suspend_timeout_ms, 0), MAX_SUSPEND_MS) / 1000
        if not self.core.config.long_polling:
            suspend_s = min(suspend_s, self.core.config.short_polling_ms / 1000)
        loop_deadline = None
        while True:
            started = time.perf_counter()
            response = await self._once(request, h, sub)
            if response.code == ResponseCode.SUCCESS and self.core.metrics is not None:
                self.core.metrics.pulled(time.perf_counter() - started)
            if response.code != ResponseCode.PULL_NOT_FOUND or not h.sys_flag & FLAG_SUSPEND:
                return response
            now = asyncio.get_running_loop().time()
            if loop_deadline is None:
                loop_deadline = now + suspend_s
            remaining = loop_deadline - now
            if remaining <= 0:
                return response
            # woken by a message in this queue; re-checked every second for the readable limit
            await self.core.hold.wait(h.topic, h.queue_id, min(remaining, 1.0))

    async def _once(
        self, request: RemotingCommand, h: PullMessageHeader, sub: Subscription
    ) -> RemotingCommand:
        store = self.core.store
        max_msgs = max(1, min(h.max_msg_nums, self.core.config.max_transfer_count))
        got: GetResult = await self.core.run(
            store.get,
            h.topic,
            h.queue_id,
            h.queue_offset,
            max_msgs,
            set(sub.tags) if sub.tags else None,
        )
        code, next_offset, body = self._classify(h.queue_offset, got)
        suggest = 0
        if code == ResponseCode.SUCCESS:
            records, next_offset = self._trim(got.messages, next_offset)
            if records:
                body = b"".join(records)
                self.core.stats.pulled_messages += len(records)
                (physical,) = _QOFF.unpack_from(records[-1], PHYSICAL_OFFSET_AT)
                behind = store.log.end_offset - (physical + len(records[-1]))
                suggest = self.core.suggest_broker(behind)
            else:
                code, next_offset, body = ResponseCode.PULL_NOT_FOUND, h.queue_offset, b""
        return PullMessageResponseHeader(
            suggest_which_broker_id=suggest,
            next_begin_offset=next_offset,
            min_offset=got.min_offset,
            max_offset=got.max_offset,
        ).response(
            request, code, None if code == ResponseCode.SUCCESS else _REMARKS.get(code), body
        )

    @staticmethod
    def _classify(offset: int, got: GetResult) -> tuple[int, int, bytes]:
        status = got.status
        if status == "FOUND":
            return ResponseCode.SUCCESS, got.next_offset, b""
        if status == "NO_MATCHED_MESSAGE":
            if got.next_offset == offset:  # nothing visible yet (not durable / not confirmed)
                return ResponseCode.PULL_NOT_FOUND, offset, b""
            return ResponseCode.PULL_RETRY_IMMEDIATELY, got.next_offset, b""
        if status == "OFFSET_OVERFLOW_ONE":
            return ResponseCode.PULL_NOT_FOUND, offset, b""
        if status in ("NO_MESSAGE_IN_QUEUE", "NO_MATCHED_LOGIC_QUEUE"):
            if offset == 0:
                return ResponseCode.PULL_NOT_FOUND, 0, b""
            return ResponseCode.PULL_OFFSET_MOVED, 0, b""
        if status == "OFFSET_TOO_SMALL":
            return ResponseCode.PULL_OFFSET_MOVED, got.min_offset, b""
        if status == "OFFSET_OVERFLOW_BADLY":
            return ResponseCode.PULL_OFFSET_MOVED, got.max_offset, b""
        return ResponseCode.PULL_RETRY_IMMEDIATELY, offset, b""

    def _trim(self, records: list[bytes], next_offset: int) -> tuple[list[bytes], int]:
        """Records up to the readable limit and ``max_transfer_bytes`` (at least one)."""
        limit = self.core.replication.readable_limit()
        max_bytes = self.core.config.max_transfer_bytes
        out: list[bytes] = []
        size = 0
        for raw in records:
            (physical,) = _QOFF.unpack_from(raw, PHYSICAL_OFFSET_AT)
            over_limit = limit is not None and physical + len(raw) > limit
            if over_limit or (out and size + len(raw) > max_bytes):
                (queue_offset,) = _QOFF.unpack_from(raw, QUEUE_OFFSET_AT)
                return out, queue_offset
            out.append(raw)
            size += len(raw)
        return out, next_offset


_REMARKS: dict[int, str] = {
    ResponseCode.PULL_NOT_FOUND: "no new message",
    ResponseCode.PULL_RETRY_IMMEDIATELY: "no matched message, retry at nextBeginOffset",
    ResponseCode.PULL_OFFSET_MOVED: "the offset is out of range",
}
