"""A replica that is not the master forwards the gRPC front's message calls to the master's
front (broker.grpc.forward): real grpc.aio servers in process, one a "master", one a
"slave" with the interceptor; the published gRPC addresses and QueryRoute's endpoints from a
fake metaledger client."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import grpc

from broker.grpc.forward import FORWARDED, Forwarding, GroupFronts, grpc_key, role_view
from broker.grpc.front import grpc_front
from broker.grpc.service import MessagingService, RouteQueue, endpoints
from broker.quorum.role import Role
from nameserver.client import NotFound
from protos.apache.rocketmq.v2 import definition_pb2 as v2
from protos.apache.rocketmq.v2 import service_pb2 as svc
from protos.apache.rocketmq.v2 import service_pb2_grpc as svc_grpc
from tests.unit.broker.front.test_grpc_service import FakeBackend, message

META = [("x-mq-client-id", "c1")]
Address = tuple[str, int]


class RecordingService(MessagingService):
    """The master: records what each SendMessage came with."""

    def __init__(self) -> None:
        super().__init__(FakeBackend())
        self.seen: list[tuple[dict[str, str], float | None]] = []

    async def SendMessage(self, request: svc.SendMessageRequest, context: Any) -> Any:
        self.seen.append((dict(context.invocation_metadata()), context.time_remaining()))
        return await super().SendMessage(request, context)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scenario(
    body: Callable[[svc_grpc.MessagingServiceStub, RecordingService, Forwarding], Awaitable[None]],
    where: Callable[[Address], Awaitable[Address | None]] | None = None,
) -> None:
    """A master and a slave forwarding to it (``where(master)`` says where, per call)."""

    async def main() -> None:
        master = RecordingService()
        m_server, m_port = await grpc_front(master, "127.0.0.1", 0)
        target = ("127.0.0.1", m_port)

        async def to_master() -> Address | None:
            return target if where is None else await where(target)

        forwarding = Forwarding(to_master, ("127.0.0.1", 1))
        s_server, s_port = await grpc_front(
            MessagingService(FakeBackend()), "127.0.0.1", 0, [forwarding]
        )
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{s_port}") as ch:
                await body(svc_grpc.MessagingServiceStub(ch), master, forwarding)
        finally:
            await forwarding.close()
            await s_server.stop(None)
            await m_server.stop(None)

    asyncio.run(main())


def send_request() -> svc.SendMessageRequest:
    return svc.SendMessageRequest(messages=[message(body=b"fwd")])


def test_a_send_to_a_slave_is_stored_by_the_master_with_metadata_and_deadline() -> None:
    async def body(stub: Any, master: RecordingService, fwd: Forwarding) -> None:
        answer = await stub.SendMessage(send_request(), metadata=META, timeout=5)
        assert answer.status.code == v2.OK, answer.status.message
        assert [s[1] for s in master.backend.sent] == [b"fwd"]  # type: ignore[attr-defined]
        ((meta, remaining),) = master.seen
        assert meta["x-mq-client-id"] == "c1" and meta[FORWARDED] == "127.0.0.1:1"
        assert remaining is not None and 0 < remaining <= 5
        # the channel to the master is reused
        await stub.SendMessage(send_request(), metadata=META)
        assert fwd.forwarded == 2 and len(fwd._channels) == 1

    scenario(body)


def test_local_methods_are_answered_by_the_replica_called() -> None:
    async def body(stub: Any, master: RecordingService, fwd: Forwarding) -> None:
        req = svc.QueryRouteRequest()
        req.topic.name = "T"
        route = await stub.QueryRoute(req, metadata=META)
        assert route.status.code == v2.OK
        beat = await stub.Heartbeat(svc.HeartbeatRequest(), metadata=META)
        assert beat.status.code == v2.UNRECOGNIZED_CLIENT_TYPE  # no settings on this one
        assert fwd.forwarded == 0

    scenario(body)


def test_the_master_serves_itself_and_a_forwarded_call_is_not_forwarded_again() -> None:
    async def body(stub: Any, master: RecordingService, fwd: Forwarding) -> None:
        assert (await stub.SendMessage(send_request(), metadata=META)).status.code == v2.OK
        marked = [*META, (FORWARDED, "10.0.0.1:8081")]
        assert (await stub.SendMessage(send_request(), metadata=marked)).status.code == v2.OK
        assert fwd.forwarded == 0 and master.seen == []

    async def here(master: Address) -> Address | None:
        return None

    scenario(body, here)


def test_no_master_and_an_unreachable_master_are_ha_not_available() -> None:
    dead = ("127.0.0.1", free_port())
    answers = iter([GroupFronts.NO_MASTER, dead])

    async def where(master: Address) -> Address | None:
        return next(answers)

    async def body(stub: Any, master: RecordingService, fwd: Forwarding) -> None:
        electing = await stub.SendMessage(send_request(), metadata=META)
        assert electing.status.code == v2.HA_NOT_AVAILABLE
        assert "no master" in electing.status.message
        gone = await stub.SendMessage(send_request(), metadata=META)
        assert gone.status.code == v2.HA_NOT_AVAILABLE
        assert f"{dead[0]}:{dead[1]}" in gone.status.message
        assert master.seen == []

    scenario(body, where)


def test_a_server_streaming_call_is_forwarded_by_the_same_code() -> None:
    async def body(stub: Any, master: RecordingService, fwd: Forwarding) -> None:
        req = svc.ReceiveMessageRequest()
        answers = [a async for a in stub.ReceiveMessage(req, metadata=META)]
        assert [a.status.code for a in answers] == [v2.NOT_IMPLEMENTED]  # the master's answer
        assert fwd.forwarded == 1
        ack = await stub.AckMessage(svc.AckMessageRequest(), metadata=META)
        assert ack.status.code == v2.NOT_IMPLEMENTED and fwd.forwarded == 2

    scenario(body)


# ---------------------------------------------------------------- published addresses


@dataclass
class KV:
    key: bytes
    value: bytes


@dataclass
class Replica:
    broker_id: int
    address: str
    alive: bool


@dataclass
class Group:
    master_id: int
    replicas: list[Replica]


@dataclass
class FakeClient:
    kv: dict[str, str] = field(default_factory=dict)
    groups: dict[str, Group] = field(default_factory=dict)

    def put(self, key: str, value: str) -> None:
        self.kv[key] = value

    def get(self, key: str, prefix: bool = False) -> Any:
        assert prefix

        class Answer:
            kvs = [KV(k.encode(), v.encode()) for k, v in self.kv.items() if k.startswith(key)]

        return Answer()

    def replica_group(self, name: str) -> Group:
        if name not in self.groups:
            raise NotFound(f"no replica group {name}")
        return self.groups[name]


def derive(remoting: str) -> Address:
    host, _, port = remoting.rpartition(":")
    return host, int(port) + 2


def fronts(client: FakeClient, view: Any = None) -> GroupFronts:
    return GroupFronts(client, "g", ("10.0.0.2", 9002), derive, lambda: view)  # type: ignore[arg-type]


def test_each_replica_publishes_its_front_and_the_master_is_found_there() -> None:
    client = FakeClient()
    fronts(client).publish(2)
    assert client.kv == {grpc_key("g", 2): "10.0.0.2:9002"}
    client.kv[grpc_key("g", 1)] = "10.0.0.1:7001"
    client.kv[grpc_key("g", "x")] = "garbage"  # type: ignore[arg-type]

    def master_of(view: Any) -> Any:
        return asyncio.run(fronts(client, view).master_of())

    assert master_of((False, 1, "10.0.0.1:6000")) == ("10.0.0.1", 7001)
    assert master_of((False, 3, "10.0.0.3:6000")) == ("10.0.0.3", 6002)  # not published
    assert master_of((True, 2, "")) is None
    assert master_of((False, 0, "")) == GroupFronts.NO_MASTER
    assert master_of(None) == GroupFronts.NO_MASTER


def test_route_endpoints_are_the_live_replicas_fronts_master_first() -> None:
    client = FakeClient()
    client.kv[grpc_key("g", 3)] = "10.0.0.3:7003"
    client.groups["g"] = Group(
        3,
        [
            Replica(1, "10.0.0.1:6000", True),
            Replica(2, "10.0.0.2:6000", False),
            Replica(3, "10.0.0.3:6000", True),
        ],
    )
    f = fronts(client)
    assert asyncio.run(f.endpoints("g", "10.0.0.3:6000")) == [
        ("10.0.0.3", 7003),
        ("10.0.0.1", 6002),
    ]
    # a group metaledger has no replica group for: its master's front only
    assert asyncio.run(f.endpoints("other", "10.0.0.9:6000")) == [("10.0.0.9", 6002)]


def test_query_route_endpoints_hold_every_address_but_one_domain_name() -> None:
    q = RouteQueue("g", 0, 0, 6, ("10.0.0.3", 7003), (("10.0.0.1", 6002), ("10.0.0.3", 7003)))
    e = endpoints(*q.endpoint, *q.replicas)
    assert e.scheme == v2.IPv4
    assert [(a.host, a.port) for a in e.addresses] == [("10.0.0.3", 7003), ("10.0.0.1", 6002)]
    named = endpoints("broker-a.local", 8081, ("broker-b.local", 8081))
    assert named.scheme == v2.DOMAIN_NAME and len(named.addresses) == 1


def test_role_view_from_the_role_manager() -> None:
    def roles(role: Role, view: Any) -> Any:
        return SimpleNamespace(role=role, view=view, broker_id=2)

    slave_of_1 = SimpleNamespace(is_master=False, master_id=1, master_address="h:1")
    assert role_view(roles(Role.MASTER, None)) == (True, 2, "")
    assert role_view(roles(Role.UNKNOWN, None)) is None
    assert role_view(roles(Role.SLAVE, slave_of_1)) == (False, 1, "h:1")
    named = SimpleNamespace(is_master=True, master_id=2, master_address="h:2")
    assert role_view(roles(Role.UNKNOWN, named)) == (True, 2, "")
