"""The broker's asyncio remoting server: the one module of the front that touches sockets.

What RocketMQ's ``NettyRemotingAbstract`` does, this does (research/rocketmq-clients.md §1.1):
one sans-I/O :class:`FrameDecoder` per connection; requests dispatched by code and served
concurrently (a long-polled PULL_MESSAGE must not hold up the heartbeats behind it), replies
matched by ``opaque``; an unknown code answers REQUEST_CODE_NOT_SUPPORTED (3) with
``" request type N not supported"``; a oneway request (flag bit 1) is never answered. The answers ready in one turn of the event
loop go out in one write per connection (a batch of puts completes together).

Errors (:mod:`broker.remoting.errors`): a handler's ``BrokerRequestError`` or the codec's
``BadRequest`` answers its code with the message as remark; any other exception (a bug) answers
SYSTEM_ERROR with a generic remark and one ERROR log line; a broken stream (``ProtocolError``)
closes that connection only. Bounds: ``max_connections`` open at once (one more is closed when
accepted), ``max_in_flight`` requests per connection (reading pauses at the limit), a frame must
complete within ``frame_timeout_s`` of its first byte, and a connection silent for
``idle_timeout_s`` with nothing pending is closed (RocketMQ closes idle channels after 120 s).

The broker also sends requests of its own over a client's connection
(NOTIFY_CONSUMER_IDS_CHANGED, oneway): :meth:`Peer.send_oneway`.

It is the broker's own rather than the nameserver's ``nameserver.remoting.server``: a broker
may import only the client library and the frame codec from metaledger (the layering
contract in pyproject.toml), and it needs what that one lacks (a bound on requests in flight
per connection, requests of its own to clients).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from broker.remoting.errors import BrokerRequestError
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
IDLE_TIMEOUT_S = 120.0
FRAME_TIMEOUT_S = 30.0
MAX_CONNECTIONS = 1024
MAX_IN_FLIGHT = 256


@dataclass(eq=False)
class Peer:
    """The far end of one connection."""

    connection_id: int
    address: str
    _writer: asyncio.StreamWriter | None = field(default=None, repr=False)

    @property
    def host(self) -> str:
        return self.address.rpartition(":")[0] or self.address

    @property
    def port(self) -> int:
        tail = self.address.rpartition(":")[2]
        return int(tail) if tail.isdigit() else 0

    def send_oneway(self, command: RemotingCommand) -> bool:
        """Write a oneway request to this peer (best effort); False if the connection is gone."""
        if self._writer is None or self._writer.is_closing():
            return False
        self._writer.write(encode(command))
        return True


Handler = Callable[[RemotingCommand, Peer], Awaitable[RemotingCommand | None]]


def not_supported(request: RemotingCommand) -> RemotingCommand:
    return request.response(
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {request.code} not supported"
    )


def internal_error_remark(code: int) -> str:
    return f"metaledger broker: internal error serving request code {code}; see the broker log"


class RemotingServer:
    """Serves a table of code → handler on one TCP address."""

    def __init__(
        self,
        handlers: dict[int, Handler],
        *,
        on_close: Callable[[Peer], None] | None = None,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        max_in_flight: int = MAX_IN_FLIGHT,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        frame_timeout_s: float = FRAME_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.handlers = handlers
        self.on_close = on_close
        self.max_frame_bytes = max_frame_bytes
        self.max_in_flight = max_in_flight
        self.idle_timeout_s = idle_timeout_s
        self.frame_timeout_s = frame_timeout_s
        self.max_connections = max_connections
        self._server: asyncio.Server | None = None
        self._connections: dict[int, asyncio.Task[None]] = {}
        self._next_id = 0
        self.protocol_errors = 0
        self.refused = 0
        self.handler_errors = 0

    @property
    def address(self) -> tuple[str, int]:
        if self._server is None or not self._server.sockets:
            raise RuntimeError("the broker's remoting server is not started")
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def start(self, host: str, port: int) -> tuple[str, int]:
        self._server = await asyncio.start_server(
            self._accept, host, port, limit=READ_CHUNK_BYTES, reuse_address=True, backlog=1024
        )
        log.info("broker remoting: listening on %s:%d", *self.address)
        return self.address

    async def close(self) -> None:
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
            self.refused += 1
            writer.transport.abort()
            return
        self._next_id += 1
        name = writer.get_extra_info("peername")
        address = f"{name[0]}:{name[1]}" if isinstance(name, tuple) else str(name)
        peer = Peer(self._next_id, address, writer)
        task = asyncio.current_task()
        assert task is not None
        self._connections[peer.connection_id] = task
        try:
            await _Connection(self, peer, reader, writer).run()
        except asyncio.CancelledError:
            pass  # close(): the top of this connection's task, awaited by nobody else
        finally:
            del self._connections[peer.connection_id]
            if self.on_close is not None:
                try:
                    self.on_close(peer)
                except Exception:
                    log.exception("broker remoting: connection-closed hook failed")

    async def dispatch(self, request: RemotingCommand, peer: Peer) -> RemotingCommand | None:
        """One request's answer (also used by tests without a socket)."""
        handler = self.handlers.get(request.code)
        if handler is None:
            return not_supported(request)
        try:
            response = await handler(request, peer)
        except (BadRequest, BrokerRequestError) as exc:
            return request.response(exc.response_code, str(exc))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.handler_errors += 1
            log.error(
                "broker remoting: handler of code %d failed: %s: %s",
                request.code,
                type(exc).__name__,
                exc,
                exc_info=log.isEnabledFor(logging.DEBUG),
            )
            return request.response(ResponseCode.SYSTEM_ERROR, internal_error_remark(request.code))
        if response is None:
            return None
        if response.opaque == request.opaque and response.flag & RPC_TYPE_RESPONSE:
            return response  # made by request.response(): nothing to copy
        return response.replace(opaque=request.opaque, flag=response.flag | RPC_TYPE_RESPONSE)


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
        self.slots = asyncio.Semaphore(server.max_in_flight)
        self.tasks: set[asyncio.Task[None]] = set()
        self.last_active = self.loop.time()
        self.frame_started: float | None = None
        self.out: list[bytes] = []  # answers written together at the end of this loop turn

    async def run(self) -> None:
        try:
            while True:
                data = await self._read()
                if not data or not await self._receive(data):
                    break
            if self.tasks:
                await asyncio.gather(*self.tasks, return_exceptions=True)
        except (ConnectionError, OSError) as exc:
            log.info("broker remoting: connection %s lost: %s", self.peer.address, exc)
        finally:
            for task in self.tasks:
                task.cancel()
            self._flush()
            self.writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await self.writer.wait_closed()

    async def _read(self) -> bytes:
        while True:
            deadline = self.last_active + self.server.idle_timeout_s
            if self.frame_started is not None:
                deadline = min(deadline, self.frame_started + self.server.frame_timeout_s)
            try:
                async with asyncio.timeout_at(deadline):
                    data = await self.reader.read(READ_CHUNK_BYTES)
            except TimeoutError:
                if self.tasks:  # our own answers are pending (a long poll): not the client's stall
                    self.last_active = self.loop.time()
                    if self.frame_started is not None:
                        self.frame_started = self.last_active
                    continue
                log.debug("broker remoting: closing %s: idle or stalled frame", self.peer.address)
                return b""
            self.last_active = self.loop.time()
            return data

    async def _receive(self, data: bytes) -> bool:
        self.decoder.receive_data(data)
        arrived = self.last_active
        decoded = False
        while True:
            try:
                event = self.decoder.next_event()
            except ProtocolError as exc:
                self.server.protocol_errors += 1
                log.debug("broker remoting: closing %s: %s", self.peer.address, exc)
                return False
            if not isinstance(event, RemotingCommand):
                break
            decoded = True
            if event.is_response:
                continue  # answers to our oneway notifications never come; drop strays
            await self.slots.acquire()
            task = asyncio.create_task(self._serve(event))
            self.tasks.add(task)
            task.add_done_callback(self._done)
        if not self.decoder.buffered_bytes:
            self.frame_started = None
        elif decoded or self.frame_started is None:
            self.frame_started = arrived
        return True

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self.slots.release()

    async def _serve(self, request: RemotingCommand) -> None:
        response = await self.server.dispatch(request, self.peer)
        if request.is_oneway or response is None or self.writer.is_closing():
            return
        try:
            frame = encode(response)
        except ValueError as exc:
            log.error("broker remoting: cannot encode the answer to %d: %s", request.code, exc)
            frame = encode(
                request.response(
                    ResponseCode.SYSTEM_ERROR,
                    f"the answer to request code {request.code} is too large to send",
                )
            )
        if not self.out:
            self.loop.call_soon(self._flush)
        self.out.append(frame)
        self.last_active = self.loop.time()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.drain()

    def _flush(self) -> None:
        """Write the answers of this loop turn in one go (one send for a batch of puts)."""
        frames, self.out = self.out, []
        if frames and not self.writer.is_closing():
            self.writer.write(frames[0] if len(frames) == 1 else b"".join(frames))
