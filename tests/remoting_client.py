"""A small RocketMQ remoting client for tests and benchmarks: what a broker or a client does
on the wire, built on our sans-I/O codec (requests matched to replies by ``opaque``)."""

from __future__ import annotations

import ssl
from collections.abc import Mapping

from nameserver.remoting.headers import (
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    register_broker_request,
)
from rmq.codec import RemotingCommand
from rmq.connection import RemotingConnection, blocking_call
from rmq.headers import BrokerIdentityHeader, RegisterBrokerHeader


class AsyncRemotingClient:
    """One connection (``rmq.connection``); any number of concurrent calls."""

    def __init__(self, address: str, ssl_context: ssl.SSLContext | None = None) -> None:
        self.address = address
        self.ssl_context = ssl_context  # TLS (a server started with --cert-file)
        self._conn: RemotingConnection | None = None

    async def connect(self) -> AsyncRemotingClient:
        self._conn = await RemotingConnection.open(self.address, 10.0, self.ssl_context)
        return self

    async def call(self, request: RemotingCommand, timeout: float = 10.0) -> RemotingCommand:
        assert self._conn is not None
        return await self._conn.call(request, timeout)

    async def oneway(self, request: RemotingCommand) -> None:
        assert self._conn is not None
        self._conn.send_oneway(request)

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()


def call(
    address: str,
    request: RemotingCommand,
    timeout: float = 10.0,
    ssl_context: ssl.SSLContext | None = None,
) -> RemotingCommand:
    """One blocking request on a fresh connection (TLS with ``ssl_context``)."""
    return blocking_call(address, request, timeout, ssl_context)


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
