"""Producer groups: which live connections each group has, so a half message's check can be
sent back to its producer.

RocketMQ's ``ProducerManager`` (``broker/client/ProducerManager.java``): a HEART_BEAT's
``producerDataSet`` registers the client's connection under each group; a connection leaves
when it closes, on UNREGISTER_CLIENT, or after ``client_expiry_ms`` without a heartbeat (120 s);
``getAvailableChannel`` picks a live one of the group (round robin here). A channel is
anything that can carry a check: a remoting connection, or a gRPC client's Telemetry stream
(the RocketMQ proxy registers a 5.x client under each topic it publishes to, its
``ClientActivity``, so a gRPC producer's group is the topic's name). Each member keeps what
GET_PRODUCER_CONNECTION_LIST answers of it (:class:`ProducerClient`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Protocol

from rmq.headers import CheckTransactionStateHeader
from rmq.message import StoredMessage, encode
from rmq.msgid import offset_msg_id
from rmq.server import Peer


class CheckChannel(Protocol):
    """Where a check goes: one producer connection."""

    @property
    def key(self) -> object:
        """The connection's identity (two heartbeats on one connection: one channel)."""
        ...

    def check(self, half: StoredMessage, transaction_id: str, broker_name: str) -> bool:
        """Send CHECK_TRANSACTION_STATE for ``half`` (as stored on the half topic, with its
        real topic in REAL_TOPIC); False when the connection is gone. Never blocks."""
        ...


@dataclass(frozen=True)
class PeerChannel:
    """A remoting producer connection: CHECK_TRANSACTION_STATE (39, oneway) with RocketMQ's
    header and the half as the body, its topic and queue the real ones
    (``AbstractTransactionalMessageCheckListener.sendCheckMessage``, :51-67;
    ``Broker2Client.checkProducerTransactionState``)."""

    peer: Peer

    @property
    def key(self) -> object:
        return ("remoting", self.peer.connection_id)

    def check(self, half: StoredMessage, transaction_id: str, broker_name: str) -> bool:
        props = half.properties
        qid = props.get("REAL_QID", "0")
        real = half._replace(
            topic=props.get("REAL_TOPIC", half.topic), queue_id=int(qid) if qid.isdigit() else 0
        )
        header = CheckTransactionStateHeader(
            topic=real.topic,
            tran_state_table_offset=half.queue_offset,
            commit_log_offset=half.physical_offset,
            msg_id=props.get("UNIQ_KEY"),
            transaction_id=transaction_id,
            offset_msg_id=offset_msg_id(
                half.store_host.ip, half.store_host.port, half.physical_offset
            ),
            broker_name=broker_name,
        )
        return self.peer.send_oneway(header.request(encode(real), oneway=True))


@dataclass(frozen=True)
class ProducerClient:
    """What a producer's heartbeat tells of it: its address, its language (RocketMQ's
    ``LanguageCode`` name: JAVA, CPP, PYTHON), its ``version`` ordinal, its protocol
    (``remoting`` or ``grpc``) and its version as the client gave it (``V4_9_4``, ``5.1.2``)."""

    address: str = ""
    language: str = ""
    version: int = 0
    protocol: str = "remoting"
    version_text: str = ""


@dataclass
class _Member:
    channel: CheckChannel
    last_seen_ms: int
    client: ProducerClient = ProducerClient()


@dataclass
class _Group:
    members: dict[tuple[str, object], _Member] = field(default_factory=dict)
    turn: itertools.count[int] = field(default_factory=itertools.count)


class ProducerRegistry:
    def __init__(self, client_expiry_ms: int = 120_000) -> None:
        self.client_expiry_ms = client_expiry_ms
        self.groups: dict[str, _Group] = {}

    def heartbeat(
        self,
        group: str,
        client_id: str,
        channel: CheckChannel,
        now_ms: int,
        client: ProducerClient = ProducerClient(),
    ) -> None:
        g = self.groups.setdefault(group, _Group())
        g.members[(client_id, channel.key)] = _Member(channel, now_ms, client)

    def unregister(self, group: str, client_id: str) -> None:
        g = self.groups.get(group)
        if g is None:
            return
        for k in [k for k in g.members if k[0] == client_id]:
            del g.members[k]

    def connection_closed(self, key: object) -> None:
        for g in self.groups.values():
            for k in [k for k in g.members if k[1] == key]:
                del g.members[k]

    def expire(self, now_ms: int) -> None:
        for g in self.groups.values():
            for k in [
                k for k, m in g.members.items() if now_ms - m.last_seen_ms > self.client_expiry_ms
            ]:
                del g.members[k]

    def channel(self, group: str) -> CheckChannel | None:
        """A live channel of the group, taking turns; None when it has none."""
        g = self.groups.get(group)
        if g is None or not g.members:
            return None
        members = list(g.members.values())
        return members[next(g.turn) % len(members)].channel

    def connections(self, group: str) -> list[tuple[str, ProducerClient]]:
        """The group's live connections: ``(client id, what it told of itself)``, by id."""
        g = self.groups.get(group)
        members = sorted(g.members.items(), key=lambda kv: str(kv[0])) if g else []
        return [(k[0], m.client) for k, m in members]

    def client_ids(self, group: str) -> list[str]:
        g = self.groups.get(group)
        return sorted({k[0] for k in g.members}) if g else []
