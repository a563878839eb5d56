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

``retriable`` is a class attribute (an instance attribute for ``SendFailed``: the code is in
``rmq.codes.RETRIABLE_CODES``, what RocketMQ's clients retry; a send's 10-12 are there too, as
they mean stored on the master only): the sink's retry loop reads it, nobody matches on message
text.
"""

from __future__ import annotations

from typing import Final

from rmq.codes import RETRIABLE_CODES, ResponseCode

#: Codes after which the route is fetched again before the resend (the master may have moved).
ROUTE_CODES: Final = frozenset(
    {
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.NO_PERMISSION,
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.GO_AWAY,
    }
)


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
