"""The servicer context of a call that reaches a guarded handler outside grpc.aio's server.

etcd's JSON gateway (:mod:`nameserver.grpc.gateway`) and the Go gRPC front's core
(:mod:`nameserver.grpc.front`) call the method table's handlers themselves. The handlers
(and the guard, and auth's check) read a call's metadata (etcd's ``token``, our client's
``x-ml-client-id``/``x-ml-seq``), its peer and its
deadline, may set trailing metadata, and end a call with ``await context.abort(code,
details)``: :class:`DirectContext` offers exactly that, and its abort raises
:class:`CallAborted`, which carries the status for the caller to answer with.
"""

from __future__ import annotations

import time
from typing import Any

import grpc

__all__ = ["CallAborted", "DirectContext", "Metadata"]

#: A call's metadata as grpc.aio hands it to handlers: (key, value) pairs.
Metadata = tuple[tuple[str, str | bytes], ...]


class CallAborted(grpc.aio.AbortError):  # type: ignore[misc]
    """A handler's ``context.abort(code, details)`` on a :class:`DirectContext`."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class DirectContext:
    """A call's context: its invocation ``metadata``, ``peer`` as grpc names peers, a
    deadline on :func:`time.monotonic`'s clock (None: none)."""

    __slots__ = ("_deadline", "_metadata", "_peer", "trailing_metadata")

    def __init__(
        self, metadata: Metadata = (), peer: str = "", deadline: float | None = None
    ) -> None:
        self._metadata = metadata
        self._peer = peer
        self._deadline = deadline
        #: what the handler set with :meth:`set_trailing_metadata` (empty: nothing)
        self.trailing_metadata: Metadata = ()

    def invocation_metadata(self) -> Metadata:
        return self._metadata

    def peer(self) -> str:
        return self._peer

    def auth_context(self) -> dict[str, list[bytes]]:
        return {}  # no TLS identity reaches a call made this way

    def time_remaining(self) -> float | None:
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - time.monotonic())

    def cancelled(self) -> bool:
        return False

    def set_trailing_metadata(self, metadata: Metadata) -> None:
        self.trailing_metadata = tuple(metadata)

    async def abort(self, code: grpc.StatusCode, details: str = "", *_: Any) -> None:
        raise CallAborted(code, details)
