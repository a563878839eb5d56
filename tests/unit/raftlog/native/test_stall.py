"""raftlog.native.stall: when a leader says its commits stopped, and what it says."""

from __future__ import annotations

import socket
from dataclasses import dataclass

import pytest

from raftlog.native.stall import CommitWatch, TcpState, describe_peers, tcp_state


def test_a_stall_is_told_once_after_the_threshold_and_its_end_once() -> None:
    w = CommitWatch(stall_s=2.0)
    assert w.check(0.0, commit=5, last_index=5) is None  # nothing waits: counts from here
    assert w.check(0.1, commit=5, last_index=6) is None
    assert w.check(1.9, commit=5, last_index=7) is None
    assert w.check(2.0, commit=5, last_index=7) == ("stalled", 2.0)
    assert w.check(4.0, commit=5, last_index=8) is None  # told already
    assert w.check(4.5, commit=8, last_index=8) == ("resumed", 4.5)
    assert w.check(8.9, commit=8, last_index=8) is None  # idle ticks: nothing waits
    assert w.check(9.0, commit=8, last_index=9) is None
    assert w.check(9.1, commit=9, last_index=10) is None  # it moved: from 9.1
    assert w.check(11.0, commit=9, last_index=10) is None
    assert w.check(11.1, commit=9, last_index=10) == ("stalled", pytest.approx(2.0))


def test_an_idle_leader_is_never_stalled_and_a_deposed_one_forgets() -> None:
    w = CommitWatch(stall_s=2.0)
    for t in range(10):
        assert w.check(float(t), commit=3, last_index=3) is None
    assert w.check(10.0, commit=3, last_index=4) is None  # waiting since 9.0 at most
    assert w.check(11.0, commit=3, last_index=4) == ("stalled", 2.0)
    w.reset()  # no longer the leader: a later term's first commit is not a "resumed"
    assert w.check(20.0, commit=9, last_index=9) is None


@dataclass
class _Progress:
    next: int
    match: int
    last_ack: float
    last_sent: float


def test_the_line_names_each_followers_progress_and_tcp_state() -> None:
    tcp = TcpState(
        rto_ms=800.0, timeouts=2, backoff=2, unacked=3, last_ack_recv_ms=1900, total_retrans=41
    )
    line = describe_peers(
        {"10.0.0.2:2380": _Progress(11, 10, 7.5, 9.9), "10.0.0.3:2380": _Progress(4, 3, 9.8, 9.9)},
        10.0,
        lambda address: tcp if address.startswith("10.0.0.2") else None,
        lambda address: {"10.0.0.2:2380": "n1", "10.0.0.3:2380": "n2"}[address],
    )
    assert line == (
        "n1: match 10, next 11, answered 2.5 s ago, sent to 0.1 s ago, TCP rto 800 ms, "
        "2 timeouts, backoff 2, 3 unacknowledged, last ack 1900 ms ago, 41 retransmitted; "
        "n2: match 3, next 4, answered 0.2 s ago, sent to 0.1 s ago, not connected"
    )


def test_tcp_state_reads_a_live_connection_and_none_of_a_closed_one() -> None:
    assert tcp_state(None) is None
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
        with client, peer:
            client.sendall(b"x" * 1000)
            assert peer.recv(1000)
            state = tcp_state(client)
            assert state is not None
            # the kernel's floor is 200 ms (or less where TCP_RTO_MIN_US lowered it)
            assert 1 <= state.rto_ms <= 3000 and state.total_retrans == 0
            assert state.timeouts == state.backoff == 0
        assert tcp_state(client) is None  # closed
