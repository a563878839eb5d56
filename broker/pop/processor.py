"""The remoting handlers of POP consumption (RocketMQ 5's ``PopMessageProcessor``,
``AckMessageProcessor``, ``ChangeInvisibleTimeProcessor``), on :class:`PopService`.

- POP_MESSAGE (200050): :class:`rmq.headers.PopMessageHeader` → SUCCESS with the records
  concatenated as a pull sends them (a redelivered one re-encoded with reconsumeTimes =
  attempt - 1) and :class:`rmq.headers.PopMessageResponseHeader` (popTime, invisibleTime,
  reviveQid 0 or 999 for ``order``, restNum, startOffsetInfo, msgOffsetInfo and, for
  ``order``, orderCountInfo), from which the client builds each handle; nothing within
  ``pollTime`` (at most :data:`MAX_POLL_MS`) → POLLING_TIMEOUT (210) with the same header.
- ACK_MESSAGE (200051): the handle is ``extraInfo`` with the header's queueId and offset
  (RocketMQ acks the header's offset); SUCCESS, or NO_MESSAGE (208) for a handle that is
  stale or names nothing in flight.
- CHANGE_MESSAGE_INVISIBLETIME (200053): SUCCESS with
  :class:`rmq.headers.ChangeInvisibleTimeResponseHeader` (the new popTime and
  invisibleTime: the client's new handle), or NO_MESSAGE.
- BATCH_ACK_MESSAGE (200151): body ``{"brokerName", "acks": [{"c", "t", "r", "so", "q",
  "rq", "pt", "it", "b"}]}`` (``BatchAck.java``; ``b`` is a ``java.util.BitSet`` of offsets
  from ``so``, its ``toByteArray`` as base64 or as a JSON byte array); each set bit is
  acked like ACK_MESSAGE, a stale one skipped; SUCCESS (as RocketMQ's batch ack).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from broker.pop.errors import InvalidReceiptHandle
from broker.pop.handle import NORMAL_TOPIC, ORDER_REVIVE_QID, SEPARATOR, Handle
from broker.pop.service import Popped, PopService
from rmq.codec import BadRequest, RemotingCommand, loads_lenient
from rmq.codes import RequestCode, ResponseCode
from rmq.headers import (
    AckMessageHeader,
    ChangeInvisibleTimeHeader,
    ChangeInvisibleTimeResponseHeader,
    PopMessageHeader,
    PopMessageResponseHeader,
)
from rmq.message import encode
from rmq.server import Handler, Peer

MAX_POLL_MS = 60_000  # as a pull's suspend (broker.pull.processor.MAX_SUSPEND_MS)


def _handle(extra_info: str, queue_id: int, offset: int) -> str:
    """``extraInfo``'s first six fields with the header's queue id and offset."""
    parts = extra_info.split(SEPARATOR)
    if len(parts) < 6:
        raise InvalidReceiptHandle(f"extraInfo is malformed: {extra_info!r}")
    return SEPARATOR.join([*parts[:6], str(queue_id), str(offset)])


def _bits(value: Any) -> list[int]:
    """The set bits of a Java ``BitSet`` serialized by fastjson (base64 of ``toByteArray``,
    little-endian), or a JSON array of (signed) bytes."""
    if isinstance(value, str):
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise BadRequest("batchAck: a bitSet is not base64") from None
    elif isinstance(value, list) and all(isinstance(b, int) for b in value):
        raw = bytes(b & 0xFF for b in value)
    else:
        raise BadRequest("batchAck: a bitSet is neither base64 nor a byte array")
    return [i * 8 + j for i, byte in enumerate(raw) for j in range(8) if byte >> j & 1]


def _field(doc: dict[str, Any], short: str, long: str, kind: type) -> Any:
    value = doc.get(short, doc.get(long))
    if kind is int and isinstance(value, str) and value.lstrip("-").isdigit():
        value = int(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise BadRequest(f"batchAck: field {short} ({long}) is missing or not {kind.__name__}")
    return value


class PopProcessor:
    def __init__(self, pop: PopService) -> None:
        self.pop = pop

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.POP_MESSAGE: self.pop_message,
            RequestCode.ACK_MESSAGE: self.ack_message,
            RequestCode.CHANGE_MESSAGE_INVISIBLETIME: self.change_invisible_time,
            RequestCode.BATCH_ACK_MESSAGE: self.batch_ack,
        }

    async def pop_message(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        h = PopMessageHeader.from_command(request)
        if h.exp_type and h.exp_type.upper() != "TAG":
            raise BadRequest(f"the broker does not support filtering by {h.exp_type}")
        popped = await self.pop.pop(
            h.consumer_group,
            h.topic,
            h.queue_id,
            h.max_msg_nums,
            h.invisible_time,
            fifo=h.order,
            expression=h.exp or "*",
            wait_ms=min(max(h.poll_time, 0), MAX_POLL_MS),
            init_mode=h.init_mode,
        )
        queues = [h.queue_id] if h.queue_id >= 0 else sorted({p.message.queue_id for p in popped})
        header = _answer_header(popped, h.invisible_time, h.order)
        header.rest_num = self.pop.rest_num(h.consumer_group, h.topic, queues)
        if not popped:
            return header.response(request, ResponseCode.POLLING_TIMEOUT, "no new message")
        body = b"".join(p.raw or encode(p.message) for p in popped)
        return header.response(request, ResponseCode.SUCCESS, body=body)

    async def ack_message(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        h = AckMessageHeader.from_command(request)
        handle = _handle(h.extra_info, h.queue_id, h.offset)
        await self.pop.ack(h.consumer_group, h.topic, handle)
        return request.response(ResponseCode.SUCCESS)

    async def change_invisible_time(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        h = ChangeInvisibleTimeHeader.from_command(request)
        handle = _handle(h.extra_info, h.queue_id, h.offset)
        p = await self.pop.change_invisible(h.consumer_group, h.topic, handle, h.invisible_time)
        return ChangeInvisibleTimeResponseHeader(
            p.visible_at_ms - h.invisible_time,
            h.invisible_time,
            ORDER_REVIVE_QID if handle.split(SEPARATOR)[3] == str(ORDER_REVIVE_QID) else 0,
        ).response(request, ResponseCode.SUCCESS)

    async def batch_ack(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        try:
            doc = loads_lenient(request.body)
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise BadRequest("batchAck: the body is not JSON") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("acks"), list):
            raise BadRequest("batchAck: the body has no acks list")
        broker = doc.get("brokerName") or self.pop.broker_name
        for ack in doc["acks"]:
            if not isinstance(ack, dict):
                raise BadRequest("batchAck: an ack is not an object")
            group = _field(ack, "c", "consumerGroup", str)
            topic = _field(ack, "t", "topic", str)
            start = _field(ack, "so", "startOffset", int)
            queue_id = _field(ack, "q", "queueId", int)
            revive = _field(ack, "rq", "reviveQueueId", int)
            pop_time = _field(ack, "pt", "popTime", int)
            invisible = _field(ack, "it", "invisibleTime", int)
            for bit in _bits(ack.get("b", ack.get("bitSet"))):
                handle = Handle(
                    start,
                    pop_time,
                    invisible,
                    revive,
                    NORMAL_TOPIC,
                    str(broker),
                    queue_id,
                    start + bit,
                )
                try:
                    await self.pop.ack(group, topic, handle.encode())
                except InvalidReceiptHandle:
                    continue  # RocketMQ's batch ack answers SUCCESS whatever each bit found
        return request.response(ResponseCode.SUCCESS)


def _answer_header(popped: list[Popped], invisible_ms: int, fifo: bool) -> PopMessageResponseHeader:
    """The header a client builds the handles from (``ExtraInfoUtil.buildStartOffsetInfo``,
    ``buildMsgOffsetInfo``, ``buildQueueOffsetOrderCountInfo``)."""
    starts: dict[int, int] = {}
    offsets: dict[int, list[int]] = {}
    counts: list[str] = []
    for p in popped:
        q, off = p.message.queue_id, p.message.queue_offset
        starts.setdefault(q, off)
        offsets.setdefault(q, []).append(off)
        if fifo:
            counts.append(f"{NORMAL_TOPIC} qo{q}%{off} {p.attempt - 1}")
    visible_at = popped[0].visible_at_ms if popped else 0
    return PopMessageResponseHeader(
        pop_time=visible_at - invisible_ms if popped else 0,
        invisible_time=invisible_ms,
        revive_qid=ORDER_REVIVE_QID if fifo else 0,
        rest_num=0,
        start_offset_info=";".join(f"{NORMAL_TOPIC} {q} {s}" for q, s in starts.items()),
        msg_offset_info=";".join(
            f"{NORMAL_TOPIC} {q} {','.join(map(str, o))}" for q, o in offsets.items()
        ),
        order_count_info=";".join(counts) if fifo else None,
    )
