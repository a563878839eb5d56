"""raftlog.native, sans I/O: a member gives up its connection to a silent peer.

A black-holed connection (a partition that drops packets) gives the dialler neither an
error nor an end-of-file; TCP's retransmissions back off past 10 s, so a member cut off
for 15 s used to serve again only ~11.5 s after the heal. Nothing heard from the peer for
``peer_dead_timeout_ms`` (its keepalives included) now closes the connection and dials
again (:class:`OutboundDeadline`, fed by :meth:`InboundConnections.last_heard`); the
forwards waiting for the leader's answer on a broken connection are answered at once.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from raftlog.errors import ConfigError, UnknownOutcomeError
from raftlog.native.config import NativeConfig
from raftlog.native.conns import FRAME, IDLE, InboundConnections, OutboundDeadline
from raftlog.native.forwarding import Forwarding
from raftlog.native.messages import KIND_NORMAL
from raftlog.native.peer_socket import (
    PEER_RTO_MAX_MS,
    TCP_RTO_MAX_MS,
    TCP_RTO_MIN_US,
    TCP_THIN_LINEAR_TIMEOUTS,
    set_peer_socket_options,
)

PEERS = {"n0": "127.0.0.1:7001", "n1": "127.0.0.1:7002"}


def test_a_peer_heard_within_the_deadline_keeps_the_connection() -> None:
    d = OutboundDeadline(100.0, 4.0, 0.5)
    now, heard = 100.0, None
    for _ in range(40):  # 20 s of beats, the peer heard every second
        now += 0.5
        if now % 1.0 == 0:
            heard = now
        assert not d.beat(now, heard)


def test_a_silent_peer_is_given_up_after_the_deadline() -> None:
    d = OutboundDeadline(100.0, 4.0, 0.5)
    beats = [100.0 + 0.5 * k for k in range(1, 12)]
    dead = [t for t in beats if d.beat(t, 99.0)]  # last heard before the connection opened
    assert dead and dead[0] == 104.5  # counted from the connection's opening, not before


def test_a_peer_never_heard_counts_from_the_opening() -> None:
    d = OutboundDeadline(100.0, 4.0, 0.5)
    assert not d.beat(104.0, None)
    assert d.beat(104.5, None)


def test_a_late_beat_does_not_count_this_process_s_stall_against_the_peer() -> None:
    """SIGSTOP of this member: the peer's frames wait unread; the first beat after the
    stall skips the check, the next one sees what the readers took in meanwhile."""
    d = OutboundDeadline(100.0, 4.0, 0.5)
    assert not d.beat(100.5, 100.4)
    assert not d.beat(130.0, 100.4)  # 29 s late: skipped
    assert not d.beat(130.5, 130.2)  # the readers ran: heard just now
    assert d.beat(135.0, 130.2) is False  # 4 s late again: skipped
    assert d.beat(135.5, 130.2)  # on time, 5.3 s of silence: dead
    d2 = OutboundDeadline(100.0, 4.0, 0.5)
    d2.beat(130.0, 100.4)
    assert d2.beat(130.5, 100.4)  # still nothing heard after the stall: dead


def test_last_heard_reads_the_newest_frame_of_any_connection_from_the_member() -> None:
    conns = InboundConnections(10, 5.0, 30.0, 20.0, clock=lambda: 1000.0)
    old, new, other, hand = (conns.open(lambda: None) for _ in range(4))
    assert old and new and other and hand
    assert conns.last_heard("a") is None
    old.address, old.waiting_for, old.deadline = "a", IDLE, 990.0 + 30.0  # frame at 990
    new.address, new.waiting_for, new.deadline = "a", FRAME, 995.0 + 20.0  # started at 995
    other.address, other.waiting_for, other.deadline = "b", IDLE, 999.0 + 30.0
    hand.address = "a"  # still in the handshake: not heard
    assert conns.last_heard("a") == 995.0
    assert conns.last_heard("b") == 999.0
    conns.close(new)
    assert conns.last_heard("a") == 990.0


def test_the_dead_timeout_is_validated_and_the_keepalive_beats_within_it() -> None:
    cfg = NativeConfig("n0", PEERS, "/j", password="pw")
    assert cfg.peer_keepalive_s * 4 <= cfg.peer_dead_timeout_ms / 1000
    assert cfg.peer_dead_timeout_ms <= 2 * cfg.election_timeout_max_ms
    with pytest.raises(ConfigError, match=r"^peer_dead_timeout_ms: must be more than twice"):
        NativeConfig("n0", PEERS, "/j", password="pw", peer_dead_timeout_ms=150).validate()


def test_forwards_to_the_leader_are_answered_when_its_connection_breaks() -> None:
    core: Any = SimpleNamespace(term=3, leader=PEERS["n1"], voters=tuple(PEERS.values()))
    config: Any = SimpleNamespace(wait_leader_ms=5000)
    f = Forwarding(config, core, None, lambda to, m: None, lambda to, m, r: None, lambda: None, str)
    answers: list[tuple[int | None, Exception | None]] = []
    f._forward(b"x", KIND_NORMAL, lambda i, e: answers.append((i, e)))
    f.connection_lost(PEERS["n0"])  # not the leader's connection: nothing answered
    assert answers == []
    f.connection_lost(PEERS["n1"])
    assert len(answers) == 1 and isinstance(answers[0][1], UnknownOutcomeError)
    f.connection_lost(PEERS["n1"])  # answered once
    assert len(answers) == 1


@pytest.mark.skipif(not hasattr(socket, "TCP_USER_TIMEOUT"), reason="TCP_USER_TIMEOUT is Linux's")
def test_peer_sockets_bound_unacknowledged_data_by_the_dead_timeout() -> None:
    async def main() -> tuple[int, int]:
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        set_peer_socket_options(writer, 4000)
        sock = writer.get_extra_info("socket")
        got = (
            int(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)),
            int(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)),
        )
        writer.close()
        server.close()
        return got

    assert asyncio.run(main()) == (4000, 1)


def _kernel_has(option: int, value: int) -> bool:
    with socket.socket() as s:
        try:
            s.setsockopt(socket.IPPROTO_TCP, option, value)
        except OSError:
            return False
    return True


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not _kernel_has(TCP_RTO_MAX_MS, PEER_RTO_MAX_MS),
    reason="TCP_RTO_MAX_MS and TCP_RTO_MIN_US are Linux's, 6.15 and later",
)
def test_peer_sockets_send_a_lost_segment_again_within_a_second() -> None:
    """Under 20 % packet loss a peer connection's retransmission timeout doubled to 1-4 s,
    and everything written after a lost segment waited behind it: the leader went 4.89 s
    without a write acknowledged. Peer sockets now use linear timeouts while thin, a
    timeout capped at 1 s, and a 50 ms floor instead of 200 ms."""

    async def main() -> tuple[int, int, int]:
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        set_peer_socket_options(writer, 4000)
        sock = writer.get_extra_info("socket")
        got = tuple(
            int(sock.getsockopt(socket.IPPROTO_TCP, o))
            for o in (TCP_THIN_LINEAR_TIMEOUTS, TCP_RTO_MAX_MS, TCP_RTO_MIN_US)
        )
        writer.close()
        server.close()
        return got[0], got[1], got[2]

    thin, rto_max_ms, rto_min_us = asyncio.run(main())
    assert thin == 1
    assert rto_max_ms == 1000
    assert 40_000 <= rto_min_us <= 60_000  # the kernel rounds it to its clock's ticks
