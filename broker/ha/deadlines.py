"""Socket options of an HA connection: the kernel gives up on data unacknowledged for the
idle timeout (TCP_USER_TIMEOUT, Linux's), so a black-holed stream (a partition that drops
packets) breaks in the same time the read deadline allows instead of when TCP's backed-off
retransmissions give up (13 s and more), and the slave dials again."""

from __future__ import annotations

import asyncio
import contextlib
import socket


def set_ha_socket_options(writer: asyncio.StreamWriter, idle_timeout_s: float) -> None:
    sock = writer.get_extra_info("socket")
    option = getattr(socket, "TCP_USER_TIMEOUT", None)
    if sock is None or option is None:
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, option, max(1, int(idle_timeout_s * 1000)))
