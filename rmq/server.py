"""The asyncio frame server of the remoting protocol: the one loop every RocketMQ server here
runs (the nameserver's remoting port, the broker's), and the only module of it that touches
server sockets.

One sans-I/O :class:`~rmq.codec.FrameDecoder` per connection; each request is dispatched by its
code to the service's handler and may finish in any order (replies are matched by ``opaque``,
as RocketMQ clients do; RocketMQ's processors run on thread pools, unordered too: a long-polled
PULL_MESSAGE must not hold up the heartbeats behind it). What RocketMQ's
``NettyRemotingAbstract`` does, this does:

- an unknown code is answered REQUEST_CODE_NOT_SUPPORTED (3) with the remark
  ``" request type N not supported"`` (leading space included);
- a oneway request (flag bit 1) is handled but never answered;
- a reply echoes the request's ``opaque`` and has the response bit set;
- a handler's :class:`~rmq.codec.BadRequest` becomes SYSTEM_ERROR (1) with the error as the
  remark; any other exception goes through the program's ``answer_error`` mapper (its own
  error tree → response code and remark); one it does not know is a bug: SYSTEM_ERROR with
  the program's ``internal_error_remark`` and one ERROR log line, never Python's exception
  text; the connection stays open;
- every remark is bounded (:func:`~rmq.codec.bounded_remark`): a client may send a topic or
  a group of any length, and a remark that quotes it keeps its two ends only;
- a broken byte stream (:class:`~rmq.codec.ProtocolError`: oversize frame, bad header)
  closes that connection only, without a reply, as Netty's decoder does; requests decoded
  before the damage are still answered;
- responses arriving from the peer (answers to our oneway notifications never come) are
  dropped.

Every connection is bounded: a connection that neither sends nor is answered for
``idle_timeout_s`` is closed (RocketMQ closes channels idle for 120 s); a frame must arrive
whole within ``frame_timeout_s`` of its first byte (a client holding a partial 16 MiB frame
would otherwise hold that memory for ever); at most ``max_in_flight_per_connection``
requests run per connection (reading pauses at the limit, so a flooding client is pushed
back through TCP instead of growing memory); at most ``max_connections`` are open at once,
and one more is closed as soon as it is accepted.

What differs between programs comes in as parameters, so this module knows no metaledger
package: the service (handler lookup and a connection-closed hook), the error mapper, the
fault remark, a rejection counter (``count_rejection(status, reason)``: an unknown code is
``("UNIMPLEMENTED", "RequestCodeNotSupported")``, a bad header ``("INVALID_ARGUMENT",
"BadRequest")``), a request observer (``on_request(request, peer)`` before each dispatch),
TLS (an ``ssl.SSLContext``; a failed handshake closes that connection only) and
``batch_writes`` (the answers ready in one turn of the event loop go out in one write).

A server may send requests of its own over a client's connection (the broker's
NOTIFY_CONSUMER_IDS_CHANGED, oneway): :meth:`Peer.send_oneway`.

A little over 500 lines: the frame loop and the bounds above share every connection's state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from ssl import SSLContext
from typing import Any, Protocol

from rmq.codec import (
    MAX_FRAME_BYTES,
    MAX_REMARK_CHARS,
    RPC_TYPE_RESPONSE,
    BadRequest,
    FrameDecoder,
    ProtocolError,
    RemotingCommand,
    bounded_remark,
    encode,
)
from rmq.codes import ResponseCode

log = logging.getLogger(__name__)

READ_CHUNK_BYTES = 256 * 1024
IDLE_TIMEOUT_S = 120.0
FRAME_TIMEOUT_S = 30.0
MAX_CONNECTIONS = 512
MAX_IN_FLIGHT = 256
#: Connections the kernel queues before they are accepted (RocketMQ's
#: ``serverSocketBacklog``); asyncio's 100 drops a burst's SYNs, each retried after 1 s.
ACCEPT_BACKLOG = 1024
#: A refused connection is logged at most once per this many seconds.
REFUSAL_LOG_INTERVAL_S = 10.0


@dataclass(frozen=True)
class Peer:
    """The far end of one connection (RocketMQ keys broker liveness by channel)."""

    connection_id: int
    address: str
    _writer: asyncio.StreamWriter | None = field(default=None, repr=False, compare=False)

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
"""Answers one request (a response built with ``request.response(...)``); None only for
requests that need no answer. Raising :class:`BadRequest` answers SYSTEM_ERROR."""

ErrorAnswer = Callable[[Exception], "tuple[int, str] | None"]
"""A program's error mapper: (response code, remark) for an error of its own tree that refuses
the request, None for anything else (a bug)."""


class RemotingService(Protocol):
    """What the server dispatches to."""

    def lookup(self, code: int) -> Handler | None:
        """The handler of ``code``, or None for REQUEST_CODE_NOT_SUPPORTED. Must not raise."""
        ...

    def connection_closed(self, peer: Peer) -> None:
        """Called once when ``peer``'s connection is gone, after its last reply (RocketMQ
        drops the routes of a broker whose channel closes)."""
        ...


class HandlerTable:
    """A :class:`RemotingService` from a dict of code → handler."""

    def __init__(
        self,
        handlers: Mapping[int, Handler] | None = None,
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


def internal_error_remark(code: int) -> str:
    """The default remark of an answer that failed by no fault of the request (a bug)."""
    return f"internal error serving request code {code}; see the server log"


def _no_answer(exc: Exception) -> tuple[int, str] | None:
    return None


class RemotingServer:
    """Serves one :class:`RemotingService` on one TCP address."""

    def __init__(
        self,
        service: RemotingService,
        *,
        answer_error: ErrorAnswer = _no_answer,
        internal_error_remark: Callable[[int], str] = internal_error_remark,
        count_rejection: Callable[[str, str], None] | None = None,
        on_request: Callable[[RemotingCommand, Peer], None] | None = None,
        ssl: SSLContext | None = None,
        ssl_handshake_timeout_s: float | None = None,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        max_in_flight_per_connection: int = MAX_IN_FLIGHT,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        frame_timeout_s: float = FRAME_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
        batch_writes: bool = False,
        name: str = "remoting",
    ) -> None:
        self.service = service
        self.answer_error = answer_error
        self.internal_error_remark = internal_error_remark
        self.count_rejection = count_rejection
        self.on_request = on_request
        self.ssl = ssl
        self.ssl_handshake_timeout_s = ssl_handshake_timeout_s
        self.max_frame_bytes = max_frame_bytes
        self.max_in_flight_per_connection = max_in_flight_per_connection
        self.idle_timeout_s = idle_timeout_s
        self.frame_timeout_s = frame_timeout_s
        self.max_connections = max_connections
        self.batch_writes = batch_writes
        self.name = name  # the first word of this server's log lines
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
        self.handler_errors = 0
        """Requests whose handler failed with an error nobody maps (a bug)."""

    @property
    def address(self) -> tuple[str, int]:
        if self._server is None or not self._server.sockets:
            raise RuntimeError(f"the {self.name} server is not started")
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen on ``host:port`` (port 0 picks a free one); returns the bound address."""
        tls: dict[str, Any] = {}
        if self.ssl is not None:
            tls["ssl"] = self.ssl
            if self.ssl_handshake_timeout_s is not None:
                tls["ssl_handshake_timeout"] = self.ssl_handshake_timeout_s
        self._server = await asyncio.start_server(
            self._accept,
            host,
            port,
            limit=READ_CHUNK_BYTES,
            reuse_address=True,
            backlog=ACCEPT_BACKLOG,
            **tls,
        )
        log.info("%s: listening on %s:%d", self.name, *self.address)
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
            try:
                self.service.connection_closed(peer)
            except Exception:
                log.exception("%s: connection-closed hook failed", self.name)

    def _refuse(self, writer: asyncio.StreamWriter) -> None:
        """Close a connection over the cap at once (it holds a descriptor, nothing more)."""
        self.refused += 1
        writer.transport.abort()
        now = asyncio.get_running_loop().time()
        if now - self._refusal_logged_at >= REFUSAL_LOG_INTERVAL_S:
            self._refusal_logged_at = now
            log.warning(
                "%s: %d connections open (the limit); closing new ones (%d so far)",
                self.name,
                self.max_connections,
                self.refused,
            )

    async def dispatch(self, request: RemotingCommand, peer: Peer) -> RemotingCommand | None:
        """One request's answer, its opaque and response bit set (also for tests without a
        socket); None when the handler gives none."""
        if self.on_request is not None:
            self.on_request(request, peer)
        handler = self.service.lookup(request.code)
        if handler is None:
            if self.count_rejection is not None:
                self.count_rejection("UNIMPLEMENTED", "RequestCodeNotSupported")
            return not_supported(request)
        try:
            response = await handler(request, peer)
        except BadRequest as exc:
            if self.count_rejection is not None:
                self.count_rejection("INVALID_ARGUMENT", type(exc).__name__)
            return request.response(exc.response_code, bounded_remark(str(exc)))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            answer = self.answer_error(exc)
            if answer is not None:
                code, remark = answer
                return request.response(code, bounded_remark(remark))
            self.handler_errors += 1
            log.error(
                "%s: handler of code %d failed: %s: %s",
                self.name,
                request.code,
                type(exc).__name__,
                exc,
            )
            log.debug("%s: handler of code %d failed", self.name, request.code, exc_info=True)
            return request.response(
                ResponseCode.SYSTEM_ERROR, self.internal_error_remark(request.code)
            )
        if response is None:
            return None
        if response.remark and len(response.remark) > MAX_REMARK_CHARS:  # quoting a client
            response = response.replace(remark=bounded_remark(response.remark))
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
        self.name = server.name
        self.peer = peer
        self.reader = reader
        self.writer = writer
        self.loop = asyncio.get_running_loop()
        self.decoder = FrameDecoder(server.max_frame_bytes)
        self.slots = asyncio.Semaphore(server.max_in_flight_per_connection)
        self.tasks: set[asyncio.Task[None]] = set()
        self.last_active = self.loop.time()
        """When a byte last arrived or an answer was last sent."""
        self.frame_started: float | None = None
        """When the first byte of the partial frame in the decoder arrived (None: none)."""
        self.out: list[bytes] = []
        """With ``batch_writes``: answers written together at the end of this loop turn."""

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
            log.info("%s: connection %s lost: %s", self.name, self.peer.address, exc)
        finally:
            for task in self.tasks:
                task.cancel()
            self._flush()
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
                    # Our own answers are pending (a long poll): the client is not stalling.
                    self.last_active = now
                    if self.frame_started is not None:
                        self.frame_started = now
                    continue
                if self.frame_started is not None and now >= frame_at:
                    self.server.frame_timeouts += 1
                    log.debug(  # the client's stall, counted by reason
                        "%s: closing %s: a frame of %d bytes so far did not complete "
                        "within %.1f s (the frame timeout)",
                        self.name,
                        self.peer.address,
                        self.decoder.buffered_bytes,
                        self.server.frame_timeout_s,
                    )
                else:
                    self.server.idle_closed += 1
                    log.debug(
                        "%s: closing %s: idle for %.1f s (the idle timeout)",
                        self.name,
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
                log.debug("%s: closing %s: %s", self.name, self.peer.address, exc)
                return False
            except Exception as exc:  # a bug in the decoder: this connection only
                self.server.protocol_errors += 1
                log.error(
                    "%s: closing %s: cannot decode a frame: %s: %s",
                    self.name,
                    self.peer.address,
                    type(exc).__name__,
                    exc,
                )
                return False
            if not isinstance(event, RemotingCommand):
                break
            decoded = True
            if event.is_response:
                log.debug(
                    "%s: dropping an unexpected response from %s", self.name, self.peer.address
                )
                continue
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
        response = await self.server.dispatch(request, self.peer)
        if request.is_oneway or response is None or self.writer.is_closing():
            return
        try:
            frame = encode(response)
        except ValueError as exc:
            log.error("%s: cannot encode the answer to code %d: %s", self.name, request.code, exc)
            frame = encode(
                request.response(
                    ResponseCode.SYSTEM_ERROR,
                    f"the answer to request code {request.code} is too large to send",
                )
            )
        if self.server.batch_writes:
            if not self.out:
                self.loop.call_soon(self._flush)
            self.out.append(frame)
        else:
            self.writer.write(frame)
        self.last_active = self.loop.time()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.drain()

    def _flush(self) -> None:
        """Write the answers of this loop turn in one go (one send for a batch of puts)."""
        frames, self.out = self.out, []
        if frames and not self.writer.is_closing():
            self.writer.write(frames[0] if len(frames) == 1 else b"".join(frames))
