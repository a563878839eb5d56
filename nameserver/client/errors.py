"""The client's one error tree: one class per gRPC status code.

``code`` and ``retriable`` are class attributes, so callers branch on the class or on
``exc.retriable``, never on message text::

    ClientError                  code: grpc.StatusCode, retriable: bool; endpoint: str | None
    ├── Cancelled                CANCELLED
    ├── UnknownError             UNKNOWN (and errors that carry no status)
    ├── InvalidArgument          INVALID_ARGUMENT: bad request (too large, too many txn ops, ...)
    ├── DeadlineExceeded         DEADLINE_EXCEEDED: a write may still be applied (retriable)
    ├── NotFound                 NOT_FOUND (e.g. an unknown lease)
    ├── AlreadyExists            ALREADY_EXISTS
    ├── PermissionDenied         PERMISSION_DENIED
    ├── ResourceExhausted        RESOURCE_EXHAUSTED: the server is overloaded (retriable)
    ├── FailedPrecondition       FAILED_PRECONDITION
    │   └── LeaseLost            the lease behind a lock or an election is gone
    ├── Aborted                  ABORTED (retriable)
    ├── OutOfRange               OUT_OF_RANGE (e.g. a compacted revision)
    │   └── WatchCompacted       the start revision is below what the server keeps
    ├── Unimplemented            UNIMPLEMENTED
    ├── Internal                 INTERNAL
    ├── Unavailable              UNAVAILABLE: no endpoint answered in time (retriable)
    ├── DataLoss                 DATA_LOSS
    └── Unauthenticated          UNAUTHENTICATED

:func:`error_from_rpc` is the one place that turns a ``grpc.RpcError`` into this tree.
"""

from __future__ import annotations

from typing import ClassVar

import grpc

__all__ = [
    "Aborted",
    "AlreadyExists",
    "Cancelled",
    "ClientError",
    "DataLoss",
    "DeadlineExceeded",
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "LeaseLost",
    "NotFound",
    "OutOfRange",
    "PermissionDenied",
    "ResourceExhausted",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "UnknownError",
    "WatchCompacted",
    "error_from_rpc",
]


class ClientError(Exception):
    """Root of the client's errors: one class per gRPC status code."""

    code: ClassVar[grpc.StatusCode] = grpc.StatusCode.UNKNOWN
    retriable: ClassVar[bool] = False

    def __init__(self, message: str, endpoint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.endpoint = endpoint

    def __str__(self) -> str:
        where = f" [{self.endpoint}]" if self.endpoint else ""
        return f"{self.code.name.lower()}: {self.message}{where}"


class Cancelled(ClientError):
    code = grpc.StatusCode.CANCELLED


class UnknownError(ClientError):
    code = grpc.StatusCode.UNKNOWN


class InvalidArgument(ClientError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(ClientError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED
    retriable = True


class NotFound(ClientError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(ClientError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(ClientError):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(ClientError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    retriable = True


class FailedPrecondition(ClientError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(ClientError):
    code = grpc.StatusCode.ABORTED
    retriable = True


class OutOfRange(ClientError):
    code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(ClientError):
    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(ClientError):
    code = grpc.StatusCode.INTERNAL


class Unavailable(ClientError):
    code = grpc.StatusCode.UNAVAILABLE
    retriable = True


class DataLoss(ClientError):
    code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(ClientError):
    code = grpc.StatusCode.UNAUTHENTICATED


class LeaseLost(FailedPrecondition):
    """The lease behind a lock or an election is gone (expired, revoked or unreachable)."""


class WatchCompacted(OutOfRange):
    """The start revision is below what the server keeps (etcd's compacted error)."""

    def __init__(self, message: str, compact_revision: int, endpoint: str | None = None) -> None:
        super().__init__(message, endpoint)
        self.compact_revision = compact_revision


_ERROR_BY_CODE: dict[grpc.StatusCode, type[ClientError]] = {
    cls.code: cls for cls in ClientError.__subclasses__()
}


def error_from_rpc(err: grpc.RpcError, endpoint: str | None = None) -> ClientError:
    """The one conversion from a gRPC error to this module's error tree."""
    code_of, details_of = getattr(err, "code", None), getattr(err, "details", None)
    code = code_of() if callable(code_of) else None
    details = (details_of() if callable(details_of) else None) or str(err) or "no details"
    return _ERROR_BY_CODE.get(code, UnknownError)(details, endpoint)
