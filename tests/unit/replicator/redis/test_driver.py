"""The asyncio driver against a scripted fake master on 127.0.0.1 (no redis-server): what it
acks and when, events before an error, retries of -LOADING, the master closing the link."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from replicator.redis.driver import ReplicaLink
from replicator.redis.errors import MasterNotReady, ProtocolError
from replicator.redis.protocol import (
    Event,
    FullSync,
    GetAck,
    RdbBegin,
    RdbChunk,
    RdbEnd,
    ReplicaConfig,
    StreamCommand,
)
from replicator.redis.resp import RespParser, encode_command

REPLID = b"0123456789abcdef0123456789abcdef01234567"
MARK = b"m" * 40
SET = encode_command([b"SET", b"k", b"v"])
GETACK = encode_command([b"REPLCONF", b"GETACK", b"*"])

Script = Callable[["FakeMaster", asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class FakeMaster:
    """Answers the handshake, then runs a test's script; records every request."""

    def __init__(self, script: Script, first_reply: bytes = b"+PONG\r\n") -> None:
        self.script = script
        self.first_reply = first_reply
        self.requests: list[list[bytes]] = []
        self.acks: list[int] = []
        self.connections = 0
        self.server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> FakeMaster:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    async def request(self, reader: asyncio.StreamReader, parser: RespParser) -> list[bytes]:
        while True:
            for item in parser.items():
                assert isinstance(item, list)
                argv = [bytes(a) for a in item if isinstance(a, bytes)]
                self.requests.append(argv)
                if argv[:2] == [b"REPLCONF", b"ACK"]:
                    self.acks.append(int(argv[2]))
                    continue
                return argv
            data = await reader.read(4096)
            if not data:
                raise ConnectionError("replica went away")
            parser.feed(data)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        parser = RespParser()
        try:
            await self.request(reader, parser)  # PING
            writer.write(self.first_reply)
            if not self.first_reply.startswith(b"+"):
                return
            await self.request(reader, parser)  # REPLCONF capa
            writer.write(b"+OK\r\n")
            await self.request(reader, parser)  # PSYNC
            self.parser = parser
            await self.script(self, reader, writer)
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def drain_acks(self, reader: asyncio.StreamReader) -> None:
        """Keep reading the replica's ACKs until it closes."""
        while True:
            try:
                await self.request(reader, self.parser)
            except ConnectionError:
                return


async def wait_for(predicate: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def test_acks_only_the_confirmed_offset_even_right_after_the_rdb() -> None:
    async def script(m: FakeMaster, reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(b"+FULLRESYNC %s 1000\r\n$EOF:%s\r\nREDIS%s" % (REPLID, MARK, MARK))
        await m.drain_acks(reader)

    async def main() -> None:
        events: list[Event] = []
        confirmed = 0  # an older epoch's number, or nothing confirmed yet

        async def consume(event: Event) -> None:
            events.append(event)

        async with FakeMaster(script) as m:
            link = ReplicaLink("127.0.0.1", m.port, consume, lambda: confirmed, ack_interval_s=0.05)
            task = asyncio.create_task(link.run())
            await wait_for(lambda: len(m.acks) >= 3)
            # the ACK right after the RDB (it starts Redis 7.0's stream) and the timer's carry
            # what is confirmed: nothing of the snapshot yet
            assert set(m.acks) == {0}
            confirmed = 5000  # beyond what this link read: clamped to the parsed offset
            await wait_for(lambda: m.acks[-1] == 1000)
            await link.close()
            await asyncio.wait_for(task, 5)
        assert events == [
            FullSync(REPLID.decode(), 1000),
            *events[1:2],
            RdbChunk(b"REDIS"),
            RdbEnd(),
        ]

    asyncio.run(main())


def test_getack_is_answered_at_once_even_while_the_consumer_is_stuck() -> None:
    async def script(m: FakeMaster, reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(b"+FULLRESYNC %s 0\r\n$0\r\n" % REPLID)
        w.write(SET + GETACK)
        await m.drain_acks(reader)

    async def main() -> None:
        gate = asyncio.Event()
        events: list[Event] = []

        async def consume(event: Event) -> None:
            await gate.wait()
            events.append(event)

        async with FakeMaster(script) as m:
            link = ReplicaLink("127.0.0.1", m.port, consume, lambda: 7, ack_interval_s=60)
            task = asyncio.create_task(link.run())
            # RdbEnd's ACK (0), then the GETACK answer: the confirmed 7, not the parsed 64
            await wait_for(lambda: len(m.acks) >= 2, 2)
            assert m.acks[:2] == [0, 7] and link.protocol.offset == len(SET) + len(GETACK)
            assert events == [] and link.pending_events >= 4
            gate.set()
            await wait_for(lambda: any(isinstance(e, GetAck) for e in events))
            await link.close()
            await asyncio.wait_for(task, 5)

    asyncio.run(main())


def test_events_before_a_protocol_error_reach_the_consumer_first() -> None:
    async def script(m: FakeMaster, reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(b"+FULLRESYNC %s 0\r\n$0\r\n" % REPLID + SET + b"+garbage\r\n")
        await m.drain_acks(reader)

    async def main() -> None:
        events: list[Event] = []

        async def consume(event: Event) -> None:
            await asyncio.sleep(0.01)
            events.append(event)

        async with FakeMaster(script) as m:
            link = ReplicaLink("127.0.0.1", m.port, consume, lambda: 0)
            with pytest.raises(ProtocolError) as e:
                await asyncio.wait_for(link.run(), 5)
            assert e.value.offset == len(SET)
        assert events[-1] == StreamCommand([b"SET", b"k", b"v"], 0, len(SET))

    asyncio.run(main())


def test_loading_is_retried_on_a_new_connection_and_then_given_up() -> None:
    async def script(m: FakeMaster, reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(b"+FULLRESYNC %s 0\r\n$0\r\n" % REPLID)

    async def main() -> None:
        events: list[Event] = []

        async def consume(event: Event) -> None:
            events.append(event)

        loading = b"-LOADING Redis is loading the dataset in memory\r\n"
        async with FakeMaster(script, first_reply=loading) as m:
            link = ReplicaLink(
                "127.0.0.1", m.port, consume, lambda: 0, retry_delay_s=0.01, not_ready_retries=2
            )
            with pytest.raises(MasterNotReady):
                await asyncio.wait_for(link.run(), 5)
            assert m.connections == 3 and events == []
            m.first_reply = b"+PONG\r\n"
            link = ReplicaLink("127.0.0.1", m.port, consume, lambda: 0, ReplicaConfig())
            with pytest.raises(ConnectionError, match="closed the link"):
                await asyncio.wait_for(link.run(), 5)
        assert events == [FullSync(REPLID.decode(), 0), RdbBegin(0), RdbEnd()]

    asyncio.run(main())
