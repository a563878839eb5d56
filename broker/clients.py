"""The clients connected to a replica, by protocol, language and version: what the metrics'
``metaledger_broker_clients`` gauge counts (docs/broker.md, "Metrics").

- **remoting**: one per open connection that sent a request, with the ``language`` and
  ``version`` header fields of its latest request (RocketMQ's ``BrokerMetricsManager``
  ``initConnectionMetrics`` labels its producer and consumer connections the same way: the
  language's name and ``MQVersion.getVersionDesc`` lowercased); forgotten when the connection
  closes (idle ones are closed after 120 s by :mod:`rmq.server`).
- **grpc**: one per client id that sent its Telemetry settings, with the settings'
  ``user_agent`` (language, version); forgotten on NotifyClientTermination or when it sent
  neither settings nor a heartbeat for ``timeout_s`` (RocketMQ's ``channelExpiredTimeout``,
  120 s; the 5.x clients heartbeat every 10 s). The end of a Telemetry stream is not the end
  of its client: a client may half-close it, or reopen it, and still send (as RocketMQ's
  proxy, which keeps a client's settings until it terminates or expires).
  :class:`GrpcClients` tells the gRPC service which client ids it forgot, so the service's
  own table of clients shrinks too.

Both tables are updated on the event loop; a scrape (from the metrics thread) copies their
values, which a concurrent update cannot break (dict ``values()`` copied at once).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from protos.apache.rocketmq.v2 import definition_pb2 as v2
from rmq.codec import RemotingCommand
from rmq.codes import version_name
from rmq.server import Peer

__all__ = [
    "CLIENT_TIMEOUT_S",
    "ClientKey",
    "ConnectedClients",
    "GrpcClients",
    "GrpcConsumer",
    "RemotingClients",
]

#: a gRPC client silent this long is gone (RocketMQ's ``channelExpiredTimeout``)
CLIENT_TIMEOUT_S = 120.0
REMOTING, GRPC = "remoting", "grpc"


@dataclass(frozen=True)
class ClientKey:
    """The labels of one ``metaledger_broker_clients`` series."""

    protocol: str
    language: str
    version: str


class RemotingClients:
    """Open remoting connections by the language and version their requests carry."""

    def __init__(self) -> None:
        self._by_connection: dict[int, ClientKey] = {}
        self._known: dict[tuple[str, int], ClientKey] = {}  # one key per header pair

    def request(self, request: RemotingCommand, peer: Peer) -> None:
        """:class:`rmq.server.RemotingServer`'s ``on_request`` hook: runs for every request,
        so a dict lookup when nothing changed."""
        key = self._known.get((request.language, request.version))
        if key is None:
            key = ClientKey(
                REMOTING, request.language.lower(), version_name(request.version).lower()
            )
            if len(self._known) < 1024:  # a client inventing versions cannot grow it for ever
                self._known[(request.language, request.version)] = key
        self._by_connection[peer.connection_id] = key

    def closed(self, peer: Peer) -> None:
        self._by_connection.pop(peer.connection_id, None)

    def keys(self) -> list[ClientKey]:
        return list(self._by_connection.values())


@dataclass
class _Agent:
    key: ClientKey
    seen: float
    #: a consumer's group and address, from its heartbeats (GET_CONSUMER_CONNECTION_LIST)
    group: str = ""
    address: str = ""


@dataclass(frozen=True)
class GrpcConsumer:
    client_id: str
    address: str
    language: str  # v2.Language's name in RocketMQ's LanguageCode spelling (PYTHON, NODE_JS)


def language_code(language: int) -> str:
    """A ``v2.Language`` in RocketMQ's ``LanguageCode`` spelling (PYTHON, NODE_JS, DOTNET), as
    the connection lists name a gRPC client's language."""
    try:
        return v2.Language.Name(language).replace("DOT_NET", "DOTNET")
    except ValueError:  # a language newer than our copy of the protos
        return f"LANGUAGE_{int(language)}"


class GrpcClients:
    """gRPC clients by client id, from their Telemetry settings' user agent."""

    def __init__(
        self,
        timeout_s: float = CLIENT_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.timeout_s = timeout_s
        self._clock = clock
        self._agents: dict[str, _Agent] = {}
        #: called with a client id once it is gone (the service drops it from its own table)
        self.on_gone: Callable[[str], Any] = lambda client_id: None

    def settings(self, client_id: str, agent: v2.UA) -> None:
        """A client's settings arrived with its user agent."""
        try:
            language = v2.Language.Name(agent.language).lower()
        except ValueError:  # a language newer than our copy of the protos
            language = f"language_{int(agent.language)}"
        key = ClientKey(GRPC, language, agent.version.lower() or "unknown")
        self._agents[client_id] = _Agent(key, self._clock())

    def seen(self, client_id: str) -> None:
        """A heartbeat: the client is still there."""
        agent = self._agents.get(client_id)
        if agent is not None:
            agent.seen = self._clock()

    def consumer(self, client_id: str, group: str, address: str) -> None:
        """A consumer's heartbeat named its group (RocketMQ's proxy registers a gRPC consumer
        in its group at each heartbeat, ``ClientActivity.heartbeat``)."""
        agent = self._agents.get(client_id)
        if agent is not None and group:
            agent.group, agent.address = group, address.removeprefix("ipv4:")

    def consumers(self, group: str) -> list[GrpcConsumer]:
        """The live consumers of ``group``."""
        return [
            GrpcConsumer(
                cid, agent.address, agent.key.language.upper().replace("DOT_NET", "DOTNET")
            )
            for cid, agent in list(self._agents.items())
            if agent.group == group
        ]

    def groups(self) -> set[str]:
        """The groups the live consumers named."""
        return {agent.group for agent in list(self._agents.values()) if agent.group}

    def version(self, client_id: str) -> str:
        """The client's version as its user agent gave it (``5.1.2``), "" if unknown."""
        agent = self._agents.get(client_id)
        return agent.key.version if agent is not None else ""

    def forget(self, client_id: str) -> None:
        if self._agents.pop(client_id, None) is not None:
            self.on_gone(client_id)

    def expire(self) -> list[str]:
        """Forget the clients silent for ``timeout_s``; their ids."""
        cutoff = self._clock() - self.timeout_s
        gone = [cid for cid, agent in list(self._agents.items()) if agent.seen < cutoff]
        for client_id in gone:
            self.forget(client_id)
        return gone

    def __contains__(self, client_id: object) -> bool:
        return client_id in self._agents

    def keys(self) -> list[ClientKey]:
        return [agent.key for agent in list(self._agents.values())]


class ConnectedClients:
    """A replica's remoting and gRPC clients, counted for the metrics."""

    def __init__(self, grpc_timeout_s: float = CLIENT_TIMEOUT_S) -> None:
        self.remoting = RemotingClients()
        self.grpc = GrpcClients(grpc_timeout_s)

    def counts(self) -> dict[ClientKey, int]:
        return dict(Counter(self.remoting.keys() + self.grpc.keys()))

    def expire(self) -> None:
        self.grpc.expire()
