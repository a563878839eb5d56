"""One pipelined RocketMQ remoting connection for the sinks: requests written in order, each
answer matched to its request by ``opaque`` (RocketMQ's ``NettyRemotingAbstract.responseTable``).

Frames go through the sans-I/O codec (``rmq.codec``); this is the thin asyncio
part. Same shape as ``broker/remoting/client.py`` and ``bench/rmq_client.py`` (which the
replicator may not import), but answers go to callbacks, not awaited futures, so a sink can
keep thousands of sends in flight without a task each. Every request gets exactly one callback:
the answer, or the error that ended it (connection lost, timeout, a broken stream).
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
from collections.abc import Callable
from typing import Any, cast

from replicator.sinks.errors import SinkUnavailable
from rmq.codec import FrameDecoder, ProtocolError, RemotingCommand, encode

Callback = Callable[[RemotingCommand | None, BaseException | None], None]

__all__ = ["Callback", "RemotingConnection"]


class RemotingConnection(asyncio.Protocol):
    def __init__(self, address: str) -> None:
        self.address = address
        self._decoder = FrameDecoder()
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, tuple[Callback, asyncio.TimerHandle | None]] = {}
        self._opaque = itertools.count(1)
        self.lost: BaseException | None = None

    @classmethod
    async def open(
        cls, address: str, timeout_s: float, tls: ssl.SSLContext | None = None
    ) -> RemotingConnection:
        """Connect to ``address``; over TLS with ``tls`` (a metaledger node's remoting port
        under ``--cert-file``), checking that its certificate names the host."""
        host, _, port = address.rpartition(":")
        host = host.strip("[]")
        loop = asyncio.get_running_loop()
        extra: dict[str, Any] = {"ssl": tls, "server_hostname": host} if tls else {}
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: cls(address), host, int(port), **extra), timeout_s
            )
        except (OSError, TimeoutError, ValueError) as exc:
            raise SinkUnavailable(f"cannot connect to {address}: {exc or 'timed out'}") from None
        return conn

    @property
    def usable(self) -> bool:
        return (
            self.lost is None and self._transport is not None and not self._transport.is_closing()
        )

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport is not an asyncio.Transport subclass: no isinstance check
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            answers = self._decoder.feed(data)
        except ProtocolError as exc:
            self._fail(SinkUnavailable(f"broken stream from {self.address}: {exc}"))
            self.close()
            return
        for answer in answers:
            if not answer.is_response:
                continue  # a request from the broker (NOTIFY_*): a producer ignores it
            entry = self._pending.pop(answer.opaque, None)
            if entry is not None:
                if entry[1] is not None:
                    entry[1].cancel()
                entry[0](answer, None)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(SinkUnavailable(f"connection to {self.address} lost: {exc or 'closed'}"))

    def _fail(self, exc: BaseException) -> None:
        if self.lost is None:
            self.lost = exc
        pending, self._pending = self._pending, {}
        for callback, timer in pending.values():
            if timer is not None:
                timer.cancel()
            callback(None, exc)

    def request(self, command: RemotingCommand, callback: Callback, timeout_s: float) -> None:
        """Write ``command`` now (frames leave in call order); ``callback`` gets the answer or
        the error later, never from inside this call."""
        if not self.usable:
            exc = self.lost or SinkUnavailable(f"connection to {self.address} closing")
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
            entry[0](None, SinkUnavailable(f"no answer from {self.address} in time"))

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
