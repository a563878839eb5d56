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
- :class:`FrontProcess` runs the binary and keeps it running: started with its
  ``listening`` line awaited, started again (1 s later) if it exits while the node runs,
  SIGTERM then SIGKILL on stop. Only the PID it started is ever signalled.
- :class:`GoFront` ties both to a node (:meth:`nameserver.server.Node.start`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import secrets
import shutil
import signal
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc

from nameserver.grpc.context import CallAborted, DirectContext, Metadata
from nameserver.grpc.front_wire import (
    MAX_BODY_BYTES,
    FrontProtocolError,
    FrontRequest,
    RequestDecoder,
    body_limit,
    encode_response,
)
from nameserver.grpc.status import bounded
from nameserver.startup import StartupError

__all__ = ["BINARY_ENV", "FrontCore", "FrontProcess", "GoFront", "find_binary"]

log = logging.getLogger(__name__)

#: The front binary's path, if set (else the repository's build, else PATH).
BINARY_ENV = "METALEDGER_FRONT"
BINARY_NAME = "metaledger-front"
BUILD_SCRIPT = "scripts/build_front.sh"
#: How long the front may take to print ``listening``.
START_TIMEOUT_S = 10.0
#: Wait before starting a front that exited again.
RESTART_BACKOFF_S = 1.0
#: After SIGTERM, how long the front may take to finish before SIGKILL.
STOP_GRACE_S = 2.0
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


def find_binary() -> str:
    """The front binary: ``$METALEDGER_FRONT``, else this repository's
    ``front/bin/metaledger-front``, else ``metaledger-front`` on PATH."""
    looked = []
    given = os.environ.get(BINARY_ENV)
    if given:
        if os.access(given, os.X_OK) and os.path.isfile(given):
            return given
        looked.append(f"${BINARY_ENV}={given}")
    built = Path(__file__).resolve().parents[2] / "front" / "bin" / BINARY_NAME
    if os.access(built, os.X_OK):
        return str(built)
    looked.append(str(built))
    on_path = shutil.which(BINARY_NAME)
    if on_path:
        return on_path
    looked.append(f"{BINARY_NAME} on PATH")
    raise StartupError(
        f"--grpc-front go: no front binary ({', '.join(looked)}); build it with {BUILD_SCRIPT}"
    )


class FrontProcess:
    """The front binary run with ``argv`` and kept running until :meth:`stop`."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.argv = list(argv)
        self.proc: asyncio.subprocess.Process | None = None
        self.address = ""  # what it said it listens on
        self.starts = 0
        self._stderr: collections.deque[str] = collections.deque(maxlen=20)
        self._readers: set[asyncio.Task[None]] = set()
        self._supervisor: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def stderr_tail(self) -> str:
        return " | ".join(self._stderr) or "(nothing on stderr)"

    async def start(self) -> None:
        """Start the front and wait for its ``listening`` line; supervise it from then on.
        StartupError (one line) if it cannot start."""
        await self._spawn()
        self._supervisor = asyncio.get_running_loop().create_task(
            self._supervise(), name="gRPC front supervisor"
        )

    async def _spawn(self) -> None:
        self._stderr.clear()
        proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,  # kept open: the front exits on EOF
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        self.proc = proc
        self.starts += 1
        assert proc.stdout is not None and proc.stderr is not None
        self._read(self._keep_stderr(proc.stderr))
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), START_TIMEOUT_S)
        except TimeoutError:
            await self._end(proc)
            raise StartupError(
                f"--grpc-front go: {self.argv[0]} did not say it listens within "
                f"{START_TIMEOUT_S:g} s: {self.stderr_tail()}"
            ) from None
        text = line.decode(errors="replace").strip()
        if not text.startswith("listening "):
            await self._end(proc)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.gather(*self._readers), 1.0)
            why = f"exited {proc.returncode}" if not text else f"said {text!r}"
            raise StartupError(f"--grpc-front go: {self.argv[0]} {why}: {self.stderr_tail()}")
        self.address = text.removeprefix("listening ")
        self._read(self._drain(proc.stdout))
        log.info("gRPC front pid %d listening on %s", proc.pid, self.address)

    def _read(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._readers.add(task)
        task.add_done_callback(self._readers.discard)

    async def _keep_stderr(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            text = line.decode(errors="replace").rstrip()
            self._stderr.append(text)
            log.warning("gRPC front: %s", text)

    @staticmethod
    async def _drain(stream: asyncio.StreamReader) -> None:
        while await stream.read(4096):
            pass

    async def _supervise(self) -> None:
        while not self._stopping:
            proc = self.proc
            assert proc is not None
            code = await proc.wait()
            if self._stopping:
                return
            if proc.stdin is not None:
                proc.stdin.close()
            await asyncio.sleep(0.1)  # the last of its stderr
            log.error(
                "gRPC front pid %d exited (%s); starting it again in %g s; its stderr: %s",
                proc.pid,
                code,
                RESTART_BACKOFF_S,
                self.stderr_tail(),
            )
            while not self._stopping:
                await asyncio.sleep(RESTART_BACKOFF_S)
                try:
                    await self._spawn()
                    break
                except (StartupError, OSError) as exc:
                    log.error("gRPC front: %s; trying again in %g s", exc, RESTART_BACKOFF_S)

    async def _end(self, proc: asyncio.subprocess.Process) -> None:
        """SIGTERM ``proc`` (the one this started), SIGKILL after the grace period."""
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), STOP_GRACE_S)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        if proc.stdin is not None:
            proc.stdin.close()

    async def stop(self) -> None:
        self._stopping = True
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
        if self.proc is not None:
            await self._end(self.proc)
        for task in list(self._readers):
            task.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)


class GoFront:
    """``--grpc-front go`` for one node: the grpc.aio server on a loopback port, the core,
    and the front on ``listen`` (:meth:`find_binary` first, before anything starts)."""

    def __init__(self, listen: str, methods: Sequence[str], max_message_bytes: int) -> None:
        self.binary = find_binary()
        self.listen = listen
        self.methods = tuple(methods)
        self.max_message_bytes = max_message_bytes
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
            ]
        )
        await self.process.start()

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
