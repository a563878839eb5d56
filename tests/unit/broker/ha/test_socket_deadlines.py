"""broker.ha.deadlines: an HA connection's socket bounds unacknowledged data by the idle
timeout (TCP_USER_TIMEOUT), so a black-holed stream breaks as soon as the read deadline
would notice it; and the defaults notice a silent peer within etcd's 5 s."""

from __future__ import annotations

import asyncio
import socket

import pytest

from broker.config import BrokerConfig
from broker.ha.deadlines import set_ha_socket_options

pytestmark = pytest.mark.skipif(
    not hasattr(socket, "TCP_USER_TIMEOUT"), reason="TCP_USER_TIMEOUT is Linux's"
)


def test_the_user_timeout_is_the_idle_timeout() -> None:
    async def main() -> int:
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        set_ha_socket_options(writer, 5.0)
        sock = writer.get_extra_info("socket")
        got = int(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT))
        writer.close()
        server.close()
        return got

    assert asyncio.run(main()) == 5000


def test_the_defaults_notice_a_silent_peer_within_five_seconds() -> None:
    fields = BrokerConfig.__dataclass_fields__
    assert fields["ha_idle_timeout_ms"].default <= 5000
    assert fields["ha_heartbeat_interval_ms"].default * 4 <= fields["ha_idle_timeout_ms"].default


def test_a_lost_segment_is_sent_again_within_a_second() -> None:
    """As the Raft peer sockets: linear timeouts while thin, 1 s cap, 50 ms floor (where the
    kernel has the options, Linux 6.15 and later)."""

    async def main() -> list[int] | None:
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        set_ha_socket_options(writer, 5.0)
        sock = writer.get_extra_info("socket")
        try:
            got: list[int] | None = [
                int(sock.getsockopt(socket.IPPROTO_TCP, o)) for o in (16, 44, 45)
            ]
        except OSError:
            got = None  # an older kernel
        writer.close()
        server.close()
        return got

    got = asyncio.run(main())
    if got is None:
        pytest.skip("the kernel has no TCP_RTO_MAX_MS / TCP_RTO_MIN_US (Linux 6.15 and later)")
    thin, rto_max_ms, rto_min_us = got
    assert (thin, rto_max_ms) == (1, 1000)
    assert 40_000 <= rto_min_us <= 60_000
