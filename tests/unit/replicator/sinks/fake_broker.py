"""An in-process fake RocketMQ broker on the remoting codec, for the sink's unit tests.

It records every SEND_MESSAGE_V2 it gets (per connection, in arrival order) and answers with
what ``decide`` says: a response code, ``None`` to hold the answer until ``release()``, or
``"drop"`` to close the connection without answering. A PUT_OK answer carries ``queueOffset``:
the queue's next offset when answered (a batch takes one per message), ``stored`` records
what got which (queue, offset) -> UNIQ_KEY.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from nameserver.client import BrokerGroup, QueueData, Route
from rmq import batch
from rmq.codec import FrameDecoder, RemotingCommand, encode
from rmq.message import parse_properties

Decision = int | None | str


@dataclass
class Received:
    conn: int
    queue_id: int
    body: bytes
    ext: dict[str, str]
    props: dict[str, str]

    @property
    def uniq(self) -> str:
        return self.props["UNIQ_KEY"]


def decode_batch(body: bytes) -> list[tuple[bytes, dict[str, str]]]:
    return [(item.body, item.properties) for item in batch.decode_batch(body)]


@dataclass
class FakeBroker:
    decide: Callable[[Received], Decision] = lambda r: 0
    received: list[Received] = field(default_factory=list)
    requests: list[RemotingCommand] = field(default_factory=list)
    held: list[tuple[asyncio.StreamWriter, RemotingCommand, list[Received]]] = field(
        default_factory=list
    )
    next_offset: dict[int, int] = field(default_factory=dict)
    stored: dict[tuple[int, int], str] = field(default_factory=dict)
    connections: int = 0
    server: asyncio.Server | None = None
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"127.0.0.1:{port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        conn = self.connections
        decoder = FrameDecoder()
        try:
            while data := await reader.read(1 << 16):
                for cmd in decoder.feed(data):
                    ext = cmd.ext_fields
                    self.requests.append(cmd)
                    if ext.get("m") == "true":
                        assert cmd.code == 320
                        items = [
                            Received(conn, int(ext["e"]), body, ext, props)
                            for body, props in decode_batch(cmd.body)
                        ]
                    else:
                        assert cmd.code == 310
                        props = parse_properties(ext.get("i", ""))
                        items = [Received(conn, int(ext["e"]), cmd.body, ext, props)]
                    self.received += items
                    self.arrived.set()
                    decisions = [self.decide(r) for r in items]
                    decision: Decision = 0
                    if "drop" in decisions:
                        decision = "drop"
                    elif None in decisions:
                        decision = None
                    else:
                        decision = next((d for d in decisions if d), 0)
                    if decision == "drop":
                        writer.close()
                        return
                    if decision is None:
                        self.held.append((writer, cmd, items))
                    else:
                        assert isinstance(decision, int)
                        writer.write(encode(self.answer(cmd, items, decision)))
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    def answer(self, cmd: RemotingCommand, items: list[Received], code: int) -> RemotingCommand:
        if code != 0:
            return cmd.response(code, "fake says so")
        queue = items[0].queue_id
        first = self.next_offset.get(queue, 0)
        self.next_offset[queue] = first + len(items)
        for i, r in enumerate(items):
            self.stored[(queue, first + i)] = r.props.get("UNIQ_KEY", "")
        return cmd.response(code, None, {"queueId": str(queue), "queueOffset": str(first)})

    def release(self, code: int = 0, reverse: bool = False) -> None:
        held, self.held = self.held, []
        for writer, cmd, items in reversed(held) if reverse else held:
            if not writer.is_closing():
                writer.write(encode(self.answer(cmd, items, code)))

    async def wait_received(self, n: int, timeout: float = 5.0) -> None:
        async def until() -> None:
            while len(self.received) < n:
                self.arrived.clear()
                await self.arrived.wait()

        await asyncio.wait_for(until(), timeout)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


class FakeRoutes:
    def __init__(self, addr: str | None, queues: int = 2, broker: str = "broker-a") -> None:
        self.addr = addr
        self.queues = queues
        self.broker = broker
        self.calls = 0

    def route_get(self, topic: str) -> Route:
        from nameserver.client import NotFound

        self.calls += 1
        if self.addr is None:
            raise NotFound("no route")
        return Route(
            topic,
            [BrokerGroup("c", self.broker, {0: self.addr}, "", False)],
            [QueueData(self.broker, self.queues, self.queues, 6)],
            "",
            1,
        )
