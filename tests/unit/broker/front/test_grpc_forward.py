"""A replica that is not the master forwards the gRPC front's message calls to the master's
front (broker.grpc.forward): real grpc.aio servers in process, one a "master", one a
"slave" with the interceptor; the published gRPC addresses and QueryRoute's endpoints from a
fake metaledger client."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import grpc

from broker.grpc import forward
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
    master_service: Callable[[], RecordingService] = RecordingService,
    slave: MessagingService | None = None,
) -> None:
    """A master and a slave forwarding to it (``where(master)`` says where, per call)."""

    async def main() -> None:
        master = master_service()
        m_server, m_port = await grpc_front(master, "127.0.0.1", 0)
        target = ("127.0.0.1", m_port)

        async def to_master() -> Address | None:
            return target if where is None else await where(target)

        forwarding = Forwarding(to_master, ("127.0.0.1", 1))
        here = slave if slave is not None else MessagingService(FakeBackend())
        s_server, s_port = await grpc_front(here, "127.0.0.1", 0, [forwarding])
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
        # the caller's deadline travels on; gRPC converts it between clocks on each hop,
        # so allow a little slack above the 5 s the caller gave
        assert remaining is not None and 0 < remaining <= 5.5
        # the channel to the master is reused
        await stub.SendMessage(send_request(), metadata=META)
        assert fwd.forwarded == 2 and len(fwd._channels) == 1

    scenario(body)


def test_routes_are_answered_by_the_replica_called_heartbeats_by_the_master() -> None:
    async def body(stub: Any, master: RecordingService, fwd: Forwarding) -> None:
        req = svc.QueryRouteRequest()
        req.topic.name = "T"
        route = await stub.QueryRoute(req, metadata=META)
        assert route.status.code == v2.OK
        assert fwd.forwarded == 0
        beat = await stub.Heartbeat(svc.HeartbeatRequest(), metadata=META)
        assert beat.status.code == v2.UNRECOGNIZED_CLIENT_TYPE  # no settings on the master
        assert fwd.forwarded == 1

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


# ---------------------------------------------------------------- the Telemetry relay


class Checks:
    """A master's transactions as the Telemetry stream sees them: the attached streams."""

    def __init__(self) -> None:
        self.outbound: dict[str, asyncio.Queue[Any]] = {}
        self.topics: dict[str, list[str]] = {}

    def attach(self, client_id: str, outbound: asyncio.Queue[Any], peer: str = "") -> None:
        self.outbound[client_id] = outbound

    def detach(self, client_id: str, outbound: object = None) -> None:
        self.outbound.pop(client_id, None)

    def settings(self, client_id: str, settings: v2.Settings) -> None:
        self.topics[client_id] = [t.name for t in settings.publishing.topics]

    def heartbeat(self, client_id: str) -> None:
        pass

    def check(self, client_id: str, transaction_id: str) -> None:
        """What GrpcTransactions' check puts on the stream."""
        self.outbound[client_id].put_nowait(
            svc.TelemetryCommand(
                recover_orphaned_transaction_command=svc.RecoverOrphanedTransactionCommand(
                    message=message(body=b"half"), transaction_id=transaction_id
                )
            )
        )


class TelemetryMaster(RecordingService):
    """A master with transactions: records the metadata each Telemetry stream came with."""

    def __init__(self) -> None:
        super().__init__()
        self.checks = Checks()
        self.transactions = self.checks  # type: ignore[assignment]
        self.streams: list[dict[str, str]] = []

    async def Telemetry(self, requests: Any, context: Any) -> AsyncIterator[Any]:
        self.streams.append(dict(context.invocation_metadata()))
        async for item in super().Telemetry(requests, context):
            yield item


def producer_settings() -> svc.TelemetryCommand:
    settings = v2.Settings(client_type=v2.PRODUCER)
    settings.publishing.topics.add(name="T")
    return svc.TelemetryCommand(settings=settings)


async def until(condition: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def test_telemetry_through_a_slave_carries_settings_and_the_masters_check_back() -> None:
    slave = MessagingService(FakeBackend())

    async def body(stub: Any, master: TelemetryMaster, fwd: Forwarding) -> None:
        stream = stub.Telemetry(metadata=META)
        await stream.write(producer_settings())
        answer = await asyncio.wait_for(stream.read(), 5)
        assert answer.status.code == v2.OK and answer.HasField("settings")
        assert answer.settings.publishing.max_body_size > 0
        assert master.clients == {"c1": v2.PRODUCER} and slave.clients == {}
        (meta,) = master.streams
        assert meta["x-mq-client-id"] == "c1" and meta[FORWARDED] == "127.0.0.1:1"
        assert master.checks.topics == {"c1": ["T"]}

        beat = await stub.Heartbeat(svc.HeartbeatRequest(), metadata=META)
        assert beat.status.code == v2.OK  # the master knows the client's settings

        master.checks.check("c1", "TX-1")  # the master's check, back through the slave
        command = await asyncio.wait_for(stream.read(), 5)
        recover = command.recover_orphaned_transaction_command
        assert recover.transaction_id == "TX-1" and recover.message.body == b"half"

        bye = await stub.NotifyClientTermination(
            svc.NotifyClientTerminationRequest(), metadata=META
        )
        assert bye.status.code == v2.OK and master.clients == {}
        await stream.done_writing()
        assert await asyncio.wait_for(stream.read(), 5) is grpc.aio.EOF
        assert await stream.code() == grpc.StatusCode.OK
        await until(lambda: not master.checks.outbound)

    scenario(body, master_service=TelemetryMaster, slave=slave)


def test_a_relayed_stream_moves_to_the_next_master_with_the_clients_settings(
    monkeypatch: Any,
) -> None:
    """The master dies (its stream ends UNAVAILABLE), then another is elected, then this
    replica becomes the master: the client's one stream is re-attached each time, the last
    settings written first, and the new master's check reaches the client."""
    monkeypatch.setattr(forward, "WATCH_S", 0.05)

    async def main() -> None:
        first, second = TelemetryMaster(), TelemetryMaster()
        a_server, a_port = await grpc_front(first, "127.0.0.1", 0)
        b_server, b_port = await grpc_front(second, "127.0.0.1", 0)
        now: list[Address | None] = [("127.0.0.1", a_port)]

        async def where() -> Address | None:
            return now[0]

        fwd = Forwarding(where, ("127.0.0.1", 1))
        slave = TelemetryMaster()
        s_server, s_port = await grpc_front(slave, "127.0.0.1", 0, [fwd])
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{s_port}") as ch:
                stream = svc_grpc.MessagingServiceStub(ch).Telemetry(metadata=META)
                await stream.write(producer_settings())
                assert (await asyncio.wait_for(stream.read(), 5)).HasField("settings")
                assert "c1" in first.clients

                await a_server.stop(None)  # killed: no master known for a while
                now[0] = GroupFronts.NO_MASTER
                await asyncio.sleep(0.3)
                now[0] = ("127.0.0.1", b_port)  # elected
                again = await asyncio.wait_for(stream.read(), 5)
                assert again.status.code == v2.OK and again.HasField("settings")
                assert second.clients == {"c1": v2.PRODUCER}
                assert second.checks.topics == {"c1": ["T"]}
                second.checks.check("c1", "TX-2")
                command = await asyncio.wait_for(stream.read(), 5)
                assert command.recover_orphaned_transaction_command.transaction_id == "TX-2"

                now[0] = None  # this replica is the master now: its own service
                here = await asyncio.wait_for(stream.read(), 5)
                assert here.HasField("settings") and slave.clients == {"c1": v2.PRODUCER}
                await until(lambda: not second.checks.outbound)  # the old stream ended
                slave.checks.check("c1", "TX-3")
                command = await asyncio.wait_for(stream.read(), 5)
                assert command.recover_orphaned_transaction_command.transaction_id == "TX-3"
                assert fwd.forwarded == 2
                stream.cancel()
        finally:
            await fwd.close()
            await s_server.stop(None)
            await b_server.stop(None)

    asyncio.run(main())


class Refusing(RecordingService):
    async def Telemetry(self, requests: Any, context: Any) -> AsyncIterator[Any]:
        # after the client's settings, as a broker refuses: an abort racing the relay's
        # write of them once came out of grpc core as INTERNAL on a loaded machine
        await requests.__anext__()
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, "no telemetry for you")
        yield  # pragma: no cover


def test_a_relayed_stream_passes_on_the_masters_refusal() -> None:
    async def body(stub: Any, master: RecordingService, fwd: Forwarding) -> None:
        stream = stub.Telemetry(metadata=META)
        await stream.write(producer_settings())
        try:
            await asyncio.wait_for(stream.read(), 5)
            raise AssertionError("the refusal was not passed on")
        except grpc.aio.AioRpcError as exc:
            assert exc.code() == grpc.StatusCode.PERMISSION_DENIED
            assert exc.details() == "no telemetry for you"

    scenario(body, master_service=Refusing)


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
