"""The asyncio remoting server scaffold over loopback sockets (in-process, fast).

What RocketMQ's NettyRemotingAbstract does, checked from the client side: unknown codes,
oneway requests, echoed opaques, handler errors, and a broken connection that leaves
the others serving.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable

from nameserver.remoting.codec import FrameDecoder, RemotingCommand, encode
from nameserver.remoting.codes import RequestCode, ResponseCode
from nameserver.remoting.server import HandlerTable, Peer, RemotingServer

TIMEOUT_S = 10


class Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder()
        self.pending: list[RemotingCommand] = []

    @classmethod
    async def connect(cls, address: tuple[str, int]) -> Client:
        return cls(*await asyncio.open_connection(*address))

    async def send(self, *commands: RemotingCommand, raw: bytes = b"") -> None:
        self.writer.write(b"".join(encode(c) for c in commands) + raw)
        await self.writer.drain()

    async def receive(self) -> RemotingCommand:
        while not self.pending:
            data = await asyncio.wait_for(self.reader.read(65536), TIMEOUT_S)
            if not data:
                raise ConnectionError("the server closed the connection")
            self.pending.extend(self.decoder.feed(data))
        return self.pending.pop(0)

    async def closed_by_server(self) -> bool:
        """True when the server closes without sending anything more."""
        data = await asyncio.wait_for(self.reader.read(65536), TIMEOUT_S)
        return data == b""

    def close(self) -> None:
        self.writer.close()


def run(
    table: HandlerTable, scenario: Callable[[RemotingServer], Awaitable[None]]
) -> RemotingServer:
    async def main() -> RemotingServer:
        server = RemotingServer(table)
        await server.start("127.0.0.1", 0)
        try:
            await asyncio.wait_for(scenario(server), TIMEOUT_S * 3)
        finally:
            await server.close()
        return server

    return asyncio.run(main())


def route_table(seen: list[RemotingCommand]) -> HandlerTable:
    table = HandlerTable()

    @table.register(RequestCode.GET_ROUTEINFO_BY_TOPIC)
    async def route(request: RemotingCommand, peer: Peer) -> RemotingCommand:
        seen.append(request)
        topic = request.ext_str("topic")
        if topic == "slow":
            await asyncio.sleep(0.3)
        if topic == "boom":
            raise RuntimeError("kaputt")
        # A handler that gets opaque and flag wrong is corrected by the server.
        return RemotingCommand(code=ResponseCode.SUCCESS, opaque=-1, body=topic.encode())

    return table


def test_unknown_code_gets_request_code_not_supported() -> None:
    async def scenario(server: RemotingServer) -> None:
        c = await Client.connect(server.address)
        await c.send(RemotingCommand.request(999, opaque=77))
        reply = await c.receive()
        assert (reply.code, reply.remark, reply.opaque) == (
            3,
            " request type 999 not supported",
            77,
        )
        assert reply.is_response and reply.language == "JAVA"
        c.close()

    run(HandlerTable(), scenario)


def test_replies_echo_opaque_and_set_the_response_bit() -> None:
    seen: list[RemotingCommand] = []

    async def scenario(server: RemotingServer) -> None:
        c = await Client.connect(server.address)
        await c.send(RemotingCommand.request(105, {"topic": "T"}, opaque=5))
        reply = await c.receive()
        assert (reply.code, reply.opaque, reply.flag, reply.body) == (0, 5, 1, b"T")
        c.close()

    run(route_table(seen), scenario)
    assert [r.ext_fields for r in seen] == [{"topic": "T"}]


def test_oneway_requests_are_handled_but_never_answered() -> None:
    seen: list[RemotingCommand] = []

    async def scenario(server: RemotingServer) -> None:
        c = await Client.connect(server.address)
        await c.send(
            RemotingCommand.request(105, {"topic": "one"}, opaque=1, oneway=True),
            RemotingCommand.request(999, opaque=2, oneway=True),
            RemotingCommand.request(105, {"topic": "two"}, opaque=3),
        )
        reply = await c.receive()
        assert (reply.opaque, reply.body) == (3, b"two")
        await c.send(RemotingCommand.request(999, opaque=4))
        assert (await c.receive()).opaque == 4  # nothing was queued for opaques 1 and 2
        c.close()

    run(route_table(seen), scenario)
    assert [r.ext_fields["topic"] for r in seen] == ["one", "two"]


def test_handler_errors_answer_system_error_and_keep_the_connection() -> None:
    async def scenario(server: RemotingServer) -> None:
        c = await Client.connect(server.address)
        await c.send(RemotingCommand.request(105, opaque=1))  # no topic
        reply = await c.receive()
        assert (reply.code, reply.remark) == (1, "the custom field <topic> is null")
        await c.send(RemotingCommand.request(105, {"topic": "boom"}, opaque=2))
        reply = await c.receive()
        assert (reply.code, reply.remark, reply.opaque) == (1, "RuntimeError: kaputt", 2)
        await c.send(RemotingCommand.request(105, {"topic": "ok"}, opaque=3))
        assert (await c.receive()).body == b"ok"
        c.close()

    run(route_table([]), scenario)


def test_requests_finish_in_any_order_matched_by_opaque() -> None:
    async def scenario(server: RemotingServer) -> None:
        c = await Client.connect(server.address)
        await c.send(
            RemotingCommand.request(105, {"topic": "slow"}, opaque=1),
            RemotingCommand.request(105, {"topic": "fast"}, opaque=2),
        )
        first, second = await c.receive(), await c.receive()
        assert [(first.opaque, first.body), (second.opaque, second.body)] == [
            (2, b"fast"),
            (1, b"slow"),
        ]
        c.close()

    run(route_table([]), scenario)


def test_garbage_closes_only_that_connection() -> None:
    closed: list[Peer] = []
    table = HandlerTable(route_table([]).handlers, on_close=closed.append)

    async def scenario(server: RemotingServer) -> None:
        good = await Client.connect(server.address)
        await good.send(RemotingCommand.request(105, {"topic": "before"}, opaque=1))
        assert (await good.receive()).body == b"before"

        bad = await Client.connect(server.address)
        # A request, then a frame whose JSON header is broken, in one write: the request
        # decoded before the damage is still answered, then the connection is closed.
        broken = b"{not json"
        await bad.send(
            RemotingCommand.request(105, {"topic": "first"}, opaque=9),
            raw=struct.pack(">ii", 4 + len(broken), len(broken)) + broken,
        )
        assert (await bad.receive()).body == b"first"
        assert await bad.closed_by_server()

        oversize = await Client.connect(server.address)
        await oversize.send(raw=struct.pack(">i", 16 * 1024 * 1024))
        assert await oversize.closed_by_server()

        await good.send(RemotingCommand.request(105, {"topic": "after"}, opaque=2))
        assert (await good.receive()).body == b"after"
        assert server.protocol_errors == 2
        good.close()
        for c in (bad, oversize):
            c.close()

    server = run(table, scenario)
    assert server.connection_count == 0
    assert sorted(p.connection_id for p in closed) == [1, 2, 3]
    assert all(p.address.startswith("127.0.0.1:") for p in closed)


def test_responses_from_the_peer_are_dropped() -> None:
    seen: list[RemotingCommand] = []

    async def scenario(server: RemotingServer) -> None:
        c = await Client.connect(server.address)
        stray = RemotingCommand.request(105, {"topic": "x"}, opaque=1).response(0)
        await c.send(stray, RemotingCommand.request(105, {"topic": "real"}, opaque=2))
        reply = await c.receive()
        assert reply.opaque == 2
        c.close()

    run(route_table(seen), scenario)
    assert [r.ext_fields["topic"] for r in seen] == ["real"]
