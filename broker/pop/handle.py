"""Receipt handles: RocketMQ's layout, so one handle reads the same on both fronts.

A handle is RocketMQ's ``ReceiptHandle.encode()`` / ``ExtraInfoUtil.buildExtraInfo`` text
(``common/.../consumer/ReceiptHandle.java``, ``remoting/.../header/ExtraInfoUtil.java``),
fields joined by one space (``MessageConst.KEY_SEPARATOR``)::

    startOffset popTime invisibleTime reviveQid topicType brokerName queueId offset [commitLogOffset]

``popTime + invisibleTime`` is when the message becomes visible again: the broker keeps that
instant per in-flight message and accepts a handle only while it matches (a redelivery or a
change of invisibility gives a new instant, so the older handle is stale). ``reviveQid`` is
999 for an orderly (FIFO) pop (``KeyBuilder.POP_ORDER_REVIVE_QUEUE``), else 0; ``topicType``
"0" (a normal topic; this broker redelivers in place, never through a retry topic).
RocketMQ's Java remoting client builds the first eight fields itself from a POP answer's
header (``MQClientAPIImpl.processPopResponse``), so a handle may lack the ninth (-1 then).
Sans-I/O: text in, :class:`Handle` out; anything else is :class:`InvalidReceiptHandle`.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.pop.errors import InvalidReceiptHandle

SEPARATOR = " "
ORDER_REVIVE_QID = 999
NORMAL_TOPIC = "0"


@dataclass(frozen=True, slots=True)
class Handle:
    start_offset: int
    pop_time_ms: int
    invisible_ms: int
    revive_qid: int
    topic_type: str
    broker_name: str
    queue_id: int
    offset: int
    commit_log_offset: int = -1

    @property
    def visible_at_ms(self) -> int:
        return self.pop_time_ms + self.invisible_ms

    @property
    def fifo(self) -> bool:
        return self.revive_qid == ORDER_REVIVE_QID

    def encode(self) -> str:
        return SEPARATOR.join(
            str(v)
            for v in (
                self.start_offset,
                self.pop_time_ms,
                self.invisible_ms,
                self.revive_qid,
                self.topic_type,
                self.broker_name,
                self.queue_id,
                self.offset,
                self.commit_log_offset,
            )
        )


def decode(text: str, offset: int | None = None) -> Handle:
    """A handle's fields; ``offset`` completes a seven-field ``extraInfo`` (a remoting ACK
    whose header carries the offset apart)."""
    parts = text.split(SEPARATOR) if isinstance(text, str) else []
    if len(parts) == 7 and offset is not None:
        parts.append(str(offset))
    if not 8 <= len(parts) <= 9:
        raise InvalidReceiptHandle(f"receipt handle is malformed: {len(parts)} fields in {text!r}")
    try:
        start, pop_time, invisible, revive = (int(p) for p in parts[:4])
        queue_id, msg_offset = int(parts[6]), int(parts[7])
        commit_log = int(parts[8]) if len(parts) == 9 else -1
    except ValueError:
        raise InvalidReceiptHandle(f"receipt handle is malformed: {text!r}") from None
    if queue_id < 0 or msg_offset < 0 or invisible < 0 or pop_time < 0:
        raise InvalidReceiptHandle(f"receipt handle is malformed: {text!r}")
    return Handle(
        start, pop_time, invisible, revive, parts[4], parts[5], queue_id, msg_offset, commit_log
    )
