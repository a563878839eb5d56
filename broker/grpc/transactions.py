"""Transactional messages over the RocketMQ 5 gRPC front (RocketMQ proxy's
``SendMessageActivity``, ``TransactionActivity``, ``ClientActivity``).

- **SendMessage** of ``message_type`` TRANSACTION: the message gets ``TRAN_MSG=true`` and, as
  the proxy does ("here use topicName as producerGroup for transactional checker",
  SendMessageActivity.java:100), ``PGROUP`` = its topic; the send path stores it as a half
  (:mod:`broker.transactions`). The answer's ``transaction_id`` is the half's offset message
  id (the commit-log offset, as RocketMQ's remoting clients carry it).
- **EndTransaction**: the ``transaction_id`` names the half; COMMIT or ROLLBACK through
  :meth:`~broker.transactions.service.TransactionService.end` (idempotent); a bad resolution,
  an id that is not one or names no half: INVALID_TRANSACTION_ID / BAD_REQUEST, nothing written.
- **Check-back**: a client's Telemetry stream has an outbound queue; a producer's settings
  register it (:class:`TelemetryChannel`) under each topic it publishes to, so the check
  service sends ``recover_orphaned_transaction_command`` (the half as a v2 ``Message``, its
  transaction id) there; the client answers with EndTransaction, source SERVER_CHECK.
"""

from __future__ import annotations

import asyncio
from typing import Any

from broker.clients import language_code
from broker.core import now_ms
from broker.grpc.convert import to_message
from broker.state.producers import ProducerClient, ProducerRegistry
from broker.transactions.errors import HalfNotFound
from broker.transactions.half import PRODUCER_GROUP, TRANSACTION_ID, Resolution, physical_offset
from broker.transactions.service import EndRequest, TransactionService
from protos.apache.rocketmq.v2 import definition_pb2 as v2
from protos.apache.rocketmq.v2 import service_pb2 as svc
from rmq.codes import Version
from rmq.message import PROPERTY_TRANSACTION_PREPARED, StoredMessage
from rmq.msgid import offset_msg_id

RESOLUTIONS = {v2.COMMIT: Resolution.COMMIT, v2.ROLLBACK: Resolution.ROLLBACK}
#: properties of a stored message that are v2 system properties, not user ones
SYSTEM = frozenset(
    {
        "KEYS",
        "TAGS",
        "UNIQ_KEY",
        "WAIT",
        "REAL_TOPIC",
        "REAL_QID",
        PROPERTY_TRANSACTION_PREPARED,
        PRODUCER_GROUP,
        TRANSACTION_ID,
        "TRAN_PREPARED_QUEUE_OFFSET",
        "TRANSACTION_CHECK_TIMES",
    }
)


def half_properties(props: dict[str, str], topic: str) -> None:
    """Mark a TRANSACTION message's properties as a prepare of the topic's producer group."""
    props[PROPERTY_TRANSACTION_PREPARED] = "true"
    props[PRODUCER_GROUP] = topic


def to_v2(half: StoredMessage) -> v2.Message:
    """A half message as the 5.x clients read one: :func:`broker.grpc.consume.to_message`
    (its body's MD5 digest included: the Node.js client's ``MessageView`` cannot read a
    message without one) with its real topic and queue, and none of the half's own properties
    among the user ones."""
    out = to_message(half)
    props = half.properties
    out.topic.name = props.get("REAL_TOPIC", half.topic)
    qid = props.get("REAL_QID", "0")
    sp = out.system_properties
    sp.queue_id = int(qid) if qid.isdigit() else 0
    sp.message_type = v2.TRANSACTION
    for k in SYSTEM:
        out.user_properties.pop(k, None)
    return out


#: the version ordinal a gRPC client is given, as for consumers (broker/admin/connections.py)
GRPC_VERSION = Version.V5_3_3


class TelemetryChannel:
    """One client's Telemetry stream, as a place to send checks (its outbound queue)."""

    def __init__(self, client_id: str, outbound: asyncio.Queue[Any], address: str = "") -> None:
        self.client_id = client_id
        self.outbound = outbound
        self.address = address  # the peer of the stream (host:port)
        self.closed = False

    @property
    def key(self) -> object:
        return ("grpc", self.client_id)

    def check(self, half: StoredMessage, transaction_id: str, broker_name: str) -> bool:
        if self.closed:
            return False
        command = svc.TelemetryCommand(
            recover_orphaned_transaction_command=svc.RecoverOrphanedTransactionCommand(
                message=to_v2(half),
                transaction_id=offset_msg_id(
                    half.store_host.ip, half.store_host.port, half.physical_offset
                ),
            )
        )
        self.outbound.put_nowait(command)
        return True


class GrpcTransactions:
    """What the gRPC service needs for transactions: the service, and the producers' streams."""

    def __init__(
        self, service: TransactionService, producers: ProducerRegistry, store_host: tuple[str, int]
    ) -> None:
        self.service = service
        self.producers = producers
        self.store_host = store_host
        self.channels: dict[str, TelemetryChannel] = {}
        self.topics: dict[str, list[str]] = {}
        #: what GET_PRODUCER_CONNECTION_LIST answers of each producer (from its settings)
        self.clients: dict[str, ProducerClient] = {}

    def transaction_id(self, physical: int) -> str:
        return offset_msg_id(self.store_host[0], self.store_host[1], physical)

    # ---------------------------------------------------------------- producers
    def attach(self, client_id: str, outbound: asyncio.Queue[Any], peer: str = "") -> None:
        """A client's Telemetry stream opened (``peer``: gRPC's ``ipv4:host:port``)."""
        address = peer.removeprefix("ipv4:").removeprefix("ipv6:")
        self.channels[client_id] = TelemetryChannel(client_id, outbound, address)

    def detach(self, client_id: str, outbound: asyncio.Queue[Any] | None = None) -> None:
        """Forget the client's stream; with ``outbound``, only if that stream is still the one
        registered (a stream that ends after the client opened its next keeps the next)."""
        current = self.channels.get(client_id)
        if outbound is not None and current is not None and current.outbound is not outbound:
            return
        channel = self.channels.pop(client_id, None)
        if channel is not None:
            channel.closed = True
            self.producers.connection_closed(channel.key)
        self.topics.pop(client_id, None)
        self.clients.pop(client_id, None)

    def settings(self, client_id: str, settings: v2.Settings) -> None:
        """A producer's settings: its stream registered under each topic it publishes to."""
        if settings.client_type not in (v2.PRODUCER, v2.CLIENT_TYPE_UNSPECIFIED):
            return
        self.topics[client_id] = [t.name for t in settings.publishing.topics if t.name]
        channel = self.channels.get(client_id)
        agent = settings.user_agent
        self.clients[client_id] = ProducerClient(
            channel.address if channel is not None else "",
            language_code(agent.language),
            int(GRPC_VERSION),
            "grpc",
            agent.version,
        )
        self.heartbeat(client_id)

    def heartbeat(self, client_id: str) -> None:
        channel = self.channels.get(client_id)
        if channel is None:
            return
        for topic in self.topics.get(client_id, ()):
            self.producers.heartbeat(
                topic, client_id, channel, now_ms(), self.clients.get(client_id, ProducerClient())
            )

    # ----------------------------------------------------------------- ending
    async def end(self, request: svc.EndTransactionRequest) -> svc.EndTransactionResponse:
        """EndTransaction; bad input is answered with the field named, a refusal of the
        transaction service (not the master, ended the other way) raises for the service's
        ``refusal``."""
        resolution = RESOLUTIONS.get(request.resolution)
        if resolution is None:
            return _answer(
                v2.BAD_REQUEST,
                f"resolution: {v2.TransactionResolution.Name(request.resolution)} is not "
                "COMMIT or ROLLBACK",
            )
        offset = physical_offset(request.transaction_id)
        try:
            if offset is None:
                raise HalfNotFound("not a transaction id this broker gave")
            half = await self.service.half_at(offset)
        except HalfNotFound as exc:
            return _answer(
                v2.INVALID_TRANSACTION_ID, f"transaction_id: {request.transaction_id!r}: {exc}"
            )
        real = half.properties.get("REAL_TOPIC", "")
        if request.topic.name and request.topic.name != real:
            return _answer(
                v2.BAD_REQUEST,
                f"topic.name: {request.topic.name!r} is not the transaction's topic {real!r}",
            )
        if request.message_id and request.message_id != half.msg_id:
            return _answer(
                v2.ILLEGAL_MESSAGE_ID,
                f"message_id: {request.message_id!r} is not the transaction's message "
                f"{half.msg_id!r}",
            )
        source = request.source == v2.SOURCE_SERVER_CHECK
        await self.service.end(EndRequest(offset, resolution, from_check=source))
        return _answer(v2.OK)


def _answer(code: int, message: str = "OK") -> svc.EndTransactionResponse:
    return svc.EndTransactionResponse(
        status=v2.Status(code=code, message=message)  # type: ignore[arg-type]
    )
