"""The RocketMQ 5 gRPC handlers (broker.grpc.service) against a fake backend: routes, the
settings handshake, heartbeats, sends with the quorum's answers, bad input naming the field,
and NOT_IMPLEMENTED for every other method."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from broker.grpc.service import MessagingService, RouteQueue, Sent
from broker.remoting.errors import ServiceNotAvailable, TopicNotExist
from broker.replication import PutStatus
from broker.timer.message import TimerMessageIllegal
from protos.apache.rocketmq.v2 import definition_pb2 as v2
from protos.apache.rocketmq.v2 import service_pb2 as svc
from rmq.message import Host

CLIENT = "client-1"


class Context:
    def __init__(self, client_id: str = CLIENT) -> None:
        self.metadata = [("x-mq-client-id", client_id)] if client_id else []

    def invocation_metadata(self) -> list[tuple[str, str]]:
        return self.metadata

    def peer(self) -> str:
        return "ipv4:10.1.2.3:5555"


class FakeBackend:
    max_body_bytes = 1024

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, dict[str, str], Host, int]] = []
        self.sys_flags: list[int] = []
        self.status = PutStatus.PUT_OK
        self.refuse: Exception | None = None

    async def queues(self, topic: str) -> list[RouteQueue]:
        if topic != "T":
            raise TopicNotExist(f"topic {topic} not found")
        return [
            RouteQueue("broker-a", 0, 0, 6, ("127.0.0.1", 8081)),
            RouteQueue("broker-a", 0, 1, 4, ("127.0.0.1", 8081)),
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
        if self.refuse is not None:
            raise self.refuse
        self.sent.append((topic, body, props, born, born_timestamp_ms))
        self.sys_flags.append(sys_flag)
        return Sent(self.status, 0, len(self.sent) - 1)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def message(**kw: Any) -> v2.Message:
    m = v2.Message(body=kw.pop("body", b"x"))
    m.topic.name = kw.pop("topic", "T")
    sp = m.system_properties
    sp.message_id = kw.pop("message_id", "01AABBCC")
    sp.message_type = kw.pop("message_type", v2.NORMAL)
    if "tag" in kw:
        sp.tag = kw.pop("tag")
    sp.keys.extend(kw.pop("keys", []))
    sp.born_timestamp.FromMilliseconds(kw.pop("born_ms", 1_700_000_000_123))
    sp.born_host = kw.pop("born_host", "192.168.0.9")
    m.user_properties.update(kw.pop("props", {}))
    assert not kw
    return m


def send(service: MessagingService, *messages: v2.Message) -> Any:
    return run(service.SendMessage(svc.SendMessageRequest(messages=messages), Context()))


def test_query_route_gives_queues_endpoints_permissions_and_message_types() -> None:
    service = MessagingService(FakeBackend())
    req = svc.QueryRouteRequest()
    req.topic.name = "T"
    out = run(service.QueryRoute(req, Context()))
    assert out.status.code == v2.OK
    assert [q.id for q in out.message_queues] == [0, 1]
    assert [q.permission for q in out.message_queues] == [v2.READ_WRITE, v2.READ]
    q = out.message_queues[0]
    assert q.broker.name == "broker-a" and q.broker.id == 0
    assert q.broker.endpoints.scheme == v2.IPv4
    assert [(a.host, a.port) for a in q.broker.endpoints.addresses] == [("127.0.0.1", 8081)]
    assert list(q.accept_message_types) == [v2.NORMAL, v2.FIFO, v2.DELAY, v2.TRANSACTION]


def test_query_route_refusals_name_the_topic() -> None:
    service = MessagingService(FakeBackend())
    req = svc.QueryRouteRequest()
    out = run(service.QueryRoute(req, Context()))
    assert out.status.code == v2.ILLEGAL_TOPIC and "topic.name" in out.status.message
    req.topic.name = "Nope"
    out = run(service.QueryRoute(req, Context()))
    assert out.status.code == v2.TOPIC_NOT_FOUND and "Nope" in out.status.message


async def _telemetry(service: MessagingService, ctx: Context) -> list[svc.TelemetryCommand]:
    async def commands() -> AsyncIterator[svc.TelemetryCommand]:
        c = svc.TelemetryCommand()
        c.settings.client_type = v2.PRODUCER
        c.settings.publishing.topics.add(name="T")
        yield c

    return [c async for c in service.Telemetry(commands(), ctx)]


def test_heartbeat_before_settings_is_unrecognized_then_ok_after_telemetry() -> None:
    service = MessagingService(FakeBackend(), request_timeout_ms=2500, max_attempts=4)
    beat = run(service.Heartbeat(svc.HeartbeatRequest(), Context()))
    assert beat.status.code == v2.UNRECOGNIZED_CLIENT_TYPE and CLIENT in beat.status.message
    answers = run(_telemetry(service, Context()))
    assert len(answers) == 1 and answers[0].status.code == v2.OK
    s = answers[0].settings
    assert s.publishing.max_body_size == 1024 and s.publishing.validate_message_type
    assert [t.name for t in s.publishing.topics] == ["T"]
    assert s.request_timeout.ToMilliseconds() == 2500
    assert s.backoff_policy.max_attempts == 4
    assert s.backoff_policy.WhichOneof("strategy") == "exponential_backoff"
    assert run(service.Heartbeat(svc.HeartbeatRequest(), Context())).status.code == v2.OK
    run(service.NotifyClientTermination(svc.NotifyClientTerminationRequest(), Context()))
    beat = run(service.Heartbeat(svc.HeartbeatRequest(), Context()))
    assert beat.status.code == v2.UNRECOGNIZED_CLIENT_TYPE


def test_telemetry_and_heartbeat_without_a_client_id() -> None:
    service = MessagingService(FakeBackend())
    answers = run(_telemetry(service, Context("")))
    assert answers[0].status.code == v2.CLIENT_ID_REQUIRED
    beat = run(service.Heartbeat(svc.HeartbeatRequest(), Context("")))
    assert beat.status.code == v2.CLIENT_ID_REQUIRED and "x-mq-client-id" in beat.status.message


def test_send_keeps_id_keys_tag_properties_and_body() -> None:
    backend = FakeBackend()
    service = MessagingService(backend)
    body = bytes(range(256))
    out = send(service, message(body=body, tag="TagA", keys=["k1", "k2"], props={"a": "1"}))
    assert out.status.code == v2.OK
    assert [(e.status.code, e.message_id, e.offset) for e in out.entries] == [
        (v2.OK, "01AABBCC", 0)
    ]
    topic, stored, props, born, born_ms = backend.sent[0]
    assert (topic, stored) == ("T", body)
    assert props == {
        "a": "1",
        "TAGS": "TagA",
        "KEYS": "k1 k2",
        "UNIQ_KEY": "01AABBCC",
        "WAIT": "true",
    }
    assert born == Host("192.168.0.9", 0) and born_ms == 1_700_000_000_123


def test_send_born_host_falls_back_to_the_peer() -> None:
    backend = FakeBackend()
    send(MessagingService(backend), message(born_host="not-an-ip"))
    assert backend.sent[0][3] == Host("10.1.2.3", 0)


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH, v2.HA_NOT_AVAILABLE),
        (PutStatus.SLAVE_NOT_AVAILABLE, v2.HA_NOT_AVAILABLE),
        (PutStatus.FLUSH_SLAVE_TIMEOUT, v2.SLAVE_PERSISTENCE_TIMEOUT),
        (PutStatus.FLUSH_DISK_TIMEOUT, v2.MASTER_PERSISTENCE_TIMEOUT),
        (PutStatus.SERVICE_NOT_AVAILABLE, v2.INTERNAL_SERVER_ERROR),
        (PutStatus.UNKNOWN_ERROR, v2.INTERNAL_SERVER_ERROR),
    ],
)
def test_send_is_ok_only_for_put_ok(status: PutStatus, code: int) -> None:
    backend = FakeBackend()
    backend.status = status
    out = send(MessagingService(backend), message())
    assert out.status.code == code and status.value in out.status.message
    assert out.entries[0].status.code == code


def test_send_refusals_from_the_send_path() -> None:
    backend = FakeBackend()
    service = MessagingService(backend)
    backend.refuse = TopicNotExist("topic[T] not exist, apply first please!")
    assert send(service, message()).status.code == v2.TOPIC_NOT_FOUND
    backend.refuse = ServiceNotAvailable("slave")
    out = send(service, message())
    assert out.status.code == v2.HA_NOT_AVAILABLE and "slave" in out.status.message


@pytest.mark.parametrize(
    ("kw", "code", "field"),
    [
        ({"topic": ""}, v2.ILLEGAL_TOPIC, "messages[0].topic.name"),
        ({"body": b""}, v2.MESSAGE_BODY_EMPTY, "messages[0].body"),
        ({"body": b"x" * 1025}, v2.MESSAGE_BODY_TOO_LARGE, "messages[0].body"),
        ({"message_id": ""}, v2.ILLEGAL_MESSAGE_ID, "system_properties.message_id"),
        ({"message_type": v2.LITE}, v2.UNSUPPORTED, "system_properties.message_type"),
        ({"tag": "a|b"}, v2.ILLEGAL_MESSAGE_TAG, "system_properties.tag"),
        ({"keys": ["a b"]}, v2.ILLEGAL_MESSAGE_KEY, "system_properties.keys"),
        ({"props": {"UNIQ_KEY": "x"}}, v2.ILLEGAL_MESSAGE_PROPERTY_KEY, "user_properties"),
        ({"props": {"a": "\x01"}}, v2.ILLEGAL_MESSAGE_PROPERTY_KEY, "user_properties"),
    ],
)
def test_bad_input_gets_its_code_and_names_the_field(
    kw: dict[str, Any], code: int, field: str
) -> None:
    backend = FakeBackend()
    out = send(MessagingService(backend), message(**kw))
    assert out.status.code == code and field in out.status.message
    assert backend.sent == []


def test_send_without_messages_and_mixed_results() -> None:
    backend = FakeBackend()
    service = MessagingService(backend)
    out = send(service)
    assert out.status.code == v2.BAD_REQUEST and "messages" in out.status.message
    out = send(service, message(), message(topic=""))
    assert out.status.code == v2.MULTIPLE_RESULTS
    assert [e.status.code for e in out.entries] == [v2.OK, v2.ILLEGAL_TOPIC]


def test_every_other_method_answers_not_implemented_naming_it() -> None:
    service = MessagingService(FakeBackend())
    methods = svc.DESCRIPTOR.services_by_name["MessagingService"].methods
    others = [m for m in methods if m.name not in ("QueryRoute", "Telemetry", "Heartbeat",
              "SendMessage", "NotifyClientTermination")]  # fmt: skip
    assert {m.name for m in others} >= {"ReceiveMessage", "AckMessage", "QueryAssignment"}
    for m in others:
        request = getattr(svc, m.input_type.name)()
        handler = getattr(service, m.name)

        async def call(
            h: Any = handler, r: Any = request, streaming: bool = m.server_streaming
        ) -> list[Any]:
            if streaming:
                return [x async for x in h(r, Context())]
            return [await h(r, Context())]

        answers = run(call())
        assert len(answers) == 1, m.name
        assert answers[0].status.code == v2.NOT_IMPLEMENTED, m.name
        assert m.name in answers[0].status.message


def delay_message(at_ms: int | None) -> v2.Message:
    m = message(message_type=v2.DELAY)
    if at_ms is not None:
        m.system_properties.delivery_timestamp.FromMilliseconds(at_ms)
    return m


def test_a_delay_message_carries_its_delivery_timestamp_as_timer_deliver_ms() -> None:
    backend = FakeBackend()
    out = send(MessagingService(backend), delay_message(1_700_000_060_000))
    assert out.status.code == v2.OK
    (_, _, props, _, _) = backend.sent[0]
    assert props["TIMER_DELIVER_MS"] == "1700000060000"


@pytest.mark.parametrize(
    ("m", "refuse"),
    [
        (delay_message(None), None),
        (message(), TimerMessageIllegal("timer message illegal ... (timerMaxDelaySec=259200)")),
        (message(props={"TIMER_DELAY_SEC": "5"}), None),
    ],
)
def test_bad_delivery_times_are_illegal_delivery_time(
    m: v2.Message, refuse: Exception | None
) -> None:
    backend = FakeBackend()
    backend.refuse = refuse
    out = send(MessagingService(backend), m)
    wanted = v2.ILLEGAL_DELIVERY_TIME if refuse or not m.user_properties else (
        v2.ILLEGAL_MESSAGE_PROPERTY_KEY)  # fmt: skip
    assert out.status.code == wanted
    field = "user_properties" if m.user_properties else "system_properties.delivery_timestamp"
    assert field in out.status.message
    assert backend.sent == []


def test_milliseconds_in_the_seconds_field_are_illegal_delivery_time() -> None:
    """What rocketmq-python-client 5.1.2 sends for ``delivery_timestamp = <ms>``."""
    backend = FakeBackend()
    m = delay_message(None)
    m.system_properties.delivery_timestamp.seconds = 1_700_000_060_000
    out = send(MessagingService(backend), m)
    assert out.status.code == v2.ILLEGAL_DELIVERY_TIME
    assert "messages[0].system_properties.delivery_timestamp" in out.status.message
    assert backend.sent == []


def test_clients_are_counted_by_user_agent_and_silent_ones_forgotten() -> None:
    from broker.clients import ClientKey, GrpcClients

    now = [0.0]
    service = MessagingService(FakeBackend(), agents=GrpcClients(120, clock=lambda: now[0]))

    async def settings() -> AsyncIterator[svc.TelemetryCommand]:
        c = svc.TelemetryCommand()
        c.settings.client_type = v2.PRODUCER
        c.settings.user_agent.language = v2.NODE_JS
        c.settings.user_agent.version = "1.0.8"
        yield c

    run(_collect(service.Telemetry(settings(), Context("c1"))))
    run(_collect(service.Telemetry(settings(), Context("c2"))))
    assert service.agents.keys() == [ClientKey("grpc", "node_js", "1.0.8")] * 2
    run(service.NotifyClientTermination(svc.NotifyClientTerminationRequest(), Context("c2")))
    assert "c2" not in service.agents and "c2" not in service.clients
    now[0] = 100.0
    assert run(service.Heartbeat(svc.HeartbeatRequest(), Context("c1"))).status.code == v2.OK
    now[0] = 219.0
    assert service.agents.expire() == []  # the heartbeat at 100 keeps it until 220
    now[0] = 221.0
    assert service.agents.expire() == ["c1"] and service.clients == {}
    beat = run(service.Heartbeat(svc.HeartbeatRequest(), Context("c1")))
    assert beat.status.code == v2.UNRECOGNIZED_CLIENT_TYPE  # it must send its settings again


async def _collect(stream: AsyncIterator[Any]) -> list[Any]:
    return [item async for item in stream]
