"""The broker front's one error tree, and the one place it becomes a response code.

    BrokerRequestError        a request refused: answered ``response_code`` + the message as
    │                         remark; the connection stays open
    ├── TopicNotExist         TOPIC_NOT_EXIST (17): a topic this broker does not serve
    ├── NoPermission          NO_PERMISSION (16): a topic not readable / writable here
    └── ServiceNotAvailable   SERVICE_NOT_AVAILABLE (14): not writable (slave, fenced, disk)

A damaged store (``broker.store.StoreCorruptionError``: a record that fails its checks when
read to be handed out) is answered SYSTEM_ERROR naming the file and byte, never its bytes.

Header problems are the codec's ``BadRequest`` (SYSTEM_ERROR, the field named); a broken
byte stream is the codec's ``ProtocolError`` (that connection closed). The frame server
(:mod:`rmq.server`, wired in :mod:`broker.remoting.front`) converts all three through
:func:`answer_error`; handlers only raise.
"""

from __future__ import annotations

from broker.store.errors import StoreCorruptionError
from rmq.codes import ResponseCode


class BrokerRequestError(Exception):
    response_code: int = ResponseCode.SYSTEM_ERROR

    def __init__(self, message: str, response_code: int | None = None) -> None:
        super().__init__(message)
        if response_code is not None:
            self.response_code = response_code


class TopicNotExist(BrokerRequestError):
    response_code = ResponseCode.TOPIC_NOT_EXIST


class NoPermission(BrokerRequestError):
    response_code = ResponseCode.NO_PERMISSION


class ServiceNotAvailable(BrokerRequestError):
    response_code = ResponseCode.SERVICE_NOT_AVAILABLE


def answer_error(exc: Exception) -> tuple[int, str] | None:
    """(response code, remark) of a refusal; None for anything else (a bug)."""
    if isinstance(exc, BrokerRequestError):
        return exc.response_code, str(exc)
    if isinstance(exc, StoreCorruptionError):  # a damaged record is never handed out
        return ResponseCode.SYSTEM_ERROR, f"damaged store: {exc}"
    return None


def internal_error_remark(code: int) -> str:
    return f"metaledger broker: internal error serving request code {code}; see the broker log"
