"""Errors of the nameserver, and the one place that turns errors into gRPC status.

    NameserverError
    └── InvalidRequest          bad input; names the field or limit (INVALID_ARGUMENT)
        └── UndecodableRequest  a payload that is not the method's message

Errors from elsewhere are converted here too:

    nameserver.kv.Rejected                 the state machine refused; carries its gRPC code
    nameserver.kv.ResponseTooLarge         (a Rejected) RESOURCE_EXHAUSTED, max_response_bytes
    raftlog.NotLeaderError                 UNAVAILABLE  "etcdserver: no leader"
    raftlog.ProposalDroppedError           UNAVAILABLE  "etcdserver: leader changed"
    raftlog.UnknownOutcomeError            UNAVAILABLE  "etcdserver: request timed out"
    raftlog.QueueFullError                 RESOURCE_EXHAUSTED "etcdserver: too many requests"
    raftlog.NoSpaceError                   RESOURCE_EXHAUSTED "etcdserver: mvcc: database space exceeded ..."
    raftlog.UnsafeReconfigurationError     FAILED_PRECONDITION "etcdserver: re-configuration failed ..."
    raftlog.ApplyFailure (a result)        INTERNAL

etcd clients match on etcd's messages ("etcdserver: key not found", ...), so
messages start with etcd's text and add what metaledger knows (the limit's
name and value).
"""

from __future__ import annotations

import grpc

from nameserver.kv import Rejected
from raftlog import (
    NoSpaceError,
    NotLeaderError,
    ProposalDroppedError,
    ProposeError,
    QueueFullError,
    UnknownOutcomeError,
    UnsafeReconfigurationError,
)


class NameserverError(Exception):
    code: grpc.StatusCode = grpc.StatusCode.INTERNAL


class InvalidRequest(NameserverError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class UndecodableRequest(InvalidRequest):
    """A request (or one message of a request stream) that protobuf cannot decode."""


def to_status(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    if isinstance(exc, NameserverError):
        return exc.code, str(exc)
    if isinstance(exc, Rejected):
        return getattr(grpc.StatusCode, exc.code, grpc.StatusCode.INTERNAL), exc.message
    if isinstance(exc, NotLeaderError):
        hint = f" (last known leader: {exc.leader_hint})" if exc.leader_hint else ""
        return grpc.StatusCode.UNAVAILABLE, f"etcdserver: no leader{hint}"
    if isinstance(exc, ProposalDroppedError):
        return grpc.StatusCode.UNAVAILABLE, "etcdserver: leader changed"
    if isinstance(exc, UnknownOutcomeError):
        return grpc.StatusCode.UNAVAILABLE, f"etcdserver: request timed out ({exc})"
    if isinstance(exc, QueueFullError):
        return grpc.StatusCode.RESOURCE_EXHAUSTED, "etcdserver: too many requests"
    if isinstance(exc, NoSpaceError):
        return grpc.StatusCode.RESOURCE_EXHAUSTED, f"etcdserver: mvcc: {exc}"
    if isinstance(exc, UnsafeReconfigurationError):
        return grpc.StatusCode.FAILED_PRECONDITION, f"etcdserver: {exc}"
    if isinstance(exc, ProposeError):
        return grpc.StatusCode.UNAVAILABLE, f"etcdserver: {exc}"
    if isinstance(exc, TimeoutError):
        return grpc.StatusCode.UNAVAILABLE, "etcdserver: request timed out"
    return grpc.StatusCode.INTERNAL, f"metaledger: internal error: {type(exc).__name__}: {exc}"
