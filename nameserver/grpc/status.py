"""The one place that turns errors into a gRPC status (code, message).

Errors of the nameserver (:mod:`nameserver.errors`) carry their status; errors of raftlog
(not leader, queue full, ...) and a proposal's timeout are first worded as rejections by
:func:`nameserver.errors.of_raftlog`. etcd clients match on etcd's messages ("etcdserver:
key not found", ...), so messages start with etcd's text and add what metaledger knows.

    nameserver.errors.NameserverError      its ``status``, its message
    raftlog.NotLeaderError                 UNAVAILABLE  "etcdserver: no leader"
    raftlog.ProposalDroppedError           UNAVAILABLE  "etcdserver: leader changed"
    raftlog.UnknownOutcomeError            UNAVAILABLE  "etcdserver: request timed out"
    raftlog.QueueFullError                 RESOURCE_EXHAUSTED "etcdserver: too many requests"
    raftlog.NoSpaceError                   RESOURCE_EXHAUSTED "etcdserver: mvcc: database space exceeded ..."
    raftlog.UnsafeReconfigurationError     FAILED_PRECONDITION "etcdserver: re-configuration failed ..."
    anything else                          INTERNAL "metaledger: internal error: ..."
"""

from __future__ import annotations

import grpc

from nameserver.errors import NameserverError, of_raftlog


def to_status(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    error = of_raftlog(exc) or exc
    if isinstance(error, NameserverError):
        return error.status, str(error)
    return grpc.StatusCode.INTERNAL, f"metaledger: internal error: {type(exc).__name__}: {exc}"
