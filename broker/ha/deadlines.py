"""Socket options of an HA connection: the kernel gives up on data unacknowledged for the
idle timeout (TCP_USER_TIMEOUT, Linux's), so a black-holed stream (a partition that drops
packets) breaks in the same time the read deadline allows instead of when TCP's backed-off
retransmissions give up (13 s and more), and the slave dials again. A lost segment is sent
again soon, as on the Raft peer connections (raftlog.native.transport): linear
retransmission timeouts while the stream is thin, the timeout between 50 ms and 1 s where
the kernel allows it (Linux 6.15 and later), so packet loss does not hold the stream, and
with it every quorum write, behind a timeout that doubled to seconds."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys

#: Linux's TCP_THIN_LINEAR_TIMEOUTS, TCP_RTO_MAX_MS and TCP_RTO_MIN_US (``socket`` lacks them)
_LOSS_OPTIONS = ((16, 1), (44, 1000), (45, 50_000))


def set_ha_socket_options(writer: asyncio.StreamWriter, idle_timeout_s: float) -> None:
    sock = writer.get_extra_info("socket")
    if sock is None or not sys.platform.startswith("linux"):
        return
    user_timeout = (socket.TCP_USER_TIMEOUT, max(1, int(idle_timeout_s * 1000)))
    for option, value in (user_timeout, *_LOSS_OPTIONS):
        with contextlib.suppress(OSError):  # an older kernel without the option
            sock.setsockopt(socket.IPPROTO_TCP, option, value)
