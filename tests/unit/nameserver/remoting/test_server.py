"""The nameserver's wiring of rmq's frame server (nameserver/remoting/server.py): its fault
remark, its rejection metric, rejections escaping a handler answered with their code, and the
bounds as serve flags. The loop itself is tested in tests/unit/rmq/test_server.py."""

from __future__ import annotations

import asyncio

import pytest

from nameserver.errors import TopicNotExist
from nameserver.metrics import REJECTIONS
from nameserver.remoting.server import remoting_server
from rmq.codec import RemotingCommand
from rmq.server import HandlerTable, Peer
from tests.unit.rmq.test_server import Client


def test_the_nameserver_wiring_names_its_faults_counts_and_maps_rejections() -> None:
    table = HandlerTable()

    @table.register(105)
    async def route(request: RemotingCommand, peer: Peer) -> RemotingCommand:
        topic = request.ext_str("topic")
        if topic == "boom":
            raise RuntimeError("kaputt")
        raise TopicNotExist(f"no route for topic {topic}")

    async def main() -> None:
        server = remoting_server(table, idle_timeout_s=5)
        await server.start("127.0.0.1", 0)
        before = REJECTIONS.total()
        try:
            c = await Client.connect(server.address)
            await c.send(RemotingCommand.request(105, {"topic": "boom"}, opaque=1))
            reply = await c.receive()
            assert (reply.code, reply.remark) == (
                1,
                "metaledger: internal error serving request code 105; see the server log",
            )
            await c.send(RemotingCommand.request(105, {"topic": "T"}, opaque=2))
            reply = await c.receive()
            assert (reply.code, reply.remark) == (17, "no route for topic T")
            await c.send(RemotingCommand.request(999, opaque=3), RemotingCommand.request(105))
            assert (await c.receive()).code == 3 and (await c.receive()).code == 1
            assert REJECTIONS.total() == before + 2  # the unknown code and the missing field
            assert server.handler_errors == 1
            c.close()
        finally:
            await server.close()

    asyncio.run(main())


def test_remoting_bounds_are_serve_flags_validated_by_name() -> None:
    from nameserver import cli
    from nameserver.cli import serve
    from nameserver.config import ConfigError, ServerConfig

    flags = ["--remoting-idle-timeout-ms", "2000", "--remoting-frame-timeout-ms", "500"]
    flags += ["--remoting-max-connections", "64"]
    args = cli.build_parser().parse_args(["serve", "--id", "n0", "--data-dir", "/d", *flags])
    config = serve.build_config(args)
    assert (
        config.remoting_idle_timeout_ms,
        config.remoting_frame_timeout_ms,
        config.remoting_max_connections,
    ) == (2000, 500, 64)
    defaults = ServerConfig(node_id="n0", data_dir="/d")
    assert (
        defaults.remoting_idle_timeout_ms,
        defaults.remoting_frame_timeout_ms,
        defaults.remoting_max_connections,
    ) == (120_000, 30_000, 512)
    for field, value, message in [
        ("remoting_idle_timeout_ms", 0, "must be > 0"),
        ("remoting_frame_timeout_ms", -1, "must be > 0"),
        ("remoting_max_connections", 0, "must be >= 1"),
    ]:
        bad = ServerConfig(node_id="n0", data_dir="/d", cluster_password="pw", **{field: value})
        with pytest.raises(ConfigError, match=f"^{field}: {message}"):
            bad.validate()
