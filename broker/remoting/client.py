"""A small asyncio remoting client: one connection, requests matched to answers by ``opaque``.

For the ``send``/``consume`` commands and tests. Requests the broker sends us
(NOTIFY_CONSUMER_IDS_CHANGED) are collected in ``notifications``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Mapping

from rmq.codec import FrameDecoder, ProtocolError, RemotingCommand, encode


class RemotingClientError(Exception):
    pass


class RemotingClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self._opaque = itertools.count(1)
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self.notifications: list[RemotingCommand] = []
        self._task = asyncio.create_task(self._read())

    @classmethod
    async def connect(cls, host: str, port: int, timeout_s: float = 5.0) -> RemotingClient:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, limit=1 << 20), timeout_s
        )
        return cls(reader, writer)

    async def _read(self) -> None:
        decoder = FrameDecoder()
        error: Exception = RemotingClientError("connection closed by the broker")
        try:
            while True:
                data = await self.reader.read(1 << 18)
                if not data:
                    break
                for cmd in decoder.feed(data):
                    if cmd.is_response:
                        fut = self._pending.pop(cmd.opaque, None)
                        if fut is not None and not fut.done():
                            fut.set_result(cmd)
                    else:
                        self.notifications.append(cmd)
        except (ProtocolError, OSError) as exc:
            error = RemotingClientError(f"connection broken: {exc}")
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(error)
        self._pending.clear()

    @property
    def closed(self) -> bool:
        return self._task.done()

    async def request(
        self,
        code: int,
        ext: Mapping[str, object] | None = None,
        body: bytes = b"",
        timeout_s: float = 30.0,
    ) -> RemotingCommand:
        opaque = next(self._opaque)
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        if self.closed:
            raise RemotingClientError("connection closed by the broker")
        self._pending[opaque] = fut
        self.writer.write(encode(RemotingCommand.request(code, ext, body, opaque=opaque)))
        try:
            return await asyncio.wait_for(fut, timeout_s)
        finally:
            self._pending.pop(opaque, None)

    async def oneway(
        self, code: int, ext: Mapping[str, object] | None = None, body: bytes = b""
    ) -> None:
        self.writer.write(
            encode(RemotingCommand.request(code, ext, body, opaque=next(self._opaque), oneway=True))
        )
        await self.writer.drain()

    async def send_raw(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
