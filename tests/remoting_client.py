"""A small RocketMQ remoting client for tests and benchmarks: what a broker or a client does
on the wire, built on our sans-I/O codec (requests matched to replies by ``opaque``)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import ssl
from collections.abc import Mapping

from nameserver.remoting.headers import (
    BrokerIdentityHeader,
    DataVersion,
    RegisterBrokerBody,
    RegisterBrokerHeader,
    TopicConfig,
    register_broker_request,
)
from rmq.codec import FrameDecoder, RemotingCommand, encode


class AsyncRemotingClient:
    """One connection; any number of concurrent calls."""

    def __init__(self, address: str, ssl_context: ssl.SSLContext | None = None) -> None:
        self.address = address
        self.ssl_context = ssl_context  # TLS (a server started with --cert-file)
        self._opaque = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None

    async def connect(self) -> AsyncRemotingClient:
        host, _, port = self.address.rpartition(":")
        self._reader, self._writer = await asyncio.open_connection(
            host, int(port), ssl=self.ssl_context
        )
        self._task = asyncio.get_running_loop().create_task(self._read())
        return self

    async def _read(self) -> None:
        assert self._reader is not None
        decoder = FrameDecoder()
        try:
            while True:
                data = await self._reader.read(256 * 1024)
                if not data:
                    break
                for reply in decoder.feed(data):
                    fut = self._waiting.pop(reply.opaque, None)
                    if fut is not None and not fut.done():
                        fut.set_result(reply)
        finally:
            for fut in self._waiting.values():
                if not fut.done():
                    fut.set_exception(ConnectionError(f"{self.address} closed the connection"))
            self._waiting.clear()

    async def call(self, request: RemotingCommand, timeout: float = 10.0) -> RemotingCommand:
        assert self._writer is not None
        opaque = next(self._opaque)
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._waiting[opaque] = fut
        self._writer.write(encode(request.replace(opaque=opaque)))
        try:
            return await asyncio.wait_for(fut, timeout)
        finally:
            self._waiting.pop(opaque, None)

    async def oneway(self, request: RemotingCommand) -> None:
        assert self._writer is not None
        self._writer.write(encode(request.replace(opaque=next(self._opaque), flag=2)))
        await self._writer.drain()

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, ConnectionError):
                pass


def call(
    address: str,
    request: RemotingCommand,
    timeout: float = 10.0,
    ssl_context: ssl.SSLContext | None = None,
) -> RemotingCommand:
    """One blocking request on a fresh connection (TLS with ``ssl_context``)."""
    host, _, port = address.rpartition(":")
    with contextlib.ExitStack() as stack:
        sock = stack.enter_context(socket.create_connection((host, int(port)), timeout=timeout))
        if ssl_context is not None:
            sock = stack.enter_context(ssl_context.wrap_socket(sock, server_hostname=host))
        sock.sendall(encode(request.replace(opaque=1)))
        decoder = FrameDecoder()
        while True:
            data = sock.recv(256 * 1024)
            if not data:
                raise ConnectionError(f"{address} closed the connection")
            replies = decoder.feed(data)
            if replies:
                return replies[0]


def register_request(
    broker_name: str,
    addr: str,
    topics: list[str] | tuple[str, ...] = (),
    *,
    broker_id: int = 0,
    cluster: str = "DefaultCluster",
    counter: int = 1,
    state_version: int = 0,
    heartbeat_timeout_ms: int | None = None,
    queues: int = 4,
    extra: Mapping[str, str] | None = None,
) -> RemotingCommand:
    """A REGISTER_BROKER frame exactly as a broker sends one (our codec and headers)."""
    header = RegisterBrokerHeader(
        broker_name=broker_name,
        broker_addr=addr,
        cluster_name=cluster,
        ha_server_addr=addr.rsplit(":", 1)[0] + ":10912",
        broker_id=broker_id,
        heartbeat_timeout_millis=heartbeat_timeout_ms,
        enable_acting_master=False,
    )
    body = RegisterBrokerBody(
        topics=tuple(TopicConfig(t, queues, queues) for t in topics),
        data_version=DataVersion(counter=counter, state_version=state_version, timestamp=1),
    )
    request = register_broker_request(header, body)
    if extra:
        request = request.replace(ext_fields={**request.ext_fields, **extra})
    return request


def unregister_request(
    broker_name: str, addr: str, broker_id: int = 0, cluster: str = "DefaultCluster"
) -> RemotingCommand:
    return BrokerIdentityHeader(
        broker_name=broker_name, broker_addr=addr, cluster_name=cluster, broker_id=broker_id
    ).request()
