"""The replica's RocketMQ 5 gRPC port (broker.grpc.front): a real grpc.aio server in process
(QueryRoute and SendMessage into the store, read back by PULL), the port's binding rules, and
the routes turned into queues with their masters' gRPC endpoints."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import grpc
import pytest

from broker.grpc.front import ReplicaBackend, grpc_front
from broker.grpc.service import MessagingService
from broker.remoting.errors import TopicNotExist
from nameserver.client import BrokerGroup, NotFound, QueueData, Route
from protos.apache.rocketmq.v2 import definition_pb2 as v2
from protos.apache.rocketmq.v2 import service_pb2 as svc
from protos.apache.rocketmq.v2 import service_pb2_grpc as svc_grpc
from rmq.message import decode_records
from tests.unit.broker.front.conftest import TOPIC, Ctx, run_broker


def test_a_producer_call_sequence_over_the_real_port(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        port = ctx.replica.grpc_port
        assert port > 0
        meta = [("x-mq-client-id", "c1")]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = svc_grpc.MessagingServiceStub(channel)
            req = svc.QueryRouteRequest()
            req.topic.name = TOPIC
            route = await stub.QueryRoute(req, metadata=meta)
            assert route.status.code == v2.OK and len(route.message_queues) == 4
            addr = route.message_queues[0].broker.endpoints.addresses[0]
            assert (addr.host, addr.port) == ("127.0.0.1", port)

            async def settings() -> Any:
                c = svc.TelemetryCommand()
                c.settings.client_type = v2.PRODUCER
                yield c

            telemetry = stub.Telemetry(settings(), metadata=meta)
            first = await telemetry.read()
            assert first.settings.publishing.max_body_size == 4 * 1024 * 1024
            telemetry.cancel()
            beat = await stub.Heartbeat(svc.HeartbeatRequest(), metadata=meta)
            assert beat.status.code == v2.OK
            send = svc.SendMessageRequest()
            m = send.messages.add(body=b"\x00\xff" * 3)
            m.topic.name = TOPIC
            m.system_properties.message_id = "01ABCDEF"
            m.system_properties.tag = "t"
            answer = await stub.SendMessage(send, metadata=meta)
            assert answer.status.code == v2.OK, answer.status.message
            stored = []
            for q in range(4):  # the queue it went to: the one holding it
                answer_q = await ctx.pull(0, queue_id=q)
                if answer_q.code == 0:
                    stored += decode_records(answer_q.body)
            assert [(s.body, s.tags, s.properties["UNIQ_KEY"]) for s in stored] == [
                (b"\x00\xff" * 3, "t", "01ABCDEF")
            ]
            assert stored[0].queue_offset == answer.entries[0].offset

    run_broker(tmp_path, scenario, grpc_listen="127.0.0.1:0")


def test_a_taken_port_stops_an_explicit_front_and_skips_a_default_one() -> None:
    async def main() -> None:
        with socket.socket() as holder:
            holder.bind(("127.0.0.1", 0))
            holder.listen()
            port = holder.getsockname()[1]
            with pytest.raises(OSError, match=str(port)):
                await grpc_front(MessagingService(None), "127.0.0.1", port)  # type: ignore[arg-type]
        server, bound = await grpc_front(MessagingService(None), "127.0.0.1", 0)  # type: ignore[arg-type]
        try:  # a second gRPC server may not share the port (no SO_REUSEPORT)
            with pytest.raises(OSError):
                await grpc_front(MessagingService(None), "127.0.0.1", bound)  # type: ignore[arg-type]
        finally:
            await server.stop(None)

    asyncio.run(main())


def test_a_default_address_that_is_taken_is_skipped(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = f"127.0.0.1:{holder.getsockname()[1]}"

        async def scenario(ctx: Ctx) -> None:
            assert ctx.replica.grpc is None

        run_broker(tmp_path, scenario, grpc_listen=taken, grpc_listen_is_default=True)
        with pytest.raises(OSError):
            run_broker(tmp_path / "2", scenario, grpc_listen=taken)


class FakeClient:
    def __init__(self, route: Route | None) -> None:
        self.route = route

    def route_get(self, topic: str) -> Route:
        if self.route is None:
            raise NotFound("no route")
        return self.route


def backend(route: Route | None) -> ReplicaBackend:
    return ReplicaBackend(
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        FakeClient(route),  # type: ignore[arg-type]
        broker_name="broker-a",
        remoting=("127.0.0.1", 10100),
        grpc_port=10102,
    )


def test_routes_become_queues_at_their_masters_grpc_endpoints() -> None:
    route = Route(
        "T",
        [
            BrokerGroup("C", "broker-a", {0: "127.0.0.1:10100", 2: "127.0.0.1:10110"}, "", False),
            BrokerGroup("C", "broker-b", {0: "10.0.0.2:10200"}, "", False),
            BrokerGroup("C", "broker-c", {1: "10.0.0.3:10300"}, "", False),  # no master
        ],
        [
            QueueData("broker-a", 2, 3, 6),
            QueueData("broker-b", 1, 1, 4),
            QueueData("broker-c", 1, 1, 6),
        ],
        "",
        0,
    )
    queues = asyncio.run(backend(route).queues("T"))
    assert [(q.broker_name, q.queue_id, q.perm, q.endpoint) for q in queues] == [
        ("broker-a", 0, 6, ("127.0.0.1", 10102)),
        ("broker-a", 1, 6, ("127.0.0.1", 10102)),
        ("broker-a", 2, 2, ("127.0.0.1", 10102)),  # write-only: beyond the read queues
        ("broker-b", 0, 4, ("10.0.0.2", 10202)),
    ]
    with pytest.raises(TopicNotExist, match="T"):
        asyncio.run(backend(None).queues("T"))


def test_a_consumer_call_sequence_over_the_real_port(tmp_path: Path) -> None:
    """FIFO sends of one message group land in one queue; a FIFO group's assignment is per
    queue; receive, ack and the offset calls run on the replica's POP service and store."""

    async def scenario(ctx: Ctx) -> None:
        meta = [("x-mq-client-id", "c2")]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{ctx.replica.grpc_port}") as channel:
            stub = svc_grpc.MessagingServiceStub(channel)
            send = svc.SendMessageRequest()
            for i in range(4):
                m = send.messages.add(body=b"fifo-%d" % i)
                m.topic.name = TOPIC
                m.system_properties.message_id = f"F{i}"
                m.system_properties.message_type = v2.FIFO
                m.system_properties.message_group = "order-7"
            sent = await stub.SendMessage(send, metadata=meta)
            assert sent.status.code == v2.OK, sent.status.message

            query = svc.QueryAssignmentRequest()
            query.topic.name, query.group.name = TOPIC, "Fifo"
            assigned = await stub.QueryAssignment(query, metadata=meta)
            assert [a.message_queue.id for a in assigned.assignments] == [0, 1, 2, 3]

            receive = svc.ReceiveMessageRequest(batch_size=32)
            receive.group.name = "Fifo"
            receive.message_queue.topic.name = TOPIC
            receive.invisible_duration.FromSeconds(30)
            receive.long_polling_timeout.FromSeconds(5)
            out = [r async for r in stub.ReceiveMessage(receive, metadata=meta, timeout=15)]
            assert out[0].status.code == v2.OK, out[0]
            got = [r.message for r in out if r.HasField("message")]
            assert [m.body for m in got] == [b"fifo-%d" % i for i in range(4)]
            assert {m.system_properties.queue_id for m in got} == {
                got[0].system_properties.queue_id
            }
            assert {m.system_properties.message_group for m in got} == {"order-7"}
            queue_id = got[0].system_properties.queue_id

            ack = svc.AckMessageRequest(
                entries=[svc.AckMessageEntry(message_id=m.system_properties.message_id,
                                             receipt_handle=m.system_properties.receipt_handle)
                         for m in got]
            )  # fmt: skip
            ack.group.name, ack.topic.name = "Fifo", TOPIC
            acked = await stub.AckMessage(ack, metadata=meta)
            assert acked.status.code == v2.OK, acked

            mq = v2.MessageQueue(id=queue_id)
            mq.topic.name = TOPIC
            query_offset = svc.QueryOffsetRequest(message_queue=mq, query_offset_policy=v2.END)
            end = await stub.QueryOffset(query_offset, metadata=meta)
            assert (end.status.code, end.offset) == (v2.OK, 4)
            query_offset.query_offset_policy = v2.BEGINNING
            assert (await stub.QueryOffset(query_offset, metadata=meta)).offset == 0
            query_offset.query_offset_policy = v2.TIMESTAMP
            query_offset.timestamp.FromMilliseconds(0)
            assert (await stub.QueryOffset(query_offset, metadata=meta)).offset == 0

            group = v2.Resource(name="Offsets")
            get = svc.GetOffsetRequest(group=group, message_queue=mq)
            none = await stub.GetOffset(get, metadata=meta)
            assert none.status.code == v2.OFFSET_NOT_FOUND
            update = svc.UpdateOffsetRequest(group=group, message_queue=mq, offset=3)
            assert (await stub.UpdateOffset(update, metadata=meta)).status.code == v2.OK
            assert (await stub.GetOffset(get, metadata=meta)).offset == 3
            assert ctx.replica.offsets.load("Offsets", TOPIC, queue_id) == 3

    run_broker(tmp_path, scenario, grpc_listen="127.0.0.1:0", fifo_groups=("Fifo",))
