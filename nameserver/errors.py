"""Errors of the nameserver: one tree, whose classes say what an error means to a client.

Each class carries its gRPC status (``status``) and its RocketMQ remoting response code
(``remoting_code``) as class attributes; :func:`nameserver.grpc.status.to_status` and
:func:`nameserver.remoting.status.to_remoting` read them (no code is looked up by name).
raftlog hands a rejection raised inside apply back untouched (``ApplyFailure.error``), so
the class a rule raises is the class the proposer re-raises.

    NameserverError                 a fault of the server (a bug)       INTERNAL          SYSTEM_ERROR
    └── Rejected                    a request refused; raise a subclass
        ├── InvalidArgument         bad input; names the field/limit   INVALID_ARGUMENT  SYSTEM_ERROR
        │   └── UndecodableRequest  a payload that is not the method's message
        ├── NotFound                                                    NOT_FOUND         SYSTEM_ERROR
        │   ├── TopicNotExist       a topic without a route             NOT_FOUND         TOPIC_NOT_EXIST
        │   └── ConfigNotFound      no KV config item                   NOT_FOUND         QUERY_NOT_FOUND
        ├── AlreadyExists           a de-duplicated retry               ALREADY_EXISTS    SYSTEM_ERROR
        ├── FailedPrecondition      the state does not allow it         FAILED_PRECONDITION SYSTEM_ERROR
        ├── Aborted                 lost a race; try again              ABORTED           SYSTEM_ERROR
        ├── OutOfRange              a revision or TTL past what exists  OUT_OF_RANGE      SYSTEM_ERROR
        │   ├── Compacted           (nameserver.kv.mvcc) below the compaction revision
        │   └── FutureRevision      (nameserver.kv.mvcc) above the current revision
        ├── ResourceExhausted       a quota or limit                    RESOURCE_EXHAUSTED SYSTEM_ERROR
        │   └── ResponseTooLarge    (nameserver.kv.semantics) max_response_bytes
        ├── Unimplemented           not supported by metaledger         UNIMPLEMENTED     SYSTEM_ERROR
        ├── Unavailable             no leader, leadership moved         UNAVAILABLE       SYSTEM_ERROR
        ├── DeadlineExceeded        did not happen in time              DEADLINE_EXCEEDED SYSTEM_ERROR
        ├── DataLoss                a CORRUPT alarm is raised           DATA_LOSS         SYSTEM_ERROR
        └── Forwarded               another member's answer, passed on with its own status

RocketMQ's nameserver answers SYSTEM_ERROR with the reason for every failed write (a broker
retries its registration), so only the two answers RocketMQ gives its own codes for have
one. Errors of raftlog (not leader, queue full, ...) become rejections in one place,
:func:`of_raftlog`, so both fronts word them alike.

etcd clients match on etcd's messages ("etcdserver: key not found", ...), so messages
start with etcd's text and add what metaledger knows (the limit's name and value).
"""

from __future__ import annotations

import grpc

from raftlog import (
    NoSpaceError,
    NotLeaderError,
    ProposalDroppedError,
    ProposeError,
    QueueFullError,
    UnknownOutcomeError,
    UnsafeReconfigurationError,
)
from rmq.codes import ResponseCode


class NameserverError(Exception):
    """Root of the nameserver's errors; raised itself, a fault of the server (a bug)."""

    status: grpc.StatusCode = grpc.StatusCode.INTERNAL
    remoting_code: ResponseCode = ResponseCode.SYSTEM_ERROR


class Rejected(NameserverError):
    """An operation refused: the request's own mistake, or one the state does not allow.
    Not raised itself: a subclass says which."""

    status = grpc.StatusCode.UNKNOWN


class InvalidArgument(Rejected):
    """Bad input; the message names the field or the limit."""

    status = grpc.StatusCode.INVALID_ARGUMENT


class UndecodableRequest(InvalidArgument):
    """A request (or one message of a request stream) that protobuf cannot decode."""


class NotFound(Rejected):
    status = grpc.StatusCode.NOT_FOUND


class TopicNotExist(NotFound):
    """A topic without a route (RocketMQ's ``pickupTopicRouteData`` found none)."""

    remoting_code = ResponseCode.TOPIC_NOT_EXIST


class ConfigNotFound(NotFound):
    """No KV config item under the namespace (and key) asked for."""

    remoting_code = ResponseCode.QUERY_NOT_FOUND


class AlreadyExists(Rejected):
    status = grpc.StatusCode.ALREADY_EXISTS


class FailedPrecondition(Rejected):
    status = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(Rejected):
    status = grpc.StatusCode.ABORTED


class OutOfRange(Rejected):
    status = grpc.StatusCode.OUT_OF_RANGE


class ResourceExhausted(Rejected):
    status = grpc.StatusCode.RESOURCE_EXHAUSTED


class Unimplemented(Rejected):
    status = grpc.StatusCode.UNIMPLEMENTED


class Unavailable(Rejected):
    status = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(Rejected):
    status = grpc.StatusCode.DEADLINE_EXCEEDED


class DataLoss(Rejected):
    status = grpc.StatusCode.DATA_LOSS


class Forwarded(Rejected):
    """The answer of another member to a forwarded request, passed on with its status."""

    def __init__(self, status: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.status = status


#: The rejection class of each gRPC status (the general one, not a RocketMQ-specific one).
_BY_STATUS: dict[grpc.StatusCode, type[Rejected]] = {
    cls.status: cls
    for cls in (
        InvalidArgument,
        NotFound,
        AlreadyExists,
        FailedPrecondition,
        Aborted,
        OutOfRange,
        ResourceExhausted,
        Unimplemented,
        Unavailable,
        DeadlineExceeded,
        DataLoss,
    )
}


def from_status(status: grpc.StatusCode, message: str) -> Rejected:
    """The rejection another member answered a forwarded call with (its class by status)."""
    cls = _BY_STATUS.get(status)
    return cls(message) if cls is not None else Forwarded(status, message)


def of_raftlog(exc: BaseException) -> Rejected | None:
    """What an error of raftlog (or a proposal's timeout) means to a client, in etcd's
    words; None for any other error."""
    if isinstance(exc, NotLeaderError):
        hint = f" (last known leader: {exc.leader_hint})" if exc.leader_hint else ""
        return Unavailable(f"etcdserver: no leader{hint}")
    if isinstance(exc, ProposalDroppedError):
        return Unavailable("etcdserver: leader changed")
    if isinstance(exc, UnknownOutcomeError):
        return Unavailable(f"etcdserver: request timed out ({exc})")
    if isinstance(exc, QueueFullError):
        return ResourceExhausted("etcdserver: too many requests")
    if isinstance(exc, NoSpaceError):
        return ResourceExhausted(f"etcdserver: mvcc: {exc}")
    if isinstance(exc, UnsafeReconfigurationError):
        return FailedPrecondition(f"etcdserver: {exc}")
    if isinstance(exc, ProposeError):
        return Unavailable(f"etcdserver: {exc}")
    if isinstance(exc, TimeoutError):
        return Unavailable("etcdserver: request timed out")
    return None
