"""The transaction package's refusals (part of the broker front's one tree, so the remoting
front answers them through :func:`broker.remoting.errors.answer_error` and the gRPC front
through its ``refusal``)::

    BrokerRequestError            (broker.remoting.errors)
    └── TransactionError          END_TRANSACTION refused: SYSTEM_ERROR + the reason, nothing
        │                         written (EndTransactionProcessor.checkPrepareMessage's words)
        ├── HalfNotFound          no half message at that commit-log offset / transaction id
        ├── HalfMismatch          a half is there, but not the one the request names (producer
        │                         group, queue offset)
        ├── AlreadyEnded          the half was ended the other way (commit after rollback, or
        │                         the reverse); the same way again is answered SUCCESS
        └── LateEnd               ILLEGAL_OPERATION (604): a producer's own end after the
                                  CHECK_IMMUNITY_TIME_IN_SECONDS it set (only a check's answer
                                  may end it then: EndTransactionProcessor.rejectCommitOrRollback)
"""

from __future__ import annotations

from broker.remoting.errors import BrokerRequestError
from rmq.codes import ResponseCode


class TransactionError(BrokerRequestError):
    pass


class HalfNotFound(TransactionError):
    pass


class HalfMismatch(TransactionError):
    pass


class AlreadyEnded(TransactionError):
    pass


class LateEnd(TransactionError):
    response_code = ResponseCode.ILLEGAL_OPERATION
