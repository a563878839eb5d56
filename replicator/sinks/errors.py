"""Errors of the sinks (``replicator.sinks``).

    SinkError                     a message was not confirmed (never raised for a confirmed one)
    ├── SendFailed                the broker answered a send with a code other than PUT_OK
    │                             (``code``, ``remark``; ``retriable`` depends on the code)
    ├── SinkUnavailable           no answer: no route, connection lost, timed out (retriable)
    ├── MessageRejected           the message cannot be sent as it is (a property with RocketMQ's
    │                             separators 0x01/0x02, an unknown topic or queue): not retriable
    ├── QueueFailed               an earlier message of the same queue failed for good, so this one
    │                             is not confirmed either (per-queue order: nothing after a gap)
    └── SinkClosed                the sink was closed before the message was confirmed

``retriable`` is a class attribute (an instance attribute for ``SendFailed``): the sink's retry
loop reads it, nobody matches on message text.
"""

from __future__ import annotations

from typing import Final

#: Send answers that are not confirmations but may succeed when sent again (research/broker.md
#: §3.1 and §6.2): SYSTEM_ERROR 1 (RocketMQ 5's "in-sync replicas not enough"), SYSTEM_BUSY 2,
#: FLUSH_DISK_TIMEOUT 10, SLAVE_NOT_AVAILABLE 11, FLUSH_SLAVE_TIMEOUT 12, SERVICE_NOT_AVAILABLE 14,
#: NO_PERMISSION 16 (the broker is no longer master: refresh the route), TOPIC_NOT_EXIST 17,
#: FLOW_CONTROL 215, GO_AWAY 1500. The Java client retries the same set but for 10-12, which it
#: takes as success; here 10-12 are stored on the master only, so they are never confirmations.
RETRIABLE_CODES: Final = frozenset({1, 2, 10, 11, 12, 14, 16, 17, 215, 1500})
#: Codes after which the route is fetched again before the resend (the master may have moved).
ROUTE_CODES: Final = frozenset({14, 16, 17, 1500})


class SinkError(Exception):
    retriable: bool = False


class SendFailed(SinkError):
    def __init__(self, code: int, remark: str | None, where: str = "") -> None:
        text = f"send answered code {code}" + (f": {remark}" if remark else "")
        super().__init__(text + (f" ({where})" if where else ""))
        self.code = code
        self.remark = remark
        self.retriable = code in RETRIABLE_CODES


class SinkUnavailable(SinkError):
    retriable = True


class MessageRejected(SinkError):
    pass


class QueueFailed(SinkError):
    def __init__(self, topic: str, queue_id: int, cause: BaseException) -> None:
        super().__init__(f"an earlier message of {topic} queue {queue_id} failed for good: {cause}")
        self.cause = cause


class SinkClosed(SinkError):
    pass
