"""rmq's asyncio frame server over loopback sockets (in-process, fast).

What RocketMQ's NettyRemotingAbstract does, checked from the client side: unknown codes,
oneway requests, echoed opaques, handler errors, and a broken connection that leaves
the others serving. Then the bounds of issue 14: idle and frame timeouts, the connection
cap, and headers Python cannot decode (deep JSON, 4,300-digit numbers).
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any

from rmq.codec import (
    MAX_REMARK_CHARS,
    BadRequest,
    FrameDecoder,
    RemotingCommand,
    bounded_remark,
    encode,
)
from rmq.codes import RequestCode, ResponseCode
from rmq.server import HandlerTable, Peer, RemotingServer

TIMEOUT_S = 10


def server_fault(code: int) -> str:
    """The fault remark the nameserver wires in (``nameserver.remoting.status``)."""
    return f"metaledger: internal error serving request code {code}; see the server log"


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
    table: HandlerTable,
    scenario: Callable[[RemotingServer], Awaitable[None]],
    **options: Any,
) -> RemotingServer:
    async def main() -> RemotingServer:
        server = RemotingServer(table, internal_error_remark=server_fault, **options)
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
        # a bug answers a generic remark: Python's exception text stays in the server log
        assert (reply.code, reply.remark, reply.opaque) == (
            1,
            "metaledger: internal error serving request code 105; see the server log",
            2,
        )
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


# --- bounds (issue 14) ---------------------------------------------------------------


def frame_with_header(header: bytes) -> bytes:
    return struct.pack(">ii", 4 + len(header), len(header)) + header


def test_idle_connections_are_closed_after_the_idle_timeout() -> None:
    async def scenario(server: RemotingServer) -> None:
        start = time.monotonic()
        idle = await Client.connect(server.address)
        busy = await Client.connect(server.address)
        # a connection that keeps asking outlives several idle timeouts
        for i in range(8):
            await busy.send(RemotingCommand.request(105, {"topic": f"t{i}"}, opaque=i))
            assert (await busy.receive()).body == f"t{i}".encode()
            await asyncio.sleep(0.1)
        assert await idle.closed_by_server()
        assert 0.3 <= time.monotonic() - start
        assert server.idle_closed == 1 and server.connection_count == 1
        busy.close()
        idle.close()

    run(route_table([]), scenario, idle_timeout_s=0.3)


def test_a_slow_answer_is_not_idleness() -> None:
    async def scenario(server: RemotingServer) -> None:
        c = await Client.connect(server.address)
        await c.send(RemotingCommand.request(105, {"topic": "slow"}, opaque=1))
        reply = await c.receive()  # the handler takes 0.3 s, the idle timeout is 0.1 s
        assert (reply.opaque, reply.body) == (1, b"slow")
        assert await c.closed_by_server()
        c.close()

    server = run(route_table([]), scenario, idle_timeout_s=0.1)
    assert server.idle_closed == 1


def test_a_partial_frame_is_closed_after_the_frame_timeout() -> None:
    async def scenario(server: RemotingServer) -> None:
        stalled = await Client.connect(server.address)
        # announces a frame of 16 MiB (the limit) and sends a few bytes of it
        await stalled.send(raw=struct.pack(">i", 16 * 1024 * 1024 - 4) + b"\x00\x00\x00\x02{}")
        good = await Client.connect(server.address)
        await good.send(RemotingCommand.request(105, {"topic": "ok"}, opaque=1))
        assert (await good.receive()).body == b"ok"
        started = time.monotonic()
        assert await stalled.closed_by_server()
        assert time.monotonic() - started < 5
        assert (server.frame_timeouts, server.idle_closed) == (1, 0)
        # a frame that trickles in within the timeout is fine
        frame = encode(RemotingCommand.request(105, {"topic": "trickle"}, opaque=2))
        for i in range(0, len(frame), 16):
            await good.send(raw=frame[i : i + 16])
            await asyncio.sleep(0.01)
        assert (await good.receive()).body == b"trickle"
        good.close()
        stalled.close()

    run(route_table([]), scenario, frame_timeout_s=0.5, idle_timeout_s=30)


def test_connections_over_the_cap_are_closed_at_once() -> None:
    async def scenario(server: RemotingServer) -> None:
        first = await Client.connect(server.address)
        second = await Client.connect(server.address)
        for c in (first, second):
            await c.send(RemotingCommand.request(105, {"topic": "in"}, opaque=1))
            assert (await c.receive()).body == b"in"
        third = await Client.connect(server.address)
        assert await third.closed_by_server()
        assert server.refused == 1 and server.connection_count == 2
        first.close()
        deadline = time.monotonic() + TIMEOUT_S
        while server.connection_count > 1:
            assert time.monotonic() < deadline, "the closed connection was never dropped"
            await asyncio.sleep(0.01)
        fourth = await Client.connect(server.address)
        await fourth.send(RemotingCommand.request(105, {"topic": "back"}, opaque=2))
        assert (await fourth.receive()).body == b"back"
        for c in (second, third, fourth):
            c.close()

    run(route_table([]), scenario, max_connections=2)


def test_headers_python_cannot_decode_close_that_connection_only() -> None:
    deep = b'{"code":105,"extFields":{"topic":' + b"[" * 100_000 + b"]" * 100_000 + b"}}"
    long_number = b'{"code":105,"opaque":' + b"9" * 5000 + b"}"
    long_ext = b'{"code":105,"extFields":{"topic":' + b"7" * 5000 + b"}}"
    deep_remark = b'{"code":105,"remark":' + b"[" * 3000 + b"]" * 3000 + b"}"

    async def scenario(server: RemotingServer) -> None:
        good = await Client.connect(server.address)
        for i, header in enumerate((deep, long_number, long_ext, deep_remark)):
            bad = await Client.connect(server.address)
            await bad.send(raw=frame_with_header(header))
            assert await bad.closed_by_server()
            bad.close()
            await good.send(RemotingCommand.request(105, {"topic": f"still{i}"}, opaque=i))
            assert (await good.receive()).body == f"still{i}".encode()
        assert server.protocol_errors == 4
        good.close()

    run(route_table([]), scenario)


def test_bad_ext_field_numbers_name_the_field() -> None:
    table = HandlerTable()

    @table.register(105)
    async def numbers(request: RemotingCommand, peer: Peer) -> RemotingCommand:
        return request.response(0, None, {"n": request.ext_int("n")})

    async def scenario(server: RemotingServer) -> None:
        c = await Client.connect(server.address)
        for opaque, value in enumerate(("9" * 5000, "1_000", "x", "١٢")):
            await c.send(RemotingCommand.request(105, {"n": value}, opaque=opaque))
            reply = await c.receive()
            assert reply.code == 1 and reply.remark is not None
            assert reply.remark.startswith("the custom field <n> must be an integer, got ")
            assert len(reply.remark) < 200
        await c.send(RemotingCommand.request(105, {"n": " 42 "}, opaque=9))
        assert (await c.receive()).ext_fields == {"n": "42"}
        c.close()

    run(table, scenario)


def test_on_request_sees_every_request_with_its_peer_before_its_handler() -> None:
    seen: list[RemotingCommand] = []
    observed: list[tuple[int, str, int, int]] = []

    def observe(request: RemotingCommand, peer: Peer) -> None:
        assert len(seen) == len(observed)  # before the handler
        observed.append((request.code, request.language, request.version, peer.connection_id))

    async def scenario(server: RemotingServer) -> None:
        a, b = await Client.connect(server.address), await Client.connect(server.address)
        await a.send(RemotingCommand.request(105, {"topic": "T"}, language="GO", version=401))
        await a.receive()
        await b.send(RemotingCommand.request(999, language="CPP", version=7))  # unknown code
        await b.receive()
        a.close()
        b.close()

    run(route_table(seen), scenario, on_request=observe)
    assert [o[:3] for o in observed] == [(105, "GO", 401), (999, "CPP", 7)]
    assert observed[0][3] != observed[1][3]


def test_remarks_that_quote_what_a_client_sent_are_bounded() -> None:
    """A remark of a handler's answer, of its BadRequest or of the error mapper keeps its
    two ends and says how much was left out; short remarks stay as they are."""

    class Refused(Exception):
        pass

    table = HandlerTable()

    @table.register(RequestCode.GET_ROUTEINFO_BY_TOPIC)
    async def route(request: RemotingCommand, peer: Peer) -> RemotingCommand:
        topic = request.ext_str("topic")
        how = request.ext_str("how")
        if how == "bad":
            raise BadRequest(f"topic[{topic}] is bad, really")
        if how == "refused":
            raise Refused(f"topic[{topic}] is refused, really")
        return request.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, really")

    def mapper(exc: Exception) -> tuple[int, str] | None:
        return (ResponseCode.NO_PERMISSION, str(exc)) if isinstance(exc, Refused) else None

    long = "T" * 5000

    async def scenario(server: RemotingServer) -> None:
        c = await Client.connect(server.address)
        for opaque, how in enumerate(["answer", "bad", "refused"]):
            await c.send(RemotingCommand.request(105, {"topic": long, "how": how}, opaque=opaque))
            reply = await c.receive()
            assert reply.remark is not None and len(reply.remark) <= MAX_REMARK_CHARS, how
            assert reply.remark.startswith("topic[TTT") and reply.remark.endswith(", really")
            assert "characters left out" in reply.remark
            await c.send(RemotingCommand.request(105, {"topic": "short", "how": how}, opaque=9))
            assert (await c.receive()).remark.startswith("topic[short] ")  # type: ignore[union-attr]
        c.close()

    run(table, scenario, answer_error=mapper)


def test_bounded_remark() -> None:
    assert bounded_remark("x" * MAX_REMARK_CHARS) == "x" * MAX_REMARK_CHARS
    cut = bounded_remark("a" * 600 + "b" * 2000 + "c" * 300)
    assert cut == "a" * 512 + "… (2132 characters left out) …" + "c" * 256
