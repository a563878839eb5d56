"""RocketMQ 5 consumers over gRPC: the consumer half of ``apache.rocketmq.v2.MessagingService``
on a broker replica, over the POP model of :mod:`broker.pop` (receipt handles, invisible time,
redelivery, DLQ, FIFO) and the consumer offsets. Copies RocketMQ's proxy
(``proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/``, cited by file:line below).

- **QueryAssignment**: one assignment per broker with readable queues, queue id -1 (POP across
  all its queues), or one per readable queue for a FIFO group (``route/RouteActivity.java``
  :76-117); no readable queue is FORBIDDEN.
- **ReceiveMessage** (server stream): a status, then the messages, then ``delivery_timestamp``,
  then the end (``consumer/ReceiveMessageResponseStreamWriter.java``:63-120); nothing to
  deliver is MESSAGE_NOT_FOUND. Long polling is the request's ``long_polling_timeout`` (else
  the deadline less half the request timeout), clamped to [5 s, 20 s] and to the deadline; a
  deadline under 5 s is ILLEGAL_POLLING_TIME (``consumer/ReceiveMessageActivity.java``:49-77).
  The invisible time is the request's, 10 s to 12 h, or 60 s with ``auto_renew`` (:79-86; the
  broker's ``--pop-auto-renew-invisible-ms``), renewed then until the client acks it
  (:mod:`broker.grpc.renew`, as the proxy). Messages a broken stream did not carry are visible
  again after 1 s (``ReceiveMessageResponseStreamWriter.java``:133-150). POP always reads the
  whole broker (queue id -1), as the proxy's ``ReceiveMessageQueueSelector`` does, FIFO groups
  included (the POP service keeps a queue's order).
- **AckMessage**: each entry's receipt handle; the answer's status is the entries' one code, or
  MULTIPLE_RESULTS (``consumer/AckMessageActivity.java``:196-206).
- **ChangeInvisibleDuration**: 0 to 12 h (``common/GrpcValidator.java``:82-95); the answer
  carries the new receipt handle.
- **ForwardMessageToDeadLetterQueue**: the message to ``%DLQ%<group>`` and acked.
- **UpdateOffset / GetOffset / QueryOffset**: the group's committed offset of a queue (raised
  only, as every offset of :mod:`broker.state.offsets`; none yet is OFFSET_NOT_FOUND), and a
  queue's first, next or first-at-a-time offset.

**FIFO groups.** RocketMQ declares a group FIFO in its subscription group config
(``consumeMessageOrderly``); metaledger has no subscription group config, so a broker flag
names them (``--fifo-group NAME``, repeatable; give every replica the same ones). The Settings
a consumer gets (``common/GrpcClientSettingsManager.java``:106-130): ``receive_batch_size`` 32,
``long_polling_timeout`` 20 s, ``fifo``, and a customized backoff (RocketMQ's default
``CustomizedRetryPolicy``: 1 s, 5 s, 10 s, 30 s, 1 min … 2 h) with ``max_attempts`` the group's
(retryMaxTimes + 1, from the POP service).

Messages are converted by :func:`broker.grpc.convert.to_message`, the one stored-message →
``v2.Message`` conversion. Bad input answers with the v2 code and a message naming the field, and
changes nothing; :func:`refused` is where the POP errors become v2 codes (the rest goes
through :func:`broker.grpc.service.refusal`).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import grpc

from broker.grpc.convert import to_message
from broker.grpc.renew import Renewals
from broker.grpc.service import Refused, RouteQueue, endpoints, permission, refusal, status
from broker.pop.errors import IllegalInvisibleTime, InvalidReceiptHandle
from broker.pop.service import Popped, PopService
from broker.remoting.errors import BrokerRequestError
from broker.store.errors import StoreCorruptionError
from broker.topics import TOPIC_NAME
from protos.apache.rocketmq.v2 import definition_pb2 as v2
from protos.apache.rocketmq.v2 import service_pb2 as svc

log = logging.getLogger(__name__)
NACK_INVISIBLE_MS = 1_000
#: RocketMQ's ``Validators.checkGroup``: at most 255 of these characters
GROUP_NAME = re.compile(r"[%|a-zA-Z0-9_-]{1,255}")
PERM_READ = 4
MAX_BATCH = 32  # a POP's most messages (PopMessageProcessor.java)
#: RocketMQ's default ``CustomizedRetryPolicy.next`` (remoting/.../subscription), in ms
DEFAULT_BACKOFF_MS = (
    1_000, 5_000, 10_000, 30_000, *(m * 60_000 for m in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 30)),
    3_600_000, 7_200_000,
)  # fmt: skip


@dataclass(frozen=True)
class ConsumeConfig:
    """The proxy's consumer limits (``ProxyConfig.java``), in ms."""

    min_long_polling_ms: int = 5_000
    max_long_polling_ms: int = 20_000
    receive_batch_size: int = 32
    default_invisible_ms: int = 60_000
    min_invisible_receive_ms: int = 10_000
    max_invisible_ms: int = 12 * 3_600_000
    fifo_groups: frozenset[str] = frozenset()

    def validate(self) -> ConsumeConfig:
        if self.default_invisible_ms <= 0:
            raise ValueError(f"default_invisible_ms: must be > 0, got {self.default_invisible_ms}")
        if not 0 <= self.min_long_polling_ms <= self.max_long_polling_ms:
            raise ValueError(
                "min_long_polling_ms, max_long_polling_ms: need 0 <= min <= max, got "
                f"{self.min_long_polling_ms}, {self.max_long_polling_ms}"
            )
        if not 0 <= self.min_invisible_receive_ms <= self.max_invisible_ms:
            raise ValueError(
                "min_invisible_receive_ms, max_invisible_ms: need 0 <= min <= max, got "
                f"{self.min_invisible_receive_ms}, {self.max_invisible_ms}"
            )
        bad = [g for g in self.fifo_groups if not GROUP_NAME.fullmatch(g)]
        if bad:
            raise ValueError(f"fifo_groups: not group names: {bad}")
        return self


class ConsumerBackend(Protocol):
    """What the consumer handlers need from a replica (:class:`broker.grpc.front.ReplicaBackend`;
    the unit tests' fake)."""

    @property
    def pops(self) -> PopService: ...

    async def queues(self, topic: str) -> list[RouteQueue]:
        """The topic's queues; raises TopicNotExist when the routes do not have it."""
        ...

    def offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The group's committed offset of the queue; None when it never committed."""
        ...

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None: ...

    async def queue_offset(self, topic: str, queue_id: int, policy: int, timestamp_ms: int) -> int:
        """The queue's first (BEGINNING), next (END) or first-stored-at-or-after-the-time
        (TIMESTAMP) offset."""
        ...


# ------------------------------------------------------------------------------ validation
def group_name(resource: v2.Resource, field: str = "group") -> str:
    return _named(resource, field, GROUP_NAME, v2.ILLEGAL_CONSUMER_GROUP, "group", 255)


def topic_name(resource: v2.Resource, field: str = "topic") -> str:
    return _named(resource, field, TOPIC_NAME, v2.ILLEGAL_TOPIC, "topic", 127)


def _named(
    resource: v2.Resource, field: str, pattern: re.Pattern[str], code: int, kind: str, most: int
) -> str:
    name = str(resource.name)
    if not pattern.fullmatch(name):
        why = (
            "required" if not name else f"{name!r} is not a {kind} name ([%|a-zA-Z0-9_-], ≤ {most})"
        )
        raise Refused(code, f"{field}.name: {why}")
    return name


def invisible(ms: int, low: int, high: int, field: str) -> int:
    if ms < low:
        raise Refused(v2.ILLEGAL_INVISIBLE_TIME, f"{field}: {ms} ms is too small, min is {low}")
    if ms > high:
        raise Refused(v2.ILLEGAL_INVISIBLE_TIME, f"{field}: {ms} ms is too large, max is {high}")
    return ms


def handle_of(text: str, field: str) -> str:
    if not text:
        raise Refused(v2.INVALID_RECEIPT_HANDLE, f"{field}: required")
    return text


def refused(exc: Exception, handle_field: str = "") -> v2.Status:
    """The v2 status of a refusal: the POP errors' own codes (a bad handle names
    ``handle_field``, a bad invisible time ``invisible_duration``), the rest through
    :func:`broker.grpc.service.refusal`."""
    if isinstance(exc, InvalidReceiptHandle):
        text = f"{handle_field}: {exc}" if handle_field else str(exc)
        return status(v2.INVALID_RECEIPT_HANDLE, text)
    if isinstance(exc, IllegalInvisibleTime):
        return status(v2.ILLEGAL_INVISIBLE_TIME, f"invisible_duration: {exc}")
    out = refusal(exc)
    if out is None:
        raise exc
    return out


def overall(codes: set[int]) -> v2.Status:
    """One code for all entries, else MULTIPLE_RESULTS (``AckMessageActivity.java``:196)."""
    if len(codes) == 1:
        code = next(iter(codes))
        return status(code, v2.Code.Name(code))
    return status(v2.MULTIPLE_RESULTS, "the entries have different results")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


Handler = Callable[[Any, Any], Any]


class Consumers:
    """The consumer handlers (:meth:`handlers`, registered by the service by method name) and
    the consumer part of the Settings (:meth:`settings`)."""

    def __init__(self, backend: ConsumerBackend, config: ConsumeConfig | None = None) -> None:
        self.backend = backend
        self.config = (config or ConsumeConfig()).validate()
        self._nacks: set[asyncio.Task[None]] = set()
        #: the messages of auto_renew receives (push consumers), renewed until acked
        self.renewals = Renewals(lambda: self.backend.pops)

    def _nack(self, group: str, topic: str, unsent: list[Popped]) -> None:
        """Messages popped for a stream that broke before they went out: visible again after
        :data:`NACK_INVISIBLE_MS` (``ReceiveMessageResponseStreamWriter.java``:133-150)."""

        async def nack() -> None:
            for p in unsent:
                try:
                    await self.backend.pops.change_invisible(
                        group, topic, p.handle, NACK_INVISIBLE_MS
                    )
                except BrokerRequestError as exc:
                    log.info(
                        "gRPC receive: %s not put back after a broken stream: %s", p.handle, exc
                    )

        task = asyncio.get_running_loop().create_task(nack())
        self._nacks.add(task)
        task.add_done_callback(self._nacks.discard)

    def fifo(self, group: str) -> bool:
        return group in self.config.fifo_groups

    def handlers(self) -> dict[str, Handler]:
        return {
            "QueryAssignment": self.QueryAssignment,
            "ReceiveMessage": self.ReceiveMessage,
            "AckMessage": self.AckMessage,
            "ChangeInvisibleDuration": self.ChangeInvisibleDuration,
            "ForwardMessageToDeadLetterQueue": self.ForwardMessageToDeadLetterQueue,
            "UpdateOffset": self.UpdateOffset,
            "GetOffset": self.GetOffset,
            "QueryOffset": self.QueryOffset,
        }

    def settings(self, out: v2.Settings) -> None:
        """A consumer's Settings, filled in (``GrpcClientSettingsManager.java``:106-130)."""
        c = self.config
        group = out.subscription.group.name
        sub = out.subscription
        sub.receive_batch_size = c.receive_batch_size
        sub.long_polling_timeout.FromMilliseconds(c.max_long_polling_ms)
        sub.fifo = self.fifo(group)
        out.backoff_policy.Clear()
        out.backoff_policy.max_attempts = self.backend.pops.max_attempts(group)
        for ms in DEFAULT_BACKOFF_MS:
            out.backoff_policy.customized_backoff.next.add().FromMilliseconds(ms)

    # ------------------------------------------------------------------------- assignment
    async def QueryAssignment(self, request: svc.QueryAssignmentRequest, context: Any) -> Any:
        try:
            topic = topic_name(request.topic)
            group = group_name(request.group)
            queues = await self.backend.queues(topic)
        except (Refused, BrokerRequestError) as exc:
            return svc.QueryAssignmentResponse(status=refused(exc))
        fifo = self.fifo(group)
        assignments: list[v2.Assignment] = []
        seen: set[str] = set()
        for q in queues:
            if not q.perm & PERM_READ or (not fifo and q.broker_name in seen):
                continue
            seen.add(q.broker_name)
            mq = v2.MessageQueue(
                topic=request.topic,
                id=q.queue_id if fifo else -1,
                permission=permission(q.perm),  # type: ignore[arg-type]
                broker=v2.Broker(name=q.broker_name, id=q.broker_id),
            )
            mq.broker.endpoints.CopyFrom(endpoints(*q.endpoint))
            assignments.append(v2.Assignment(message_queue=mq))
        if not assignments:
            return svc.QueryAssignmentResponse(
                status=status(v2.FORBIDDEN, f"topic {topic} has no readable queue")
            )
        return svc.QueryAssignmentResponse(status=status(v2.OK), assignments=assignments)

    # ---------------------------------------------------------------------------- receive
    def polling_ms(self, request: svc.ReceiveMessageRequest, context: Any) -> int:
        """``ReceiveMessageActivity.java``:49-77."""
        c = self.config
        left = context.time_remaining()
        remaining = None if left is None else int(left * 1000)
        if request.HasField("long_polling_timeout"):
            polling = request.long_polling_timeout.ToMilliseconds()
        elif remaining is not None:
            polling = remaining - 1500  # half the clients' 3 s request timeout
        else:
            polling = c.max_long_polling_ms
        polling = max(c.min_long_polling_ms, min(polling, c.max_long_polling_ms))
        if remaining is not None and polling > remaining:
            if remaining < c.min_long_polling_ms:
                raise Refused(
                    v2.ILLEGAL_POLLING_TIME,
                    f"long_polling_timeout: the deadline leaves {remaining} ms, less than the"
                    f" {c.min_long_polling_ms} ms of the shortest poll",
                )
            polling = remaining
        return polling

    async def ReceiveMessage(
        self, request: svc.ReceiveMessageRequest, context: Any
    ) -> AsyncIterator[svc.ReceiveMessageResponse]:
        try:
            popped = await self._receive(request, context)
        except (Refused, BrokerRequestError) as exc:
            yield svc.ReceiveMessageResponse(status=refused(exc))
        except StoreCorruptionError as exc:  # a damaged record is never handed out
            await context.abort(grpc.StatusCode.INTERNAL, f"damaged store: {exc}")
        else:
            if popped:
                unsent = list(popped)
                try:
                    yield svc.ReceiveMessageResponse(status=status(v2.OK, "OK"))
                    while unsent:
                        p = unsent.pop(0)  # handed to gRPC: sent, as far as we can know
                        m = to_message(p.message, receipt_handle=p.handle, attempt=p.attempt)
                        yield svc.ReceiveMessageResponse(message=m)
                finally:
                    group, topic = request.group.name, request.message_queue.topic.name
                    if unsent:  # the stream broke: visible again in a second
                        self._nack(group, topic, unsent)
                    if request.auto_renew:
                        sent = popped[: len(popped) - len(unsent)]
                        self.renewals.track(_client_id(context), group, topic, sent)
            else:
                yield svc.ReceiveMessageResponse(
                    status=status(v2.MESSAGE_NOT_FOUND, "no new message")
                )
        done = svc.ReceiveMessageResponse()
        done.delivery_timestamp.FromMilliseconds(_now_ms())
        yield done

    async def _receive(self, request: svc.ReceiveMessageRequest, context: Any) -> list[Popped]:
        c = self.config
        group = group_name(request.group)
        topic = topic_name(request.message_queue.topic, "message_queue.topic")
        if not 0 < request.batch_size <= MAX_BATCH:
            raise Refused(
                v2.BAD_REQUEST, f"batch_size: {request.batch_size}, must be 1 to {MAX_BATCH}"
            )
        polling = self.polling_ms(request, context)
        if request.auto_renew:
            invisible_ms = c.default_invisible_ms
        else:
            invisible_ms = invisible(
                request.invisible_duration.ToMilliseconds(),
                c.min_invisible_receive_ms,
                c.max_invisible_ms,
                "invisible_duration",
            )
        f = request.filter_expression
        if f.type == v2.SQL:
            raise Refused(v2.UNSUPPORTED, "filter_expression.type: SQL is not supported (TAG only)")
        expression = f.expression.strip() or "*"
        return await self.backend.pops.pop(
            group,
            topic,
            -1,
            request.batch_size,
            invisible_ms,
            fifo=self.fifo(group),
            expression=expression,
            wait_ms=polling,
        )

    # ------------------------------------------------------------------- ack and friends
    async def AckMessage(self, request: svc.AckMessageRequest, context: Any) -> Any:
        try:
            group = group_name(request.group)
            topic = topic_name(request.topic)
            if not request.entries:
                raise Refused(v2.BAD_REQUEST, "entries: at least one required")
        except Refused as exc:
            return svc.AckMessageResponse(status=refused(exc))
        entries = []
        for i, e in enumerate(request.entries):
            field = f"entries[{i}].receipt_handle"
            try:
                handle = await self.renewals.current(group, handle_of(e.receipt_handle, field))
                await self.backend.pops.ack(group, topic, handle)
                s = status(v2.OK, "OK")
            except (Refused, BrokerRequestError) as exc:
                s = refused(exc, field)
            entries.append(
                svc.AckMessageResultEntry(
                    message_id=e.message_id, receipt_handle=e.receipt_handle, status=s
                )
            )
        return svc.AckMessageResponse(
            status=overall({e.status.code for e in entries}), entries=entries
        )

    async def ChangeInvisibleDuration(
        self, request: svc.ChangeInvisibleDurationRequest, context: Any
    ) -> Any:
        try:
            group, topic, handle = await self._handle_target(request)
            ms = invisible(
                request.invisible_duration.ToMilliseconds(),
                0,
                self.config.max_invisible_ms,
                "invisible_duration",
            )
            popped = await self.backend.pops.change_invisible(group, topic, handle, ms)
        except (Refused, BrokerRequestError) as exc:
            return svc.ChangeInvisibleDurationResponse(status=refused(exc, "receipt_handle"))
        return svc.ChangeInvisibleDurationResponse(
            status=status(v2.OK, "OK"), receipt_handle=popped.handle
        )

    async def ForwardMessageToDeadLetterQueue(
        self, request: svc.ForwardMessageToDeadLetterQueueRequest, context: Any
    ) -> Any:
        try:
            group, topic, handle = await self._handle_target(request)
            await self.backend.pops.forward_to_dlq(group, topic, handle)
        except (Refused, BrokerRequestError) as exc:
            return svc.ForwardMessageToDeadLetterQueueResponse(
                status=refused(exc, "receipt_handle")
            )
        return svc.ForwardMessageToDeadLetterQueueResponse(status=status(v2.OK, "OK"))

    async def _handle_target(self, request: Any) -> tuple[str, str, str]:
        """The group, topic and receipt handle a handle's request names, each checked; the
        handle renewed since the client got it, if it was (the message is then forgotten by
        the renewals: the client acts on it)."""
        group, topic, handle = _handle_target(request)
        return group, topic, await self.renewals.current(group, handle)

    # ---------------------------------------------------------------------------- offsets
    def _queue(self, mq: v2.MessageQueue) -> tuple[str, int]:
        topic = topic_name(mq.topic, "message_queue.topic")
        if mq.id < 0:
            raise Refused(v2.BAD_REQUEST, f"message_queue.id: {mq.id}, must be >= 0")
        return topic, mq.id

    async def UpdateOffset(self, request: svc.UpdateOffsetRequest, context: Any) -> Any:
        try:
            group = group_name(request.group)
            topic, queue_id = self._queue(request.message_queue)
            if request.offset < 0:
                raise Refused(v2.ILLEGAL_OFFSET, f"offset: {request.offset}, must be >= 0")
            self.backend.commit_offset(group, topic, queue_id, request.offset)
        except (Refused, BrokerRequestError) as exc:
            return svc.UpdateOffsetResponse(status=refused(exc))
        return svc.UpdateOffsetResponse(status=status(v2.OK, "OK"))

    async def GetOffset(self, request: svc.GetOffsetRequest, context: Any) -> Any:
        try:
            group = group_name(request.group)
            topic, queue_id = self._queue(request.message_queue)
            offset = self.backend.offset(group, topic, queue_id)
        except (Refused, BrokerRequestError) as exc:
            return svc.GetOffsetResponse(status=refused(exc))
        if offset is None:
            return svc.GetOffsetResponse(
                status=status(
                    v2.OFFSET_NOT_FOUND,
                    f"group {group} committed no offset of {topic} queue {queue_id}",
                )
            )
        return svc.GetOffsetResponse(status=status(v2.OK, "OK"), offset=offset)

    async def QueryOffset(self, request: svc.QueryOffsetRequest, context: Any) -> Any:
        try:
            topic, queue_id = self._queue(request.message_queue)
            policy = request.query_offset_policy
            if policy not in (v2.BEGINNING, v2.END, v2.TIMESTAMP):
                raise Refused(v2.BAD_REQUEST, f"query_offset_policy: {policy} is unknown")
            if policy == v2.TIMESTAMP and not request.HasField("timestamp"):
                raise Refused(v2.BAD_REQUEST, "timestamp: required by the TIMESTAMP policy")
            ms = request.timestamp.ToMilliseconds() if policy == v2.TIMESTAMP else 0
            offset = await self.backend.queue_offset(topic, queue_id, policy, ms)
        except (Refused, BrokerRequestError) as exc:
            return svc.QueryOffsetResponse(status=refused(exc))
        return svc.QueryOffsetResponse(status=status(v2.OK, "OK"), offset=offset)


def _client_id(context: Any) -> str:
    for k, v in context.invocation_metadata() or ():
        if k == "x-mq-client-id":
            return str(v)
    return ""


def _handle_target(request: Any) -> tuple[str, str, str]:
    """The group, topic and receipt handle a handle's request names, each checked."""
    return (
        group_name(request.group),
        topic_name(request.topic),
        handle_of(request.receipt_handle, "receipt_handle"),
    )
