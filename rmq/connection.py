"""One pipelined RocketMQ remoting client connection: requests written in call order, each
answer matched to its request by ``opaque`` (RocketMQ's ``NettyRemotingAbstract.responseTable``),
oneway requests, TLS, a timeout per request. The thin asyncio part beside the sans-I/O codec,
used by the broker's ``send``/``consume`` commands, the replicators' sinks and cluster client,
the tests and the benchmarks.

Two ways to ask: :meth:`RemotingConnection.send` hands the answer to a callback (a sink keeps
thousands of sends in flight without a task each); :meth:`~RemotingConnection.call` (and
:meth:`~RemotingConnection.request`, which builds the command) awaits it. Every request gets
exactly one outcome: its answer, or the error that ended it. Requests the peer sends us (a
broker's NOTIFY_CONSUMER_IDS_CHANGED) are kept in ``notifications`` when asked
(``keep_requests``), else dropped. :func:`blocking_call` is one request on a plain socket, for
callers on threads without a loop.

Errors (rmq's own; callers map them to their package's errors)::

    ConnectionFailure         base; an OSError, as socket errors are
    ├── ConnectFailed         cannot connect: refused, unreachable, TLS handshake, timed out
    │                         (also a ConnectionError)
    ├── ConnectionLost        closed by either side, reset, or a broken stream from the peer
    │                         (also a ConnectionError)
    └── AnswerTimeout         no answer in time (the connection stays); also a TimeoutError
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import ssl
import struct
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

from rmq.codec import RPC_ONEWAY, FrameDecoder, ProtocolError, RemotingCommand, encode

__all__ = [
    "AnswerTimeout",
    "Callback",
    "ConnectFailed",
    "ConnectionFailure",
    "ConnectionLost",
    "RemotingConnection",
    "blocking_call",
]

#: ``struct linger`` {on, 0 s}: close() resets the connection and drops the send queue
_LINGER_RESET = struct.pack("ii", 1, 0)

Callback = Callable[[RemotingCommand | None, BaseException | None], None]
"""``(answer, None)`` or ``(None, error)``."""


class ConnectionFailure(OSError):
    pass


class ConnectFailed(ConnectionFailure, ConnectionError):
    pass


class ConnectionLost(ConnectionFailure, ConnectionError):
    pass


class AnswerTimeout(ConnectionFailure, TimeoutError):
    pass


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) as (host, port)."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


class RemotingConnection(asyncio.Protocol):
    def __init__(self, address: str, *, keep_requests: bool = False) -> None:
        self.address = address
        self._decoder = FrameDecoder()
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, tuple[Callback, asyncio.TimerHandle | None]] = {}
        self._opaque = itertools.count(1)
        self._closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.lost: ConnectionFailure | None = None
        self.notifications: list[RemotingCommand] | None = [] if keep_requests else None
        """Requests from the peer, in arrival order (with ``keep_requests``)."""

    @classmethod
    async def open(
        cls,
        address: str,
        timeout_s: float = 5.0,
        tls: ssl.SSLContext | None = None,
        *,
        keep_requests: bool = False,
    ) -> RemotingConnection:
        """Connect to ``address`` (``host:port``); over TLS with ``tls`` (a metaledger node's
        remoting port under ``--cert-file``), checking that its certificate names the host.
        :class:`ConnectFailed` when it cannot."""
        try:
            host, port = split_address(address)
        except ValueError:
            raise ConnectFailed(f"cannot connect to {address}: not host:port") from None
        loop = asyncio.get_running_loop()
        extra: dict[str, Any] = {"ssl": tls, "server_hostname": host} if tls else {}
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(
                    lambda: cls(address, keep_requests=keep_requests), host, port, **extra
                ),
                timeout_s,
            )
        except (OSError, TimeoutError, ValueError) as exc:
            raise ConnectFailed(f"cannot connect to {address}: {exc or 'timed out'}") from None
        return conn

    @classmethod
    async def connect(
        cls, host: str, port: int, timeout_s: float = 5.0, tls: ssl.SSLContext | None = None
    ) -> RemotingConnection:
        """:meth:`open` by host and port, keeping the peer's requests in ``notifications``."""
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return await cls.open(address, timeout_s, tls, keep_requests=True)

    @property
    def usable(self) -> bool:
        return (
            self.lost is None and self._transport is not None and not self._transport.is_closing()
        )

    @property
    def closed(self) -> bool:
        return self.lost is not None

    # --- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport is not an asyncio.Transport subclass: no isinstance check
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            commands = self._decoder.feed(data)
        except ProtocolError as exc:
            self._fail(ConnectionLost(f"broken stream from {self.address}: {exc}"))
            self.close()
            return
        for command in commands:
            if not command.is_response:
                if self.notifications is not None:
                    self.notifications.append(command)
                continue
            entry = self._pending.pop(command.opaque, None)
            if entry is not None:
                if entry[1] is not None:
                    entry[1].cancel()
                entry[0](command, None)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(ConnectionLost(f"connection to {self.address} lost: {exc or 'closed'}"))
        if not self._closed.done():
            self._closed.set_result(None)

    def _fail(self, exc: ConnectionFailure) -> None:
        if self.lost is None:
            self.lost = exc
        pending, self._pending = self._pending, {}
        for callback, timer in pending.values():
            if timer is not None:
                timer.cancel()
            callback(None, exc)

    # --- requests ----------------------------------------------------------------------

    def send(self, command: RemotingCommand, callback: Callback, timeout_s: float) -> None:
        """Write ``command`` now under a fresh opaque (frames leave in call order);
        ``callback`` gets the answer or the error later, never from inside this call."""
        if not self.usable:
            exc = self.lost or ConnectionLost(f"connection to {self.address} closing")
            asyncio.get_running_loop().call_soon(callback, None, exc)
            return
        assert self._transport is not None
        opaque = next(self._opaque)
        timer = asyncio.get_running_loop().call_later(timeout_s, self._timeout, opaque)
        self._pending[opaque] = (callback, timer)
        self._transport.write(encode(command.replace(opaque=opaque)))

    def _timeout(self, opaque: int) -> None:
        entry = self._pending.pop(opaque, None)
        if entry is not None:
            entry[0](None, AnswerTimeout(f"no answer from {self.address} in time"))

    async def call(self, command: RemotingCommand, timeout_s: float = 30.0) -> RemotingCommand:
        """Send ``command`` and await its answer (a :class:`ConnectionFailure` when none)."""
        future: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()

        def done(answer: RemotingCommand | None, exc: BaseException | None) -> None:
            if future.done():  # the caller was cancelled
                return
            if answer is not None:
                future.set_result(answer)
            else:
                future.set_exception(exc or ConnectionLost(f"no answer from {self.address}"))

        self.send(command, done, timeout_s)
        return await future

    async def request(
        self,
        code: int,
        ext: Mapping[str, object] | None = None,
        body: bytes = b"",
        timeout_s: float = 30.0,
    ) -> RemotingCommand:
        """:meth:`call` with ``RemotingCommand.request(code, ext, body)``."""
        return await self.call(RemotingCommand.request(code, ext, body), timeout_s)

    def send_oneway(self, command: RemotingCommand) -> None:
        """Write ``command`` as a oneway request (never answered)."""
        if not self.usable:
            raise self.lost or ConnectionLost(f"connection to {self.address} closing")
        assert self._transport is not None
        oneway = command.replace(opaque=next(self._opaque), flag=command.flag | RPC_ONEWAY)
        self._transport.write(encode(oneway))

    async def oneway(
        self, code: int, ext: Mapping[str, object] | None = None, body: bytes = b""
    ) -> None:
        """:meth:`send_oneway` with ``RemotingCommand.request(code, ext, body)``."""
        self.send_oneway(RemotingCommand.request(code, ext, body))

    async def send_raw(self, data: bytes) -> None:
        """Write bytes as they are (tests: garbage, half frames)."""
        if not self.usable:
            raise self.lost or ConnectionLost(f"connection to {self.address} closing")
        assert self._transport is not None
        self._transport.write(data)

    def close(self) -> asyncio.Future[None]:
        """Close the connection; outstanding requests fail with :class:`ConnectionLost`.
        The returned future is done once it is closed (await it, or not)."""
        if self._transport is not None:
            self._transport.close()
        elif not self._closed.done():
            self._closed.set_result(None)
        return self._closed

    def abort(self) -> asyncio.Future[None]:
        """Close at once and drop what is not delivered yet: the transport's buffer and the
        kernel's send queue (SO_LINGER 0: a reset, no FIN after the data). A plain close
        leaves the kernel retransmitting what the peer has not acknowledged, so after a
        partition heals the peer would still get requests written before it (a replicator
        that lost its lease meanwhile must send nothing more). Outstanding requests fail
        with :class:`ConnectionLost`."""
        if self._transport is None:
            return self.close()
        sock = self._transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
        self._transport.abort()
        return self._closed


def blocking_call(
    address: str, request: RemotingCommand, timeout_s: float, tls: ssl.SSLContext | None = None
) -> RemotingCommand:
    """One request on a fresh blocking socket (TLS with ``tls``), its answer. OSError
    (TimeoutError and ConnectionError included) when none comes in time or the peer closes,
    ProtocolError when the stream breaks. Safe from any thread: no shared state."""
    host, port = split_address(address)
    deadline = time.monotonic() + timeout_s
    decoder = FrameDecoder()
    sock = socket.create_connection((host, port), timeout=timeout_s)
    if tls is not None:
        try:
            sock = tls.wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise
    with sock:
        sock.sendall(encode(request.replace(opaque=1)))
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no answer from {address} in {timeout_s} s")
            sock.settimeout(remaining)
            data = sock.recv(65536)
            if not data:
                raise ConnectionError(f"{address} closed the connection before answering")
            for answer in decoder.feed(data):
                if answer.is_response and answer.opaque == 1:
                    return answer
