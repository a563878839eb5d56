"""One peer connection's socket: the TCP options every Raft peer socket gets, and whether
the kernel says a connection is stuck.

Under packet loss one lost segment holds back everything written after it until it is
sent again, and TCP's own timer doubles up to minutes: the options keep retransmissions
within a second (:func:`set_peer_socket_options`), and with ``peer_paths`` > 1 the
transport moves off a connection :func:`stuck` names (``TCP_INFO``).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys

from raftlog.native.stall import tcp_state

#: Linux's TCP_THIN_LINEAR_TIMEOUTS (``socket`` lacks the name): while fewer than four
#: segments are in flight, the first six retransmissions keep the base timeout instead of
#: doubling it each time
TCP_THIN_LINEAR_TIMEOUTS = 16
#: Linux's TCP_RTO_MAX_MS (6.15 and later; older kernels refuse it): the cap on the
#: retransmission timeout, backed-off or not (at least 1000 ms; the default is 120 s)
TCP_RTO_MAX_MS = 44
#: Linux's TCP_RTO_MIN_US (6.15 and later): the floor of the retransmission timeout
#: (at most the default, 200 ms)
TCP_RTO_MIN_US = 45
#: the cap peer sockets ask for: the kernel's lowest, an election timeout's minimum
PEER_RTO_MAX_MS = 1000
#: with ``peer_paths`` > 1: a path is stuck once data written to it had to be sent again
#: and nothing was acknowledged for this long (TCP_INFO); messages then go to another path
#: (six times the retransmission timeout's floor: a healthy link acknowledges in
#: milliseconds, and one lost segment is sent again within the floor)
PATH_STUCK_MS = 300
#: the floor peer sockets ask for (the timeout is the smoothed round trip plus at least
#: this): a quarter of the default, still above a receiver's 40 ms delayed acknowledgement
PEER_RTO_MIN_US = 50_000


def stuck(writer: asyncio.StreamWriter) -> bool:
    """The kernel holds data written to ``writer`` that it had to send again (a
    retransmission timeout fired) and the peer has acknowledged nothing for
    :data:`PATH_STUCK_MS` (False where TCP_INFO cannot be read). A write after a quiet
    spell is not stuck: its acknowledgement is a round trip away, nothing timed out."""
    state = tcp_state(writer.get_extra_info("socket"))
    return (
        state is not None
        and state.unacked > 0
        and (state.timeouts > 0 or state.backoff > 0)
        and state.last_ack_recv_ms >= PATH_STUCK_MS
    )


def set_peer_socket_options(writer: asyncio.StreamWriter, dead_timeout_ms: int) -> None:
    """No Nagle delay; the kernel aborts the connection when data written to it stays
    unacknowledged for ``dead_timeout_ms`` (TCP_USER_TIMEOUT: Linux's; elsewhere only
    :class:`OutboundDeadline` notices); and a lost segment is sent again within a second,
    not after TCP's doubling back-off: linear timeouts while the stream is thin (a peer
    connection mostly is), and the timeout kept between 50 ms and 1 s where the kernel
    allows it (Linux 6.15 and later; otherwise 200 ms to 120 s). Under 20 % packet loss
    the retransmission timeout of a peer connection doubled to 1-4 s and every message
    written after a lost segment waited behind it: seconds without a commit, and an
    election now and then. Data flows from the dialler; the listener's side only
    acknowledges, and gets the same options."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        peer_socket_options(sock, dead_timeout_ms)


def peer_socket_options(sock: socket.socket, dead_timeout_ms: int) -> None:
    """:func:`set_peer_socket_options` on a socket (the fault harness measures plain TCP
    under packet loss with exactly these)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if not sys.platform.startswith("linux"):
        return
    for option, value in (
        (socket.TCP_USER_TIMEOUT, dead_timeout_ms),
        (TCP_THIN_LINEAR_TIMEOUTS, 1),
        (TCP_RTO_MAX_MS, PEER_RTO_MAX_MS),
        (TCP_RTO_MIN_US, PEER_RTO_MIN_US),
    ):
        with contextlib.suppress(OSError):  # an older kernel without the option
            sock.setsockopt(socket.IPPROTO_TCP, option, value)
