"""RocketMQ 5's ``apache.rocketmq.v2.MessagingService`` on a broker replica: producers of
normal, FIFO and transactional messages, as the official 5.x clients and RocketMQ's proxy
(its ``proxy/`` module) use it, and consumers through :mod:`broker.grpc.consume` (its handlers
are registered here by method name; the Settings of a consumer are filled in there).

- **QueryRoute**: the topic's queues from metaledger's routes, each with the replica group's
  gRPC endpoints (the master's, then the other live replicas', which forward to the master:
  :mod:`broker.grpc.forward`), its permission and ``accept_message_types`` [NORMAL, FIFO,
  DELAY, TRANSACTION].
- **Telemetry**: on the client's ``settings`` the server answers with its ``Settings`` first
  (backoff policy, max body size, request timeout); the clients wait for it. The stream also
  carries what the server sends unasked (a transaction's check: :mod:`broker.grpc.transactions`).
- **Heartbeat**: OK once the client sent its settings, UNRECOGNIZED_CLIENT_TYPE before (as
  RocketMQ's proxy).
- **SendMessage**: each message through the broker's send path (:class:`Backend`), so the
  quorum-write rules hold: OK only for PUT_OK. The client's ``message_id`` is the UNIQ_KEY;
  keys, tag and user properties are kept; the body is stored byte for byte (a GZIP-encoded
  one as :mod:`broker.grpc.body` says: 4.x and 5.x consumers get the original); a message group
  is stored as ``__SHARDINGKEY`` and picks the queue (one group, one queue: its order holds).
  A TRANSACTION message is stored as a half; **EndTransaction** commits or rolls it back.
  A DELAY message's ``delivery_timestamp`` becomes ``TIMER_DELIVER_MS`` (RocketMQ's proxy,
  SendMessageActivity.fillDelayMessageProperty): a timer message (:mod:`broker.timer`); a
  missing one, or one beyond ``timerMaxDelaySec``, is ILLEGAL_DELIVERY_TIME.
- **NotifyClientTermination**: forgets the client, as do 120 s without settings or a heartbeat
  (:mod:`broker.clients`, which the metrics count).

Every other method answers NOT_IMPLEMENTED with a message naming it. Refusals are statuses in
the answer (the v2 way), never a gRPC error: :func:`refusal` is the one place the broker's
error tree becomes a v2 ``Code``.

Over 500 lines: the producer side of one service whose handlers share the replica's client
table, settings and send path (the consumer side is :mod:`broker.grpc.consume`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import grpc

from broker.clients import GrpcClients
from broker.grpc.body import BadBody, stored_body
from broker.grpc.convert import SHARDING_KEY
from broker.grpc.transactions import GrpcTransactions, half_properties
from broker.remoting.errors import (
    BrokerRequestError,
    NoPermission,
    ServiceNotAvailable,
    TopicNotExist,
)
from broker.replication import RESPONSE, PutStatus
from broker.timer.message import (
    TIMER_DELIVER_MS,
    TIMER_OUT_MS,
    TIMER_PROPERTIES,
    TimerMessageIllegal,
)
from protos.apache.rocketmq.v2 import definition_pb2 as v2
from protos.apache.rocketmq.v2 import service_pb2 as svc
from protos.apache.rocketmq.v2 import service_pb2_grpc as svc_grpc
from rmq.message import Host

if TYPE_CHECKING:
    from broker.grpc.consume import Consumers

log = logging.getLogger(__name__)
CLIENT_ID = "x-mq-client-id"
#: user property names the broker writes itself (RocketMQ's MessageConst reserved names)
RESERVED = frozenset(
    {"KEYS", "TAGS", "UNIQ_KEY", "WAIT", "DELAY", "REAL_TOPIC", "REAL_QID", "TRAN_MSG"}
    | {*TIMER_PROPERTIES, TIMER_OUT_MS}
)
PERM_READ, PERM_WRITE = 4, 2

#: a store status as a v2 Code: OK only for PUT_OK (the group's quorum policy said so)
PUT_CODE: dict[PutStatus, int] = {
    PutStatus.PUT_OK: v2.OK,
    PutStatus.FLUSH_DISK_TIMEOUT: v2.MASTER_PERSISTENCE_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: v2.SLAVE_PERSISTENCE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: v2.HA_NOT_AVAILABLE,
    PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: v2.HA_NOT_AVAILABLE,
    PutStatus.SERVICE_NOT_AVAILABLE: v2.INTERNAL_SERVER_ERROR,
    PutStatus.MESSAGE_ILLEGAL: v2.BAD_REQUEST,
    PutStatus.UNKNOWN_ERROR: v2.INTERNAL_SERVER_ERROR,
}


class RouteQueue(NamedTuple):
    """One queue of a topic as QueryRoute gives it."""

    broker_name: str
    broker_id: int
    queue_id: int
    perm: int  # RocketMQ 4.x bits: READ 4, WRITE 2
    endpoint: tuple[str, int]
    #: the group's other live replicas, which forward to the master (broker/grpc/forward.py)
    replicas: tuple[tuple[str, int], ...] = ()


class Sent(NamedTuple):
    status: PutStatus
    queue_id: int
    queue_offset: int
    physical_offset: int = -1


class Backend(Protocol):
    """What the service needs from a replica (:class:`broker.grpc.front.ReplicaBackend`; the
    unit tests' fake)."""

    max_body_bytes: int

    async def queues(self, topic: str) -> list[RouteQueue]:
        """The topic's queues; raises TopicNotExist when the routes do not have it."""
        ...

    async def send(
        self,
        topic: str,
        body: bytes,
        props: dict[str, str],
        born: Host,
        born_timestamp_ms: int,
        sys_flag: int = 0,
    ) -> Sent:
        """One message through the broker's send path (``sys_flag``: its COMPRESSED bit);
        refusals raise BrokerRequestError."""
        ...


class Refused(Exception):
    """Bad input: answered with ``code`` and the message (which names the field)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def status(code: int, message: str = "OK") -> v2.Status:
    return v2.Status(code=code, message=message)  # type: ignore[arg-type]


def refusal(exc: Exception) -> v2.Status | None:
    """The v2 status of a refusal; None for anything else (a bug)."""
    if isinstance(exc, Refused):
        return status(exc.code, str(exc))
    if isinstance(exc, TopicNotExist):
        return status(v2.TOPIC_NOT_FOUND, str(exc))
    if isinstance(exc, NoPermission):
        return status(v2.FORBIDDEN, str(exc))
    if isinstance(exc, ServiceNotAvailable):
        return status(v2.HA_NOT_AVAILABLE, f"this replica cannot take writes now: {exc}")
    if isinstance(exc, BrokerRequestError):
        return status(v2.BAD_REQUEST, str(exc))
    return None


def put_status(s: PutStatus) -> v2.Status:
    code = PUT_CODE[s]
    if code == v2.OK:
        return status(v2.OK)
    return status(code, f"{s.value}: {RESPONSE[s][1] or s.value}")


def permission(perm: int) -> int:
    readable, writable = bool(perm & PERM_READ), bool(perm & PERM_WRITE)
    if readable and writable:
        return v2.READ_WRITE
    if writable:
        return v2.WRITE
    return v2.READ if readable else v2.NONE


def _scheme(host: str) -> int:
    try:
        return v2.IPv4 if ipaddress.ip_address(host).version == 4 else v2.IPv6
    except ValueError:
        return v2.DOMAIN_NAME


def endpoints(host: str, port: int, *more: tuple[str, int]) -> v2.Endpoints:
    """One ``Endpoints``: the address, then those of ``more`` of the same scheme (a client
    picks any of them; the 5.x clients refuse several DOMAIN_NAME addresses)."""
    scheme = _scheme(host)
    addresses = [(host, port)]
    for a in more if scheme != v2.DOMAIN_NAME else ():
        if a not in addresses and _scheme(a[0]) == scheme:
            addresses.append(a)
    return v2.Endpoints(
        scheme=scheme,  # type: ignore[arg-type]
        addresses=[v2.Address(host=h, port=p) for h, p in addresses],
    )


def _metadata(context: Any, key: str) -> str:
    for k, v in context.invocation_metadata() or ():
        if k == key:
            return str(v)
    return ""


def _born(context: Any, claimed: str) -> Host:
    """The message's bornHost: the client's claimed IP, else the peer's."""
    for text in (claimed, str(context.peer() or "").partition(":")[2].rpartition(":")[0]):
        try:
            ipaddress.ip_address(text.strip("[]"))
            return Host(text.strip("[]"), 0)
        except ValueError:
            continue
    return Host("127.0.0.1", 0)


def properties(m: v2.Message, i: int, max_body_bytes: int) -> dict[str, str]:
    """The stored properties of ``messages[i]``, or Refused naming the bad field."""
    field = f"messages[{i}]"
    sp = m.system_properties
    if not m.topic.name:
        raise Refused(v2.ILLEGAL_TOPIC, f"{field}.topic.name: required")
    if not m.body:
        raise Refused(v2.MESSAGE_BODY_EMPTY, f"{field}.body: empty")
    if len(m.body) > max_body_bytes:
        raise Refused(
            v2.MESSAGE_BODY_TOO_LARGE,
            f"{field}.body: {len(m.body)} bytes exceeds the limit of {max_body_bytes}",
        )
    if not sp.message_id:
        raise Refused(v2.ILLEGAL_MESSAGE_ID, f"{field}.system_properties.message_id: required")
    if sp.message_type not in (
        v2.NORMAL,
        v2.FIFO,
        v2.DELAY,
        v2.TRANSACTION,
        v2.MESSAGE_TYPE_UNSPECIFIED,
    ):
        raise Refused(
            v2.UNSUPPORTED,
            f"{field}.system_properties.message_type: {v2.MessageType.Name(sp.message_type)}"
            " is not supported yet (only NORMAL, FIFO, DELAY and TRANSACTION)",
        )
    if sp.message_type == v2.DELAY and not sp.HasField("delivery_timestamp"):
        raise Refused(
            v2.ILLEGAL_DELIVERY_TIME,
            f"{field}.system_properties.delivery_timestamp: required for a DELAY message",
        )
    props: dict[str, str] = {}
    for k, v in m.user_properties.items():
        if not k or k in RESERVED or "\x01" in k + v or "\x02" in k + v:
            raise Refused(
                v2.ILLEGAL_MESSAGE_PROPERTY_KEY,
                f"{field}.user_properties[{k!r}]: reserved or holds a separator (\\x01, \\x02)",
            )
        props[k] = v
    if sp.HasField("tag"):
        if not sp.tag.strip() or "|" in sp.tag or "\x01" in sp.tag or "\x02" in sp.tag:
            raise Refused(v2.ILLEGAL_MESSAGE_TAG, f"{field}.system_properties.tag: {sp.tag!r}")
        props["TAGS"] = sp.tag
    keys = list(sp.keys)
    for k in keys:
        if not k.strip() or " " in k or "\x01" in k or "\x02" in k:
            raise Refused(v2.ILLEGAL_MESSAGE_KEY, f"{field}.system_properties.keys: {k!r}")
    if keys:
        props["KEYS"] = " ".join(keys)
    props["UNIQ_KEY"] = sp.message_id
    props["WAIT"] = "true"
    props.update(message_group(m, field))
    if sp.HasField("delivery_timestamp"):
        try:
            props[TIMER_DELIVER_MS] = str(sp.delivery_timestamp.ToMilliseconds())
        except ValueError as exc:  # e.g. milliseconds in the seconds field
            raise Refused(
                v2.ILLEGAL_DELIVERY_TIME, f"{field}.system_properties.delivery_timestamp: {exc}"
            ) from None
    if sp.message_type == v2.TRANSACTION:
        half_properties(props, m.topic.name)
    return props


#: RocketMQ's ``MessageConst.PROPERTY_SHARDING_KEY``: where a message group is stored
MAX_MESSAGE_GROUP_BYTES = 64  # the proxy's maxMessageGroupSize


def message_group(m: v2.Message, field: str) -> dict[str, str]:
    """A FIFO message's group as the stored ``__SHARDINGKEY`` (``SendMessageActivity.java``
    :160-175, :271-275); required by FIFO, blank or control characters or 64 bytes refused."""
    sp = m.system_properties
    if not sp.HasField("message_group"):
        if sp.message_type == v2.FIFO:
            raise Refused(
                v2.ILLEGAL_MESSAGE_GROUP,
                f"{field}.system_properties.message_group: required by a FIFO message",
            )
        return {}
    group = sp.message_group
    if (
        not group.strip()
        or len(group.encode()) >= MAX_MESSAGE_GROUP_BYTES
        or any(ord(c) < 32 or ord(c) == 127 for c in group)
    ):
        raise Refused(
            v2.ILLEGAL_MESSAGE_GROUP,
            f"{field}.system_properties.message_group: {group!r} is blank, holds a control"
            f" character or has {MAX_MESSAGE_GROUP_BYTES} bytes or more",
        )
    return {SHARDING_KEY: group}


class MessagingService(svc_grpc.MessagingServiceServicer):  # type: ignore[misc]
    def __init__(
        self,
        backend: Backend,
        *,
        request_timeout_ms: int = 3000,
        max_attempts: int = 3,
        transactions: GrpcTransactions | None = None,
        consumers: Consumers | None = None,
        agents: GrpcClients | None = None,
    ) -> None:
        self.backend = backend
        self.transactions = transactions
        self.consumers = consumers
        self.request_timeout_ms = request_timeout_ms
        self.max_attempts = max_attempts
        #: client id -> its client type, from its Telemetry settings
        self.clients: dict[str, int] = {}
        #: their user agents for the metrics; forgets the gone ones here too (broker.clients)
        self.agents = agents if agents is not None else GrpcClients()
        self.agents.on_gone = self._gone
        handlers = consumers.handlers() if consumers is not None else {}
        for method in svc.DESCRIPTOR.services_by_name["MessagingService"].methods:
            if method.name in handlers:
                setattr(self, method.name, handlers[method.name])
            elif method.name not in IMPLEMENTED:
                setattr(self, method.name, _not_implemented(method))

    # ------------------------------------------------------------------ routes
    async def QueryRoute(self, request: svc.QueryRouteRequest, context: Any) -> Any:
        topic = request.topic.name
        if not topic:
            return svc.QueryRouteResponse(status=status(v2.ILLEGAL_TOPIC, "topic.name: required"))
        try:
            queues = await self.backend.queues(topic)
        except (Refused, BrokerRequestError) as exc:
            return svc.QueryRouteResponse(status=refusal(exc))
        return svc.QueryRouteResponse(
            status=status(v2.OK),
            message_queues=[
                v2.MessageQueue(
                    topic=request.topic,
                    id=q.queue_id,
                    permission=permission(q.perm),  # type: ignore[arg-type]
                    broker=v2.Broker(
                        name=q.broker_name,
                        id=q.broker_id,
                        endpoints=endpoints(*q.endpoint, *q.replicas),
                    ),
                    accept_message_types=[v2.NORMAL, v2.FIFO, v2.DELAY, v2.TRANSACTION],
                )
                for q in queues
            ],
        )

    # --------------------------------------------------------------- telemetry
    def settings(self, client: v2.Settings) -> v2.Settings:
        """The server's answer to a client's settings: its own, with the limits filled in."""
        out = v2.Settings()
        out.CopyFrom(client)
        out.request_timeout.FromMilliseconds(self.request_timeout_ms)
        out.backoff_policy.Clear()
        out.backoff_policy.max_attempts = self.max_attempts
        backoff = out.backoff_policy.exponential_backoff
        backoff.initial.FromMilliseconds(10)
        backoff.max.FromMilliseconds(1000)
        backoff.multiplier = 2.0
        if client.HasField("publishing") or client.client_type == v2.PRODUCER:
            out.publishing.max_body_size = self.backend.max_body_bytes
            out.publishing.validate_message_type = True
        if client.HasField("subscription") and self.consumers is not None:
            self.consumers.settings(out)
        return out

    async def Telemetry(
        self, request_iterator: AsyncIterator[svc.TelemetryCommand], context: Any
    ) -> AsyncIterator[svc.TelemetryCommand]:
        client_id = _metadata(context, CLIENT_ID)
        outbound: asyncio.Queue[svc.TelemetryCommand | None] = asyncio.Queue()

        async def read() -> None:
            try:
                async for command in request_iterator:
                    answer = self._telemetry(client_id, command)
                    if answer is not None:
                        outbound.put_nowait(answer)
            finally:
                outbound.put_nowait(None)

        reader = asyncio.create_task(read())
        if self.transactions is not None and client_id:
            self.transactions.attach(client_id, outbound, str(context.peer() or ""))
        try:
            while (item := await outbound.get()) is not None:
                yield item
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
            if self.transactions is not None and client_id:
                self.transactions.detach(client_id, outbound)

    def _telemetry(
        self, client_id: str, command: svc.TelemetryCommand
    ) -> svc.TelemetryCommand | None:
        """The answer to one command a client sent on its Telemetry stream."""
        if command.WhichOneof("command") != "settings":
            return None  # verify/stack-trace results: nothing asked them yet
        if not client_id:
            return svc.TelemetryCommand(
                status=status(v2.CLIENT_ID_REQUIRED, f"metadata {CLIENT_ID}: required")
            )
        self.clients[client_id] = command.settings.client_type
        self.agents.settings(client_id, command.settings.user_agent)
        if self.transactions is not None:
            self.transactions.settings(client_id, command.settings)
        return svc.TelemetryCommand(status=status(v2.OK), settings=self.settings(command.settings))

    async def Heartbeat(self, request: svc.HeartbeatRequest, context: Any) -> Any:
        client_id = _metadata(context, CLIENT_ID)
        if not client_id:
            return svc.HeartbeatResponse(
                status=status(v2.CLIENT_ID_REQUIRED, f"metadata {CLIENT_ID}: required")
            )
        if client_id not in self.clients:
            return svc.HeartbeatResponse(
                status=status(
                    v2.UNRECOGNIZED_CLIENT_TYPE,
                    f"client {client_id} sent no settings over Telemetry yet",
                )
            )
        if self.transactions is not None:
            self.transactions.heartbeat(client_id)
        self.agents.seen(client_id)
        if self.clients[client_id] in (v2.PUSH_CONSUMER, v2.SIMPLE_CONSUMER):
            self.agents.consumer(client_id, request.group.name, context.peer())
        return svc.HeartbeatResponse(status=status(v2.OK))

    def _gone(self, client_id: str) -> None:
        """A client terminated or went silent: forgotten, the messages renewed for it are
        visible again soon (:meth:`broker.grpc.renew.Renewals.client_gone`)."""
        self.clients.pop(client_id, None)
        if self.consumers is not None:
            self.consumers.renewals.client_gone(client_id)

    async def NotifyClientTermination(
        self, request: svc.NotifyClientTerminationRequest, context: Any
    ) -> Any:
        client_id = _metadata(context, CLIENT_ID)
        self.clients.pop(client_id, None)
        if self.transactions is not None:
            self.transactions.detach(client_id)
        self.agents.forget(client_id)
        return svc.NotifyClientTerminationResponse(status=status(v2.OK))

    async def EndTransaction(self, request: svc.EndTransactionRequest, context: Any) -> Any:
        if self.transactions is None:
            return svc.EndTransactionResponse(
                status=status(v2.NOT_IMPLEMENTED, "EndTransaction: no transactions here")
            )
        try:
            return await self.transactions.end(request)
        except (Refused, BrokerRequestError) as exc:
            return svc.EndTransactionResponse(status=refusal(exc))

    # -------------------------------------------------------------------- send
    async def SendMessage(self, request: svc.SendMessageRequest, context: Any) -> Any:
        if not request.messages:
            return svc.SendMessageResponse(
                status=status(v2.BAD_REQUEST, "messages: at least one required")
            )
        entries = []
        for i, m in enumerate(request.messages):
            entries.append(await self._send_one(m, i, context))
        codes = {e.status.code for e in entries}
        if len(codes) == 1:
            overall = entries[0].status
        else:
            overall = status(v2.MULTIPLE_RESULTS, "the messages have different results")
        return svc.SendMessageResponse(status=overall, entries=entries)

    async def _send_one(self, m: v2.Message, i: int, context: Any) -> svc.SendResultEntry:
        message_id = m.system_properties.message_id
        try:
            props = properties(m, i, self.backend.max_body_bytes)
            sp = m.system_properties
            try:
                body, sys_flag = stored_body(
                    m.body, sp.body_encoding, f"messages[{i}]", self.backend.max_body_bytes
                )
            except BadBody as exc:
                raise Refused(exc.code, str(exc)) from None
            born_ms = sp.born_timestamp.ToMilliseconds() if sp.HasField("born_timestamp") else 0
            sent = await self.backend.send(
                m.topic.name, body, props, _born(context, sp.born_host), born_ms or _now_ms(),
                sys_flag,
            )  # fmt: skip
        except TimerMessageIllegal as exc:
            where = f"messages[{i}].system_properties.delivery_timestamp"
            return svc.SendResultEntry(
                status=status(v2.ILLEGAL_DELIVERY_TIME, f"{where}: {exc}"), message_id=message_id
            )
        except (Refused, BrokerRequestError) as exc:
            return svc.SendResultEntry(status=refusal(exc), message_id=message_id)
        out = svc.SendResultEntry(
            status=put_status(sent.status), message_id=message_id, offset=sent.queue_offset
        )
        tx = self.transactions
        if tx is not None and m.system_properties.message_type == v2.TRANSACTION:
            out.transaction_id = tx.transaction_id(sent.physical_offset)
        return out


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


IMPLEMENTED = frozenset(
    {
        "QueryRoute",
        "Telemetry",
        "Heartbeat",
        "SendMessage",
        "NotifyClientTermination",
        "EndTransaction",
    }
)


def _not_implemented(method: Any, messages: Any = svc) -> Callable[..., Any]:
    """A handler answering the method's own response type (in ``messages``, the generated
    module) with NOT_IMPLEMENTED."""
    response = getattr(messages, method.output_type.name)
    text = f"{method.name} is not implemented by the metaledger broker yet"

    def answer() -> Any:
        out = response()
        if "status" in response.DESCRIPTOR.fields_by_name:
            out.status.CopyFrom(status(v2.NOT_IMPLEMENTED, text))
        return out

    if method.server_streaming:

        async def stream(request: Any, context: Any) -> AsyncIterator[Any]:
            yield answer()

        return stream

    async def unary(request: Any, context: Any) -> Any:
        return answer()

    return unary


def add_to_server(service: MessagingService, server: grpc.aio.Server) -> None:
    svc_grpc.add_MessagingServiceServicer_to_server(service, server)


__all__ = ["Backend", "MessagingService", "Refused", "RouteQueue", "Sent", "add_to_server"]
