"""The nameserver's remoting port: :mod:`rmq.server`'s frame loop wired with the
nameserver's error mapping (:mod:`nameserver.remoting.status`), its rejection metric
(``metaledger_requests_rejected_total{api="remoting"}``) and its TLS (``nameserver.tls``).
The bounds (idle and frame timeouts, connection cap) come from ``ServerConfig.remoting_*``;
RocketMQ's nameserver closes channels idle for 120 s, and the default cap keeps the node
within a 1,024-descriptor limit.
"""

from __future__ import annotations

from ssl import SSLContext
from typing import Any

from nameserver.metrics import REJECTIONS
from nameserver.remoting.status import internal_error_remark, rejection_of
from nameserver.tls import HANDSHAKE_TIMEOUT_S
from rmq.server import RemotingServer, RemotingService

#: Defaults of the connection bounds (``ServerConfig.remoting_*``).
MAX_CONNECTIONS = 512


def answer_error(exc: Exception) -> tuple[int, str] | None:
    """A rejection (or a raftlog error worded as one) escaping a handler: its remoting code
    and message; anything else is a fault (None)."""
    rejection = rejection_of(exc)
    if rejection is None:
        return None
    return rejection.remoting_code, str(rejection)


def count_rejection(status: str, reason: str) -> None:
    REJECTIONS.count("remoting", status, reason)


def remoting_server(
    service: RemotingService,
    *,
    ssl: SSLContext | None = None,
    max_connections: int = MAX_CONNECTIONS,
    **bounds: Any,
) -> RemotingServer:
    """The nameserver's frame server for ``service`` (``bounds``: :class:`RemotingServer`'s
    ``idle_timeout_s``, ``frame_timeout_s``, ``max_frame_bytes``, ...)."""
    return RemotingServer(
        service,
        answer_error=answer_error,
        internal_error_remark=internal_error_remark,
        count_rejection=count_rejection,
        ssl=ssl,
        ssl_handshake_timeout_s=HANDSHAKE_TIMEOUT_S,
        max_connections=max_connections,
        name="remoting",
        **bounds,
    )
