"""``ClusterClient``'s I/O against an in-process remoting server (asyncio, 127.0.0.1): answers
matched by opaque while many requests are in flight, a request never answered times out as
ClusterUnavailable without hurting the others, a cancelled call leaves the connection usable,
a lost connection is reopened by the next call, a broker-less queue fails fast, and
``create_topic`` sends code 17 to every master of the cluster (or to the brokers given)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from replicator.rocketmq.client import ClusterClient, ReadQueue
from replicator.rocketmq.errors import ClusterUnavailable, RemotingError
from replicator.rocketmq.wire import TopicSpec
from rmq.codec import FrameDecoder, RemotingCommand, dumps_fastjson, encode

Answer = Callable[[RemotingCommand], RemotingCommand | None]  # None: never answer


class FakeServer:
    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.seen: list[RemotingCommand] = []
        self.writers: list[asyncio.StreamWriter] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        decoder = FrameDecoder()
        try:
            while data := await reader.read(65536):
                for request in decoder.feed(data):
                    self.seen.append(request)
                    reply = self.answer(request)
                    if reply is not None:
                        writer.write(encode(reply))
        finally:
            writer.close()

    def drop_connections(self) -> None:
        for w in self.writers:
            w.close()


@asynccontextmanager
async def serve(answer: Answer) -> AsyncIterator[tuple[str, FakeServer]]:
    fake = FakeServer(answer)
    server = await asyncio.start_server(fake.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"127.0.0.1:{port}", fake
    finally:
        fake.drop_connections()
        server.close()
        await server.wait_closed()


def offset_answer(request: RemotingCommand) -> RemotingCommand | None:
    """GET_MAX_OFFSET answers queueId * 10, except queue 99, which is never answered."""
    queue = int(request.ext_fields.get("queueId", "0"))
    if queue == 99:
        return None
    return request.response(0, None, {"offset": queue * 10})


def test_pipelined_answers_timeouts_and_cancellation() -> None:
    async def go() -> None:
        async with serve(offset_answer) as (addr, fake):
            c = ClusterClient("127.0.0.1:1", timeout_s=0.3)
            qs = [ReadQueue("T", "b", i, addr) for i in range(50)]
            try:
                got = await asyncio.gather(*(c.max_offset(q) for q in qs))
                assert got == [i * 10 for i in range(50)]
                silent = ReadQueue("T", "b", 99, addr)
                with pytest.raises(ClusterUnavailable, match="in time"):
                    await c.max_offset(silent)
                task = asyncio.ensure_future(c.max_offset(silent))
                await asyncio.sleep(0.05)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                assert await c.max_offset(qs[3]) == 30  # same connection, still usable
                assert len(fake.writers) == 1
                # the broker drops the connection: the next call opens a new one
                fake.drop_connections()
                await asyncio.sleep(0.05)
                assert await c.max_offset(qs[4]) == 40
                assert len(fake.writers) == 2
            finally:
                await c.close()

    asyncio.run(go())


def test_queue_without_master_and_refused_connection() -> None:
    async def go() -> None:
        c = ClusterClient("127.0.0.1:1", timeout_s=1)
        with pytest.raises(ClusterUnavailable, match="no master"):
            await c.min_offset(ReadQueue("T", "b", 0, None))
        async with serve(offset_answer) as (addr, _):
            pass  # closed: nothing listens on addr now
        with pytest.raises(ClusterUnavailable, match="cannot connect"):
            await c.min_offset(ReadQueue("T", "b", 0, addr))
        await c.close()

    asyncio.run(go())


def test_create_topic_on_every_master_of_the_cluster() -> None:
    created: list[tuple[str, dict[str, str]]] = []

    def broker(name: str, code: int = 0) -> Answer:
        def answer(request: RemotingCommand) -> RemotingCommand:
            created.append((name, dict(request.ext_fields)))
            return request.response(code, "no" if code else None)

        return answer

    async def go() -> None:
        async with (
            serve(broker("a")) as (a, _),
            serve(broker("b")) as (b, _),
            serve(broker("x", code=3)) as (x, _),
        ):
            cluster = {
                "brokerAddrTable": {
                    "ba": {
                        "brokerAddrs": {0: a, 1: "127.0.0.1:1"},
                        "brokerName": "ba",
                        "cluster": "C",
                    },
                    "bb": {"brokerAddrs": {0: b}, "brokerName": "bb", "cluster": "C"},
                    "bs": {"brokerAddrs": {1: "127.0.0.1:1"}, "brokerName": "bs", "cluster": "C"},
                    "bx": {"brokerAddrs": {0: x}, "brokerName": "bx", "cluster": "Other"},
                },
                "clusterAddrTable": {"C": ["ba", "bb", "bs"], "Other": ["bx"]},
            }

            def namesrv(request: RemotingCommand) -> RemotingCommand:
                assert request.code == 106
                return request.response(0, body=dumps_fastjson(cluster, standard=False))

            async with serve(namesrv) as (ns, _):
                c = ClusterClient(ns)
                try:
                    spec = TopicSpec("Dest", 8, 8)
                    await c.create_topic(spec, cluster="C")
                    assert [n for n, _ in created] == ["a", "b"]
                    assert created[0][1]["topic"] == "Dest" and created[0][1]["perm"] == "6"
                    created.clear()
                    with pytest.raises(RemotingError) as err:
                        await c.create_topic(spec)  # every cluster: bx does not know code 17
                    assert err.value.code == 3
                    created.clear()
                    await c.create_topic(spec, brokers=[b])
                    assert [n for n, _ in created] == ["b"]
                    with pytest.raises(ClusterUnavailable, match="no broker master"):
                        await c.create_topic(spec, cluster="Nobody")
                finally:
                    await c.close()

    asyncio.run(go())
