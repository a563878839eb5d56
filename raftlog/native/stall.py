"""What a leader says when it stops committing: its followers' progress and their TCP state.

The partition campaign (docs/reliability.md) once saw a leader go 5 s without committing
under 20 % packet loss while every member kept running and none logged a line, so the run
could not tell lost packets (TCP backing off), a stalled disk and a stuck peer apart. A
leader holding entries past its commit index that has not moved it for
:data:`COMMIT_STALL_S` now says so once, naming for each follower its Raft progress (match,
next, when it last answered, when it was last sent to) and the kernel's view of the
connection to it (``TCP_INFO``: the retransmission timeout and back-off, the segments not
yet acknowledged, the last acknowledgement's age, the retransmissions so far); and again
when commits resume, with how long they stopped.

Sans-I/O apart from :func:`tcp_state`, which reads one socket option: :class:`CommitWatch`
is fed the core's numbers on each tick and answers what to log.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

#: a leader holding uncommitted entries says so once its commit index stood this long
#: (an election takes 1-2 s; etcd warns of a slow heartbeat past twice its interval)
COMMIT_STALL_S = 2.0

# struct tcp_info (linux/tcp.h): the fields read here and their byte offsets
_TCP_INFO_BYTES = 104
_RETRANSMITS = 2  # u8 tcpi_retransmits
_BACKOFF = 4  # u8 tcpi_backoff
_U32 = struct.Struct("=I")
_U32_AT = {"rto_us": 8, "unacked": 24, "last_ack_recv_ms": 56, "total_retrans": 100}


@dataclass(frozen=True, slots=True)
class TcpState:
    """The kernel's view of one peer connection (``getsockopt(TCP_INFO)``)."""

    rto_ms: float  # the retransmission timeout now
    timeouts: int  # retransmission timeouts since the last acknowledgement
    backoff: int  # how many times it doubled since the last acknowledgement
    unacked: int  # segments sent and not acknowledged
    last_ack_recv_ms: int  # since the last acknowledgement came in
    total_retrans: int  # segments retransmitted over the connection's life

    def describe(self) -> str:
        return (
            f"TCP rto {self.rto_ms:g} ms, {self.timeouts} timeouts, backoff {self.backoff}, "
            f"{self.unacked} unacknowledged, "
            f"last ack {self.last_ack_recv_ms} ms ago, {self.total_retrans} retransmitted"
        )


def tcp_state(sock: socket.socket | None) -> TcpState | None:
    """``sock``'s TCP_INFO (Linux), or None (no socket, not Linux, closed)."""
    option = getattr(socket, "TCP_INFO", None)
    if sock is None or option is None:
        return None
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, option, _TCP_INFO_BYTES)
    except OSError:
        return None
    if len(raw) < _TCP_INFO_BYTES:
        return None
    u32 = {name: _U32.unpack_from(raw, at)[0] for name, at in _U32_AT.items()}
    return TcpState(
        rto_ms=u32["rto_us"] / 1000,
        timeouts=raw[_RETRANSMITS],
        backoff=raw[_BACKOFF],
        unacked=u32["unacked"],
        last_ack_recv_ms=u32["last_ack_recv_ms"],
        total_retrans=u32["total_retrans"],
    )


class PeerProgress(Protocol):
    """What :func:`describe_peers` reads of a leader's follower progress."""

    @property
    def next(self) -> int: ...
    @property
    def match(self) -> int: ...
    @property
    def last_ack(self) -> float: ...
    @property
    def last_sent(self) -> float: ...


def describe_peers(
    progress: Mapping[str, PeerProgress],
    now: float,
    tcp: Callable[[str], TcpState | None],
    name: Callable[[str], str],
) -> str:
    """One clause per follower: its progress and its connection's TCP state."""
    parts = []
    for address in sorted(progress):
        pr = progress[address]
        state = tcp(address)
        parts.append(
            f"{name(address)}: match {pr.match}, next {pr.next}, answered "
            f"{now - pr.last_ack:.1f} s ago, sent to {now - pr.last_sent:.1f} s ago, "
            + ("not connected" if state is None else state.describe())
        )
    return "; ".join(parts)


class CommitWatch:
    """Fed a leader's commit and last index on each tick; says when a stall is worth a
    line (once per stall) and when it ended."""

    def __init__(self, stall_s: float = COMMIT_STALL_S) -> None:
        self._stall_s = stall_s
        self._commit = -1
        self._since = 0.0  # when the commit index last moved, or nothing waited
        self._told = False

    def check(self, now: float, commit: int, last_index: int) -> tuple[str, float] | None:
        """``("stalled", s)`` once commits stood ``s`` >= the threshold with entries
        waiting; ``("resumed", s)`` when the commit index moves after that; else None."""
        if commit != self._commit or last_index <= commit:
            told, stood = self._told, now - self._since
            self._commit, self._since, self._told = commit, now, False
            return ("resumed", stood) if told else None
        if not self._told and now - self._since >= self._stall_s:
            self._told = True
            return ("stalled", now - self._since)
        return None

    def reset(self) -> None:
        """This node is no longer the leader: forget the stall (nothing to resume)."""
        self._commit, self._told = -1, False
