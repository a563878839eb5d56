"""The one place that turns errors into a gRPC status (code, message).

Errors of the nameserver (:mod:`nameserver.errors`) carry their code; errors from raftlog
and asyncio are mapped here. etcd clients match on etcd's messages ("etcdserver: key not
found", ...), so messages start with etcd's text and add what metaledger knows.

    nameserver.errors.Rejected             its ``code``, its message
    nameserver.errors.NameserverError      its ``code``
    raftlog.NotLeaderError                 UNAVAILABLE  "etcdserver: no leader"
    raftlog.ProposalDroppedError           UNAVAILABLE  "etcdserver: leader changed"
    raftlog.UnknownOutcomeError            UNAVAILABLE  "etcdserver: request timed out"
    raftlog.QueueFullError                 RESOURCE_EXHAUSTED "etcdserver: too many requests"
    raftlog.NoSpaceError                   RESOURCE_EXHAUSTED "etcdserver: mvcc: database space exceeded ..."
    raftlog.UnsafeReconfigurationError     FAILED_PRECONDITION "etcdserver: re-configuration failed ..."
    raftlog.ApplyFailure (a result)        INTERNAL
"""

from __future__ import annotations

import grpc

from nameserver.errors import NameserverError, Rejected
from raftlog import (
    NoSpaceError,
    NotLeaderError,
    ProposalDroppedError,
    ProposeError,
    QueueFullError,
    UnknownOutcomeError,
    UnsafeReconfigurationError,
)


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
