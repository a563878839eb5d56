"""Transactions on the gRPC front (broker.grpc.transactions) over an in-process replica: a
TRANSACTION send is a half with a transaction id, EndTransaction's bad input is answered with
its code naming the field and changes nothing, commit is seen once and idempotent, and the
check goes out on the producer's Telemetry stream as recover_orphaned_transaction_command."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from broker.grpc.front import ReplicaBackend
from broker.grpc.service import MessagingService
from broker.grpc.transactions import GrpcTransactions
from broker.transactions.half import HALF_TOPIC
from protos.apache.rocketmq.v2 import definition_pb2 as v2
from protos.apache.rocketmq.v2 import service_pb2 as svc
from rmq.msgid import offset_msg_id
from tests.unit.broker.front.conftest import TOPIC, Ctx, run_broker
from tests.unit.broker.front.test_grpc_service import Context, message
from tests.unit.broker.front.test_send_transactions import max_offset, visible


def service_of(ctx: Ctx) -> MessagingService:
    r = ctx.replica
    c = r.config
    backend = ReplicaBackend(
        r.sends, r.topics, None, broker_name=c.broker_name,
        remoting=(c.advertised_host, c.listen_port), grpc_port=8081,
    )  # fmt: skip
    tx = GrpcTransactions(r.transactions, r.core.producers, (c.advertised_host, c.listen_port))
    return MessagingService(backend, transactions=tx)


async def send_half(service: MessagingService, body: bytes, message_id: str) -> Any:
    m = message(
        topic=TOPIC, body=body, message_id=message_id, message_type=v2.TRANSACTION,
        born_ms=int(time.time() * 1000),
    )  # fmt: skip
    out = await service.SendMessage(svc.SendMessageRequest(messages=[m]), Context())
    (entry,) = out.entries
    assert entry.status.code == v2.OK, entry.status.message
    assert entry.transaction_id
    return entry


def end_request(entry: Any, resolution: int = v2.COMMIT, **kw: Any) -> svc.EndTransactionRequest:
    r = svc.EndTransactionRequest(
        message_id=kw.pop("message_id", entry.message_id),
        transaction_id=kw.pop("transaction_id", entry.transaction_id),
        resolution=resolution,  # type: ignore[arg-type]
        source=kw.pop("source", v2.SOURCE_CLIENT),
    )
    r.topic.name = kw.pop("topic", TOPIC)
    assert not kw
    return r


def test_end_transaction_over_grpc(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        service = service_of(ctx)
        entry = await send_half(service, b"g1", "MSG-G1")
        assert await max_offset(ctx) == 0 and await max_offset(ctx, HALF_TOPIC) == 1
        log_end = ctx.replica.store.log.end_offset
        bad = [
            (end_request(entry, v2.TRANSACTION_RESOLUTION_UNSPECIFIED), v2.BAD_REQUEST,
             "resolution"),
            (end_request(entry, transaction_id="nonsense"), v2.INVALID_TRANSACTION_ID,
             "transaction_id"),
            (end_request(entry, transaction_id=offset_msg_id("127.0.0.1", 1, 10**9)),
             v2.INVALID_TRANSACTION_ID, "transaction_id"),
            (end_request(entry, topic="Other"), v2.BAD_REQUEST, "topic.name"),
            (end_request(entry, message_id="MSG-OTHER"), v2.ILLEGAL_MESSAGE_ID, "message_id"),
        ]  # fmt: skip
        for request, code, field in bad:
            out = await service.EndTransaction(request, Context())
            assert out.status.code == code, (out.status, field)
            assert field in out.status.message
        assert ctx.replica.store.log.end_offset == log_end

        ok = await service.EndTransaction(end_request(entry), Context())
        assert ok.status.code == v2.OK, ok.status.message
        again = await service.EndTransaction(end_request(entry), Context())
        assert again.status.code == v2.OK
        other_way = await service.EndTransaction(end_request(entry, v2.ROLLBACK), Context())
        assert other_way.status.code == v2.BAD_REQUEST
        assert "already committed" in other_way.status.message
        found = [m for q in range(4) for m in await visible(ctx, queue_id=q)]
        assert [(m.body, m.properties["UNIQ_KEY"]) for m in found] == [(b"g1", "MSG-G1")]

        rolled = await send_half(service, b"g2", "MSG-G2")
        out = await service.EndTransaction(end_request(rolled, v2.ROLLBACK), Context())
        assert out.status.code == v2.OK
        assert len([m for q in range(4) for m in await visible(ctx, queue_id=q)]) == 1

    run_broker(tmp_path, scenario)


def test_the_check_goes_out_on_the_producers_telemetry_stream(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        service = service_of(ctx)
        stop = asyncio.Event()

        async def commands() -> AsyncIterator[svc.TelemetryCommand]:
            settings = v2.Settings(client_type=v2.PRODUCER)
            settings.publishing.topics.add(name=TOPIC)
            yield svc.TelemetryCommand(settings=settings)
            await stop.wait()

        stream = service.Telemetry(commands(), Context("producer-1"))
        first = await anext(stream)
        assert first.status.code == v2.OK and first.HasField("settings")
        beat = await service.Heartbeat(svc.HeartbeatRequest(), Context("producer-1"))
        assert beat.status.code == v2.OK

        entry = await send_half(service, b"g3", "MSG-G3")
        checks = ctx.replica.checks
        checks.clock = lambda: int(time.time() * 1000 + 10_000)
        assert await checks.check_round() == 1
        command = await asyncio.wait_for(anext(stream), 5)
        assert command.WhichOneof("command") == "recover_orphaned_transaction_command"
        recover = command.recover_orphaned_transaction_command
        m = recover.message
        assert m.topic.name == TOPIC and m.body == b"g3"
        assert m.system_properties.message_id == "MSG-G3"
        assert m.system_properties.message_type == v2.TRANSACTION
        md5 = hashlib.md5(b"g3").hexdigest().upper()  # the Node.js client needs a digest
        assert m.system_properties.body_digest == v2.Digest(type=v2.MD5, checksum=md5)
        assert "TRAN_MSG" not in m.user_properties and "PGROUP" not in m.user_properties
        assert recover.transaction_id != entry.transaction_id  # it names the check's copy

        answer = end_request(entry, transaction_id=recover.transaction_id,
                             source=v2.SOURCE_SERVER_CHECK)  # fmt: skip
        out = await service.EndTransaction(answer, Context("producer-1"))
        assert out.status.code == v2.OK, out.status.message
        assert await checks.check_round() == 0
        found = [m for q in range(4) for m in await visible(ctx, queue_id=q)]
        assert [x.body for x in found] == [b"g3"]

        stop.set()
        assert [c async for c in stream] == []
        assert ctx.replica.core.producers.channel(TOPIC) is None  # the stream's end forgets it

    run_broker(tmp_path, scenario)


def test_a_stream_ending_after_the_clients_next_one_opened_keeps_the_next() -> None:
    """The Telemetry stream a client reopened (a relay moving it to a new master) stays
    registered when the old stream's cleanup comes after it."""
    import asyncio

    from broker.grpc.transactions import GrpcTransactions
    from broker.state.producers import ProducerRegistry

    tx = GrpcTransactions(None, ProducerRegistry(), ("127.0.0.1", 1))  # type: ignore[arg-type]
    old: asyncio.Queue[object] = asyncio.Queue()
    new: asyncio.Queue[object] = asyncio.Queue()
    tx.attach("c1", old)
    tx.attach("c1", new)
    tx.detach("c1", old)
    assert tx.channels["c1"].outbound is new
    tx.detach("c1", new)
    assert "c1" not in tx.channels
