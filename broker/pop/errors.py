"""POP consumption's refusals, under the broker front's one error tree.

    BrokerRequestError (broker.remoting.errors)
    └── PopError                  a POP request refused (SYSTEM_ERROR unless a subclass says)
        ├── InvalidReceiptHandle  NO_MESSAGE (208): a handle that is malformed, names nothing
        │                         in flight here (unknown offset, another group's), or is stale
        │                         (its message was redelivered, acked, or its visibility changed
        │                         since: a newer handle exists). RocketMQ's AckMessageProcessor
        │                         answers NO_MESSAGE for an offset it cannot ack
        │                         (``AckMessageProcessor.java:156-160``); the gRPC front
        │                         answers ``INVALID_RECEIPT_HANDLE``
        └── IllegalInvisibleTime  INVALID_PARAMETER (29): an invisible time ≤ 0 or too long;
            IllegalPopRequest     INVALID_PARAMETER (29): a batch size out of 1..32 or a bad
                                  queue (``PopMessageProcessor.java:266-305``)

``retriable`` says whether asking again may succeed. The remoting front answers
``response_code`` with the message as remark (:func:`broker.remoting.errors.answer_error`);
the gRPC front maps the classes to ``apache.rocketmq.v2`` codes.
"""

from __future__ import annotations

from broker.remoting.errors import BrokerRequestError
from rmq.codes import ResponseCode


class PopError(BrokerRequestError):
    retriable: bool = False


class InvalidReceiptHandle(PopError):
    response_code = ResponseCode.NO_MESSAGE


class IllegalInvisibleTime(PopError):
    response_code = ResponseCode.INVALID_PARAMETER


class IllegalPopRequest(PopError):
    response_code = ResponseCode.INVALID_PARAMETER
