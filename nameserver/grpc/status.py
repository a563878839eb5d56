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

A message is at most :data:`MAX_MESSAGE_BYTES` of UTF-8 (cut with a note saying so): it
travels percent-encoded in a trailer, and a client drops trailers past its metadata limit
(8 KiB by default), so an error that quotes a huge field of the request would reach the
client as RESOURCE_EXHAUSTED "received metadata size exceeds hard limit" instead.

Handlers (each domain's ``service.py``) are wrapped in :func:`rpc`, which converts whatever
they raise; a streaming handler ends on an error with :func:`abort_stream`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from nameserver.errors import NameserverError, of_raftlog
from nameserver.metrics import REJECTIONS

log = logging.getLogger(__name__)

R = TypeVar("R")

#: The longest status message, in UTF-8 bytes (x3 at most once percent-encoded).
MAX_MESSAGE_BYTES = 1024


def bounded(message: str) -> str:
    """``message``, cut to MAX_MESSAGE_BYTES of UTF-8 (with a note) if it is longer."""
    raw = message.encode("utf-8", errors="replace")
    if len(raw) <= MAX_MESSAGE_BYTES:
        return message
    note = f"... (message cut: {len(raw)} bytes)"
    return raw[: MAX_MESSAGE_BYTES - len(note)].decode("utf-8", errors="ignore") + note


def to_status(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    error = of_raftlog(exc) or exc
    if isinstance(error, NameserverError):
        return error.status, bounded(str(error))
    return grpc.StatusCode.INTERNAL, bounded(
        f"metaledger: internal error: {type(exc).__name__}: {exc}"
    )


def rpc(fn: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
    """Turn any error of a handler into its gRPC status (the one place that does)."""

    @functools.wraps(fn)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> R:
        try:
            return await fn(self, request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            code, message = to_status(exc)
            if code == grpc.StatusCode.INTERNAL:
                log.exception("%s failed", fn.__name__)
            else:
                REJECTIONS.count("grpc", code.name, type(exc).__name__)
            await context.abort(code, message)
            raise  # unreachable: abort raises

    return wrapper


async def abort_stream(context: grpc.aio.ServicerContext, method: str, exc: Exception) -> None:
    """End a streaming handler on ``exc`` with its status (what :func:`rpc` does for unary
    handlers); only a server fault (INTERNAL) is logged above DEBUG."""
    code, message = to_status(exc)
    if code == grpc.StatusCode.INTERNAL:
        log.error("%s failed", method, exc_info=exc)
    else:
        REJECTIONS.count("grpc", code.name, type(exc).__name__)
        log.debug("%s: %s", method, message)
    await context.abort(code, message)
