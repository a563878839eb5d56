"""``--grpc-front go``: the node's side of the Go gRPC front.

A put at 64 clients spent about half of the leader's CPU in grpcio's Python server
machinery. With ``metaledger serve --grpc-front go`` a compiled front (``front/``, Go,
built by ``scripts/build_front.sh``) listens on ``--listen-client`` instead: it terminates
HTTP/2, hands each call of a hot unary method (:data:`nameserver.grpc.accept.HOT_METHODS`,
the ``--fast`` list) to this process as one frame over an abstract Unix socket
(:mod:`nameserver.grpc.front_wire`), and proxies every other method, streams included, to
the node's own grpc.aio server, bound to an abstract Unix socket (the "backend").

- :class:`FrontCore` is the endpoint of those frames: for each request the method table's
  guarded handler, its deserializer (so a too-large or undecodable request is answered as
  over gRPC), a :class:`~nameserver.grpc.context.DirectContext`, the handler as a task, and
  the response framed; a handler's abort is its status, any other exception INTERNAL
  (logged, never the server's end). Answers are written once per event-loop turn.
- :class:`~nameserver.grpc.front_process.FrontProcess` runs the binary and keeps it running.
- :class:`GoFront` ties both to a node (:meth:`nameserver.server.Node.start`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from nameserver.grpc.context import CallAborted, DirectContext, Metadata
from nameserver.grpc.front_process import FrontProcess, find_binary
from nameserver.grpc.front_wire import (
    MAX_BODY_BYTES,
    FrontProtocolError,
    FrontRequest,
    RequestDecoder,
    body_limit,
    encode_response,
)
from nameserver.grpc.status import bounded
from nameserver.tls import TlsFiles

__all__ = ["FrontCore", "GoFront"]

log = logging.getLogger(__name__)

#: How often calls past their deadline are looked for (and cancelled, as grpc.aio cancels
#: them). The front answers DEADLINE_EXCEEDED on time itself; this only ends the work. One
#: timer per connection, not one per call: a timer per call cost a third of the core's CPU.
DEADLINE_SWEEP_S = 0.05

_DEADLINE_EXCEEDED = grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
_INTERNAL = grpc.StatusCode.INTERNAL.value[0]
_UNKNOWN = grpc.StatusCode.UNKNOWN.value[0]

#: Looks up the guarded handler of a gRPC method path (the method table's).
Lookup = Callable[[str], "grpc.RpcMethodHandler | None"]


class _FrontContext(DirectContext):
    """A core call's context; ``answered`` once the deadline sweep answered for it."""

    __slots__ = ("answered",)

    def __init__(self, metadata: Metadata, peer: str, deadline: float | None) -> None:
        super().__init__(metadata, peer, deadline)
        self.answered = False

    @property
    def deadline(self) -> float:
        return self._deadline or 0.0


class _Connection(asyncio.Protocol):
    """One connection from the front: its requests, their tasks, their answers."""

    def __init__(self, core: FrontCore) -> None:
        self._core = core
        self._handlers = core.handlers
        self._decoder = RequestDecoder(len(core.handlers), core.max_body_bytes)
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._calls: dict[int, asyncio.Task[None]] = {}
        self._deadlines: dict[int, _FrontContext] = {}  # the calls that have a deadline
        self._sweep: asyncio.TimerHandle | None = None
        self._out: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._core.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._core.connections.discard(self)
        self._transport = None
        for task in self._calls.values():
            task.cancel()  # nobody is left to answer
        self._calls.clear()
        self._deadlines.clear()
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None

    def data_received(self, data: bytes) -> None:
        decoder = self._decoder
        decoder.receive_data(data)
        try:
            while (request := decoder.next_request()) is not None:
                self._start(request)
        except FrontProtocolError as exc:
            log.error("gRPC front core: a malformed frame (%s): closing the connection", exc)
            self.abort()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def _start(self, request: FrontRequest) -> None:
        call_id = request.call_id
        self._core.calls += 1
        if call_id in self._calls:
            raise FrontProtocolError(f"request {call_id}: that call is already in flight")
        handler = self._handlers[request.method]
        deadline = time.monotonic() + request.timeout_ms / 1000 if request.timeout_ms else None
        context = _FrontContext(request.metadata, request.peer, deadline)
        if deadline is not None:
            self._deadlines[call_id] = context
            if self._sweep is None:
                self._sweep = self._loop.call_later(DEADLINE_SWEEP_S, self._expire)
        message = handler.request_deserializer(request.payload)  # guarded: never raises
        self._calls[call_id] = self._loop.create_task(
            self._call(handler, message, context, call_id, request.method)
        )

    def _expire(self) -> None:
        """Answer DEADLINE_EXCEEDED for the calls past their deadline and cancel them (as
        grpc.aio does); look again later while any call has a deadline."""
        self._sweep = None
        now = time.monotonic()
        for call_id, context in list(self._deadlines.items()):
            if context.deadline <= now:
                del self._deadlines[call_id]
                context.answered = True  # the call id is the front's to use again
                self._calls.pop(call_id).cancel()
                self._send(encode_response(call_id, _DEADLINE_EXCEEDED, "Deadline Exceeded"))
        if self._deadlines:
            self._sweep = self._loop.call_later(DEADLINE_SWEEP_S, self._expire)

    async def _call(
        self,
        handler: grpc.RpcMethodHandler,
        message: Any,
        context: _FrontContext,
        call_id: int,
        method: int,
    ) -> None:
        try:
            result = await handler.unary_unary(message, context)
            payload = result if type(result) is bytes else handler.response_serializer(result)
            frame = encode_response(call_id, 0, "", context.trailing_metadata, payload)
        except CallAborted as exc:
            frame = encode_response(
                call_id, exc.code.value[0], exc.details, context.trailing_metadata
            )
        except grpc.aio.AbortError as exc:  # an abort not made by our context: say so
            frame = encode_response(call_id, _UNKNOWN, bounded(f"metaledger: aborted: {exc}"))
        except asyncio.CancelledError:
            if context.answered:  # at its deadline (answered then)
                return
            raise  # the connection is gone
        except Exception as exc:  # a bug: answered, logged, never the server's end
            log.exception("gRPC front core: %s failed", self._core.methods[method])
            why = f"metaledger: internal error: {type(exc).__name__}: {exc}"
            frame = encode_response(call_id, _INTERNAL, bounded(why))
        if context.answered:  # (a handler that would not be cancelled) too late
            return
        self._calls.pop(call_id, None)
        if context._deadline is not None:
            self._deadlines.pop(call_id, None)
        self._send(frame)

    def _send(self, frame: bytes) -> None:
        out = self._out
        out.append(frame)
        if len(out) == 1:  # the first answer of this turn: flush once the turn is over
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        out, self._out = self._out, []
        if self._transport is not None and out:
            self._transport.write(out[0] if len(out) == 1 else b"".join(out))


class FrontCore:
    """The core endpoint: an asyncio server on an abstract Unix socket, answering the
    front's requests for ``methods`` (its ``--fast`` list, in order) with the handlers
    ``lookup`` finds (looked up once, here)."""

    def __init__(
        self, lookup: Lookup, methods: Sequence[str], max_body_bytes: int = MAX_BODY_BYTES
    ) -> None:
        handlers = []
        for path in methods:
            handler = lookup(path)
            if handler is None:
                raise ValueError(f"the gRPC front's method {path} has no handler")
            if handler.request_streaming or handler.response_streaming:
                raise ValueError(f"the gRPC front's method {path} streams; only unary ones")
            handlers.append(handler)
        if len(handlers) > 0xFF:
            raise ValueError(f"{len(handlers)} methods: a frame's method index is one byte")
        self.methods = tuple(methods)
        self.handlers: tuple[grpc.RpcMethodHandler, ...] = tuple(handlers)
        self.max_body_bytes = max_body_bytes
        #: the abstract socket's name (it starts with NUL)
        self.name = f"\0metaledger-front-{os.getpid()}-{secrets.token_hex(8)}"
        self.connections: set[_Connection] = set()
        self.calls = 0  # requests taken (a metric)
        self._server: asyncio.AbstractServer | None = None

    @property
    def address(self) -> str:
        """The socket's name as Go writes an abstract one (``@name``)."""
        return "@" + self.name[1:]

    def connection(self) -> _Connection:
        """A protocol for one connection (tests hand it a socketpair's end)."""
        return _Connection(self)

    async def start(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(self.name)
            self._server = await asyncio.get_running_loop().create_unix_server(
                self.connection, sock=sock
            )
        except BaseException:
            sock.close()
            raise

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.abort()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None


class GoFront:
    """``--grpc-front go`` for one node: the grpc.aio server on an abstract socket, the
    core, and the front on ``listen`` (:meth:`find_binary` first, before anything starts).
    ``tls``: the client port's files (etcd's flags), which the front serves TLS with;
    ``identity_key`` (under ``--client-cert-auth``): the key the front passes beside a
    client certificate's common name (:data:`nameserver.auth.check.FRONT_CN_METADATA`)."""

    def __init__(
        self,
        listen: str,
        methods: Sequence[str],
        max_message_bytes: int,
        tls: TlsFiles | None = None,
        identity_key: str = "",
    ) -> None:
        self.binary = find_binary()
        self.listen = listen
        self.methods = tuple(methods)
        self.max_message_bytes = max_message_bytes
        self.tls = tls if tls is not None else TlsFiles()
        self.identity_key = identity_key
        self.backend = ""
        self.core: FrontCore | None = None
        self.process: FrontProcess | None = None

    def bind_backend(self, server: grpc.aio.Server) -> int:
        """Bind ``server`` to an abstract Unix socket, what the front proxies to (``@name``
        for the front); 0 if it could not bind. Not a loopback port: an ephemeral port could
        be the client port itself, which the front binds only after this (a node once failed
        to start that way)."""
        name = f"metaledger-backend-{os.getpid()}-{secrets.token_hex(8)}"
        bound: int = server.add_insecure_port(f"unix-abstract:{name}")
        self.backend = f"@{name}"
        return bound

    async def start(self, lookup: Lookup) -> None:
        """Start the core, then the front (after the backend server started)."""
        self.core = FrontCore(lookup, self.methods, body_limit(self.max_message_bytes))
        await self.core.start()
        self.process = FrontProcess(
            [
                self.binary,
                "--listen",
                self.listen,
                "--core",
                self.core.address,
                "--backend",
                self.backend,
                "--fast",
                ",".join(self.methods),
                "--max-msg-bytes",
                str(self.max_message_bytes),
                *self._tls_args(),
            ],
            f"{self.identity_key}\n".encode() if self.identity_key else b"",
        )
        await self.process.start()

    def _tls_args(self) -> list[str]:
        tls = self.tls
        if not tls.enabled:
            return []
        args = ["--cert-file", tls.cert_file, "--key-file", tls.key_file]
        if tls.trusted_ca_file:
            args += ["--trusted-ca-file", tls.trusted_ca_file]
        if tls.client_cert_auth:
            args.append("--client-cert-auth")
        if self.identity_key:
            args.append("--identity-key-stdin")
        return args

    @property
    def calls(self) -> int:
        """Calls the front handed to the core (the metric)."""
        return self.core.calls if self.core is not None else 0

    @property
    def starts(self) -> int:
        """Times the front was started (more than once: it exited and was started again)."""
        return self.process.starts if self.process is not None else 0

    async def stop(self) -> None:
        if self.process is not None:
            await self.process.stop()
        if self.core is not None:
            await self.core.close()
