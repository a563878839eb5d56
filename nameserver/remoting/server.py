"""The asyncio front of the remoting protocol: the one module of it that touches sockets.

One :class:`FrameDecoder` per connection; each request is dispatched by its code to
the service's handler and may finish in any order (replies are matched by ``opaque``,
as RocketMQ clients do; RocketMQ's own processors run on thread pools, unordered too).
What RocketMQ's ``NettyRemotingAbstract`` does, this does:

- an unknown code is answered REQUEST_CODE_NOT_SUPPORTED (3) with the remark
  ``" request type N not supported"`` (leading space included);
- a oneway request (flag bit 1) is handled but never answered;
- a reply echoes the request's ``opaque`` and has the response bit set;
- a handler's :class:`BadRequest` or unexpected exception becomes SYSTEM_ERROR (1) with
  the error as the remark; the connection stays open;
- a broken byte stream (:class:`ProtocolError`: oversize frame, bad header) closes that
  connection only, without a reply, as Netty's decoder does.

Responses arriving from the peer (the server never sends requests yet) are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from nameserver.remoting.codec import (
    MAX_FRAME_BYTES,
    RPC_TYPE_RESPONSE,
    BadRequest,
    FrameDecoder,
    ProtocolError,
    RemotingCommand,
    encode,
)
from nameserver.remoting.codes import ResponseCode

log = logging.getLogger(__name__)

READ_CHUNK_BYTES = 256 * 1024


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
    ) -> None:
        self.service = service
        self.max_frame_bytes = max_frame_bytes
        self.max_in_flight_per_connection = max_in_flight_per_connection
        self._server: asyncio.Server | None = None
        self._connections: dict[int, asyncio.Task[None]] = {}
        self._next_id = 0
        self.protocol_errors = 0
        """Connections closed for a broken byte stream (a metric and a test hook)."""

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
            self._accept, host, port, limit=READ_CHUNK_BYTES, reuse_address=True
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
        self.decoder = FrameDecoder(server.max_frame_bytes)
        # Bounds the requests one connection can have in flight: reading pauses at the
        # limit, so a flooding client is pushed back through TCP instead of growing memory.
        self.slots = asyncio.Semaphore(server.max_in_flight_per_connection)
        self.tasks: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        try:
            while True:
                data = await self.reader.read(READ_CHUNK_BYTES)
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

    async def _receive(self, data: bytes) -> bool:
        """Dispatch every complete request in ``data``; False when the stream is broken."""
        self.decoder.receive_data(data)
        while True:
            try:
                event = self.decoder.next_event()
            except ProtocolError as exc:
                self.server.protocol_errors += 1
                log.warning("remoting: closing %s: %s", self.peer.address, exc)
                return False
            if not isinstance(event, RemotingCommand):
                return True
            await self.slots.acquire()
            task = asyncio.create_task(self._serve(event))
            self.tasks.add(task)
            task.add_done_callback(self._done)

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
            frame = encode(request.response(ResponseCode.SYSTEM_ERROR, str(exc)))
        if self.writer.is_closing():
            return
        self.writer.write(frame)
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.drain()

    async def _dispatch(self, request: RemotingCommand) -> RemotingCommand | None:
        handler = self.server.service.lookup(request.code)
        if handler is None:
            return not_supported(request)
        try:
            return await handler(request, self.peer)
        except BadRequest as exc:
            return request.response(exc.response_code, str(exc))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("remoting: handler of code %d failed", request.code)
            return request.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
