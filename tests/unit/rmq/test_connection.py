"""rmq's pipelined client connection against a loopback rmq server (in-process, fast):
answers matched by opaque whatever their order, oneway requests, timeouts that leave the
connection usable, a lost or broken connection failing every pending request (and later
ones at once), requests from the peer kept, and the one-shot blocking call."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable

import pytest

from rmq.codec import RemotingCommand
from rmq.connection import (
    AnswerTimeout,
    ConnectFailed,
    ConnectionLost,
    RemotingConnection,
    blocking_call,
)
from rmq.server import HandlerTable, Peer, RemotingServer

seen: list[RemotingCommand] = []


def table() -> HandlerTable:
    t = HandlerTable()

    @t.register(1)
    async def echo(request: RemotingCommand, peer: Peer) -> RemotingCommand:
        seen.append(request)
        delay = float(request.ext_fields.get("sleep", "0"))
        if delay:
            await asyncio.sleep(delay)
        return request.response(0, request.ext_fields.get("say"), body=request.body)

    @t.register(2)
    async def notify(request: RemotingCommand, peer: Peer) -> RemotingCommand:
        peer.send_oneway(RemotingCommand.request(40, {"consumerGroup": "CG"}, oneway=True))
        return request.response(0)

    @t.register(3)
    async def garbage(request: RemotingCommand, peer: Peer) -> None:
        assert peer._writer is not None
        peer._writer.write(struct.pack(">ii", 8, 4) + b"{no}")
        return None

    return t


def run(scenario: Callable[[RemotingServer], Awaitable[None]]) -> None:
    async def main() -> None:
        server = RemotingServer(table())
        await server.start("127.0.0.1", 0)
        try:
            await asyncio.wait_for(scenario(server), 30)
        finally:
            await server.close()

    seen.clear()
    asyncio.run(main())


def address(server: RemotingServer) -> str:
    host, port = server.address
    return f"{host}:{port}"


def test_answers_are_matched_by_opaque_in_any_order() -> None:
    async def scenario(server: RemotingServer) -> None:
        conn = await RemotingConnection.open(address(server))
        slow = asyncio.ensure_future(conn.request(1, {"say": "slow", "sleep": "0.2"}))
        fast = await conn.request(1, {"say": "fast"}, b"body")
        assert (fast.remark, fast.body, slow.done()) == ("fast", b"body", False)
        assert (await slow).remark == "slow"
        # each request went out under its own opaque, whatever the caller set
        assert len({r.opaque for r in seen}) == 2
        got: list[tuple[str | None, BaseException | None]] = []
        for i in range(3):
            conn.send(
                RemotingCommand.request(1, {"say": str(i)}, opaque=7),
                lambda a, e: got.append((a.remark if a else None, e)),
                5.0,
            )
        assert got == []  # never from inside send
        while len(got) < 3:
            await asyncio.sleep(0.01)
        assert got == [("0", None), ("1", None), ("2", None)]
        await conn.close()
        assert conn.closed and not conn.usable

    run(scenario)


def test_oneway_is_not_answered_and_requests_from_the_peer_are_kept() -> None:
    async def scenario(server: RemotingServer) -> None:
        conn = await RemotingConnection.connect(*server.address)
        await conn.oneway(1, {"say": "one"})
        assert (await conn.request(2)).code == 0
        assert [r.is_oneway for r in seen] == [True]
        assert conn.notifications is not None
        while not conn.notifications:
            await asyncio.sleep(0.01)
        assert conn.notifications[0].ext_fields == {"consumerGroup": "CG"}
        await conn.close()
        plain = await RemotingConnection.open(address(server))
        assert (await plain.request(2)).code == 0 and plain.notifications is None
        await plain.close()

    run(scenario)


def test_a_timeout_fails_that_request_only() -> None:
    async def scenario(server: RemotingServer) -> None:
        conn = await RemotingConnection.open(address(server))
        with pytest.raises(AnswerTimeout, match="no answer from"):
            await conn.request(1, {"sleep": "0.5"}, timeout_s=0.05)
        assert isinstance(AnswerTimeout("x"), TimeoutError)
        assert (await conn.request(1, {"say": "after"})).remark == "after"
        await conn.close()

    run(scenario)


def test_a_broken_stream_fails_pending_and_later_requests() -> None:
    async def scenario(server: RemotingServer) -> None:
        conn = await RemotingConnection.open(address(server))
        pending = asyncio.ensure_future(conn.request(1, {"sleep": "5"}))
        await asyncio.sleep(0.05)
        with pytest.raises(ConnectionLost):
            await conn.request(3)  # the peer answers garbage
        with pytest.raises(ConnectionLost, match="broken stream"):
            await pending
        with pytest.raises(ConnectionLost):  # and later calls at once
            await conn.request(1)
        with pytest.raises(ConnectionLost):
            conn.send_oneway(RemotingCommand.request(1))
        assert isinstance(conn.lost, ConnectionError)
        await conn.close()

    run(scenario)


def test_a_connection_closed_by_the_peer_fails_pending_requests() -> None:
    async def main() -> None:
        async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(1024)  # one read, no answer, then close
            writer.close()

        server = await asyncio.start_server(swallow, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        conn = await RemotingConnection.open(f"127.0.0.1:{port}")
        try:
            with pytest.raises(ConnectionLost, match="lost"):
                await conn.request(1, timeout_s=10)
            with pytest.raises(ConnectionLost):  # and later calls at once
                await conn.request(1, timeout_s=10)
        finally:
            conn.close()
            server.close()
            await server.wait_closed()

    asyncio.run(main())


def test_abort_resets_and_what_was_not_delivered_never_arrives() -> None:
    """A peer that has not read yet (a partition, say) gets a reset, not the rest of the
    stream: ``close`` would still deliver every byte written (asyncio flushes its buffer,
    the kernel its send queue), ``abort`` drops both."""

    async def main() -> None:
        got: list[int] = []
        ended: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        may_read = asyncio.Event()

        async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await may_read.wait()
            try:
                while chunk := await reader.read(1 << 16):
                    got.append(len(chunk))
                ended.set_result(None)  # a clean end of the stream
            except ConnectionError as exc:
                ended.set_result(exc)
            writer.close()

        server = await asyncio.start_server(slow, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        conn = await RemotingConnection.open(f"127.0.0.1:{port}")
        body = bytes(12 << 20)  # four: more than the socket buffers of both ends hold
        answers = [
            asyncio.ensure_future(conn.call(RemotingCommand.request(1, {}, body), 5))
            for _ in range(4)
        ]
        await asyncio.sleep(0.2)  # written as far as the peer's window lets it
        await conn.abort()
        for answer in answers:
            with pytest.raises(ConnectionLost):
                await answer
        may_read.set()
        error = await asyncio.wait_for(ended, 10)
        assert isinstance(error, ConnectionResetError), error
        assert sum(got) < 4 * len(body)
        server.close()
        await server.wait_closed()

    asyncio.run(main())


def test_connect_failures() -> None:
    async def main() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        with pytest.raises(ConnectFailed, match=f"cannot connect to 127.0.0.1:{port}"):
            await RemotingConnection.open(f"127.0.0.1:{port}", 2.0)
        with pytest.raises(ConnectFailed, match="not host:port"):
            await RemotingConnection.open("nowhere", 2.0)

    asyncio.run(main())


def test_blocking_call() -> None:
    async def scenario(server: RemotingServer) -> None:
        answer = await asyncio.to_thread(
            blocking_call, address(server), RemotingCommand.request(1, {"say": "hi"}), 5.0
        )
        assert (answer.remark, answer.opaque, answer.is_response) == ("hi", 1, True)
        with pytest.raises(TimeoutError):
            await asyncio.to_thread(
                blocking_call, address(server), RemotingCommand.request(1, {"sleep": "1"}), 0.1
            )

    run(scenario)
