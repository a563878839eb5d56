"""The one place that turns errors into a RocketMQ remoting answer (response code, remark).

A rejection (:class:`nameserver.errors.Rejected`) answers its ``remoting_code`` with its
message as remark: SYSTEM_ERROR for most, as RocketMQ's nameserver answers a failed write
(a broker retries its registration), TOPIC_NOT_EXIST and QUERY_NOT_FOUND for the answers
RocketMQ gives those codes. Errors of raftlog (no leader, timeout, ...) are worded as on
the gRPC front (:func:`nameserver.errors.of_raftlog`). Anything else is a fault of the
server: SYSTEM_ERROR with a generic remark (Python's exception text never reaches a
client; the caller logs it).
"""

from __future__ import annotations

from nameserver.errors import Rejected, of_raftlog
from rmq.codes import ResponseCode


def internal_error_remark(code: int) -> str:
    """The remark of an answer that failed by no fault of the request (a bug)."""
    return f"metaledger: internal error serving request code {code}; see the server log"


def rejection_of(exc: BaseException) -> Rejected | None:
    """``exc`` as a rejection (a request refused, answered to it), or None for a fault."""
    if isinstance(exc, Rejected):
        return exc
    return of_raftlog(exc)


def to_remoting(exc: BaseException, request_code: int) -> tuple[ResponseCode, str]:
    """(response code, remark) answering the request of ``request_code`` that raised ``exc``."""
    rejection = rejection_of(exc)
    if rejection is None:
        return ResponseCode.SYSTEM_ERROR, internal_error_remark(request_code)
    return rejection.remoting_code, str(rejection)
