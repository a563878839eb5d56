"""The broker's remoting port: :mod:`rmq.server`'s frame loop wired with the broker's error
tree (:func:`broker.remoting.errors.answer_error`) and its fault remark. Answers ready in one
turn of the event loop leave in one write (a batch of puts completes together).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from broker.remoting.errors import answer_error, internal_error_remark
from rmq.codec import RemotingCommand
from rmq.server import Handler, HandlerTable, Peer, RemotingServer

MAX_CONNECTIONS = 1024


def remoting_server(
    handlers: Mapping[int, Handler],
    *,
    on_close: Callable[[Peer], None] | None = None,
    on_request: Callable[[RemotingCommand, Peer], None] | None = None,
    max_connections: int = MAX_CONNECTIONS,
    **bounds: Any,
) -> RemotingServer:
    """The broker's frame server over ``handlers`` (``bounds``: :class:`RemotingServer`'s
    ``idle_timeout_s``, ``frame_timeout_s``, ``max_in_flight_per_connection``, ...);
    ``on_request`` sees each request before its handler (:mod:`broker.clients`)."""
    return RemotingServer(
        HandlerTable(handlers, on_close),
        answer_error=answer_error,
        internal_error_remark=internal_error_remark,
        on_request=on_request,
        max_connections=max_connections,
        batch_writes=True,
        name="broker remoting",
        **bounds,
    )
