"""The RocketMQ 5 consumer handlers (broker.grpc.consume) over a fake POP service: the stored
message → v2.Message conversion, assignments, the receive stream and its clamps, acks, invisible
time, the DLQ, offsets, the consumer Settings and FIFO sends; bad input names the field and
changes nothing."""

from __future__ import annotations

import asyncio
import hashlib
import zlib
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from broker.grpc.consume import ConsumeConfig, Consumers
from broker.grpc.convert import to_message
from broker.grpc.service import MessagingService, RouteQueue, Sent
from broker.pop.errors import IllegalPopRequest, InvalidReceiptHandle
from broker.pop.service import Popped
from broker.remoting.errors import TopicNotExist
from broker.replication import PutStatus
from protos.apache.rocketmq.v2 import definition_pb2 as v2
from protos.apache.rocketmq.v2 import service_pb2 as svc
from rmq.message import SYSFLAG_COMPRESSED, Host, StoredMessage

CLIENT = "client-1"


class Context:
    def __init__(self, remaining_s: float | None = 30.0) -> None:
        self.remaining_s = remaining_s

    def invocation_metadata(self) -> list[tuple[str, str]]:
        return [("x-mq-client-id", CLIENT)]

    def peer(self) -> str:
        return "ipv4:10.1.2.3:5555"

    def time_remaining(self) -> float | None:
        return self.remaining_s


def stored(offset: int = 0, **props: str) -> StoredMessage:
    return StoredMessage(
        topic="T",
        body=b"body-%d" % offset,
        queue_id=1,
        queue_offset=offset,
        born_timestamp=1_700_000_000_000,
        born_host=Host("10.0.0.7", 40000),
        store_timestamp=1_700_000_000_500,
        store_host=Host("127.0.0.1", 10911),
        properties={"UNIQ_KEY": f"ID{offset}", **props},
    )


class FakePops:
    def __init__(self) -> None:
        self.ready: list[StoredMessage] = []
        self.inflight: dict[str, Popped] = {}
        self.calls: list[tuple[Any, ...]] = []
        self.acked: list[str] = []
        self.dlq: list[str] = []
        self.refuse: Exception | None = None

    async def pop(
        self,
        group: str,
        topic: str,
        queue_id: int,
        max_messages: int,
        invisible_ms: int,
        *,
        fifo: bool = False,
        expression: str = "*",
        wait_ms: int = 0,
    ) -> list[Popped]:
        self.calls.append((group, topic, queue_id, max_messages, invisible_ms, fifo, expression,
                           wait_ms))  # fmt: skip
        if self.refuse is not None:
            raise self.refuse
        out = []
        for m in self.ready[:max_messages]:
            p = Popped(m, f"{group}:{m.queue_offset}:1", 1, 1_000 + invisible_ms)
            self.inflight[p.handle] = p
            out.append(p)
        del self.ready[:max_messages]
        return out

    def _take(self, group: str, handle: str) -> Popped:
        p = self.inflight.get(handle)
        if p is None or not handle.startswith(group + ":"):
            raise InvalidReceiptHandle(f"{handle!r} names no message in flight for {group}")
        return self.inflight.pop(handle)

    async def ack(self, group: str, topic: str, handle: str) -> None:
        self._take(group, handle)
        self.acked.append(handle)

    async def change_invisible(
        self, group: str, topic: str, handle: str, invisible_ms: int
    ) -> Popped:
        p = self._take(group, handle)
        n = Popped(p.message, handle + "'", p.attempt, 1_000 + invisible_ms)
        self.inflight[n.handle] = n
        return n

    async def forward_to_dlq(self, group: str, topic: str, handle: str) -> None:
        self._take(group, handle)
        self.dlq.append(handle)

    def max_attempts(self, group: str) -> int:
        return 4


class FakeBackend:
    max_body_bytes = 1024

    def __init__(self) -> None:
        self.pops = FakePops()
        self.offsets: dict[tuple[str, str, int], int] = {}
        self.sent: list[dict[str, str]] = []

    async def queues(self, topic: str) -> list[RouteQueue]:
        if topic != "T":
            raise TopicNotExist(f"topic {topic} not found")
        a, b = ("127.0.0.1", 8081), ("127.0.0.1", 8091)
        return [
            RouteQueue("broker-a", 0, 0, 6, a),
            RouteQueue("broker-a", 0, 1, 6, a),
            RouteQueue("broker-a", 0, 2, 2, a),  # write only
            RouteQueue("broker-b", 0, 0, 4, b),
        ]

    async def send(
        self,
        topic: str,
        body: bytes,
        props: dict[str, str],
        born: Host,
        born_timestamp_ms: int,
        sys_flag: int = 0,
    ) -> Sent:
        self.sent.append(props)
        return Sent(PutStatus.PUT_OK, 0, len(self.sent) - 1)

    def offset(self, group: str, topic: str, queue_id: int) -> int | None:
        return self.offsets.get((group, topic, queue_id))

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.offsets[(group, topic, queue_id)] = offset

    async def queue_offset(self, topic: str, queue_id: int, policy: int, timestamp_ms: int) -> int:
        return {v2.BEGINNING: 3, v2.END: 42}.get(policy, timestamp_ms // 1000)


CONFIG = ConsumeConfig(fifo_groups=frozenset({"FifoGroup"}))


def consumers(backend: FakeBackend | None = None) -> Consumers:
    return Consumers(backend or FakeBackend(), CONFIG)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def receive(c: Consumers, ctx: Context | None = None, **kw: Any) -> list[Any]:
    req = svc.ReceiveMessageRequest(batch_size=kw.pop("batch_size", 32))
    req.group.name = kw.pop("group", "G")
    req.message_queue.topic.name = kw.pop("topic", "T")
    req.message_queue.id = 0
    req.invisible_duration.FromMilliseconds(kw.pop("invisible_ms", 30_000))
    if "polling_ms" in kw:
        req.long_polling_timeout.FromMilliseconds(kw.pop("polling_ms"))
    req.auto_renew = kw.pop("auto_renew", False)
    req.filter_expression.type = kw.pop("filter_type", v2.TAG)
    req.filter_expression.expression = kw.pop("expression", "")
    assert not kw

    async def go() -> list[Any]:
        return [r async for r in c.ReceiveMessage(req, ctx or Context())]

    return run(go())


# --------------------------------------------------------------------------- the conversion
def test_to_message_carries_every_field_a_5x_consumer_reads() -> None:
    body = bytes(range(256))
    m = stored(7, TAGS="TagA", KEYS="k1 k2", a="1", WAIT="true", __SHARDINGKEY="g1").\
        _replace(body=body, reconsume_times=2)  # fmt: skip
    out = to_message(m, receipt_handle="H", attempt=0)
    sp = out.system_properties
    assert out.topic.name == "T" and out.body == body
    assert dict(out.user_properties) == {"a": "1"}
    assert sp.tag == "TagA" and list(sp.keys) == ["k1", "k2"]
    assert sp.message_id == "ID7" and sp.receipt_handle == "H"
    assert sp.body_encoding == v2.IDENTITY and sp.body_digest.type == v2.MD5
    assert sp.body_digest.checksum == hashlib.md5(body).hexdigest().upper()
    assert sp.message_type == v2.FIFO and sp.message_group == "g1"
    assert sp.born_timestamp.ToMilliseconds() == 1_700_000_000_000 and sp.born_host == "10.0.0.7"
    assert sp.store_timestamp.ToMilliseconds() == 1_700_000_000_500
    assert sp.store_host == "127.0.0.1:10911"
    assert (sp.queue_id, sp.queue_offset, sp.delivery_attempt) == (1, 7, 3)
    assert to_message(m, attempt=5).system_properties.delivery_attempt == 5
    assert not to_message(stored()).system_properties.HasField("receipt_handle")


def test_to_message_inflates_types_and_origins() -> None:
    body = b"x" * 5000
    m = stored(1)._replace(body=zlib.compress(body), sysflag=SYSFLAG_COMPRESSED)
    out = to_message(m)
    assert out.body == body and out.system_properties.body_encoding == v2.IDENTITY
    assert to_message(stored(DELAY="3")).system_properties.message_type == v2.DELAY
    timed = to_message(stored(TIMER_DELIVER_MS="1700000009000")).system_properties
    assert timed.message_type == v2.DELAY
    assert timed.delivery_timestamp.ToMilliseconds() == 1_700_000_009_000
    assert to_message(stored(TRAN_MSG="true")).system_properties.message_type == v2.TRANSACTION
    assert to_message(stored()).system_properties.message_type == v2.NORMAL
    retried = stored(RETRY_TOPIC="T")._replace(topic="%RETRY%G")
    assert to_message(retried).topic.name == "T"
    dead = to_message(stored(DLQ_ORIGIN_TOPIC="T", DLQ_ORIGIN_MESSAGE_ID="ID0"))
    assert dead.system_properties.dead_letter_queue.topic == "T"
    assert dead.system_properties.dead_letter_queue.message_id == "ID0"
    no_uniq = StoredMessage(topic="T", body=b"b", physical_offset=99)
    assert to_message(no_uniq).system_properties.message_id == no_uniq.msg_id


# --------------------------------------------------------------------------- assignments
def assignment(c: Consumers, group: str = "G", topic: str = "T") -> Any:
    req = svc.QueryAssignmentRequest()
    req.topic.name, req.group.name = topic, group
    return run(c.QueryAssignment(req, Context()))


def test_assignment_is_one_per_readable_broker_or_per_queue_for_fifo() -> None:
    out = assignment(consumers())
    assert out.status.code == v2.OK
    got = [(a.message_queue.broker.name, a.message_queue.id) for a in out.assignments]
    assert got == [("broker-a", -1), ("broker-b", -1)]
    ep = out.assignments[1].message_queue.broker.endpoints.addresses[0]
    assert (ep.host, ep.port) == ("127.0.0.1", 8091)
    fifo = assignment(consumers(), group="FifoGroup")
    got = [(a.message_queue.broker.name, a.message_queue.id) for a in fifo.assignments]
    assert got == [("broker-a", 0), ("broker-a", 1), ("broker-b", 0)]
    assert fifo.assignments[2].message_queue.permission == v2.READ


def test_assignment_refusals_name_the_field() -> None:
    c = consumers()
    assert assignment(c, topic="Nope").status.code == v2.TOPIC_NOT_FOUND
    out = assignment(c, group="")
    assert out.status.code == v2.ILLEGAL_CONSUMER_GROUP and "group.name" in out.status.message
    out = assignment(c, topic="bad topic")
    assert out.status.code == v2.ILLEGAL_TOPIC and "topic.name" in out.status.message


# ------------------------------------------------------------------------------ receive
def test_receive_streams_status_messages_then_the_delivery_timestamp() -> None:
    backend = FakeBackend()
    backend.pops.ready = [stored(0, TAGS="a"), stored(1)]
    out = receive(consumers(backend), expression="a || b")
    assert out[0].status.code == v2.OK
    assert [r.message.system_properties.message_id for r in out[1:3]] == ["ID0", "ID1"]
    assert out[1].message.system_properties.receipt_handle == "G:0:1"
    assert out[1].message.system_properties.delivery_attempt == 1
    assert out[3].WhichOneof("content") == "delivery_timestamp" and len(out) == 4
    group, topic, queue, n, invisible_ms, fifo, expression, wait = backend.pops.calls[0]
    assert (group, topic, queue, n, invisible_ms, fifo) == ("G", "T", -1, 32, 30_000, False)
    assert expression == "a || b" and wait == 20_000  # 30 s left: clamped to the 20 s max


def test_messages_a_broken_stream_did_not_carry_are_visible_again_in_a_second() -> None:
    backend = FakeBackend()
    backend.pops.ready = [stored(0), stored(1), stored(2)]
    c = consumers(backend)
    req = svc.ReceiveMessageRequest(batch_size=3)
    req.group.name, req.message_queue.topic.name = "G", "T"
    req.invisible_duration.FromSeconds(30)

    async def go() -> None:
        stream = c.ReceiveMessage(req, Context())
        assert (await anext(stream)).status.code == v2.OK
        assert (await anext(stream)).message.system_properties.receipt_handle == "G:0:1"
        await stream.aclose()  # the client went away
        await asyncio.sleep(0)
        await asyncio.gather(*c._nacks)

    run(go())
    assert {h: p.visible_at_ms for h, p in backend.pops.inflight.items()} == {
        "G:0:1": 31_000, "G:1:1'": 2_000, "G:2:1'": 2_000,
    }  # fmt: skip


def test_receive_with_nothing_is_message_not_found() -> None:
    out = receive(consumers())
    assert [r.WhichOneof("content") for r in out] == ["status", "delivery_timestamp"]
    assert out[0].status.code == v2.MESSAGE_NOT_FOUND


@pytest.mark.parametrize(
    ("polling_ms", "remaining_s", "wait_ms"),
    [(1_000, 30.0, 5_000), (60_000, 30.0, 20_000), (15_000, 8.0, 8_000), (None, 12.0, 10_500)],
)
def test_long_polling_is_clamped_as_the_proxy_does(
    polling_ms: int | None, remaining_s: float, wait_ms: int
) -> None:
    backend = FakeBackend()
    kw = {} if polling_ms is None else {"polling_ms": polling_ms}
    receive(consumers(backend), Context(remaining_s), **kw)
    assert backend.pops.calls[0][-1] == wait_ms


def test_fifo_groups_pop_in_order_and_auto_renew_takes_the_default_invisible_time() -> None:
    backend = FakeBackend()
    receive(consumers(backend), group="FifoGroup", auto_renew=True, invisible_ms=0)
    assert backend.pops.calls[0][4:6] == (60_000, True)
    backend = FakeBackend()  # the broker's --pop-auto-renew-invisible-ms
    short = Consumers(backend, replace(CONFIG, default_invisible_ms=8_000))
    receive(short, group="FifoGroup", auto_renew=True, invisible_ms=0)
    assert backend.pops.calls[0][4:6] == (8_000, True)


@pytest.mark.parametrize(
    ("kw", "ctx", "code", "field"),
    [
        ({"group": ""}, None, v2.ILLEGAL_CONSUMER_GROUP, "group.name"),
        ({"topic": ""}, None, v2.ILLEGAL_TOPIC, "message_queue.topic.name"),
        ({"batch_size": 0}, None, v2.BAD_REQUEST, "batch_size"),
        ({"batch_size": 33}, None, v2.BAD_REQUEST, "batch_size"),
        ({"invisible_ms": 9_999}, None, v2.ILLEGAL_INVISIBLE_TIME, "invisible_duration"),
        ({"invisible_ms": 12 * 3_600_000 + 1}, None, v2.ILLEGAL_INVISIBLE_TIME,
         "invisible_duration"),
        ({"filter_type": v2.SQL}, None, v2.UNSUPPORTED, "filter_expression.type"),
        ({}, Context(3.0), v2.ILLEGAL_POLLING_TIME, "long_polling_timeout"),
    ],
)  # fmt: skip
def test_bad_receives_name_the_field_and_pop_nothing(
    kw: dict[str, Any], ctx: Context | None, code: int, field: str
) -> None:
    backend = FakeBackend()
    backend.pops.ready = [stored(0)]
    out = receive(consumers(backend), ctx, **kw)
    assert out[0].status.code == code and field in out[0].status.message, out[0]
    assert out[1].WhichOneof("content") == "delivery_timestamp"
    assert backend.pops.calls == [] and len(backend.pops.ready) == 1


def test_receive_refusals_of_the_pop_service() -> None:
    backend = FakeBackend()
    backend.pops.refuse = TopicNotExist("topic Nope not found")
    assert receive(consumers(backend))[0].status.code == v2.TOPIC_NOT_FOUND
    backend.pops.refuse = IllegalPopRequest("queue 9 of T does not exist")
    assert receive(consumers(backend))[0].status.code == v2.BAD_REQUEST


# --------------------------------------------------------------------- ack and friends
def ack(c: Consumers, *handles: str, group: str = "G") -> Any:
    req = svc.AckMessageRequest(
        entries=[svc.AckMessageEntry(message_id=f"M{i}", receipt_handle=h)
                 for i, h in enumerate(handles)]
    )  # fmt: skip
    req.group.name, req.topic.name = group, "T"
    return run(c.AckMessage(req, Context()))


def test_ack_takes_each_handle_once() -> None:
    backend = FakeBackend()
    c = consumers(backend)
    backend.pops.ready = [stored(0), stored(1)]
    receive(c)
    out = ack(c, "G:0:1", "G:1:1")
    assert out.status.code == v2.OK and [e.status.code for e in out.entries] == [v2.OK, v2.OK]
    assert [(e.message_id, e.receipt_handle) for e in out.entries] == [
        ("M0", "G:0:1"), ("M1", "G:1:1"),
    ]  # fmt: skip
    again = ack(c, "G:0:1")
    assert again.status.code == v2.INVALID_RECEIPT_HANDLE
    assert "entries[0].receipt_handle" in again.entries[0].status.message


def test_acks_for_another_group_unknown_or_missing_handles_change_nothing() -> None:
    backend = FakeBackend()
    c = consumers(backend)
    backend.pops.ready = [stored(0)]
    receive(c)
    other = ack(c, "G:0:1", group="Other")
    assert other.status.code == v2.INVALID_RECEIPT_HANDLE and backend.pops.acked == []
    mixed = ack(c, "G:0:1", "")
    assert mixed.status.code == v2.MULTIPLE_RESULTS
    assert [e.status.code for e in mixed.entries] == [v2.OK, v2.INVALID_RECEIPT_HANDLE]
    assert "entries[1].receipt_handle: required" in mixed.entries[1].status.message
    empty = ack(c)
    assert empty.status.code == v2.BAD_REQUEST and "entries" in empty.status.message
    bad = ack(c, "x", group="no group!")
    assert bad.status.code == v2.ILLEGAL_CONSUMER_GROUP


def change(c: Consumers, handle: str, ms: int) -> Any:
    req = svc.ChangeInvisibleDurationRequest(receipt_handle=handle, message_id="M")
    req.group.name, req.topic.name = "G", "T"
    req.invisible_duration.FromMilliseconds(ms)
    return run(c.ChangeInvisibleDuration(req, Context()))


def test_change_invisible_duration_answers_the_new_handle() -> None:
    backend = FakeBackend()
    c = consumers(backend)
    backend.pops.ready = [stored(0)]
    receive(c)
    out = change(c, "G:0:1", 1_000)
    assert out.status.code == v2.OK and out.receipt_handle == "G:0:1'"
    assert backend.pops.inflight["G:0:1'"].visible_at_ms == 2_000
    for ms in (-1, 12 * 3_600_000 + 1):
        bad = change(c, "G:0:1'", ms)
        assert bad.status.code == v2.ILLEGAL_INVISIBLE_TIME
        assert "invisible_duration" in bad.status.message
    stale = change(c, "G:0:1", 1_000)
    assert stale.status.code == v2.INVALID_RECEIPT_HANDLE
    assert "receipt_handle" in stale.status.message
    assert change(c, "", 1_000).status.code == v2.INVALID_RECEIPT_HANDLE
    assert list(backend.pops.inflight) == ["G:0:1'"]


def test_forward_to_the_dead_letter_queue() -> None:
    backend = FakeBackend()
    c = consumers(backend)
    backend.pops.ready = [stored(0)]
    receive(c)
    req = svc.ForwardMessageToDeadLetterQueueRequest(receipt_handle="G:0:1", message_id="M")
    req.group.name, req.topic.name = "G", "T"
    assert run(c.ForwardMessageToDeadLetterQueue(req, Context())).status.code == v2.OK
    assert backend.pops.dlq == ["G:0:1"]
    again = run(c.ForwardMessageToDeadLetterQueue(req, Context()))
    assert again.status.code == v2.INVALID_RECEIPT_HANDLE


# ------------------------------------------------------------------------------ offsets
def test_offsets_update_get_and_query() -> None:
    backend = FakeBackend()
    c = consumers(backend)
    mq = v2.MessageQueue(id=2)
    mq.topic.name = "T"
    group = v2.Resource(name="G")
    get = svc.GetOffsetRequest(group=group, message_queue=mq)
    assert run(c.GetOffset(get, Context())).status.code == v2.OFFSET_NOT_FOUND
    up = svc.UpdateOffsetRequest(group=group, message_queue=mq, offset=17)
    assert run(c.UpdateOffset(up, Context())).status.code == v2.OK
    got = run(c.GetOffset(get, Context()))
    assert (got.status.code, got.offset) == (v2.OK, 17)
    bad = run(c.UpdateOffset(svc.UpdateOffsetRequest(group=group, message_queue=mq, offset=-1),
                             Context()))  # fmt: skip
    assert bad.status.code == v2.ILLEGAL_OFFSET and "offset" in bad.status.message
    assert backend.offsets == {("G", "T", 2): 17}
    q = svc.QueryOffsetRequest(message_queue=mq, query_offset_policy=v2.BEGINNING)
    assert run(c.QueryOffset(q, Context())).offset == 3
    q.query_offset_policy = v2.END
    assert run(c.QueryOffset(q, Context())).offset == 42
    q.query_offset_policy = v2.TIMESTAMP
    missing = run(c.QueryOffset(q, Context()))
    assert missing.status.code == v2.BAD_REQUEST and "timestamp" in missing.status.message
    q.timestamp.FromMilliseconds(9_000)
    assert run(c.QueryOffset(q, Context())).offset == 9
    mq.id = -1
    neg = run(c.GetOffset(svc.GetOffsetRequest(group=group, message_queue=mq), Context()))
    assert neg.status.code == v2.BAD_REQUEST and "message_queue.id" in neg.status.message


# ------------------------------------------------------------------ the service around it
def test_a_consumer_gets_subscription_settings_and_the_groups_backoff() -> None:
    backend = FakeBackend()
    service = MessagingService(backend, consumers=consumers(backend))

    async def telemetry(group: str) -> v2.Settings:
        async def commands() -> AsyncIterator[svc.TelemetryCommand]:
            c = svc.TelemetryCommand()
            c.settings.client_type = v2.PUSH_CONSUMER
            c.settings.subscription.group.name = group
            yield c

        answers = [a async for a in service.Telemetry(commands(), Context())]
        return answers[0].settings

    s = run(telemetry("G"))
    assert s.subscription.group.name == "G" and not s.subscription.fifo
    assert s.subscription.receive_batch_size == 32
    assert s.subscription.long_polling_timeout.ToMilliseconds() == 20_000
    assert s.backoff_policy.max_attempts == 4
    nexts = [d.ToMilliseconds() for d in s.backoff_policy.customized_backoff.next]
    assert nexts[:4] == [1_000, 5_000, 10_000, 30_000] and nexts[-1] == 7_200_000
    assert run(telemetry("FifoGroup")).subscription.fifo
    # the consumer handlers are the service's
    req = svc.QueryAssignmentRequest()
    req.topic.name, req.group.name = "T", "G"
    assert run(service.QueryAssignment(req, Context())).status.code == v2.OK


def fifo_message(group: str | None, message_type: int = v2.FIFO) -> v2.Message:
    m = v2.Message(body=b"x")
    m.topic.name = "T"
    m.system_properties.message_id = "01AA"
    m.system_properties.message_type = message_type  # type: ignore[assignment]
    if group is not None:
        m.system_properties.message_group = group
    return m


def test_fifo_sends_store_the_message_group_as_the_sharding_key() -> None:
    backend = FakeBackend()
    service = MessagingService(backend)

    def send(m: v2.Message) -> Any:
        return run(service.SendMessage(svc.SendMessageRequest(messages=[m]), Context()))

    assert send(fifo_message("order-1")).status.code == v2.OK
    assert backend.sent[0]["__SHARDINGKEY"] == "order-1"
    for group in (None, "  ", "a\nb", "g" * 64):
        out = send(fifo_message(group))
        assert out.status.code == v2.ILLEGAL_MESSAGE_GROUP, group
        assert "messages[0].system_properties.message_group" in out.status.message
    assert len(backend.sent) == 1


def test_config_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="fifo_groups"):
        ConsumeConfig(fifo_groups=frozenset({"bad group"})).validate()
    with pytest.raises(ValueError, match="min_long_polling_ms"):
        ConsumeConfig(min_long_polling_ms=30_000).validate()
    with pytest.raises(ValueError, match="default_invisible_ms"):
        ConsumeConfig(default_invisible_ms=0).validate()
