"""The broker's remoting server bounds every connection (rmq/server.py wired by broker/remoting/front.py): at most
``max_connections`` open, an idle connection closed, a frame that does not complete in time
closed; a handler's bug answers SYSTEM_ERROR without its text and the connection stays."""

from __future__ import annotations

import asyncio

from broker.remoting.front import remoting_server
from rmq.codec import RemotingCommand, encode
from rmq.server import Peer


async def boom(request: RemotingCommand, peer: Peer) -> RemotingCommand:
    raise ZeroDivisionError("secret internals")


async def echo(request: RemotingCommand, peer: Peer) -> RemotingCommand:
    return request.response(0, "ok")


async def closed(reader: asyncio.StreamReader) -> bool:
    return await asyncio.wait_for(reader.read(1 << 16), 5) == b""


def test_bounds_and_handler_bugs() -> None:
    async def main() -> None:
        server = remoting_server(
            {1: boom, 2: echo}, max_connections=1, idle_timeout_s=0.3, frame_timeout_s=0.3
        )
        host, port = await server.start("127.0.0.1", 0)
        try:
            r1, w1 = await asyncio.open_connection(host, port)
            w1.write(encode(RemotingCommand.request(1, opaque=7)))
            frames = await asyncio.wait_for(r1.read(1 << 16), 5)
            assert b"internal error" in frames and b"secret" not in frames
            assert server.handler_errors == 1
            r2, w2 = await asyncio.open_connection(host, port)  # over max_connections
            assert await closed(r2)
            assert server.refused == 1
            assert await closed(r1)  # idle for 0.3 s
            w1.close()
            w2.close()
            r3, w3 = await asyncio.open_connection(host, port)
            w3.write(encode(RemotingCommand.request(2, opaque=1))[:10])  # a frame never finished
            assert await closed(r3)
            w3.close()
        finally:
            await server.close()

    asyncio.run(main())
