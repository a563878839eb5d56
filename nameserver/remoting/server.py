"""The asyncio front of the remoting protocol: the one module of it that touches sockets.

One :class:`FrameDecoder` per connection; each request is dispatched by its code to
the service's handler and may finish in any order (replies are matched by ``opaque``,
as RocketMQ clients do; RocketMQ's own processors run on thread pools, unordered too).
What RocketMQ's ``NettyRemotingAbstract`` does, this does:

- an unknown code is answered REQUEST_CODE_NOT_SUPPORTED (3) with the remark
  ``" request type N not supported"`` (leading space included);
- a oneway request (flag bit 1) is handled but never answered;
- a reply echoes the request's ``opaque`` and has the response bit set;
- a handler's :class:`BadRequest` becomes SYSTEM_ERROR (1) with the error as the remark;
  an unexpected exception (a bug) SYSTEM_ERROR with a generic remark and one ERROR log
  line, never Python's exception text; the connection stays open;
- a broken byte stream (:class:`ProtocolError`: oversize frame, bad header) closes that
  connection only, without a reply, as Netty's decoder does.

Every connection is bounded (issue 14): a connection that neither sends nor is answered
for ``idle_timeout_s`` is closed (RocketMQ's nameserver closes channels idle for 120 s);
a frame must arrive whole within ``frame_timeout_s`` of its first byte (a client holding
a partial 16 MiB frame would otherwise hold that memory for ever); at most
``max_connections`` are open at once, and one more is closed as soon as it is accepted
(the default keeps the node within a 1,024-descriptor limit).

Responses arriving from the peer (the server never sends requests yet) are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from ssl import SSLContext
from typing import Protocol

from nameserver.metrics import REJECTIONS
from nameserver.remoting.status import internal_error_remark
from nameserver.tls import tls_arguments
from rmq.codec import (
    MAX_FRAME_BYTES,
    RPC_TYPE_RESPONSE,
    BadRequest,
    FrameDecoder,
    ProtocolError,
    RemotingCommand,
    encode,
)
from rmq.codes import ResponseCode

log = logging.getLogger(__name__)

READ_CHUNK_BYTES = 256 * 1024
#: Defaults of the connection bounds (``ServerConfig.remoting_*``).
IDLE_TIMEOUT_S = 120.0
FRAME_TIMEOUT_S = 30.0
MAX_CONNECTIONS = 512
#: Connections the kernel queues before they are accepted (RocketMQ's
#: ``serverSocketBacklog``); asyncio's 100 drops a burst's SYNs, each retried after 1 s.
ACCEPT_BACKLOG = 1024
#: A rejected connection is logged at most once per this many seconds.
REFUSAL_LOG_INTERVAL_S = 10.0


@dataclass(frozen=True)
class Peer:
    """The far end of one connection (RocketMQ keys broker liveness by channel)."""

    connection_id: int
    address: str


Handler = Callable[[RemotingCommand, Peer], Awaitable[RemotingCommand | None]]
"""Answers one request (a response built with ``request.response(...)``); None only for
requests that need no answer. Raising :class:`BadRequest` answers SYSTEM_ERROR."""


class RemotingService(Protocol):
    """What the server dispatches to; the nameserver implements it in issue 5."""

    def lookup(self, code: int) -> Handler | None:
        """The handler of ``code``, or None for REQUEST_CODE_NOT_SUPPORTED. Must not raise."""
        ...

    def connection_closed(self, peer: Peer) -> None:
        """Called once when ``peer``'s connection is gone, after its last reply (RocketMQ
        drops the routes of a broker whose channel closes). Must not raise."""
        ...


class HandlerTable:
    """A :class:`RemotingService` from a dict of code → handler."""

    def __init__(
        self,
        handlers: dict[int, Handler] | None = None,
        on_close: Callable[[Peer], None] | None = None,
    ) -> None:
        self.handlers: dict[int, Handler] = dict(handlers or {})
        self._on_close = on_close

    def register(self, code: int) -> Callable[[Handler], Handler]:
        def add(handler: Handler) -> Handler:
            self.handlers[code] = handler
            return handler

        return add

    def lookup(self, code: int) -> Handler | None:
        return self.handlers.get(code)

    def connection_closed(self, peer: Peer) -> None:
        if self._on_close is not None:
            self._on_close(peer)


def not_supported(request: RemotingCommand) -> RemotingCommand:
    return request.response(
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {request.code} not supported"
    )


class RemotingServer:
    """Serves one :class:`RemotingService` on one TCP address."""

    def __init__(
        self,
        service: RemotingService,
        *,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        max_in_flight_per_connection: int = 256,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        frame_timeout_s: float = FRAME_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
        ssl: SSLContext | None = None,
    ) -> None:
        self.service = service
        self.ssl = ssl  # TLS on this port (nameserver.tls); a failed handshake: that connection
        self.max_frame_bytes = max_frame_bytes
        self.max_in_flight_per_connection = max_in_flight_per_connection
        self.idle_timeout_s = idle_timeout_s
        self.frame_timeout_s = frame_timeout_s
        self.max_connections = max_connections
        self._server: asyncio.Server | None = None
        self._connections: dict[int, asyncio.Task[None]] = {}
        self._next_id = 0
        self._refusal_logged_at = -REFUSAL_LOG_INTERVAL_S
        # Metrics (and test hooks):
        self.protocol_errors = 0
        """Connections closed for a broken byte stream."""
        self.idle_closed = 0
        """Connections closed after ``idle_timeout_s`` without traffic."""
        self.frame_timeouts = 0
        """Connections closed because a frame did not complete within ``frame_timeout_s``."""
        self.refused = 0
        """Connections closed at once because ``max_connections`` were open."""

    @property
    def address(self) -> tuple[str, int]:
        if self._server is None or not self._server.sockets:
            raise RuntimeError("the remoting server is not started")
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen on ``host:port`` (port 0 picks a free one); returns the bound address."""
        self._server = await asyncio.start_server(
            self._accept,
            host,
            port,
            limit=READ_CHUNK_BYTES,
            reuse_address=True,
            backlog=ACCEPT_BACKLOG,
            **tls_arguments(self.ssl),
        )
        log.info("remoting: listening on %s:%d", *self.address)
        return self.address

    async def close(self) -> None:
        """Stop listening and drop every connection."""
        if self._server is not None:
            self._server.close()
        tasks = list(self._connections.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._connections) >= self.max_connections:
            self._refuse(writer)
            return
        self._next_id += 1
        name = writer.get_extra_info("peername")
        address = f"{name[0]}:{name[1]}" if isinstance(name, tuple) else str(name)
        peer = Peer(self._next_id, address)
        task = asyncio.current_task()
        assert task is not None
        self._connections[peer.connection_id] = task
        try:
            await _Connection(self, peer, reader, writer).run()
        finally:
            del self._connections[peer.connection_id]
            self.service.connection_closed(peer)

    def _refuse(self, writer: asyncio.StreamWriter) -> None:
        """Close a connection over the cap at once (it holds a descriptor, nothing more)."""
        self.refused += 1
        writer.transport.abort()
        now = asyncio.get_running_loop().time()
        if now - self._refusal_logged_at >= REFUSAL_LOG_INTERVAL_S:
            self._refusal_logged_at = now
            log.warning(
                "remoting: %d connections open (the limit, remoting_max_connections); "
                "closing new ones (%d so far)",
                self.max_connections,
                self.refused,
            )


class _Connection:
    def __init__(
        self,
        server: RemotingServer,
        peer: Peer,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.server = server
        self.peer = peer
        self.reader = reader
        self.writer = writer
        self.loop = asyncio.get_running_loop()
        self.decoder = FrameDecoder(server.max_frame_bytes)
        # Bounds the requests one connection can have in flight: reading pauses at the
        # limit, so a flooding client is pushed back through TCP instead of growing memory.
        self.slots = asyncio.Semaphore(server.max_in_flight_per_connection)
        self.tasks: set[asyncio.Task[None]] = set()
        self.last_active = self.loop.time()
        """When a byte last arrived or an answer was last sent."""
        self.frame_started: float | None = None
        """When the first byte of the partial frame in the decoder arrived (None: none)."""

    async def run(self) -> None:
        try:
            while True:
                data = await self._read()
                if not data or not await self._receive(data):
                    break
            # Requests decoded before EOF or a broken frame still get their answers.
            if self.tasks:
                await asyncio.gather(*self.tasks, return_exceptions=True)
        except (ConnectionError, OSError) as exc:
            log.info("remoting: connection %s lost: %s", self.peer.address, exc)
        finally:
            for task in self.tasks:
                task.cancel()
            self.writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await self.writer.wait_closed()

    async def _read(self) -> bytes:
        """The next bytes, or b"" at EOF or when the connection timed out."""
        while True:
            idle_at = self.last_active + self.server.idle_timeout_s
            frame_at = (
                self.frame_started + self.server.frame_timeout_s
                if self.frame_started is not None
                else idle_at
            )
            try:
                async with asyncio.timeout_at(min(idle_at, frame_at)):
                    data = await self.reader.read(READ_CHUNK_BYTES)
            except TimeoutError:
                now = self.loop.time()
                if self.tasks:
                    # Our own answers are pending: the client is not the one stalling.
                    self.last_active = now
                    if self.frame_started is not None:
                        self.frame_started = now
                    continue
                if self.frame_started is not None and now >= frame_at:
                    self.server.frame_timeouts += 1
                    log.debug(  # the client's stall, counted by reason
                        "remoting: closing %s: a frame of %d bytes so far did not complete "
                        "within %.1f s (remoting_frame_timeout_ms)",
                        self.peer.address,
                        self.decoder.buffered_bytes,
                        self.server.frame_timeout_s,
                    )
                else:
                    self.server.idle_closed += 1
                    log.debug(
                        "remoting: closing %s: idle for %.1f s (remoting_idle_timeout_ms)",
                        self.peer.address,
                        self.server.idle_timeout_s,
                    )
                return b""
            self.last_active = self.loop.time()
            return data

    async def _receive(self, data: bytes) -> bool:
        """Dispatch every complete request in ``data``; False when the stream is broken."""
        self.decoder.receive_data(data)
        arrived = self.last_active
        decoded = False
        while True:
            try:
                event = self.decoder.next_event()
            except ProtocolError as exc:
                self.server.protocol_errors += 1
                # a client's mistake (counted, by reason): DEBUG, never an error of the server
                log.debug("remoting: closing %s: %s", self.peer.address, exc)
                return False
            except Exception as exc:  # a bug in the decoder: this connection only
                self.server.protocol_errors += 1
                log.error(
                    "remoting: closing %s: cannot decode a frame: %s: %s",
                    self.peer.address,
                    type(exc).__name__,
                    exc,
                )
                return False
            if not isinstance(event, RemotingCommand):
                break
            decoded = True
            if self.slots.locked():
                await self.slots.acquire()
                arrived = self.loop.time()  # reading was paused by us, not by the client
            else:
                await self.slots.acquire()
            task = asyncio.create_task(self._serve(event))
            self.tasks.add(task)
            task.add_done_callback(self._done)
        if not self.decoder.buffered_bytes:
            self.frame_started = None
        elif decoded or self.frame_started is None:
            self.frame_started = arrived  # a new frame began in this chunk
        return True

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self.slots.release()

    async def _serve(self, request: RemotingCommand) -> None:
        if request.is_response:
            log.debug("remoting: dropping an unexpected response from %s", self.peer.address)
            return
        response = await self._dispatch(request)
        if request.is_oneway or response is None:
            return
        response = response.replace(opaque=request.opaque, flag=response.flag | RPC_TYPE_RESPONSE)
        try:
            frame = encode(response)
        except ValueError as exc:
            log.error("remoting: cannot encode the answer to code %d: %s", request.code, exc)
            frame = encode(
                request.response(
                    ResponseCode.SYSTEM_ERROR,
                    f"metaledger: the answer to request code {request.code} is too large to send",
                )
            )
        if self.writer.is_closing():
            return
        self.writer.write(frame)
        self.last_active = self.loop.time()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.drain()

    async def _dispatch(self, request: RemotingCommand) -> RemotingCommand | None:
        handler = self.server.service.lookup(request.code)
        if handler is None:
            REJECTIONS.count("remoting", "UNIMPLEMENTED", "RequestCodeNotSupported")
            return not_supported(request)
        try:
            return await handler(request, self.peer)
        except BadRequest as exc:
            REJECTIONS.count("remoting", "INVALID_ARGUMENT", type(exc).__name__)
            return request.response(exc.response_code, str(exc))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error(
                "remoting: handler of code %d failed: %s: %s",
                request.code,
                type(exc).__name__,
                exc,
            )
            log.debug("remoting: handler of code %d failed", request.code, exc_info=True)
            return request.response(ResponseCode.SYSTEM_ERROR, internal_error_remark(request.code))
